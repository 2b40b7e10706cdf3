"""Issue 52's fixes that need no class to grade: identities that never merge, a sandbox whose
limits fail closed (iterative walks, a watcher that ends the sandbox when it fails, threads
counted, cleanup that cannot raise), and outputs escaped everywhere. Fast: no notebook runs."""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from marked_processes import kill_marked, marked

from course_lib.toolkit.grading import report, sandbox, submissions

DEPTH = 1100       # deeper than Python's default recursion limit (1000)


def _chain(base: Path, depth: int = DEPTH) -> None:
    """``depth`` nested folders ``d/d/d/...`` below ``base`` (by descriptor: no long paths)."""
    here = os.open(base, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=here)
        there = os.open("d", os.O_RDONLY, dir_fd=here)
        os.close(here)
        here = there
    with open(os.open("f.bin", os.O_WRONLY | os.O_CREAT, dir_fd=here), "wb") as f:
        f.write(b"x" * 5000)
    os.close(here)


# --------------------------------------------------------------------------- walks and cleanup


def test_a_deep_chain_is_walked_and_removed_without_recursion(tmp_path):
    base = tmp_path / "scratch"
    base.mkdir()
    _chain(base)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    os.symlink(outside, base / "link")            # removed, never followed
    used = sandbox.folder_bytes(base)
    assert 5000 <= used < sys.maxsize             # the file at the bottom is counted
    assert sandbox.folder_bytes(base, most=DEPTH // 2) == sys.maxsize   # the bound holds
    assert sandbox.remove_tree(base) is None
    assert not base.exists() and outside.read_text() == "keep"


def test_cleanup_never_raises_and_says_what_is_left(tmp_path):
    assert sandbox.remove_tree(tmp_path / "missing") is None
    base = tmp_path / "locked"
    (base / "a" / "b").mkdir(parents=True)
    (base / "a" / "b" / "f").write_text("x")
    os.chmod(base / "a", 0o000)                   # a learner made it unreadable: opened anyway
    try:
        assert sandbox.remove_tree(base) is None
        assert not base.exists()
    finally:
        if (base / "a").exists():
            os.chmod(base / "a", 0o700)


def test_a_learners_folder_with_a_deep_chain_is_discovered(tmp_path):
    folder = tmp_path / "amy"
    folder.mkdir()
    (folder / "03_softmax.ipynb").write_text('{"cells": []}')
    _chain(folder)
    try:
        found = submissions.discover([folder])
        assert [(s.learner, s.notebook.name, s.problem) for s in found] == \
            [("amy", "03_softmax.ipynb", None)]
    finally:
        assert sandbox.remove_tree(folder) is None     # pytest's own cleanup recurses


# --------------------------------------------------------------------------- the limit watcher


def _threads_program(n: int) -> list[str]:
    return [sys.executable, "-c",
            "import threading, time\n"
            f"for _ in range({n}):\n"
            "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
            "time.sleep(60)\n"]


def _watched(limits: sandbox.Limits, argv: list[str], **kw) -> tuple[str | None, int | None]:
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        with sandbox.TreeWatch(proc.pid, limits, interval=0.05, **kw) as watch:
            deadline = time.monotonic() + 30
            while watch.reason is None and time.monotonic() < deadline:
                time.sleep(0.05)
        return watch.reason, proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_threads_are_counted_against_a_limit():
    reason, code = _watched(sandbox.Limits(threads=20), _threads_program(60))
    assert reason is not None and "threads" in reason and "(limit 20)" in reason, reason
    assert code == -9                              # the tree was ended (SIGKILL)


def test_a_failing_watcher_ends_the_sandbox_with_a_reason(tmp_path, monkeypatch):
    def broken(folder, most=10_000):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(sandbox, "folder_bytes", broken)
    reason, code = _watched(sandbox.Limits(), [sys.executable, "-c", "import time; "
                                               "time.sleep(60)"], folder=tmp_path)
    assert reason is not None and "RecursionError" in reason and "ended" in reason, reason
    assert code == -9


def test_the_sandbox_sees_minimal_user_and_host_tables(tmp_path):
    """Its own /etc/passwd, /etc/group and /etc/hosts, never the host's (bound from a folder
    named by their content: the same for every job, naming none of the grader's folders)."""
    if sandbox.find_bwrap() is None:
        pytest.skip("bwrap is not installed")
    show = ("for p in ('passwd', 'group', 'hosts'):\n"
            "    print(open('/etc/' + p).read(), end='')")
    argv = sandbox.command([sys.executable, "-c", show], scratch=None,
                           course=sandbox.course_package(), limits=sandbox.Limits(), env={},
                           args_dir=tmp_path)
    opts = Path(argv[4]).read_bytes().split(b"\0")
    binds = {opts[i + 2]: opts[i + 1] for i, o in enumerate(opts[:-2]) if o == b"--ro-bind"}
    assert binds[b"/etc/passwd"].startswith(b"/tmp/course-lib-etc-"), binds[b"/etc/passwd"]
    proc = subprocess.run(argv, capture_output=True, timeout=120)
    if proc.returncode != 0:
        pytest.skip(f"bwrap cannot run here: {proc.stderr[-200:]!r}")
    tables = sandbox._ETC_WRITTEN
    assert proc.stdout.decode() == tables["/etc/passwd"] + tables["/etc/group"] \
        + tables["/etc/hosts"]
    users = [line.split(":")[0] for line in tables["/etc/passwd"].splitlines()]
    assert users == ["root", "nobody"]


def test_the_sandbox_ends_with_the_process_that_started_it(tmp_path):
    """A launcher (as the grading job is to its kernel: the kernel in a session of its own)
    starts a sandbox and is killed: bubblewrap is its own child, so ``--die-with-parent`` ends
    the sandbox at once. A shell waiting on a pipe between them kept it running, orphaned."""
    if sandbox.find_bwrap() is None:
        pytest.skip("bwrap is not installed")
    marker = "sandbox-lifetime-" + secrets.token_hex(8)
    argv = sandbox.command([sys.executable, "-c", "import time; time.sleep(300)", marker],
                           scratch=None, course=sandbox.course_package(),
                           limits=sandbox.Limits(), env={}, args_dir=tmp_path)
    launch = ("import json, subprocess, sys, time\n"
              "subprocess.Popen(json.loads(sys.argv[1]), start_new_session=True)\n"
              "time.sleep(300)\n")
    launcher = subprocess.Popen([sys.executable, "-c", launch, json.dumps(argv)])
    try:
        deadline = time.monotonic() + 60
        while len(marked(marker)) < 2 and time.monotonic() < deadline:   # bwrap + its python
            time.sleep(0.1)
        assert marked(marker), "the sandbox did not start"
        launcher.kill()
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 10
        while marked(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = marked(marker)
    finally:
        launcher.kill()
        launcher.wait(timeout=10)
        kill_marked(marker)                  # whatever the assertion says, nothing stays
    assert left == [], f"processes of the sandbox outlived their launcher: {left}"


def test_the_sandbox_holds_no_descriptor_of_bubblewraps_arguments(tmp_path):
    """bubblewrap's arguments (which name the grader's folders) reach it on a descriptor it
    closes once read: no open descriptor inside reads them, and standard input is empty."""
    if sandbox.find_bwrap() is None:
        pytest.skip("bwrap is not installed")
    show = ("import os, sys\n"
            "seen = []\n"
            "for fd in sorted(int(n) for n in os.listdir('/proc/self/fd')):\n"
            "    try:\n"
            "        seen.append(os.pread(fd, 1 << 16, 0))\n"
            "    except OSError:\n"
            "        pass\n"
            "print(any(b'--unshare-all' in s for s in seen), repr(sys.stdin.read()))\n")
    argv = sandbox.command([sys.executable, "-c", show], scratch=None,
                           course=sandbox.course_package(), limits=sandbox.Limits(), env={},
                           args_dir=tmp_path)
    assert b"--unshare-all" in Path(argv[4]).read_bytes()     # the file the arguments are in
    proc = subprocess.run(argv, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-300:]
    assert proc.stdout.decode().split() == ["False", "''"], proc.stdout


# --------------------------------------------------------------------------- identities


def test_names_that_meet_are_both_refused_and_spaces_are_kept(tmp_path):
    nb = '{"cells": []}'
    for name in ("vic", " vic", "zo\u00e9", "zoe\u0301", "ann"):
        (tmp_path / f"{name}.ipynb").write_text(nb)
    (tmp_path / "ann").mkdir()                     # a folder named like a file's learner
    (tmp_path / "ann" / "03_softmax.ipynb").write_text(nb)
    paths = sorted(tmp_path.iterdir())
    found = {(s.learner, s.notebook.name): s for s in submissions.discover(paths)}
    assert found["vic", "vic.ipynb"].problem is None
    assert found[" vic", " vic.ipynb"].problem is None          # its own learner
    for key in (("zo\u00e9", "zo\u00e9.ipynb"), ("zo\u00e9", "zoe\u0301.ipynb"),
                ("ann", "ann.ipynb"), ("ann", "03_softmax.ipynb")):
        problem = found[key].problem
        assert problem is not None and "none of them is graded" in problem, (key, problem)
        assert found[key].data is None
    assert "'zo\u00e9.ipynb'" in found["zo\u00e9", "zo\u00e9.ipynb"].problem
    assert "'zoe\u0301.ipynb'" in found["zo\u00e9", "zo\u00e9.ipynb"].problem
    assert submissions.learner_id(" vic") == " vic"
    assert submissions.learner_id("a\x1b[31m") == "a\ufffd[31m"


def test_a_rosters_ids_get_the_same_one_normalisation():
    from course_lib.toolkit.grading import assignment

    roster = assignment._roster([{"id": " zoe\u0301 ", "name": "Zo\u00e9"}, {"id": "vic"}],
                                Path("a.toml"))
    assert list(roster) == ["zo\u00e9", "vic"]          # NFC, like a file's name
    assert submissions.learner_id(" vic") not in roster


def test_the_chapter_comes_from_the_metadata_as_written():
    table = {"softmax": "03_softmax"}
    for written in ("03_softmax", "03_softmax.ipynb", "book/03_softmax.ipynb"):
        nb = {"cells": [], "metadata": {"course_lib": {"workbook": {"chapter": written}}}}
        assert submissions.chapter_of(nb, Path("hw.ipynb"), table) == "03_softmax", written
    nb = {"cells": [], "metadata": {"course_lib": {"workbook": {"chapter": "99_x.ipynb"}}}}
    assert submissions.chapter_of(nb, Path("hw.ipynb"), table) is None


# --------------------------------------------------------------------------- escaping


@pytest.mark.parametrize("delimiter", [",", ";", "\t", "|"])
def test_no_csv_cell_starts_a_formula_in_any_locale(delimiter):
    cells = ["x;=SUM(1;41)", "a,=1+1", "b\t@x", "c|-2", "=HYPERLINK(1)", "line\n=1", 'q"=1',
             "plain", 2, 1.5]
    text = report._csv([cells])
    for row in csv.reader(io.StringIO(text), delimiter=delimiter):
        for cell in row:
            assert cell.lstrip("\"")[:1] not in ("=", "+", "-", "@"), (delimiter, cell)
    assert next(csv.reader(io.StringIO(text))) == \
        ["x;'=SUM(1;41)", "a,'=1+1", "b\t'@x", "c|'-2", "'=HYPERLINK(1)", "line\n'=1", 'q"=1',
         "plain", "2", "1.5"]


def test_terminal_text_has_no_control_characters():
    shown = report.terminal_text("a\x1b]0;pwned\x07b\x1b[2J\r\u202ec\td\n")
    assert not any(ord(c) < 32 and c not in "\t\n" for c in shown), repr(shown)
    assert "\u202e" not in shown and "\\x1b" in shown and shown.endswith("c\td\n")


def test_a_summary_with_no_gradable_chapter_is_written():
    assert report.summary_markdown([], {}).startswith("| exercise |")
