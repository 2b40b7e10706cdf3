"""The committed GPU sweeps of the Flash chapter: read, summarise, compare.

The files are ``course_lib/toolkit/bench/results/cuda-<dtype>-d<E>[-backward].json`` (schema
``course_lib.bench/1``, written by ``tools/gpu/run_checks.sh``): per ``(impl, n, causal)`` the
median seconds, the achieved rate (``gflops_median``, FLOPs ``4·B·H·n²·E``, halved when causal,
×3.5 with the backward pass), its fraction of the matmul rate timed in the same rounds, and the
peak extra device memory; a row that ran out of memory says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from course_lib.toolkit.bench import RESULTS_DIR, load_results

MiB = 2**20
#: the chapter's column order: naive, tiled in PyTorch, the course's SDPA wrapper, torch direct
IMPLS = ("reference", "flash", "sdpa", "torch")
Key = tuple[str, int, bool]          # (dtype, E, backward)


def gpu_runs(root: str | Path | None = None) -> dict[Key, dict[str, Any]]:
    """The committed CUDA sweeps by ``(dtype, E, backward)``, e.g. ``("bfloat16", 128, False)``."""
    folder = RESULTS_DIR if root is None else Path(root)
    runs: dict[Key, dict[str, Any]] = {}
    for path in sorted(folder.glob("cuda-*.json")):
        data = load_results(path)
        m = data["meta"]
        runs[(m["dtype"], int(m["d"]), bool(m["backward"]))] = data
    return runs


def _rows(run: dict[str, Any], impl: str, causal: bool) -> dict[int, dict[str, Any]]:
    return {r["n"]: r for r in run["results"] if r["impl"] == impl and r["causal"] == causal}


def tflops(run: dict[str, Any], impl: str, causal: bool = False) -> dict[int, float]:
    """Achieved TFLOP/s (median time) per n where ``impl`` ran."""
    return {n: r["gflops_median"] / 1e3 for n, r in _rows(run, impl, causal).items()
            if "gflops_median" in r}


def matmul_tflops(run: dict[str, Any]) -> float:
    """The run's yardstick: median TFLOP/s of the square matmul timed in the same rounds."""
    return run["meta"]["matmul"]["gflops_median"] / 1e3


def fraction_of_matmul(run: dict[str, Any], impl: str, causal: bool = False) -> dict[int, float]:
    """Achieved rate ÷ matmul rate, per n."""
    return {n: r["frac_matmul"] for n, r in _rows(run, impl, causal).items()
            if "frac_matmul" in r}


def time_ratio(run: dict[str, Any], slow: str, fast: str, causal: bool = False
               ) -> dict[int, float]:
    """``median time of slow ÷ median time of fast`` per n where both ran (how many times faster
    ``fast`` is)."""
    a, b = _rows(run, slow, causal), _rows(run, fast, causal)
    return {n: a[n]["median_s"] / b[n]["median_s"] for n in sorted(a)
            if n in b and "median_s" in a[n] and "median_s" in b[n]}


def peak_mib(run: dict[str, Any], impl: str, causal: bool = False) -> dict[int, float]:
    """Peak extra device memory in MiB per n (inputs excluded) where it was measured."""
    return {n: r["peak_extra_bytes"] / MiB for n, r in _rows(run, impl, causal).items()
            if r.get("peak_extra_bytes")}


def out_of_memory(run: dict[str, Any], impl: str, causal: bool = False) -> list[int]:
    """The lengths at which ``impl`` ran out of device memory."""
    return sorted(n for n, r in _rows(run, impl, causal).items() if r.get("out_of_memory"))


def summary_table(runs: dict[Key, dict[str, Any]], n: int, causal: bool = False) -> str:
    """Markdown: one row per (dtype, E, pass) with each implementation's TFLOP/s at ``n``, the
    matmul rate of the same run, and the course SDPA's fraction of it."""
    head = ["dtype", "E", "pass", "matmul TFLOP/s",
            *(f"{impl} TFLOP/s" for impl in IMPLS), "sdpa ÷ matmul"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---|" + "---:|" * (len(head) - 3)]
    for (dtype, e, backward), run in sorted(runs.items()):
        cells = []
        for impl in IMPLS:
            rate = tflops(run, impl, causal).get(n)
            oom = n in out_of_memory(run, impl, causal)
            cells.append("out of memory" if oom else "–" if rate is None else f"{rate:.1f}")
        frac = fraction_of_matmul(run, "sdpa", causal).get(n)
        lines.append(f"| {dtype} | {e} | {'fwd+bwd' if backward else 'forward'} | "
                     f"{matmul_tflops(run):.0f} | " + " | ".join(cells) +
                     f" | {'–' if frac is None else f'{frac:.2f}'} |")
    return "\n".join(lines)


def rate_series(run: dict[str, Any], causal: bool = False
                ) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list[int]], float]:
    """``(series, failed, ceiling)`` for :func:`course_lib.toolkit.plotting.rate_plot`:
    TFLOP/s per n for each implementation, the lengths where it ran out of memory, and the
    run's matmul rate."""
    series = {impl: sorted(tflops(run, impl, causal).items()) for impl in IMPLS}
    failed = {impl: out_of_memory(run, impl, causal) for impl in IMPLS}
    return series, failed, matmul_tflops(run)
