"""The course's MLA against transformers' DeepseekV3Attention and DeepseekV2Attention with the
same random weights (built from a config: no download). transformers is a test-only dependency;
the course never imports it. DeepSeek rotates interleaved pairs (V2 always, V3 with
``rope_interleave``), the course split halves: ``from_transformers`` reorders the rotary rows,
and without that reordering the outputs differ. transformers computes RoPE and RMSNorm in
float32 even for float64 inputs, hence the 1e-6 tolerance."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch

from course_lib.attention import KVCache
from course_lib.attention.latent import MultiHeadLatentAttention

os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="course_hf_home_")   # never the home dir
os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=12,
             qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5, attention_bias=False,
             num_hidden_layers=1, vocab_size=16, intermediate_size=8, moe_intermediate_size=8,
             n_routed_experts=2, num_experts_per_tok=1, n_group=1, topk_group=1)
L = 7


def _random(attn: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    attn = attn.double()
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return attn


def _causal() -> torch.Tensor:
    return torch.full((L, L), float("-inf"), dtype=torch.float64).triu(1)[None, None]


def _x() -> torch.Tensor:
    return torch.randn(2, L, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _v3(rope_interleave: bool, q_lora_rank):
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as v3
    cfg = transformers.DeepseekV3Config(**SMALL, q_lora_rank=q_lora_rank,
                                        rope_interleave=rope_interleave)
    cfg._attn_implementation = "eager"
    attn = _random(v3.DeepseekV3Attention(cfg, 0))
    x = _x()
    cos, sin = v3.DeepseekV3RotaryEmbedding(cfg)(x, torch.arange(L)[None].expand(2, -1))
    with torch.no_grad():
        return attn, x, attn(x, (cos, sin), _causal())[0]


@pytest.mark.parametrize("q_lora_rank", [10, None])
@pytest.mark.parametrize("rope_interleave", [True, False])
def test_equals_deepseek_v3_attention(rope_interleave, q_lora_rank):
    attn, x, expected = _v3(rope_interleave, q_lora_rank)
    mla = MultiHeadLatentAttention.from_transformers(attn)
    with torch.no_grad():
        torch.testing.assert_close(mla(x), expected, atol=1e-6, rtol=1e-6)
        for mode in ("naive", "absorbed"):                 # the latent cache, token by token
            cache = KVCache()
            out = torch.cat([mla(x[:, t:t + 1], cache, mode) for t in range(L)], dim=1)
            torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)


def test_interleaved_weights_need_the_reordering():
    attn, x, expected = _v3(True, 10)
    mla = MultiHeadLatentAttention.from_transformers(attn)
    mla.load_state_dict(attn.state_dict())                # the rows as DeepSeek lays them out
    with torch.no_grad():
        assert (mla(x) - expected).abs().max() > 1e-3


def test_equals_deepseek_v2_attention():
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as v2
    cfg = transformers.DeepseekV2Config(**SMALL, q_lora_rank=None)
    cfg._attn_implementation = "eager"
    attn = _random(v2.DeepseekV2Attention(cfg, 0))
    x = _x()
    freqs = v2.DeepseekV2RotaryEmbedding(cfg)(x, torch.arange(L)[None].expand(2, -1))
    with torch.no_grad():
        expected = attn(x, _causal(), position_embeddings=freqs)[0]
        mla = MultiHeadLatentAttention.from_transformers(attn)
        torch.testing.assert_close(mla(x), expected, atol=1e-6, rtol=1e-6)
