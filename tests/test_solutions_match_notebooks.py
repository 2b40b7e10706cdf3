"""One source per solution: each notebook's hidden solution cell defines ``<id>_solution``, which
must be the exercise module's solution, statement for statement (same names as the chapter).

Compared as ASTs, so comments, annotations, the docstring and the ``_solution`` suffix (on the
function and on the other solutions it calls) do not count; everything else does.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from pathlib import Path

import pytest

from course_lib.toolkit.checking._registry import registry

BOOK = Path(__file__).resolve().parent.parent / "book"
SUFFIX = "_solution"


def _solution_cells() -> dict[str, ast.FunctionDef]:
    found: dict[str, ast.FunctionDef] = {}
    for path in sorted(BOOK.glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            tags = cell.get("metadata", {}).get("tags", [])
            if cell["cell_type"] != "code" or "solution" not in tags:
                continue
            for node in ast.parse("".join(cell["source"])).body:
                if isinstance(node, ast.FunctionDef) and node.name.endswith(SUFFIX):
                    found[node.name[:-len(SUFFIX)]] = node
    return found


class _Normalise(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id.endswith(SUFFIX):
            node.id = node.id[:-len(SUFFIX)]
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        self.generic_visit(node)
        node.name, node.returns = "solution", None
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                and isinstance(first.value.value, str):
            node.body = node.body[1:]
        return node


def normalised(fn: ast.FunctionDef) -> str:
    return ast.dump(_Normalise().visit(ast.parse(ast.unparse(fn)).body[0]))


CELLS = _solution_cells()


@pytest.mark.parametrize("exercise_id", list(registry()))
def test_notebook_solution_is_the_exercise_solution(exercise_id):
    assert exercise_id in CELLS, f"no hidden `def {exercise_id}{SUFFIX}` cell in book/"
    solution = registry()[exercise_id].solution
    module_def = ast.parse(textwrap.dedent(inspect.getsource(solution))).body[0]
    assert normalised(module_def) == normalised(CELLS[exercise_id]), (
        f"{exercise_id}: the notebook cell and {solution.__module__}.{solution.__name__} differ:\n"
        f"{ast.unparse(CELLS[exercise_id])}\n---\n{inspect.getsource(solution)}")


def test_normalisation_keeps_what_matters():
    a = ast.parse("def f_solution(x: int) -> int:\n    'doc'\n    return g_solution(x) + 1").body[0]
    b = ast.parse("def f(x):\n    return g(x) + 1").body[0]
    c = ast.parse("def f(x):\n    return g(x) + 2").body[0]
    d = ast.parse("def f(y):\n    return g(y) + 1").body[0]
    assert normalised(a) == normalised(b)
    assert normalised(b) != normalised(c) and normalised(b) != normalised(d)
