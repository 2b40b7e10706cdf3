"""Plotting primitives shared by every chapter: one style, one heatmap, one rate-vs-length plot.

Figures use an opaque white background and mid-saturation colours so they read the same on the
book's light and dark themes. Topic-specific figures live in
``course_lib.chapters.<chapter>.plots``.

Colour: one colour-blind-safe palette for the whole book, Okabe and Ito's (2008, "Color Universal
Design"), without its yellow (too light on white). :data:`PALETTE` is the style's colour cycle,
each colour paired with its own line style (:data:`LINESTYLES`), so lines that differ by colour
also differ by dash pattern; name colours from :data:`OKABE_ITO`. Heatmaps use viridis
(perceptually uniform, readable in the common colour-vision deficiencies). ``tests/test_palette.py``
checks the palette stays distinguishable under simulated deuteranopia and protanopia.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from cycler import cycler

#: Okabe & Ito's colour-blind-safe colours, by name (yellow #F0E442 left out: 1.3:1 on white).
OKABE_ITO = {
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "bluish green": "#009E73",
    "reddish purple": "#CC79A7",
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "black": "#000000",
}
#: The style's colour cycle, in this order (the first colours have the most contrast on white).
PALETTE = tuple(OKABE_ITO.values())
#: One line style per palette colour: the n-th line of a plot differs by colour and by dash.
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 3)))
#: One marker per series where points are drawn (``x`` is kept for failures).
MARKERS = ("o", "s", "^", "D", "v", "P", "*")

COURSE_STYLE = {
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "axes.grid": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "figure.dpi": 80,
    "axes.prop_cycle": cycler(color=list(PALETTE)) + cycler(linestyle=list(LINESTYLES)),
    "image.cmap": "viridis",
}


def use_course_style() -> None:
    """Apply the course's matplotlib style (call once at the top of a notebook)."""
    plt.rcParams.update(COURSE_STYLE)


def _to_numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64).cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def heatmap(
    ax: plt.Axes,
    matrix: torch.Tensor | np.ndarray,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    *,
    title: str | None = None,
    xlabel: str = "key",
    ylabel: str = "query",
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = False,
    fmt: str = "{:.2f}",
    colorbar: bool = True,
):
    """Draw a 2-D ``(rows, cols)`` matrix with token labels; returns the image artist."""
    data = _to_numpy(matrix)
    if data.ndim != 2:
        raise ValueError(f"heatmap needs a 2-D matrix, got shape {tuple(data.shape)}")
    im = ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    if row_labels is not None:
        ax.set_yticks(range(data.shape[0]), labels=list(row_labels))
    if col_labels is not None:
        ax.set_xticks(range(data.shape[1]), labels=list(col_labels), rotation=45, ha="right")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if annotate:
        lo, hi = np.nanmin(data), np.nanmax(data)
        mid = (lo + hi) / 2
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                ax.text(j, i, fmt.format(data[i, j]), ha="center", va="center", fontsize=8,
                        color="black" if data[i, j] > mid else "white")
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return im


def rate_plot(ax: plt.Axes, series: Mapping[str, Sequence[tuple[int, float]]],
              ceiling: float | None = None, *, ceiling_label: str = "matmul rate, same run",
              colors: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
              failed: Mapping[str, Sequence[int]] | None = None, unit: str = "TFLOP/s",
              xlabel: str = "sequence length n (tokens)", legend_loc: str = "best") -> None:
    """Achieved rate against sequence length, one line per series, on a log2 x axis.

    ``series``: name → ``[(n, rate)]``; ``ceiling``: the yardstick (a matmul's rate measured in
    the same run) drawn as a dashed line; ``failed``: name → lengths where that series did not
    run (out of memory), marked with an ``x`` on the x axis in the series' colour. The n-th
    series has the n-th marker of :data:`MARKERS` and dash of :data:`LINESTYLES`, not only a
    colour.
    """
    colors, labels, failed = colors or {}, labels or {}, failed or {}
    for i, (name, points) in enumerate(series.items()):
        if not points:
            continue
        ns, rates = zip(*sorted(points), strict=True)
        ax.plot(ns, rates, marker=MARKERS[i % len(MARKERS)], ls=LINESTYLES[i % len(LINESTYLES)],
                ms=4, color=colors.get(name), label=labels.get(name, name))
    for name, ns in failed.items():
        if ns:
            ax.plot(ns, [0] * len(ns), "x", ms=9, mew=2, color=colors.get(name), clip_on=False,
                    label=f"{labels.get(name, name)}: out of memory")
    if ceiling is not None:
        ax.axhline(ceiling, color="0.3", ls="--", lw=1)
        ax.text(0.02, ceiling, f"{ceiling_label} ({ceiling:.0f} {unit})", va="bottom",
                transform=ax.get_yaxis_transform(), fontsize=8, color="0.25")
        ax.set_ylim(0, ceiling * 1.12)
    else:
        ax.set_ylim(bottom=0)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"achieved {unit}")
    ax.legend(fontsize=7, loc=legend_loc)
