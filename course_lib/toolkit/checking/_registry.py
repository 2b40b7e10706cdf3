"""Discovery: every ``course_lib/chapters/<chapter>/exercises.py`` is imported and its Exercise
objects collected."""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from pathlib import Path

from ._spec import Exercise

_CACHE: dict[str, Exercise] | None = None
CHAPTERS_PACKAGE = "course_lib.chapters"


def chapter_modules() -> list[str]:
    """``course_lib.chapters.<chapter>.exercises`` for every chapter package that has one."""
    root = Path(__file__).resolve().parents[2] / "chapters"
    return [f"{CHAPTERS_PACKAGE}.{info.name}.exercises"
            for info in sorted(pkgutil.iter_modules([str(root)]), key=lambda i: i.name)
            if info.ispkg and (root / info.name / "exercises.py").is_file()]


def registry(refresh: bool = False) -> dict[str, Exercise]:
    """``{id: Exercise}`` for all exercises, ordered by chapter then declaration order."""
    global _CACHE
    if _CACHE is not None and not refresh:
        return _CACHE
    found: list[Exercise] = []
    for name in chapter_modules():
        try:
            module = importlib.import_module(name)
        except Exception as e:  # one broken module must not hide the others
            warnings.warn(f"course_lib.exercises: could not import {name}: {e!r}",
                          stacklevel=2)
            continue
        found.extend(v for v in vars(module).values() if isinstance(v, Exercise))
    table: dict[str, Exercise] = {}
    for ex in sorted(found, key=lambda e: (e.chapter, e.order)):
        if ex.id in table and table[ex.id] is not ex:
            warnings.warn(f"course_lib.exercises: duplicate exercise id {ex.id!r}", stacklevel=2)
            continue
        table[ex.id] = ex
    _CACHE = table
    return table
