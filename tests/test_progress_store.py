"""The progress record (SQLite): nothing lost, nothing corrupted, nothing thrown away."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import warnings

import pytest

from course_lib import exercises
from course_lib.__main__ import main
from course_lib.toolkit.checking import _progress
from course_lib.toolkit.checking._registry import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _course_code_allowed(monkeypatch):
    """These tests record the course's own solutions and mistakes, which live in course_lib."""
    for ex in exercises.registry().values():
        monkeypatch.setattr(ex, "allowed_course_calls", ("course_lib",))


@pytest.fixture()
def record_path(tmp_path, monkeypatch):
    path = tmp_path / "record" / "progress.sqlite3"
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(path))
    return path


def _child_env(path):
    env = {**os.environ, "COURSE_LIB_PROGRESS": str(path)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    return env


def _solution(exercise_id):
    return exercises.get_exercise(exercise_id).solution


def _mistake(exercise_id):
    return exercises.get_exercise(exercise_id).mistakes[0].fn


def test_one_row_per_attempt_with_every_field(record_path):
    exercises.check("causal_mask", _mistake("causal_mask"), seed=7)
    exercises.check("causal_mask", _solution("causal_mask"))
    rows = _progress.attempts()
    assert [r["status"] for r in rows] == ["failed", "passed"]
    first, second = rows
    assert first["exercise"] == "causal_mask" and first["mistake"] == "inverted"
    assert first["seed"] == 7 and isinstance(second["seed"], int)
    assert first["duration_s"] >= 0 and first["at"].endswith("+00:00")
    assert len(first["source_sha256"]) == 64 and first["source_sha256"] != second["source_sha256"]
    assert first["passed"] == 0 and second["passed"] == 1 and first["origin"] == "check"
    conn = sqlite3.connect(record_path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_untouched_starters_unknown_ids_and_record_false_are_not_recorded(record_path):
    def softmax(x, dim=-1):
        ...

    assert exercises.check("softmax", softmax).status == "not_attempted"
    assert exercises.check("nope", softmax).mistake == "unknown_exercise"
    result = exercises.check("softmax", _solution("softmax"), record=False)
    assert result.passed and result.progress_error is None
    assert _progress.attempts() == []
    assert not record_path.exists()          # reading an absent record creates nothing


WRITER = textwrap.dedent('''
    import sys
    from course_lib import exercises
    ex = exercises.get_exercise("causal_mask")
    ex.allowed_course_calls = ("course_lib",)   # the course's own solution and mistake, below
    for i in range(int(sys.argv[1])):
        fn = ex.solution if i % 2 else ex.mistakes[0].fn
        r = exercises.check("causal_mask", fn)
        assert r.progress_error is None, r.progress_error
''')


@pytest.mark.slow
def test_concurrent_writers_lose_nothing(record_path, tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    procs = []
    try:
        for _ in range(4):
            procs.append(subprocess.Popen([sys.executable, str(script), "25"],
                                          env=_child_env(record_path), stderr=subprocess.PIPE,
                                          text=True))
        errors = [p.communicate(timeout=300)[1] for p in procs]
    finally:            # a writer that hangs (or a failed start) leaves no process behind
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert [p.returncode for p in procs] == [0] * 4, errors
    rows = _progress.attempts()
    assert len(rows) == 100
    assert sum(r["passed"] for r in rows) == 4 * 12      # odd i of range(25) pass
    summary = exercises.load_progress()["exercises"]["causal_mask"]
    assert summary["attempts"] == 100 and summary["passed"] is True


KILLED = textwrap.dedent('''
    import os, signal, sys
    from course_lib.toolkit.checking import _progress
    conn = _progress.connect()
    conn.execute("BEGIN IMMEDIATE")
    for i in range(500):
        conn.execute("INSERT INTO attempts (exercise, at, status, passed) "
                     "VALUES ('softmax', 'now', 'passed', 1)")
    sys.stdout.write("inserted\\n"); sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)     # mid-write: the transaction never commits
''')


def test_killed_mid_write_leaves_a_readable_record_that_keeps_counting(record_path, tmp_path):
    exercises.check("causal_mask", _mistake("causal_mask"))
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    proc = subprocess.run([sys.executable, str(script)], env=_child_env(record_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9 and "inserted" in proc.stdout, proc.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # not treated as damaged
        assert len(_progress.attempts()) == 1
        exercises.check("causal_mask", _solution("causal_mask"))
    summary = exercises.load_progress()["exercises"]["causal_mask"]
    assert summary["attempts"] == 2 and summary["passed"] is True
    conn = sqlite3.connect(record_path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "foreign_sqlite"])
def test_a_damaged_record_is_kept_aside_never_overwritten(record_path, damage):
    for _ in range(3):
        exercises.check("causal_mask", _mistake("causal_mask"))
    original = record_path.read_bytes()
    if damage == "truncated":
        record_path.write_bytes(original[: len(original) // 3])
    elif damage == "garbage":
        record_path.write_bytes(b"this is not a database" * 100)
    else:
        record_path.unlink()
        conn = sqlite3.connect(record_path)
        conn.execute("CREATE TABLE other (x)")
        conn.commit()
        conn.close()
    damaged = record_path.read_bytes()
    with pytest.warns(_progress.ProgressWarning, match="kept as"):
        result = exercises.check("causal_mask", _solution("causal_mask"))
    assert result.passed and result.progress_error is None
    kept = sorted(record_path.parent.glob("progress.sqlite3.damaged-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == damaged
    assert exercises.load_progress()["exercises"]["causal_mask"]["attempts"] == 1
    # a second damage never overwrites the first file kept aside
    record_path.write_bytes(b"garbage again")
    with pytest.warns(_progress.ProgressWarning):
        exercises.check("causal_mask", _solution("causal_mask"))
    kept = sorted(record_path.parent.glob("progress.sqlite3.damaged-*"))
    assert len(kept) == 2 and damaged in [k.read_bytes() for k in kept]


def test_an_unwritable_location_still_lets_check_answer(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(blocker / "sub" / "progress.sqlite3"))
    result = exercises.check("causal_mask", _solution("causal_mask"))
    assert result.passed and result.progress_error
    if os.geteuid() != 0:   # root ignores permissions
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        monkeypatch.setenv("COURSE_LIB_PROGRESS", str(ro / "progress.sqlite3"))
        result = exercises.check("causal_mask", _mistake("causal_mask"))
        assert result.mistake == "inverted" and result.progress_error
    # and the CLI still answers with the right exit status
    sol = tmp_path / "sol.py"
    sol.write_text("import torch\ndef causal_mask(n):\n"
                   "    return torch.ones(n, n, dtype=torch.bool).tril()\n")
    assert main(["check", "causal_mask", str(sol)]) == 0


LEGACY = {"version": 1, "exercises": {
    "softmax": {"attempts": 4, "passed": True, "last_status": "failed",
                "last_mistake": "not_stable", "first_passed_at": "2026-01-02T00:00:00+00:00",
                "last_at": "2026-01-03T00:00:00+00:00"},
    "causal_mask": {"attempts": 2, "passed": False, "last_status": "failed",
                    "last_mistake": "inverted", "last_at": "2026-01-01T00:00:00+00:00"}}}


def test_progress_json_is_imported_once_and_kept(record_path):
    record_path.parent.mkdir(parents=True)
    legacy = record_path.parent / "progress.json"
    legacy.write_text(json.dumps(LEGACY))
    data = exercises.load_progress()["exercises"]
    assert data["softmax"]["attempts"] == 4 and data["softmax"]["passed"] is True
    assert data["softmax"]["first_passed_at"] == "2026-01-02T00:00:00+00:00"
    assert data["softmax"]["last_mistake"] == "not_stable"
    assert data["causal_mask"] == {**data["causal_mask"], "attempts": 2, "passed": False,
                                   "last_mistake": "inverted"}
    exercises.check("causal_mask", _solution("causal_mask"))
    assert json.loads(legacy.read_text()) == LEGACY                     # kept as it was
    data = exercises.load_progress()["exercises"]                       # not imported twice
    assert data["softmax"]["attempts"] == 4 and data["causal_mask"]["attempts"] == 3
    assert main(["progress", "--reset", "--yes"]) == 0                  # reset: not re-imported
    assert exercises.load_progress()["exercises"] == {}


def test_a_json_record_at_the_path_itself_is_moved_aside_and_imported(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"                 # an old COURSE_LIB_PROGRESS setting
    path.write_text(json.dumps(LEGACY))
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(path))
    with pytest.warns(_progress.ProgressWarning):
        exercises.check("softmax", _solution("softmax"))
    data = exercises.load_progress()["exercises"]
    assert data["softmax"]["attempts"] == 5 and data["causal_mask"]["attempts"] == 2
    kept = list(tmp_path.glob("progress.json.damaged-*"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == LEGACY


def test_progress_views(record_path, tmp_path, capsys, monkeypatch):
    exercises.check("causal_mask", _mistake("causal_mask"))
    exercises.check("padding_mask", _mistake("padding_mask"))
    exercises.check("softmax", _solution("softmax"))
    table = exercises.progress()
    rows = {r["chapter"]: r for r in table}
    assert rows["03_softmax"]["done"] == 1 and rows["03_softmax"]["total"] == 2
    assert rows["06_masks"]["attempts"] == 2 and rows["06_masks"]["done"] == 0
    assert rows["06_masks"]["last_mistake"].startswith("padding_mask: ")
    assert "<table" in table._repr_html_() and "06_masks" in repr(table)

    assert main(["progress"]) == 0
    out = capsys.readouterr().out
    assert "03_softmax" in out and "1/2" in out and "0/3" in out \
        and f"1 of {len(registry())} exercises" in out

    assert main(["progress", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["exercises"]
    assert set(data) == {e["id"] for e in exercises.list_exercises()}
    assert data["causal_mask"] == {"attempts": 1, "passed": False, "first_passed_at": None,
                                   "last_status": "failed", "last_mistake": "inverted"}
    assert data["softmax"]["passed"] is True and data["softmax"]["first_passed_at"]
    assert data["retrieve"]["attempts"] == 0

    out_csv = tmp_path / "class.csv"
    assert main(["progress", "--export", str(out_csv)]) == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 3 and rows[0]["exercise"] == "causal_mask"
    assert set(rows[0]) == set(_progress.COLUMNS)

    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert main(["progress", "--reset"]) == 1                     # asks; "n" keeps everything
    assert len(_progress.attempts()) == 3
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    assert main(["progress", "--reset"]) == 0
    assert _progress.attempts() == []
