"""Figures of the Flash chapter: arithmetic intensity, the tile grid, memory and time vs n."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import to_hex, to_rgb
from matplotlib.patches import Patch, Rectangle

from course_lib.toolkit.plotting import LINESTYLES, MARKERS, OKABE_ITO

from .helpers import arithmetic_intensity

#: one colour, marker and dash per implementation, reused by every figure of the chapter (colour
#: is never the only cue; markers and dashes in the order ``toolkit.plotting.rate_plot`` gives
#: them to ``gpu.IMPLS``)
IMPL_COLORS = {"reference": OKABE_ITO["vermillion"], "flash": OKABE_ITO["blue"],
               "sdpa": OKABE_ITO["bluish green"], "torch": OKABE_ITO["reddish purple"],
               "flash_tile_autograd": OKABE_ITO["orange"]}
IMPL_MARKERS = dict(zip(IMPL_COLORS, MARKERS, strict=False))
IMPL_LINESTYLES = dict(zip(IMPL_COLORS, LINESTYLES, strict=False))
IMPL_LABELS = {"reference": "naive (reference)", "flash": "course_lib.flash",
               "sdpa": "course_lib.sdpa", "torch": "torch SDPA (direct)",
               "flash_tile_autograd": "flash tiles, autograd backward"}
MiB = 2**20


def _tint(colour: str, share: float) -> str:
    """``colour`` mixed with white, ``share`` of it kept (a light fill that text reads on)."""
    return to_hex([share * c + (1 - share) for c in to_rgb(colour)])


#: tile fills: computed (light sky blue), crossing the diagonal (light orange, also hatched),
#: skipped (near-white grey, and unnumbered)
_TILE_COLORS = {"full": _tint(OKABE_ITO["sky blue"], 0.5),
                "diagonal": _tint(OKABE_ITO["orange"], 0.5), "skipped": "0.95"}


def intensity_plot(ax: plt.Axes, ns: Sequence[int], d: int, block_q: int,
                   ridges: Mapping[str, float]) -> None:
    """Arithmetic intensity (FLOP/byte) of the naive and tiled paths vs n, with machine ridges.

    A path whose intensity lies below a machine's ridge (peak FLOP/s ÷ bandwidth) is limited by
    memory traffic on that machine, above it by arithmetic.
    """
    ns = list(ns)
    ax.plot(ns, [arithmetic_intensity(n, d, "naive") for n in ns], "o-",
            color=IMPL_COLORS["reference"], label="naive: S and P go through memory")
    ax.plot(ns, [arithmetic_intensity(n, d, "flash", block_q) for n in ns], "s-",
            color=IMPL_COLORS["flash"],
            label=f"tiled, K/V re-read from main memory ($B_q$={block_q})")
    ax.plot(ns, [arithmetic_intensity(n, d, "flash_l2") for n in ns], "^--",
            color=IMPL_COLORS["flash"], alpha=0.6,
            label="tiled, K/V re-reads served by L2 (main memory: Q, K, V, O once)")
    for (label, ridge), style in zip(ridges.items(), ("--", ":", "-."), strict=False):
        ax.axhline(ridge, color="0.35", ls=style, lw=1)
        ax.text(ns[0], ridge * 1.12, f"ridge: {label}", fontsize=8, color="0.25")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length n (tokens)")
    ax.set_ylabel("arithmetic intensity (FLOP / byte)")
    ax.set_title(f"FLOPs per byte moved, one head, E = {d}, fp32")
    ax.legend(loc="upper left", fontsize=7)


def tile_grid(ax: plt.Axes, L: int, S: int, block_q: int, block_k: int, causal: bool = False,
              order: bool = True) -> dict[str, int]:
    """Draw the ``(L, S)`` score matrix cut into ``(B_q, B_k)`` tiles; returns tile counts.

    Fills: computed tile, tile crossing the causal diagonal (partly masked; also hatched), skipped
    tile (no visiting number).
    With ``order`` each computed tile shows its visiting order.
    """
    counts = {"full": 0, "diagonal": 0, "skipped": 0}
    colors, hatches = _TILE_COLORS, {"full": "", "diagonal": "///", "skipped": ""}
    k = 0
    for i0 in range(0, L, block_q):
        i1 = min(i0 + block_q, L)
        for j0 in range(0, S, block_k):
            j1 = min(j0 + block_k, S)
            if causal and j0 > i1 - 1:
                kind = "skipped"
            elif causal and j1 - 1 > i0:
                kind = "diagonal"
            else:
                kind = "full"
            counts[kind] += 1
            ax.add_patch(Rectangle((j0, i0), j1 - j0, i1 - i0, facecolor=colors[kind],
                                   edgecolor="0.3", lw=1, hatch=hatches[kind]))
            if order and kind != "skipped":
                k += 1
                ax.text((j0 + j1) / 2, (i0 + i1) / 2, str(k), ha="center", va="center",
                        fontsize=8)
    if causal:
        ax.plot([0, min(L, S)], [0, min(L, S)], color=OKABE_ITO["vermillion"], lw=1.5)
    ax.set_xlim(0, S)
    ax.set_ylim(L, 0)
    ax.set_aspect("equal")
    ax.set_xlabel(f"key index j (blocks of $B_k$={block_k})")
    ax.set_ylabel(f"query index i (blocks of $B_q$={block_q})")
    ax.set_title(("causal, " if causal else "") + f"{L}×{S} scores in tiles")
    handles = [Patch(facecolor=colors["full"], edgecolor="0.3", label="computed")]
    if causal:
        handles += [Patch(facecolor=colors["diagonal"], edgecolor="0.3", hatch=hatches["diagonal"],
                          label="on the diagonal"),
                    Patch(facecolor=colors["skipped"], edgecolor="0.3", label="skipped")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3,
              fontsize=8, frameon=False)
    return counts


def per_impl_vs_n(ax: plt.Axes, series: Mapping[str, tuple[Sequence[int], Sequence[float]]],
                  ylabel: str, title: str, guides: Mapping[str, float] | None = None) -> None:
    """Log-log lines ``impl -> (ns, values)``; ``guides`` = {label: slope} dashed reference lines
    anchored at the first point of the first series."""
    for impl, (ns, vals) in series.items():
        ax.plot(ns, vals, marker=IMPL_MARKERS.get(impl, "o"), ls=IMPL_LINESTYLES.get(impl, "-"),
                color=IMPL_COLORS.get(impl, "0.3"), label=IMPL_LABELS.get(impl, impl))
    if guides and series:
        ns0, v0 = next(iter(series.values()))
        x = np.array(ns0, dtype=float)
        for (label, slope), style in zip(guides.items(), ("--", ":"), strict=False):
            ax.plot(x, v0[0] * (x / x[0]) ** slope, ls=style, color="0.5", lw=1, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length n (tokens)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)


def memory_series(rows: Sequence[Mapping], impls: Sequence[str]
                  ) -> dict[str, tuple[list[int], list[float]]]:
    """``impl -> (ns, peak extra MiB)`` from benchmark rows (rows without memory dropped)."""
    out = {}
    for impl in impls:
        pts = sorted((r["n"], r["peak_extra_bytes"] / MiB) for r in rows
                     if r["impl"] == impl and r.get("peak_extra_bytes"))
        if pts:
            out[impl] = ([p[0] for p in pts], [p[1] for p in pts])
    return out


def time_series(rows: Sequence[Mapping], impls: Sequence[str]
                ) -> dict[str, tuple[list[int], list[float]]]:
    """``impl -> (ns, median ms)`` from benchmark rows."""
    out = {}
    for impl in impls:
        pts = sorted((r["n"], r["median_s"] * 1e3) for r in rows
                     if r["impl"] == impl and "median_s" in r)
        if pts:
            out[impl] = ([p[0] for p in pts], [p[1] for p in pts])
    return out
