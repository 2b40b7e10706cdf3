"""How long grading a class takes: N synthetic workbooks of one chapter, ``--jobs`` at once.

    python bench/grade_class.py                       # 60 workbooks of 03_softmax, 2 jobs
    python bench/grade_class.py -n 20 --chapter 06_masks --jobs 2
    python bench/grade_class.py -n 20 --compare       # with and without the OS sandbox

The learners are a mix, one third each: every exercise right (the reference solution, renamed to
the starter's name), every exercise with its first declared mistake, and the first exercise only
(the rest left as starters). Prints the wall time, the time per notebook and the summary table;
the course's target is 60 workbooks in at most 10 minutes on a 2-core machine with 2 jobs.
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
        kind = i % 3
        bodies = {}
        for j, ex in enumerate(exs):
            if kind == 0:
                bodies[ex.function_name] = _as(ex.solution, ex.function_name)
            elif kind == 1 and ex.mistakes:
                bodies[ex.function_name] = _as(ex.mistakes[0].fn, ex.function_name)
            elif kind == 2 and j == 0:
                bodies[ex.function_name] = _as(ex.solution, ex.function_name)
        learner = json.loads(json.dumps(copy))
        # Every learner's notebook differs (as in a real class): byte-identical notebooks
        # would be graded once.
        learner["cells"].append({"cell_type": "markdown", "metadata": {},
                                 "source": f"Handed in by learner {i:03d}."})
        for cell in learner["cells"]:
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            for name, body in bodies.items():
                if cell["cell_type"] == "code" and src.startswith(f"def {name}("):
                    cell["source"] = body
        (folder / f"learner{i:03d}.ipynb").write_text(json.dumps(learner))


def grade_once(subs: Path, out: Path, jobs: int, sandboxed: bool) -> tuple[float, object]:
    """Wall seconds and the run. (Not CPU time: a sandbox's processes are reaped inside it, and
    their time does not reach this process's children's usage.)"""
    started = time.perf_counter()
    run = grading.grade(sorted(subs.glob("*.ipynb")), out, jobs=jobs, cache=None,
                        sandboxed=sandboxed, seed=1)
    return time.perf_counter() - started, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=60, help="workbooks (default 60)")
    parser.add_argument("--chapter", default="03_softmax")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--compare", action="store_true",
                        help="also grade without the sandbox and print its overhead")
    parser.add_argument("--out", help="write the table (Markdown) to this file")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="grade-class-") as tmp:
        subs = Path(tmp) / "submissions"
        subs.mkdir()
        make_class(subs, args.chapter, args.n)
        for sandboxed in ([True, False] if args.compare else [True]):
            wall, run = grade_once(subs, Path(tmp) / "gradebook.csv", args.jobs, sandboxed)
            statuses = Counter(r["status"] for r in run.results)
            assert run.graded == args.n, "every notebook should be graded (none cached)"
            per = sum(run.seconds) / len(run.seconds)
            rows.append({"sandbox": "bubblewrap" if sandboxed else "none (--no-sandbox)",
                         "workbooks": args.n, "jobs": args.jobs, "wall (s)": f"{wall:.0f}",
                         "wall (min)": f"{wall / 60:.1f}", "per notebook (s)": f"{per:.1f}",
                         "outcomes": ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))})
            print(run.summary)
            print(f"slowest notebooks: {', '.join(f'{s:.0f} s' for s in sorted(run.seconds)[-3:])}")
    from course_lib.toolkit.display import markdown_table

    table = f"{args.n} workbooks of {args.chapter}, --jobs {args.jobs}:\n\n" \
        + markdown_table(rows)
    if len(rows) == 2:
        extra = float(rows[0]["per notebook (s)"]) - float(rows[1]["per notebook (s)"])
        table += f"\n\nThe sandbox's overhead: {extra:.1f} s per notebook."
    print("\n" + table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
