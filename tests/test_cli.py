"""`python -m course_lib ...` via subprocess: exit codes 0 (pass), 1 (not yet), 2 (usage/load)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from course_lib.exercises import load_progress

from course_lib.__main__ import _EXTRA_COMMANDS, add_command, main
from course_lib.toolkit.checking._registry import registry

SOLUTION = textwrap.dedent('''
    import torch

    def softmax(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    def naive(x, dim=-1):
        return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)

    if __name__ == "__main__":
        raise SystemExit("the CLI must not run the main block")
''')


@pytest.fixture()
def env(tmp_path):
    return {**os.environ, "COURSE_LIB_PROGRESS": str(tmp_path / "progress.json")}


@pytest.fixture()
def solution_file(tmp_path):
    path = tmp_path / "my_solution.py"
    path.write_text(SOLUTION)
    return path


def run(env, *args, timeout=600):  # a bound on a hang, never reached by a passing run
    return subprocess.run([sys.executable, "-m", "course_lib", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout)


def test_subprocess_exit_codes(env, solution_file, tmp_path):
    ok = run(env, "check", "softmax", solution_file)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "✓ softmax: Correct!" in ok.stdout

    bad = run(env, "check", "softmax", solution_file, "--function", "naive")
    assert bad.returncode == 1
    assert "✗ softmax: Not yet." in bad.stdout and "overflows" in bad.stdout

    broken = tmp_path / "broken.py"
    broken.write_text("def softmax(x:\n")
    r = run(env, "check", "softmax", broken)
    assert r.returncode == 2 and "SyntaxError" in r.stderr

    data = load_progress(tmp_path / "progress.json")
    assert data["exercises"]["softmax"]["attempts"] == 2
    assert data["exercises"]["softmax"]["last_mistake"] == "not_stable"


# In-process from here on (same code path as `python -m course_lib`, without a torch start-up).


@pytest.fixture()
def progress_env(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "progress.json"))


@pytest.mark.usefixtures("progress_env")
def test_usage_and_load_errors_exit_2(solution_file, tmp_path, capsys):
    bad_import = tmp_path / "bad_import.py"
    bad_import.write_text("import no_such_module_here\n")
    cases = [
        ("check", "softmx", str(solution_file)),                        # unknown id
        ("check", "softmax", str(tmp_path / "missing.py")),             # no file
        ("check", "softmax", str(bad_import)),                          # import error
        ("check", "softmax", str(solution_file), "--function", "nope"),  # no such function
        ("hint", "nope"),
        ("solution", "nope"),
    ]
    for args in cases:
        assert main(list(args)) == 2, args
    err = capsys.readouterr().err
    assert "Did you mean 'softmax'" in err and "no such file" in err
    assert "ModuleNotFoundError" in err and "it defines: naive, softmax" in err
    for args in (["check", "softmax"], []):
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == 2


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for exercise_id in ("retrieve", "softmax", "flash_attention", "attention_memory"):
        assert exercise_id in out
    assert "03_softmax" in out and "softmax(x, dim=-1)" in out
    assert f"{len(registry())} exercises" in out and len(registry()) >= 19


@pytest.mark.usefixtures("progress_env")
def test_hint_solution_progress(solution_file, capsys):
    assert main(["hint", "softmax", "--level", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Hint 2/3 for softmax:")
    # the next hint, as the terminal takes it (not Python's exercises.hint(..., level=3))
    assert "(python -m course_lib hint softmax --level 3 says more)" in out
    assert "level=" not in out
    assert main(["solution", "causal_mask"]) == 0
    assert capsys.readouterr().out.startswith("def causal_mask(n")
    assert main(["check", "softmax", str(solution_file)]) == 0
    assert main(["check", "causal_mask", str(solution_file)]) == 2     # no causal_mask in file
    capsys.readouterr()
    assert main(["progress"]) == 0
    out = capsys.readouterr().out
    assert "03_softmax" in out and "1/2" in out and "1 of " in out and "progress.json" in out


def test_extra_subcommands_can_be_added(capsys):
    add_command("hello", "say hello", lambda p: p.add_argument("name"),
                lambda args: print(f"hello {args.name}") or 0)
    try:
        assert main(["hello", "you"]) == 0
        assert capsys.readouterr().out == "hello you\n"
        assert main(["hint", "softmax"]) == 0              # the others keep working
    finally:
        _EXTRA_COMMANDS.pop("hello", None)


@pytest.mark.usefixtures("progress_env")
def test_check_json_and_progress_reset(solution_file, tmp_path, capsys):
    assert main(["check", "softmax", str(solution_file), "--function", "naive", "--json",
                 "--seed", "3"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is False and data["mistake"] == "not_stable"
    assert data["failed_case"] == "large magnitudes" and data["cases_total"] == 8
    assert load_progress(tmp_path / "progress.json")["exercises"]["softmax"]["attempts"] == 1
    assert main(["progress", "--reset", "--yes"]) == 0
    assert load_progress(tmp_path / "progress.json")["exercises"] == {}
