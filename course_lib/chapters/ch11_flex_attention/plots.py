"""Figures of the FlexAttention chapter: a mask drawn over its tiles (the ``BlockMask``).

A cell is teal where the query may attend the key, pale where it may not. Over it, each
``block × block`` tile is outlined by what flex does with it: dark blue = full (computed, no mask
inside), orange = partial (computed, mask applied), grey and hatched = empty (skipped).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, Rectangle

from .helpers import Tiles, tile_map

ALLOWED = "#1b9e77"
BLOCKED = "#f2f2f2"
FULL = "#1f3a93"
PARTIAL = "#e07b00"
SKIPPED = "#9a9a9a"
MASK_CMAP = ListedColormap([BLOCKED, ALLOWED])


def draw_block_mask(ax: plt.Axes, mask: torch.Tensor, block: int, tiles: Tiles | None = None,
                    title: str | None = None) -> np.ndarray:
    """Draw an ``(L, S)`` bool mask and its tiles of ``block``; returns the tile map drawn
    (2 full, 1 partial, 0 skipped)."""
    m = mask.detach().cpu().bool()
    if m.dim() != 2:
        raise ValueError(f"draw_block_mask needs an (L, S) mask, got shape {tuple(m.shape)}")
    L, S = m.shape
    ax.imshow(m.numpy().astype(float), cmap=MASK_CMAP, vmin=0, vmax=1, aspect="equal",
              interpolation="nearest", extent=(-0.5, S - 0.5, L - 0.5, -0.5))
    t = tile_map(m, block).numpy()
    for i in range(t.shape[0]):
        for j in range(t.shape[1]):
            x, y = j * block - 0.5, i * block - 0.5
            w, h = min(block, S - j * block), min(block, L - i * block)
            if t[i, j] == 0:
                ax.add_patch(Rectangle((x, y), w, h, facecolor=SKIPPED, alpha=0.35,
                                       hatch="///", edgecolor="white", linewidth=0.8))
            else:
                colour = FULL if t[i, j] == 2 else PARTIAL
                ax.add_patch(Rectangle((x + 0.6, y + 0.6), w - 1.2, h - 1.2, fill=False,
                                       edgecolor=colour, linewidth=1.6))
    ax.set_xlim(-0.5, S - 0.5)
    ax.set_ylim(L - 0.5, -0.5)
    ax.set_xticks(range(0, S, block))
    ax.set_yticks(range(0, L, block))
    ax.tick_params(labelsize=7)
    ax.set_xlabel("key j", fontsize=8)
    ax.set_ylabel("query i", fontsize=8)
    if title is not None or tiles is not None:
        text = title or ""
        if tiles is not None:
            text += (f"\n{tiles.skipped}/{tiles.total} tiles skipped "
                     f"({100 * tiles.skipped_fraction:.0f} %)")
        ax.set_title(text, fontsize=9)
    return t


def tile_legend(fig: plt.Figure) -> None:
    """One legend for the tile colours, at the bottom of ``fig``."""
    handles = [Patch(facecolor="none", edgecolor=FULL, linewidth=1.6, label="full tile"),
               Patch(facecolor="none", edgecolor=PARTIAL, linewidth=1.6, label="partial tile"),
               Patch(facecolor=SKIPPED, alpha=0.35, hatch="///", label="skipped tile"),
               Patch(facecolor=ALLOWED, label="may attend")]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)


def plot_tile_grid(fig: plt.Figure, cases: dict[str, tuple[torch.Tensor, Tiles]],
                   block: int) -> None:
    """One panel per mask (``label -> (mask, tiles)``), three per row, with the legend."""
    n = len(cases)
    cols = 3
    rows = -(-n // cols)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    for ax, (label, (mask, tiles)) in zip(axes, cases.items(), strict=False):
        draw_block_mask(ax, mask, block, tiles, title=label)
    for ax in axes[n:]:
        ax.set_visible(False)
    tile_legend(fig)


def speed_vs_density(data: dict) -> list[dict[str, float | str]]:
    """Per mask of a committed benchmark (``load_bench_results``): the fraction of tiles the
    compiled kernel computes (``1 - skipped``) and its time as a fraction of dense SDPA's."""
    return [{"mask": r["mask"], "density": 1.0 - r["tiles_skipped_fraction"],
             "time vs dense SDPA": r["seconds_flex_compiled"] / r["seconds_sdpa_dense"]}
            for r in data["results"]]


def plot_speed_vs_density(ax: plt.Axes, runs: dict[str, dict]) -> None:
    """Compiled flex's time relative to SDPA with a dense mask (1 = as slow) against the
    fraction of tiles it computes: one colour per benchmark (``label -> data``), one marker per
    mask; the diagonal is a kernel whose time follows the tiles it computes, exactly."""
    from course_lib.toolkit.plotting import PALETTE

    markers = ("o", "s", "^", "D", "v")
    masks: list[str] = []
    for i, (label, data) in enumerate(runs.items()):
        for p in speed_vs_density(data):
            if p["mask"] not in masks:
                masks.append(p["mask"])
            ax.plot(p["density"], p["time vs dense SDPA"], markers[masks.index(p["mask"])],
                    color=PALETTE[i], markersize=8, markeredgecolor="white",
                    label=f"{label}: {p['mask']}")
    ax.plot([0, 1], [0, 1], color="0.45", lw=1, ls="--",
            label="time ∝ tiles computed (dense SDPA = 1)")
    ax.axhline(1.0, color="0.7", lw=0.8)
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("fraction of tiles computed (1 − skipped)")
    ax.set_ylabel("compiled flex time / dense SDPA")
    ax.legend(frameon=False, fontsize=8, loc="upper left")
