"""Views of the progress record: the per-chapter table (terminal and notebook), JSON, CSV."""

from __future__ import annotations

import hashlib
import html
import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import _progress
from ._registry import registry


def source_sha256(fn: Callable[..., Any]) -> str | None:
    """SHA-256 of the submitted function's source (or of its bytecode when there is no source)."""
    try:
        text = textwrap.dedent(inspect.getsource(fn))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    except Exception:
        pass
    try:
        code = fn.__code__  # type: ignore[attr-defined]
        return hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()
    except Exception:
        return None


class ProgressTable(list):
    """Per-chapter rows ``{"chapter", "done", "total", "attempts", "last_mistake"}`` that display
    as a table (text in a terminal, HTML in a notebook)."""

    def __init__(self, rows: list[dict[str, Any]], path: Path) -> None:
        super().__init__(rows)
        self.path = path

    @property
    def done(self) -> int:
        return sum(r["done"] for r in self)

    @property
    def total(self) -> int:
        return sum(r["total"] for r in self)

    def __str__(self) -> str:
        head = ("chapter", "done", "attempts", "last mistake")
        body = [(r["chapter"], f"{r['done']}/{r['total']}", str(r["attempts"]),
                 r["last_mistake"] or "-") for r in self]
        widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                 for row in [head, *body]]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.append(f"\n{self.done} of {self.total} exercises passed. Record: {self.path}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(r['chapter'])}</td><td>{r['done']}/{r['total']}</td>"
            f"<td>{r['attempts']}</td><td>{html.escape(r['last_mistake'] or '–')}</td></tr>"
            for r in self)
        return ("<table class=\"course-lib-progress\"><thead><tr><th>chapter</th><th>done</th>"
                f"<th>attempts</th><th>last mistake</th></tr></thead><tbody>{rows}</tbody>"
                f"</table><p>{self.done} of {self.total} exercises passed. Record: "
                f"<code>{html.escape(str(self.path))}</code></p>")


def progress(path: Path | None = None) -> ProgressTable:
    """Your progress per chapter (done/total, attempts, last mistake); shows as a table."""
    path = Path(path) if path is not None else _progress.progress_path()
    summary = _progress.load_progress(path)["exercises"]
    return ProgressTable(_progress.chapter_table(_exercise_rows(), summary), path)


def _exercise_rows() -> list[dict[str, str]]:
    """``{"id", "chapter", "title", "signature"}`` of every exercise, in chapter order."""
    return [{"id": e.id, "chapter": e.chapter, "title": e.title, "signature": e.signature}
            for e in registry().values()]


def progress_json(path: Path | None = None) -> dict[str, Any]:
    """``{"exercises": {id: {"attempts", "passed", "first_passed_at", "last_status",
    "last_mistake"}}}`` for every exercise (never attempted: 0 attempts)."""
    summary = _progress.load_progress(path)["exercises"]
    out: dict[str, Any] = {}
    for ex in _exercise_rows():
        s = summary.get(ex["id"], {})
        out[ex["id"]] = {"attempts": s.get("attempts", 0), "passed": bool(s.get("passed")),
                         "first_passed_at": s.get("first_passed_at"),
                         "last_status": s.get("last_status"),
                         "last_mistake": s.get("last_mistake")}
    return {"exercises": out}
