"""The prose tells the truth about the code it names.

* Every ``course_lib.…`` dotted name quoted in the book's text (the markdown cells of
  ``book/*.ipynb`` and the pages ``book/*.md``) imports: a module, or an attribute of one.
* Every exercise's text states its signature exactly as the registry lists it
  (``python -m course_lib list``): the markdown directly above the starter cell quotes the
  registry's ``signature`` verbatim in backticks, and the starter's ``def`` takes the registry's
  parameters (``Exercise.params``) in the same order.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

from course_lib.toolkit.checking import registry

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
DOTTED = re.compile(r"(?<![\w.])course_lib(?:\.[A-Za-z_]\w*)+")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def _prose(path: Path) -> str:
    if path.suffix == ".md":
        return path.read_text(encoding="utf-8")
    return "\n".join(_source(c) for c in _cells(path) if c["cell_type"] == "markdown")


def _quoted_names() -> list[tuple[str, str]]:
    found = set()
    for path in sorted(BOOK.glob("*.ipynb")) + sorted(BOOK.glob("*.md")):
        for name in DOTTED.findall(_prose(path)):
            found.add((path.name, name))
    return sorted(found)


def resolves(dotted: str) -> bool:
    """Whether ``a.b.c`` is an importable module or an attribute reachable from one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_resolves_tells_real_names_from_stale_ones():
    assert resolves("course_lib.attention.masks.causal_mask")
    assert resolves("course_lib.chapters.ch04_multi_head.helpers")
    assert not resolves("course_lib.multihead_tools.toy_heads_layer")
    assert not resolves("course_lib.attention.masks.no_such_function")
    assert DOTTED.findall("see `course_lib.reference.attention_weights`.") == [
        "course_lib.reference.attention_weights"]


QUOTED = _quoted_names()


def test_the_book_quotes_course_lib_names():
    assert len(QUOTED) > 20  # the scan found the prose (a broken glob would pass everything)


@pytest.mark.parametrize(("page", "name"), QUOTED, ids=[f"{p}:{n}" for p, n in QUOTED])
def test_quoted_course_lib_name_imports(page, name):
    assert resolves(name), f"{page} quotes `{name}`, which does not import"


EXERCISES = list(registry().values())


def _starter(cells: list[dict], function_name: str) -> int | None:
    """Index of the starter cell: the code cell defining ``function_name`` (not a solution)."""
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or "solution" in cell.get("metadata", {}).get("tags", []):
            continue
        try:
            tree = ast.parse(_source(cell))
        except SyntaxError:
            continue
        if any(isinstance(node, ast.FunctionDef) and node.name == function_name
               for node in tree.body):
            return i
    return None


def _params(cell: dict, function_name: str) -> tuple[str, ...]:
    fn = next(node for node in ast.parse(_source(cell)).body
              if isinstance(node, ast.FunctionDef) and node.name == function_name)
    a = fn.args
    return tuple(p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs])


@pytest.mark.parametrize("exercise", EXERCISES, ids=[e.id for e in EXERCISES])
def test_exercise_text_states_the_registry_signature(exercise):
    path = BOOK / f"{exercise.chapter}.ipynb"
    assert path.exists(), f"{exercise.id}: no notebook {path.name}"
    cells = _cells(path)
    start = _starter(cells, exercise.function_name)
    assert start is not None, f"{path.name}: no starter cell defines {exercise.function_name}"
    assert _params(cells[start], exercise.function_name) == tuple(exercise.params), (
        f"{path.name}: the starter's parameters differ from the registry's {exercise.params}")
    above = []
    for cell in reversed(cells[:start]):
        if cell["cell_type"] != "markdown":
            break
        above.append(_source(cell))
    text = "\n".join(above)
    assert f"`{exercise.signature}`" in text, (
        f"{path.name}: the text above the {exercise.id} starter does not quote the registry's "
        f"signature `{exercise.signature}`")
