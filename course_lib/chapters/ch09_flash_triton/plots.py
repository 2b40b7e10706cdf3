"""Chapter 9's figures: the tiles one launch of the flash kernel visits."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from .helpers import KIND_NAMES, tile_kinds

COLOURS = ("#eeeeee", "#4c72b0", "#dd8452", "#c44e52")   # skipped, full, ragged, diagonal


def tile_map(ax: plt.Axes, n: int, block_m: int, block_n: int, causal: bool,
             legend: bool = True) -> np.ndarray:
    """Rows: programs (query blocks, program id 0); columns: key blocks, in visiting order."""
    kinds = tile_kinds(n, block_m, block_n, causal)
    ax.imshow(kinds, cmap=ListedColormap(COLOURS), vmin=-0.5, vmax=3.5)
    rows, cols = kinds.shape
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.set_xticks(np.arange(-0.5, cols), minor=True)
    ax.set_yticks(np.arange(-0.5, rows), minor=True)
    ax.grid(which="minor", color="white", lw=2)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel(f"key block (BLOCK_N = {block_n})")
    ax.set_ylabel(f"program id 0: query block (BLOCK_M = {block_m})")
    ax.set_title(f"N = {n}, {'causal' if causal else 'not causal'}", fontsize=10)
    if legend:
        ax.legend(handles=[Patch(color=c, label=KIND_NAMES[k]) for k, c in enumerate(COLOURS)],
                  loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    return kinds
