"""The Multi-head chapter's explorer and figures, drawn headlessly."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_lib.attention.reference import attention_weights
from course_lib.chapters.ch04_multi_head import explorer as wm
from course_lib.chapters.ch04_multi_head import helpers as mt
from course_lib.chapters.ch04_multi_head import plots as pm


def _head_weights(layer, x, head):
    q, k, _ = layer.qkv(x).chunk(3, dim=-1)
    qh, kh = mt.split_heads(q, layer.num_heads), mt.split_heads(k, layer.num_heads)
    return attention_weights(qh, kh)[0, head]


@pytest.mark.parametrize("head,query", [(0, 4), (1, 7), (2, 9), (3, 0)])
def test_draw_head_plots_that_heads_weights(head, query):
    fig = plt.figure()
    row = wm.draw_head(fig, head=head, query=query)
    layer, x = mt.toy_heads_layer()
    with torch.no_grad():
        expected = _head_weights(layer, x, head)[query].numpy()
    np.testing.assert_allclose(row, expected, atol=1e-6)
    heights = [r.get_height() for r in fig.axes[1].patches]
    np.testing.assert_allclose(heights, expected, atol=1e-6)
    plt.close(fig)


def test_toy_heads_do_what_they_say():
    w = wm.toy_weights()
    toks = mt.TOY_SENTENCE
    n = len(toks)
    assert w[0, 1:].argmax(-1).tolist() == list(range(n - 1))    # previous token
    assert (w[2].argmax(-1) == 0).all()                           # first token
    for i, t in enumerate(toks):                                  # same word, spread evenly
        same = [j for j, u in enumerate(toks) if u == t]
        assert float(w[1, i, same].sum()) > 0.95
        assert float(w[1, i, same].std(unbiased=False)) < 1e-6


def test_explorer_frames_cover_every_head():
    e = wm.head_explorer()
    frames = e.player_frames()
    assert len(frames) <= 15
    assert {f["head"] for f in frames} == set(range(len(mt.TOY_HEADS)))
    plt.close(e.render())


def test_head_layout_figure_contents():
    out = pm.plot_head_layout(plt.figure(), tokens=4, num_heads=3, head_dim=2)
    E = 6
    # right: head h holds features h*D..h*D+D-1 of every token
    assert ((out["right"] % E) // 2 == torch.arange(3)[:, None, None]).all()
    # wrong: head 0 holds consecutive memory, i.e. all of token 0 and part of token 1
    assert out["wrong"][0].flatten().tolist() == list(range(8))
    plt.close("all")


def test_depth_profile_figure():
    fig = plt.figure()
    prof = {"attention only": {"spread": [1.0, 0.1], "rms": [1.0, 0.5]}}
    pm.plot_depth_profiles(fig, prof)
    assert len(fig.axes) == 2
    plt.close(fig)


def test_every_book_frame_draws():
    for frame in wm.head_explorer().player_frames():
        row = wm.draw_head(plt.figure(), **frame)
        assert abs(row.sum() - 1) < 1e-5
        plt.close("all")
