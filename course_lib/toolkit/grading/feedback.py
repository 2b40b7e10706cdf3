"""What a learner and an instructor read after grading: one feedback file per learner, and the
summary on the instructor's terminal.

* **Feedback** (Markdown, one file per learner): the total and the late deduction first, a table
  of the points per exercise, then per exercise what the checker found in the course's words
  ("Not yet: ..." and the declared mistake's message, never "failed"), the hint to read next
  (``exercises.hint(id)``, the first of the graded hints) and where the graded function is in the
  notebook: its first line, which the learner can search for (a cell number they cannot see).
  Every text that comes from a checker's message or a notebook is escaped for Markdown and HTML
  (:func:`escape`), so a learner's exception text cannot add a heading, a link or a tag.
* **Summary** (Markdown, the terminal): per exercise the share passed and the most common
  mistake by its title, then who is missing (on the roster, no submission), late, or whose
  notebook did not run, and the rows to review.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import report

#: What a verdict is called in the feedback.
VERDICT_WORDS = {"passed": "Passed", "failed": "Not yet", "error": "Not yet",
                 "not_attempted": "Not attempted"}
#: Statuses of a notebook that did not run as handed in.
BROKEN = ("raised", "timeout", "crashed", "unreadable", "refused", "unknown")

_MARKDOWN = re.compile(r"([\\`*_\[\]#|~])")
_LINE_START = re.compile(r"^(\s*)([-+=])", re.M)
_NUMBERED = re.compile(r"^(\s*\d+)([.)])", re.M)


def escape(text: str) -> str:
    """``text`` shown as itself in Markdown and HTML: ``&``, ``<``, ``>`` as entities, every
    Markdown mark of headings, emphasis, links, tables and code backslash-escaped (and a
    line's leading ``-``, ``+``, ``=`` or ``1.``), control characters dropped."""
    text = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", str(text))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MARKDOWN.sub(r"\\\1", text)
    text = _LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), text)
    return _NUMBERED.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


def _exercise(exercise_id: str) -> Any:
    from course_lib.toolkit.checking import get_exercise

    try:
        return get_exercise(exercise_id)
    except Exception:
        return None


def mistake_title(exercise_id: str, mistake: str) -> str:
    """A mistake in the course's words: the first sentence of the declared mistake's message;
    else the checker's kind of outcome made readable (``raised``, ``timeout``, ...); else, for
    outputs that no declared mistake explains, "wrong values"."""
    ex = _exercise(exercise_id)
    text = ""
    if ex is not None:
        text = next((m.message for m in ex.mistakes if m.id == mistake), "")
    text = text or mistake.replace("_", " ") or "wrong values"
    first = re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]
    return first if len(first) <= 120 else first[:117] + "..."


def first_line(source: str, function: str) -> str:
    """The first line of the last ``def function(`` in the graded source ("" if none)."""
    lines = [x.strip() for x in source.splitlines()
             if re.match(rf"\s*(async\s+)?def\s+{re.escape(function)}\s*\(", x)]
    return lines[-1] if lines else ""


def feedback_markdown(learner: str, results: Sequence[dict[str, Any]],
                      points: dict[str, float]) -> str:
    """One learner's feedback file (see the module docstring)."""
    row = report.learner_rows(results, points)[learner]
    possible = sum(points.values())
    late = float(row["late_days"])
    factor = float(row["factor"])
    parts = [f"# Feedback for {escape(learner)}\n",
             f"**Total: {report._number(round(row['total'], 2))} of "
             f"{report._number(possible)} points.**"]
    if late > 0:
        parts.append(f"Handed in {report._number(round(late, 2))} days late: "
                     f"{report._number(round(row['earned'], 2))} points earned, "
                     f"{report._number(round((1 - factor) * 100, 1))}% deducted for lateness.")
    parts.append("")
    best: dict[str, dict[str, Any]] = {}
    rank = {"not_attempted": 0, "failed": 1, "error": 1, "passed": 2}
    for r in sorted(results, key=lambda r: r["notebook"]):
        for v in r["verdicts"]:
            old = best.get(v["exercise"])
            if old is None or rank.get(v["verdict"], 1) > rank.get(old["verdict"], 1):
                best[v["exercise"]] = {**v, "source": r.get("sources", {}).get(v["exercise"], "")}
    table = ["| Exercise | Points | Result |", "|---|---|---|"]
    for e, p in points.items():
        v = best.get(e, {"verdict": "not_attempted", "mistake": "", "message": ""})
        score = row["scores"][e] or "0"
        table.append(f"| `{e}` | {score} of {report._number(p)} | "
                     f"{VERDICT_WORDS.get(v['verdict'], 'Not yet')} |")
    parts += table + [""]
    for r in sorted(results, key=lambda r: r["notebook"]):
        status = r["status"] + (f": {r['detail']}" if r.get("detail") else "")
        parts.append(f"Notebook {escape(Path(r['notebook']).name)} (chapter "
                     f"{escape(r['chapter'] or '?')}): {escape(status)}.\n")
    for e in points:
        v = best.get(e)
        if v is None:
            continue
        ex = _exercise(e)
        title = ex.title if ex is not None else e
        word = VERDICT_WORDS.get(v["verdict"], "Not yet")
        icon = {"passed": "✓", "not_attempted": "○"}.get(v["verdict"], "✗")
        head = f"## {icon} `{e}` ({escape(title)}): {word}"
        if v["verdict"] in ("failed", "error"):
            head += f": {escape(mistake_title(e, v['mistake']))}"
        parts.append(head + "\n")
        where = first_line(v.get("source", ""), ex.function_name if ex is not None else e)
        if where:
            parts.append(f"Graded: your function that starts with `{where.replace('`', '')}` "
                         "(its last definition in your notebook).\n")
        if v["message"] and v["verdict"] != "passed":
            parts.append(escape(v["message"].strip()) + "\n")
        if v["verdict"] != "passed" and ex is not None and ex.hints:
            parts.append(f"Read next: `exercises.hint(\"{e}\")`: {escape(ex.hints[0])}\n")
    return "\n".join(parts)


def write_feedback(results: Sequence[dict[str, Any]], points: dict[str, float],
                   folder: Path) -> None:
    """One file per learner in ``folder`` (names: ``report.feedback_name``)."""
    by_learner: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_learner.setdefault(r["learner"], []).append(r)
    for learner, rs in sorted(by_learner.items()):
        report._atomic_write(folder / report.feedback_name(learner),
                             feedback_markdown(learner, rs, points))


def summary_markdown(results: Sequence[dict[str, Any]], points: dict[str, float],
                     roster: dict[str, str] | None = None) -> str:
    """The terminal summary (see the module docstring)."""
    from course_lib.toolkit.display import markdown_table

    rows = report.learner_rows(results, points)
    mistakes: dict[str, Counter[str]] = {e: Counter() for e in points}
    for r in results:
        for v in r["verdicts"]:
            if v["verdict"] in ("failed", "error") and v["exercise"] in mistakes:
                mistakes[v["exercise"]][mistake_title(v["exercise"], v["mistake"])] += 1
    learners = sorted(set(rows) | set(roster or ()))
    n = len(learners)
    table = []
    for e in points:
        passed = sum(1 for row in rows.values() if row["scores"][e] not in ("", "0"))
        tried = sum(1 for row in rows.values() if row["scores"][e] != "")
        top = min(mistakes[e].items(), key=lambda kv: (-kv[1], kv[0]), default=None)
        table.append({"exercise": e, "passed": f"{passed}/{n}",
                      "share passed": f"{passed / n:.0%}" if n else "-",
                      "attempted": f"{tried}/{n}",
                      "most common mistake": f"{top[0]} ({top[1]})" if top else "-"})
    text = markdown_table(table) if table else "No exercise was graded."
    missing = [x for x in learners if x not in rows]
    late = [f"{x} ({report._number(round(rows[x]['late_days'], 2))} days)"
            for x in sorted(rows) if rows[x]["late_days"] > 0]
    broken = sorted({f"{r['learner']} ({r['status']})" for r in results
                     if r["status"] in BROKEN})
    text += f"\n\n{n} learners: {len(rows)} handed in"
    text += f"; missing: {', '.join(missing)}" if missing else "; none missing"
    text += f"; late: {', '.join(late)}" if late else "; none late"
    text += f"; did not run or not graded: {', '.join(broken)}." if broken else \
        "; every notebook was graded."
    review = sorted((r["learner"], Path(r["notebook"]).name, flags) for r in results
                    if (flags := report.review_flags(r.get("sources", {}))))
    if review:
        text += "\n\nRows to review (their graded code uses these; the log has the source):\n"
        text += "\n".join(f"- {who} ({nb}): {', '.join(flags)}" for who, nb, flags in review)
    return text
