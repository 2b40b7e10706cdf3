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


@pytest.mark.parametrize("yarn", [False, True])
def test_equals_deepseek_v2_attention(yarn):
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as v2
    extra = dict(qk_rope_head_dim=8, rope_parameters=dict(DEEPSEEK_V3_YARN),
                 max_position_embeddings=163840) if yarn else {}
    cfg = transformers.DeepseekV2Config(**{**SMALL, **extra}, q_lora_rank=None)
    cfg._attn_implementation = "eager"
    attn = _random(v2.DeepseekV2Attention(cfg, 0))
    x = _x()
    freqs = v2.DeepseekV2RotaryEmbedding(cfg)(x, torch.arange(L)[None].expand(2, -1))
    with torch.no_grad():
        expected = attn(x, _causal(), position_embeddings=freqs)[0]
        mla = MultiHeadLatentAttention.from_transformers(attn)
        torch.testing.assert_close(mla(x), expected, atol=1e-6, rtol=1e-6)


#: DeepSeek-V3's published long-context fields (its config.json's rope_scaling), model scaled
#: down; max_position_embeddings = 4096 · 40 = 163840, rope_theta 10000 as DeepSeek-V3's
DEEPSEEK_V3_YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                    "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
                    "rope_theta": 10000.0}


def _v3_yarn(q_lora_rank, rope_interleave=True):
    """Like :func:`_v3` with DeepSeek-V3's YaRN and 8 rotary features (YaRN's ramp then spans
    pairs kept, blended and interpolated: positions 0-6 see the frequencies)."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as v3
    cfg = transformers.DeepseekV3Config(**dict(SMALL, qk_rope_head_dim=8),
                                        q_lora_rank=q_lora_rank, rope_interleave=rope_interleave,
                                        rope_parameters=dict(DEEPSEEK_V3_YARN),
                                        max_position_embeddings=163840)
    cfg._attn_implementation = "eager"
    attn = _random(v3.DeepseekV3Attention(cfg, 0))
    x = _x()
    cos, sin = v3.DeepseekV3RotaryEmbedding(cfg)(x, torch.arange(L)[None].expand(2, -1))
    with torch.no_grad():
        return attn, x, attn(x, (cos, sin), _causal())[0]


@pytest.mark.parametrize("q_lora_rank", [10, None])
def test_equals_deepseek_v3_attention_with_its_yarn_scaling(q_lora_rank):
    """Issue 55: DeepSeek-V3's own RoPE scaling carried over; full forward and both decodes."""
    attn, x, expected = _v3_yarn(q_lora_rank)
    mla = MultiHeadLatentAttention.from_transformers(attn)
    assert mla.rope_scaling["rope_type"] == "yarn" and mla.rope_scaling["factor"] == 40.0
    assert mla.scale == pytest.approx(attn.scaling, rel=1e-15)   # 1/√(N+R) · mscale²
    assert mla.scale / (6 + 8) ** -0.5 > 1.8
    with torch.no_grad():
        torch.testing.assert_close(mla(x), expected, atol=1e-6, rtol=1e-6)
        for mode in ("naive", "absorbed"):
            for step in (1, 3):                                   # token by token, in chunks
                cache = KVCache()
                out = torch.cat([mla(x[:, t:t + step], cache, mode)
                                 for t in range(0, L, step)], dim=1)
                torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)


def test_yarn_frequencies_and_scale_both_matter():
    """The test above can fail: without the scaling the outputs are far off; with the same
    softmax scale but linear scaling's frequencies instead of YaRN's they are off too."""
    attn, x, expected = _v3_yarn(10)
    mla = MultiHeadLatentAttention.from_transformers(attn)
    state = mla.state_dict()
    shape = dict(kv_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=8, v_head_dim=5,
                 q_lora_rank=10, norm_eps=mla.kv_a_layernorm.eps)
    plain = MultiHeadLatentAttention(32, 4, **shape).double()
    linear = MultiHeadLatentAttention(32, 4, **shape, rope_scaling={
        "rope_type": "linear", "factor": 40.0, "mscale_all_dim": 1.0}).double()
    assert linear.scale == mla.scale
    with torch.no_grad():
        for other in (plain, linear):
            other.load_state_dict(state)
            assert (other(x) - expected).abs().max() > 1e-3


@pytest.mark.parametrize("rope_type, extra", [
    ("dynamic", {"factor": 2.0}),
    ("longrope", {"short_factor": [1.0] * 4, "long_factor": [2.0] * 4, "factor": 2.0,
                  "original_max_position_embeddings": 4096}),
])
def test_unsupported_rope_scaling_is_refused(rope_type, extra):
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as v3
    cfg = transformers.DeepseekV3Config(**dict(SMALL, qk_rope_head_dim=8), q_lora_rank=None,
                                        rope_parameters={"rope_type": rope_type,
                                                         "rope_theta": 10000.0, **extra},
                                        max_position_embeddings=163840)
    attn = v3.DeepseekV3Attention(cfg, 0)
    with pytest.raises(ValueError, match=rf"config.rope_parameters\['rope_type'\] = "
                                         rf"'{rope_type}'"):
        MultiHeadLatentAttention.from_transformers(attn)
