"""`make lab` on a clean clone, and every command of the README's learner section."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CHAPTERS = sorted(p.name for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def _learner_section() -> str:
    start = README.index("## Learning with the notebooks")
    return README[start:README.index("\n## ", start + 1)]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", _learner_section(), re.S)


def _commands() -> list[str]:
    lines = [ln.split(" #")[0].strip() for b in _blocks("bash") for ln in b.splitlines()]
    return [ln for ln in lines if ln]


SOLUTION = '''import torch

def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
'''


@pytest.mark.slow  # every README command, a workbook included: well over 5 s
def test_every_learner_command_of_the_readme_runs(tmp_path, monkeypatch, capsys):
    """In-process, the same code path as `.venv/bin/python -m course_lib ...` (test_cli runs the
    module itself in a subprocess)."""
    from course_lib.__main__ import main

    commands = _commands()
    cli = [c for c in commands if c.startswith(".venv/bin/python -m course_lib ")]
    assert set(commands) - set(cli) == {"make lab"}        # make lab: test_make_lab_on_a_clone
    assert {shlex.split(c)[3] for c in cli} >= {"list", "check", "hint", "progress", "workbook"}
    (tmp_path / "my_solution.py").write_text(SOLUTION)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "progress.sqlite3"))
    monkeypatch.setattr("builtins.input", lambda prompt: "y")     # the --reset question
    out = {}
    for command in cli:
        args = shlex.split(command)[3:]
        assert main(args) == 0, command
        out[" ".join(args)] = capsys.readouterr().out
    assert "✓ softmax: Correct!" in out["check softmax my_solution.py"]
    assert "03_softmax" in out["progress"] and "1/2" in out["progress"]
    assert json.loads(out["progress --json"])["exercises"]["softmax"]["passed"] is True
    assert "exercise,at,status" in (tmp_path / "progress.csv").read_text()
    assert "Progress reset: 1 attempts forgotten" in out["progress --reset"]
    assert sorted(p.name for p in (tmp_path / "workbook").iterdir()) == CHAPTERS


def test_the_readme_notebook_snippet_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "p.sqlite3"))
    (snippet,) = _blocks("python")
    namespace: dict = {}
    exec(SOLUTION, namespace)
    exec(snippet, namespace)
    from course_lib import exercises

    assert exercises.load_progress()["exercises"]["softmax"]["passed"] is True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.slow
def test_make_lab_on_a_clone_serves_jupyterlab_on_the_workbook(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("GNU make is not installed")
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    clone = tmp_path / "clone"
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    assert not (clone / "workbook").exists()
    assert "/workbook/" in (clone / ".gitignore").read_text().splitlines()

    port, token = _free_port(), "course-lib-test-token"
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(clone),
           "COURSE_LIB_PROGRESS": str(tmp_path / "progress.sqlite3"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTER_CONFIG_DIR": str(home / "cfg"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces")}
    # `make lab` itself; `-o install` because this environment is the installed .venv
    # the port is a hint: if something took it meanwhile, the server tries others (port_retries)
    # and the test reads the one it got from the server's info file in its runtime folder
    lab_args = (f"--no-browser --port={port} --ServerApp.ip=127.0.0.1 "
                f"--ServerApp.port_retries=50 --IdentityProvider.token={token}")
    proc = subprocess.Popen(["make", "-o", "install", "lab", f"VENV={sys.prefix}",
                             f"LAB_ARGS={lab_args}"], cwd=clone, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 600  # a bound for a loaded machine; it waits for a condition
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                info = json.loads(next((home / "runtime").glob("jpserver-*.json")).read_text())
                base = f"http://127.0.0.1:{info['port']}"
                status = _get(f"{base}/api/status", token)
                break
            except (StopIteration, ValueError, KeyError, urllib.error.URLError, ConnectionError,
                    OSError):
                time.sleep(0.5)
        assert status is not None, proc.stdout.read().decode() if proc.poll() is not None else ""
        assert status[0] == 200 and "started" in json.loads(status[1])
        code, body = _get(f"{base}/lab", token)
        assert code == 200 and b"JupyterLab" in body
        code, body = _get(f"{base}/api/contents", token)
        listed = sorted(c["name"] for c in json.loads(body)["content"])
        assert code == 200 and listed == CHAPTERS                  # the workbook is the root
        code, body = _get(f"{base}/lab/api/extensions", token)
        names = {e["name"] for e in json.loads(body)}
        assert "jupyter-widgets-jupyterlab-manager" in names      # ipywidgets work
        assert "jupyterlab-myst" in names                         # the chapters' MyST renders
        # tools/lab/jupyter_lab_config.py: no news prompt, no request to the news feed
        code, body = _get(f"{base}/lab", token)
        assert b'"news": {"disabled": true}' in body.replace(b"&#34;", b'"'), body[:2000]
        code, body = _get(f"{base}/lab/api/settings/@jupyterlab/apputils-extension:notification",
                          token)
        fetch_news = json.loads(body)["schema"]["properties"]["fetchNews"]
        assert code == 200 and fetch_news["default"] == "false"    # overrides.json
        assert not (home / ".jupyter").exists()                    # nothing in the home folder
        assert _get(f"{base}/api/status", "wrong-token")[0] == 403
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)      # make and the server it started
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    notebook = json.loads((clone / "workbook" / CHAPTERS[0]).read_text())
    assert "_solution" not in json.dumps(notebook["cells"])
