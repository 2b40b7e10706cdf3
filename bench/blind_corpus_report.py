"""How well the exercise checkers name the mistakes of a blind corpus (issue 51's acceptance).

Runs every submission of a blind corpus (``tests/learner_corpus_blind.py``, or with ``--corpus``
``learner_corpus_blind2.py`` ... ``learner_corpus_blind4.py``, each written later by another
author; all without reading the declared mistakes) through ``exercises.check`` and prints, per
exercise, a markdown table: wrong
submissions, how many got a named diagnosis (a specific mistake id, not one of the generic
verdicts in :data:`GENERIC`), how many did not, false accepts (a wrong one passed) and false
rejects (a right one failed); then the total share named and the list of false accepts, false
rejects and unnamed wrong submissions with the checker's message.

Usage (from the repository root; the progress record goes to a temporary directory)::

    .venv/bin/python bench/blind_corpus_report.py [--exercise ID ...] [--seed N ...]

With several seeds (each fixes the generated cases) the report of the first seed is followed by
the share named under each seed and the submissions whose verdict or naming changes with the
cases; without ``--seed`` the cases are fresh, as a learner's are.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

#: mistake ids that say only *that* the output is wrong, not *which* mistake it is: what the
#: checker answers for garbage (zeros of the wrong dtype or shape, a tuple, None, all NaN, all
#: inf, a function that raises, an endless loop)
GENERIC = frozenset({"wrong_values", "wrong_shape", "wrong_dtype", "wrong_type", "raised",
                     "nan", "inf", "timeout", "not_attempted"})


def is_named(mistake: str | None) -> bool:
    """True when the checker named a specific mistake (not a generic verdict)."""
    return bool(mistake) and mistake not in GENERIC


def run(exercise_ids: list[str] | None = None, seed: int | None = None,
        corpus_name: str = "learner_corpus_blind") -> list[dict]:
    """Check every entry of the corpus module ``tests/<corpus_name>.py`` (of the given
    exercises); one row per entry."""
    import importlib

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "tests"))
    corpus = importlib.import_module(corpus_name)

    from course_lib import exercises

    rows = []
    for i, sub in enumerate(corpus.CORPUS):
        if exercise_ids and sub.exercise not in exercise_ids:
            continue
        r = exercises.check(sub.exercise, corpus.load(i), record=False, seed=seed)
        rows.append({"index": i, "exercise": sub.exercise, "label": sub.label,
                     "right": sub.right, "passed": bool(r.passed), "mistake": r.mistake,
                     "message": str(r.message)})
    return rows


def table(rows: list[dict]) -> str:
    """The markdown report of :func:`run`'s rows."""
    per = defaultdict(lambda: dict(wrong=0, named=0, unnamed=0, fa=0, right=0, fr=0))
    for row in rows:
        p = per[row["exercise"]]
        if row["right"]:
            p["right"] += 1
            p["fr"] += not row["passed"]
        else:
            p["wrong"] += 1
            if row["passed"]:
                p["fa"] += 1
            elif is_named(row["mistake"]):
                p["named"] += 1
            else:
                p["unnamed"] += 1
    out = ["| exercise | wrong | named | unnamed | false accepts | right | false rejects |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    tot = defaultdict(int)
    for ex, p in per.items():
        out.append(f"| {ex} | {p['wrong']} | {p['named']} | {p['unnamed']} | {p['fa']} | "
                   f"{p['right']} | {p['fr']} |")
        for key, val in p.items():
            tot[key] += val
    out.append(f"| **total** | {tot['wrong']} | {tot['named']} | {tot['unnamed']} | {tot['fa']} "
               f"| {tot['right']} | {tot['fr']} |")
    share = tot["named"] / tot["wrong"] if tot["wrong"] else float("nan")
    out.append("")
    out.append(f"Named: {tot['named']} of {tot['wrong']} wrong submissions ({share:.1%}).")

    def listing(title: str, keep) -> None:
        chosen = [r for r in rows if keep(r)]
        out.append("")
        out.append(f"### {title}: {len(chosen)}")
        for r in chosen:
            msg = " ".join(r["message"].split())
            if len(msg) > 400:
                msg = msg[:400] + " ..."
            out.append(f"- `{r['exercise']}` #{r['index']} ({r['label']}): "
                       f"mistake `{r['mistake']}`: {msg}")

    listing("False accepts", lambda r: not r["right"] and r["passed"])
    listing("False rejects", lambda r: r["right"] and not r["passed"])
    listing("Unnamed wrong submissions",
            lambda r: not r["right"] and not r["passed"] and not is_named(r["mistake"]))
    listing("Named wrong submissions",
            lambda r: not r["right"] and not r["passed"] and is_named(r["mistake"]))
    return "\n".join(out)


def _outcome(row: dict) -> str:
    if row["passed"]:
        return "passed"
    return row["mistake"] if is_named(row["mistake"]) else f"unnamed ({row['mistake']})"


def stability(runs: dict[int, list[dict]]) -> str:
    """Share named under each seed, and the submissions whose outcome depends on the seed."""
    out = ["", "### Per seed", "", "| seed | named | wrong | share | false accepts | "
           "false rejects |", "|---:|---:|---:|---:|---:|---:|"]
    for seed, rows in runs.items():
        wrong = [r for r in rows if not r["right"]]
        named = sum(not r["passed"] and is_named(r["mistake"]) for r in wrong)
        fa = sum(r["passed"] for r in wrong)
        fr = sum(r["right"] and not r["passed"] for r in rows)
        out.append(f"| {seed} | {named} | {len(wrong)} | {named / len(wrong):.1%} | {fa} | {fr} |")
    first = next(iter(runs.values()))
    changing = []
    for k, row in enumerate(first):
        outcomes = {seed: _outcome(rows[k]) for seed, rows in runs.items()}
        if len(set(outcomes.values())) > 1:
            changing.append(f"- `{row['exercise']}` #{row['index']} ({row['label']}): "
                            + ", ".join(f"seed {s}: {o}" for s, o in outcomes.items()))
    out += ["", f"### Outcome depends on the seed: {len(changing)}", *changing]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exercise", nargs="*", help="only these exercise ids")
    parser.add_argument("--seed", type=int, nargs="*", default=None,
                        help="fix the generated cases (several: compare the seeds)")
    parser.add_argument("--corpus", default="learner_corpus_blind",
                        choices=[f"learner_corpus_blind{n}" for n in ("", "2", "3", "4")],
                        help="which blind corpus of tests/ (blind2: written for issue 51; "
                             "blind3, blind4: measures, each read only after the checkers' "
                             "changes)")
    args = parser.parse_args(argv)
    os.environ.setdefault("COURSE_LIB_PROGRESS",
                          str(Path(tempfile.mkdtemp(prefix="blind_corpus_")) / "progress"))
    seeds = args.seed or [None]
    runs = {seed: run(args.exercise, seed, args.corpus) for seed in seeds}
    print(table(runs[seeds[0]]))
    if len(seeds) > 1:
        print(stability(runs))


if __name__ == "__main__":
    main()
