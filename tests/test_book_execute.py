"""tools/book_execute.py: `make book` runs the chapters in parallel into the cache Sphinx reads.

A tiny book of two notebooks: both run fresh (a stale cache entry is never served), Sphinx's
lookup (myst-nb's ``match_cache_notebook``) finds each, and a chapter whose cell raises fails the
step with its traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
import yaml
from jupyter_cache import get_cache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import book_execute  # noqa: E402


def _book(tmp_path: Path, second_cell: str) -> Path:
    (tmp_path / "book").mkdir()
    (tmp_path / "_toc.yml").write_text(yaml.safe_dump({
        "format": "jb-book", "root": "book/intro",
        "parts": [{"caption": "Chapters", "chapters": [
            {"file": "book/one", "sections": [{"file": "book/two"}]}, {"file": "book/notes"}]}]}))
    (tmp_path / "_config.yml").write_text(yaml.safe_dump({"execute": {"timeout": 60}}))
    (tmp_path / "book" / "intro.md").write_text("# Intro\n")
    (tmp_path / "book" / "notes.md").write_text("# Notes\n")
    for name, src in (("one", "print(6 * 7)"), ("two", second_cell)):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        nbformat.write(nb, tmp_path / "book" / f"{name}.ipynb")
    return tmp_path


def test_the_toc_notebooks_in_order_and_the_configured_timeout(tmp_path):
    root = _book(tmp_path, "1")
    assert book_execute.toc_notebooks(root) == [root / "book" / "one.ipynb",
                                                root / "book" / "two.ipynb"]
    assert book_execute.cell_timeout(root) == 60
    assert book_execute.cell_timeout(ROOT) == yaml.safe_load(
        (ROOT / "_config.yml").read_text())["execute"]["timeout"]
    chapters = book_execute.toc_notebooks(ROOT)
    # every chapter notebook of book/, in _toc.yml's order (which is their numbering)
    assert [c.name for c in chapters] == sorted(p.name for p in (ROOT / "book").glob(
        "[0-9][0-9]_*.ipynb")) and chapters[0].name == "01_library_analogy.ipynb"


@pytest.mark.slow
def test_every_chapter_runs_fresh_into_the_cache_sphinx_reads(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))   # kernels' files
    root = _book(tmp_path, "import os\nprint(os.environ.get('BOOK_EXECUTE_MARK', 'unset'))")
    cache_path = root / "_build" / ".jupyter_cache"
    assert book_execute.main(["--jobs", "2"], root, cache_path) == 0
    assert "executed 2 of 2 chapters" in capsys.readouterr().out

    def outputs(name: str) -> str:
        nb = nbformat.read(root / "book" / f"{name}.ipynb", as_version=4)
        _, merged = get_cache(str(cache_path)).merge_match_into_notebook(nb)
        return merged.cells[0].outputs[0]["text"]

    assert outputs("one") == "42\n" and outputs("two") == "unset\n"
    # The next build empties the cache: the same code runs again (here it prints another value).
    monkeypatch.setenv("BOOK_EXECUTE_MARK", "second build")
    assert book_execute.main([], root, cache_path) == 0
    assert outputs("two") == "second build\n"


@pytest.mark.slow
def test_a_chapter_that_raises_fails_with_its_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    root = _book(tmp_path, "raise ValueError('chapter two is broken')")
    assert book_execute.main(["--jobs", "2"], root, root / "_build" / ".jupyter_cache") == 1
    err = capsys.readouterr().err
    assert "FAILED book/two.ipynb" in err and "chapter two is broken" in err
    assert "FAILED book/one.ipynb" not in err


def test_the_kernel_talks_over_unix_sockets_without_the_tcp_warning(tmp_path, capfd,
                                                                     monkeypatch):
    """The chapters' kernels use IPC transport: no TCP port, and no "Kernel is running over TCP
    without encryption" warning from each kernel on the build's terminal (issue 45, item 10)."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    root = _book(tmp_path, "1")
    km = book_execute.SlicedPollingKernelManager()
    assert km.transport == "ipc"
    executed, traceback, _ = book_execute.run_chapter(root / "book" / "one.ipynb", 60)
    assert traceback is None
    assert nbformat.reads(executed, as_version=4).cells[0].outputs[0]["text"] == "42\n"
    captured = capfd.readouterr()
    assert "without encryption" not in captured.err + captured.out


# ------------------------------------------------------------ chapters taken from nbval's run

def _nbval_run(root: Path, name: str, text: str, book_mode: bool = True,
               source: str | None = None) -> Path:
    """What tools/nbval_capture.py writes for ``book/<name>.ipynb``: its cells, run (stdout
    ``text``), marked with the mode it ran in; ``source`` replaces its code."""
    folder = root / "_build" / "nbval-native-run"
    folder.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(root / "book" / f"{name}.ipynb", as_version=4)
    if source is not None:
        nb.cells[0].source = source
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text),
                           nbformat.v4.new_output("display_data", data={
                               book_execute.WIDGET_VIEW: {"model_id": "m", "version_major": 2,
                                                          "version_minor": 0},
                               "text/plain": "sweep:   0%|          | 0/15"})]
    nb.metadata["course_lib_nbval"] = {"book_mode": book_mode}
    nbformat.write(nb, folder / f"{name}.ipynb")
    return folder


def _cached_outputs(root: Path, cache_path: Path, name: str) -> list:
    nb = nbformat.read(root / "book" / f"{name}.ipynb", as_version=4)
    _, merged = get_cache(str(cache_path)).merge_match_into_notebook(nb)
    return merged.cells[0].outputs


def test_a_chapter_nbval_ran_in_book_mode_is_taken_from_its_run_without_the_dead_widget(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    root = _book(tmp_path, "print('two ran here')")
    cache_path = root / "_build" / ".jupyter_cache"
    folder = _nbval_run(root, "one", "from nbval's run\n")
    # chapter two: nbval ran it in the learners' mode, so the book runs it itself
    _nbval_run(root, "two", "learners' mode\n", book_mode=False)
    assert book_execute.main(["--from", str(folder)], root, cache_path) == 0
    out = capsys.readouterr().out
    assert "took 1 of 2 chapters from nbval's run" in out and "executed 1 of 1 chapters" in out
    assert "runs book/two.ipynb here: nbval ran it without COURSE_LIB_BOOK=1" in out
    # one: nbval's outputs, the progress bar's widget dropped; two: run here
    assert [o.get("text") for o in _cached_outputs(root, cache_path, "one")] == \
        ["from nbval's run\n"]
    assert [o.get("text") for o in _cached_outputs(root, cache_path, "two")] == \
        ["two ran here\n"]


def test_a_run_of_other_code_or_none_at_all_is_not_taken(tmp_path):
    root = _book(tmp_path, "1")
    page = root / "book" / "one.ipynb"
    assert book_execute.captured(page, None) == (None, "no --from")
    folder = root / "_build" / "nbval-native-run"
    assert book_execute.captured(page, folder) == (None, "nbval's run did not keep it")
    _nbval_run(root, "one", "old\n", source="print(6 * 9)")
    assert book_execute.captured(page, folder) == (None, "its code cells differ from the page's")
    _nbval_run(root, "one", "42\n")
    nb, why = book_execute.captured(page, folder)
    assert why == "" and nb.cells[0].outputs[0]["text"] == "42\n"
    assert book_execute.drop_dead_widgets(nb) == 1 and len(nb.cells[0].outputs) == 1
    assert book_execute.drop_dead_widgets(nb) == 0
