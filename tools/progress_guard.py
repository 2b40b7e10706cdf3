"""Prove that a build or test run left the learner's own progress record alone.

    python tools/progress_guard.py snapshot STATE.json   # before `make test`
    python tools/progress_guard.py verify STATE.json     # after: exit 1 if anything changed

The learner's record lives in ``~/.course_lib/`` unless ``COURSE_LIB_PROGRESS`` moves it; builds
and tests point ``COURSE_LIB_PROGRESS`` at a sandbox, so nothing under the home directory may be
created, changed or removed while they run. The guard compares a digest of every file there.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

LEARNER_DIR = Path.home() / ".course_lib"


def digest(folder: Path = LEARNER_DIR) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``folder`` (empty if it does not exist)."""
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("snapshot", "verify"):
        print(__doc__, file=sys.stderr)
        return 2
    action, state = argv[0], Path(argv[1])
    now = digest()
    if action == "snapshot":
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps(now, indent=1), encoding="utf-8")
        print(f"progress guard: {len(now)} file(s) under {LEARNER_DIR} recorded")
        return 0
    before = json.loads(state.read_text(encoding="utf-8"))
    changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    if changed:
        print(f"progress guard: the run changed the learner's record in {LEARNER_DIR}: "
              + ", ".join(changed), file=sys.stderr)
        return 1
    print(f"progress guard: {LEARNER_DIR} unchanged ({len(now)} file(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
