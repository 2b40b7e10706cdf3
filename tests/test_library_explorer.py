"""Chapter 1 explorer and figures, drawn headlessly."""

import matplotlib.pyplot as plt
import numpy as np
import torch

from course_lib.chapters.ch01_library_analogy.explorer import draw_library, library_explorer
from course_lib.chapters.ch01_library_analogy.helpers import (
    attention_steps,
    embed,
    make_library,
    projections,
    soft_lookup,
)
from course_lib.chapters.ch01_library_analogy.plots import (
    plot_steps,
    plot_temperature_sweep,
    plot_tied_vs_untied,
)


def test_draw_library_plots_the_soft_lookup_of_the_interpolated_query():
    fig = plt.figure()
    w, r = draw_library(fig, mix=0.3, temperature=0.5, start="cooking", end="history")
    lib = make_library()
    q = 0.7 * lib.topic("cooking") + 0.3 * lib.topic("history")
    ew, er = soft_lookup(q, lib.keys, lib.values, 0.5)
    torch.testing.assert_close(w, ew)
    torch.testing.assert_close(r, er)
    ax_w, ax_r = fig.axes
    np.testing.assert_allclose([p.get_width() for p in ax_w.patches], ew.numpy())
    np.testing.assert_allclose([p.get_height() for p in ax_r.patches], er.numpy())
    plt.close(fig)


def test_explorer_mix_moves_weight_between_topics():
    ex = library_explorer()
    assert len(ex.player_frames()) <= 15
    first = ex.render(mix=0.0)
    last = ex.render(mix=1.0)
    w0 = [p.get_width() for p in first.axes[0].patches]
    w1 = [p.get_width() for p in last.axes[0].patches]
    titles = make_library().titles
    assert titles[int(np.argmax(w0))] == "Kitchen Basics"
    assert titles[int(np.argmax(w1))] == "Night Sky Atlas"
    plt.close("all")


def test_static_figures_draw():
    lib = make_library()
    fig, ax = plt.subplots()
    w = plot_temperature_sweep(ax, lib, lib.topic("history"), [0.1, 1.0, 10.0])
    assert w.shape == (3, 5)
    for i in range(5):  # one line per book, then the uniform reference line
        np.testing.assert_allclose(ax.lines[i].get_ydata(), w[:, i].numpy())
    tokens = "the cat sat".split()
    st = attention_steps(embed(tokens), **projections())
    fig2 = plt.figure()
    plot_steps(fig2, st.scaled, st.weights, tokens)
    assert len(fig2.axes) == 4  # two heatmaps + two colorbars
    fig3 = plt.figure()
    tied = attention_steps(embed(tokens), **projections(tied=True))
    plot_tied_vs_untied(fig3, st.scores, tied.scores, tokens)
    assert [t.get_text() for t in fig3.axes[0].get_xticklabels()] == tokens
    plt.close("all")


def test_diverging_heatmap_text_stays_readable():
    from course_lib.chapters.ch01_library_analogy.plots import diverging_heatmap

    fig, ax = plt.subplots()
    m = torch.tensor([[-4.0, 0.1], [2.0, 4.0]])
    diverging_heatmap(ax, m, ["a", "b"], ["x", "y"], title="t")
    colours = {t.get_text(): t.get_color() for t in ax.texts}
    assert colours == {"-4.0": "white", "0.1": "black", "2.0": "black", "4.0": "white"}
    assert ax.images[0].get_clim() == (-4.0, 4.0)
    plt.close(fig)
