"""Chapter 3 helpers: stable forms, thresholds, Jacobian, softmax in blocks."""

import math

import pytest
import torch

from course_lib.chapters.ch03_softmax import helpers as st


@pytest.mark.parametrize("shape,dim", [((7,), -1), ((3, 5), -1), ((4, 6), 0), ((2, 3, 9), 1)])
def test_stable_softmax_matches_torch(shape, dim):
    x = torch.randn(*shape, dtype=torch.float64) * 5
    torch.testing.assert_close(st.stable_softmax(x, dim), torch.softmax(x, dim))


def test_naive_overflows_but_stable_does_not():
    x = torch.tensor([1000.0, 999.0, 0.0])
    assert torch.isnan(st.naive_softmax(x)).any()
    torch.testing.assert_close(st.stable_softmax(x), torch.softmax(x, -1))


def test_neg_inf_entries_and_dead_rows():
    x = torch.tensor([[0.0, float("-inf"), 1.0], [float("-inf")] * 3])
    p = st.stable_softmax(x)
    assert p[0, 1] == 0 and torch.isclose(p[0].sum(), torch.tensor(1.0))
    assert torch.equal(p[1], torch.zeros(3))


def test_logsumexp_and_log_softmax():
    x = torch.randn(4, 11, dtype=torch.float64) * 300
    torch.testing.assert_close(st.logsumexp(x), torch.logsumexp(x, -1))
    torch.testing.assert_close(st.log_softmax(x), torch.log_softmax(x, -1))
    assert torch.isfinite(st.log_softmax(x)).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_overflow_limits_are_where_exp_overflows(dtype):
    lim = st.overflow_limits(dtype)
    assert lim.exp_overflow == pytest.approx(math.log(torch.finfo(dtype).max))
    grid = st.first_overflow(dtype, step=0.01)
    # input rounding to dtype moves the observed point by at most one ulp of x
    assert abs(grid - lim.exp_overflow) < 0.01 + 2 * lim.exp_overflow * torch.finfo(dtype).eps
    assert torch.exp(torch.tensor(lim.exp_underflow - 1.0, dtype=dtype)) == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_underflow_limit_is_half_the_smallest_subnormal(dtype):
    """exp rounds to nearest: 0 only below ln(s/2), s the smallest subnormal; a scan finds it."""
    fi = torch.finfo(dtype)
    s = fi.smallest_normal * fi.eps
    lim = st.overflow_limits(dtype)
    assert lim.exp_underflow == pytest.approx(math.log(s) - math.log(2))
    assert lim.exp_underflow < math.log(s) - 0.69  # not ln(s)
    seen = st.first_underflow(dtype)
    # the scan rounds x to dtype first: it may move by half the spacing of dtype near x
    spacing = 2.0 ** math.floor(math.log2(-lim.exp_underflow)) * fi.eps  # ulp of x there
    assert abs(seen - lim.exp_underflow) <= 0.01 + spacing / 2 + 1e-9
    assert torch.exp(torch.tensor(seen, dtype=dtype)) == 0
    assert torch.exp(torch.tensor(seen + 0.01, dtype=dtype)) > 0


def test_float16_exp_minus_17_is_not_zero():
    """ln(smallest float16 subnormal) ≈ −16.64, yet exp(−17) rounds up to that subnormal."""
    s = torch.finfo(torch.float16).smallest_normal * torch.finfo(torch.float16).eps
    assert float(torch.exp(torch.tensor(-17.0, dtype=torch.float16))) == s
    assert st.overflow_limits(torch.float16).exp_underflow == pytest.approx(-17.3287, abs=1e-4)


def test_float16_threshold_value():
    assert st.overflow_limits(torch.float16).exp_overflow == pytest.approx(11.0899, abs=1e-4)


def test_jacobian_matches_autograd():
    x = torch.randn(6, dtype=torch.float64)
    auto = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1), x)
    torch.testing.assert_close(st.softmax_jacobian(torch.softmax(x, -1)), auto)


def test_jacobian_norm_vanishes_when_saturated():
    x = torch.tensor([3.0, 1.0, 0.0, -1.0])
    assert st.jacobian_norm(x, 0.0) == pytest.approx(0.25)  # uniform over 4: 1/n
    assert st.jacobian_norm(x, 1.0) <= 0.5
    assert st.jacobian_norm(x, 50.0) < 1e-30


def test_entropy_limits():
    assert float(st.entropy(torch.full((8,), 1 / 8))) == pytest.approx(math.log(8))
    assert float(st.entropy(torch.tensor([1.0, 0.0, 0.0]))) == 0.0


@pytest.mark.parametrize("n,block", [(10, 4), (16, 8), (7, 1), (5, 9)])
def test_softmax_in_blocks(n, block):
    x = torch.randn(3, n, dtype=torch.float64) * 20
    torch.testing.assert_close(st.softmax_in_blocks(x, block), torch.softmax(x, -1))


def test_combine_stats_equals_whole():
    x = torch.randn(12, dtype=torch.float64) * 10
    m, l = st.combine_stats(*st.block_stats(x[:5]), *st.block_stats(x[5:]))
    m_all, l_all = st.block_stats(x)
    assert float(m) == float(m_all)
    torch.testing.assert_close(l, l_all)
