"""Launch buttons that run: the setup cell, a fresh environment, Binder, the book's workbook."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from course_lib.toolkit import workbook

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CHAPTERS = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))


def _load_tool(name):
    spec = importlib.util.spec_from_file_location(f"_tool_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


notebook_setup = _load_tool("notebook_setup")
book_workbook = _load_tool("book_workbook")


def _setup_source():
    return notebook_setup.setup_source(notebook_setup.default_requirement(),
                                       notebook_setup.book_version())


def _as_authored(nb: dict) -> dict:
    """A chapter as an author writes it: no setup cell, solution cells as plain hide-input."""
    nb = json.loads(json.dumps(nb))
    nb["cells"] = [c for c in nb["cells"] if "setup" not in c["metadata"].get("tags", [])]
    for cell in nb["cells"]:
        meta = cell["metadata"]
        if "solution" in meta.get("tags", []):
            cell["source"] = "".join(cell["source"]).replace(", record=False)", ")")
            meta["tags"] = ["hide-input" if t == "hide-cell" else t for t in meta["tags"]]
            meta.pop("mystnb", None)
    return nb


def test_setup_tool_turns_an_authored_chapter_into_the_stored_one(tmp_path):
    for path in CHAPTERS:
        stored = json.loads(path.read_text(encoding="utf-8"))
        authored = _as_authored(stored)
        copy = tmp_path / path.name
        copy.write_text(json.dumps(authored, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                        encoding="utf-8")
        assert notebook_setup.main([str(copy)]) == 0
        assert notebook_setup.main(["--check", str(copy)]) == 0        # idempotent
        after = json.loads(copy.read_text(encoding="utf-8"))
        setup, *rest = after["cells"]
        assert setup["metadata"]["tags"] == ["setup", "remove-cell"] and setup["outputs"] == []
        assert "".join(setup["source"]) == _setup_source()
        assert len(rest) == len(authored["cells"])
        for old, new in zip(authored["cells"], rest, strict=True):
            if "solution" in old["metadata"].get("tags", []):
                assert "record=False)" in "".join(new["source"])
                assert "hide-cell" in new["metadata"]["tags"]
                assert "hide-input" not in new["metadata"]["tags"]
                assert new["metadata"]["mystnb"]["code_prompt_show"] == "Reference solution"
                continue
            assert new == old                               # outputs and all else unchanged
        # the stored chapter is exactly what the tool makes of it (besides the setup cell id)
        assert [c["source"] for c in after["cells"]] == [c["source"] for c in stored["cells"]]


def test_setup_cell_names_the_books_version_and_repository():
    src = _setup_source()
    version = notebook_setup.book_version()
    assert f'git+https://github.com/self-attention-executed/course@v{version}"' in src
    from importlib.metadata import version as installed

    assert installed("course_lib") == version


def test_setup_cell_is_a_no_op_when_course_lib_is_importable(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a))
    exec(compile(_setup_source(), "<setup cell>", "exec"), {})
    assert calls == [] and capsys.readouterr() == ("", "")


def test_solution_checks_do_not_record_after_the_tool(tmp_path, monkeypatch):
    """The book's solution cells, as the tool rewrites them, leave the record empty."""
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "p.sqlite3"))
    nb = json.loads((BOOK / "06_masks.ipynb").read_text(encoding="utf-8"))
    notebook_setup.apply(nb, _setup_source())
    namespace: dict = {}
    exec("import math, torch\nfrom course_lib import exercises", namespace)
    solutions = [c for c in nb["cells"] if "solution" in c["metadata"].get("tags", [])]
    assert len(solutions) == 3
    for cell in solutions:
        exec(compile("".join(cell["source"]), "<solution cell>", "exec"), namespace)
    from course_lib.toolkit.checking import _progress

    assert _progress.attempts() == []


# --------------------------------------------------------------------------- fresh environment

PROBE = textwrap.dedent('''
    import course_lib, json
    from course_lib.toolkit.checking import _progress
    print(json.dumps({"file": course_lib.__file__, "attempts": _progress.attempts()}))
''')

# The shell-reply polling of course_lib.toolkit.kernel_polling, loaded from its file (standard
# library only): course_lib itself is not importable until the setup cell has installed it.
# Without it, a loaded run waited out the whole 600 s poll after one cell's reply (seen once).
RUNNER = textwrap.dedent('''
    import importlib.util, sys, nbformat, nbclient
    spec = importlib.util.spec_from_file_location("kernel_polling", sys.argv[3])
    polling = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(polling)
    nb = nbformat.read(sys.argv[1], as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, startup_timeout=600, kernel_name="python3",
        on_notebook_start=lambda notebook: polling.poll_shell_in_slices(client.kc))
    client.execute()
    nbformat.write(nb, sys.argv[2])
''')
KERNEL_POLLING = Path(__file__).resolve().parent.parent / "course_lib" / "toolkit" / \
    "kernel_polling.py"


#: The chapter the fresh environment runs: FlexAttention draws its figures from its committed
#: benchmarks (``chapters/ch11_flex_attention/data``), so a wheel without its package data shows
#: fewer figures or raises; chapter 7's loaders would do too, with a live sweep of 20 s besides.
LAUNCHED = "11_flex_attention"
#: A cell put after the setup cell: the loaders of the other kinds of package data find theirs in
#: the installed wheel (``toolkit/bench/results``, ``chapters/ch10_inference/data``).
PACKAGE_DATA_CELL = textwrap.dedent("""
    import pathlib
    import course_lib
    assert pathlib.Path(course_lib.__file__).is_relative_to({target!r}), course_lib.__file__
    from course_lib.chapters.ch07_complexity import helpers as cx
    from course_lib.chapters.ch10_inference import helpers as inf
    assert cx.committed_benchmark() is not None, "no committed benchmark found"
    assert inf.load_decode_results()["results"] and inf.committed_matmul_rate() > 0
""")


def _figures(nb: dict) -> int:
    return sum("image/png" in out.get("data", {})
               for cell in nb["cells"] if cell["cell_type"] == "code"
               for out in cell.get("outputs", []))


@pytest.mark.slow
@pytest.mark.xdist_group("course_lib_wheel")
def test_a_wheel_installed_by_the_setup_cell_runs_a_workbook_chapter(tmp_path, course_lib_wheel):
    """Like Colab: no course_lib; the setup cell installs it (here from a locally built wheel,
    offline: the session's ``course_lib_wheel``), a non-editable install outside the checkout.
    Then the learner's copy of chapter 11 runs from it with every figure the book shows, finds
    every kind of package data, and records nothing as passed."""
    wheel = course_lib_wheel

    # A fresh environment without course_lib; its dependencies (torch...) come from this one.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True).stdout
    Path(site.strip(), "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    target = tmp_path / "installed"
    target.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COURSE_LIB", "PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(PYTHONPATH=str(target), PIP_TARGET=str(target), PIP_NO_DEPS="1",
               PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               COURSE_LIB_REQUIREMENT=str(wheel), HOME=str(tmp_path / "home"),
               COURSE_LIB_PROGRESS=str(tmp_path / "progress.sqlite3"),
               MPLBACKEND="module://matplotlib_inline.backend_inline")   # figures as outputs
    missing = subprocess.run([python, "-c", "import course_lib"], env=env, capture_output=True,
                             text=True, cwd=tmp_path)
    assert missing.returncode == 1 and "No module named 'course_lib'" in missing.stderr

    nb = json.loads((BOOK / f"{LAUNCHED}.ipynb").read_text(encoding="utf-8"))
    figures = _figures(nb)
    notebook_setup.apply(nb, _setup_source())               # as the lead applies it to book/
    learner = workbook.learner_copy(nb, f"{LAUNCHED}.ipynb")
    assert learner["cells"][0]["metadata"]["tags"][0] == "setup"
    learner["cells"].insert(1, {"cell_type": "code", "metadata": {}, "outputs": [],
                                "execution_count": None,
                                "source": PACKAGE_DATA_CELL.format(target=str(target))})
    chapter = tmp_path / f"{LAUNCHED}.ipynb"
    chapter.write_text(workbook.dumps(learner), encoding="utf-8")
    runner = tmp_path / "run.py"
    runner.write_text(RUNNER)
    run = subprocess.run([python, str(runner), str(chapter), str(tmp_path / "out.ipynb"),
                          str(KERNEL_POLLING)],
                         env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    for data in (("toolkit", "bench", "results", "cpu-float32.json"),
                 ("chapters", "ch10_inference", "data", "decode-cpu.json")):
        assert target.joinpath("course_lib", *data).is_file(), data
    probe = subprocess.run([python, "-c", PROBE], env=env, capture_output=True, text=True,
                           check=True, cwd=tmp_path)
    data = json.loads(probe.stdout)
    assert data["file"].startswith(str(target))                 # the wheel, not this checkout
    assert not any(a["passed"] for a in data["attempts"])
    assert data["attempts"] == []                               # starters are not attempts
    out = json.loads((tmp_path / "out.ipynb").read_text())
    assert figures >= 2 and _figures(out) == figures
    checks = [c for c in out["cells"] if "".join(c["source"]).startswith("exercises.check")]
    assert checks and all("Not attempted yet." in json.dumps(c["outputs"]) for c in checks)


# --------------------------------------------------------------------------- Binder, the book


def test_binder_installs_cpu_torch_and_the_package():
    req = (ROOT / "binder" / "requirements.txt").read_text()
    pinned = next(ln for ln in (ROOT / "requirements.txt").read_text().splitlines()
                  if ln.startswith("torch=="))
    assert f"{pinned.split()[0]}+cpu" in req and "download.pytorch.org/whl/cpu" in req
    for name in ("numpy", "matplotlib", "ipywidgets", "jupyterlab"):
        assert f"\n{name}" in req
    post = ROOT / "binder" / "postBuild"
    assert os.access(post, os.X_OK)
    text = post.read_text()
    assert "pip install --no-deps --no-build-isolation -e ." in text
    assert "python -m course_lib workbook workbook" in text


def test_jupyterhub_is_the_one_setting_and_no_placeholder():
    config = (ROOT / "_config.yml").read_text()
    assert "example.org" not in config and 'jupyterhub_url: ""' in config
    assert "jupyterhub_url" in (ROOT / "README.md").read_text()


def test_book_extension_adds_the_workbook_link_and_writes_the_copies(tmp_path, monkeypatch):
    monkeypatch.delenv("COURSE_LIB_PROGRESS", raising=False)
    app = SimpleNamespace(srcdir=str(ROOT), outdir=str(tmp_path / "html"),
                          env=SimpleNamespace(found_docs={"book/intro", "book/03_softmax",
                                                          "book/01_library_analogy"}),
                          builder=SimpleNamespace(format="html"))
    book_workbook._config_inited(app, None)
    assert os.environ["COURSE_LIB_PROGRESS"] == str(tmp_path / ".book-progress.sqlite3")
    group = {"label": "download-buttons", "buttons": [{"label": "a"}, {"label": "b"}]}
    context = {"header_buttons": [group], "pathto": lambda p, r: f"../{p}"}
    book_workbook._page_context(app, "book/03_softmax", "page.html", context, None)
    link = group["buttons"][1]
    assert link["url"] == "../workbook/03_softmax.ipynb" and link["text"] == "workbook"
    other = {"header_buttons": [{"label": "download-buttons", "buttons": []}], "pathto": None}
    book_workbook._page_context(app, "book/intro", "page.html", other, None)
    assert other["header_buttons"][0]["buttons"] == []
    book_workbook._build_finished(app, None)
    written = sorted(p.name for p in (tmp_path / "html" / "workbook").iterdir())
    assert written == ["01_library_analogy.ipynb", "03_softmax.ipynb"]
    nb = json.loads((tmp_path / "html" / "workbook" / "03_softmax.ipynb").read_text())
    assert "_solution" not in json.dumps(nb["cells"])
