"""Shared test set-up: no test ever writes to the learner's own progress record."""

from __future__ import annotations

import os
import tempfile


def pytest_configure(config) -> None:
    # Tests that look at the record set their own path (monkeypatch); every other check, in this
    # process or a subprocess it starts, goes to a throw-away record instead of ~/.course_lib.
    if not os.environ.get("COURSE_LIB_PROGRESS", "").startswith(tempfile.gettempdir()):
        folder = tempfile.mkdtemp(prefix="course_lib_test_progress_")
        os.environ["COURSE_LIB_PROGRESS"] = os.path.join(folder, "progress.sqlite3")
