"""Chapter 6 helpers: textbook code, mask conventions, L != S alignment, fill values."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from course_lib import masks, reference
from course_lib.attention import MultiHeadAttention
from course_lib.chapters.ch06_masks import helpers as mt


def test_textbook_attention_is_nan_on_dead_rows_and_matches_elsewhere():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 4, 8).unbind(0)
    mask = masks.causal_mask(4).clone()
    mask[2] = False                                         # row 2 dead
    out, w = mt.textbook_attention(q, k, v, mask)
    assert torch.isnan(out[2]).all() and torch.isnan(w[2]).all()
    ref = reference.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    live = torch.tensor([0, 1, 3])
    torch.testing.assert_close(out[live], ref[live])
    assert torch.all(ref[2] == 0)


def test_finite_fill_gives_uniform_dead_row():
    q, k, v = torch.randn(3, 5, 4).unbind(0)
    dead = torch.zeros(5, 5, dtype=torch.bool)
    _, w = mt.textbook_attention(q, k, v, dead, fill=-1e9)
    torch.testing.assert_close(w, torch.full((5, 5), 0.2))


def test_key_padding_conversion_matches_nn_multihead_attention():
    torch.manual_seed(3)
    mha = torch.nn.MultiheadAttention(12, 3, batch_first=True)
    ours = MultiHeadAttention.from_torch(mha)
    x = torch.randn(2, 5, 12)
    tokens = torch.tensor([[4, 5, 6, 0, 0], [7, 8, 9, 1, 2]])
    pad = masks.padding_mask(tokens)
    kpm = mt.to_key_padding_mask(pad)
    assert kpm.tolist() == [[False, False, False, True, True], [False] * 5]
    assert torch.equal(mt.from_key_padding_mask(kpm), pad)
    causal = masks.causal_mask(5)
    expected, _ = mha(x, x, x, key_padding_mask=kpm, attn_mask=mt.to_mha_attn_mask(causal),
                      need_weights=False)
    got = ours(x, attn_mask=masks.combine_masks(pad, causal))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_tutorial_convention_conversion():
    torch.manual_seed(4)
    q, k, v = torch.randn(3, 2, 1, 4, 8).unbind(0)
    keep = torch.tensor([[1, 1, 0, 1], [1, 0, 0, 0]])[:, None, None, :]
    expected = reference.scaled_dot_product_attention(q, k, v, attn_mask=mt.from_keep01(keep))
    torch.testing.assert_close(mt.tutorial_attention(q, k, v, keep), expected)
    assert mt.from_keep01(keep).dtype == torch.bool


def test_bottom_right_mask_is_what_decoding_needs():
    for L, S in [(1, 6), (3, 6), (6, 6), (2, 3)]:
        br = mt.causal_mask_bottom_right(L, S)
        assert torch.equal(br, causal_lower_right(L, S)._materialize())
    assert torch.equal(mt.causal_mask_bottom_right(4, 4), masks.causal_mask(4))
    torch.manual_seed(5)
    q, k, v = torch.randn(3, 7, 4).unbind(0)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = reference.scaled_dot_product_attention(q[-2:, :], k, v,
                                                 attn_mask=mt.causal_mask_bottom_right(2, 7))
    torch.testing.assert_close(out, full[-2:])


def test_fill_value_rows_facts():
    rows = {(r["dtype"], r["fill"]): r for r in mt.fill_value_rows()}
    assert rows[("float16", "-1e+09")]["stored"] == -math.inf
    assert rows[("float16", "-1e+09")]["dead row"] == "NaN"
    assert rows[("float16", "finfo_min")]["score + fill"] == -math.inf
    assert rows[("float32", "finfo_min")]["dead row"] == "uniform 1/4"
    assert rows[("float32", "-inf")]["dead row"] == "NaN"
    assert rows[("bfloat16", "-1e+09")]["stored"] == torch.tensor(-1e9, dtype=torch.bfloat16).item()
    assert all(r["masked weight (live row)"] == 0 for r in rows.values())
    # masked_fill refuses -1e9 on float16 scores (it does not convert it to -inf)
    assert rows[("float16", "-1e+09")]["masked_fill(fill)"].startswith("RuntimeError")
    assert rows[("bfloat16", "-1e+09")]["masked_fill(fill)"] == "ok"
    assert all(rows[(d, "-inf")]["masked_fill(fill)"] == "ok" for d in ("float16", "float32"))


def test_dead_row_verdict_and_table():
    assert mt.dead_row_verdict(torch.tensor([float("nan")] * 3)) == "NaN"
    assert mt.dead_row_verdict(torch.zeros(3)) == "zeros"
    assert mt.dead_row_verdict(torch.full((4,), 0.25)) == "uniform 1/4"
