"""A course-wide gradebook: several assignments' gradebooks merged into one CSV.

    python -m course_lib.toolkit.grading.merge week3=week3.csv week6=week6.csv --out course.csv

One row per learner found in any gradebook (sorted by id), one column per assignment with that
gradebook's ``total`` (empty where the learner has no row there), and ``total``: the sum. Each
gradebook is graded on its own (its own seed, cache and assignment file, on one machine or a
cluster); merging reads only their ``learner`` and ``total`` columns, so any run can be redone
and the course-wide file written again.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

from . import report


class MergeError(ValueError):
    """A gradebook that cannot be merged (the message names it)."""


def read_totals(path: str | Path) -> dict[str, float]:
    """``{learner: total}`` of one gradebook."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or not {"learner", "total"} <= set(reader.fieldnames):
            raise MergeError(f"{path}: not a gradebook (no 'learner' and 'total' columns)")
        out: dict[str, float] = {}
        for n, row in enumerate(reader, start=2):
            try:
                out[row["learner"]] = float(row["total"] or 0)
            except ValueError:
                raise MergeError(f"{path}, line {n}: total {row['total']!r} is no number") \
                    from None
    return out


def merge(gradebooks: dict[str, str | Path]) -> str:
    """The course-wide gradebook's CSV text from ``{assignment name: gradebook file}`` (in the
    order given: the columns' order)."""
    totals = {name: read_totals(path) for name, path in gradebooks.items()}
    learners = sorted(set().union(*(set(t) for t in totals.values())))
    table: list[list[object]] = [["learner", *totals, "total"]]
    for learner in learners:
        cells = [totals[a].get(learner) for a in totals]
        table.append([learner, *("" if c is None else report._number(round(c, 2))
                                 for c in cells),
                      report._number(round(sum(c for c in cells if c is not None), 2))])
    return report._csv(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gradebooks", nargs="+", metavar="NAME=GRADEBOOK.csv")
    parser.add_argument("--out", required=True, metavar="COURSE.csv")
    args = parser.parse_args(argv)
    pairs = {}
    for item in args.gradebooks:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            parser.error(f"{item!r}: write NAME=GRADEBOOK.csv")
        if name in pairs:
            parser.error(f"assignment {name!r} given twice")
        pairs[name] = path
    try:
        text = merge(pairs)
    except (MergeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report._atomic_write(Path(args.out), text)
    print(f"{len(text.splitlines()) - 1} learners, {len(pairs)} assignments: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
