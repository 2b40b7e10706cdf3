"""The attention benchmark: ``python -m course_lib.bench --help``.

Public API (chapters import these)::

    from course_lib.bench import run_sweep, load_results, measure_peak_memory, matmul_rate
    data = run_sweep([256, 512], rounds=3, memory="batched", progress=False)
    data["results"][0]  # {"impl", "n", "causal", "median_s", "best_s", "gflops_median", ...}

Modules: ``flops`` (FLOP conventions), ``timing`` (synchronised, interleaved timing), ``memory``
(peak extra memory in a fresh subprocess), ``matmul`` (the matmul-rate yardstick), ``workloads``
(what is run), ``sweep`` (the loop), ``report`` (JSON, markdown, target checks), ``machine``.
"""

from .flops import FLOP_CONVENTION, attention_flops, matmul_flops
from .machine import machine_info
from .matmul import matmul_rate
from .memory import measure_peak_memory, measure_peak_memory_many
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
from .sweep import SCHEMA, run_sweep
from .timing import interleaved_rounds, summarize, time_call
from .workloads import implementations

__all__ = [
    "FLOP_CONVENTION", "SCHEMA", "attention_flops", "check_targets", "checks_table",
    "describe_run", "implementations", "memory_table", "timing_table",
    "interleaved_rounds", "load_results", "machine_info", "matmul_flops", "matmul_rate",
    "measure_peak_memory", "measure_peak_memory_many", "result_stem", "rows", "run_sweep",
    "summarize", "time_call", "to_markdown", "validate", "write_json", "write_markdown",
    "write_report",
]
