"""Grade a class: the course's checkers over the learners' workbook notebooks, into a gradebook.

    python -m course_lib grade SUBMISSION... --out gradebook.csv [--assignment A.toml]
                                             [--feedback DIR] [--jobs N]

Each notebook is graded in a process of its own (``job.py``, the grader's trusted side): its
cells run in a kernel inside an OS sandbox (``sandbox.py``: bubblewrap), then the chapter's
exercises are checked by the course's checkers, whose worker runs the learner's functions in a
fresh sandbox of its own and sees only each case's inputs; the cases, the oracle, the solutions
and the grading seed stay outside. The seed is secret: drawn for a new gradebook, kept in its
metadata file (``gradebook.meta.json``) so a re-run grades alike, never visible to learner code.
Results are cached by the notebook's bytes, the checker's code and the settings (``store.py``),
and the outputs (``report.py``) are written by this process alone, after the notebooks ran.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import secrets
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import feedback as feedback_module
from . import lms as lms_module
from . import report, runner, sandbox
from .assignment import Assignment, AssignmentError
from .job import Job, NotebookResult
from .lms import lms_learner
from .store import ResultCache, key
from .submissions import Submission, SubmissionError, chapter_of, discover

__all__ = ["AssignmentError", "GradeRun", "SubmissionError", "checker_digest", "grade",
           "metadata_path"]


@dataclass
class GradeRun:
    """What :func:`grade` did: every notebook's result, the graded exercises and their points,
    the summary."""

    results: list[dict[str, Any]]
    exercises: list[str]
    summary: str
    graded: int = 0                       # notebooks run now (the rest came from the cache)
    cache_errors: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)   # wall time of each notebook run now
    points: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    #: per result, the wall seconds of its notebook's run now (``None``: cached, not run, or a
    #: byte-identical copy of another)
    seconds_by_result: list[float | None] = field(default_factory=list)


_DIGEST: list[str] = []
#: What runs of each notebook (see :func:`grade`'s ``run``).
RUN_MODES = ("all", "functions")


def checker_digest() -> str:
    """SHA-256 over every source file of ``course_lib`` (the checkers, the exercises, the
    sandbox): a changed checker changes the cache key, so its results are graded again."""
    if not _DIGEST:
        h = hashlib.sha256()
        root = sandbox.course_package()
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        _DIGEST.append(h.hexdigest())
    return _DIGEST[0]


def metadata_path(out: str | Path) -> Path:
    """``gradebook.csv`` -> ``gradebook.meta.json``: the seed and the settings of a gradebook."""
    out = Path(out)
    return out.with_name(out.stem + ".meta.json")


def _seed_for(out: Path, seed: int | None, new_seed: bool) -> int:
    """The instructor's ``seed``; else the one this gradebook was first graded with; else a new
    secret one (``new_seed``: always a new one)."""
    if seed is not None:
        return int(seed)
    meta = metadata_path(out)
    if not new_seed and meta.is_file():
        try:
            return int(json.loads(meta.read_text())["seed"])
        except (ValueError, KeyError, TypeError):
            pass
    return secrets.randbits(62)


def _write_metadata(out: Path, seed: int, points: dict[str, float],
                    assignment: Assignment | None, sandboxed: bool) -> None:
    meta = metadata_path(out)
    text = json.dumps({"seed": seed, "checker": checker_digest(), "sandbox": sandboxed,
                       "assignment": assignment.source if assignment else None,
                       "points": points}, indent=1, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{meta.name}.", dir=meta.parent)
    with os.fdopen(fd, "w") as f:          # mkstemp: readable by the instructor only (0600)
        f.write(text)
    os.replace(tmp, meta)


def _zone(name: str | None) -> dt.tzinfo | None:
    if name is None:
        return None
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def _submitted(sub: Submission) -> dt.datetime:
    try:
        return dt.datetime.fromtimestamp(os.lstat(sub.notebook).st_mtime, dt.timezone.utc)
    except OSError:
        return dt.datetime.fromtimestamp(0, dt.timezone.utc)


def _row(sub: Submission, chapter: str, status: str, detail: str) -> dict[str, Any]:
    return asdict(NotebookResult(sub.learner, str(sub.notebook), chapter, status, detail))


def grade(paths: Sequence[str | Path], out: str | Path, *, log: str | Path | None = None,
          feedback: str | Path | None = None, jobs: int = 2, seed: int | None = None,
          new_seed: bool = False, assignment: Assignment | str | Path | None = None,
          cache: str | Path | None = None, cell_timeout: float = 120.0,
          notebook_timeout: float = 600.0, call_timeout: float = 10.0,
          memory: int = sandbox.Limits.memory, processes: int = sandbox.Limits.processes,
          disk: int = sandbox.Limits.disk, output: int = sandbox.Limits.output,
          sandboxed: bool = True, progress: bool = True, run: str = "all",
          scheduler: str | None = None, cluster: str | None = None,
          cluster_config: str | Path | None = None, security: Any = None,
          lms: str | None = None, times: str | Path | None = None,
          times_zone: str | None = None, no_late: bool = False,
          class_report: str | Path | None = None) -> GradeRun:
    """Grade every notebook under ``paths``; write the gradebook ``out`` (``log``, ``feedback``,
    and ``out``'s metadata file with the seed).

    ``assignment``: an :class:`Assignment` or its file (``None``: every exercise of the chapters
    handed in, one point each). ``seed``: the grading seed (``None``: this gradebook's own, see
    :func:`_seed_for`). ``cache``: the SQLite file of earlier results (``None``: none). ``jobs``:
    notebooks graded at once. Time limits in seconds; ``memory``, ``processes``, ``disk``,
    ``output``: the sandbox's limits per notebook. ``sandboxed=False`` runs learner code without
    the OS sandbox (trusted notebooks only). ``run``: ``"all"`` runs each whole notebook in a
    sandboxed kernel for its status (``ran``, ``raised``, ...) before the checks;
    ``"functions"`` runs only the checks, which run the graded functions and what they use (the
    notebook's status is ``checked``; a notebook whose functions the grader cannot extract with
    certainty is run whole, and its notes say why). The verdicts are the same. Raises
    :class:`sandbox.SandboxUnavailable` when the sandbox cannot run here,
    :class:`SubmissionError` for paths that are no submissions and :class:`AssignmentError` for a
    malformed assignment. ``scheduler`` (a Dask scheduler's address) or ``cluster`` (a
    ``dask-jobqueue`` kind, with its ``cluster_config`` file; ``jobs`` batch jobs) grade the
    notebooks on a Dask cluster (``cluster.py``; ``security``: Dask's TLS settings); this process
    alone writes the outputs. ``lms`` (``"moodle"``, ``"canvas"``): learner ids from that LMS's
    download names; ``times``: the LMS's record of submission times (``lms.read_times``; Moodle's
    local times in ``times_zone``), else the file times, with a warning when they look copied;
    ``no_late``: no late deduction at all. The summary says where the times came from.
    ``class_report``: write the class's HTML report there (``class_report.py``).
    """
    from tqdm.auto import tqdm

    from course_lib.toolkit.checking import registry

    from . import assignment as assignment_module

    if run not in RUN_MODES:
        raise ValueError(f"run must be one of {', '.join(RUN_MODES)}, not {run!r}")
    if sandboxed and (reason := sandbox.unavailable_reason()) is not None:
        raise sandbox.SandboxUnavailable(reason)
    table = registry()
    chapter_of_exercise = {i: ex.chapter for i, ex in table.items()}
    if isinstance(assignment, (str, Path)):
        assignment = assignment_module.load(assignment, chapter_of_exercise)
    submissions = discover(list(paths))
    folders: dict[str, str] = {}     # learner id -> the LMS's folder name it came from
    if lms is not None:      # the LMS's download names -> its learner ids (lms.py)
        for sub in submissions:
            folders.setdefault(lms_learner(sub.learner, lms) or sub.learner, sub.learner)
        submissions = [dataclasses.replace(sub, learner=lms_learner(sub.learner, lms)
                                           or sub.learner) for sub in submissions]
    record = lms_module.read_times(times, _zone(times_zone)) if times is not None else None
    time_source, time_warning = "not used (--no-late)" if no_late else "", None
    if not no_late and assignment is not None and assignment.deadline is not None:
        if record is not None:
            time_source = f"from the LMS's record ({Path(times).name})"
        else:
            time_source = "from the notebooks' file times"
            time_warning = lms_module.file_time_warning(
                [_submitted(s) for s in submissions if s.problem is None], assignment.deadline)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    seed = _seed_for(out, seed, new_seed)
    cache_db = ResultCache(cache)
    tmp_root = Path(tempfile.mkdtemp(prefix="course-lib-grading-"))
    course_copy = sandbox.learner_copy() if sandboxed else Path()   # same path every run
    if sandboxed and (problem := sandbox.import_problem(course_copy)) is not None:
        sandbox.remove_tree(tmp_root)
        raise sandbox.SandboxUnavailable(problem)
    limits = sandbox.Limits(memory, processes, disk, output)
    results: dict[int, dict[str, Any]] = {}
    todo: list[tuple[int, Job, str]] = []
    same: dict[str, list[int]] = {}      # cache key -> the submissions it grades
    chapters: set[str] = set()
    roster = assignment.roster if assignment else None
    for n, sub in enumerate(submissions):
        if roster is not None and sub.learner not in roster:
            results[n] = _row(sub, "", "refused", "not on the assignment's roster: not graded")
            continue
        if sub.problem is not None or sub.data is None:
            results[n] = _row(sub, "", "refused", f"the submission {sub.problem}")
            continue
        try:
            nb = json.loads(sub.data.decode("utf-8"))
            if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
                raise ValueError("no list of cells")
            chapter = chapter_of(nb, sub.notebook, chapter_of_exercise)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            results[n] = _row(sub, "", "unreadable",
                              f"not a notebook ({type(e).__name__}: {str(e)[:120]})")
            continue
        if chapter is None:
            results[n] = _row(sub, "", "unknown", "no course chapter found in this notebook")
            continue
        ids = [i for i, c in chapter_of_exercise.items() if c == chapter
               and (assignment is None or i in assignment.points)]
        if not ids:
            results[n] = _row(sub, chapter, "refused",
                              f"chapter {chapter} is not part of this assignment: not graded")
            continue
        chapters.add(chapter)
        settings = {"checker": checker_digest(), "seed": seed, "exercises": ids,
                    "sandbox": sandboxed, "run": run, "limits": [cell_timeout, notebook_timeout,
                                                     call_timeout, *asdict(limits).values()]}
        k = key(sub.data, settings)
        submitted = record.get(sub.learner) if record is not None else None
        submitted = submitted or _submitted(sub)
        charge = assignment is not None and not no_late
        late = {"late_days": assignment.days_late(submitted) if charge else 0.0}
        late["late_factor"] = assignment.late.factor(late["late_days"]) if charge else 1.0
        cached = cache_db.get(k)
        if cached is not None:
            results[n] = {**cached, "learner": sub.learner, "notebook": str(sub.notebook),
                          **late}
            continue
        if k in same:            # byte-identical to a notebook graded now: the same result
            same[k].append(n)
            results[n] = late
            continue
        same[k] = [n]
        # The job's folder is named by what is graded (no job number for a notebook to read).
        job = Job(notebook=sub.notebook.name, learner=sub.learner, chapter=chapter,
                  exercises=ids, seed=seed, workdir=str(tmp_root / k[:24]),
                  course_copy=str(course_copy), source=sub.data.decode("utf-8"),
                  sandboxed=sandboxed, cell_timeout=cell_timeout,
                  notebook_timeout=notebook_timeout, call_timeout=call_timeout,
                  memory=limits.memory, processes=limits.processes, disk=limits.disk,
                  output=limits.output, run=run)
        todo.append((n, job, k))
        results[n] = late            # completed below
    seconds: list[float] = []
    took_by: dict[int, float] = {}
    limit_extra = 120.0
    try:
        if scheduler is None and cluster is None:
            pool: Any = runner.LocalPool(jobs)
        else:
            from .cluster import DaskPool

            pool = DaskPool(scheduler, cluster, cluster_config, jobs, security)
        with pool, tqdm(total=len(todo), desc="grading", unit="notebook",
                        disable=not progress) as bar:
            if progress and getattr(pool, "dashboard", None):
                bar.write(f"Dask dashboard: {pool.dashboard}")
            futures = {pool.submit(job, notebook_timeout + limit_extra
                                   + call_timeout * 20 * len(job.exercises)): k
                       for _, job, k in todo}
            # Each result is kept (cache) as it arrives: a run that stops resumes from them.
            for future in pool.as_completed(list(futures)):
                k = futures[future]
                result, took = future.result()
                if result["status"] != "crashed" or result["verdicts"]:
                    cache_db.put(k, {**result, "learner": "", "notebook": ""})
                for n in same[k]:
                    sub = submissions[n]
                    results[n] = {**result, "learner": sub.learner,
                                  "notebook": str(sub.notebook), **results[n]}
                seconds.append(took)
                took_by[same[k][0]] = took
                bar.update(1)
    finally:
        cache_errors = list(cache_db.errors)
        cache_db.close()
        runner.stop_all()
        sandbox.remove_tree(tmp_root)    # never raises (a learner's 1100-deep folder chain)
    if assignment is not None:
        points = dict(assignment.points)
    else:
        points = {i: 1.0 for i, c in chapter_of_exercise.items() if c in chapters}
    ordered = [results[n] for n in range(len(submissions))]
    report.write_outputs(ordered, points, out, Path(log) if log else None, None, roster)
    if feedback:
        feedback_module.write_feedback(ordered, points, Path(feedback))
        if lms == "moodle":       # Moodle's bulk upload of feedback files
            texts = {r["learner"]: feedback_module.feedback_markdown(
                r["learner"], [x for x in ordered if x["learner"] == r["learner"]], points)
                for r in ordered}
            lms_module.moodle_feedback_zip(texts, folders,
                                           Path(feedback) / "moodle_feedback.zip")
    if class_report:
        from .class_report import write_class_report

        write_class_report(ordered, points, Path(class_report), roster)
    _write_metadata(out, seed, points, assignment, sandboxed)
    summary = feedback_module.summary_markdown(ordered, points, roster)
    if time_source:
        summary += f"\n\nSubmission times: {time_source}."
    if time_warning:
        summary += f"\n\nWARNING: {time_warning}. Give the LMS's record (--times FILE) or " \
                   "grade with --no-late."
    return GradeRun(ordered, list(points), summary,
                    graded=len(todo), seconds=seconds, cache_errors=cache_errors,
                    points=points, seed=seed,
                    seconds_by_result=[took_by.get(n) for n in range(len(submissions))])
