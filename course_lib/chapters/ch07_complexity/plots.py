"""Figures of the complexity chapter: FLOPs and memory against n, measured sweeps with slopes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from . import helpers as cx

COLOURS = {"reference": "#d95f02", "flash": "#1b9e77", "sdpa": "#7570b3",
           "core": "#d95f02", "projections": "#1b9e77", "total": "#444444"}


def plot_flops_vs_n(ax: plt.Axes, ns: Sequence[int], d_model: int) -> int:
    """Log-log FLOPs of the attention core (4n²D) and the projections (8nD²) for model width
    ``d_model`` (D); marks the crossover n = 2D. Returns the crossover."""
    n = np.asarray(ns, dtype=float)
    core = 4 * n**2 * d_model
    proj = 8 * n * d_model**2
    ax.loglog(n, core, color=COLOURS["core"], lw=2, label="attention core 4n²D")
    ax.loglog(n, proj, color=COLOURS["projections"], lw=2, label="projections 8nD²")
    ax.loglog(n, core + proj, color=COLOURS["total"], lw=1, ls="--", label="layer total")
    n_star = cx.crossover_n(d_model)
    ax.axvline(n_star, color="gray", ls=":", lw=1)
    ax.annotate(f"n = 2D = {n_star}", (n_star, 8 * n_star * d_model**2), xytext=(8, -18),
                textcoords="offset points", fontsize=9)
    ax.set_xlabel("sequence length n (tokens)")
    ax.set_ylabel("FLOPs per layer (batch 1)")
    ax.set_title(f"who dominates? D = {d_model}")
    ax.legend(fontsize=8, loc="upper left")
    return n_star


def plot_memory_vs_n(ax: plt.Axes, ns: Sequence[int], heads: int,
                     cache_bytes: int | None = None) -> None:
    """Bytes of the ``(1, heads, n, n)`` score matrix in float32 and bfloat16 vs n (log-log),
    with the last-level cache size as a horizontal line when given."""
    n = np.asarray(ns, dtype=float)
    for label, nbytes, colour in [("float32", 4, "#d95f02"), ("bfloat16", 2, "#7570b3")]:
        ax.loglog(n, heads * n**2 * nbytes / 2**20, "o-", color=colour, ms=3,
                  label=f"{label}, {heads} heads")
    if cache_bytes:
        ax.axhline(cache_bytes / 2**20, color="gray", ls="--", lw=1)
        ax.text(n[0], cache_bytes / 2**20 * 1.3, f"L3 cache {cx.format_bytes(cache_bytes)}",
                fontsize=8, color="gray")
    ax.set_xlabel("sequence length n (tokens)")
    ax.set_ylabel("score matrix (MiB)")
    ax.set_title("memory of one score matrix")
    ax.legend(fontsize=8, loc="lower right")


def plot_measured(axes: Sequence[plt.Axes], records: list[dict[str, Any]],
                  title_suffix: str = "", min_n: int = 0,
                  min_n_memory: int | None = None) -> dict[str, dict[str, float]]:
    """Two log-log panels from :func:`.helpers.sweep` records: time and peak extra
    memory vs n, one line per implementation, slope in the legend: time fitted on
    ``n >= min_n``, memory on ``n >= min_n_memory`` (default ``min_n``). Returns the slopes."""
    fitted = {"seconds": cx.slopes(records, "seconds", min_n),
              "peak_bytes": cx.slopes(records, "peak_bytes",
                                      min_n if min_n_memory is None else min_n_memory)}
    for ax, metric, unit, scale in [(axes[0], "seconds", "CPU time (ms)", 1e3),
                                    (axes[1], "peak_bytes", "peak extra memory (MiB)", 2**-20)]:
        for name in dict.fromkeys(r["impl"] for r in records):
            rows = [r for r in records if r["impl"] == name and r[metric]]
            ax.loglog([r["n"] for r in rows], [r[metric] * scale for r in rows], "o-",
                      color=COLOURS.get(name), ms=4,
                      label=f"{name}: slope {fitted[metric][name]:.1f}")
        ns = sorted({r["n"] for r in records})
        ax.set_xticks(ns, labels=[str(n) for n in ns], rotation=45 if len(ns) > 5 else 0)
        ax.minorticks_off()
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel(unit)
        ax.set_title(unit.split(" (")[0] + title_suffix)
        ax.legend(fontsize=8)
    return fitted


def plot_rate_vs_n(ax: plt.Axes, rows: list[dict[str, Any]], cliff_n: float | None = None,
                   ylabel: str = "achieved GFLOP/s") -> None:
    """Achieved rate vs n per implementation (rows: impl, n, rate); optional cache-cliff line."""
    for name in dict.fromkeys(r["impl"] for r in rows):
        pts = sorted((r["n"], r["rate"]) for r in rows if r["impl"] == name)
        ax.semilogx([p[0] for p in pts], [p[1] for p in pts], "o-", ms=4,
                    color=COLOURS.get(name), label=name)
    if cliff_n:
        ax.axvline(cliff_n, color="gray", ls="--", lw=1)
        ax.text(cliff_n * 1.05, ax.get_ylim()[1] * 0.9, "scores > L3", fontsize=8, color="gray")
    ns = sorted({r["n"] for r in rows})
    ax.set_xticks(ns, labels=[str(n) for n in ns], rotation=45 if len(ns) > 5 else 0)
    ax.minorticks_off()
    ax.set_xlabel("sequence length n (tokens)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
