"""Peak extra memory of one call, measured the way an operating system sees it.

CPU method: a fresh Python subprocess rebuilds the workload (inputs allocated), warms the code path
up on a tiny size, resets the kernel's resident-set high-water mark (``/proc/self/clear_refs``),
records the resident set as baseline, runs the call once and reads the high-water mark
(``VmHWM`` in ``/proc/self/status``). Peak extra = high-water mark − baseline: every byte the call
touched beyond its inputs, output and temporaries included. Where the mark cannot be reset, the
baseline is the mark itself; without ``/proc`` it is ``resource.getrusage().ru_maxrss``. The worker
runs with a fixed glibc mmap threshold so freed blocks go back to the OS instead of being reused.

In-process variant (:func:`peak_extra_memory`, for quick live measurements in a chapter): the
same high-water-mark reset and read, with glibc told to return freed memory to the OS.

CUDA method: in-process, ``torch.cuda.max_memory_allocated()`` after ``reset_peak_memory_stats()``
minus ``torch.cuda.memory_allocated()`` before the call (inputs already allocated).
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .workloads import FACTORIES

CPU_METHOD = ("fresh subprocess; VmHWM (resident high-water mark, reset via /proc/self/clear_refs "
              "after warm-up) minus resident set before the call; inputs excluded, output included")
CUDA_METHOD = ("torch.cuda.max_memory_allocated() after reset_peak_memory_stats() minus "
               "memory_allocated() before the call; inputs excluded, output included")
_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except OSError:
        return None
    return None


def _maxrss_bytes() -> int:
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss) if sys.platform == "darwin" else int(rss) * 1024


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _measure_cpu_here(factory: str, kwargs: dict[str, Any],
                      warmup_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """Run inside the worker process: warm up small, reset the mark, run once, read the mark."""
    make = FACTORIES[factory]
    if warmup_kwargs is not None:
        make(**warmup_kwargs)()
    run = make(**kwargs)
    gc.collect()
    if _status_bytes("VmHWM") is not None:
        reset = _reset_hwm()
        baseline = _status_bytes("VmRSS") if reset else _status_bytes("VmHWM")
        out = run()
        peak = _status_bytes("VmHWM")
        source = "VmHWM (reset)" if reset else "VmHWM"
    else:
        baseline = _maxrss_bytes()
        out = run()
        peak = _maxrss_bytes()
        source = "ru_maxrss"
    del out, run
    gc.collect()
    return {"peak_extra_bytes": max(int(peak) - int(baseline), 0), "baseline_bytes": int(baseline),
            "peak_bytes": int(peak), "source": source}


def _measure_cuda_here(factory: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    make = FACTORIES[factory]
    device = torch.device(kwargs.get("device", "cuda"))
    run = make(**kwargs)
    run()  # warm-up at full size: max_memory_allocated counts live blocks, not the cache
    torch.cuda.synchronize(device)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    baseline = torch.cuda.memory_allocated(device)
    out = run()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    del out, run
    return {"peak_extra_bytes": max(int(peak) - int(baseline), 0), "baseline_bytes": int(baseline),
            "peak_bytes": int(peak), "source": "torch.cuda.max_memory_allocated"}


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
    """Peak resident memory ``fn()`` adds on top of what this process already holds, in bytes.

    The benchmark's CPU method run in-process (Linux): with glibc set to return freed memory
    (see :func:`_malloc_for_measuring`), reset the kernel's high-water mark, run ``fn``, read
    ``VmHWM − VmRSS_before`` (output included). Minimum over ``repeats`` runs (the first run may
    pay for one-off allocations). Returns None where ``/proc`` is unavailable.
    """
    best: int | None = None
    _malloc_for_measuring(True)
    try:
        for _ in range(repeats):
            if not _reset_hwm():
                return None
            before = _status_bytes("VmRSS")
            result = fn()
            peak = _status_bytes("VmHWM")
            del result
            if before is None or peak is None:
                return None
            extra = max(0, peak - before)
            best = extra if best is None else min(best, extra)
    finally:
        _malloc_for_measuring(False)
    return best


def _spec(factory: str, kwargs: dict[str, Any], warmup_kwargs: dict[str, Any] | None):
    if factory not in FACTORIES:
        raise ValueError(f"factory must be one of {sorted(FACTORIES)}, got {factory!r}")
    return {"factory": factory, "kwargs": dict(kwargs),
            "warmup_kwargs": None if warmup_kwargs is None else dict(warmup_kwargs)}


def _run_worker(specs: list[dict[str, Any]], threads: int | None, timeout: float) -> list[dict]:
    env = {**os.environ, **_MALLOC_ENV}
    cmd = [sys.executable, "-m", "course_lib.toolkit.bench.memory", json.dumps(specs)]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"memory worker failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_peak_memory(factory: str = "attention", kwargs: dict[str, Any] | None = None, *,
                        warmup_kwargs: dict[str, Any] | None = None, threads: int | None = None,
                        timeout: float = 900.0) -> dict[str, Any]:
    """Peak extra bytes of one ``run()`` of ``FACTORIES[factory](**kwargs)``.

    Returns ``{"peak_extra_bytes", "baseline_bytes", "peak_bytes", "source", "method"}``.
    CPU: in a fresh subprocess (see module doc); CUDA (``kwargs["device"]`` is cuda): in-process.
    Example: ``measure_peak_memory("allocate", {"nbytes": 2**26})["peak_extra_bytes"] ≈ 2**26``.
    """
    kwargs = dict(kwargs or {})
    if torch.device(kwargs.get("device", "cpu")).type == "cuda":
        return {**_measure_cuda_here(factory, kwargs), "method": CUDA_METHOD}
    spec = _spec(factory, kwargs, warmup_kwargs)
    (res,) = _run_worker([spec], threads, timeout)
    return {**res, "method": CPU_METHOD}


def measure_peak_memory_many(specs: Sequence[tuple[str, dict[str, Any], dict[str, Any] | None]],
                             *, threads: int | None = None,
                             timeout: float = 900.0) -> list[dict[str, Any]]:
    """Several CPU measurements ``(factory, kwargs, warmup_kwargs)`` in ONE fresh subprocess.

    Cheaper than :func:`measure_peak_memory` (one interpreter start instead of one per point): the
    high-water mark is reset before each point and freed blocks return to the OS (fixed mmap
    threshold), so the points do not see each other. Used for small live sweeps in the chapters.
    """
    payload = [_spec(f, k, w) for f, k, w in specs]
    results = _run_worker(payload, threads, timeout)
    method = CPU_METHOD.replace("fresh subprocess", "one fresh subprocess for all points")
    return [{**r, "method": method} for r in results]


def _worker_main(argv: Sequence[str]) -> None:
    specs = json.loads(argv[0])
    if "--threads" in argv:
        torch.set_num_threads(int(argv[list(argv).index("--threads") + 1]))
    out = [_measure_cpu_here(s["factory"], s["kwargs"], s["warmup_kwargs"]) for s in specs]
    print(json.dumps(out))


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
