"""The learner's program, from a notebook: the code an exercise function needs, and nothing else.

A workbook notebook mixes the learner's functions with the chapter's demonstrations (plots,
explorers, timings, the check calls). Grading runs the course's checkers on the functions alone,
so :func:`learner_module` keeps, from the code cells in order,

* every top-level ``import`` (cheap, and what the functions' bodies use),
* and the top-level definitions (``def``, ``class``, assignments) that the exercise functions
  need, directly or through other definitions (a fixed point over the names they use),

and drops every other statement (calls, loops, ``with`` blocks, magics, the check calls). IPython
syntax (``%magic``, ``!shell``) is translated first, as the kernel would. A cell that does not
parse is reported per function it defines, so a learner sees "your cell has a syntax error"
instead of "not attempted".
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

_DEF = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_ASSIGN = (ast.Assign, ast.AnnAssign, ast.AugAssign)


@dataclass
class LearnerModule:
    """What :func:`learner_module` found: ``source`` (a Python module's text), the exercise
    functions it defines, and ``syntax_errors``: ``{function name: message}`` for functions
    whose defining cell does not parse."""

    source: str
    defined: set[str] = field(default_factory=set)
    syntax_errors: dict[str, str] = field(default_factory=dict)


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
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


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
            tree = ast.parse(text)
        except SyntaxError as e:
            for name in wanted:
                if re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", text, re.M):
                    errors[name] = (f"the cell defining `{name}` (code cell {number}) has a "
                                    f"syntax error: {e.msg} (line {e.lineno})")
            continue
        for stmt in tree.body:
            order += 1
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                if not (isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"):
                    imports.append((order, stmt))
            elif isinstance(stmt, _DEF + _ASSIGN):
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
                         syntax_errors={k: v for k, v in errors.items() if k not in defined})
