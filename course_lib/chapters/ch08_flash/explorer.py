"""Explorer for the Flash chapter: step through the (query-block, key-block) tiles and watch the
running maximum m, the running sum ℓ and the normalised accumulator O/ℓ update."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from course_lib.toolkit.explorer import Control, Explorer

from .helpers import TileStep, tile_trace

L = S = 12
WIDTH = 4
BLOCK = 4


def example_qkv(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded single-head ``q (12, 4)``, ``k (12, 4)``, ``v (12, 4)``; scores spread enough that
    the running maximum moves between key blocks."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(L, WIDTH, generator=g, dtype=torch.float64) for _ in range(3))
    return 2.0 * q, k, v


def trace(causal: bool = False, seed: int = 0) -> list[TileStep]:
    """The tile-by-tile states for the example (9 tiles, or 6 when causal)."""
    q, k, v = example_qkv(seed)
    return tile_trace(q, k, v, BLOCK, BLOCK, causal=causal)


def state(step: int, causal: bool = False) -> dict[str, np.ndarray | TileStep]:
    """What frame ``step`` (1-based, clamped to the last tile) shows.

    Returns ``scores (L, S)`` with the visited tiles' scores (NaN elsewhere), ``m (L,)``,
    ``ell (L,)``, ``normalised (L, Ev)`` = O/ℓ (NaN for rows not started) and the ``tile``.
    """
    steps = trace(causal)
    step = int(min(max(step, 1), len(steps)))
    visited = np.full((L, S), np.nan)
    for st in steps[:step]:
        (i0, i1), (j0, j1) = st.rows, st.cols
        visited[i0:i1, j0:j1] = st.scores.numpy()
    cur = steps[step - 1]
    ell = cur.ell.numpy()
    normalised = np.full(cur.O.shape, np.nan)
    started = ell > 0
    normalised[started] = (cur.O.numpy()[started] / ell[started, None])
    return {"scores": visited, "m": cur.m.numpy(), "ell": ell, "normalised": normalised,
            "tile": cur, "n_steps": len(steps)}


def _column(ax: plt.Axes, values: np.ndarray, title: str, rows: tuple[int, int]) -> None:
    """One statistic per query row as a little table; the current block's rows highlighted."""
    ax.set_xlim(-0.5, 0.5)
    ax.set_ylim(len(values) - 0.5, -0.5)
    ax.add_patch(plt.Rectangle((-0.5, rows[0] - 0.5), 1, rows[1] - rows[0], facecolor="#fdebd0",
                               edgecolor="#c0392b", lw=2))
    for r, x in enumerate(values):
        empty = not np.isfinite(x) or (title == "ℓ" and x == 0)
        ax.text(0, r, "–" if empty else f"{x:.2f}", ha="center", va="center", fontsize=8,
                fontweight="bold" if rows[0] <= r < rows[1] else "normal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title)


def draw_tiles(fig: plt.Figure, step: int = 1, causal: bool = False) -> None:
    """Scores seen so far (current tile outlined), then m, ℓ, and O/ℓ per query row."""
    st = state(step, causal)
    tile: TileStep = st["tile"]
    (i0, i1), (j0, j1) = tile.rows, tile.cols
    axes = fig.subplots(1, 4, gridspec_kw={"width_ratios": [3.2, 0.8, 0.8, 2.0]})
    ax = axes[0]
    cmap = plt.get_cmap("viridis").with_extremes(bad="#eeeeee")
    finite = st["scores"][np.isfinite(st["scores"])]
    lim = float(np.abs(finite).max()) if finite.size else 1.0
    ax.imshow(np.ma.masked_invalid(st["scores"]), cmap=cmap, vmin=-lim, vmax=lim)
    ax.add_patch(plt.Rectangle((j0 - 0.5, i0 - 0.5), j1 - j0, i1 - i0, fill=False,
                               edgecolor="#c0392b", lw=2.5))
    for b in range(BLOCK, L, BLOCK):
        ax.axhline(b - 0.5, color="white", lw=1)
        ax.axvline(b - 0.5, color="white", lw=1)
    ax.set_xticks(range(0, S, 2))
    ax.set_yticks(range(0, L, 2))
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(f"tile {step if step <= st['n_steps'] else st['n_steps']}/{st['n_steps']}: "
                 f"block ({tile.i}, {tile.j})", fontsize=10)
    _column(axes[1], st["m"], "m", (i0, i1))
    _column(axes[2], st["ell"], "ℓ", (i0, i1))
    ax = axes[3]
    cmap2 = plt.get_cmap("coolwarm").with_extremes(bad="#eeeeee")
    ax.imshow(np.ma.masked_invalid(st["normalised"]), cmap=cmap2, vmin=-1.5, vmax=1.5,
              aspect="auto")
    ax.add_patch(plt.Rectangle((-0.5, i0 - 0.5), st["normalised"].shape[1], i1 - i0, fill=False,
                               edgecolor="#c0392b", lw=2))
    ax.set_xlabel("output feature")
    ax.set_xticks(range(st["normalised"].shape[1]))
    ax.set_yticks(range(0, L, 2))
    ax.set_title("O / ℓ so far", fontsize=10)
    fig.tight_layout()


def frame_labels() -> list[str]:
    """One label per frame that exists: ``"full 1/9"`` … ``"full 9/9"``, then ``"causal 1/6"`` …
    ``"causal 6/6"`` (causal attention skips the tiles above the diagonal, so it has fewer)."""
    labels = []
    for mode, causal in (("full", False), ("causal", True)):
        n = len(trace(causal))
        labels += [f"{mode} {t}/{n}" for t in range(1, n + 1)]
    return labels


def draw_frame(fig: plt.Figure, tile: str = "full 1/9") -> None:
    """Draw the frame a :func:`frame_labels` label names."""
    mode, count = tile.split()
    draw_tiles(fig, step=int(count.split("/")[0]), causal=mode == "causal")


def tile_explorer() -> Explorer:
    """Step through the tiles: one slider over every frame that exists, full attention's 9 tiles
    then causal attention's 6, so the slider never offers a tile that is not computed."""
    labels = frame_labels()
    return Explorer(
        draw=draw_frame,
        controls={"tile": Control("tile", labels, default=labels[0])},
        animate="tile",
        figsize=(9.0, 3.4),
        interval_ms=900,
    )
