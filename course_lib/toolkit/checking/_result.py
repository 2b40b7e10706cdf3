"""CheckResult: what ``check`` returns, shown as a coloured box in notebooks."""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass, field

#: The first words of a result's message, by status (chapter notebooks may rely on them).
HEADLINES = {
    "passed": "Correct!",
    "failed": "Not yet.",
    "not_attempted": "Not attempted yet.",
    "error": "Could not check.",
}

_COLOURS = {  # (border, background, text): light backgrounds with dark text, any theme
    "passed": ("#1e7e34", "#e6f4ea", "#0b3d17"),
    "failed": ("#c62828", "#fdecea", "#5f1212"),
    "not_attempted": ("#6b7280", "#f1f3f4", "#26292e"),
    "error": ("#c62828", "#fdecea", "#5f1212"),
}

_ICONS = {"passed": "✓", "failed": "✗", "not_attempted": "○", "error": "!"}

#: "(See chapter 10, § “One cached step: offset, append, attend”.)" in a message; and
#: "(See the exercise's statement, chapter 4.)"
_SECTION_REF = re.compile(r"\(See (chapter (\d+), § “([^”]+)”)\.\)")
_STATEMENT_REF = re.compile(r"\(See (the exercise(?:'|&#x27;)s statement, chapter (\d+))\.\)")


def _chapter_pages() -> dict[int, str]:
    """Chapter number -> notebook name ("08_flash"), from the chapters that hold exercises."""
    try:
        from ._registry import registry
        return {int(ex.chapter[:2]): ex.chapter for ex in registry().values()}
    except Exception:
        return {}


def _anchor(title: str, book: bool) -> str:
    """A section's anchor: the book's (docutils' id of the heading) or JupyterLab's (the
    heading's text with its spaces as dashes)."""
    if not book:
        return title.replace(" ", "-")
    try:
        from docutils.nodes import make_id
        return make_id(title)
    except Exception:
        return ""


def link_sections(body: str) -> str:
    """``body`` (escaped HTML) with each chapter reference made a link: in the book (the
    build sets ``COURSE_LIB_BOOK=1``) to the chapter's page, in a workbook to the learner's
    copy of the chapter beside the notebook, at the section's heading."""
    pages = _chapter_pages()
    book = os.environ.get("COURSE_LIB_BOOK") == "1"
    ext = ".html" if book else ".ipynb"

    def section(m: re.Match) -> str:
        doc = pages.get(int(m.group(2)))
        if doc is None:
            return m.group(0)
        anchor = _anchor(html.unescape(m.group(3)), book)
        href = html.escape(f"{doc}{ext}" + (f"#{anchor}" if anchor else ""), quote=True)
        return f'(See <a href="{href}">{m.group(1)}</a>.)'

    def statement(m: re.Match) -> str:
        doc = pages.get(int(m.group(2)))
        if doc is None:
            return m.group(0)
        href = html.escape(f"{doc}{ext}#{_anchor('Exercises', book) or 'exercises'}", quote=True)
        return f'(See <a href="{href}">{m.group(1)}</a>.)'
    return _STATEMENT_REF.sub(statement, _SECTION_REF.sub(section, body))


@dataclass
class CheckResult:
    """The outcome of ``exercises.check(id, fn)``.

    ``passed``: bool. ``message``: deterministic text (what was tried, what went wrong, how to fix
    it; never the expected values). ``mistake``: id of the recognised misconception, or
    ``"not_attempted"``, ``"raised"``, ``"timeout"``, ``"forbidden_call"``... or ``None``.
    ``details``: value-dependent extras (first wrong index, largest error); not in the repr.
    """

    exercise: str
    passed: bool
    message: str
    mistake: str | None = None
    status: str = "failed"          # passed | failed | not_attempted | error
    cases_run: int = 0
    cases_total: int = 0
    failed_case: str | None = None
    details: str = ""
    printed: bool = False
    progress_error: str | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def headline(self) -> str:
        return f"{_ICONS[self.status]} {self.exercise}: {HEADLINES[self.status]}"

    def __repr__(self) -> str:  # deterministic: nbval compares it
        return f"{self.headline}\n{self.message}"

    def __str__(self) -> str:   # the repr plus the value-dependent details (CLI)
        extra = self.details and self.details not in self.message
        return repr(self) + (f"\nDetails: {self.details}" if extra else "")

    def _repr_html_(self) -> str:
        border, bg, fg = _COLOURS[self.status]
        body = link_sections(html.escape(self.message))
        return (
            f'<div class="course-lib-check course-lib-check-{self.status}" '
            f'style="border-left:6px solid {border};background:{bg};color:{fg};'
            f'padding:0.5em 0.8em;margin:0.3em 0;border-radius:4px;'
            f'font-family:system-ui,sans-serif;font-size:0.92em;">'
            f'<strong>{html.escape(self.headline)}</strong>'
            f'<div style="white-space:pre-wrap;margin-top:0.25em;">{body}</div></div>'
        )
