"""Figures of the inference chapter: work per decoding step, measured tokens/s, cache sizes,
sliding-window reach and a paged KV pool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

from course_lib.attention.masks import sliding_window_mask
from course_lib.toolkit.plotting import OKABE_ITO

from . import helpers

#: without / with the KV cache (Okabe–Ito); lines also differ by dash and marker
UNCACHED = OKABE_ITO["vermillion"]
CACHED = OKABE_ITO["bluish green"]
PALE = "#eeeeee"
#: one colour per sequence of the paged pool (each block is also labelled with its sequence)
_SEQUENCE_COLOURS = tuple(c for name, c in OKABE_ITO.items() if name != "black")


def plot_scores_per_step(ax: plt.Axes, prompt: int, n_new: int) -> None:
    """Scores computed (per layer and head) for each new token, recomputing vs cached."""
    steps = np.arange(1, n_new + 1)
    prefix = prompt + steps - 1
    ax.plot(steps, [helpers.scores_per_step(int(p), False) for p in prefix], color=UNCACHED,
            label="recompute everything: prefix²")
    ax.plot(steps, [helpers.scores_per_step(int(p), True) for p in prefix], color=CACHED, ls="--",
            label="KV cache: prefix")
    ax.set_yscale("log")
    ax.set_xlabel("generated token")
    ax.set_ylabel("scores computed for it")
    ax.legend(frameon=False)


def plot_tokens_per_s(ax: plt.Axes, data: dict[str, Any]) -> None:
    """Measured tokens/s vs generated length, without and with the cache (committed data)."""
    rows = data["results"]
    n = [r["n_new"] for r in rows]
    ax.plot(n, [r["tokens_per_s_uncached"] for r in rows], "o-", color=UNCACHED,
            label="no cache (recompute prefix)")
    ax.plot(n, [r["tokens_per_s_cached"] for r in rows], "s--", color=CACHED, label="KV cache")
    ax.set_xscale("log", base=2)
    ax.set_xticks(n, labels=[str(x) for x in n])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("tokens generated (after an 8-token prompt)")
    ax.set_ylabel("tokens / s (CPU, 1 thread)")
    ax.legend(frameon=False)


def plot_cache_sizes(ax: plt.Axes, rows: Sequence[dict[str, Any]]) -> None:
    """KiB of cache per token for each published configuration (float16)."""
    names = [f"{r['model']} ({r['attention']})" for r in rows]
    values = [r["KiB/token"] for r in rows]
    bars = ax.barh(names[::-1], values[::-1], color=CACHED)
    for bar, v in zip(bars, values[::-1], strict=True):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {v:g} KiB",
                va="center", fontsize=9)
    ax.set_xlabel("KV cache per token, float16 (KiB)")
    ax.set_xlim(0, max(values) * 1.25)


def plot_window_reach(fig: plt.Figure, n: int, window: int, layers: int) -> None:
    """Left: the sliding-window mask; right: which positions reach the last token after
    1..``layers`` layers."""
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.6]})
    m = sliding_window_mask(n, window=window).numpy()
    ax1.imshow(m, cmap=ListedColormap([PALE, CACHED]), vmin=0, vmax=1)
    ax1.set_title(f"sliding window, W={window}", fontsize=10)
    ax1.set_xlabel("key")
    ax1.set_ylabel("query")
    reach = np.stack([helpers.receptive_field(n, window, k)[-1].numpy()
                      for k in range(1, layers + 1)])
    ax2.imshow(reach, cmap=ListedColormap([PALE, UNCACHED]), vmin=0, vmax=1, aspect="auto")
    ax2.set_yticks(range(layers), labels=[f"{k} layer{'s' if k > 1 else ''}"
                                          for k in range(1, layers + 1)])
    ax2.set_xlabel("position that can influence the last token")
    ax2.set_title(f"reach of token {n - 1}", fontsize=10)


def plot_paged_pool(ax: plt.Axes, pool: helpers.PagedKVPool) -> None:
    """Physical blocks of the pool, coloured by the sequence that owns them, with fill."""
    owner = {b: s for s, table in pool.tables.items() for b in table}
    def colors(seq: int) -> str:
        return _SEQUENCE_COLOURS[seq % len(_SEQUENCE_COLOURS)]

    nblocks = pool.k.shape[0]
    for b in range(nblocks):
        seq = owner.get(b)
        if seq is None:
            ax.add_patch(plt.Rectangle((b, 0), 0.95, 1, color=PALE))
            continue
        table = pool.tables[seq]
        logical = table.index(b)
        filled = min(pool.block_size, pool.lengths[seq] - logical * pool.block_size)
        ax.add_patch(plt.Rectangle((b, 0), 0.95, 1, color=colors(seq), alpha=0.5))
        ax.add_patch(plt.Rectangle((b, 0), 0.95, filled / pool.block_size, color=colors(seq)))
        ax.text(b + 0.47, 1.08, f"s{seq}:{logical}", ha="center", fontsize=8)
    ax.set_xlim(0, nblocks)
    ax.set_ylim(0, 1.25)
    ax.set_yticks([])
    ax.set_xticks(np.arange(nblocks) + 0.47, labels=[str(b) for b in range(nblocks)])
    ax.set_xlabel("physical block (label: sequence:logical block; height: slots filled)")


def plot_decode_roofline(ax: plt.Axes, rows: Sequence[dict[str, Any]],
                         ridges: dict[str, float]) -> None:
    """FLOP/byte of one decode step (``rows``: ``name``, ``FLOP/byte``) against machine ridges
    (peak FLOP/s ÷ bandwidth): a point below a ridge is memory-bound on that machine."""
    names = [r["attention"] for r in rows]
    values = [r["FLOP/byte"] for r in rows]
    ax.bar(names, values, color=[UNCACHED, OKABE_ITO["reddish purple"], CACHED][:len(rows)])
    for name, v in zip(names, values, strict=True):
        ax.text(name, v * 1.15, f"{v:.2g}", ha="center", fontsize=8)
    for (label, ridge), style in zip(ridges.items(), ("--", ":", "-."), strict=False):
        ax.axhline(ridge, color="0.35", ls=style, lw=1, label=f"ridge: {label}, {ridge:.0f}")
    ax.set_yscale("log")
    ax.set_ylim(0.3, max(list(ridges.values()) + values) * 30)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    ax.set_ylabel("FLOP / byte of one decode step")


# Okabe–Ito colours, and a marker, line style and hatch per scheme: told apart without colour.
SCHEME_STYLE: dict[str, dict[str, str]] = {
    "MHA": {"color": "#E69F00", "marker": "o", "ls": "-", "hatch": "//"},
    "GQA": {"color": "#56B4E9", "marker": "s", "ls": "--", "hatch": ".."},
    "MQA": {"color": "#009E73", "marker": "^", "ls": ":", "hatch": "\\\\"},
    "MLA": {"color": "#0072B2", "marker": "D", "ls": "-.", "hatch": ""},
    "MLA decompressed": {"color": "#D55E00", "marker": "v", "ls": (0, (5, 1, 1, 1, 1, 1)),
                         "hatch": "xx"},
}


def plot_scheme_cache(ax: plt.Axes, rows: Sequence[dict[str, Any]]) -> None:
    """KiB of cache per token (all layers, bf16) per scheme (rows of ``helpers.scheme_rows``),
    log axis; each bar labelled with its scheme, configuration and value."""
    names = [f"{r['scheme']}: {r['configuration']}" for r in rows][::-1]
    values = [r["KiB/token"] for r in rows][::-1]
    styles = [SCHEME_STYLE[r["scheme"]] for r in rows][::-1]
    bars = ax.barh(names, values, color=[s["color"] for s in styles], edgecolor="black",
                   linewidth=0.6)
    for bar, s, v in zip(bars, styles, values, strict=True):
        bar.set_hatch(s["hatch"])
        ax.text(v * 1.08, bar.get_y() + bar.get_height() / 2, f"{v:,.5g} KiB", va="center",
                fontsize=9)
    ax.set_xscale("log")
    ax.set_xlim(min(values) / 2, max(values) * 6)
    ax.set_xlabel("KV cache per token, all layers, bf16 (KiB, log scale)")


def plot_cache_vs_context(ax: plt.Axes, rows_by_scheme: dict[str, float], context: int,
                          max_context: int = 131072) -> None:
    """GiB of cache against context length for each scheme (``{scheme: bytes per token}``),
    log-log; a vertical line and labelled points at ``context``."""
    lengths = np.geomspace(1024, max_context, 8)
    for scheme, per in rows_by_scheme.items():
        s = SCHEME_STYLE[scheme]
        at = context * per / 2**30
        ax.plot(lengths, lengths * per / 2**30, color=s["color"], ls=s["ls"], marker=s["marker"],
                ms=4, label=f"{scheme}: {at:.3g} GiB at {context:,}")
        ax.plot([context], [at], marker=s["marker"], color=s["color"], ms=8, mec="black")
    ax.axvline(context, color="0.5", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("cache of one sequence (GiB)")
    ax.legend(frameon=False, fontsize=8, loc="lower right")


def plot_mla_decode_times(ax: plt.Axes, rows: Sequence[dict[str, Any]]) -> None:
    """Measured ms of one MLA decode step against cache length, naive and absorbed."""
    S = [r["cache"] for r in rows]
    ax.plot(S, [r["naive ms"] for r in rows], "o-", color=SCHEME_STYLE["MLA decompressed"]
            ["color"], label="naive: decompress every cached latent")
    ax.plot(S, [r["absorbed ms"] for r in rows], "D-.", color=SCHEME_STYLE["MLA"]["color"],
            label="absorbed: attend in the latent space")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(S, labels=[str(s) for s in S])
    ax.set_xlabel("cached tokens")
    ax.set_ylabel("ms per decode step (CPU)")
    ax.legend(frameon=False, fontsize=8)
