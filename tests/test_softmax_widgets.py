"""The Softmax chapter's explorer and figures, drawn headlessly."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_lib.chapters.ch03_softmax import explorer as ws
from course_lib.chapters.ch03_softmax import plots as ps


@pytest.mark.parametrize("t,boost", [(1.0, 0.0), (0.1, 3.0), (10.0, -2.0)])
def test_draw_shows_softmax_of_logits_over_t(t, boost):
    fig = plt.figure()
    p = ws.draw_temperature(fig, temperature=t, boost=boost)
    expected = torch.softmax(ws.logits_for(boost) / t, -1).numpy()
    np.testing.assert_allclose(p, expected)
    heights = [r.get_height() for r in fig.axes[1].patches]
    np.testing.assert_allclose(heights, expected)
    assert ws.logits_for(boost)[2] == ws.BASE_LOGITS[2] + boost
    plt.close(fig)


def test_explorer_controls_and_frames():
    e = ws.temperature_explorer()
    frames = e.player_frames()
    assert 2 <= len(frames) <= 15
    assert [f["temperature"] for f in frames] == list(ws.TEMPERATURES)
    plt.close(e.render())


def test_low_temperature_is_peaked_high_is_flat():
    fig = plt.figure()
    cold = ws.draw_temperature(fig, temperature=0.1)
    hot = ws.draw_temperature(plt.figure(), temperature=10.0)
    assert cold.max() > 0.99 and hot.max() - hot.min() < 0.1
    plt.close("all")


def test_plot_temperature_and_saturation():
    fig, ax = plt.subplots()
    logits = torch.tensor([2.0, 1.0, 0.0])
    w = ps.plot_temperature(ax, logits, [0.5, 1.0], ["a", "b", "c"])
    np.testing.assert_allclose(w[1], torch.softmax(logits.double(), -1).numpy())
    fig2 = plt.figure()
    pmax, jn = ps.plot_saturation(fig2, logits, [0.1, 1.0, 100.0], [1.0])
    assert pmax[-1] > 0.999 and jn[-1] < 1e-6 and jn[1] > jn[-1]
    drawn = ps.plot_exp_range(plt.subplots()[1], [torch.float16, torch.float32])
    assert drawn[torch.float16][1] < 12 < drawn[torch.float32][1]
    plt.close("all")


def test_every_book_frame_draws():
    for frame in ws.temperature_explorer().player_frames():
        p = ws.draw_temperature(plt.figure(), **frame)
        assert abs(p.sum() - 1) < 1e-12
        plt.close("all")
