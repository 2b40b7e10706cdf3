"""Figures of chapter 14: where an idle head puts its attention, the layer patterns of four
open models, and what a layer keeps and reads per decoded token as the context grows."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch, Rectangle

from course_lib.toolkit.plotting import OKABE_ITO

KIND_COLOURS = {"G": OKABE_ITO["blue"], "L": OKABE_ITO["orange"], "D": OKABE_ITO["bluish green"]}
KIND_LABELS = {"G": "full (global) attention", "L": "sliding window (local)",
               "D": "Gated DeltaNet (linear)"}


def plot_sink_mass(ax: plt.Axes, reports: dict[str, dict[str, float]]) -> None:
    """Stacked bars, one per trained head: an unflagged query's mean weight on BOS, on the
    sink, and on every other token."""
    names = list(reports)
    bos = np.array([reports[n]["bos_quiet"] for n in names])
    sink = np.array([reports[n]["sink_quiet"] for n in names]).clip(0, 1)
    rest = (1 - bos - sink).clip(0, 1)
    x = np.arange(len(names))
    ax.bar(x, bos, color=OKABE_ITO["vermillion"], label="first token (BOS)")
    ax.bar(x, sink, bottom=bos, color=OKABE_ITO["sky blue"], hatch="//", label="learned sink")
    ax.bar(x, rest, bottom=bos + sink, color="#d9d9d9", label="other tokens")
    for i in range(len(names)):
        ax.text(i, bos[i] / 2, f"{bos[i]:.2f}", ha="center", va="center", fontsize=9)
        if sink[i] > 0.05:
            ax.text(i, bos[i] + sink[i] / 2, f"{sink[i]:.2f}", ha="center", va="center",
                    fontsize=9)
    ax.set_xticks(x, names)
    ax.set_ylim(0, 1.0)
    ax.set_ylabel("mean attention weight")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, frameon=False,
              fontsize=8)


def plot_patterns(ax: plt.Axes, patterns: dict[str, str]) -> None:
    """One row of cells per model, one cell per layer, coloured by the layer's kind."""
    for row, letters in enumerate(patterns.values()):
        for i, letter in enumerate(letters):
            ax.add_patch(Rectangle((i, row + 0.15), 0.9, 0.7, color=KIND_COLOURS[letter]))
    longest = max(len(p) for p in patterns.values())
    ax.set_xlim(0, longest)
    ax.set_ylim(len(patterns), 0)
    ax.set_yticks(np.arange(len(patterns)) + 0.5, list(patterns))
    ax.set_xlabel("layer")
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    used = sorted({ch for p in patterns.values() for ch in p}, key="GLD".index)
    ax.legend([Patch(color=KIND_COLOURS[k]) for k in used], [KIND_LABELS[k] for k in used],
              loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, frameon=False,
              fontsize=8)


def plot_growth(ax: plt.Axes, tokens: list[int], series: dict[str, list[float]], *,
                ylabel: str) -> None:
    """Log-log lines of ``series`` (one per label) against the context length."""
    for name, values in series.items():
        ax.plot(tokens, values, marker="o", markersize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
