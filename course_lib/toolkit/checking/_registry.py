"""Discovery: every public module of this package is imported and its Exercise objects collected."""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from pathlib import Path

from ._spec import Exercise

_CACHE: dict[str, Exercise] | None = None


def registry(refresh: bool = False) -> dict[str, Exercise]:
    """``{id: Exercise}`` for all exercises, ordered by chapter then declaration order."""
    global _CACHE
    if _CACHE is not None and not refresh:
        return _CACHE
    found: list[Exercise] = []
    pkg_dir = Path(__file__).resolve().parent
    for info in sorted(pkgutil.iter_modules([str(pkg_dir)]), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{__package__}.{info.name}")
        except Exception as e:  # one broken module must not hide the others
            warnings.warn(f"course_lib.exercises: could not import {info.name}: {e!r}",
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
