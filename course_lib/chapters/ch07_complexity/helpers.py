r"""What attention costs: FLOP and memory formulas, and a small measured sweep.

Counting convention: one multiply-add counts as 2 FLOPs, so ``A (m, k) @ B (k, n)`` costs
``2·m·k·n``. For self-attention over ``n`` tokens of width ``d``:

.. math:: \underbrace{2n^2d}_{QK^\top} + \underbrace{2n^2d}_{PV} = 4n^2d, \qquad
          \underbrace{3\cdot 2nd^2}_{Q,K,V} + \underbrace{2nd^2}_{\text{out}} = 8nd^2

The two terms are equal at ``n = 2d`` (:func:`crossover_n`). Memory of the naive path is
dominated by the ``(B, H, n, n)`` score matrix: ``B·H·n²·bytes`` (:func:`score_matrix_bytes`).

Measuring is the benchmark harness's job (:mod:`course_lib.toolkit.bench`): the chapter runs its
quick sweep live on a few sizes (:func:`sweep`); the full sweep is ``python -m course_lib.bench``,
whose committed results ship with the package (:func:`committed_benchmark`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from course_lib.attention import merge_heads, reference, split_heads
from course_lib.toolkit.bench import RESULTS_DIR, load_results
from course_lib.toolkit.bench.flops import attention_core_flops as attention_core_flops
from course_lib.toolkit.bench.flops import count_flops as count_flops
from course_lib.toolkit.bench.flops import matmul_flops
from course_lib.toolkit.bench.machine import cache_sizes as cache_sizes
from course_lib.toolkit.bench.memory import peak_extra_memory as peak_extra_memory
from course_lib.toolkit.bench.sweep import quick_sweep
from course_lib.toolkit.bench.timing import time_call as time_call
from course_lib.toolkit.bench.timing import time_call_split as time_call_split

sweep = quick_sweep  # the chapter's live sweep is the harness's quick one

# ----------------------------------------------------------------------------- formulas


def projection_flops(n: int, d_model: int) -> int:
    """FLOPs of the four ``(d_model, d_model)`` projections (Q, K, V, out) on ``n`` tokens: 8nd²."""
    return 4 * matmul_flops(n, d_model, d_model)


def layer_flops_breakdown(n: int, d_model: int, num_heads: int = 1) -> dict[str, int]:
    """Matmul FLOPs of one self-attention layer by component (batch 1, biases not counted).

    The core summed over ``num_heads`` heads of width ``d_model / num_heads`` is ``4n²·d_model``,
    independent of the number of heads.
    """
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    dh = d_model // num_heads
    return {
        "Q, K, V projections": 3 * matmul_flops(n, d_model, d_model),
        "scores QKᵀ": num_heads * matmul_flops(n, dh, n),
        "weights·V": num_heads * matmul_flops(n, n, dh),
        "output projection": matmul_flops(n, d_model, d_model),
    }


def layer_flops(n: int, d_model: int, num_heads: int = 1) -> int:
    """Total of :func:`layer_flops_breakdown`: ``4n²d + 8nd²``."""
    return sum(layer_flops_breakdown(n, d_model, num_heads).values())


def crossover_n(d_model: int) -> int:
    """Sequence length where the attention core (4n²d) equals the projections (8nd²): ``n = 2d``."""
    return 2 * d_model


def score_matrix_bytes(n: int, heads: int = 1, batch: int = 1, bytes_per_element: int = 4,
                       s: int | None = None) -> int:
    """Bytes of one ``(batch, heads, n, s)`` score (or weight) tensor: ``B·H·n·s·bytes``."""
    s = n if s is None else s
    return batch * heads * n * s * bytes_per_element


def format_bytes(nbytes: float) -> str:
    """``1536`` -> ``'1.5 KiB'``; binary prefixes, one decimal."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def sequence_model_table(n: int, d: int, kernel: int = 3) -> list[dict[str, Any]]:
    """Per-layer FLOPs, sequential steps and maximum path length for ``n`` tokens of width ``d``.

    Self-attention core (``QKᵀ`` and ``PV``): ``4n²d`` FLOPs, 1 sequential step, path length 1.
    A recurrent layer (one ``d×d`` matmul on the input and one on the state per step): ``4nd²``,
    ``n`` sequential steps, path ``n − 1``. A stack of dilated convolutions with kernel ``k``:
    ``2knd²`` per layer, 1 step per layer, ``ceil(log_k n)`` layers for every token to reach
    every other. Projections (``8nd²`` for attention) are left out, as in Vaswani et al.'s table.
    """
    conv_layers = max(1, math.ceil(math.log(n) / math.log(kernel) - 1e-12))
    return [
        {"layer": "self-attention (core)", "FLOPs": attention_core_flops(n, d),
         "sequential steps": 1, "max path length": 1},
        {"layer": "recurrent", "FLOPs": 2 * matmul_flops(n, d, d), "sequential steps": n,
         "max path length": n - 1},
        {"layer": f"convolution (k={kernel}, dilated)", "FLOPs": kernel * matmul_flops(n, d, d),
         "sequential steps": 1, "max path length": conv_layers},
    ]


# ----------------------------------------------------------------------------- counting


def self_attention_layer(x: torch.Tensor, w_qkv: torch.Tensor, w_o: torch.Tensor, num_heads: int,
                         attend: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
    """One self-attention layer, ``x (B, n, d) -> (B, n, d)``, heads computed by ``attend``.

    ``q, k, v = (x @ w_qkv).split(d)`` with ``w_qkv (d, 3d)``, heads split to ``(B, H, n, d/H)``,
    attended, merged, then ``@ w_o (d, d)``. Default ``attend`` is the textbook reference.
    """
    attend = reference.scaled_dot_product_attention if attend is None else attend
    q, k, v = (x @ w_qkv).split(x.shape[-1], dim=-1)
    out = attend(*(split_heads(t, num_heads) for t in (q, k, v)))  # (B, H, n, d/H)
    return merge_heads(out) @ w_o


def fit_loglog_slope(xs: Iterable[float], ys: Iterable[float]) -> float:
    """Least-squares slope of ``log y`` against ``log x``: the exponent p in ``y ∝ x^p``."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    if len(lx) != len(ly) or len(lx) < 2:
        raise ValueError("need at least two (x, y) pairs of equal length")
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    sxx = sum((x - mx) ** 2 for x in lx)
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly, strict=True)) / sxx


def slopes(records: list[dict[str, Any]], metric: str, min_n: int = 0) -> dict[str, float]:
    """Log-log slope of ``metric`` against ``n`` (points with ``n >= min_n``) per implementation."""
    out: dict[str, float] = {}
    for name in dict.fromkeys(r["impl"] for r in records):
        rows = [r for r in records if r["impl"] == name and r[metric] and r["n"] >= min_n]
        out[name] = fit_loglog_slope([r["n"] for r in rows], [r[metric] for r in rows])
    return out


# ----------------------------------------------------------------------------- committed results


def committed_benchmark(path: str | Path | None = None, device: str = "cpu",
                        causal: bool = False) -> dict[str, Any] | None:
    """The newest committed benchmark run for ``device`` (forward pass), ready for a chapter.

    Reads ``*.json`` in ``path`` (default: the results shipped with the package,
    :data:`course_lib.toolkit.bench.RESULTS_DIR`, written by ``python -m course_lib.bench``).
    Returns
    ``{"caption", "rows": [{"impl", "n", "rate"}], "table", "data"}`` where ``rate`` is the
    achieved GFLOP/s (median) and ``table`` a markdown table, or None if no such run exists.
    """
    root = RESULTS_DIR if path is None else Path(path)
    runs = []
    for file in sorted(root.glob("*.json")) if root.is_dir() else []:
        try:
            data = load_results(file)
        except (ValueError, KeyError, OSError):
            continue
        meta = data["meta"]
        if str(meta.get("device", "")).split(":")[0] == device and not meta.get("backward"):
            runs.append((str(meta.get("timestamp_utc", "")), file.name, data))
    if not runs:
        return None
    _, name, data = max(runs, key=lambda r: (r[0], r[1]))
    m = data["meta"]
    results = sorted((r for r in data["results"] if r["causal"] == causal and "skipped" not in r),
                     key=lambda r: (r["n"], r["impl"]))
    rows = [{"impl": r["impl"], "n": r["n"], "rate": r["gflops_median"]} for r in results]
    lines = ["| n | impl | median ms | GFLOP/s | × matmul rate | peak extra MiB |",
             "|---:|---|---:|---:|---:|---:|"]
    for r in results:
        mem = r.get("peak_extra_bytes")
        lines.append(f"| {r['n']} | {r['impl']} | {r['median_s'] * 1e3:.2f} | "
                     f"{r['gflops_median']:.1f} | {r['frac_matmul']:.2f} | "
                     f"{'' if mem is None else f'{mem / 2**20:.1f}'} |")
    mm = m.get("matmul", {})
    caption = (f"{name}: {m.get('device_name', m.get('cpu_model', ''))}, "
               f"{m.get('threads')} threads, torch {m.get('torch_version')}, {m.get('dtype')}, "
               f"B={m.get('batch')}, H={m.get('heads')}, d={m.get('d')}; matmul yardstick "
               f"{mm.get('gflops_median', float('nan')):.1f} GFLOP/s (median)")
    return {"caption": caption, "rows": rows, "table": "\n".join(lines), "data": data}


def score_memory_rows(ns: Sequence[int], heads: Sequence[int] = (1, 12),
                      dtypes: Sequence[tuple[str, int]] = (("fp32", 4), ("bf16", 2)),
                      ) -> list[dict[str, Any]]:
    """One row per n: the score-matrix size for each head count and dtype, formatted."""
    return [{"n": n, **{f"{h} head{'s' if h > 1 else ''} {name}":
                        format_bytes(score_matrix_bytes(n, h, bytes_per_element=b))
                        for h in heads for name, b in dtypes}}
            for n in ns]


def measured_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sweep records as table rows; measured numbers carry a leading ``≃`` (the book sanitizes
    them in its output comparisons, since they vary from run to run)."""
    return [{"impl": r["impl"], "n": r["n"], "CPU time": f"≃{r['seconds'] * 1e3:.3g} ms",
             "peak extra memory": f"≃{r['peak_bytes'] / 2**20:.3g} MiB",
             "GFLOP/s": f"≃{r['gflops_per_s']:.3g}"} for r in records]


def fits_in(nbytes: int, caches: dict[str, int]) -> str:
    """The smallest cache level (``L2``, ``L3``) that holds ``nbytes``, else ``DRAM``."""
    for level in ("L2", "L3"):
        if level in caches and nbytes <= caches[level]:
            return level
    return "DRAM"


def cliff_rows(records: list[dict[str, Any]], caches: dict[str, int], naive: str = "reference",
               fused: str = "sdpa") -> list[dict[str, Any]]:
    """Per n: the naive path's measured working set (its peak extra memory), the cache level it
    fits in, the achieved GFLOP/s of the naive path on its CPU time and on its user time only,
    the share of its CPU time spent in the OS kernel, and the fused implementation's GFLOP/s."""
    by = {(r["impl"], r["n"]): r for r in records}
    ns = sorted({r["n"] for r in records})
    rows = []
    for n in ns:
        r = by[(naive, n)]
        working = r["peak_bytes"] or 0
        user, system = r.get("user_seconds", math.nan), r.get("system_seconds", math.nan)
        rows.append({"n": n, "working set": working, "fits in": fits_in(working, caches),
                     "naive": r["gflops_per_s"],
                     "naive user-only": r["flops"] / user / 1e9 if user > 0 else math.nan,
                     "kernel share": system / (user + system) if user + system > 0 else math.nan,
                     "fused": by[(fused, n)]["gflops_per_s"]})
    return rows


def os_time_summary(rows: list[dict[str, Any]], share: float = 0.5) -> dict[str, Any] | None:
    """Split :func:`cliff_rows` at the first n where the naive path spends at least ``share`` of
    its CPU time in the OS kernel (fresh pages for its temporaries); None if the first row is
    already there or no row gets there.

    ``n_jump``, ``working_jump``, ``fits_jump``: that n, its working set and the cache level that
    holds it; ``os_before``/``os_jump``: the largest share before it and the share at it;
    ``fast``/``slow``: the best naive GFLOP/s (CPU time) before it / from it on;
    ``user_before``/``user_after``: the same on user time only."""
    jump = next((i for i, r in enumerate(rows) if r["kernel share"] >= share), None)
    if not jump:                                  # None, or 0: nothing to compare with
        return None
    before, after = rows[:jump], rows[jump:]
    return {"n_jump": rows[jump]["n"], "working_jump": rows[jump]["working set"],
            "fits_jump": rows[jump]["fits in"],
            "os_before": max(r["kernel share"] for r in before),
            "os_jump": rows[jump]["kernel share"],
            "fast": max(r["naive"] for r in before), "slow": max(r["naive"] for r in after),
            "user_before": max(r["naive user-only"] for r in before),
            "user_after": max(r["naive user-only"] for r in after)}


def matmul_fractions(bench: dict[str, Any], impls: Sequence[str] = ("reference", "torch"),
                     ) -> dict[int, dict[str, float]]:
    """From :func:`committed_benchmark`: ``{n: {impl: achieved rate / matmul rate}}`` for the
    non-causal sizes where every one of ``impls`` was timed."""
    frac: dict[int, dict[str, float]] = {}
    for r in bench["data"]["results"]:
        if not r["causal"] and "frac_matmul" in r and r["impl"] in impls:
            frac.setdefault(r["n"], {})[r["impl"]] = r["frac_matmul"]
    return {n: f for n, f in sorted(frac.items()) if len(f) == len(impls)}


def cliff_table(records: list[dict[str, Any]], caches: dict[str, int]) -> list[dict[str, str]]:
    """:func:`cliff_rows` formatted for the page; every measured number carries a leading ``≃``."""
    return [{"n": r["n"], "naive working set": f"≃{r['working set'] / 2**20:.3g} MiB",
             "fits in": r["fits in"], "naive GFLOP/s": f"≃{r['naive']:.3g}",
             "naive, user time only": f"≃{r['naive user-only']:.3g}",
             "naive time in OS": f"≃{100 * r['kernel share']:.0f}%",
             "torch kernel GFLOP/s": f"≃{r['fused']:.3g}"}
            for r in cliff_rows(records, caches)]


# ----------------------------------------------------------------------------- beyond full


def sliding_window_pairs(n: int, window: int) -> int:
    """(query, key) pairs of causal sliding-window attention: query ``i`` sees keys
    ``i - window + 1 .. i``, that is ``min(i + 1, window)`` of them (the True cells of
    :func:`course_lib.attention.masks.sliding_window_mask`)."""
    w = min(window, n)
    return w * n - w * (w - 1) // 2


def strided_pairs(n: int, stride: int) -> int:
    """(query, key) pairs of causal strided sparse attention (Child et al.): query ``i`` sees
    the last ``stride`` keys and every ``stride``-th key before them, ``min(i + 1, stride) +
    floor(i / stride)`` keys."""
    return sum(min(i + 1, stride) + i // stride for i in range(n))


def strided_mask(n: int, stride: int) -> torch.Tensor:
    """``(n, n)`` bool, True where ``j <= i`` and (``i - j < stride`` or ``stride`` divides
    ``i - j``)."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) & (((i - j) < stride) | ((i - j) % stride == 0))


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Non-causal linear attention (Katharopoulos et al.): feature map ``elu(x) + 1`` on queries
    and keys, then ``φ(Q) (φ(K)ᵀ V)`` normalised by ``φ(Q) Σ_j φ(k_j)``. Never forms an
    ``(n, n)`` tensor: its matmuls cost ``4·n·E·Ev`` FLOPs per head."""
    fq = torch.nn.functional.elu(q) + 1
    fk = torch.nn.functional.elu(k) + 1
    kv = fk.transpose(-2, -1) @ v                                # (..., E, Ev) per head
    z = (fq * fk.sum(dim=-2, keepdim=True)).sum(dim=-1, keepdim=True)
    return (fq @ kv) / z


def beyond_full_rows(ns: Sequence[int], d_model: int, num_heads: int, window: int
                     ) -> list[dict[str, Any]]:
    """Per n and method: query-key pairs per head, core FLOPs (``4·pairs·D`` for a kernel that
    computes only the allowed pairs; ``4·n·D·E`` for linear attention) and what one layer holds
    per sequence in fp32 instead of the scores (``H·pairs`` numbers, or an ``E × E`` state per
    head). Strided attention uses the stride ``round(sqrt(n))``."""
    E = d_model // num_heads
    rows = []
    for n in ns:
        stride = round(math.sqrt(n))
        for method, pairs in [("full (causal)", n * (n + 1) // 2),
                              (f"sliding window W={window}", sliding_window_pairs(n, window)),
                              (f"strided, stride {stride}", strided_pairs(n, stride)),
                              ("linear (feature map)", None)]:
            flops = 4 * n * d_model * E if pairs is None else 4 * pairs * d_model
            held = num_heads * E * E * 4 if pairs is None else num_heads * pairs * 4
            rows.append({"n": n, "method": method, "pairs per head": pairs,
                         "core FLOPs": flops, "held per layer (bytes)": held})
    return rows
