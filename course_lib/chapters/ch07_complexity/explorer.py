"""Explorer for the complexity chapter: n and d sliders -> where the FLOPs and bytes go."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from course_lib.toolkit.explorer import Control, Explorer

from . import helpers as cx

NS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
DS = (64, 128, 256, 512, 768, 1024, 2048)
HEADS = 8


def cost_breakdown(n: int, d: int) -> dict[str, int]:
    """FLOPs per component of one layer (:func:`.helpers.layer_flops_breakdown`)."""
    return cx.layer_flops_breakdown(n, d, num_heads=HEADS if d % HEADS == 0 else 1)


def draw_cost(fig: plt.Figure, n: int = 1024, d: int = 512) -> dict[str, int]:
    """Left: FLOPs per component (GFLOP). Right: the core's share of the layer vs n for this d,
    the current n marked. Returns the breakdown drawn."""
    parts = cost_breakdown(n, d)
    total = sum(parts.values())
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1]})
    names = list(parts)
    colours = ["#1b9e77", "#d95f02", "#d95f02", "#1b9e77"]
    values = np.array([parts[k] for k in names]) / 1e9
    ax1.barh(names, values, color=colours)
    for y, val in enumerate(values):
        ax1.text(val, y, f" {100 * val * 1e9 / total:.0f}%", va="center", fontsize=8)
    ax1.set_xlim(0, values.max() * 1.35)
    ax1.invert_yaxis()
    ax1.set_xlabel("GFLOP (batch 1)")
    mem = cx.score_matrix_bytes(n, heads=HEADS)
    ax1.set_title(f"n={n}, D={d}: {total / 1e9:.3g} GFLOP; "
                  f"scores {cx.format_bytes(mem)} fp32", fontsize=9)
    grid = np.array(NS, dtype=float)
    share = 4 * grid**2 * d / (4 * grid**2 * d + 8 * grid * d**2)
    ax2.semilogx(grid, 100 * share, color="#d95f02", lw=2)
    core_share = 100 * (parts["scores QKᵀ"] + parts["weights·V"]) / total
    ax2.plot([n], [core_share], "o", color="black")
    ax2.axvline(cx.crossover_n(d), color="gray", ls=":", lw=1)
    ax2.axhline(50, color="gray", lw=0.5)
    ax2.set_ylim(0, 100)
    ax2.set_xlabel("sequence length n (tokens)")
    ax2.set_ylabel("attention core share (%)")
    ax2.set_title(f"crossover n = 2D = {cx.crossover_n(d)}", fontsize=9)
    fig.tight_layout()
    return parts


def cost_explorer() -> Explorer:
    """Sliders for n and the model width D (keyword ``d``); the player sweeps n at D = 512."""
    return Explorer(
        draw=draw_cost,
        controls={"n": Control("n", NS, default=1024), "d": Control("D", DS, default=512)},
        animate="n",
        figsize=(8.5, 3.2),
    )
