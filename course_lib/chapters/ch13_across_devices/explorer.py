"""Explorer for chapter 13: step through the ring. Choose the number of ranks, causal or not,
contiguous or zigzag shards; see which blocks of the score matrix each rank computes at each
step, and the work each rank has done so far."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from course_lib.attention import distributed as cp
from course_lib.toolkit.explorer import Control, Explorer
from course_lib.toolkit.plotting import PALETTE

from .plots import plot_score_blocks


def draw_ring(fig: plt.Figure, step: int = 0, ranks: int = 4, causal: str = "causal",
              layout: str = "contiguous") -> list[float]:
    """Top: the score matrix by chunk pairs, coloured by the computing rank (solid: this step,
    pale: earlier). Below: work per rank so far, in contiguous blocks. Returns that work. The
    panels are stacked so that the figure is narrow enough for a phone's screen."""
    is_causal = causal == "causal"
    step = min(step, ranks - 1)
    ax1, ax2 = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1.25, 1]})
    done = plot_score_blocks(ax1, ranks, step, is_causal=is_causal, layout=layout)
    size = 1.0 / cp.chunks_per_rank(layout) ** 2
    work = [d * size for d in done]
    holds = ", ".join(f"{r}←{(r - step) % ranks}" for r in range(ranks))
    ax1.set_title(f"step {step}, {layout}, {causal}\nrank←K/V held: {holds}", fontsize=9)
    ax2.bar(np.arange(ranks), work, color=[PALETTE[r % len(PALETTE)] for r in range(ranks)])
    for r, w in enumerate(work):
        ax2.text(r, w, f"{w:g}", ha="center", va="bottom", fontsize=8)
    ax2.set_xticks(range(ranks), [f"rank {r}" for r in range(ranks)])
    ax2.set_ylim(0, ranks + 0.6)
    ax2.set_ylabel("blocks so far")
    fig.tight_layout()
    return work


def describe(params: dict[str, Any]) -> str:
    """The text alternative of one frame."""
    fig = plt.figure()
    work = draw_ring(fig, **params)
    plt.close(fig)
    p = {"step": 0, "ranks": 4, "causal": "causal", "layout": "contiguous", **params}
    return (f"Ring attention on {p['ranks']} ranks, {p['layout']} shards, {p['causal']}, after "
            f"step {min(p['step'], p['ranks'] - 1)}: blocks computed so far per rank "
            + ", ".join(f"rank {r} {w:g}" for r, w in enumerate(work)) + ".")


def ring_explorer() -> Explorer:
    """Step through the ring; the book plays the 4 steps of 4 ranks, contiguous then zigzag."""
    frames = [{"step": s, "layout": lay} for lay in ("contiguous", "zigzag") for s in range(4)]
    return Explorer(
        draw=draw_ring,
        controls={
            "step": Control("step", (0, 1, 2, 3), default=0),
            "ranks": Control("ranks", (2, 3, 4), default=4, kind="dropdown"),
            "causal": Control("mask", ("causal", "none"), default="causal", kind="toggle"),
            "layout": Control("shards", ("contiguous", "zigzag"), default="contiguous",
                              kind="toggle"),
        },
        frames=frames,
        figsize=(3.7, 6.2),     # stacked panels: 355 px wide in the player, a phone's column
        dpi=96,                 # text of 8 pt or more is >= 10.7 px, in Lab as in the player
        describe=describe,
    )
