"""The attention benchmark: ``python -m course_lib.bench --help``.

Public API (chapters import these)::

    from course_lib.toolkit.bench import run_sweep, load_results, measure_peak_memory, matmul_rate
    data = run_sweep([256, 512], rounds=3, memory="batched", progress=False)
    data["results"][0]  # {"impl", "n", "causal", "median_s", "best_s", "gflops_median", ...}

Modules: ``flops`` (FLOP conventions and counting), ``timing`` (``torch.utils.benchmark.Timer``,
wall or CPU clock, interleaved rounds), ``memory`` (peak extra memory in a fresh subprocess, or
in-process for live sweeps), ``matmul`` (the matmul-rate yardstick), ``workloads`` (what is run),
``sweep`` (the full sweep and the chapters' quick one; progress bars are ``tqdm``), ``report``
(JSON, markdown, target checks), ``machine`` (CPU, caches, threads, load).

The committed results (``python -m course_lib.bench --out course_lib/toolkit/bench/results``)
ship with the package in :data:`RESULTS_DIR`, so the chapters find them in any install.
"""

from pathlib import Path

from .flops import FLOP_CONVENTION, attention_core_flops, attention_flops, count_flops, matmul_flops
from .machine import cache_sizes, machine_info
from .matmul import matmul_rate
from .memory import measure_peak_memory, measure_peak_memory_many, peak_extra_memory
from .report import (
    check_targets,
    checks_table,
    describe_run,
    load_results,
    memory_table,
    result_stem,
    rows,
    timing_table,
    to_markdown,
    validate,
    write_json,
    write_markdown,
    write_report,
)
from .sweep import SCHEMA, quick_sweep, run_sweep
from .timing import best_time, interleaved_rounds, summarize, time_call, time_call_split
from .workloads import implementations

RESULTS_DIR = Path(__file__).resolve().parent / "results"

__all__ = [
    "FLOP_CONVENTION", "RESULTS_DIR", "SCHEMA", "attention_core_flops", "attention_flops",
    "best_time", "cache_sizes", "check_targets", "checks_table", "count_flops",
    "peak_extra_memory", "quick_sweep", "time_call_split",
    "describe_run", "implementations", "memory_table", "timing_table",
    "interleaved_rounds", "load_results", "machine_info", "matmul_flops", "matmul_rate",
    "measure_peak_memory", "measure_peak_memory_many", "result_stem", "rows", "run_sweep",
    "summarize", "time_call", "to_markdown", "validate", "write_json", "write_markdown",
    "write_report",
]
