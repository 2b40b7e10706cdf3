"""Explorer for the Multi-head chapter: pick a head and a query token, see where it looks."""

from __future__ import annotations

from functools import lru_cache

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Rectangle

from course_lib.toolkit.explorer import Control, Explorer
from course_lib.toolkit.plotting import heatmap

from .helpers import TOY_HEADS, TOY_SENTENCE, toy_heads_layer


@lru_cache(maxsize=1)
def toy_weights() -> torch.Tensor:
    """Attention weights ``(H, L, L)`` of :func:`.helpers.toy_heads_layer`."""
    layer, x = toy_heads_layer()
    with torch.no_grad():
        _, w = layer(x, need_weights=True)
    return w[0]


def draw_head(fig: plt.Figure, head: int = 0, query: int = 4) -> np.ndarray:
    """Left: head ``head``'s weight matrix, row ``query`` outlined. Right: that row as bars.

    Returns the bar heights (the weights of query ``query`` over the keys).
    """
    w = toy_weights()[head]
    toks = [f"{i}:{t}" for i, t in enumerate(TOY_SENTENCE)]
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.2]})
    heatmap(ax1, w, toks, toks, vmin=0, vmax=1, colorbar=False,
            title=f"head {head}: {TOY_HEADS[head]}")
    ax1.add_patch(Rectangle((-0.5, query - 0.5), w.shape[1], 1, fill=False, edgecolor="#d95f02",
                            lw=2))
    row = w[query].numpy()
    ax2.bar(range(len(toks)), row, color="#1b9e77")
    ax2.set_xticks(range(len(toks)), labels=toks, rotation=45, ha="right")
    ax2.set_ylim(0, 1)
    ax2.set_xlabel("key token")
    ax2.set_ylabel("attention weight")
    ax2.set_title(f"query {toks[query]!r}")
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.3, top=0.9, wspace=0.3)  # fixed: fast
    return row


def head_explorer() -> Explorer:
    """Head dropdown and query slider; the book's player steps through 4 heads × 2 queries."""
    n = len(TOY_SENTENCE)
    return Explorer(
        draw=draw_head,
        controls={
            "head": Control("head", tuple(range(len(TOY_HEADS))), default=0, kind="dropdown"),
            "query": Control("query", tuple(range(n)), default=4),
        },
        frames=[{"head": h, "query": q} for h in range(len(TOY_HEADS)) for q in (4, 8)],
        figsize=(9.0, 3.6),
        interval_ms=900,
    )
