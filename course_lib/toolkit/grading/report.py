"""What grading writes: the gradebook, the attempt log, one feedback file per learner, a summary.

* **Gradebook** (CSV): one row per learner (and, with a roster, one per roster learner without a
  submission), one column per graded exercise with the points earned (the exercise's points if
  passed, ``0`` if tried and not passed, empty if not attempted), then ``late_days``, ``total``
  (after the late policy) and ``notes`` (how each notebook ran, and why a row is what it is). The
  first column, ``learner``, is what an LMS matches on (``docs/grading.md``).
* **Attempt log** (CSV): learner, notebook, exercise, verdict, mistake, message, seconds, and the
  source the checker graded (the function and what it uses), for review.
* **Feedback** (Markdown, one file per learner): the notebook's status and each check's message.
  The file name is the learner id where it is plain (letters, digits, ``_``, ``.``), else a
  normalised form with a hash of the id: two learners never share a file.
* **Summary** (Markdown): per exercise, the share passed and the most common mistake; then the rows
  whose graded code uses threads, ctypes, ``gc``, frames, ``marshal``, ``importlib``, processes
  or network modules, for the instructor to look at.

Every text cell is written so a spreadsheet shows it as text: a cell starting with ``=``, ``+``,
``-``, ``@``, a tab or a carriage return gets a leading ``'`` (the OWASP advice against formula
injection), and a cell with a separator (``,``, ``;``, tab, ``|``, a line break), a quote or a
formula character *anywhere* is quoted, so that no locale's separator splits it into a cell that
starts a formula (``x;=SUM(1;41)``). What reaches the terminal has its control characters
(escape sequences) shown as escapes (:func:`terminal_text`). Rows and columns come in a fixed
order, so grading the same submissions twice writes the same gradebook, byte for byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from course_lib.toolkit.display import markdown_table

_SCORE = {"passed": "1", "failed": "0", "error": "0", "not_attempted": ""}
_ICON = {"passed": "✓", "failed": "✗", "error": "✗", "not_attempted": "○"}


def _atomic_write(path: Path, text: str) -> None:
    """Write a fresh temporary file beside ``path`` (a new name, created exclusively: nothing
    already there is opened), then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # A file name that is not UTF-8 (a notebook's, in the notes and the log) is shown with
    # U+FFFD for its undecodable bytes, as learner ids are: it cannot stop the writing.
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


#: A formula character after a separator of any locale (and spaces or quotes): where a
#: spreadsheet splits the line on that separator, it would start a cell.
_AFTER_SEPARATOR = re.compile(r'([,;\t|\r\n][\s"]*)(?=[=+\-@])')


def safe_cell(value: Any) -> Any:
    """``value`` as a spreadsheet shows it as text (see the module docstring); numbers pass.
    A text starting with a formula character gets a leading ``'``, and so does every formula
    character right after a separator inside it (``x;=SUM(1;41)`` -> ``x;'=SUM(1;41)``), so no
    locale's split of the line starts a formula."""
    if not isinstance(value, str):
        return value
    value = _AFTER_SEPARATOR.sub(r"\1'", value)
    if value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


#: A text cell with one of these anywhere is quoted (separators of any locale, line breaks, the
#: quote itself, formula characters).
_QUOTE = frozenset(',;\t|\r\n"=+-@')


def _csv_cell(value: Any) -> str:
    value = safe_cell(value)
    text = "" if value is None else str(value)
    if isinstance(value, str) and _QUOTE.intersection(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def _csv(rows: Sequence[Sequence[Any]]) -> str:
    return "".join(",".join(_csv_cell(v) for v in row) + "\n" for row in rows)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


def terminal_text(text: str) -> str:
    """``text`` safe to print on the instructor's terminal: control characters (escape
    sequences, carriage returns, bidirectional overrides) shown as ``\\x..``/``\\u....``
    escapes; tabs and line breaks kept."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


_REVIEW = {
    "threads": r"\b(threading|_thread|concurrent\.futures)\b",
    "processes": r"\b(subprocess|multiprocessing|os\.(fork|system|exec\w*|spawn\w*|kill))\b",
    "ctypes": r"\b(ctypes|cffi)\b",
    "gc": r"\bgc\b",
    "frames": r"\b(sys\._getframe|currentframe|f_back|f_locals|f_globals|settrace|setprofile)\b",
    "marshal": r"\b(marshal|pickle|dill)\b",
    "importlib": r"\b(importlib|__import__|builtins)\b",
    "network": r"\b(socket|urllib|http\.client|requests|ssl)\b",
}


def review_flags(sources: dict[str, str]) -> list[str]:
    """Which of :data:`_REVIEW`'s kinds of code the graded sources *use*: an import alone (the
    workbook's setup cell imports ``subprocess``) is not flagged, a use of what it imported is."""
    import ast

    found: set[str] = set()
    for source in sources.values():
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            tree = None
        if tree is None:
            body = source
        else:
            aliases: dict[str, str] = {}
            rest = []
            for stmt in tree.body:
                if isinstance(stmt, ast.Import):
                    aliases.update({(a.asname or a.name).split(".")[0]: a.name
                                    for a in stmt.names})
                elif isinstance(stmt, ast.ImportFrom):
                    aliases.update({a.asname or a.name: f"{stmt.module}.{a.name}"
                                    for a in stmt.names})
                else:
                    rest.append(stmt)
            used = {n.id for stmt in rest for n in ast.walk(stmt) if isinstance(n, ast.Name)}
            body = "\n".join([ast.unparse(stmt) for stmt in rest]
                             + [aliases[n] for n in sorted(used) if n in aliases])
        found |= {name for name, pattern in _REVIEW.items() if re.search(pattern, body)}
    return [name for name in _REVIEW if name in found]


def _score(verdict: str, points: float) -> str:
    if verdict == "passed":
        return _number(points)
    return "" if verdict == "not_attempted" else "0"


def _number(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def learner_rows(results: Sequence[dict[str, Any]], points: dict[str, float]
                 ) -> dict[str, dict[str, Any]]:
    """Per learner: ``{"scores": {exercise: text}, "earned", "late_days", "total", "notes"}``;
    over several notebooks, each exercise's best verdict counts."""
    rank = {"not_attempted": 0, "failed": 1, "error": 1, "passed": 2}
    rows: dict[str, dict[str, Any]] = {}
    for r in sorted(results, key=lambda r: (r["learner"], r["notebook"])):
        row = rows.setdefault(r["learner"], {"best": {}, "notes": [], "late_days": 0.0,
                                             "factor": 1.0})
        for v in r["verdicts"]:
            if v["exercise"] in points:
                old = row["best"].get(v["exercise"], "not_attempted")
                if rank.get(v["verdict"], 1) > rank[old]:
                    row["best"][v["exercise"]] = v["verdict"] if v["verdict"] in rank else "error"
        note = r["status"] + (f" ({r['detail']})" if r.get("detail") else "")
        row["notes"].append(f"{Path(r['notebook']).name}: {note}" if r["notebook"] else note)
        if r.get("late_days"):
            row["late_days"] = max(row["late_days"], float(r["late_days"]))
            row["factor"] = min(row["factor"], float(r.get("late_factor", 1.0)))
    for row in rows.values():
        best = row.pop("best")
        row["scores"] = {e: _score(best.get(e, "not_attempted"), p) for e, p in points.items()}
        row["earned"] = sum(p for e, p in points.items() if best.get(e) == "passed")
        row["total"] = row["earned"] * row["factor"]
        row["notes"] = "; ".join(row["notes"])
    return rows


def gradebook_csv(results: Sequence[dict[str, Any]], points: dict[str, float],
                  roster: dict[str, str] | None = None) -> str:
    rows = learner_rows(results, points)
    head = ["learner"] + (["name"] if roster is not None else [])
    table: list[list[Any]] = [head + [*points, "late_days", "total", "notes"]]
    learners = sorted(set(rows) | set(roster or ()))
    for learner in learners:
        row = rows.get(learner)
        name = [roster.get(learner, "")] if roster is not None else []
        if row is None:
            table.append([learner, *name, *("" for _ in points), "0", "0", "no submission"])
            continue
        table.append([learner, *name, *(row["scores"][e] for e in points),
                      _number(round(row["late_days"], 2)), _number(round(row["total"], 2)),
                      row["notes"]])
    return _csv(table)


def attempt_log_csv(results: Sequence[dict[str, Any]]) -> str:
    table: list[list[Any]] = [["learner", "notebook", "exercise", "verdict", "mistake",
                               "message", "seconds", "source"]]
    for r in sorted(results, key=lambda r: (r["learner"], r["notebook"])):
        for v in r["verdicts"]:
            table.append([r["learner"], Path(r["notebook"]).name, v["exercise"], v["verdict"],
                          v["mistake"], v["message"], v["seconds"],
                          r.get("sources", {}).get(v["exercise"], "")])
    return _csv(table)


def feedback_markdown(learner: str, results: Sequence[dict[str, Any]]) -> str:
    parts = [f"# Feedback for {learner}\n"]
    for r in sorted(results, key=lambda r: r["notebook"]):
        parts.append(f"## {Path(r['notebook']).name} (chapter {r['chapter'] or '?'})\n")
        status = r["status"] + (f": {r['detail']}" if r.get("detail") else "")
        parts.append(f"Your notebook, run top to bottom: **{status}**.\n")
        for v in r["verdicts"]:
            head = f"### {_ICON[v['verdict']]} `{v['exercise']}`: {v['verdict'].replace('_', ' ')}"
            parts.append(head + "\n")
            if v["message"]:
                parts.append(v["message"].strip() + "\n")
    return "\n".join(parts)


def summary_markdown(results: Sequence[dict[str, Any]], points: dict[str, float]) -> str:
    """Per exercise: learners who passed, attempted, and the most common mistake; then the rows
    to review."""
    rows = learner_rows(results, points)
    mistakes: dict[str, Counter[str]] = {e: Counter() for e in points}
    for r in results:
        for v in r["verdicts"]:
            if v["verdict"] in ("failed", "error") and v["exercise"] in mistakes:
                mistakes[v["exercise"]][v["mistake"] or "wrong values"] += 1
    table = []
    n = len(rows)
    for e in points:
        passed = sum(1 for row in rows.values() if row["scores"][e] not in ("", "0"))
        tried = sum(1 for row in rows.values() if row["scores"][e] != "")
        common = mistakes[e].most_common()
        top = min(common, key=lambda kv: (-kv[1], kv[0])) if common else None
        table.append({"exercise": e, "passed": f"{passed}/{n}",
                      "share passed": f"{passed / n:.0%}" if n else "-",
                      "attempted": f"{tried}/{n}",
                      "most common mistake": f"{top[0]} ({top[1]})" if top else "-"})
    text = markdown_table(table, columns=["exercise", "passed", "share passed", "attempted",
                                          "most common mistake"])   # no exercise: no rows
    # Names are the learners' own: shown on the instructor's terminal without escape sequences.
    review = sorted((terminal_text(r["learner"]), terminal_text(Path(r["notebook"]).name), flags)
                    for r in results if (flags := review_flags(r.get("sources", {}))))
    if review:
        text += "\n\nRows to review (their graded code uses these; the log has the source):\n"
        text += "\n".join(f"- {who} ({nb}): {', '.join(flags)}" for who, nb, flags in review)
    return text


def feedback_name(learner: str) -> str:
    """The feedback file's name: the id itself where it is plain, else a normalised form and a
    hash of the id (plain names have no ``-``, hashed ones do: they never collide)."""
    if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.]{0,99}", learner) and not learner.endswith("."):
        return f"{learner}.md"
    plain = re.sub(r"[^A-Za-z0-9_]+", "_", learner).strip("_")[:60] or "learner"
    digest = hashlib.sha256(learner.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{plain}-{digest}.md"


def write_outputs(results: Sequence[dict[str, Any]], points: dict[str, float], out: Path,
                  log: Path | None, feedback: Path | None,
                  roster: dict[str, str] | None = None) -> None:
    """Write every output atomically (a reader never sees half a file)."""
    _atomic_write(out, gradebook_csv(results, points, roster))
    if log is not None:
        _atomic_write(log, attempt_log_csv(results))
    if feedback is not None:
        by_learner: dict[str, list[dict[str, Any]]] = {}
        for r in results:
            by_learner.setdefault(r["learner"], []).append(r)
        for learner, rs in sorted(by_learner.items()):
            _atomic_write(feedback / feedback_name(learner), feedback_markdown(learner, rs))
