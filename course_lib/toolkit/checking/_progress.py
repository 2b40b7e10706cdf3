"""A local JSON record of check outcomes (``~/.course_lib/progress.json``).

``COURSE_LIB_PROGRESS`` overrides the path. Writing never raises: a read-only home must not
break a check.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ENV_VAR = "COURSE_LIB_PROGRESS"


def progress_path() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".course_lib" / "progress.json"


def load_progress(path: Path | None = None) -> dict[str, Any]:
    """``{"exercises": {id: {"attempts", "passed", "last_status", "last_mistake", ...}}}``."""
    path = path or progress_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("exercises"), dict):
            return data
    except Exception:
        pass
    return {"version": 1, "exercises": {}}


def record(exercise: str, passed: bool, status: str, mistake: str | None) -> str | None:
    """Add one outcome; returns an error text instead of raising."""
    try:
        path = progress_path()
        data = load_progress(path)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        entry = data["exercises"].setdefault(exercise, {"attempts": 0, "passed": False})
        entry["attempts"] = int(entry.get("attempts", 0)) + 1
        entry["last_status"] = status
        entry["last_mistake"] = mistake
        entry["last_at"] = now
        if passed and not entry.get("passed"):
            entry["first_passed_at"] = now
        entry["passed"] = bool(entry.get("passed")) or passed
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".progress-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
        os.replace(tmp, path)
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"
