"""Warm grading processes: each grades notebooks one after another (``job.py --serve``).

A grading process is the grader's trusted side (it runs no learner code: that runs in the
sandboxes it starts), so one process may grade many notebooks: Python, torch and the course are
imported once per process instead of once per notebook. Each thread that grades (``--jobs``
threads on one machine, a Dask worker's thread on a cluster: ``cluster.py``) keeps its own
process; a notebook that runs over its time limit, or a process that dies, costs that process
(killed whole, with everything it started) and the next notebook starts a fresh one.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .job import Job, NotebookResult

_LOCAL = threading.local()
_ALL: list[JobProcess] = []
_LOCK = threading.Lock()


class JobProcess:
    """One warm ``python -m course_lib.toolkit.grading.job --serve`` in its own session."""

    def __init__(self) -> None:
        # The grader's own caches and messages live in the process's folder: a grading user
        # without a writable home (or with someone else's) grades the same.
        self.folder = Path(tempfile.mkdtemp(prefix="course-lib-grader-"))
        self.errors = self.folder / "grader-stderr.txt"
        env = {**os.environ, "MPLCONFIGDIR": str(self.folder / "mpl"),
               "IPYTHONDIR": str(self.folder / "ipython")}
        with self.errors.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "course_lib.toolkit.grading.job", "--serve"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                start_new_session=True, env=env)
        self.buffer = b""
        self.jobs = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def grade(self, job: Job, limit: float) -> tuple[dict[str, Any] | None, str]:
        """``(result, "")``, or ``(None, why)`` when the process ran over ``limit`` seconds or
        ended without a result (then it is stopped: do not use it again)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.jobs += 1
        try:
            self.proc.stdin.write(json.dumps(asdict(job)).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            return None, self._ended()
        deadline = time.monotonic() + limit
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                try:
                    result = json.loads(line)
                except ValueError:
                    continue
                if isinstance(result, dict) and result.get("learner") == job.learner \
                        and isinstance(result.get("verdicts"), list):
                    return result, ""
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                return None, f"grading this notebook took over {limit:g} s"
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return None, self._ended()
                self.buffer += chunk

    def _ended(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.stop()
        lines = [x for x in self.errors.read_text(errors="replace").splitlines() if x.strip()]
        why = f": {lines[-1][:300]}" if lines else ""
        return f"the grading process ended without a result (exit {code}){why}"

    def stop(self) -> None:
        """Kill the process and everything it started (its session), remove its folder."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def run_job(job: Job, limit: float) -> tuple[dict[str, Any], float]:
    """Grade ``job`` in this thread's warm process (started when there is none); the result
    as a dict and the wall seconds it took."""
    started = time.perf_counter()
    Path(job.workdir).mkdir(parents=True, exist_ok=True)
    proc: JobProcess | None = getattr(_LOCAL, "proc", None)
    if proc is None or not proc.alive():
        proc = JobProcess()
        _LOCAL.proc = proc
        with _LOCK:
            _ALL.append(proc)
    result, why = proc.grade(job, limit)
    seconds = time.perf_counter() - started
    if result is None:
        _LOCAL.proc = None
        status = "timeout" if why.startswith("grading this notebook took over") else "crashed"
        result = asdict(NotebookResult(job.learner, job.notebook, job.chapter, status, why))
    return result, seconds


def stop_all() -> None:
    """Stop every warm process this program started (the end of a grading run)."""
    with _LOCK:
        procs, _ALL[:] = list(_ALL), []
    for proc in procs:
        proc.stop()
    _LOCAL.proc = None


class LocalPool:
    """``jobs`` notebooks at once on this machine, each thread with its warm process (the same
    interface as ``cluster.DaskPool``)."""

    def __init__(self, jobs: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.executor = ThreadPoolExecutor(max_workers=max(1, jobs))

    def submit(self, job: Job, limit: float) -> Any:
        return self.executor.submit(run_job, job, limit)

    @staticmethod
    def as_completed(futures: list[Any]) -> Any:
        from concurrent.futures import as_completed

        return as_completed(futures)

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
