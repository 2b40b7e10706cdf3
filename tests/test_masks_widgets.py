"""The masks chapter's explorer and figures, drawn headlessly."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_lib import masks, reference
from course_lib.chapters.ch06_masks import explorer as mw
from course_lib.chapters.ch06_masks import plots as mask_plots
from course_lib.chapters.ch06_masks.helpers import causal_mask_bottom_right


def test_batch_tokens_pads_only_the_chosen_sequence():
    t = mw.batch_tokens(sequence=2, pads=3)
    assert t.shape == (3, 6)
    assert t[2, -3:].eq(mw.PAD_ID).all() and t[2, :3].ne(mw.PAD_ID).all()
    assert t[:2].ne(mw.PAD_ID).all()
    assert mw.token_labels(t)[2][-3:] == [mw.PAD_LABEL] * 3


@pytest.mark.parametrize("sequence,pads,causal", [(1, 2, "off"), (0, 4, "on"), (2, 0, "on")])
def test_draw_plots_the_masked_attention_weights(sequence, pads, causal):
    fig = plt.figure()
    drawn = mw.draw_padded_batch(fig, sequence=sequence, pads=pads, causal=causal)
    plt.close(fig)
    tokens = mw.batch_tokens(sequence, pads)
    q, k = mw.queries_keys(tokens)
    S = tokens.shape[1]
    allowed = (tokens[sequence] != mw.PAD_ID)[None, :].expand(S, S)
    if causal == "on":
        allowed = allowed & torch.ones(S, S, dtype=torch.bool).tril()
    expected = reference.attention_weights(q[sequence], k[sequence], attn_mask=allowed)[0]
    np.testing.assert_allclose(drawn, expected.numpy(), atol=1e-6)
    assert np.all(drawn[~allowed.numpy()] == 0)         # hidden keys get exactly zero
    np.testing.assert_allclose(drawn.sum(-1), 1.0, atol=1e-6)


def test_pads_change_only_pad_columns_not_the_real_outputs():
    # causal on: the weights of the real query rows over real keys do not depend on later pads
    w0 = mw.explorer_weights(sequence=1, pads=0, causal="on")[1, 0]
    w2 = mw.explorer_weights(sequence=1, pads=2, causal="on")[1, 0]
    torch.testing.assert_close(w0[:4], w2[:4])


def test_explorer_controls_and_book_frames():
    ex = mw.padded_batch_explorer()
    frames = ex.player_frames()
    assert len(frames) <= 15
    assert {f["causal"] for f in frames} == {"off", "on"}
    assert {f["pads"] for f in frames} == set(range(5))
    fig = ex.render()
    assert len(fig.axes) >= 2
    plt.close(fig)


def test_figures_draw():
    tokens = mw.batch_tokens(1, 2)
    fig = plt.figure()
    mask_plots.plot_broadcast(fig, masks.padding_mask(tokens), masks.causal_mask(6),
                              mw.token_labels(tokens))
    assert len(fig.axes) == 2 + 3
    plt.close(fig)
    fig = plt.figure()
    mask_plots.plot_alignment(fig, masks.causal_mask(2, 5), causal_mask_bottom_right(2, 5))
    titles = [ax.get_title() for ax in fig.axes]
    assert any("top-left" in t for t in titles) and any("bottom-right" in t for t in titles)
    plt.close(fig)


def test_draw_mask_rejects_3d():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError):
        mask_plots.draw_mask(ax, torch.ones(2, 2, 2, dtype=torch.bool))
    plt.close(fig)
