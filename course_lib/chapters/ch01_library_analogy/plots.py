"""Figures of chapter 1 (the library analogy): temperature sweep, lookup bars, Q/K/V heatmaps."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from course_lib.toolkit.plotting import heatmap

from .helpers import Library, soft_lookup

BOOK_COLOURS = ("#d55e00", "#0072b2", "#009e73", "#cc79a7", "#e69f00")


def temperature_sweep(
    library: Library, query: torch.Tensor, temperatures: Sequence[float]
) -> torch.Tensor:
    """``(len(temperatures), n_books)`` soft-lookup weights, one row per temperature."""
    return torch.stack([soft_lookup(query, library.keys, library.values, t)[0]
                        for t in temperatures])


def plot_temperature_sweep(
    ax: plt.Axes, library: Library, query: torch.Tensor, temperatures: Sequence[float],
    query_name: str = "query",
) -> torch.Tensor:
    """One line per book: its weight as the temperature goes from near 0 (hard) to large
    (uniform). Returns the plotted ``(T, n)`` weights."""
    w = temperature_sweep(library, query, temperatures)
    for i, title in enumerate(library.titles):
        ax.plot(temperatures, w[:, i].numpy(), color=BOOK_COLOURS[i % len(BOOK_COLOURS)],
                label=title, lw=2)
    n = len(library.titles)
    ax.axhline(1.0 / n, color="grey", ls=":", lw=1)
    ax.annotate(f"uniform 1/{n}", (temperatures[-1], 1.0 / n), textcoords="offset points",
                xytext=(-4, 4), ha="right", fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("temperature T (log scale, dimensionless)")
    ax.set_ylabel("attention weight")
    ax.set_title(f"Soft lookup for {query_name!r}: from hard to uniform")
    ax.legend(fontsize=8, loc="center right", frameon=False)
    return w


def draw_lookup(
    fig: plt.Figure, library: Library, query: torch.Tensor, temperature: float,
    caption: str = "",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two bar charts side by side: the weight of each book, and the blend of contents the query
    retrieves. Returns ``(weights (n,), retrieved (m,))`` exactly as plotted."""
    weights, retrieved = soft_lookup(query, library.keys, library.values, temperature)
    ax_w, ax_r = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})
    y = np.arange(len(library.titles))
    ax_w.barh(y, weights.numpy(), color=BOOK_COLOURS[: len(y)])
    ax_w.set_yticks(y, labels=list(library.titles))
    ax_w.invert_yaxis()
    ax_w.set_xlim(0, 1)
    ax_w.set_xlabel("attention weight (sums to 1)")
    ax_w.set_title("which books the query reads")
    for yi, wi in zip(y, weights.tolist(), strict=True):
        ax_w.text(min(wi + 0.02, 0.85), yi, f"{wi:.2f}", va="center", fontsize=8)
    x = np.arange(len(library.contents))
    ax_r.bar(x, retrieved.numpy(), color="#56b4e9")
    ax_r.set_xticks(x, labels=list(library.contents), rotation=20)
    ax_r.set_ylim(0, 1)
    ax_r.set_ylabel("fraction of retrieved content")
    ax_r.set_title("what it retrieves: weights @ values")
    if caption:
        fig.suptitle(caption, fontsize=10)
    fig.tight_layout()
    return weights, retrieved


def diverging_heatmap(
    ax: plt.Axes, matrix: torch.Tensor, tokens: Sequence[str], key_tokens: Sequence[str],
    title: str, lim: float | None = None, fmt: str = "{:.1f}",
) -> None:
    """A heatmap centred on 0 (blue negative, red positive), annotated in a colour that stays
    readable: dark text on pale cells, white text on saturated ones."""
    data = matrix.detach().double().cpu().numpy()
    lim = float(np.abs(data).max()) if lim is None else lim
    heatmap(ax, data, tokens, key_tokens, title=title, cmap="RdBu_r", vmin=-lim, vmax=lim)
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            ax.text(j, i, fmt.format(data[i, j] + 0.0), ha="center", va="center", fontsize=8,
                    color="white" if abs(data[i, j]) > 0.6 * lim else "black")


def plot_steps(
    fig: plt.Figure, scaled: torch.Tensor, weights: torch.Tensor, tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
) -> None:
    """Scaled scores and attention weights of a worked example, as labelled heatmaps."""
    key_tokens = tokens if key_tokens is None else key_tokens
    ax_s, ax_w = fig.subplots(1, 2)
    diverging_heatmap(ax_s, scaled, tokens, key_tokens,
                      title=r"scaled scores $QK^\top/\sqrt{E}$")
    heatmap(ax_w, weights, tokens, key_tokens, title="attention weights (rows sum to 1)",
            vmin=0.0, vmax=1.0, annotate=True)
    fig.tight_layout()


def plot_tied_vs_untied(
    fig: plt.Figure, untied: torch.Tensor, tied: torch.Tensor, tokens: Sequence[str]
) -> None:
    """Raw scores with independent W_Q, W_K next to scores with W_K = W_Q (a symmetric matrix)."""
    lim = float(max(untied.abs().max(), tied.abs().max()))
    ax_u, ax_t = fig.subplots(1, 2)
    diverging_heatmap(ax_u, untied, tokens, tokens, title=r"independent $W_Q, W_K$", lim=lim)
    diverging_heatmap(ax_t, tied, tokens, tokens, title=r"tied $W_K = W_Q$: symmetric", lim=lim)
    fig.tight_layout()
