"""The learner's progress record: one SQLite row per attempt (``~/.course_lib/progress.sqlite3``).

``COURSE_LIB_PROGRESS`` overrides the path (the book build and the tests point it at a temporary
file). The record is the standard library's ``sqlite3`` in WAL mode:

* **nothing is lost**: each attempt is one ``INSERT`` in its own transaction, so kernels checking
  at the same time never overwrite each other (SQLite serialises the writers; ``busy_timeout``
  waits for the lock instead of failing);
* **a kill never corrupts it**: a transaction is either in the file or not; a process killed
  mid-write leaves the previous record, which keeps counting;
* **nothing is thrown away**: a file at the path that is not a valid record (damaged, truncated,
  some other file) is renamed to ``<name>.damaged-<UTC time>`` (never overwritten) with a
  :class:`ProgressWarning`, and a new record is started;
* **the old JSON record is imported once**: a ``progress.json`` of earlier versions beside the
  record (or at the path itself, then moved aside) is read into the new record when that is
  created, and the JSON file is kept. Its per-exercise totals become rows with status
  ``"imported"`` (count only), plus the first pass and the last outcome it knew.

Writing never raises (:func:`record` returns an error text instead): a read-only home or a full
disk must not break ``check``.

Rows: ``exercise, at (UTC ISO-8601), status, passed, mistake, duration_s, seed, source_sha256,
origin`` (``"check"``, or ``"progress.json"`` for imported rows).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sqlite3
import warnings
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ENV_VAR = "COURSE_LIB_PROGRESS"
DEFAULT_NAME = "progress.sqlite3"
LEGACY_NAME = "progress.json"
APPLICATION_ID = 0x434C5052   # "CLPR": marks a file as a course_lib progress record
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0
_SQLITE_HEADER = b"SQLite format 3\x00"

COLUMNS = ("exercise", "at", "status", "passed", "mistake", "duration_s", "seed",
           "source_sha256", "origin")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    exercise TEXT NOT NULL,
    at TEXT NOT NULL,
    status TEXT NOT NULL,
    passed INTEGER NOT NULL,
    mistake TEXT,
    duration_s REAL,
    seed INTEGER,
    source_sha256 TEXT,
    origin TEXT NOT NULL DEFAULT 'check'
);
CREATE INDEX IF NOT EXISTS attempts_exercise ON attempts (exercise, id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class ProgressWarning(UserWarning):
    """Something about the progress record the learner should know (e.g. a damaged file kept)."""


class InvalidRecord(Exception):
    """The file at the path is not a course_lib progress record."""


def progress_path() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".course_lib" / DEFAULT_NAME


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


# --------------------------------------------------------------------------- opening


def _raw_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    return conn


def _is_damage(e: sqlite3.DatabaseError) -> bool:
    """SQLITE_CORRUPT / SQLITE_NOTADB, not a lock, a read-only file or a full disk."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (11, 26)
    return not isinstance(e, sqlite3.OperationalError)


def _validate(conn: sqlite3.Connection, path: Path) -> None:
    """Raise :class:`InvalidRecord` unless ``conn`` is an intact, initialised course_lib record
    (other errors, such as a lock held too long or a read-only file, propagate)."""
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id != APPLICATION_ID:
            raise InvalidRecord(f"{path} is an SQLite database but not a course_lib record")
        verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            raise InvalidRecord(f"{path} is damaged: {verdict}")
    except sqlite3.DatabaseError as e:
        if not _is_damage(e):
            raise
        raise InvalidRecord(f"{path} is damaged: {e}") from None


def _looks_valid(path: Path) -> bool:
    """Cheap test of the file itself (no connection): absent/empty, or an SQLite header."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return True
    return head in (b"", _SQLITE_HEADER)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on the record's folder, held while a damaged file is moved aside or a
    new record is initialised (so two kernels never both repair it); leaves no file behind."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: SQLite's own locking only
        yield
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # releases the lock


def _aside_name(path: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    candidate = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while candidate.exists() or candidate.with_name(candidate.name + "-wal").exists():
        n += 1
        candidate = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    return candidate


def _move_aside(path: Path, reason: str) -> Path:
    aside = _aside_name(path)
    os.rename(path, aside)                       # never copied over, never deleted
    for suffix in ("-wal", "-journal"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.rename(side, aside.with_name(aside.name + suffix))
    with contextlib.suppress(OSError):
        path.with_name(path.name + "-shm").unlink()  # an index of the -wal, rebuilt on open
    warnings.warn(
        f"The progress record {path} could not be read ({reason}). It was kept as {aside}, and a "
        "new record was started.", ProgressWarning, stacklevel=4)
    return aside


def _read_legacy(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except Exception:
        return None
    if isinstance(data, dict) and isinstance(data.get("exercises"), dict):
        return data
    return None


def _legacy_rows(data: dict[str, Any]) -> list[tuple]:
    """Rows that reproduce a JSON record's per-exercise totals (attempts, first pass, last)."""
    rows: list[tuple] = []
    now = now_iso()
    for exercise, entry in data["exercises"].items():
        if not isinstance(entry, dict):
            continue
        attempts = max(int(entry.get("attempts") or 0), 1)
        last_at = str(entry.get("last_at") or now)
        tail: list[tuple] = []
        if entry.get("passed") and (entry.get("last_status") != "passed"
                                    or entry.get("first_passed_at") != last_at):
            tail.append((str(exercise), str(entry.get("first_passed_at") or last_at), "passed",
                         1, None, None, None, None, LEGACY_NAME))
        status = str(entry.get("last_status") or "imported")
        tail.append((str(exercise), last_at, status, int(status == "passed"),
                     entry.get("last_mistake"), None, None, None, LEGACY_NAME))
        filler = [(str(exercise), last_at, "imported", 0, None, None, None, None, LEGACY_NAME)
                  for _ in range(max(attempts - len(tail), 0))]
        rows += filler + tail
    return rows


def _import_legacy(conn: sqlite3.Connection, legacy: Path) -> int:
    """Import ``legacy`` (a progress.json) once; the file itself is left in place."""
    data = _read_legacy(legacy)
    if data is None:
        return 0
    key = f"imported:{legacy.resolve()}"
    if conn.execute("SELECT 1 FROM meta WHERE key = ?", (key,)).fetchone():
        return 0
    rows = _legacy_rows(data)
    conn.executemany(f"INSERT INTO attempts ({', '.join(COLUMNS)}) VALUES "
                     f"({', '.join('?' * len(COLUMNS))})", rows)
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, now_iso()))
    return len(rows)


def _initialise(path: Path, legacy: list[Path]) -> None:
    """Create the schema in a new (empty) file and import legacy JSON records, atomically."""
    conn = _raw_connect(path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('created', ?)",
                             (now_iso(),))
                for p in legacy:
                    _import_legacy(conn, p)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()


def _uninitialised(conn: sqlite3.Connection) -> bool:
    """An SQLite file with no tables at all (e.g. a kernel killed while creating the record)."""
    try:
        return conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    except sqlite3.DatabaseError:
        return False


def connect(path: Path | None = None) -> sqlite3.Connection:
    """An open, valid record at ``path`` (created if missing; a damaged file moved aside)."""
    path = Path(path) if path is not None else progress_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if _looks_valid(path) and path.exists() and path.stat().st_size > 0:
        conn = _raw_connect(path)
        try:
            _validate(conn, path)
            return conn
        except InvalidRecord:
            conn.close()
    # Missing, empty, damaged or foreign: repair under the lock, re-checking first (another
    # kernel may have repaired it while we waited).
    with _file_lock(path):
        legacy = []
        sibling = path.with_name(LEGACY_NAME)
        if sibling != path and sibling.is_file():
            legacy.append(sibling)
        if path.exists() and path.stat().st_size > 0:
            reason = None
            if not _looks_valid(path):
                reason = "not an SQLite file"
            else:
                probe = _raw_connect(path)
                try:
                    _validate(probe, path)
                except InvalidRecord as e:
                    if not _uninitialised(probe):   # an empty SQLite file is simply initialised
                        reason = str(e)
                finally:
                    probe.close()
            if reason is not None:
                aside = _move_aside(path, reason)
                if _read_legacy(aside) is not None:     # COURSE_LIB_PROGRESS was a JSON record
                    legacy.append(aside)
        _initialise(path, legacy)
    conn = _raw_connect(path)
    _validate(conn, path)
    return conn


# --------------------------------------------------------------------------- writing


def record(exercise: str, passed: bool, status: str, mistake: str | None, *,
           duration_s: float | None = None, seed: int | None = None,
           source_sha256: str | None = None, path: Path | None = None) -> str | None:
    """Append one attempt; returns an error text instead of raising."""
    try:
        conn = connect(path)
        try:
            conn.execute(
                f"INSERT INTO attempts ({', '.join(COLUMNS)}) VALUES "
                f"({', '.join('?' * len(COLUMNS))})",
                (str(exercise), now_iso(), str(status), int(bool(passed)), mistake,
                 None if duration_s is None else float(duration_s),
                 None if seed is None else int(seed), source_sha256, "check"))
        finally:
            conn.close()
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def reset(path: Path | None = None) -> int:
    """Forget every attempt (the record and its import marks stay); returns rows removed."""
    conn = connect(path)
    try:
        return conn.execute("DELETE FROM attempts").rowcount
    finally:
        conn.close()


# --------------------------------------------------------------------------- reading


def _read_connection(path: Path) -> sqlite3.Connection | None:
    """A connection for reading, or None if there is no record yet (nothing is created, unless
    an old progress.json is there to import)."""
    if (not path.exists() or path.stat().st_size == 0) \
            and not path.with_name(LEGACY_NAME).is_file():
        return None
    return connect(path)


def attempts(path: Path | None = None) -> list[dict[str, Any]]:
    """Every recorded attempt, oldest first, as dicts with :data:`COLUMNS`."""
    conn = _read_connection(Path(path) if path is not None else progress_path())
    if conn is None:
        return []
    try:
        cur = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM attempts ORDER BY id")
        return [dict(zip(COLUMNS, row, strict=True)) for row in cur]
    finally:
        conn.close()


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per exercise: attempts, passed, first_passed_at, last_status, last_mistake, last_at."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        e = out.setdefault(r["exercise"], {"attempts": 0, "passed": False,
                                           "first_passed_at": None, "last_status": None,
                                           "last_mistake": None, "last_at": None})
        e["attempts"] += 1
        if r["passed"] and not e["passed"]:
            e["passed"] = True
            e["first_passed_at"] = r["at"]
        e["last_status"], e["last_mistake"], e["last_at"] = r["status"], r["mistake"], r["at"]
    return out


def load_progress(path: Path | None = None) -> dict[str, Any]:
    """``{"exercises": {id: {"attempts", "passed", "first_passed_at", "last_status",
    "last_mistake", "last_at"}}}``: every exercise with at least one attempt."""
    return {"exercises": summarise(attempts(path))}


def export_csv(path: Path | None = None) -> str:
    """Every attempt as CSV text (a header row, then one row per attempt), for an instructor."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in attempts(path):
        writer.writerow(["" if r[c] is None else r[c] for c in COLUMNS])
    return buf.getvalue()


def chapter_table(exercises: list[dict[str, Any]], progress: dict[str, dict[str, Any]]
                  ) -> list[dict[str, Any]]:
    """Per chapter (in order): ``{"chapter", "done", "total", "attempts", "last_mistake"}``;
    ``last_mistake`` is the most recent mistake among its not-yet-passed exercises."""
    table: dict[str, dict[str, Any]] = {}
    latest: dict[str, str] = {}
    for ex in exercises:
        row = table.setdefault(ex["chapter"], {"chapter": ex["chapter"], "done": 0, "total": 0,
                                               "attempts": 0, "last_mistake": None})
        row["total"] += 1
        p = progress.get(ex["id"])
        if p is None:
            continue
        row["attempts"] += p["attempts"]
        if p["passed"]:
            row["done"] += 1
        elif p["last_mistake"] and (p["last_at"] or "") >= latest.get(ex["chapter"], ""):
            latest[ex["chapter"]] = p["last_at"] or ""
            row["last_mistake"] = f"{ex['id']}: {p['last_mistake']}"
    return list(table.values())
