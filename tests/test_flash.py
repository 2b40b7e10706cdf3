"""course_lib.flash: tiling, online softmax, and the never-an-(L, S)-tensor property."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import flash, reference
from course_lib.chapters.ch08_flash.helpers import ShapeRecorder


def _big_tensors(shapes, L, S):
    return [(op, s) for op, s in shapes
            if torch.Size(s).numel() >= L * S or tuple(s[-2:]) == (L, S)]


@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"attn_mask": "padding"}])
def test_flash_never_creates_an_L_by_S_tensor(kwargs):
    L = S = 2048
    q, k, v = (torch.randn(1, 2, L, 16) for _ in range(3))
    if kwargs.get("attn_mask") == "padding":
        kwargs = {"attn_mask": torch.arange(S)[None, None, None, :] < 2000}   # (1, 1, 1, S)
    with ShapeRecorder() as rec:
        out = flash.scaled_dot_product_attention(q, k, v, **kwargs)
    assert len(rec.shapes) > 50                       # the recorder really saw the tile loop
    assert _big_tensors(rec.shapes, L, S) == []
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, **kwargs), atol=1e-5)


def test_shape_recorder_catches_the_reference_scores():
    """Control: the same check fails on the textbook implementation."""
    L = S = 256
    q = torch.randn(1, 1, L, 8)
    with ShapeRecorder() as rec:
        reference.scaled_dot_product_attention(q, q, q)
    assert _big_tensors(rec.shapes, L, S)


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 40), S=st.integers(1, 40), bq=st.integers(1, 50), bk=st.integers(1, 50),
       causal=st.booleans())
def test_any_block_size_gives_the_same_answer(L, S, bq, bk, causal):
    g = torch.Generator().manual_seed(L * 100 + S)
    q = torch.randn(2, L, 5, generator=g, dtype=torch.float64)
    k = torch.randn(2, S, 5, generator=g, dtype=torch.float64)
    v = torch.randn(2, S, 3, generator=g, dtype=torch.float64)
    out = flash.scaled_dot_product_attention(q, k, v, is_causal=causal, block_size=(bq, bk))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert torch.allclose(out, ref, rtol=1e-10, atol=1e-12)


def test_int_and_pair_block_sizes_agree_and_default_is_a_pair():
    q = torch.randn(3, 37, 8, dtype=torch.float64)
    a = flash.scaled_dot_product_attention(q, q, q, block_size=7)
    b = flash.scaled_dot_product_attention(q, q, q, block_size=(7, 7))
    assert torch.equal(a, b)
    assert len(flash.DEFAULT_BLOCK_SIZE) == 2


@pytest.mark.parametrize("bad", [0, -4, (4,), (4, 0), 2.5, (2, "x"), True])
def test_bad_block_size_is_a_value_error(bad):
    q = torch.randn(4, 8)
    with pytest.raises(ValueError, match="block_size"):
        flash.scaled_dot_product_attention(q, q, q, block_size=bad)


def test_gradcheck_through_the_tiles():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 3, generator=g, dtype=torch.float64, requires_grad=True)
               for n in (5, 7, 7))
    mask = torch.rand(5, 7, generator=g) < 0.6
    mask[2] = False                                    # a fully masked row inside a tile
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                           block_size=(2, 3)), (q, k, v))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_accumulate_in_float32_and_return_input_dtype(dtype):
    q, k, v = (torch.randn(2, 64, 16) for _ in range(3))
    out = flash.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), block_size=8)
    assert out.dtype == dtype
    exact = F.scaled_dot_product_attention(q, k, v)
    # float32 accumulation: error is the input/output rounding only
    assert (out.float() - exact).norm() / exact.norm() < 1e-2


def test_online_statistics_equal_the_one_shot_softmax():
    """With V = I the output is the weight matrix itself, whatever the tiling."""
    q, k = torch.randn(9, 4, dtype=torch.float64), torch.randn(13, 4, dtype=torch.float64)
    eye = torch.eye(13, dtype=torch.float64)
    weights = flash.scaled_dot_product_attention(q, k, eye, block_size=(4, 5))
    assert torch.allclose(weights, reference.attention_weights(q, k), atol=1e-14)
    assert torch.allclose(weights.sum(-1), torch.ones(9, dtype=torch.float64))


def test_row_dead_in_early_tiles_then_very_negative_scores():
    """m stays -inf while a row has seen no key, so later scores of -1e4 do not underflow."""
    q, k, v = (torch.randn(1, 6, 4, dtype=torch.float64) for _ in range(3))
    mask = torch.full((6, 6), -1e4, dtype=torch.float64)
    mask[:, :3] = float("-inf")                        # first key tile: every row dead
    out = flash.scaled_dot_product_attention(q, k, v, attn_mask=mask, block_size=3)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert ref.abs().sum() > 0
    assert torch.allclose(out, ref, rtol=1e-10, atol=1e-12)


def test_dropout_path_keeps_gradients_and_matches_the_same_mask():
    """With V = I the output is the dropped weight matrix, so its gradient is checkable."""
    torch.manual_seed(1)
    q = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(10, 4, dtype=torch.float64)
    eye = torch.eye(10, dtype=torch.float64)
    dropped = flash.scaled_dot_product_attention(q, k, eye, dropout_p=0.5, block_size=(4, 3))
    kept = dropped.detach() != 0
    weights = reference.attention_weights(q, k)
    assert torch.allclose(dropped, torch.where(kept, 2 * weights, 0.0))
    grad_out = torch.randn(6, 10, dtype=torch.float64)
    (g,) = torch.autograd.grad(dropped, q, grad_out)
    (g_ref,) = torch.autograd.grad(torch.where(kept, 2 * weights, 0.0), q, grad_out)
    assert torch.allclose(g, g_ref, atol=1e-12)
