"""Each piece of today's open models' attention (course_lib.attention) against the transformers
module of a model that uses it, with the same random weights (built from a tiny config: no
download): gpt-oss's attention with learned sinks and its sliding/full alternation, Qwen3's and
Gemma 3's QK-norm, Gemma 3's and SmolLM3's layer patterns, Qwen3-Next's gated attention and its
Gated DeltaNet (transformers' own torch fallback), DeepSeek-V3.2's indexer and sparse attention.
Outputs and gradients are compared. transformers is test-only and these tests skip without it.

Tolerances: everything runs in float64, but transformers computes RoPE's cos/sin, RMSNorm and
the gated delta rule's kernels in float32 whatever the input dtype, so results agree to float32
round-off (rel ~1e-7 per operation): 1e-5 absolute and relative, a thousand times below the
difference any mistake here makes (checked by the "differs" assertions, which need > 1e-2).
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch

from course_lib.attention import GatedDeltaNet, OpenAttention
from course_lib.attention.delta_rule import gated_delta_rule_chunked, gated_delta_rule_recurrent
from course_lib.attention.layer_pattern import interleaved, rope_layers
from course_lib.attention.positions import apply_rope
from course_lib.attention.sparse_topk import indexer_scores, sparse_topk_attention, topk_mask

os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="course_hf_home_")   # never the home dir
os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

TOL = dict(atol=1e-5, rtol=1e-5)
L = 7
ROPE = {"rope_type": "default", "rope_theta": 10000.0}


def _randomize(module: torch.nn.Module, seed: int = 0, std: float = 0.3) -> torch.nn.Module:
    torch.manual_seed(seed)
    module = module.double()
    for p in module.parameters():
        torch.nn.init.normal_(p, std=std)
    return module


def _x(D: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(2, L, D, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)


def _additive(mask: torch.Tensor) -> torch.Tensor:
    """bool (L, S), True = may attend → transformers' additive (1, 1, L, S)."""
    return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(
        ~mask, torch.finfo(torch.float64).min)[None, None]


def _assert_same_grads(ours: torch.nn.Module, theirs: torch.nn.Module, f_ours, f_theirs,
                       x: torch.Tensor) -> None:
    """Outputs, d/dx and every parameter's gradient, for one random cotangent."""
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = f_ours(xa), f_theirs(xb)
    torch.testing.assert_close(ya, yb, **TOL)
    cot = torch.randn(ya.shape, generator=torch.Generator().manual_seed(2), dtype=ya.dtype)
    (ya * cot).sum().backward()
    (yb * cot).sum().backward()
    torch.testing.assert_close(xa.grad, xb.grad, **TOL)
    theirs_grads = {n: p.grad for n, p in theirs.named_parameters()}
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs_grads[name], **TOL, msg=name)


# --------------------------------------------------------------------- gpt-oss: sinks, windows


def _gpt_oss():
    from transformers.models.gpt_oss import modeling_gpt_oss as m
    cfg = transformers.GptOssConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_hidden_layers=4, sliding_window=3, vocab_size=16,      # gpt-oss's own YaRN RoPE
        intermediate_size=8, num_local_experts=2, num_experts_per_tok=1)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"          # grouped_mm refuses float64
    model = _randomize(m.GptOssModel(cfg))
    seen: dict[int, tuple] = {}
    for i, layer in enumerate(model.layers):
        layer.self_attn.register_forward_hook(
            lambda mod, args, kw, out, i=i: seen.__setitem__(i, (args, kw, out)), with_kwargs=True)
    with torch.no_grad():
        model(input_ids=torch.randint(0, 16, (2, L), generator=torch.Generator().manual_seed(3)))
    return cfg, model, seen


@pytest.mark.slow            # ~7 s, most of it importing gpt-oss's modeling (and its MoE)
def test_gpt_oss_sinks_and_sliding_full_alternation():
    cfg, model, seen = _gpt_oss()
    kinds = interleaved(cfg.num_hidden_layers, 2)
    assert kinds == cfg.layer_types == ["sliding_attention", "full_attention"] * 2
    rope = dict(cfg.rope_parameters)
    assert rope["rope_type"] == "yarn" and rope["factor"] == 32
    base = rope.pop("rope_theta")
    for i, kind in enumerate(kinds):
        attn = model.layers[i].self_attn
        ours = OpenAttention(32, 4, 2, 8, bias=True, sinks=True, rope_base=base,
                             rope_scaling=rope,
                             window=cfg.sliding_window if kind == "sliding_attention" else None)
        ours.load_state_dict(attn.state_dict())
        ours.double()
        args, kw, (expected, _) = seen[i]
        hidden = kw.get("hidden_states", args[0] if args else None)
        with torch.no_grad():                         # our own RoPE, mask and sink softmax
            torch.testing.assert_close(ours(hidden), expected, **TOL)
        pos, mask = kw["position_embeddings"], kw["attention_mask"]
        _assert_same_grads(ours, attn, ours, lambda x, a=attn, p=pos, m=mask: a(x, p, m)[0],
                           hidden)
        other = OpenAttention(32, 4, 2, 8, bias=True, sinks=True, rope_base=base,
                              rope_scaling=rope,
                              window=None if kind == "sliding_attention" else cfg.sliding_window)
        other.load_state_dict(attn.state_dict())
        with torch.no_grad():                         # the other kind of layer differs
            assert (other.double()(hidden) - expected).abs().max() > 1e-2
        ours.sinks.data.fill_(-1e4)                   # without the sink: a plain softmax differs
        with torch.no_grad():
            assert (ours(hidden) - expected).abs().max() > 1e-2


# ------------------------------------------------------------------- QK-norm: Qwen3 and Gemma 3


def test_qwen3_qk_norm_attention():
    from transformers.models.qwen3 import modeling_qwen3 as m
    cfg = transformers.Qwen3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                   head_dim=8, num_hidden_layers=1, rope_parameters=ROPE,
                                   vocab_size=16, intermediate_size=8)
    cfg._attn_implementation = "eager"
    attn = _randomize(m.Qwen3Attention(cfg, 0))
    ours = OpenAttention(32, 4, 2, 8, qk_norm=True, norm_eps=cfg.rms_norm_eps)
    ours.load_state_dict(attn.state_dict())
    ours.double()
    x = _x(32)
    pos = m.Qwen3RotaryEmbedding(cfg)(x, torch.arange(L)[None])
    causal = _additive(ours.mask(L))
    _assert_same_grads(ours, attn, ours, lambda x: attn(x, pos, causal)[0], x)
    plain = OpenAttention(32, 4, 2, 8)              # the same weights without the norms
    plain.load_state_dict({k: v for k, v in attn.state_dict().items() if "norm" not in k})
    with torch.no_grad():
        assert (plain.double()(x) - attn(x, pos, causal)[0]).abs().max() > 1e-2


def test_olmo2_qk_norm_over_the_whole_projection():
    from transformers.models.olmo2 import modeling_olmo2 as m
    cfg = transformers.Olmo2Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                   num_hidden_layers=1, rope_parameters=ROPE, vocab_size=16,
                                   intermediate_size=8)
    cfg._attn_implementation = "eager"
    attn = _randomize(m.Olmo2Attention(cfg, 0))
    ours = OpenAttention(32, 4, 2, 8, qk_norm="projection", norm_eps=cfg.rms_norm_eps)
    ours.load_state_dict(attn.state_dict())
    ours.double()
    x = _x(32)
    pos = m.Olmo2RotaryEmbedding(cfg)(x, torch.arange(L)[None])
    causal = _additive(ours.mask(L))
    _assert_same_grads(ours, attn, ours, lambda x: attn(x, pos, causal)[0], x)
    per_head = OpenAttention(32, 4, 2, 8, qk_norm=True, norm_eps=cfg.rms_norm_eps).double()
    with torch.no_grad():
        per_head.q_norm.weight.fill_(1.0)
        per_head.k_norm.weight.fill_(1.0)
        ours.q_norm.weight.fill_(1.0)
        ours.k_norm.weight.fill_(1.0)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(per_head, name).load_state_dict(getattr(ours, name).state_dict())
        assert (per_head(x) - ours(x)).abs().max() > 1e-3      # per head is another norm


def test_gemma3_qk_norm_scale_and_layer_pattern():
    from transformers.models.gemma3 import modeling_gemma3 as m
    cfg = transformers.Gemma3TextConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_hidden_layers=12, sliding_window=3, query_pre_attn_scalar=6, vocab_size=16,
        intermediate_size=8, rope_parameters={"full_attention": ROPE,
                                              "sliding_attention": ROPE})
    cfg._attn_implementation = "eager"
    assert cfg.layer_types == interleaved(12, 6)      # 5 local : 1 global
    for i in (0, 5):                                   # a local and a global layer
        attn = _randomize(m.Gemma3Attention(cfg, i))
        window = cfg.sliding_window if cfg.layer_types[i] == "sliding_attention" else None
        ours = OpenAttention(32, 4, 2, 8, qk_norm=True, norm_unit_offset=True,
                             norm_eps=cfg.rms_norm_eps, window=window,
                             scale=cfg.query_pre_attn_scalar ** -0.5)
        ours.load_state_dict(attn.state_dict())
        ours.double()
        x = _x(32)
        pos = m.Gemma3RotaryEmbedding(cfg)(x, torch.arange(L)[None], cfg.layer_types[i])
        mask = _additive(ours.mask(L))
        _assert_same_grads(ours, attn, ours, lambda x, a=attn, p=pos, k=mask: a(x, p, k)[0], x)


def test_smollm3_nope_layers():
    cfg = transformers.SmolLM3Config(num_hidden_layers=8, vocab_size=16, hidden_size=32,
                                     num_attention_heads=4, num_key_value_heads=2,
                                     intermediate_size=8)
    assert [bool(r) for r in cfg.no_rope_layers] == rope_layers(8, 4)   # 1 = uses RoPE


# ----------------------------------------------------------------------------- Qwen3-Next


def _qwen3_next_config(**kw):
    cfg = transformers.Qwen3NextConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_hidden_layers=4, vocab_size=16, intermediate_size=8, moe_intermediate_size=8,
        num_experts=2, num_experts_per_tok=1, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=6, rope_parameters=dict(
            ROPE, partial_rotary_factor=0.25), **kw)
    cfg._attn_implementation = "eager"
    return cfg


def test_qwen3_next_gated_attention():
    from transformers.models.qwen3_next import modeling_qwen3_next as m
    cfg = _qwen3_next_config()
    assert cfg.layer_types == interleaved(4, 4, local="linear_attention")    # 3 : 1
    attn = _randomize(m.Qwen3NextAttention(cfg, 3))
    ours = OpenAttention(32, 4, 2, 16, qk_norm=True, norm_unit_offset=True, gate=True,
                         norm_eps=cfg.rms_norm_eps, rotary_dim=4)        # a quarter rotates
    ours.load_state_dict(attn.state_dict())
    ours.double()
    x = _x(32)
    pos = m.Qwen3NextRotaryEmbedding(cfg)(x, torch.arange(L)[None])
    assert pos[0].shape[-1] == 4
    causal = _additive(ours.mask(L))
    _assert_same_grads(ours, attn, ours, lambda x: attn(x, pos, causal)[0], x)


def _gdn_inputs(heads_k: int, heads_v: int, E: int, Ev: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 11, heads_k, E, generator=g, dtype=dtype)
    k = torch.nn.functional.normalize(torch.randn(2, 11, heads_k, E, generator=g, dtype=dtype),
                                      dim=-1)
    v = torch.randn(2, 11, heads_v, Ev, generator=g, dtype=dtype)
    decay = -torch.rand(2, 11, heads_v, generator=g, dtype=dtype)
    beta = torch.rand(2, 11, heads_v, generator=g, dtype=dtype)
    return q, k, v, decay, beta


def test_gated_delta_rule_equals_transformers_torch_fallback():
    from transformers.models.qwen3_next import modeling_qwen3_next as m
    q, k, v, decay, beta = _gdn_inputs(3, 3, 8, 5)
    s0 = torch.randn(2, 3, 8, 5, generator=torch.Generator().manual_seed(5))
    heads_first = [t.transpose(1, 2) for t in (q, k, v, decay, beta)]
    for theirs in (m.torch_chunk_gated_delta_rule, m.torch_recurrent_gated_delta_rule):
        o_ref, s_ref = theirs(q, k, v, g=decay, beta=beta, initial_state=s0,
                              output_final_state=True)
        for ours in (gated_delta_rule_recurrent, gated_delta_rule_chunked):
            o, s = ours(*heads_first, initial_state=s0)
            torch.testing.assert_close(o.transpose(1, 2), o_ref, **TOL)
            torch.testing.assert_close(s, s_ref, **TOL)


@pytest.mark.parametrize("mode", ["chunked", "recurrent"])
def test_qwen3_next_gated_deltanet_layer(mode):
    from transformers.models.qwen3_next import modeling_qwen3_next as m
    cfg = _qwen3_next_config()
    layer = _randomize(m.Qwen3NextGatedDeltaNet(cfg, 0), std=0.2)
    ours = GatedDeltaNet.from_transformers(layer)
    ours.chunk_size = 4                              # several chunks over L = 7
    x = _x(32)
    _assert_same_grads_gdn(ours, layer, mode, x)


def _assert_same_grads_gdn(ours, layer, mode, x):
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ours(xa, mode), layer(xb)
    torch.testing.assert_close(ya, yb, **TOL)
    cot = torch.randn(ya.shape, generator=torch.Generator().manual_seed(2), dtype=ya.dtype)
    (ya * cot).sum().backward()
    (yb * cot).sum().backward()
    torch.testing.assert_close(xa.grad, xb.grad, **TOL)
    torch.testing.assert_close(ours.A_log.grad, layer.A_log.grad, **TOL)
    torch.testing.assert_close(ours.conv_weight.grad, layer.conv1d.weight.grad[:, 0], **TOL)
    torch.testing.assert_close(ours.out_proj.weight.grad, layer.out_proj.weight.grad, **TOL)


# ------------------------------------------------------------------------- DeepSeek-V3.2 DSA


def test_deepseek_v32_indexer_and_sparse_attention(monkeypatch):
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as m
    cfg = transformers.DeepseekV32Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=12,
        q_lora_rank=10, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5,
        index_n_heads=3, index_head_dim=8, index_topk=3, num_hidden_layers=1, vocab_size=16,
        intermediate_size=8, moe_intermediate_size=8, n_routed_experts=2, num_experts_per_tok=1,
        n_group=1, topk_group=1, rope_parameters=ROPE)
    cfg._attn_implementation = "eager"
    attn = _randomize(m.DeepseekV32Attention(cfg, 0))
    x = _x(32)
    pos = m.DeepseekV32RotaryEmbedding(cfg)(x, torch.arange(L)[None])
    causal = _additive(torch.ones(L, L, dtype=torch.bool).tril())
    seen = {}
    original = m.eager_attention_forward

    def capture(module, q, k, v, mask, **kw):
        seen.update(q=q, k=k, v=v, mask=mask, scaling=kw["scaling"])
        out, w = original(module, q, k, v, mask, **kw)
        seen["out"] = out
        return out, w

    monkeypatch.setattr(m, "eager_attention_forward", capture)
    topk_theirs = {}
    attn.indexer.register_forward_hook(lambda mod, a, out: topk_theirs.setdefault("i", out))
    attn(x, pos, causal)

    # the indexer: our scores from its projections pick the same keys
    ix = attn.indexer
    with torch.no_grad():
        q_resid = attn.q_a_layernorm(attn.q_a_proj(x))
        iq = ix.wq_b(q_resid).view(2, L, 3, 8)
        ik = ix.k_norm(ix.wk(x))
        R = cfg.qk_rope_head_dim
        iq = torch.cat([apply_rope(iq[..., :R].transpose(1, 2)).transpose(1, 2), iq[..., R:]], -1)
        ik = torch.cat([apply_rope(ik[..., :R]), ik[..., R:]], -1)
        w = ix.weights_proj(x) * 3 ** -0.5
        scores = indexer_scores(iq, ik, w)
    allowed = torch.ones(L, L, dtype=torch.bool).tril()
    ours_keep = topk_mask(scores, cfg.index_topk, allowed)
    theirs_keep = torch.zeros(2, L, L, dtype=torch.bool).scatter(-1, topk_theirs["i"].long(),
                                                                 True) & allowed
    assert torch.equal(ours_keep, theirs_keep)
    assert ours_keep.sum(-1).tolist()[0] == [1, 2, 3, 3, 3, 3, 3]

    # sparse attention over those keys: output and gradients of q, k, v
    q, k, v = (seen[n].detach().clone().requires_grad_() for n in ("q", "k", "v"))
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    ours = sparse_topk_attention(q, k, v, scores, cfg.index_topk, scale=seen["scaling"])
    theirs, _ = original(attn, q2, k2, v2, seen["mask"], scaling=seen["scaling"])
    theirs = theirs.transpose(1, 2)                  # (B, H, L, Ev)
    torch.testing.assert_close(ours, theirs, **TOL)
    torch.testing.assert_close(seen["out"].transpose(1, 2), theirs.detach(), **TOL)
    cot = torch.randn(ours.shape, generator=torch.Generator().manual_seed(2), dtype=ours.dtype)
    (ours * cot).sum().backward()
    (theirs * cot).sum().backward()
    for a, b in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(a.grad, b.grad, **TOL)
    dense = sparse_topk_attention(q, k, v, scores, L, scale=seen["scaling"])   # every key
    assert (dense - theirs).abs().max() > 1e-2
