"""Chapter 2 explorer and figures, drawn headlessly."""

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_lib.chapters.ch02_scaling.explorer import draw_scaling, scaling_explorer
from course_lib.chapters.ch02_scaling.helpers import entropy, random_qk, saturation_stats
from course_lib.chapters.ch02_scaling.plots import plot_jacobian, plot_saturation, plot_variance


@pytest.mark.parametrize("scaling", ["scaled", "unscaled"])
def test_draw_scaling_plots_softmax_of_the_right_scores(scaling):
    fig = plt.figure()
    out = draw_scaling(fig, d_k=256, scaling=scaling)
    q, k = random_qk(256, 256, 16, seed=0)
    s = q @ k.T / (16.0 if scaling == "scaled" else 1.0)
    torch.testing.assert_close(out["scores"], s)
    w = torch.softmax(s[0], -1)
    bars = [p.get_height() for p in fig.axes[1].patches]
    np.testing.assert_allclose(bars, w.numpy())
    assert out["entropy"].item() == pytest.approx(entropy(w).item())
    assert f"std {s.std().item():.1f}" in fig.axes[0].get_title()
    plt.close(fig)


def test_explorer_frames_and_saturation_visible():
    ex = scaling_explorer()
    frames = ex.player_frames()
    assert len(frames) <= 15 and {f["scaling"] for f in frames} == {"scaled", "unscaled"}
    big = max(p.get_height() for p in ex.render(d_k=1024, scaling="unscaled").axes[1].patches)
    soft = max(p.get_height() for p in ex.render(d_k=1024, scaling="scaled").axes[1].patches)
    assert big > 0.9 > 0.5 > soft
    with pytest.raises(ValueError):
        draw_scaling(plt.figure(), d_k=4, scaling="sqrt")
    plt.close("all")


def test_static_figures_draw():
    dims = [1, 4, 16]
    fig, ax = plt.subplots()
    plot_variance(ax, dims, [1.0, 4.1, 15.8], [1.0, 1.02, 0.99])
    assert len(ax.lines) == 4
    st = saturation_stats(dims, n_queries=50)
    fig2, axes = plt.subplots(1, 2)
    plot_saturation(axes, dims, st, n_keys=16)
    assert axes[1].get_ylim()[1] == pytest.approx(math.log(16) * 1.08)
    fig3, ax3 = plt.subplots()
    plot_jacobian(ax3, dims, st)
    np.testing.assert_allclose(ax3.lines[1].get_ydata(), st["scaled"]["jacobian"].numpy())
    plt.close("all")
