"""Grade a class: the course's checkers over the learners' workbook notebooks, into a gradebook.

    python -m course_lib grade SUBMISSION... --out gradebook.csv [--feedback DIR] [--jobs N]

Each notebook is graded in a process of its own (``job.py``): it runs top to bottom in a fresh,
fenced kernel (``kernel.py``, ``sandbox.py``), then the chapter's exercises are checked by the
course's checkers on the learner's functions (``extract.py``) with a fixed grading seed, in a
process that never ran learner code. Nothing is recorded in anyone's progress record. Results
are cached by the notebook's content (``store.py``), so a second run re-grades only what changed,
and the outputs (``report.py``) are written by this process alone, after the notebooks ran.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import report
from .job import Job, NotebookResult
from .store import ResultCache, key
from .submissions import Submission, SubmissionError, chapter_of, discover

__all__ = ["DEFAULT_SEED", "GradeRun", "SubmissionError", "grade"]

#: The grading seed: the same for every learner and every run (not the learner's own seed).
DEFAULT_SEED = 20260101


@dataclass
class GradeRun:
    """What :func:`grade` did: every notebook's result, the exercise columns, the summary."""

    results: list[dict[str, Any]]
    exercises: list[str]
    summary: str
    graded: int = 0                       # notebooks run now (the rest came from the cache)
    cache_errors: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)   # wall time of each notebook run now


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("course_lib")
    except Exception:
        return "unknown"


def _run_job(job: Job, limit: float) -> tuple[dict[str, Any], float]:
    """One notebook in its own process (own session: killed whole on a time-out)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "course_lib.toolkit.grading.job"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True, text=True)
    try:
        out, _ = proc.communicate(json.dumps(asdict(job)), timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return (asdict(NotebookResult(job.learner, job.notebook, job.chapter, "timeout",
                                      f"grading this notebook took over {limit:g} s")),
                time.perf_counter() - started)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # nothing it started outlives it
        except (ProcessLookupError, PermissionError):
            pass
    seconds = time.perf_counter() - started
    last = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        result = json.loads(last)
        if result.get("learner") != job.learner or not isinstance(result.get("verdicts"), list):
            raise ValueError("not this job's result")
        return result, seconds
    except ValueError:
        return (asdict(NotebookResult(job.learner, job.notebook, job.chapter, "crashed",
                                      f"the grading process ended without a result (exit "
                                      f"{proc.returncode})")), seconds)


def grade(paths: Sequence[str | Path], out: str | Path, *, log: str | Path | None = None,
          feedback: str | Path | None = None, jobs: int = 2, seed: int = DEFAULT_SEED,
          cache: str | Path | None = None, cell_timeout: float = 120.0,
          notebook_timeout: float = 600.0, call_timeout: float = 10.0,
          memory: int = 4 * 1024 ** 3, progress: bool = True) -> GradeRun:
    """Grade every notebook under ``paths``; write the gradebook ``out`` (``log``, ``feedback``).

    ``cache``: the SQLite file of earlier results (``None``: none). ``jobs``: notebooks graded at
    once. Time limits in seconds; ``memory``: the address-space cap of each notebook's kernel.
    Raises :class:`SubmissionError` for paths that are no submissions.
    """
    from tqdm.auto import tqdm

    seed = DEFAULT_SEED if seed is None else int(seed)
    from course_lib.toolkit.checking import registry

    table = registry()
    chapter_of_exercise = {i: ex.chapter for i, ex in table.items()}
    submissions = discover(list(paths))
    out = Path(out)
    outputs = [out] + [Path(p) for p in (log, feedback, cache) if p is not None]
    cache_db = ResultCache(cache)
    tmp_root = Path(tempfile.mkdtemp(prefix="course-lib-grading-"))
    hidden = sorted({str(Path(p).resolve()) for p in paths}
                    | {str(p.resolve()) for p in outputs} | {str(tmp_root)})
    results: dict[Submission, dict[str, Any]] = {}
    todo: list[tuple[Submission, Job, str]] = []
    chapters: set[str] = set()
    for n, sub in enumerate(submissions):
        data = sub.notebook.read_bytes()
        try:
            nb = json.loads(data)
            chapter = chapter_of(nb, sub.notebook, chapter_of_exercise)
        except ValueError:
            nb, chapter = None, None
        if chapter is None:
            results[sub] = asdict(NotebookResult(
                sub.learner, str(sub.notebook), "", "unreadable" if nb is None else "unknown",
                "not a notebook" if nb is None else "no course chapter found in this notebook"))
            continue
        chapters.add(chapter)
        ids = [i for i, c in chapter_of_exercise.items() if c == chapter]
        settings = {"course_lib": _version(), "seed": seed, "exercises": ids,
                    "limits": [cell_timeout, notebook_timeout, call_timeout, memory]}
        k = key(data, settings)
        cached = cache_db.get(k)
        if cached is not None:
            results[sub] = {**cached, "learner": sub.learner, "notebook": str(sub.notebook)}
            continue
        job = Job(notebook=str(sub.notebook.resolve()), learner=sub.learner, chapter=chapter,
                  exercises=ids, seed=seed, workdir=str(tmp_root / f"job{n}"), hidden=hidden,
                  cell_timeout=cell_timeout, notebook_timeout=notebook_timeout,
                  call_timeout=call_timeout, memory=memory)
        todo.append((sub, job, k))
    seconds: list[float] = []
    limit_extra = 120.0
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool, \
                tqdm(total=len(todo), desc="grading", unit="notebook",
                     disable=not progress) as bar:
            futures = [(sub, k, pool.submit(_run_job, job,
                                            notebook_timeout + limit_extra
                                            + call_timeout * 20 * len(job.exercises)))
                       for sub, job, k in todo]
            for sub, k, future in futures:
                result, took = future.result()
                result["notebook"] = str(sub.notebook)
                results[sub] = result
                seconds.append(took)
                if result["status"] not in ("crashed",) or result["verdicts"]:
                    cache_db.put(k, result)
                bar.update(1)
    finally:
        cache_errors = list(cache_db.errors)
        cache_db.close()
        shutil.rmtree(tmp_root, ignore_errors=True)
    exercises = [i for i, c in chapter_of_exercise.items() if c in chapters]
    ordered = [results[s] for s in submissions]
    report.write_outputs(ordered, exercises, out, Path(log) if log else None,
                         Path(feedback) if feedback else None)
    return GradeRun(ordered, exercises, report.summary_markdown(ordered, exercises),
                    graded=len(todo), seconds=seconds, cache_errors=cache_errors)
