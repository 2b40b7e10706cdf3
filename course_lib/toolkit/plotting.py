"""Plotting primitives shared by every chapter: one style, one heatmap.

Figures use an opaque white background and mid-saturation colours so they read the same on the
book's light and dark themes. Topic-specific figures live in
``course_lib.chapters.<chapter>.plots``.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

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
