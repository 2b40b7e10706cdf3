"""Command line: ``python -m course_lib <command>``.

Commands (argparse subparsers; add new ones with :func:`add_command`)::

    python -m course_lib list                              # all exercises
    python -m course_lib check ID FILE.py [--function NAME] [--timeout S] [--seed N] [--json]
    python -m course_lib hint ID [--level N]
    python -m course_lib solution ID
    python -m course_lib progress [--json | --export FILE.csv | --reset [--yes]]
    python -m course_lib workbook DIR [--source BOOK_DIR] [--force]   # learner notebooks
    python -m course_lib grade SUBMISSION... --out gradebook.csv [--feedback DIR] [--jobs N]

Exit status of ``check``: 0 passed, 1 not passed (or not attempted), 2 usage or load error.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import traceback
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

Handler = Callable[[argparse.Namespace], int]


class _UsageError(Exception):
    """A problem with the command line or the learner's file: exit status 2."""


def _exercises():  # imported lazily so `--help` stays fast
    from course_lib import exercises

    return exercises


def _known_id(exercise_id: str) -> None:
    ex = _exercises()
    try:
        ex.get_exercise(exercise_id)
    except KeyError as e:
        raise _UsageError(str(e.args[0])) from None


def load_file(path: str) -> ModuleType:
    """Import the learner's file as a fresh module (its ``__main__`` block does not run)."""
    p = Path(path)
    if not p.is_file():
        raise _UsageError(f"no such file: {path}")
    name = f"course_lib_submission_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise _UsageError(f"cannot load {path} as Python code (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # SyntaxError, ImportError, SystemExit in the learner's file...
        sys.modules.pop(name, None)
        lines = traceback.format_exception_only(type(e), e)
        raise _UsageError(f"could not load {path}:\n" + "".join(lines).rstrip()) from None
    return module


def cmd_list(args: argparse.Namespace) -> int:
    rows = _exercises().list_exercises()
    width = max(len(r["id"]) for r in rows)
    chapter_width = max(len(r["chapter"]) for r in rows)
    for r in rows:
        print(f"{r['id']:<{width}}  {r['chapter']:<{chapter_width}}  {r['title']}")
        print(f"{'':<{width}}  {'':<{chapter_width}}  {r['signature']}")
    print(f"\n{len(rows)} exercises. Check one: python -m course_lib check ID FILE.py")
    return EXIT_PASS


def cmd_check(args: argparse.Namespace) -> int:
    ex = _exercises()
    _known_id(args.id)
    exercise = ex.get_exercise(args.id)
    if not Path(args.file).is_file():
        raise _UsageError(f"no such file: {args.file}")
    # The file is loaded in the check's worker process, under the time limit: an endless loop
    # (or os._exit) at its top level ends with a message instead of hanging this command.
    source = ex.FileSource(args.file, args.function or exercise.function_name)
    result = ex.check(args.id, source, timeout=args.timeout, seed=args.seed)
    if result.mistake == "load_error":
        raise _UsageError(result.message)
    if args.json:
        fields = ("exercise", "passed", "status", "mistake", "message", "details", "failed_case",
                  "cases_run", "cases_total", "printed")
        print(json.dumps({f: getattr(result, f) for f in fields}, ensure_ascii=False, indent=2))
    else:
        print(str(result))
    return EXIT_PASS if result.passed else EXIT_FAIL


def cmd_hint(args: argparse.Namespace) -> int:
    _known_id(args.id)
    print(_exercises().hint(args.id, level=args.level, command_line=True))
    return EXIT_PASS


def cmd_solution(args: argparse.Namespace) -> int:
    _known_id(args.id)
    print(_exercises().solution(args.id), end="")
    return EXIT_PASS


def cmd_progress(args: argparse.Namespace) -> int:
    from course_lib.toolkit.checking import _progress, _progress_view

    path = _exercises().progress_path()
    if args.reset:
        if not args.yes:
            try:
                answer = input(f"Forget every attempt recorded in {path}? [y/N] ")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                print("\nNothing changed (answer y, or add --yes).")
                return EXIT_FAIL
        try:
            removed = _progress.reset(path)
        except Exception as e:
            raise _UsageError(f"could not reset {path}: {e}") from None
        print(f"Progress reset: {removed} attempts forgotten ({path}).")
        return EXIT_PASS
    try:
        if args.export:
            Path(args.export).write_text(_progress.export_csv(path), encoding="utf-8")
            print(f"{len(_progress.attempts(path))} attempts written to {args.export}")
        elif args.json:
            print(json.dumps(_progress_view.progress_json(path), indent=2, sort_keys=True))
        else:
            print(_progress_view.progress(path))
    except OSError as e:
        raise _UsageError(f"could not read or write the progress record: {e}") from None
    return EXIT_PASS


def cmd_workbook(args: argparse.Namespace) -> int:
    from course_lib.toolkit import workbook

    try:
        report = workbook.write_workbook(args.dir, source=args.source, force=args.force)
    except workbook.WorkbookError as e:
        raise _UsageError(str(e)) from None
    for line in report.lines():
        print(line)
    return EXIT_PASS


def cmd_grade(args: argparse.Namespace) -> int:
    from course_lib.toolkit import grading
    from course_lib.toolkit.grading import sandbox

    out = Path(args.out)
    log = Path(args.log) if args.log else out.with_name(out.stem + "-attempts.csv")
    cache = None if args.no_cache else (
        Path(args.cache) if args.cache else out.with_name(out.stem + "-cache.sqlite3"))
    if args.cluster and not args.cluster_config:
        raise _UsageError("--cluster needs --cluster-config FILE (sample: "
                          "docs/grading/slurm.yaml)")
    if args.no_sandbox:
        print("warning: --no-sandbox: learner code runs with your permissions, able to read "
              "and change your files. Use it for notebooks you trust only.", file=sys.stderr)
    try:
        run = grading.grade(args.submissions, out, log=log, feedback=args.feedback,
                            jobs=args.jobs, seed=args.seed, new_seed=args.new_seed,
                            assignment=args.assignment, cache=cache,
                            cell_timeout=args.cell_timeout,
                            notebook_timeout=args.notebook_timeout,
                            memory=int(args.memory_gb * 1024 ** 3), processes=args.processes,
                            disk=int(args.disk_mb * 1024 ** 2),
                            sandboxed=not args.no_sandbox, run=args.run,
                            scheduler=args.scheduler, cluster=args.cluster,
                            cluster_config=args.cluster_config, lms=args.lms,
                            times=args.times, times_zone=args.times_zone,
                            no_late=args.no_late, class_report=args.class_report)
    except (grading.SubmissionError, grading.AssignmentError, grading.lms.TimesError,
            sandbox.SandboxUnavailable) as e:
        raise _UsageError(str(e)) from None
    print(run.summary)
    learners = len({r["learner"] for r in run.results})
    timing = ""
    if run.seconds:
        timing = (f"; {run.graded} run now, {sum(run.seconds) / len(run.seconds):.1f} s per "
                  "notebook")
    print(f"\n{learners} learners, {len(run.results)} notebooks{timing}. Gradebook: {out} "
          f"(seed and settings: {grading.metadata_path(out)}); attempt log: {log}"
          + (f"; feedback: {args.feedback}/" if args.feedback else ""))
    return EXIT_PASS


def _configure_grade(p: argparse.ArgumentParser) -> None:
    p.add_argument("submissions", nargs="+", metavar="SUBMISSION",
                   help="a learner's notebook (learner = file name) or folder of notebooks "
                   "(learner = folder name)")
    p.add_argument("--out", required=True, metavar="GRADEBOOK.csv",
                   help="the gradebook: one row per learner, points per exercise, total")
    p.add_argument("--assignment", metavar="FILE.toml",
                   help="graded exercises and points, deadline, late policy, roster (.toml or "
                   ".yml; default: every exercise of the chapters handed in, 1 point each)")
    p.add_argument("--log", metavar="FILE.csv",
                   help="the attempt log (default: GRADEBOOK-attempts.csv beside it)")
    p.add_argument("--feedback", metavar="DIR", help="write one Markdown file per learner")
    p.add_argument("--jobs", type=int, default=2, help="notebooks graded at once (default 2)")
    p.add_argument("--seed", type=int, default=None,
                   help="the grading seed (default: a secret one, drawn for a new gradebook and "
                   "kept in GRADEBOOK.meta.json)")
    p.add_argument("--new-seed", action="store_true",
                   help="draw a new secret seed even if the gradebook has one")
    p.add_argument("--cache", metavar="FILE",
                   help="results by notebook content (default: GRADEBOOK-cache.sqlite3)")
    p.add_argument("--no-cache", action="store_true", help="grade every notebook again")
    p.add_argument("--cell-timeout", type=float, default=120.0, help="seconds per cell (120)")
    p.add_argument("--notebook-timeout", type=float, default=600.0,
                   help="seconds per notebook (600)")
    p.add_argument("--memory-gb", type=float, default=4.0,
                   help="memory of each notebook's processes together, GiB (4)")
    p.add_argument("--processes", type=int, default=32,
                   help="processes each notebook may run at once (32)")
    p.add_argument("--disk-mb", type=float, default=256.0,
                   help="disk each notebook may write, MiB (256)")
    p.add_argument("--run", choices=("functions", "all"), default="functions",
                   help="functions (default): run the graded functions and what they use, in "
                   "the checks' sandbox (a notebook whose functions cannot be extracted with "
                   "certainty is run whole, its notes say why); all: also run each whole "
                   "notebook top to bottom for its status (ran, raised, timeout)")
    p.add_argument("--class-report", metavar="FILE.html",
                   help="write the class report: scores, pass rates, common mistakes, who is "
                   "missing or late, code to review, similar submissions")
    p.add_argument("--lms", choices=("moodle", "canvas"),
                   help="the submissions are that LMS's download: learner ids from its folder "
                   "or file names (docs/grading.md)")
    p.add_argument("--times", metavar="FILE.csv",
                   help="submission times from the LMS (Moodle's grading worksheet, or "
                   "learner,submitted_at): not the files' modification times")
    p.add_argument("--times-zone", metavar="ZONE",
                   help="the time zone of Moodle's worksheet times (e.g. Europe/Berlin)")
    p.add_argument("--no-late", action="store_true", help="charge no late days")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="grade on a running Dask cluster (tcp://host:8786 or tls://...; "
                   "docs/grading.md, Larger classes)")
    p.add_argument("--cluster", choices=("slurm", "pbs", "sge", "lsf", "htcondor"),
                   help="start Dask workers on a batch system (dask-jobqueue): --jobs of them")
    p.add_argument("--cluster-config", metavar="FILE.yaml",
                   help="the --cluster's settings (sample: docs/grading/slurm.yaml)")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run learner code without the OS sandbox: ONLY for notebooks you trust")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m course_lib",
        description="Companion tools of 'Self-Attention, Executed': exercise checkers.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("list", help="list all exercises")
    p.set_defaults(handler=cmd_list)

    p = sub.add_parser("check", help="check your solution in FILE.py",
                       description="Exit status: 0 passed, 1 not yet, 2 usage or load error.")
    p.add_argument("id", help="exercise id (see `list`)")
    p.add_argument("file", help="the .py file that defines your function")
    p.add_argument("--function", metavar="NAME",
                   help="the function's name in FILE (default: the exercise's function name)")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds allowed per call of your function (default 10)")
    p.add_argument("--seed", type=int, default=None,
                   help="fix the random test inputs (default: fresh ones every run)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=cmd_check)

    p = sub.add_parser("hint", help="show a hint")
    p.add_argument("id")
    p.add_argument("--level", type=int, default=1, help="1 = gentlest; the last nearly tells")
    p.set_defaults(handler=cmd_hint)

    p = sub.add_parser("solution", help="show the reference solution")
    p.add_argument("id")
    p.set_defaults(handler=cmd_solution)

    p = sub.add_parser("progress", help="show your recorded progress, per chapter")
    p.add_argument("--json", action="store_true", help="per exercise, as JSON")
    p.add_argument("--export", metavar="FILE.csv", help="write every attempt to a CSV file")
    p.add_argument("--reset", action="store_true", help="forget all recorded progress")
    p.add_argument("--yes", action="store_true", help="with --reset: do not ask")
    p.set_defaults(handler=cmd_progress)

    p = sub.add_parser("workbook", help="write your own copies of the chapter notebooks",
                       description="Learner copies of every chapter: no solutions, answers "
                       "folded. Notebooks you have edited are never overwritten.")
    p.add_argument("dir", help="folder to write into (created if missing)")
    p.add_argument("--source", metavar="DIR",
                   help="the book's notebooks (default: book/ of this checkout, or the copy "
                   "installed with course_lib)")
    p.add_argument("--force", action="store_true", help="overwrite notebooks you have edited")
    p.set_defaults(handler=cmd_workbook)

    p = sub.add_parser("grade", help="grade learners' workbook notebooks into a gradebook (CSV)",
                       description="Instructors: run every submitted notebook in a fenced "
                       "kernel and grade its exercises with the course's checkers.")
    _configure_grade(p)
    p.set_defaults(handler=cmd_grade)

    for name, (help_text, configure, handler) in _EXTRA_COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        configure(p)
        p.set_defaults(handler=handler)
    return parser


_EXTRA_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Handler]] = {}


def add_command(name: str, help_text: str,
                configure: Callable[[argparse.ArgumentParser], None], handler: Handler) -> None:
    """Register another subcommand (``handler(args) -> exit status``) before ``main`` runs."""
    _EXTRA_COMMANDS[name] = (help_text, configure, handler)


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")  # type: ignore[union-attr]
        except Exception:
            pass
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except _UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. `python -m course_lib list | head`
        try:
            sys.stdout = open(os.devnull, "w")  # silence the flush at exit
        except Exception:
            pass
        return EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
