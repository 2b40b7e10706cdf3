"""course_lib.masks: causal, padding, combining, additive conversion."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import IMPLEMENTATIONS, masks


@settings(max_examples=30, deadline=None)
@given(L=st.integers(0, 12), S=st.integers(0, 12))
def test_causal_mask_is_torchs_is_causal(L, S):
    m = masks.causal_mask(L, S)
    assert m.shape == (L, S) and m.dtype == torch.bool
    for i in range(L):
        for j in range(S):
            assert m[i, j] == (j <= i)
    if L and S:
        q, k = torch.randn(L, 4), torch.randn(S, 4)
        assert torch.allclose(F.scaled_dot_product_attention(q, k, k, attn_mask=m),
                              F.scaled_dot_product_attention(q, k, k, is_causal=True))


def test_causal_mask_square_default_and_negative_length():
    assert torch.equal(masks.causal_mask(3), masks.causal_mask(3, 3))
    with pytest.raises(ValueError, match="L=-1"):
        masks.causal_mask(-1)


def test_padding_mask_shape_and_values():
    tokens = torch.tensor([[5, 6, 0, 0], [7, 0, 0, 0]])
    m = masks.padding_mask(tokens)
    assert m.shape == (2, 1, 1, 4) and m.dtype == torch.bool
    assert m[:, 0, 0].tolist() == [[True, True, False, False], [True, False, False, False]]
    assert masks.padding_mask(tokens, pad_id=5)[0, 0, 0].tolist() == [False, True, True, True]
    with pytest.raises(ValueError, match=r"\(B, S\)"):
        masks.padding_mask(torch.zeros(4))


@pytest.mark.parametrize("name", list(IMPLEMENTATIONS))
def test_padding_mask_makes_pad_values_irrelevant(name):
    tokens = torch.tensor([[3, 4, 5, 0, 0]])
    q, k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    v2 = v.clone()
    v2[..., 3:, :] = 1e3                               # garbage in the padded positions
    m = masks.padding_mask(tokens)
    attend = IMPLEMENTATIONS[name]
    assert torch.allclose(attend(q, k, v, attn_mask=m), attend(q, k, v2, attn_mask=m), atol=1e-5)


def test_combine_masks_is_a_broadcast_and():
    c = masks.causal_mask(4)
    p = masks.padding_mask(torch.tensor([[1, 1, 1, 0]]))
    both = masks.combine_masks(c, p, None)
    assert both.shape == (1, 1, 4, 4)
    assert torch.equal(both[0, 0], c & torch.tensor([True, True, True, False]))
    assert masks.combine_masks(None, None) is None
    with pytest.raises(TypeError, match="bool"):
        masks.combine_masks(c, c.float())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_to_additive_matches_the_bool_mask_where_a_key_survives(dtype):
    m = torch.rand(2, 5, 6) < 0.6
    m[:, :, 0] = True                                  # every row keeps one key
    q, k, v = (torch.randn(2, n, 4, dtype=dtype) for n in (5, 6, 6))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    for fill in ["-inf", "finfo_min", -1e4]:
        add = masks.to_additive(m, dtype, fill=fill)
        assert add.dtype == dtype and torch.all(add[m] == 0)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=add)
        assert torch.allclose(out.float(), expected.float(), atol=2e-2)


def test_to_additive_fill_values_and_the_dead_row_trade_off():
    m = torch.tensor([[True, False], [False, False]])
    assert masks.to_additive(m, torch.float32)[0, 1] == float("-inf")
    fmin = masks.to_additive(m, torch.float16, fill="finfo_min")
    assert fmin[0, 1] == torch.finfo(torch.float16).min
    assert masks.to_additive(m, torch.float32, fill=-1e9)[0, 1] == -1e9
    # -1e9 does not fit in float16: it becomes -inf
    assert masks.to_additive(m, torch.float16, fill=-1e9)[0, 1] == float("-inf")
    # a fully masked row: -inf gives zeros in SDPA, finfo.min gives a uniform average
    v = torch.tensor([[1.0], [3.0]])
    q = torch.zeros(2, 1)
    dead_inf = F.scaled_dot_product_attention(q, q, v, attn_mask=masks.to_additive(m))[1]
    dead_min = F.scaled_dot_product_attention(
        q, q, v, attn_mask=masks.to_additive(m, fill="finfo_min"))[1]
    assert dead_inf.item() == 0.0 and dead_min.item() == pytest.approx(2.0)
    with pytest.raises(ValueError, match="fill"):
        masks.to_additive(m, fill="big")
    with pytest.raises(TypeError):
        masks.to_additive(m.float())
