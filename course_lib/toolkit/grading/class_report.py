"""The class report: one static HTML page an instructor can read in a minute.

    python -m course_lib grade submissions/* --out gradebook.csv --class-report class.html

Sections: the score distribution and each exercise's pass rate (PNG figures embedded as data
URLs, with alternative text that states what they show, in the course's colour-blind-safe
palette), the most common named mistakes with their counts and the exercise they belong to, who
is missing, late or whose notebook did not run, the review flags, and pairs of similar
submissions (the graded sources normalised by ``ast``: comments, blank lines and formatting
gone; similarity: ``difflib.SequenceMatcher.ratio`` of the normalised texts, listed from 0.9)
for the instructor to judge: similarity is a reason to look, not a verdict. Every text from a
notebook or a checker is HTML-escaped.
"""

from __future__ import annotations

import ast
import base64
import difflib
import html
import io
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import report
from .feedback import BROKEN, mistake_title

#: Pairs of learners whose graded sources are at least this similar are listed.
SIMILAR = 0.9


def normalised(source: str) -> str:
    """``source`` without comments, docstrings' layout or formatting (``ast.unparse``); the
    text itself if it does not parse."""
    try:
        return ast.unparse(ast.parse(source))
    except (SyntaxError, ValueError):
        return source


def similar_pairs(results: Sequence[dict[str, Any]], least: float = SIMILAR
                  ) -> list[tuple[float, str, str, str]]:
    """``(ratio, exercise, learner, learner)`` for every exercise and pair of learners whose
    graded sources (normalised) are at least ``least`` similar, most similar first."""
    by_exercise: dict[str, dict[str, str]] = {}
    for r in results:
        for e, src in r.get("sources", {}).items():
            if src:
                by_exercise.setdefault(e, {})[r["learner"]] = normalised(src)
    pairs = []
    for e, sources in sorted(by_exercise.items()):
        names = sorted(sources)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                ratio = difflib.SequenceMatcher(None, sources[a], sources[b]).ratio()
                if ratio >= least:
                    pairs.append((round(ratio, 3), e, a, b))
    return sorted(pairs, key=lambda p: (-p[0], p[1], p[2], p[3]))


def _figure(draw: Any, alt: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.toolkit.plotting import use_course_style

    use_course_style()
    fig, ax = plt.subplots(figsize=(6, 3))
    draw(ax)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def class_report_html(results: Sequence[dict[str, Any]], points: dict[str, float],
                      roster: dict[str, str] | None = None, title: str = "Class report") -> str:
    """The page's HTML text."""
    from course_lib.toolkit.plotting import PALETTE

    rows = report.learner_rows(results, points)
    learners = sorted(set(rows) | set(roster or ()))
    totals = [rows[x]["total"] if x in rows else 0.0 for x in learners]
    possible = sum(points.values())
    esc = html.escape
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{esc(title)}</title></head><body>\n<h1>{esc(title)}</h1>"]
    parts.append(f"<p>{len(learners)} learners, {len(rows)} handed in; "
                 f"{report._number(possible)} points possible.</p>")

    def scores(ax: Any) -> None:
        ax.hist(totals, bins=min(10, max(1, len(set(totals)))), color=PALETTE[0],
                edgecolor="black")
        ax.set_xlabel("total points")
        ax.set_ylabel("learners")

    counts = Counter(round(t, 2) for t in totals)
    described = ", ".join(f"{c} at {report._number(t)}" for t, c in sorted(counts.items()))
    parts.append("<h2>Scores</h2>" + _figure(
        scores, f"Histogram of the {len(learners)} learners' totals out of "
        f"{report._number(possible)}: {described}."))
    rates = {e: sum(1 for r in rows.values() if r["scores"][e] not in ("", "0"))
             / max(1, len(learners)) for e in points}

    def passing(ax: Any) -> None:
        ax.barh(list(rates), [100 * v for v in rates.values()], color=PALETTE[1],
                edgecolor="black")
        ax.set_xlabel("learners who passed (%)")
        ax.set_xlim(0, 100)
        ax.invert_yaxis()

    parts.append("<h2>Pass rate per exercise</h2>" + _figure(
        passing, "Bar chart of the share of learners who passed each exercise: "
        + ", ".join(f"{e} {v:.0%}" for e, v in rates.items()) + "."))
    mistakes: Counter[tuple[str, str]] = Counter()
    for r in results:
        for v in r["verdicts"]:
            if v["verdict"] in ("failed", "error") and v["exercise"] in points:
                mistakes[(v["exercise"], mistake_title(v["exercise"], v["mistake"]))] += 1
    parts.append("<h2>Most common mistakes</h2>")
    if mistakes:
        parts.append("<table><tr><th>exercise</th><th>mistake</th><th>learners</th></tr>"
                     + "".join(f"<tr><td>{esc(e)}</td><td>{esc(t)}</td><td>{n}</td></tr>"
                               for (e, t), n in sorted(mistakes.items(),
                                                       key=lambda kv: (-kv[1], kv[0])))
                     + "</table>")
    else:
        parts.append("<p>None.</p>")
    missing = [x for x in learners if x not in rows]
    late = [f"{x} ({report._number(round(rows[x]['late_days'], 2))} days)" for x in sorted(rows)
            if rows[x]["late_days"] > 0]
    broken = sorted({f"{r['learner']}: {r['status']} {r.get('detail', '')}".strip()
                     for r in results if r["status"] in BROKEN})
    parts.append("<h2>Missing, late, did not run</h2><ul>"
                 f"<li>Missing: {esc(', '.join(missing) or 'none')}</li>"
                 f"<li>Late: {esc(', '.join(late) or 'none')}</li>"
                 f"<li>Did not run or not graded: {esc('; '.join(broken) or 'none')}</li></ul>")
    review = sorted((r["learner"], flags) for r in results
                    if (flags := report.review_flags(r.get("sources", {}))))
    parts.append("<h2>Code to review</h2>" + ("<ul>" + "".join(
        f"<li>{esc(who)}: {esc(', '.join(flags))}</li>" for who, flags in review) + "</ul>"
        if review else "<p>None.</p>"))
    pairs = similar_pairs(results)
    parts.append(f"<h2>Similar submissions (normalised sources, ratio &ge; {SIMILAR})</h2>"
                 "<p>A reason to look, not a verdict: short exercises have few right answers."
                 "</p>")
    if pairs:
        parts.append("<table><tr><th>ratio</th><th>exercise</th><th>learners</th></tr>"
                     + "".join(f"<tr><td>{ratio:.3f}</td><td>{esc(e)}</td>"
                               f"<td>{esc(a)}, {esc(b)}</td></tr>" for ratio, e, a, b in pairs)
                     + "</table>")
    else:
        parts.append("<p>None.</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_class_report(results: Sequence[dict[str, Any]], points: dict[str, float],
                       out: Path, roster: dict[str, str] | None = None) -> None:
    report._atomic_write(out, class_report_html(results, points, roster))
