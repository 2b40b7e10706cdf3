"""Multi-head latent attention: naive and absorbed decoding over the latent cache equal the
full-sequence forward (float64, 1e-12); the latent cache holds r + R numbers per token; the
model is what its formulas say (an independent, per-head loop); the rotary part cannot be
absorbed; the scale is the full query-key width."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.attention import IMPLEMENTATIONS, KVCache
from course_lib.attention.latent import (
    MultiHeadLatentAttention,
    deinterleave_rows,
    mla_cache_bytes,
    rope_scaling_from_config,
)
from course_lib.attention.positions import apply_rope

CHUNKS = [(0, 4), (4, 5), (5, 6), (6, 9), (9, 10), (10, 11)]   # a prompt, then 1, 1, 3, 1, 1
DIMS = dict(kv_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5)
#: DeepSeek-V3's published RoPE scaling (its config.json)
YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}


def _model(q_lora_rank=10, seed=0, impl="sdpa", **dims):
    torch.manual_seed(seed)
    m = MultiHeadLatentAttention(32, 4, q_lora_rank=q_lora_rank, implementation=impl,
                                 **{**DIMS, **dims}).double()
    with torch.no_grad():                      # non-trivial norm weights
        for norm in (m.kv_a_layernorm, getattr(m, "q_a_layernorm", None)):
            if norm is not None:
                norm.weight.uniform_(0.5, 1.5)
    return m


def _x(seed=1, N=11):
    return torch.randn(2, N, 32, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)


@pytest.mark.parametrize("rope_scaling", [None, YARN], ids=["rope", "yarn"])
@pytest.mark.parametrize("mode", ["naive", "absorbed"])
@pytest.mark.parametrize("q_lora_rank", [10, None])
def test_decoding_in_chunks_equals_the_full_forward(mode, q_lora_rank, rope_scaling):
    m, x = _model(q_lora_rank, rope_scaling=rope_scaling), _x()
    full = m(x)
    cache = KVCache()
    out = torch.cat([m(x[:, a:b], cache, mode) for a, b in CHUNKS], dim=1)
    torch.testing.assert_close(out, full, atol=1e-12, rtol=0)
    assert len(cache) == 11 and cache.view()[0].shape == (2, 11, 12)
    assert cache.view()[1].shape == (2, 11, 4)


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_naive_and_absorbed_agree_with_every_implementation(impl):
    m, x = _model(impl=impl), _x(seed=3)
    steps = {}
    for mode in ("naive", "absorbed"):
        cache = KVCache()
        steps[mode] = torch.cat([m(x[:, t:t + 1], cache, mode) for t in range(11)], dim=1)
    torch.testing.assert_close(steps["naive"], steps["absorbed"], atol=1e-12, rtol=0)
    torch.testing.assert_close(steps["naive"], m(x), atol=1e-12, rtol=0)


def _per_head_loop(m: MultiHeadLatentAttention, x: torch.Tensor) -> torch.Tensor:
    """The MLA formulas written out token by token and head by head (no batching tricks)."""
    B, L, _ = x.shape
    H, N, R, V, r = (m.num_heads, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim,
                     m.kv_lora_rank)
    cq = m.q_a_layernorm(x @ m.q_a_proj.weight.T)
    q = (cq @ m.q_b_proj.weight.T).view(B, L, H, N + R)
    ckv = x @ m.kv_a_proj_with_mqa.weight.T
    c = ckv[..., :r] * torch.rsqrt(ckv[..., :r].pow(2).mean(-1, keepdim=True) + 1e-6)
    c = c * m.kv_a_layernorm.weight
    rs = m.rope_scaling
    k_r = apply_rope(ckv[..., r:], base=m.rope_base, rope_scaling=rs)  # (B, L, R): one per token
    # DeepSeek's softmax scale under RoPE scaling: (0.1 · mscale_all_dim · ln s + 1)² / √(N + R)
    mscale = 0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1 if rs else 1.0
    w = m.kv_b_proj.weight.view(H, N + V, r)
    out = torch.zeros(B, L, H, V, dtype=x.dtype)
    for h in range(H):
        q_r = apply_rope(q[:, :, h, N:], base=m.rope_base, rope_scaling=rs)
        for i in range(L):
            s = torch.stack([(q[:, i, h, :N] * (c[:, j] @ w[h, :N].T)).sum(-1)
                             + (q_r[:, i] * k_r[:, j]).sum(-1) for j in range(i + 1)], -1)
            p = torch.softmax(s * mscale**2 / math.sqrt(N + R), dim=-1)  # (B, i+1)
            vals = torch.stack([c[:, j] @ w[h, N:].T for j in range(i + 1)], 1)
            out[:, i, h] = (p[..., None] * vals).sum(1)
    return out.reshape(B, L, H * V) @ m.o_proj.weight.T


@pytest.mark.parametrize("rope_scaling", [None, YARN, dict(YARN, mscale_all_dim=0.707)],
                         ids=["rope", "yarn", "yarn-mscale-0.707"])
def test_forward_is_what_the_formulas_say(rope_scaling):
    m, x = _model(rope_scaling=rope_scaling, qk_rope_head_dim=8), _x(N=6)
    torch.testing.assert_close(m(x), _per_head_loop(m, x), atol=1e-12, rtol=0)


def test_the_scale_uses_the_rope_width_too():
    m, x = _model(), _x(N=5)
    ref = m(x)
    m.scale = m.qk_nope_head_dim ** -0.5        # forgetting the rope key's share
    assert (m(x) - ref).abs().max() > 1e-3
    assert MultiHeadLatentAttention(8, 2, **DIMS).scale == (6 + 4) ** -0.5


def test_the_rotary_part_cannot_be_absorbed():
    """Folding a rotation into W_UK (rotate the nope query by its position, absorb) changes the
    scores: the latent keys carry no position, so the rotation cannot pass into them."""
    m, x = _model(qk_nope_head_dim=4), _x(N=6)
    q_nope, _ = m.queries(x, 0)
    c, _ = m.latents(x, 0)
    w_uk, _ = m.up_weights()
    right = (q_nope @ w_uk) @ c[:, None].transpose(-2, -1)
    wrong = (apply_rope(q_nope) @ w_uk) @ c[:, None].transpose(-2, -1)
    assert (right - wrong).abs().max() > 1e-2
    torch.testing.assert_close(right[..., :1, :], wrong[..., :1, :])   # position 0: no turn


def test_the_cache_holds_the_latent_and_one_rotary_key():
    m, x = _model(), _x()
    cache = KVCache()
    m(x, cache, "absorbed")
    assert cache.nbytes == 2 * 11 * (12 + 4) * 8
    assert mla_cache_bytes(11, 1, 12, 4, bytes_per_element=8, batch=2) == cache.nbytes
    # the same model caching decompressed keys and values per head would store
    per_head = 2 * 11 * 4 * ((6 + 4) + 5) * 8
    assert per_head / cache.nbytes == 4 * 15 / 16          # H (N + R + V) / (r + R)


def test_deinterleave_rows_turns_interleaved_rope_into_split_halves():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(3, 7, 5, generator=g), torch.randn(8, 5, generator=g)
    inter = x @ w.T                                    # rotary pairs (0, 1), (2, 3), ...
    ang = torch.arange(7.0)[:, None] * 10000.0 ** (-torch.arange(0, 8, 2) / 8)
    a, b = inter[..., 0::2], inter[..., 1::2]
    rot = torch.stack([a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()], -1)
    split = apply_rope(x @ deinterleave_rows(w, 1, 0, 8).T)
    torch.testing.assert_close(split, torch.cat([rot[..., 0], rot[..., 1]], -1))


def test_bad_input_names_the_argument():
    m = _model()
    with pytest.raises(ValueError, match=r"x must be \(B, L, 32\)"):
        m(torch.zeros(1, 3, 31, dtype=torch.float64))
    with pytest.raises(ValueError, match="mode"):
        m(_x(), KVCache(), "latent")
    with pytest.raises(ValueError, match="window"):
        m(_x(), KVCache(window=4), "naive")
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        MultiHeadLatentAttention(8, 2, kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=3,
                                 v_head_dim=2)


def test_rope_scaling_is_validated_when_the_module_is_built():
    with pytest.raises(ValueError, match=r"rope_scaling\['rope_type'\] must be one of"):
        _model(rope_scaling={"rope_type": "longrope", "factor": 2.0})
    with pytest.raises(ValueError, match="needs the key 'original_max_position_embeddings'"):
        _model(rope_scaling={"rope_type": "yarn", "factor": 2.0})
    assert _model(rope_scaling={"rope_type": "linear", "factor": 4.0}).scale == 10 ** -0.5


def _config(rope, field="rope_parameters", head_dim=8):
    """A stand-in for a transformers DeepSeek config: the fields the conversion reads."""
    from types import SimpleNamespace
    return SimpleNamespace(**{field: rope}, qk_rope_head_dim=8, head_dim=head_dim,
                           max_position_embeddings=163840)


def test_rope_scaling_from_config_carries_over_or_refuses_naming_the_field():
    assert rope_scaling_from_config(_config(None, "rope_scaling")) is None
    assert rope_scaling_from_config(_config({"rope_type": "default", "rope_theta": 1e4,
                                             "mscale_all_dim": 1.0})) is None
    got = rope_scaling_from_config(_config({**YARN, "rope_theta": 1e4}))
    assert got == YARN
    legacy = {k: v for k, v in YARN.items() if k != "rope_type"} | {"type": "yarn"}
    assert rope_scaling_from_config(_config(legacy, "rope_scaling")) == YARN
    no_factor = dict(YARN, factor=None)
    assert rope_scaling_from_config(_config(no_factor))["factor"] == 40.0  # 163840 / 4096
    refusals = [
        ({"rope_type": "dynamic", "factor": 2.0}, r"config.rope_parameters\['rope_type'\] = "
                                                  r"'dynamic' \(transformers' dynamic NTK"),
        ({"rope_type": "longrope", "factor": 2.0}, r"\['rope_type'\] = 'longrope'"),
        (dict(YARN, extrapolation_factor=1.0), r"with the keys \['extrapolation_factor'\]"),
        (dict(YARN, partial_rotary_factor=0.5), r"\['partial_rotary_factor'\] = 0.5"),
    ]
    for rope, match in refusals:
        with pytest.raises(ValueError, match=match):
            rope_scaling_from_config(_config(rope))
    with pytest.raises(ValueError, match="config.head_dim = 16"):
        rope_scaling_from_config(_config(YARN, head_dim=16))
