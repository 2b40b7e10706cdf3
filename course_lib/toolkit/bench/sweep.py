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
from tqdm.auto import tqdm

from .flops import FLOP_CONVENTION, attention_flops
from .machine import load_average, machine_info
from .matmul import default_matmul_size, rate_from_times
from .memory import (
    CPU_METHOD,
    CUDA_METHOD,
    measure_peak_memory,
    measure_peak_memory_many,
    peak_extra_memory,
)
from .timing import best_time, interleaved_rounds, summarize, torch_threads
from .workloads import TORCH_IMPL, attention, implementations, make_inputs, matmul

SCHEMA = "course_lib.bench/1"
MATMUL = "__matmul__"
#: paths whose memory grows as L·S (the tile-autograd contrast: in training), skipped above
#: ``naive_max_n``
NAIVE_IMPLS = ("reference", "flash_tile_autograd")
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


def run_sweep(ns: Iterable[int] = DEFAULT_N, impls: Sequence[str] | None = None, *,
              threads: int | None = None, **options: Any) -> dict[str, Any]:
    """Benchmark ``impls`` (default: ``course_lib.IMPLEMENTATIONS`` + ``"torch"``) over ``ns``
    on ``threads`` torch threads (None: torch's setting), restored afterwards; ``options``: see
    :func:`_run_sweep`."""
    with torch_threads(threads):
        return _run_sweep(ns, impls, threads=threads, **options)


def _run_sweep(
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
    available = implementations(contrast=True)
    impls = list(implementations()) if impls is None else list(impls)
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
    bar = tqdm(total=n_steps, desc="bench", disable=not progress)
    load_start = load_average()
    info = machine_info(device)

    results: list[dict[str, Any]] = []
    matmul_times: list[float] = []
    for c, n in configs:
        common = dict(batch=batch, heads=heads, n=n, d=d, causal=c, dtype=dtype, device=device,
                      backward=backward, seed=seed)
        participants, out_of_memory = _fitting_participants(runs(n), common, is_cuda)
        participants[MATMUL] = matmul(matmul_size, dtype, device, seed)

        def step(name: str, r: int, n: int = n, c: bool = c) -> None:
            label = f"{'causal ' if c else ''}n={n} {name.strip('_')} round {r + 1}"
            bar.set_postfix_str(label, refresh=False)
            bar.update()
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
            elif impl in out_of_memory:
                row["skipped"] = out_of_memory[impl]
                row["out_of_memory"] = True
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
            bar.update(len(specs))
            memory_method = measured[0]["method"] if measured else memory_method
        else:
            measured = []
            for (f, kw, wkw), r in zip(specs, points, strict=True):
                try:
                    measured.append(measure_peak_memory(f, kw, warmup_kwargs=wkw,
                                                        threads=threads))
                except torch.OutOfMemoryError:   # fitted when timed, not once more beside
                    gc.collect()                 # the allocator's cache: no figure
                    torch.cuda.empty_cache()
                    measured.append({"peak_extra_bytes": None, "source": "out of memory"})
                bar.set_postfix_str(f"memory {'causal ' if r['causal'] else ''}n={r['n']} "
                                    f"{r['impl']}", refresh=False)
                bar.update()
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
        "time_method": "torch.utils.benchmark.Timer (" + ("accelerator synchronised, "
                        if is_cuda else "") + "wall clock); interleaved rounds, order rotated "
                        "each round; one sample = enough back-to-back calls to last min_sample_s",
        "memory_method": memory_method,
        "matmul": yardstick,
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "command": command if command is not None else " ".join(sys.argv),
        "impl_notes": {TORCH_IMPL: "torch.nn.functional.scaled_dot_product_attention called "
                                   "directly (no course_lib wrapper)",
                       "flash": "course_lib.flash: tiled forward; backward recomputes each "
                                "tile's P from the saved log-sum-exp",
                       "flash_tile_autograd": "course_lib.flash.tile_autograd_attention: the "
                                              "same tiled forward, gradients by autograd, which "
                                              "keeps every tile P"},
    }
    return {"schema": SCHEMA, "meta": meta, "results": results}


def _fitting_participants(impls: Sequence[str], common: dict[str, Any], probe: bool
                          ) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """``(runs, out_of_memory)``: each implementation's ``run()``, called once first when
    ``probe`` (CUDA) so one that runs out of device memory is recorded (its reason in
    ``out_of_memory``) instead of ending the sweep."""
    participants: dict[str, Callable[[], object]] = {}
    out_of_memory: dict[str, str] = {}
    for impl in impls:
        try:
            run = attention(impl, **common)
            if probe:
                run()
                torch.cuda.synchronize()
            participants[impl] = run
        except torch.OutOfMemoryError as e:
            out_of_memory[impl] = f"out of memory on {common['device']}: " + \
                str(e).split(".")[0]
            gc.collect()
            torch.cuda.empty_cache()
    return participants, out_of_memory


def quick_sweep(implementations: dict[str, Callable[..., torch.Tensor]], ns: Sequence[int], *,
                batch: int = 1, heads: int = 8, d: int = 64, repeats: int = 3, seed: int = 0,
                min_total_s: float = 0.1, threads: int | None = 1, clock: str = "cpu",
                progress: bool = True, memory: str = "in-process") -> list[dict[str, Any]]:
    """A sweep small enough to run live in a chapter: time and peak extra memory of
    each implementation on ``(batch, heads, n, d)`` inputs.

    Each point is :func:`~.timing.best_time`: best of at least ``repeats`` runs and of at least
    ``min_total_s`` seconds of runs (many runs for quick calls, so one of them escapes the noise
    of a shared machine). By default it runs on ``threads=1`` (restored afterwards) and reads the
    CPU clock: the CPU time one thread spends is what the FLOP count predicts, whatever else the
    machine is doing. Memory: ``memory="in-process"`` reads :func:`~.memory.peak_extra_memory`
    around each call, in this process; ``"fresh"`` measures every point in one fresh subprocess
    (:func:`~.memory.measure_peak_memory_many`), away from this process's other threads (a
    notebook kernel's message queues grow and shrink on their own under load); it needs the
    implementations to be the benchmark's own, by name (:func:`~.workloads.implementations`).
    Returns one record per (implementation, n): ``impl, n, seconds``
    (best), its split ``user_seconds``/``system_seconds`` (CPU clock only), ``peak_bytes``,
    ``flops`` (4·B·H·n²·d) and ``gflops_per_s``.
    """
    if memory not in ("in-process", "fresh"):
        raise ValueError(f"memory must be 'in-process' or 'fresh', got {memory!r}")
    if memory == "fresh":
        from . import workloads  # the parameter ``implementations`` hides the function

        known = workloads.implementations(contrast=True)
        foreign = [name for name, fn in implementations.items() if known.get(name) is not fn]
        if foreign:
            raise ValueError(f"memory='fresh' measures the benchmark's own implementations by "
                             f"name; not one of them: {foreign}")
    records = []
    # The bar is shown in the book's run too (the cell's outputs are then the ones nbval compares
    # in both modes); the book's build drops it, a dead widget there (tools/book_execute.py).
    with torch_threads(threads), tqdm(total=len(implementations) * len(ns), desc="sweep",
                                      disable=not progress) as bar:
        for n in ns:
            q, k, v = make_inputs(batch, heads, n, d, seed=seed + n)
            for name, attend in implementations.items():
                def call(attend=attend, q=q, k=k, v=v):
                    return attend(q, k, v)

                seconds, user, system = best_time(call, repeats=repeats,
                                                  min_total_s=min_total_s, clock=clock)
                peak = peak_extra_memory(call, repeats=1) if memory == "in-process" else None
                flops = attention_flops(batch, heads, n, d)
                records.append({"impl": name, "n": n, "seconds": seconds, "user_seconds": user,
                                "system_seconds": system, "peak_bytes": peak,
                                "flops": flops, "gflops_per_s": flops / seconds / 1e9})
                bar.set_postfix_str(f"{name} n={n}", refresh=False)
                bar.update()
    if memory == "fresh":
        # warmed up at full size: one-off allocations of a first large call (seen: 4 MiB at the
        # first point of a make test run, not elsewhere) land in the baseline, not in the peak
        specs = [("attention", kw, kw) for kw in
                 (dict(impl=r["impl"], batch=batch, heads=heads, n=r["n"], d=d, seed=seed + r["n"])
                  for r in records)]
        for r, m in zip(records, measure_peak_memory_many(specs, threads=threads), strict=True):
            r["peak_bytes"] = m["peak_extra_bytes"]
    return records
