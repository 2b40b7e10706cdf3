"""`make unit` relies on `--dist loadgroup`: tests marked with one `xdist_group` run on one worker,
so a session-scoped fixture (the graded attack class, the course_lib wheel) is built once per run.

pytest 9.2 keeps node ids in `Node._id`, and pytest-xdist 3.8 groups by rewriting `item._nodeid`:
with that pair the mark silently does nothing and each worker builds the fixture again
(requirements.txt pins pytest below 9.2). This test runs a small suite the way `make unit` does
and asserts the grouping happens.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SUITE = '''
import json, os, pytest

def _note(name):
    with open(os.environ["GROUP_LOG"], "a") as f:
        f.write(json.dumps([name, os.environ.get("PYTEST_XDIST_WORKER", "main")]) + "\\n")

@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    _note("grouped")

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    _note("free")
'''


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    log = tmp_path / "log.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "xdist",
         "-p", "no:cacheprovider", str(tmp_path / "test_suite.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        # xdist alone: the other installed plugins (nbval, hypothesis, anyio) play no part in
        # grouping, and loading them in the controller and both workers cost 12 of 14 CPU-s
        env={**_env(), "GROUP_LOG": str(log), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    grouped = {w for name, w in rows if name == "grouped"}
    assert len(rows) == 12
    assert len(grouped) == 1 and grouped != {"main"}, f"grouped tests ran on {sorted(grouped)}"


def _env() -> dict[str, str]:
    import os
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
