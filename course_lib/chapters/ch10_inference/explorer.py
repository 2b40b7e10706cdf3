"""Explorer for the inference chapter: step through decoding and see which scores are computed,
with or without a KV cache, with or without a sliding window."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import to_rgb

from course_lib.toolkit.explorer import Control, Explorer

from .plots import CACHED, PALE, UNCACHED

N = 12


def computed_cells(step: int, cache: str = "on", window: int | None = None) -> np.ndarray:
    """``(N, N)`` ints for producing the token after a prefix of ``step`` tokens: 2 = score
    computed at this step, 1 = computed at an earlier step and not needed again, 0 = never."""
    grid = np.zeros((N, N), dtype=int)
    for i in range(step):
        lo = 0 if window is None else max(0, i - window + 1)
        grid[i, lo:i + 1] = 2 if (cache == "off" or i == step - 1) else 1
    return grid


def cumulative_scores(step: int, cache: str, window: int | None = None) -> int:
    """Scores computed by all steps up to ``step`` (one layer and head)."""
    return int(sum((computed_cells(t, cache, window) == 2).sum() for t in range(1, step + 1)))


def draw_decoding(fig: plt.Figure, step: int = 6, cache: str = "on", window: str = "none"
                  ) -> int:
    """Left: the scores computed for the token after a prefix of ``step``; right: the scores
    computed so far, both modes. Returns the scores computed at this step."""
    w = None if window == "none" else int(window)
    grid = computed_cells(step, cache, w)
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    now_colour = to_rgb(UNCACHED if cache == "off" else CACHED)
    colours = np.array([[0.93, 0.93, 0.93], [0.75, 0.88, 0.83], now_colour])
    ax1.imshow(colours[grid])
    ax1.set_xlabel("key position")
    ax1.set_ylabel("query position")
    now = int((grid == 2).sum())
    ax1.set_title(f"prefix {step}: {now} scores computed", fontsize=10)
    steps = np.arange(1, N + 1)
    for mode, colour, style in (("off", UNCACHED, "o-"), ("on", CACHED, "s--")):
        ax2.plot(steps, [cumulative_scores(t, mode, w) for t in steps], style, ms=3,
                 color=colour, label=f"cache {mode}")
    ax2.axvline(step, color=PALE, lw=6, zorder=0)
    ax2.set_xlabel("prefix length")
    ax2.set_ylabel("scores computed so far")
    ax2.legend(frameon=False)
    fig.tight_layout()
    return now


def decoding_explorer() -> Explorer:
    """Step through decoding; toggle the cache; pick a window. The book plays 2 × 6 frames."""
    frames = [{"step": s, "cache": c} for c in ("off", "on") for s in (2, 4, 6, 8, 10, 12)]
    return Explorer(
        draw=draw_decoding,
        controls={
            "step": Control("prefix", tuple(range(1, N + 1)), default=6),
            "cache": Control("KV cache", ("off", "on"), default="on", kind="toggle"),
            "window": Control("window", ("none", "3", "6"), default="none", kind="dropdown"),
        },
        frames=frames,
        figsize=(9, 3.6),
    )


CONTEXTS = (1024, 4096, 8192, 32768, 65536, 131072)


def draw_cache_schemes(fig: plt.Figure, context: int = 32768, dtype: str = "bf16") -> dict:
    """Cache of one sequence against context length for MHA, GQA, MQA (Llama 3 70B's shape) and
    MLA (DeepSeek-V3), marked at ``context``. Returns ``{scheme: GiB at context}``."""
    from . import helpers
    from .plots import plot_cache_vs_context

    b = {"bf16": 2, "fp8": 1, "fp32": 4}[dtype]
    per = {scheme: helpers.cached_numbers(scheme, cfg) * cfg["layers"] * b
           for scheme, _, cfg in helpers.CACHE_SCHEMES if scheme != "MLA decompressed"}
    ax = fig.subplots()
    plot_cache_vs_context(ax, per, context)
    ax.set_title(f"{context:,} tokens in {dtype}", fontsize=10)
    fig.tight_layout()
    return {scheme: context * p / 2**30 for scheme, p in per.items()}


def cache_schemes_explorer() -> Explorer:
    """Context length and element size against the cache of the four schemes; the book plays
    the context lengths in bf16."""
    return Explorer(
        draw=draw_cache_schemes,
        controls={"context": Control("context length", CONTEXTS, default=32768),
                  "dtype": Control("cache dtype", ("bf16", "fp8", "fp32"), default="bf16",
                                   kind="dropdown")},
        animate="context",
        figsize=(7, 3.8),
    )
