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
