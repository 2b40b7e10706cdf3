"""The sweep: implementations × n × (causal or not), timed in interleaved rounds, memory measured.

``run_sweep(...)`` returns a JSON-ready dict (schema ``course_lib.bench/1``)::

    {"schema": ..., "meta": {machine, config, flop and memory conventions, matmul yardstick},
     "results": [{"impl", "n", "causal", "median_s", "best_s", "gflops_median",
                  "frac_matmul", "peak_extra_bytes", ...}, ...]}
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from .flops import FLOP_CONVENTION, attention_flops
from .machine import load_average, machine_info
from .matmul import default_matmul_size, rate_from_times
from .memory import CPU_METHOD, CUDA_METHOD, measure_peak_memory, measure_peak_memory_many
from .progress import Progress
from .timing import interleaved_rounds, summarize
from .workloads import TORCH_IMPL, attention, implementations, matmul

SCHEMA = "course_lib.bench/1"
MATMUL = "__matmul__"
NAIVE_IMPLS = ("reference",)
DEFAULT_N = (256, 512, 1024, 2048, 4096, 8192)


def default_dtype(device: str) -> str:
    """float32 on CPU, bfloat16 on CUDA (where the fused kernels live)."""
    return "bfloat16" if torch.device(device).type == "cuda" else "float32"


def default_naive_max_n(device: str) -> int:
    """Largest n the naive path runs at by default: 4096 on CPU (≈2 GiB of scores at H=8 beyond
    that), 16384 on CUDA."""
    return 16384 if torch.device(device).type == "cuda" else 4096


def _paired_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True) if y > 0]


def run_sweep(
    ns: Iterable[int] = DEFAULT_N,
    impls: Sequence[str] | None = None,
    *,
    d: int = 64,
    heads: int = 8,
    batch: int = 1,
    causal: Sequence[bool] = (False, True),
    dtype: str | None = None,
    device: str = "cpu",
    rounds: int = 7,
    warmup: int = 1,
    backward: bool = False,
    memory: bool | str = True,
    naive_max_n: int | None = None,
    matmul_size: int | None = None,
    min_sample_s: float = 0.02,
    threads: int | None = None,
    seed: int = 0,
    progress: bool = True,
    command: str | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Benchmark ``impls`` (default: ``course_lib.IMPLEMENTATIONS`` + ``"torch"``) over ``ns``.

    Per ``(causal, n)`` every implementation and a square matmul (the yardstick) are timed in
    ``rounds`` interleaved rounds. ``memory``: True = one fresh subprocess per point (CPU),
    ``"batched"`` = one subprocess for all points (quicker, for live demos), False = skip.
    The naive ``reference`` is skipped above ``naive_max_n`` (recorded as skipped).
    """
    device = str(torch.device(device))
    dtype = default_dtype(device) if dtype is None else dtype
    naive_max_n = default_naive_max_n(device) if naive_max_n is None else naive_max_n
    matmul_size = default_matmul_size(device) if matmul_size is None else matmul_size
    if threads is not None:
        torch.set_num_threads(threads)
    available = implementations()
    impls = list(available) if impls is None else list(impls)
    for name in impls:
        if name not in available:
            raise ValueError(f"unknown implementation {name!r}; choose from {sorted(available)}")
    ns = [int(n) for n in ns]
    causal = [bool(c) for c in causal]
    is_cuda = torch.device(device).type == "cuda"

    def runs(n: int) -> list[str]:
        return [i for i in impls if not (i in NAIVE_IMPLS and n > naive_max_n)]

    configs = [(c, n) for c in causal for n in ns]
    n_mem = sum(len(runs(n)) for _, n in configs) if memory else 0
    n_steps = sum((len(runs(n)) + 1) * rounds for _, n in configs) + n_mem
    bar = Progress(n_steps, desc="bench", enabled=progress)
    load_start = load_average()
    info = machine_info(device)

    results: list[dict[str, Any]] = []
    matmul_times: list[float] = []
    for c, n in configs:
        common = dict(batch=batch, heads=heads, n=n, d=d, causal=c, dtype=dtype, device=device,
                      backward=backward, seed=seed)
        participants = {i: attention(i, **common) for i in runs(n)}
        participants[MATMUL] = matmul(matmul_size, dtype, device, seed)

        def step(name: str, r: int, n: int = n, c: bool = c) -> None:
            label = f"{'causal ' if c else ''}n={n} {name.strip('_')} round {r + 1}"
            bar.update(label)
            if on_progress is not None:
                on_progress(label)

        times = interleaved_rounds(participants, rounds, device, warmup=warmup,
                                   min_sample_s=min_sample_s, on_step=step)
        matmul_times += times.pop(MATMUL)
        flops = attention_flops(batch, heads, n, d, c, backward)
        for impl in impls:
            row: dict[str, Any] = {"impl": impl, "n": n, "causal": c, "backward": backward,
                                   "flops": flops}
            if impl in times:
                row.update(summarize(times[impl]))
                row["times_s"] = [round(t, 7) for t in times[impl]]
                row["gflops_median"] = flops / row["median_s"] / 1e9
                row["gflops_best"] = flops / row["best_s"] / 1e9
                if TORCH_IMPL in times and impl != TORCH_IMPL:
                    ratios = _paired_ratios(times[impl], times[TORCH_IMPL])
                    row["time_vs_torch_paired_median"] = summarize(ratios)["median_s"]
            else:
                row["skipped"] = f"naive path skipped above n={naive_max_n} (--naive-max-n)"
            results.append(row)
        del participants
        gc.collect()

    yardstick = {**rate_from_times(matmul_times, matmul_size), "size": matmul_size,
                 "dtype": dtype, "how": "square matmul interleaved in every round of every point"}
    for row in results:
        if "gflops_median" in row:
            row["frac_matmul"] = row["gflops_median"] / yardstick["gflops_median"]

    memory_method = None
    if memory:
        memory_method = CUDA_METHOD if is_cuda else CPU_METHOD
        points = [r for r in results if "skipped" not in r]
        specs = []
        for r in points:
            kw = dict(impl=r["impl"], batch=batch, heads=heads, n=r["n"], d=d, causal=r["causal"],
                      dtype=dtype, device=device, backward=backward, seed=seed)
            specs.append(("attention", kw, {**kw, "n": min(r["n"], 128)}))
        if memory == "batched" and not is_cuda:
            measured = measure_peak_memory_many(specs, threads=threads)
            bar.update("memory", steps=len(specs))
            memory_method = measured[0]["method"] if measured else memory_method
        else:
            measured = []
            for (f, kw, wkw), r in zip(specs, points, strict=True):
                measured.append(measure_peak_memory(f, kw, warmup_kwargs=wkw, threads=threads))
                bar.update(f"memory {'causal ' if r['causal'] else ''}n={r['n']} {r['impl']}")
        for r, m in zip(points, measured, strict=True):
            r["peak_extra_bytes"] = m["peak_extra_bytes"]
            r["memory_source"] = m["source"]
    bar.close()

    meta = {
        **info,
        "dtype": dtype,
        "batch": batch, "heads": heads, "d": d, "ns": ns, "causal": causal,
        "backward": backward, "rounds": rounds, "warmup": warmup, "min_sample_s": min_sample_s,
        "impls": impls, "naive_max_n": naive_max_n, "seed": seed,
        "flop_convention": FLOP_CONVENTION,
        "time_method": ("CUDA events after torch.cuda.synchronize" if is_cuda else
                        "time.perf_counter") + "; interleaved rounds, order rotated each round; "
                        "one sample = enough back-to-back calls to last min_sample_s",
        "memory_method": memory_method,
        "matmul": yardstick,
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "command": command if command is not None else " ".join(sys.argv),
        "impl_notes": {TORCH_IMPL: "torch.nn.functional.scaled_dot_product_attention called "
                                   "directly (no course_lib wrapper)"},
    }
    return {"schema": SCHEMA, "meta": meta, "results": results}
