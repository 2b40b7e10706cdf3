"""tools/stage_timer.py (make test's per-stage timings) and tools/changed_notebooks.py (make
check's nbval selection)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import changed_notebooks  # noqa: E402
import stage_timer  # noqa: E402


def test_stops_at_the_first_failure_and_prints_every_stage(tmp_path):
    out = tmp_path / "t.txt"
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "stage_timer.py"),
                          "--summary-file", str(out), "first=true", "second=exit 3",
                          "third=touch ran"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 3
    assert not (tmp_path / "ran").exists()
    table = out.read_text().splitlines()
    assert table[0].startswith("== stage timings (m:ss; busy: ")
    first, second = table[1].split(), table[2].split()
    assert first[:3] == ["first", "0:00", "busy"] and first[-1] == "ok"
    assert second[:3] == ["second", "0:00", "busy"] and second[-3:] == ["FAILED", "(exit", "3)"]
    for row in (first, second):    # this machine's /proc/stat, or "-" without one
        assert row[4] == "steal" and all(x == "-" or 0 <= int(x.rstrip("%")) <= 100
                                         for x in (row[3], row[5])), row
    assert table[3].split() == ["third", "-", "not", "run"]
    assert table[4].split()[-3:] == ["FAILED", "at", "second"]
    assert "== stage timings" in res.stdout  # printed, not only written


def test_busy_and_steal_are_the_machines_tick_deltas_over_each_stage(tmp_path):
    """busy = (user + nice + system + irq + softirq + steal) / all ticks between the readings
    before and after a stage; steal = steal / all; a reading that fails leaves "-"."""
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 20 800 10 1 2 7 3 0\ncpu0 50 2 10 400 5 0 1 3 1 0\n")
    assert stage_timer.cpu_ticks(str(stat)) == (135, 7, 945)
    stat.write_text("cpu  garbage\n")
    assert stage_timer.cpu_ticks(str(stat)) is None
    assert stage_timer.cpu_ticks(str(tmp_path / "missing")) is None

    readings = iter([(100, 0, 1000), (200, 10, 1200),       # a: 100 of 200 busy, 10 stolen
                     (200, 10, 1200), (590, 30, 1600),      # b: 390 of 400 busy, 20 stolen
                     None, (700, 30, 1700)])                # c: no reading before it
    stages = stage_timer.parse(["a=true", "b=true", "c=true"])
    assert stage_timer.run(stages, runner=lambda argv: 0, ticks=lambda: next(readings)) == 0
    assert [(s.busy, s.steal) for s in stages] == [(0.5, 0.05), (0.975, 0.05), (None, None)]
    rows = [r.split() for r in stage_timer.summary(stages, 3).splitlines()[2:5]]
    assert [r[2:6] for r in rows] == [["busy", "50%", "steal", "5%"],
                                      ["busy", "98%", "steal", "5%"],
                                      ["busy", "-", "steal", "-"]]


def test_all_stages_pass():
    stages = stage_timer.parse(["a=true", "b name=exit 0"])
    assert stage_timer.run(stages) == 0
    assert [s.status for s in stages] == ["ok", "ok"]
    assert stage_timer.summary(stages, 61).splitlines()[-1].split() == ["total", "1:01", "ok"]


def test_malformed_stage_is_refused():
    with pytest.raises(SystemExit, match="NAME=COMMAND"):
        stage_timer.parse(["no-equals-sign"])


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                   check=True, capture_output=True)


def test_changed_notebooks_since_main(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "book").mkdir(parents=True)
    for name in ("01_a.ipynb", "02_b.ipynb", "03_c.ipynb"):
        (repo / "book" / name).write_text("{}")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    monkeypatch.setattr(changed_notebooks, "ROOT", repo)
    assert changed_notebooks.changed()[0] == []

    git(repo, "checkout", "-qb", "topic")
    (repo / "book" / "01_a.ipynb").write_text('{"a": 1}')
    git(repo, "commit", "-qam", "edit 01")               # committed on the branch
    (repo / "book" / "02_b.ipynb").write_text('{"b": 1}')  # edited, not committed
    (repo / "book" / "04_d.ipynb").write_text("{}")        # new, untracked
    (repo / "book" / "03_c.ipynb").unlink()                # deleted: nothing to run
    (repo / "notes.ipynb").write_text("{}")                # not a chapter
    notebooks, note = changed_notebooks.changed()
    assert notebooks == ["01_a.ipynb", "02_b.ipynb", "04_d.ipynb"]
    assert note.startswith("changed since ")

    assert changed_notebooks.changed("no-such-branch")[0] == []
