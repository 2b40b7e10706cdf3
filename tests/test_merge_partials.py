"""merge_partials / partial_attention (course_lib.attention.merge): splitting the keys into
blocks, attending to each and merging by log-sum-exp gives full attention exactly, values and
gradients; the max shift keeps huge scores finite; empty rows merge as the empty set."""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import reference
from course_lib.attention.merge import merge_partials, partial_attention


def _qkv(L=5, S=9, E=4, Ev=3, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 3, L, E, generator=g, dtype=dtype),
            torch.randn(2, 3, S, E, generator=g, dtype=dtype),
            torch.randn(2, 3, S, Ev, generator=g, dtype=dtype))


@pytest.mark.parametrize("cut", [1, 4, 8])
def test_two_blocks_merge_to_full_attention(cut):
    q, k, v = _qkv()
    a = partial_attention(q, k[..., :cut, :], v[..., :cut, :])
    b = partial_attention(q, k[..., cut:, :], v[..., cut:, :])
    out, lse = merge_partials(*a, *b)
    want = reference.scaled_dot_product_attention(q, k, v)
    assert (out - want).abs().max().item() < 1e-12
    full_lse = torch.logsumexp(q @ k.transpose(-2, -1) / 2.0, dim=-1)   # E = 4: s = 1/2
    assert (lse - full_lse).abs().max().item() < 1e-12


def test_merge_is_associative_and_commutative():
    q, k, v = _qkv(S=12)
    parts = [partial_attention(q, k[..., i:i + 4, :], v[..., i:i + 4, :]) for i in (0, 4, 8)]
    left = merge_partials(*merge_partials(*parts[0], *parts[1]), *parts[2])
    right = merge_partials(*parts[2], *merge_partials(*parts[1], *parts[0]))
    for x, y in zip(left, right, strict=True):
        assert (x - y).abs().max().item() < 1e-12


def test_gradients_flow_through_the_merge():
    q, k, v = (t.requires_grad_() for t in _qkv())
    out, _ = merge_partials(*partial_attention(q, k[..., :3, :], v[..., :3, :]),
                            *partial_attention(q, k[..., 3:, :], v[..., 3:, :]))
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    q2, k2, v2 = (t.detach().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(
        reference.scaled_dot_product_attention(q2, k2, v2).square().sum(), (q2, k2, v2))
    for g, w in zip(grads, want, strict=True):
        assert (g - w).abs().max().item() < 1e-12


def test_huge_scores_stay_finite():
    # lse near 1000: e^1000 overflows float64; the shifted merge never forms it
    q, k, v = _qkv()
    a, b = partial_attention(q, k[..., :4, :], v[..., :4, :]), \
        partial_attention(q, k[..., 4:, :], v[..., 4:, :])
    shift = 1000.0
    out, lse = merge_partials(a[0], a[1] + shift, b[0], b[1] + shift)
    ref, ref_lse = merge_partials(*a, *b)
    assert torch.isfinite(out).all() and (out - ref).abs().max().item() < 1e-12
    assert (lse - shift - ref_lse).abs().max().item() < 1e-9


def test_empty_rows_merge_as_the_empty_set():
    q, k, v = _qkv(L=3, S=4)
    none = torch.zeros(3, 4, dtype=torch.bool)
    some = torch.tensor([[True, False, False, False], [False] * 4, [True] * 4])
    empty = partial_attention(q, k, v, mask=none)
    assert (empty[0] == 0).all() and (empty[1] == float("-inf")).all()
    part = partial_attention(q, k, v, mask=some)
    out, lse = merge_partials(*empty, *part)
    assert torch.equal(out, part[0]) and torch.equal(lse, part[1])
    both, both_lse = merge_partials(*empty, *empty)
    assert not both.isnan().any() and (both == 0).all() and (both_lse == float("-inf")).all()


def test_half_precision_is_accumulated_in_float32():
    q, k, v = _qkv(dtype=torch.bfloat16)
    out, lse = partial_attention(q, k, v)
    assert out.dtype == lse.dtype == torch.float32
    want = reference.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert (out.double() - want).abs().max().item() < 1e-5


def test_bad_shapes_name_the_arguments():
    o, lse = torch.zeros(2, 3, 4), torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"out_a \(2, 3, 4\) and out_b \(2, 3, 5\)"):
        merge_partials(o, lse, torch.zeros(2, 3, 5), lse)
    with pytest.raises(ValueError, match=r"needs lse \(2, 3\), got lse_a \(2, 3\) and lse_b "
                                         r"\(2, 3, 4\)"):
        merge_partials(o, lse, o, o)
    with pytest.raises(TypeError, match="lse_b must be a torch.Tensor"):
        merge_partials(o, lse, o, 1.0)
