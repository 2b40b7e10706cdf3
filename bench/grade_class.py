"""How long grading a class takes: N synthetic workbooks per chapter, ``--jobs`` at once.

    python bench/grade_class.py                       # 60 workbooks of 03_softmax, 2 jobs
    python bench/grade_class.py -n 20 --chapter 06_masks --jobs 2
    python bench/grade_class.py -n 20 --compare       # with and without the OS sandbox
    python bench/grade_class.py -n 4 --chapter 03_softmax,13_across_devices --jobs 1 \
        --run all,functions --rounds 2                # where a notebook's time goes, both modes

The learners are a mix, a quarter each: every exercise right (the reference solution, renamed to
the starter's name), every exercise with its first declared mistake, the first exercise only
(the rest left as starters), and broken (right functions, but a cell that raises and the last
exercise's cell with a syntax error). Prints the wall time, the time per notebook, where each
notebook's time went (``python``: the grading process's start and imports; ``kernel``: the
sandboxed kernel's start; ``cells``: the notebook's cells; ``checks``: the check sandbox's start
and the checks) and the summary table. ``--run all,functions`` grades the class in both modes
(``grade(run=...)``), alternating, ``--rounds`` times, so both see the same load.
``--compare`` grades the class twice, in the sandbox and with ``--no-sandbox``, and prints the
sandbox's overhead per notebook (``--out FILE.md`` also writes the table).
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course_lib.toolkit import grading, workbook  # noqa: E402
from course_lib.toolkit.checking import registry  # noqa: E402


def _as(fn, name: str) -> str:
    src = inspect.getsource(fn)
    return re.sub(r"^def \w+\(", f"def {name}(", src, count=1, flags=re.M)


def make_class(folder: Path, chapter: str, n: int) -> None:
    nb = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())
    copy = workbook.learner_copy(nb, chapter)
    exs = [e for e in registry().values() if e.chapter == chapter]
    for i in range(n):
        kind = i % 4
        bodies = {}
        for j, ex in enumerate(exs):
            if kind == 0:
                bodies[ex.function_name] = _as(ex.solution, ex.function_name)
            elif kind == 1 and ex.mistakes:
                bodies[ex.function_name] = _as(ex.mistakes[0].fn, ex.function_name)
            elif kind == 2 and j == 0:
                bodies[ex.function_name] = _as(ex.solution, ex.function_name)
            elif kind == 3:
                bodies[ex.function_name] = _as(ex.solution, ex.function_name)
                if j == len(exs) - 1:       # broken: a syntax error in the last exercise
                    bodies[ex.function_name] += "\n    return (\n"
        learner = json.loads(json.dumps(copy))
        # Every learner's notebook differs (as in a real class): byte-identical notebooks
        # would be graded once.
        learner["cells"].append({"cell_type": "markdown", "metadata": {},
                                 "source": f"Handed in by learner {i:03d}."})
        if kind == 3:                            # broken: a cell that raises
            learner["cells"].insert(1, {"cell_type": "code", "metadata": {}, "outputs": [],
                                        "execution_count": None,
                                        "source": "undefined_name_in_a_broken_workbook\n"})
        for cell in learner["cells"]:
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            for name, body in bodies.items():
                if cell["cell_type"] == "code" and src.startswith(f"def {name}("):
                    cell["source"] = body
        (folder / f"{chapter[:2]}-learner{i:03d}.ipynb").write_text(json.dumps(learner))


def grade_once(subs: Path, out: Path, jobs: int, sandboxed: bool, run: str = "all"
               ) -> tuple[float, object]:
    """Wall seconds and the run. (Not CPU time: a sandbox's processes are reaped inside it, and
    their time does not reach this process's children's usage.)"""
    started = time.perf_counter()
    graded = grading.grade(sorted(subs.glob("*.ipynb")), out, jobs=jobs, cache=None,
                           sandboxed=sandboxed, seed=1, run=run, progress=False)
    return time.perf_counter() - started, graded


SPLIT = ("python", "kernel", "cells", "checks")


def split(run: object, chapter: str) -> dict[str, float]:
    """Mean seconds per notebook of ``chapter`` in each part of :data:`SPLIT`, and ``total``."""
    rows = [(r, s) for r, s in zip(run.results, run.seconds_by_result, strict=True)
            if s is not None and r["chapter"] == chapter]
    out = {}
    for part in SPLIT:
        if part == "python":
            values = [s - r.get("timings", {}).get("inside", 0.0) for r, s in rows]
        elif part == "checks":
            values = [sum(r.get("timings", {}).get(k, 0.0) for k in ("checks_start", "checks"))
                      for r, _ in rows]
        else:
            values = [r.get("timings", {}).get(part, 0.0) for r, _ in rows]
        out[part] = sum(values) / max(1, len(values))
    out["total"] = sum(s for _, s in rows) / max(1, len(rows))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=60, help="workbooks per chapter (default 60)")
    parser.add_argument("--chapter", default="03_softmax", help="chapters, comma-separated")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--run", default="all",
                        help="run modes to measure, comma-separated: all, functions")
    parser.add_argument("--rounds", type=int, default=1,
                        help="grade the class this many times per mode, alternating modes")
    parser.add_argument("--compare", action="store_true",
                        help="also grade without the sandbox and print its overhead")
    parser.add_argument("--out", help="write the table (Markdown) to this file")
    args = parser.parse_args(argv)
    chapters = args.chapter.split(",")
    modes = args.run.split(",")
    rows, splits = [], []
    with tempfile.TemporaryDirectory(prefix="grade-class-") as tmp:
        subs = Path(tmp) / "submissions"
        subs.mkdir()
        for chapter in chapters:
            make_class(subs, chapter, args.n)
        plan = [(sandboxed, mode) for _ in range(args.rounds) for mode in modes
                for sandboxed in ([True, False] if args.compare else [True])]
        for n_round, (sandboxed, mode) in enumerate(plan):
            wall, run = grade_once(subs, Path(tmp) / "gradebook.csv", args.jobs, sandboxed,
                                   mode)
            statuses = Counter(r["status"] for r in run.results)
            assert run.graded == args.n * len(chapters), "every notebook graded (none cached)"
            per = sum(run.seconds) / len(run.seconds)
            rows.append({"round": n_round // len(modes) + 1, "run": mode,
                         "sandbox": "bubblewrap" if sandboxed else "none (--no-sandbox)",
                         "workbooks": args.n * len(chapters), "jobs": args.jobs,
                         "wall (s)": f"{wall:.0f}", "wall (min)": f"{wall / 60:.1f}",
                         "per notebook (s)": f"{per:.1f}",
                         "outcomes": ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))})
            for chapter in chapters:
                parts = split(run, chapter)
                splits.append({"round": n_round // len(modes) + 1, "run": mode,
                               "chapter": chapter,
                               **{f"{k} (s)": f"{v:.1f}" for k, v in parts.items()}})
            print(run.summary)
            print(f"slowest notebooks: {', '.join(f'{s:.0f} s' for s in sorted(run.seconds)[-3:])}")
    from course_lib.toolkit.display import markdown_table

    table = f"{args.n} workbooks per chapter of {', '.join(chapters)}, --jobs {args.jobs}:\n\n" \
        + markdown_table(rows)
    table += "\n\nWhere a notebook's time went (mean per notebook):\n\n" + markdown_table(splits)
    if args.compare:
        extra = float(rows[0]["per notebook (s)"]) - float(rows[1]["per notebook (s)"])
        table += f"\n\nThe sandbox's overhead: {extra:.1f} s per notebook."
    print("\n" + table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
