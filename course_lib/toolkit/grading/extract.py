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
#: Magics that bind no name of the notebook's (others, like ``%run``, may).
_QUIET_MAGICS = ("time", "timeit", "matplotlib", "config", "load_ext", "autoreload", "prun",
                 "capture", "precision", "who", "whos", "pip")
#: Calls that bind module names in ways a filter of statements cannot see.
_DYNAMIC = ("exec", "eval", "globals", "setattr", "vars", "locals")


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


def _locals(stmt: ast.stmt) -> set[str]:
    """Names a definition binds for itself (parameters, assignments, loop and comprehension
    variables, inner definitions and imports, exception names): not read from the module."""
    out: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, _DEF) and node is not stmt:
            out.add(node.name)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
    return out


def uncertain(nb: dict[str, Any], functions: set[str] | list[str]) -> str | None:
    """Why :func:`learner_module` may not define ``functions`` as running the notebook would
    (then the grader runs the whole notebook too, and says so), or ``None`` when it is certain:

    * ``from M import *`` or a call to ``exec``/``eval``/``globals``/``setattr`` at a cell's top
      level (names bound in ways the filter cannot see),
    * a statement the filter drops (a loop, ``del``, an expression) binds or deletes a name the
      functions need,
    * a line magic other than :data:`_QUIET_MAGICS` (``%run`` and ``%load`` bind names).
    """
    wanted = set(functions)
    defs: list[tuple[set[str], set[str], set[str]]] = []
    dropped: list[tuple[ast.stmt, set[str]]] = []
    for number, cell in enumerate(nb.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        try:
            statements = _statements(_translate_ipython(_cell_source(cell)))
        except (SyntaxError, ValueError):
            continue    # defines nothing in the kernel either; its functions: syntax_error
        for stmt in statements:
            if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                return f"`from {stmt.module} import *` binds names the grader cannot list"
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                continue
            for node in ast.walk(stmt) if not isinstance(stmt, _DEF) else ():
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                        and node.func.id in _DYNAMIC:
                    return f"`{node.func.id}(...)` at the top of code cell {number}"
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr in ("run_line_magic", "run_cell_magic", "system",
                                               "getoutput") \
                        and not (node.args and isinstance(node.args[0], ast.Constant)
                                 and node.args[0].value in _QUIET_MAGICS):
                    return f"a magic or shell command in code cell {number}"
            if isinstance(stmt, _DEF + _ASSIGN + _COMPOUND) and _names_bound(stmt):
                defs.append((_names_bound(stmt), _names_used(stmt), _locals(stmt)))
            else:
                stored = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
                          and isinstance(n.ctx, (ast.Store, ast.Del))}
                dropped.append((stmt, stored))
    needed = set(wanted)
    while True:
        more = set().union(*(used - local for b, used, local in defs if b & needed)) - needed
        if not more:
            break
        needed |= more
    for stmt, stored in dropped:
        if stored & needed:
            name = sorted(stored & needed)[0]
            return f"`{name}` is changed by a statement the grader does not run (line " \
                   f"{stmt.lineno} of its cell)"
    # A needed name bound nowhere at all is missing from the kernel's namespace too: certain.
    return None
