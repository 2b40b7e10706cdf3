"""The package's three layers, read from the source with ``ast`` (nothing is imported):

- ``course_lib/attention`` (the core) imports only the standard library, torch and itself;
- ``course_lib/toolkit`` never imports a chapter;
- ``course_lib/chapters/<chapter>`` imports the core, the toolkit and itself, never another chapter;

and every chapter package is named like its notebook, which ``_toc.yml`` lists.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import yaml

from course_lib.toolkit.checking._registry import registry

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "course_lib"
CHAPTERS = sorted(p for p in (PKG / "chapters").iterdir() if (p / "__init__.py").is_file())


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]  # the package a module (or __init__) lives in
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            names.add(mod)
            names.update(f"{mod}.{a.name}" for a in node.names)  # `from pkg import module`
    return names


def _top(name: str) -> str:
    return name.split(".")[0]


def _files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


@pytest.mark.parametrize("path", _files(PKG / "attention"), ids=lambda p: p.name)
def test_core_imports_only_stdlib_torch_and_itself(path):
    for name in imported_modules(path):
        ok = (_top(name) in sys.stdlib_module_names or _top(name) in ("torch", "__future__")
              or name.startswith("course_lib.attention"))
        assert ok, f"{path.relative_to(ROOT)} imports {name}"


@pytest.mark.parametrize("path", _files(PKG / "toolkit"), ids=lambda p: str(p.relative_to(PKG)))
def test_toolkit_never_imports_a_chapter(path):
    bad = {n for n in imported_modules(path) if n.startswith("course_lib.chapters")}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_chapter_imports_core_toolkit_and_itself_only(chapter):
    own = f"course_lib.chapters.{chapter.name}"
    for path in _files(chapter):
        for name in imported_modules(path):
            if _top(name) != "course_lib":
                continue
            ok = name.startswith(("course_lib.attention", "course_lib.toolkit", own)) \
                or name in ("course_lib", "course_lib.chapters")
            assert ok, f"{path.relative_to(ROOT)} imports {name}"


def test_import_reader_resolves_relative_imports():
    path = PKG / "chapters" / "ch07_complexity" / "explorer.py"
    names = imported_modules(path)
    assert "course_lib.chapters.ch07_complexity.helpers" in names
    assert "course_lib.toolkit.explorer" in names


def test_no_chapter_code_at_the_top_level():
    top = sorted(p.name for p in PKG.iterdir() if not p.name.startswith((".", "__pycache__")))
    assert top == ["__init__.py", "__main__.py", "attention", "chapters", "toolkit"]


def _toc_chapters() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    return [Path(f).name for f in files if (ROOT / f"{f}.ipynb").is_file()]


def test_each_chapter_package_matches_a_notebook_in_the_toc():
    toc = _toc_chapters()
    assert [c.name for c in CHAPTERS] == [f"ch{name}" for name in toc]
    for chapter in CHAPTERS:
        for part in ("helpers.py", "plots.py", "explorer.py", "exercises.py"):
            assert (chapter / part).is_file() or chapter.name == "ch12_capstone" \
                and part == "helpers.py", f"{chapter.name} has no {part}"


def test_each_exercise_belongs_to_a_toc_chapter_and_lives_in_its_package():
    toc = set(_toc_chapters())
    for ex in registry().values():
        assert ex.chapter in toc, f"{ex.id}: chapter {ex.chapter!r} is not in _toc.yml"
        module = ex.solution.__module__
        assert module == f"course_lib.chapters.ch{ex.chapter}.exercises", (ex.id, module)
