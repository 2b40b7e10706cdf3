"""Figures of chapter 13: the ring schedule (rank × step), causal work per rank (contiguous
against zigzag), and the score matrix coloured by the rank and step that compute each block."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from course_lib.attention import distributed as cp
from course_lib.toolkit.plotting import OKABE_ITO, PALETTE

KIND_COLOURS = {"full": OKABE_ITO["blue"], "diagonal": OKABE_ITO["orange"],
                "skipped": "#e6e6e6"}
KIND_LABELS = {"full": "computed", "diagonal": "computed, causal mask",
               "skipped": "skipped (future)"}


def plot_ring_schedule(ax: plt.Axes, world: int = 4, *, is_causal: bool = True,
                       layout: str = "contiguous") -> None:
    """Rows: ranks; columns: steps. Each cell names the K/V block the rank holds and shows its
    chunk pairs (one square, or 2 × 2 for zigzag) coloured by what is done with them."""
    n = cp.chunks_per_rank(layout)
    sched = cp.ring_schedule(world, is_causal=is_causal, layout=layout)
    for t, row in enumerate(sched):
        for s in row:
            for p_i, pair in enumerate(s.pairs):
                a, b = divmod(p_i, n)
                ax.add_patch(Rectangle((t + 0.08 + b * 0.84 / n, s.rank + 0.08 + a * 0.84 / n),
                                       0.84 / n, 0.84 / n, facecolor=KIND_COLOURS[pair.kind],
                                       edgecolor="white", lw=1.5))
            ax.text(t + 0.5, s.rank + 0.5, f"K/V {s.source}", ha="center", va="center",
                    fontsize=9, color="black",
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                          "alpha": 0.85})
    ax.set_xlim(0, world)
    ax.set_ylim(world, 0)
    ax.set_xticks(np.arange(world) + 0.5, [str(t) for t in range(world)])
    ax.set_yticks(np.arange(world) + 0.5, [f"rank {r}" for r in range(world)])
    ax.set_xlabel("ring step")
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(f"{layout}{', causal' if is_causal else ''}", fontsize=10)


def kind_legend(fig: plt.Figure) -> None:
    """One legend of the three kinds of block pair, under the figure's panels."""
    handles = [Rectangle((0, 0), 1, 1, facecolor=c) for c in KIND_COLOURS.values()]
    fig.legend(handles, list(KIND_LABELS.values()), loc="lower center", ncol=3,
               frameon=False)


def plot_work_per_rank(ax: plt.Axes, work: dict[str, list[float]], *,
                       title: str | None = None) -> None:
    """Bars: causal work per rank (in contiguous blocks) for each layout in ``work``."""
    world = len(next(iter(work.values())))
    width = 0.8 / len(work)
    for i, (layout, values) in enumerate(work.items()):
        xs = np.arange(world) + (i - (len(work) - 1) / 2) * width
        bars = ax.bar(xs, values, width, color=PALETTE[i], label=layout,
                      hatch=("", "//")[i % 2], edgecolor="white")
        ax.bar_label(bars, fmt="%g", fontsize=8)
    ax.set_xticks(range(world), [f"rank {r}" for r in range(world)])
    ax.set_ylabel("blocks computed (L/W × L/W)")
    ax.set_ylim(0, max(max(v) for v in work.values()) * 1.15)
    ax.legend(frameon=False, loc="upper left")
    if title:
        ax.set_title(title, fontsize=10)


def plot_score_blocks(ax: plt.Axes, world: int, step: int, *, is_causal: bool = True,
                      layout: str = "contiguous") -> list[int]:
    """The ``L × L`` score matrix in chunk pairs, each coloured by the rank that computes it:
    solid at this step, pale at earlier steps, empty for later ones, grey if skipped. Returns
    the chunk pairs each rank has computed up to this step."""
    n = cp.chunks_per_rank(layout)
    chunks = world * n
    done = [0] * world
    for t, row in enumerate(cp.ring_schedule(world, is_causal=is_causal, layout=layout)):
        for s in row:
            for pair in s.pairs:
                x, y = pair.k_chunk, pair.q_chunk
                if pair.kind == "skipped":
                    ax.add_patch(Rectangle((x, y), 1, 1, facecolor=KIND_COLOURS["skipped"],
                                           edgecolor="white"))
                    continue
                if t > step:
                    ax.add_patch(Rectangle((x, y), 1, 1, facecolor="white",
                                           edgecolor="#bbbbbb", lw=0.8))
                    continue
                done[s.rank] += 1
                colour = PALETTE[s.rank % len(PALETTE)]
                ax.add_patch(Rectangle((x, y), 1, 1, facecolor=colour,
                                       alpha=1.0 if t == step else 0.3, edgecolor="white"))
                if pair.kind == "diagonal":
                    ax.plot([x, x + 1], [y, y + 1], color="black", lw=0.8)
                ax.text(x + 0.5, y + 0.5, str(s.rank), ha="center", va="center", fontsize=8,
                        color="white" if t == step else "black")
    ax.set_xlim(0, chunks)
    ax.set_ylim(chunks, 0)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel("key chunk")
    ax.set_ylabel("query chunk")
    ax.set_aspect("equal")
    return done
