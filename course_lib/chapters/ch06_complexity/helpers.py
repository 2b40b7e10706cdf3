r"""What attention costs: FLOP and memory formulas, and a small measured sweep.

Counting convention: one multiply-add counts as 2 FLOPs, so ``A (m, k) @ B (k, n)`` costs
``2·m·k·n``. For self-attention over ``n`` tokens of width ``d``:

.. math:: \underbrace{2n^2d}_{QK^\top} + \underbrace{2n^2d}_{PV} = 4n^2d, \qquad
          \underbrace{3\cdot 2nd^2}_{Q,K,V} + \underbrace{2nd^2}_{\text{out}} = 8nd^2

The two terms are equal at ``n = 2d`` (:func:`crossover_n`). Memory of the naive path is
dominated by the ``(B, H, n, n)`` score matrix: ``B·H·n²·bytes`` (:func:`score_matrix_bytes`).

The measuring helpers (:func:`peak_extra_memory`, :func:`time_call`, :func:`sweep`) are small on
purpose: the chapter runs them live on a few sizes; the full sweep is
``python -m course_lib.bench``.
"""

from __future__ import annotations

import ctypes
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

# ----------------------------------------------------------------------------- formulas


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of ``(m, k) @ (k, n)``: ``2·m·k·n`` (one multiply-add = 2 FLOPs)."""
    return 2 * m * k * n


def attention_core_flops(n: int, d: int, s: int | None = None, dv: int | None = None) -> int:
    """FLOPs of ``QKᵀ`` and ``weights·V`` for one head: ``2·n·s·d + 2·n·s·dv`` (= 4n²d if s=n).

    ``n`` queries, ``s`` keys (default ``n``), head width ``d``, value width ``dv`` (default ``d``).
    Softmax, scaling and masking are elementwise, O(n·s), and not counted.
    """
    s = n if s is None else s
    dv = d if dv is None else dv
    return matmul_flops(n, d, s) + matmul_flops(n, s, dv)


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


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Total FLOPs that :class:`torch.utils.flop_counter.FlopCounterMode` records for ``fn(...)``.

    It counts only ops with a registered formula (matmuls, convolutions, some attention kernels):
    elementwise work such as softmax is free in its eyes.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())


def self_attention_layer(x: torch.Tensor, w_qkv: torch.Tensor, w_o: torch.Tensor, num_heads: int,
                         attend: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
    """One self-attention layer, ``x (B, n, d) -> (B, n, d)``, heads computed by ``attend``.

    ``q, k, v = (x @ w_qkv).split(d)`` with ``w_qkv (d, 3d)``, heads split to ``(B, H, n, d/H)``,
    attended, merged, then ``@ w_o (d, d)``. Default ``attend`` is the textbook reference.
    """
    from . import reference

    attend = reference.scaled_dot_product_attention if attend is None else attend
    b, n, d = x.shape
    q, k, v = (x @ w_qkv).split(d, dim=-1)

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(b, n, num_heads, d // num_heads).transpose(1, 2)

    out = attend(heads(q), heads(k), heads(v))                  # (B, H, n, d/H)
    return out.transpose(1, 2).reshape(b, n, d) @ w_o


# ----------------------------------------------------------------------------- the machine


def cache_sizes() -> dict[str, int]:
    """CPU cache sizes in bytes from sysfs: ``L1d``, ``L1i``, ``L2``, ``L3``; {} if unknown."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes: dict[str, int] = {}
    if not root.is_dir():
        return sizes
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1:], 1)
        value = int(size.rstrip("KMG")) * mult
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        sizes[name] = value
    return sizes


def _rss_field(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


_LIBC: Any = None
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def _libc() -> Any:
    global _LIBC
    if _LIBC is None and sys.platform.startswith("linux"):
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
        except OSError:
            _LIBC = False
    return _LIBC or None


def _malloc_for_measuring(on: bool) -> None:
    """glibc settings for a memory measurement (``on``) and back to fast ones (``off``).

    On: blocks >= 64 KiB are mmap'ed and unmapped when freed, and free heap pages are handed
    back to the OS (``malloc_trim``), so every byte a call touches shows in its resident set.
    Off: the limits glibc's adaptive policy reaches after warm-up (mmap above 32 MiB, trim
    above 64 MiB), so timed calls reuse heap memory instead of page-faulting fresh memory.
    """
    libc = _libc()
    if libc is None:
        return
    if on:
        libc.mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
        libc.mallopt(_M_TRIM_THRESHOLD, 128 * 1024)
        libc.malloc_trim(0)
    else:
        libc.mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)
        libc.mallopt(_M_TRIM_THRESHOLD, 64 * 1024 * 1024)


def peak_extra_memory(fn: Callable[[], Any], repeats: int = 2) -> int | None:
    """Peak resident memory ``fn()`` adds on top of what the process already holds, in bytes.

    Method (Linux), the benchmark's method run in-process: with glibc set to return freed memory
    (see :func:`_malloc_for_measuring`),
    reset the kernel's high-water mark (``echo 5 > /proc/self/clear_refs``), run ``fn``, read
    ``VmHWM − VmRSS_before`` (output included). Minimum over ``repeats`` runs (the first run may
    pay for one-off allocations). Returns None where ``/proc`` is unavailable.
    """
    best: int | None = None
    _malloc_for_measuring(True)
    try:
        for _ in range(repeats):
            try:
                with open("/proc/self/clear_refs", "w") as fh:
                    fh.write("5")
            except OSError:
                return None
            before = _rss_field("VmRSS")
            result = fn()
            peak = _rss_field("VmHWM")
            del result
            if before is None or peak is None:
                return None
            extra = max(0, peak - before)
            best = extra if best is None else min(best, extra)
    finally:
        _malloc_for_measuring(False)
    return best


def _cpu_times() -> tuple[float, float]:
    """(user, system) CPU seconds of this process, all threads, microsecond resolution."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


def time_call_split(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1,
                    min_total_s: float = 0.0, max_runs: int = 200,
                    clock: str = "wall") -> tuple[float, float, float]:
    """Like :func:`time_call` but returns ``(best, user, system)`` for the best run; ``user`` and
    ``system`` are CPU seconds (process computing vs. OS kernel working for it, e.g. supplying
    fresh zeroed pages), NaN when ``clock="wall"``."""
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock must be 'wall' or 'cpu', got {clock!r}")
    for _ in range(warmup):
        fn()
    best = (math.inf, math.nan, math.nan)
    spent, runs = 0.0, 0
    while runs < repeats or (spent < min_total_s and runs < max_runs):
        if clock == "cpu":
            u0, s0 = _cpu_times()
            fn()
            u1, s1 = _cpu_times()
            run = ((u1 - u0) + (s1 - s0), u1 - u0, s1 - s0)
        else:
            t0 = time.perf_counter()
            fn()
            run = (time.perf_counter() - t0, math.nan, math.nan)
        spent += run[0]
        runs += 1
        if run[0] < best[0]:
            best = run
    return best


def time_call(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1,
              min_total_s: float = 0.0, max_runs: int = 200, clock: str = "wall") -> float:
    """Best (minimum) seconds of ``fn()`` after ``warmup`` runs.

    ``clock="wall"`` uses :func:`time.perf_counter`; ``clock="cpu"`` the CPU time of this process
    (user + system, all threads), which does not count the time other programs hold the CPU: on
    a shared machine it is far more stable. Runs at least ``repeats`` times and, for quick
    calls, keeps going until ``min_total_s`` seconds were spent (at most ``max_runs`` runs).
    The minimum is the least disturbed run.
    """
    return time_call_split(fn, repeats, warmup, min_total_s, max_runs, clock)[0]


class ProgressBar:
    """A text bar on stderr: ``label [#####.....] 5/10``; no timings, so its text is stable."""

    def __init__(self, total: int, label: str = "sweep", width: int = 20, stream=None) -> None:
        self.total, self.label, self.width = total, label, width
        self.stream = sys.stderr if stream is None else stream
        self.done = 0

    def step(self, note: str = "") -> None:
        """Advance by one. While the HTML book is built only the final state is written (a
        static page would show every ``\r`` update as a line of its own)."""
        self.done += 1
        if os.environ.get("COURSE_LIB_BOOK") == "1" and self.done < self.total:
            return
        filled = round(self.width * self.done / self.total)
        bar = "#" * filled + "." * (self.width - filled)
        end = "\n" if self.done == self.total else ""
        self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {note:<24}{end}")
        self.stream.flush()


def sweep(implementations: dict[str, Callable[..., torch.Tensor]], ns: Sequence[int], *,
          batch: int = 1, heads: int = 8, d: int = 64, repeats: int = 3, seed: int = 0,
          min_total_s: float = 0.1, threads: int | None = 1, clock: str = "cpu",
          progress: bool = True) -> list[dict[str, Any]]:
    """Time and peak extra memory of each implementation on ``(batch, heads, n, d)`` inputs.

    Each point is timed :func:`time_call`-style: best of at least ``repeats`` runs and of at
    least ``min_total_s`` seconds of runs (many runs for quick calls, so one of them escapes the
    noise of a shared machine). By default the sweep runs on ``threads=1`` and reads the CPU
    clock (``clock="cpu"``): the CPU time one thread spends is what the FLOP count predicts,
    whatever else the machine is doing. ``threads=None`` keeps torch's setting.
    Returns one record per (implementation, n): ``impl, n, seconds`` (best), its split into
    ``user_seconds`` and ``system_seconds`` (CPU clock only), ``peak_bytes``
    (see :func:`peak_extra_memory`), ``flops`` (4·B·H·n²·d) and ``gflops_per_s``.
    """
    bar = ProgressBar(len(implementations) * len(ns), "sweep") if progress else None
    records = []
    saved_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        records = _sweep_points(implementations, ns, batch, heads, d, repeats, seed,
                                min_total_s, clock, bar)
    finally:
        torch.set_num_threads(saved_threads)
    return records


def _sweep_points(implementations: dict[str, Callable[..., torch.Tensor]], ns: Sequence[int],
                  batch: int, heads: int, d: int, repeats: int, seed: int, min_total_s: float,
                  clock: str, bar: ProgressBar | None) -> list[dict[str, Any]]:
    records = []
    for n in ns:
        g = torch.Generator().manual_seed(seed + n)
        q, k, v = (torch.randn(batch, heads, n, d, generator=g) for _ in range(3))
        for name, attend in implementations.items():
            def call(attend=attend, q=q, k=k, v=v):
                return attend(q, k, v)

            seconds, user, system = time_call_split(call, repeats=repeats, warmup=1,
                                                    min_total_s=min_total_s, clock=clock)
            peak = peak_extra_memory(call, repeats=1)
            flops = batch * heads * attention_core_flops(n, d)
            records.append({"impl": name, "n": n, "seconds": seconds, "user_seconds": user,
                            "system_seconds": system, "peak_bytes": peak,
                            "flops": flops, "gflops_per_s": flops / seconds / 1e9})
            if bar is not None:
                bar.step(f"{name} n={n}")
    return records


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


def _repo_results_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "bench" / "results"


def committed_benchmark(path: str | Path | None = None, device: str = "cpu",
                        causal: bool = False) -> dict[str, Any] | None:
    """The newest committed benchmark run for ``device`` (forward pass), ready for a chapter.

    Reads ``bench/results/*.json`` (written by ``python -m course_lib.bench``). Returns
    ``{"caption", "rows": [{"impl", "n", "rate"}], "table", "data"}`` where ``rate`` is the
    achieved GFLOP/s (median) and ``table`` a markdown table, or None if no such run exists.
    """
    from .bench import load_results

    root = _repo_results_dir() if path is None else Path(path)
    if not root.is_absolute() and not root.is_dir():
        root = _repo_results_dir().parent.parent / root
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
    caption = (f"bench/results/{name}: {m.get('device_name', m.get('cpu_model', ''))}, "
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


def cliff_summary(rows: list[dict[str, Any]]) -> dict[str, float] | None:
    """Compare :func:`cliff_rows` inside and beyond the caches; None if the sweep did not
    straddle them. ``fast``/``slow``: best naive GFLOP/s with the working set in cache / worst
    beyond; ``os_in``/``os_out``: share of CPU time in the OS kernel (least in cache / at the
    largest n); ``user_fast``/``user_slow``: the same rates on user time only."""
    inside = [r for r in rows if r["fits in"] in ("L2", "L3")]
    beyond = [r for r in rows if r["fits in"] == "DRAM"]
    if not inside or not beyond:
        return None
    return {"fast": max(r["naive"] for r in inside), "slow": min(r["naive"] for r in beyond),
            "os_in": min(r["kernel share"] for r in inside),
            "os_out": beyond[-1]["kernel share"], "n_out": beyond[-1]["n"],
            "user_fast": max(r["naive user-only"] for r in inside),
            "user_slow": min(r["naive user-only"] for r in beyond)}


def matmul_fractions(bench: dict[str, Any], impls: Sequence[str] = ("reference", "torch"),
                     ) -> dict[int, dict[str, float]]:
    """From :func:`committed_benchmark`: ``{n: {impl: achieved rate / matmul rate}}`` for the
    non-causal sizes where every one of ``impls`` was timed."""
    frac: dict[int, dict[str, float]] = {}
    for r in bench["data"]["results"]:
        if not r["causal"] and "frac_matmul" in r and r["impl"] in impls:
            frac.setdefault(r["n"], {})[r["impl"]] = r["frac_matmul"]
    return {n: f for n, f in sorted(frac.items()) if len(f) == len(impls)}
