"""course_lib.attention.positions: sinusoids, RoPE (against complex rotation), ALiBi (the paper)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib import IMPLEMENTATIONS
from course_lib.attention import positions as pos
from course_lib.chapters.ch12_capstone import model as capstone_model


def _complex_rope(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Independent RoPE: pair (x_i, x_{i+E/2}) as the complex number x_i + j x_{i+E/2} and
    multiply by e^{j m θ_i} (torch.polar), all in float64."""
    L, E = x.shape[-2:]
    half = E // 2
    z = torch.complex(x[..., :half].double(), x[..., half:].double())
    theta = torch.tensor([base ** (-2 * i / E) for i in range(half)], dtype=torch.float64)
    m = torch.arange(offset, offset + L, dtype=torch.float64)
    rot = torch.polar(torch.ones(L, half, dtype=torch.float64), m[:, None] * theta)
    out = z * rot
    return torch.cat([out.real, out.imag], dim=-1).to(x.dtype)


# --------------------------------------------------------------------------- sinusoids


def test_sinusoids_moved_to_the_core_unchanged():
    assert capstone_model.sinusoidal_positions is pos.sinusoidal_positions
    p = pos.sinusoidal_positions(10, 8)
    t, i = 7, 2
    assert p.shape == (10, 8) and p.dtype == torch.float32
    assert torch.isclose(p[t, 2 * i], torch.tensor(math.sin(t / 10000 ** (2 * i / 8))))
    assert torch.isclose(p[t, 2 * i + 1], torch.tensor(math.cos(t / 10000 ** (2 * i / 8))))
    with pytest.raises(ValueError, match="even width"):
        pos.sinusoidal_positions(4, 7)


# --------------------------------------------------------------------------- RoPE


@pytest.mark.parametrize(("shape", "offset", "base"), [
    ((5, 8), 0, 10000.0), ((2, 3, 7, 16), 4, 10000.0), ((1, 6, 2), 11, 500.0)])
def test_rope_equals_complex_rotation(shape, offset, base):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = pos.apply_rope(x, offset=offset, base=base)
    assert torch.allclose(got, _complex_rope(x, offset, base), atol=1e-12, rtol=0)


def test_rope_is_a_rotation_and_position_zero_is_identity():
    x = torch.randn(3, 6, 10, dtype=torch.float64)
    y = pos.apply_rope(x)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1))
    assert torch.equal(y[..., 0, :], x[..., 0, :])
    assert not torch.allclose(y[..., 1:, :], x[..., 1:, :])


def test_rope_scores_depend_only_on_the_offset():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 16, generator=g, dtype=torch.float64).unbind(0)

    def score(m: int, n: int) -> torch.Tensor:
        qm = pos.apply_rope(q[None], offset=m)[0]
        kn = pos.apply_rope(k[None], offset=n)[0]
        return qm @ kn

    for delta in (0, 3, -5):
        vals = torch.stack([score(m, m - delta) for m in (5, 17, 40, 300)])
        assert torch.allclose(vals, vals[0].expand_as(vals), atol=1e-10)
    assert not torch.isclose(score(10, 7), score(10, 4))


def test_offset_equals_slicing_a_longer_cache():
    x = torch.randn(2, 12, 8)
    full = pos.apply_rope(x)
    tail = pos.apply_rope(x[:, 9:], offset=9)
    assert torch.equal(full[:, 9:], tail)
    cos, sin = pos.rope_cache(20, 8)
    c5, s5 = pos.rope_cache(4, 8, offset=5)
    assert torch.equal(cos[5:9], c5) and torch.equal(sin[5:9], s5)
    assert torch.equal(pos.apply_rope(x[:, 9:], cos, sin, offset=9), tail)


def test_rope_cache_layout_is_split_halves():
    cos, sin = pos.rope_cache(6, 8, base=100.0)
    assert cos.shape == sin.shape == (6, 8) and cos.dtype == torch.float32
    assert torch.equal(cos[:, :4], cos[:, 4:]) and torch.equal(sin[:, :4], sin[:, 4:])
    assert math.isclose(sin[3, 1].item(), math.sin(3 * 100.0 ** (-2 / 8)), rel_tol=1e-6)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: pos.apply_rope(torch.zeros(2, 3, 5)), r"even last dim E.*\(2, 3, 5\)"),
    (lambda: pos.apply_rope(torch.zeros(4)), r"\(\.\.\., L, E\).*\(4\)"),
    (lambda: pos.apply_rope(torch.zeros(3, 4, dtype=torch.long)), "floating-point"),
    (lambda: pos.apply_rope(torch.zeros(3, 4), *pos.rope_cache(2, 4)), r"cos must have shape"),
    (lambda: pos.apply_rope(torch.zeros(3, 4), *pos.rope_cache(3, 6)), r"E=4"),
    (lambda: pos.apply_rope(torch.zeros(3, 4), offset=-1), "offset"),
    (lambda: pos.rope_cache(3, 7), "even, positive head width E"),
])
def test_rope_bad_input_names_argument_and_shape(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# --------------------------------------------------------------------------- ALiBi


def test_alibi_slopes_for_8_heads_are_the_papers():
    assert torch.equal(pos.alibi_slopes(8, torch.float64),
                       torch.tensor([1 / 2 ** k for k in range(1, 9)], dtype=torch.float64))


def test_alibi_slopes_non_power_of_two_follow_the_papers_rule():
    # 12 heads: the 8-head slopes 2^-1 ... 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
    want = [2.0 ** -k for k in range(1, 9)] + [2.0 ** -(k + 0.5) for k in range(4)]
    assert torch.allclose(pos.alibi_slopes(12, torch.float64),
                          torch.tensor(want, dtype=torch.float64), rtol=1e-15)
    s16 = pos.alibi_slopes(16, torch.float64)
    assert torch.allclose(s16[1:] / s16[:-1], torch.full((15,), 2 ** -0.5, dtype=torch.float64))
    assert torch.equal(pos.alibi_slopes(1), torch.tensor([2.0 ** -8]))
    assert len(set(pos.alibi_slopes(6).tolist())) == 6


def test_alibi_bias_values_and_alignment():
    b = pos.alibi_bias(4, 3, 5)
    assert b.shape == (4, 3, 5) and b.dtype == torch.float32
    m = pos.alibi_slopes(4)
    # query 0 sits at position 2 (bottom-right): key 0 is 2 steps back, key 4 two steps ahead
    assert torch.allclose(b[:, 0], m[:, None] * torch.tensor([-2.0, -1, 0, 1, 2]))
    assert torch.equal(b.diagonal(offset=2, dim1=1, dim2=2), torch.zeros(4, 3))
    c = pos.alibi_bias(4, 3, 5, causal=True)
    assert torch.isinf(c[:, 0, 3:]).all() and (c[:, 0, 3:] < 0).all()
    assert torch.equal(c[:, 2], b[:, 2])
    assert torch.equal(pos.alibi_bias(2, 4), pos.alibi_bias(2, 4, 4))
    with pytest.raises(ValueError, match="L <= S"):
        pos.alibi_bias(2, 5, 3)
    with pytest.raises(ValueError, match="H >= 1"):
        pos.alibi_slopes(0)


def test_alibi_through_every_implementation_equals_torch():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 6, 8, generator=g, dtype=torch.float64)
    k, v = torch.randn(2, 2, 4, 9, 8, generator=g, dtype=torch.float64).unbind(0)
    bias = pos.alibi_bias(4, 6, 9, causal=True, dtype=torch.float64)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    for name, attend in IMPLEMENTATIONS.items():
        got = attend(q, k, v, attn_mask=bias)
        assert torch.allclose(got, want, atol=1e-10), name
    # the bias changes the output (it is not a no-op) and the causal part matters
    assert not torch.allclose(F.scaled_dot_product_attention(q, k, v), want)
