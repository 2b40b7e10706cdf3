"""CheckResult: what ``check`` returns, shown as a coloured box in notebooks."""

from __future__ import annotations

import html
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
        body = html.escape(self.message)
        return (
            f'<div class="course-lib-check course-lib-check-{self.status}" '
            f'style="border-left:6px solid {border};background:{bg};color:{fg};'
            f'padding:0.5em 0.8em;margin:0.3em 0;border-radius:4px;'
            f'font-family:system-ui,sans-serif;font-size:0.92em;">'
            f'<strong>{html.escape(self.headline)}</strong>'
            f'<div style="white-space:pre-wrap;margin-top:0.25em;">{body}</div></div>'
        )
