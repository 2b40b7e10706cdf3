"""Results cached by what was graded: re-grading after one late submission re-runs one notebook.

A row's key is the SHA-256 of the notebook's bytes and of everything else its verdicts depend on
(the course_lib version, the grading seed, the limits and the exercise ids): the same notebook
graded the same way is never run twice. SQLite (``sqlite3``), one table, one JSON value per key.
A cache file that cannot be read is set aside (``*.damaged-<time>``) and grading starts afresh.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any


def key(notebook_bytes: bytes, settings: dict[str, Any]) -> str:
    h = hashlib.sha256(notebook_bytes)
    h.update(json.dumps(settings, sort_keys=True).encode())
    return h.hexdigest()


class ResultCache:
    """``get(key)`` / ``put(key, value)`` over an SQLite file (``None``: no cache)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._db: sqlite3.Connection | None = None
        self.errors: list[str] = []       # what went wrong reading or writing (never raised)
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as e:
            self.errors.append(f"set aside {self.path}: {e}")
            self.path.rename(self.path.with_name(
                f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"))
            self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        assert self.path is not None
        db = sqlite3.connect(self.path, timeout=30)
        db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("SELECT COUNT(*) FROM results").fetchone()
        return db

    def get(self, k: str) -> Any | None:
        if self._db is None:
            return None
        try:
            row = self._db.execute("SELECT value FROM results WHERE key = ?", (k,)).fetchone()
            return json.loads(row[0]) if row else None
        except (sqlite3.DatabaseError, ValueError) as e:
            self.errors.append(f"get: {type(e).__name__}: {e}")
            return None

    def put(self, k: str, value: Any) -> None:
        if self._db is None:
            return
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO results VALUES (?, ?)",
                             (k, json.dumps(value, sort_keys=True)))

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
