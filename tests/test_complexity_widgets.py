"""The complexity chapter's explorer and figures, drawn headlessly."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from course_lib.chapters.ch07_complexity import explorer as cw
from course_lib.chapters.ch07_complexity import helpers as cx
from course_lib.chapters.ch07_complexity import plots as cplots


@pytest.mark.parametrize("n,d", [(1024, 512), (64, 2048), (16384, 64)])
def test_draw_cost_plots_the_formula_breakdown(n, d):
    fig = plt.figure()
    parts = cw.draw_cost(fig, n=n, d=d)
    assert parts == cx.layer_flops_breakdown(n, d, cw.HEADS)
    bars = [p.get_width() for p in fig.axes[0].patches]
    np.testing.assert_allclose(bars, np.array(list(parts.values())) / 1e9)
    share_line = fig.axes[1].lines[1]                 # the marker at the current n
    core = parts["scores QKᵀ"] + parts["weights·V"]
    assert share_line.get_xdata()[0] == n
    assert share_line.get_ydata()[0] == pytest.approx(100 * core / sum(parts.values()))
    plt.close(fig)


def test_core_share_is_half_at_crossover():
    fig = plt.figure()
    parts = cw.draw_cost(fig, n=1024, d=512)
    plt.close(fig)
    core = parts["scores QKᵀ"] + parts["weights·V"]
    assert core * 2 == sum(parts.values())


def test_explorer_frames():
    ex = cw.cost_explorer()
    frames = ex.player_frames()
    assert 2 <= len(frames) <= 15
    assert [f["n"] for f in frames] == list(cw.NS) and {f["d"] for f in frames} == {512}


def test_figures():
    fig, ax = plt.subplots()
    assert cplots.plot_flops_vs_n(ax, [64, 256, 1024, 4096], 256) == 512
    plt.close(fig)
    fig, ax = plt.subplots()
    cplots.plot_memory_vs_n(ax, [128, 256, 512], heads=8, cache_bytes=32 * 2**20)
    y = ax.lines[0].get_ydata()
    np.testing.assert_allclose(y, [8 * n * n * 4 / 2**20 for n in (128, 256, 512)])
    plt.close(fig)
    records = [{"impl": "a", "n": n, "seconds": 1e-6 * n**2, "peak_bytes": 4 * n**2}
               for n in (128, 256, 512)]
    fig, axes = plt.subplots(1, 2)
    fitted = cplots.plot_measured(axes, records)
    assert fitted["seconds"]["a"] == pytest.approx(2.0)
    assert "slope 2.0" in axes[0].get_legend().get_texts()[0].get_text()
    plt.close(fig)
    # memory fitted on its own range: a noisy small point below min_n_memory is left out
    noisy = [{**r, "peak_bytes": r["peak_bytes"] + (2**20 if r["n"] == 128 else 0)}
             for r in records]
    fig, axes = plt.subplots(1, 2)
    both = cplots.plot_measured(axes, noisy, min_n=128)
    apart = cplots.plot_measured(axes, noisy, min_n=128, min_n_memory=256)
    assert both["peak_bytes"]["a"] < 1.8
    assert apart["peak_bytes"]["a"] == pytest.approx(2.0)
    assert apart["seconds"]["a"] == pytest.approx(2.0)
    plt.close(fig)
    fig, ax = plt.subplots()
    cplots.plot_rate_vs_n(ax, [{"impl": "a", "n": 256, "rate": 10.0},
                               {"impl": "a", "n": 512, "rate": 5.0}], cliff_n=300)
    assert list(ax.lines[0].get_ydata()) == [10.0, 5.0]
    plt.close(fig)
