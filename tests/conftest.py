"""Shared test set-up: no test ever writes to the learner's own progress record; one wheel of
this checkout per session for the install tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config) -> None:
    # Tests that look at the record set their own path (monkeypatch); every other check, in this
    # process or a subprocess it starts, goes to a throw-away record instead of ~/.course_lib.
    # Each xdist worker gets its own (they would otherwise inherit the controller's and share it).
    if (os.environ.get("PYTEST_XDIST_WORKER")
            or not os.environ.get("COURSE_LIB_PROGRESS", "").startswith(tempfile.gettempdir())):
        folder = tempfile.mkdtemp(prefix="course_lib_test_progress_")
        os.environ["COURSE_LIB_PROGRESS"] = os.path.join(folder, "progress.sqlite3")


@pytest.fixture(scope="session")
def course_lib_wheel(tmp_path_factory) -> Path:
    """A wheel of this checkout's ``course_lib``, built once per session (per xdist worker: the
    tests that use it share the xdist group ``course_lib_wheel``), offline, from a copy (pip
    writes build/ and *.egg-info next to the sources)."""
    src = tmp_path_factory.mktemp("wheel_src")
    shutil.copytree(ROOT / "course_lib", src / "course_lib",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-cache-dir", str(src), "-w", str(wheels)],
                   check=True, timeout=600)
    return next(wheels.glob("course_lib-*.whl"))


@pytest.fixture
def one_thread():
    """Tiny tensors, checked in-process: one torch thread is faster, and two test workers share
    two cores. The number of threads is restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
