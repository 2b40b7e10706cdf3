"""Median latency of ``exercises.check`` per exercise, with and without the worker process.

    python bench/check_latency.py               # 15 repetitions, isolated vs in-process
    python bench/check_latency.py -n 31         # more repetitions
    python bench/check_latency.py --models      # also: fork vs pre-started worker vs spawn
    python bench/check_latency.py --triton      # only chapter 9: 16×16 tiles, per case

Each check runs the exercise's reference solution (course calls allowed, as for the course's own
tests), so it measures the checker, not a learner's code. "in-process" is the path before
isolation (a watched thread in this process); "isolated" forks a worker per check (the default).
Targets on the course's 2-core machines: <= 0.2 s median per exercise, <= 0.5 s for
flash_attention.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from course_lib.toolkit.checking._engine import run_check
from course_lib.toolkit.checking._registry import registry

TARGETS = {"flash_attention": 0.5, "triton_softmax": 5.0, "triton_matmul": 5.0,
           "triton_flash_forward": 5.0, "triton_flash_backward": 10.0}   # Triton is interpreted


def median_check(ex, isolate: bool, n: int) -> float:
    times = []
    for seed in range(n):
        t0 = time.perf_counter()
        result = run_check(ex, ex.solution, seed=seed, isolate=isolate, refuse_course=False)
        times.append(time.perf_counter() - t0)
        assert result.passed, result.message
    return statistics.median(times)


def _child_work() -> bytes:
    y = torch.randn(64, 64)
    buf = io.BytesIO()
    torch.save({"v": (y @ y)[:4, :4].clone()}, buf)
    return buf.getvalue()


def _serve(conn) -> None:
    torch.set_num_threads(1)
    while conn.recv() is not None:
        conn.send(_child_work())


def process_models(n: int) -> dict[str, float]:
    """Median round trip of one small job through each process model, in seconds."""
    def via_fork() -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                torch.set_num_threads(1)   # OpenMP's pool does not survive a fork
                os.write(w, _child_work())
            finally:
                os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 1 << 16):
            data += chunk
        os.close(r)
        os.waitpid(pid, 0)
        torch.load(io.BytesIO(data), weights_only=True)

    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(child,), daemon=True)
    proc.start()

    def via_worker() -> None:
        parent.send("go")
        torch.load(io.BytesIO(parent.recv()), weights_only=True)

    def via_spawn() -> None:
        subprocess.run([sys.executable, "-c", "import torch, course_lib.exercises"], check=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})

    out = {}
    for name, fn, reps in (("fork", via_fork, n), ("pre-started worker", via_worker, n),
                           ("spawn", via_spawn, 3)):
        fn()   # warm up
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    parent.send(None)
    proc.join(5)
    return out


def triton_per_case(n: int) -> int:
    """Chapter 9: seconds per case of a right kernel with the smallest legal tiles (16 × 16),
    plain (no watch), in-process under the watch, and in the worker, against the time limits."""
    from course_lib.chapters.ch09_flash_triton import TRITON_AVAILABLE, kernels
    from course_lib.chapters.ch09_flash_triton.exercises import TIME_LIMITS

    if not TRITON_AVAILABLE:
        print("Triton is not installed: nothing to measure")
        return 0
    small = {
        "triton_flash_forward": lambda q, k, v, is_causal=False: kernels.flash_forward(
            q, k, v, is_causal, 16, 16),
        "triton_flash_backward": lambda q, k, v, out, lse, dout, is_causal=False:
            kernels.flash_backward(q, k, v, out, lse, dout, is_causal, 16, 16),
    }
    table = registry()
    print(f"seconds per case, right kernel with 16×16 tiles, median of {n} "
          f"({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    print(f"{'exercise':<24} {'plain':>7} {'in-process':>11} {'isolated':>9} {'slowest':>8} "
          f"{'limit':>6}")
    ok = True
    for ex_id, fn in small.items():
        ex = table[ex_id]
        cases = len(ex.cases(torch.Generator().manual_seed(0)))
        calls: list[float] = []

        def timed(*args, fn=fn, calls=calls):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                calls.append(time.perf_counter() - t0)

        row = []
        for kw in ({"isolate": False, "watch": False}, {"isolate": False}, {"isolate": True}):
            times = []
            for seed in range(n):
                t0 = time.perf_counter()
                result = run_check(ex, timed, seed=seed, refuse_course=False, **kw)
                times.append((time.perf_counter() - t0) / cases)
                assert result.passed, result.message
            row.append(statistics.median(times))
        slowest = max(calls)   # the slowest single case, plain or under the watch (this process)
        limit = TIME_LIMITS[ex_id]
        ok = ok and slowest <= limit / 3
        print(f"{ex_id:<24} {row[0]:6.2f}s {row[1]:10.2f}s {row[2]:8.2f}s {slowest:7.2f}s "
              f"{limit:5.0f}s")
    print("plain / in-process / isolated: median seconds per case; slowest: the slowest single "
          "call (in-process); the limit must be at least 3× it")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=15, help="repetitions per exercise (default 15)")
    parser.add_argument("--models", action="store_true",
                        help="also time fork vs a pre-started worker vs spawn")
    parser.add_argument("--triton", action="store_true",
                        help="only chapter 9's kernels, 16×16 tiles, seconds per case")
    args = parser.parse_args()
    os.environ.setdefault("COURSE_LIB_PROGRESS", os.devnull)
    if args.triton:
        return triton_per_case(args.n)
    print(f"median check latency, reference solution, n={args.n} "
          f"({os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads)",
          flush=True)
    print(f"{'exercise':<24} {'in-process':>11} {'isolated':>10} {'target':>7}")
    worst = True
    for ex in registry().values():
        before = median_check(ex, isolate=False, n=args.n)
        after = median_check(ex, isolate=True, n=args.n)
        target = TARGETS.get(ex.id, 0.2)
        ok = after <= target
        worst = worst and ok
        print(f"{ex.id:<24} {before * 1e3:9.1f}ms {after * 1e3:8.1f}ms {target:6.1f}s"
              + ("" if ok else "  over target"), flush=True)
    if args.models:
        print("\nprocess models, one small job's round trip (median):")
        for name, t in process_models(args.n).items():
            print(f"  {name:<20} {t * 1e3:8.1f} ms")
    return 0 if worst else 1


if __name__ == "__main__":
    sys.exit(main())
