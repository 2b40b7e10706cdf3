"""tools/nbval_capture.py: nbval's run is kept only for a notebook whose every cell passed."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import nbval_capture  # noqa: E402


def _notebook(tmp_path: Path) -> Path:
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# A chapter"),
        nbformat.v4.new_code_cell("print(1)", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="stored\n")]),
        nbformat.v4.new_code_cell("6 * 7")])
    path = tmp_path / "07_chapter.ipynb"
    nbformat.write(nb, path)
    return path


RAN = {0: ([{"output_type": "stream", "name": "stdout", "text": "1\n"}], True),
       1: ([{"output_type": "execute_result", "data": {"text/plain": "42"}, "metadata": {},
             "execution_count": 9}], True)}


def test_every_cell_passed_gives_the_notebook_with_its_run_and_its_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIB_BOOK", "1")
    nb = nbval_capture.written(_notebook(tmp_path), RAN)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.outputs[0].get("text") for c in code] == ["1\n", None]
    assert code[1].outputs[0]["data"]["text/plain"] == "42"
    assert [c.execution_count for c in code] == [1, 2]
    assert code[1].outputs[0]["execution_count"] == 2
    assert nb.metadata["course_lib_nbval"] == {"book_mode": True}
    assert nb.cells[0].source == "# A chapter"
    nbformat.validate(nb)
    monkeypatch.delenv("COURSE_LIB_BOOK")
    assert nbval_capture.written(_notebook(tmp_path), RAN).metadata["course_lib_nbval"] == \
        {"book_mode": False}


def test_a_failed_or_missing_cell_keeps_nothing(tmp_path):
    path = _notebook(tmp_path)
    assert nbval_capture.written(path, {0: RAN[0]}) is None                 # cell 1 not run
    assert nbval_capture.written(path, {0: RAN[0], 1: (RAN[1][0], False)}) is None
