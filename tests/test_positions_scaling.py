"""RoPE scaling (``rope_scaling`` dicts with transformers' keys) against each paper's formula,
re-derived here from the papers, and per-row ``position_ids``."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.attention import positions as pos

E, BASE = 64, 10000.0


def _theta(E: int, base: float) -> list[float]:
    return [base ** (-2 * i / E) for i in range(E // 2)]


def _pi(E, base, s):
    """Position interpolation (Chen et al. 2023): position m -> m / s, i.e. theta_i / s."""
    return [t / s for t in _theta(E, base)], 1.0


def _dynamic_ntk(E, base, s, M, seq_len):
    """Dynamic NTK-aware scaling (bloc97; Peng et al. 2023 §3.3): for l > M the base becomes
    b * (s*l/M - (s-1))^(E/(E-2)); for l <= M nothing changes."""
    if seq_len <= M:
        return _theta(E, base), 1.0
    b = base * ((s * seq_len / M) - (s - 1)) ** (E / (E - 2))
    return _theta(E, b), 1.0


def _yarn(E, base, s, M, beta_fast=32.0, beta_slow=1.0):
    """YaRN (Peng et al. 2023, eqs. 17-20): r_i = M / lambda_i rotations over the training
    length; gamma = 0 for r < beta_slow (interpolate), 1 for r > beta_fast (keep), linear in
    between, with the ramp ends at whole dimensions d = E ln(M/(2 pi r)) / (2 ln b); temperature
    sqrt(1/t) = 0.1 ln s + 1 on cos and sin."""
    def d_of(r):
        return E * math.log(M / (2 * math.pi * r)) / (2 * math.log(base))
    lo, hi = max(math.floor(d_of(beta_fast)), 0), min(math.ceil(d_of(beta_slow)), E - 1)
    out = []
    for i, t in enumerate(_theta(E, base)):
        g = min(max((i - lo) / (hi - lo if hi != lo else 0.001), 0.0), 1.0)   # 0 keep .. 1
        out.append(t * (1 - g) + (t / s) * g)
    return out, (0.1 * math.log(s) + 1.0 if s > 1 else 1.0)


def _llama3(E, base, s, M, lo, hi):
    """Llama 3 (Meta 2024): wavelength 2pi/theta < M/hi: keep; > M/lo: theta/s; between:
    (1 - a) theta/s + a theta with a = (M/wavelength - lo) / (hi - lo)."""
    out = []
    for t in _theta(E, base):
        lam = 2 * math.pi / t
        if lam < M / hi:
            out.append(t)
        elif lam > M / lo:
            out.append(t / s)
        else:
            a = (M / lam - lo) / (hi - lo)
            out.append((1 - a) * t / s + a * t)
    return out, 1.0


CASES = []
for s in (2.0, 4.0, 8.0, 16.0):
    CASES.append(({"rope_type": "linear", "factor": s}, _pi(E, BASE, s), None))
    for M in (512, 2048):
        for ell in (M // 2, M, 3 * M, 10 * M):
            CASES.append(({"rope_type": "dynamic", "factor": s,
                           "original_max_position_embeddings": M},
                          _dynamic_ntk(E, BASE, s, M, ell), ell))
        CASES.append(({"rope_type": "yarn", "factor": s, "original_max_position_embeddings": M},
                      _yarn(E, BASE, s, M), None))
        CASES.append(({"rope_type": "yarn", "factor": s, "original_max_position_embeddings": M,
                       "beta_fast": 16, "beta_slow": 2},
                      _yarn(E, BASE, s, M, 16.0, 2.0), None))
        CASES.append(({"rope_type": "llama3", "factor": s, "original_max_position_embeddings": M,
                       "low_freq_factor": 1.0, "high_freq_factor": 4.0},
                      _llama3(E, BASE, s, M, 1.0, 4.0), None))


@pytest.mark.parametrize(("cfg", "expected", "seq_len"), CASES,
                         ids=[f"{c['rope_type']}-{c['factor']:g}-{i}" for i, (c, _, _) in
                              enumerate(CASES)])
def test_scaled_frequencies_equal_the_papers(cfg, expected, seq_len):
    theta, factor = pos.scaled_rope_frequencies(E, BASE, cfg, seq_len)
    want, want_factor = expected
    assert torch.allclose(theta, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=0)
    assert factor == pytest.approx(want_factor, rel=1e-12)


@pytest.mark.parametrize("cfg", [c for c, _, _ in CASES if c["rope_type"] != "dynamic"][::3])
@pytest.mark.parametrize(("L", "offset"), [(7, 0), (5, 1000), (33, 4000)])
def test_apply_rope_uses_the_scaled_angles(cfg, L, offset):
    """apply_rope with rope_scaling rotates pair i of position m by m * theta_i (scaled), times
    YaRN's attention factor, checked as a complex multiplication."""
    x = torch.randn(2, L, E, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    theta, factor = pos.scaled_rope_frequencies(E, BASE, cfg)
    m = torch.arange(offset, offset + L, dtype=torch.float64)
    z = torch.complex(x[..., :E // 2], x[..., E // 2:]) * torch.polar(
        torch.full((L, E // 2), factor, dtype=torch.float64), m[:, None] * theta)
    got = pos.apply_rope(x, offset=offset, rope_scaling=cfg)
    assert torch.allclose(got, torch.cat([z.real, z.imag], -1), atol=1e-10, rtol=0)
    cos, sin = pos.rope_cache(offset + L, E, rope_scaling=cfg, dtype=torch.float64)
    assert torch.allclose(pos.apply_rope(x, cos, sin, offset=offset), got, atol=1e-12, rtol=0)


def test_dynamic_uses_the_largest_position_and_leaves_short_inputs_alone():
    cfg = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64}
    x = torch.randn(1, 200, 8, dtype=torch.float64)
    assert torch.equal(pos.apply_rope(x[:, :64], rope_scaling=cfg), pos.apply_rope(x[:, :64]))
    want_theta, _ = _dynamic_ntk(8, BASE, 4.0, 64, 200)
    got_theta, _ = pos.scaled_rope_frequencies(8, BASE, cfg, 200)
    assert torch.allclose(got_theta, torch.tensor(want_theta, dtype=torch.float64), rtol=1e-12)
    assert not torch.allclose(pos.apply_rope(x, rope_scaling=cfg)[:, :64],
                              pos.apply_rope(x[:, :64]))


def test_linear_scaling_is_position_interpolation():
    """Position m with factor s is rotated exactly like position m / s without scaling."""
    x = torch.randn(1, 1, 16, dtype=torch.float64)
    a = pos.apply_rope(x, offset=12, rope_scaling={"rope_type": "linear", "factor": 4.0})
    assert torch.allclose(a, pos.apply_rope(x, offset=3), atol=1e-14)


def test_default_and_legacy_type_key():
    x = torch.randn(3, 8, dtype=torch.float64)
    assert torch.equal(pos.apply_rope(x, rope_scaling={"rope_type": "default"}),
                       pos.apply_rope(x))
    assert torch.equal(pos.apply_rope(x, rope_scaling={"type": "linear", "factor": 2.0}),
                       pos.apply_rope(x, rope_scaling={"rope_type": "linear", "factor": 2.0}))


@pytest.mark.parametrize(("cfg", "match"), [
    ({"rope_type": "ntk", "factor": 2.0}, "rope_type"),
    ({"rope_type": "linear"}, "'factor'"),
    ({"rope_type": "linear", "factor": 0.5}, "factor"),
    ({"rope_type": "yarn", "factor": 2.0}, "original_max_position_embeddings"),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192,
      "low_freq_factor": 1.0}, "high_freq_factor"),
])
def test_bad_rope_scaling_is_named(cfg, match):
    with pytest.raises(ValueError, match=match):
        pos.apply_rope(torch.randn(2, 8), rope_scaling=cfg)
    with pytest.raises(TypeError, match="rope_scaling must be a dict"):
        pos.rope_cache(2, 8, rope_scaling=[("rope_type", "linear")])


# --------------------------------------------------------------------------- per-row positions


def test_position_ids_rotate_each_row_by_its_own_positions():
    x = torch.randn(3, 2, 5, 8, dtype=torch.float64)
    ids = torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2], [7, 8, 9, 10, 11]])
    got = pos.apply_rope(x, position_ids=ids)
    for b in range(3):
        for i in range(5):
            want = pos.apply_rope(x[b, :, i:i + 1], offset=int(ids[b, i]))
            assert torch.allclose(got[b, :, i:i + 1], want, atol=1e-14, rtol=0)
    cos, sin = pos.rope_cache(12, 8, dtype=torch.float64)
    assert torch.equal(pos.apply_rope(x, cos, sin, position_ids=ids), got)
    c_rows, _ = pos.rope_cache(5, 8, position_ids=ids, dtype=torch.float64)
    assert c_rows.shape == (3, 5, 8) and torch.equal(c_rows[2], cos[7:12])
    x3 = x[:, 0]                                            # (B, L, E) works too
    assert torch.equal(pos.apply_rope(x3, position_ids=ids), got[:, 0])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"position_ids": torch.zeros(3, 4, dtype=torch.long)}, r"shape \(B, L\) with L=5"),
    ({"position_ids": torch.zeros(3, 5)}, "integer tensor"),
    ({"position_ids": torch.zeros(2, 5, dtype=torch.long)}, r"B=2.*got x of shape \(3, 2, 5, 8\)"),
    ({"position_ids": torch.zeros(3, 5, dtype=torch.long), "offset": 2}, "not both"),
    ({"position_ids": -torch.ones(3, 5, dtype=torch.long)}, ">= 0"),
])
def test_bad_position_ids_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pos.apply_rope(torch.randn(3, 2, 5, 8), **kwargs)


def test_position_ids_beyond_the_cache_are_named():
    cos, sin = pos.rope_cache(4, 8)
    with pytest.raises(ValueError, match=r"max\(position_ids\) \+ 1 = 10"):
        pos.apply_rope(torch.randn(1, 2, 8), cos, sin, position_ids=torch.tensor([[3, 9]]))


@pytest.mark.parametrize("cfg, expected", [
    (None, 1.0),
    ({"rope_type": "default", "mscale_all_dim": 1.0}, 1.0),
    ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096}, 1.0),
    ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
      "mscale": 1.0, "mscale_all_dim": 1.0}, (0.1 * math.log(40) + 1) ** 2),
    ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
      "mscale": 0.707, "mscale_all_dim": 0.707}, (0.0707 * math.log(40) + 1) ** 2),
    ({"type": "linear", "factor": 4.0, "mscale_all_dim": 1.0}, (0.1 * math.log(4) + 1) ** 2),
    ({"rope_type": "linear", "factor": 1.0, "mscale_all_dim": 1.0}, 1.0),
])
def test_softmax_mscale_is_deepseeks(cfg, expected):
    """DeepSeek-V2's softmax-scale factor (its released attention code; transformers'
    ``yarn_apply_mscale``): mscale² with mscale = 0.1·mscale_all_dim·ln(factor) + 1, for any
    non-default type that sets mscale_all_dim, 1 otherwise (also for factor <= 1)."""
    assert pos.softmax_mscale(cfg) == pytest.approx(expected, rel=1e-15)
