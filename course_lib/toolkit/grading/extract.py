"""The learner's program, from a notebook: the code an exercise function needs, and nothing else.

A workbook notebook mixes the learner's functions with the chapter's demonstrations (plots,
explorers, timings, the check calls). Grading runs the course's checkers on the functions alone,
so :func:`learner_module` keeps, from the code cells in order,

* every top-level ``import`` (cheap, and what the functions' bodies use),
* and the top-level definitions (``def``, ``class``, assignments) that the exercise functions
  need, directly or through other definitions (a fixed point over the names they use),

and drops every other statement (calls, loops, magics, the check calls). A definition need not be
at a cell's top level: an ``if``, ``try`` or ``with`` statement that defines a needed name is kept
whole (it decides which definition runs), and a ``%%time`` or ``%%capture`` cell's body counts as
the cell (the kernel runs it in the notebook's namespace). IPython syntax (``%magic``, ``!shell``)
is translated first, as the kernel would. A cell that does not parse is reported per function it
defines, so a learner sees "your cell has a syntax error" instead of "not attempted".
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

_DEF = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_ASSIGN = (ast.Assign, ast.AnnAssign, ast.AugAssign)
_COMPOUND = (ast.If, ast.Try, ast.With, ast.AsyncWith) + (
    (ast.TryStar,) if hasattr(ast, "TryStar") else ())
#: Cell magics whose body runs as ordinary code in the notebook's namespace.
_BODY_MAGICS = ("time", "capture", "prun")


@dataclass
class LearnerModule:
    """What :func:`learner_module` found: ``source`` (a Python module's text), the exercise
    functions it defines, and ``syntax_errors``: ``{function name: message}`` for functions
    whose defining cell does not parse."""

    source: str
    defined: set[str] = field(default_factory=set)
    syntax_errors: dict[str, str] = field(default_factory=dict)
    untouched: set[str] = field(default_factory=set)    # last defined as the bare starter


def _cell_source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _translate_ipython(text: str) -> str:
    """``%magic`` and ``!cmd`` lines become plain Python calls (which the filter then drops)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # no IPython: the text is taken as plain Python
        return text
    try:
        return TransformerManager().transform_cell(text)
    except Exception:
        return text


def _names_bound(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, _DEF):
        return {stmt.name}
    if isinstance(stmt, _COMPOUND):
        return set().union(*(_names_bound(s) for s in _inner(stmt)))
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _inner(stmt: ast.stmt) -> list[ast.stmt]:
    """The statements directly inside an ``if``, ``try`` or ``with`` (every branch)."""
    body = list(getattr(stmt, "body", [])) + list(getattr(stmt, "orelse", [])) \
        + list(getattr(stmt, "finalbody", []))
    for handler in getattr(stmt, "handlers", []):
        body += handler.body
    return body


def _magic_body(stmt: ast.stmt) -> str | None:
    """The body of ``get_ipython().run_cell_magic('time', '', body)`` (a ``%%time`` cell)."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "run_cell_magic" and len(call.args) == 3):
        return None
    name, _, body = call.args
    if isinstance(name, ast.Constant) and name.value in _BODY_MAGICS \
            and isinstance(body, ast.Constant) and isinstance(body.value, str):
        return body.value
    return None


def _statements(text: str) -> list[ast.stmt]:
    """A cell's top-level statements, a ``%%time`` cell's body in place of the magic call."""
    out: list[ast.stmt] = []
    for stmt in ast.parse(text).body:
        body = _magic_body(stmt)
        out += _statements(_translate_ipython(body)) if body is not None else [stmt]
    return out


def _last_def_untouched(defs: list[tuple[int, ast.stmt, set[str], set[str]]], name: str
                        ) -> bool:
    from course_lib.toolkit.checking._untouched import untouched_def

    last = [stmt for _, stmt, bound, _ in defs if name in bound]
    return bool(last) and isinstance(last[-1], (ast.FunctionDef, ast.AsyncFunctionDef)) \
        and untouched_def(last[-1])


def _names_used(stmt: ast.stmt) -> set[str]:
    """Every name the statement loads anywhere (bodies, defaults, decorators, bases)."""
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}


def learner_module(nb: dict[str, Any], functions: set[str] | list[str]) -> LearnerModule:
    """The module that defines ``functions`` as the notebook's code cells do (see module doc)."""
    wanted = set(functions)
    imports: list[tuple[int, ast.stmt]] = []
    defs: list[tuple[int, ast.stmt, set[str], set[str]]] = []
    errors: dict[str, str] = {}
    order = 0
    for number, cell in enumerate(nb.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        text = _translate_ipython(_cell_source(cell))
        try:
            statements = _statements(text)
        except SyntaxError as e:
            for name in wanted:
                if re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", text, re.M):
                    errors[name] = (f"the cell defining `{name}` (code cell {number}) has a "
                                    f"syntax error: {e.msg} (line {e.lineno})")
            continue
        for stmt in statements:
            order += 1
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                if not (isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"):
                    imports.append((order, stmt))
            elif isinstance(stmt, _DEF + _ASSIGN + _COMPOUND) and _names_bound(stmt):
                defs.append((order, stmt, _names_bound(stmt), _names_used(stmt)))
    needed = set(wanted)
    while True:
        more = set().union(*(used for _, _, bound, used in defs if bound & needed)) - needed
        if not more:
            break
        needed |= more
    kept = sorted(imports + [(o, s) for o, s, bound, _ in defs if bound & needed],
                  key=lambda pair: pair[0])
    defined = {name for _, _, bound, _ in defs for name in bound} & wanted
    body = "\n\n".join(ast.unparse(stmt) for _, stmt in kept)
    header = "# The learner's exercise functions and what they use, extracted for grading.\n"
    return LearnerModule(source=header + body + "\n", defined=defined,
                         syntax_errors={k: v for k, v in errors.items() if k not in defined},
                         untouched={n for n in defined if _last_def_untouched(defs, n)})
