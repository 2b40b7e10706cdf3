"""What grading writes: the gradebook, the attempt log, one feedback file per learner, a summary.

* **Gradebook** (CSV): one row per learner, one column per exercise (``1`` passed, ``0`` tried and
  not passed, empty: not attempted), then ``total`` and ``status``. The first column, ``learner``,
  is what an LMS matches on (Moodle's "Import grades → CSV file": map it to *username* or *ID
  number*, and each exercise column to a grade item).
* **Attempt log** (CSV): learner, notebook, exercise, verdict, mistake, message, seconds.
* **Feedback** (Markdown, one file per learner): the notebook's status and each check's message.
* **Summary** (Markdown table): per exercise, the share passed and the most common mistake.

Rows and columns come in a fixed order (learners sorted, exercises in course order), so grading
the same submissions twice writes the same gradebook, byte for byte.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from course_lib.toolkit.display import markdown_table

_SCORE = {"passed": "1", "failed": "0", "error": "0", "not_attempted": ""}
_ICON = {"passed": "✓", "failed": "✗", "error": "✗", "not_attempted": "○"}


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _csv(rows: Sequence[Sequence[Any]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def learner_rows(results: Sequence[dict[str, Any]], exercises: Sequence[str]
                 ) -> dict[str, dict[str, Any]]:
    """Per learner: ``{"scores": {exercise: "1"|"0"|""}, "status": text}`` (best over notebooks)."""
    rank = {"": 0, "0": 1, "1": 2}
    rows: dict[str, dict[str, Any]] = {}
    for r in sorted(results, key=lambda r: (r["learner"], r["notebook"])):
        row = rows.setdefault(r["learner"], {"scores": dict.fromkeys(exercises, ""),
                                             "status": []})
        for v in r["verdicts"]:
            if v["exercise"] in row["scores"]:
                new = _SCORE[v["verdict"]]
                if rank[new] > rank[row["scores"][v["exercise"]]]:
                    row["scores"][v["exercise"]] = new
        note = r["status"] + (f" ({r['detail']})" if r.get("detail") else "")
        row["status"].append(f"{Path(r['notebook']).name}: {note}")
    for row in rows.values():
        row["status"] = "; ".join(row["status"])
    return rows


def gradebook_csv(results: Sequence[dict[str, Any]], exercises: Sequence[str]) -> str:
    rows = learner_rows(results, exercises)
    table: list[list[Any]] = [["learner", *exercises, "total", "status"]]
    for learner in sorted(rows):
        scores = rows[learner]["scores"]
        total = sum(1 for s in scores.values() if s == "1")
        table.append([learner, *(scores[e] for e in exercises), total, rows[learner]["status"]])
    return _csv(table)


def attempt_log_csv(results: Sequence[dict[str, Any]]) -> str:
    table: list[list[Any]] = [["learner", "notebook", "exercise", "verdict", "mistake",
                               "message", "seconds"]]
    for r in sorted(results, key=lambda r: (r["learner"], r["notebook"])):
        for v in r["verdicts"]:
            table.append([r["learner"], Path(r["notebook"]).name, v["exercise"], v["verdict"],
                          v["mistake"], v["message"], v["seconds"]])
    return _csv(table)


def feedback_markdown(learner: str, results: Sequence[dict[str, Any]]) -> str:
    parts = [f"# Feedback for {learner}\n"]
    for r in sorted(results, key=lambda r: r["notebook"]):
        parts.append(f"## {Path(r['notebook']).name} (chapter {r['chapter']})\n")
        status = r["status"] + (f": {r['detail']}" if r.get("detail") else "")
        parts.append(f"Your notebook, run top to bottom: **{status}**.\n")
        for v in r["verdicts"]:
            head = f"### {_ICON[v['verdict']]} `{v['exercise']}`: {v['verdict'].replace('_', ' ')}"
            parts.append(head + "\n")
            if v["message"]:
                parts.append(v["message"].strip() + "\n")
    return "\n".join(parts)


def summary_markdown(results: Sequence[dict[str, Any]], exercises: Sequence[str]) -> str:
    """Per exercise: learners who passed, attempted, and the most common mistake."""
    rows = learner_rows(results, exercises)
    mistakes: dict[str, Counter[str]] = {e: Counter() for e in exercises}
    for r in results:
        for v in r["verdicts"]:
            if v["verdict"] in ("failed", "error") and v["exercise"] in mistakes:
                mistakes[v["exercise"]][v["mistake"] or "wrong values"] += 1
    table = []
    n = len(rows)
    for e in exercises:
        passed = sum(1 for row in rows.values() if row["scores"][e] == "1")
        tried = sum(1 for row in rows.values() if row["scores"][e] != "")
        common = mistakes[e].most_common()
        top = min(common, key=lambda kv: (-kv[1], kv[0])) if common else None
        table.append({"exercise": e, "passed": f"{passed}/{n}",
                      "share passed": f"{passed / n:.0%}" if n else "-",
                      "attempted": f"{tried}/{n}",
                      "most common mistake": f"{top[0]} ({top[1]})" if top else "-"})
    return markdown_table(table)


def _safe_name(learner: str) -> str:
    return re.sub(r"[^\w.-]+", "_", learner).strip("._") or "learner"


def write_outputs(results: Sequence[dict[str, Any]], exercises: Sequence[str], out: Path,
                  log: Path | None, feedback: Path | None) -> None:
    """Write every output atomically (a reader never sees half a file)."""
    _atomic_write(out, gradebook_csv(results, exercises))
    if log is not None:
        _atomic_write(log, attempt_log_csv(results))
    if feedback is not None:
        by_learner: dict[str, list[dict[str, Any]]] = {}
        for r in results:
            by_learner.setdefault(r["learner"], []).append(r)
        for learner, rs in sorted(by_learner.items()):
            _atomic_write(feedback / f"{_safe_name(learner)}.md", feedback_markdown(learner, rs))
