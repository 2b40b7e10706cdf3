"""Explorer of the positions chapter: move a query and a key, watch their RoPE pairs rotate.

Only the distance ``m − n`` changes the score: sliding both positions together turns every pair
of ``q`` and ``k`` by the same angle, so the angle between them, and the dot product, stay put.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from course_lib.attention import positions
from course_lib.toolkit.explorer import Control, Explorer

from . import helpers

E = 8
BASE = 100.0
N_POSITIONS = 12
PAIRS = (0, 1, 2)


def explorer_vectors(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The seeded query and key ``(E,)`` the explorer rotates (float64)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, E, generator=g, dtype=torch.float64).unbind(0)


def rotated_pair(x: torch.Tensor, position: int, pair: int) -> np.ndarray:
    """Features ``(pair, pair + E/2)`` of ``RoPE(x)`` at ``position`` (split-halves pairing)."""
    r = positions.apply_rope(x[None], offset=position, base=BASE)[0]
    return np.array([r[pair].item(), r[pair + E // 2].item()])


def draw_rope_pairs(fig: plt.Figure, m: int = 5, n: int = 2) -> float:
    """One panel per pair: q's pair at position ``m``, k's pair at ``n``; the last panel marks
    ``(m, n)`` on the score grid. Returns the score ``RoPE(q)_m · RoPE(k)_n``."""
    q, k = explorer_vectors()
    grid = helpers.rope_score_grid(q, k, N_POSITIONS, base=BASE)
    theta = positions.rope_frequencies(E, BASE)
    axes = fig.subplots(1, len(PAIRS) + 1,
                        gridspec_kw={"width_ratios": [1] * len(PAIRS) + [1.5]})
    lim = 1.1 * max(np.hypot(*rotated_pair(t, 0, p)) for t in (q, k) for p in PAIRS)
    for ax, p in zip(axes, PAIRS, strict=False):
        for vec, colour, label in ((rotated_pair(q, m, p), "#1b9e77", f"q at {m}"),
                                   (rotated_pair(k, n, p), "#d95f02", f"k at {n}")):
            ax.annotate("", xy=vec, xytext=(0, 0),
                        arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 2})
            ax.plot([], [], color=colour, label=label)
        ax.add_patch(plt.Circle((0, 0), lim / 1.1, fill=False, color="#dddddd"))
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"pair {p}: θ = {theta[p].item():.3g}\nrelative turn (m − n)θ = "
                     f"{(m - n) * theta[p].item():.2f} rad", fontsize=9)
        if p == 0:
            ax.legend(fontsize=7, loc="lower left")
    ax = axes[-1]
    vmax = grid.abs().max().item()
    ax.imshow(grid.numpy(), cmap="PuOr", vmin=-vmax, vmax=vmax)
    ax.add_patch(plt.Rectangle((n - 0.5, m - 0.5), 1, 1, fill=False, color="black", lw=2))
    ax.set_xlabel("key position n")
    ax.set_ylabel("query position m")
    score = grid[m, n].item()
    ax.set_title(f"score q_m · k_n = {score:.3f}\n(same on every diagonal m − n)", fontsize=9)
    fig.tight_layout()
    return score


def rope_explorer() -> Explorer:
    """Query and key position sliders; the book slides both together (m − n = 3), then moves n."""
    frames = ([{"m": m, "n": m - 3} for m in range(3, N_POSITIONS, 2)]
              + [{"m": 9, "n": n} for n in range(0, N_POSITIONS, 2)])
    return Explorer(
        draw=draw_rope_pairs,
        controls={"m": Control("query m", tuple(range(N_POSITIONS)), default=5),
                  "n": Control("key n", tuple(range(N_POSITIONS)), default=2)},
        frames=frames,
        figsize=(10.5, 3.2),
    )
