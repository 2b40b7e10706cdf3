'''Exercise checkers: ``check`` / ``hint`` / ``solution``, in notebooks and from the command line.

Use::

    from course_lib import exercises
    exercises.list_exercises()                       # [{"id", "chapter", "title", "signature"}]
    result = exercises.check("softmax", my_softmax)  # CheckResult; shows as a coloured box
    result.passed, result.message, result.mistake    # bool, text, misconception id or None
    exercises.hint("softmax", level=1)               # graded hints; the last nearly gives it away
    exercises.solution("softmax")                    # the reference solution's source code

``check`` never raises. An untouched starter (body ``...``, ``pass``, ``raise
NotImplementedError``) gives ``status == "not_attempted"`` ("Not attempted yet."). Every other
outcome is one row of the learner's progress record (SQLite, ``~/.course_lib/progress.sqlite3``,
or ``$COURSE_LIB_PROGRESS``); ``exercises.progress()`` shows it per chapter.

In a chapter notebook
---------------------
A starter cell ``def softmax(x, dim=-1):`` with body ``...``; a check cell ending with
``exercises.check("softmax", softmax)``, whose repr is then exactly::

    ○ softmax: Not attempted yet.
    Replace the `...` in `softmax` with your code, then run the check again. Stuck? ...

and a hidden solution cell (tagged ``solution``: the learner's workbook leaves it out) ending with
``exercises.check("softmax", softmax_solution, record=False)`` (not the learner's attempt), whose
repr starts with ``✓ softmax: Correct!`` followed by ``All N cases passed: <case names>.``
Both are deterministic (fresh random inputs, but no values in the text), and so are the reprs of
a recognised mistake (``✗ softmax: Not yet.`` then the mistake's message). Only unrecognised
wrong values add value-dependent details (index of the first wrong entry, largest error).

Adding an exercise
------------------
One declaration in the chapter's module: ``course_lib/chapters/<chapter>/exercises.py`` holds
module-level :class:`Exercise` objects; :func:`list_exercises` discovers every such module::

    import torch
    from course_lib.toolkit.checking import Case, Exercise, Mistake

    def _cases(gen: torch.Generator) -> list[Case]:          # fresh random inputs every check
        x = torch.randn(4, 7, generator=gen)
        return [Case("basic", (x,)), Case("float64", (x.double(),), note="odd sizes")]

    def double(x):                                # the solution: solution("double") shows this
        return 2 * x

    def _forgot_factor(x):                        # a known mistake, implemented
        return x

    DOUBLE = Exercise(
        id="double", chapter="12_capstone", title="Double a tensor",
        signature="double(x (..., n)) -> (..., n)", params=("x",),
        cases=_cases, oracle=lambda x: x * 2, solution=double,
        hints=("Multiply.", "Return 2 * x."),
        mistakes=(Mistake("forgot_factor", "You returned x unchanged: multiply by 2.",
                          _forgot_factor),),
        forbidden=(),                 # e.g. ("softmax",) or ("sdpa",): see FORBIDDEN_GROUPS
    )

Cases may set ``max_square=N`` to forbid any N×N tensor during the call, and wrap an argument
in :class:`OnceIterator` to pass a one-pass iterator. The engine (``_engine.py``) compares
outputs to the oracle's (type, shape, dtype, NaN, values within per-dtype tolerances), checks
inputs are unmodified, and on failure names the mistake whose outputs equal the learner's.
'''

from __future__ import annotations

import difflib
import html
import os
import re
import time
from collections.abc import Callable
from typing import Any

from ._engine import run_check
from ._isolation import FileSource
from ._progress import load_progress, progress_path
from ._progress import record as _record_attempt
from ._progress_view import ProgressTable, progress, source_sha256
from ._registry import registry
from ._result import HEADLINES, CheckResult
from ._spec import DEFAULT_TOLERANCES, FORBIDDEN_GROUPS, Case, Exercise, Mistake, OnceIterator

__all__ = [
    "DEFAULT_TOLERANCES", "FORBIDDEN_GROUPS", "HEADLINES", "Case", "CheckResult", "Exercise",
    "ExerciseList", "Hint", "Mistake", "OnceIterator", "Solution", "check", "get_exercise", "hint",
    "ProgressTable", "list_exercises", "load_progress", "progress", "progress_path", "solution",
]


class ExerciseList(list):
    """``list_exercises()``'s result: a plain list of dicts that displays as a table."""

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td><code>{html.escape(e['id'])}</code></td><td>{html.escape(e['chapter'])}"
            f"</td><td>{html.escape(e['title'])}</td><td><code>{html.escape(e['signature'])}"
            "</code></td></tr>" for e in self)
        return ("<table><thead><tr><th>id</th><th>chapter</th><th>title</th><th>signature</th>"
                f"</tr></thead><tbody>{rows}</tbody></table>")


def list_exercises() -> ExerciseList:
    """All exercises in chapter order: ``{"id", "chapter", "title", "signature"}`` each."""
    return ExerciseList({"id": e.id, "chapter": e.chapter, "title": e.title,
                         "signature": e.signature} for e in registry().values())


def _unknown(exercise_id: Any) -> str:
    ids = list(registry())
    close = difflib.get_close_matches(str(exercise_id), ids, n=3)
    text = f"There is no exercise {exercise_id!r}."
    if close:
        text += " Did you mean " + " or ".join(repr(c) for c in close) + "?"
    return text + " Known ids: " + ", ".join(ids) + "."


def get_exercise(exercise_id: str) -> Exercise:
    """The declaration for ``exercise_id``; ``KeyError`` with suggestions if unknown."""
    table = registry()
    if exercise_id not in table:
        raise KeyError(_unknown(exercise_id))
    return table[exercise_id]


def check(exercise_id: str, fn: Callable[..., Any], *, timeout: float | None = None,
          seed: int | None = None, record: bool = True) -> CheckResult:
    """Run ``fn`` on fresh generated cases and compare with the reference. Never raises.

    ``timeout``: seconds allowed per call of ``fn`` (default: the exercise's ``time_limit``,
    10 s for most). ``seed``: fix the random cases (tests).
    ``record``: add the attempt to the progress record (the book's own solution cells pass
    ``record=False``: only the learner's attempts count). An untouched starter is not recorded.
    ``fn`` runs in a separate (forked) worker process: nothing it does (exit, crash, endless
    loop, patching torch, changing the default dtype...) reaches your session or the verdict.
    """
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    started = time.perf_counter()
    if os.environ.get("COURSE_LIB_GRADING") == "1":
        # Inside a grader's sandbox: the course's exercises (cases, answers) are not there.
        return CheckResult(exercise=str(exercise_id), passed=False, status="not_attempted",
                           mistake="graded_outside",
                           message=("This notebook is being graded: the grader checks your "
                                    "function outside the notebook, on cases it cannot see."))
    try:
        table = registry()
        if not isinstance(exercise_id, str) or exercise_id not in table:
            return CheckResult(exercise=str(exercise_id), passed=False, status="error",
                               mistake="unknown_exercise", message=_unknown(exercise_id))
        ex = table[exercise_id]
        if not callable(fn) and not isinstance(fn, FileSource):
            result = CheckResult(
                exercise=ex.id, passed=False, status="error", mistake="not_callable",
                message=(f"check needs your function itself, not a {type(fn).__name__}: write "
                         f"exercises.check(\"{ex.id}\", {ex.function_name}) without calling it."))
        else:
            limit = ex.time_limit if timeout is None else float(timeout)
            result = run_check(ex, fn, timeout=limit, seed=seed)
    except Exception as e:  # a bug in the checker must not look like the learner's
        result = CheckResult(
            exercise=str(exercise_id), passed=False, status="error", mistake="checker_error",
            message=("The checker itself failed (not your fault; please report it): "
                     f"{type(e).__name__}: {e}"))
    unrecorded = result.mistake in ("unknown_exercise", "load_error") \
        or result.status == "not_attempted"
    if record and not unrecorded:
        result.progress_error = _record_attempt(
            result.exercise, result.passed, result.status, result.mistake,
            duration_s=time.perf_counter() - started, seed=seed, source_sha256=source_sha256(fn))
    return result


class Hint(str):
    """A hint: a ``str`` that displays as text (no quotes) in notebooks."""

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(str(self)))
        return ('<div class="course-lib-hint" style="border-left:6px solid #1a5fb4;'
                'background:#e8f0fb;color:#0d2a4d;padding:0.5em 0.8em;margin:0.3em 0;'
                'border-radius:4px;font-family:system-ui,sans-serif;font-size:0.92em;">'
                f'{text}</div>')


class Solution(str):
    """Source code of a reference solution: a ``str`` that displays as highlighted code."""

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer

            return highlight(str(self), PythonLexer(), HtmlFormatter(noclasses=True,
                                                                     style="default"))
        except Exception:
            return f"<pre>{html.escape(str(self))}</pre>"


def hint(exercise_id: str, level: int = 1, *, command_line: bool = False) -> Hint:
    """Hint number ``level`` (1 = gentlest; clamped to the available range). ``command_line``:
    the footer names the next hint as the terminal takes it (``--level 2``), not as Python."""
    try:
        ex = get_exercise(exercise_id)
    except KeyError as e:
        return Hint(str(e.args[0]))
    n = len(ex.hints)
    k = min(max(int(level), 1), n)
    nxt = (f"python -m course_lib hint {ex.id} --level {k + 1}" if command_line
           else f"exercises.hint(\"{ex.id}\", level={k + 1})")
    more = f" ({nxt} says more)" if k < n else ""
    return Hint(f"Hint {k}/{n} for {ex.id}: {ex.hints[k - 1]}{more}")


def solution(exercise_id: str) -> Solution:
    """The reference solution's source code (a ``str``; displays highlighted in notebooks)."""
    try:
        ex = get_exercise(exercise_id)
    except KeyError as e:
        return Solution(f"# {e.args[0]}\n")
    return Solution(ex.solution_source())
