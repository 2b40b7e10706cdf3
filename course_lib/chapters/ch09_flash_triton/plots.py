"""Chapter 9's figures: the program grid, the tiles one launch of the flash kernel visits, and
the TF32 error."""

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
    ax.set_title(f"L = S = {n}, {'causal' if causal else 'not causal'}", fontsize=10)
    if legend:
        ax.legend(handles=[Patch(color=c, label=KIND_NAMES[k]) for k, c in enumerate(COLOURS)],
                  loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    return kinds


def program_grid(ax: plt.Axes, n: int, block_m: int, batch: int, heads: int) -> tuple[int, int]:
    """The launch grid (cdiv(L, BLOCK_M), B·H): one cell per program, labelled with its ids.

    Columns: ``tl.program_id(0)``, the query block; rows: ``tl.program_id(1)``, batch·H + head.
    Returns the grid.
    """
    grid = (-(-n // block_m), batch * heads)
    cells = np.arange(grid[1])[:, None] // heads * np.ones(grid[0], dtype=int)[None, :]
    ax.imshow(cells, cmap=ListedColormap(COLOURS[1:1 + batch] if batch <= 3 else None),
              aspect="auto")
    for bh in range(grid[1]):
        for i in range(grid[0]):
            first, last = i * block_m, min((i + 1) * block_m, n) - 1
            ax.text(i, bh, f"({i}, {bh})\nrows {first}–{last}", ha="center", va="center",
                    fontsize=7, color="white")
    ax.set_xticks(range(grid[0]))
    ax.set_yticks(range(grid[1]),
                  [f"{bh} = b{bh // heads}·H + h{bh % heads}" for bh in range(grid[1])])
    ax.set_xticks(np.arange(-0.5, grid[0]), minor=True)
    ax.set_yticks(np.arange(-0.5, grid[1]), minor=True)
    ax.grid(which="minor", color="white", lw=2)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel(f"tl.program_id(0): query block of BLOCK_M = {block_m} rows")
    ax.set_ylabel("tl.program_id(1): batch·H + head")
    ax.set_title(f"grid = (cdiv({n}, {block_m}), {batch}·{heads}) = {grid}", fontsize=10)
    return grid


def tf32_errors(ax: plt.Axes, blocks: list[int], fp32: list[float], tf32: list[float],
                bound: float, tf32_nearest: list[float] | None = None) -> None:
    """Max error of the kernel's output against float64, per tile size: float32 dots, TF32 dots
    truncated (what the GPU does with Triton's default precision) and, if given, TF32 dots
    rounded to nearest."""
    ax.semilogy(blocks, tf32, "o-", color=COLOURS[3],
                label="TF32 dots, truncated (a GPU's default)")
    if tf32_nearest is not None:
        ax.semilogy(blocks, tf32_nearest, "^:", color=COLOURS[2],
                    label="TF32 dots, rounded to nearest")
    ax.semilogy(blocks, fp32, "s-", color=COLOURS[1], label='float32 dots (input_precision="ieee")')
    ax.axhline(bound, color="0.4", ls="--", lw=1, label=f"the chapter's float32 bound {bound:g}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(blocks, [str(b) for b in blocks])
    ax.set_xlabel("tile size BLOCK_M = BLOCK_N")
    ax.set_ylabel("max |out − reference|")
    ax.legend(fontsize=8, frameon=False)
