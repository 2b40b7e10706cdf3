"""tools/book_cells.py: the HTML book shows code cells without nbval's scaffolding comments
(issue 45, item 2), in the wording the learner's workbook uses (``workbook.for_readers``)."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from course_lib.toolkit.workbook import for_readers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))


def test_for_readers_drops_or_rewords_only_the_first_line():
    widget = "# output not compared by nbval: widget model ids are new on every run\nshow()\n"
    assert for_readers(widget) == "show()\n"
    timing = "# machine-dependent (output not compared by nbval): live timings of this CPU\nx\n"
    assert for_readers(timing) == "# machine-dependent: live timings of this CPU\nx\n"
    plain = "x = 1  # output not compared by nbval is not a first line\n"
    assert for_readers(plain) == plain
    assert for_readers("y\n" + widget) == "y\n" + widget      # only the first line is scaffolding


@pytest.mark.slow
def test_the_built_page_shows_the_readers_wording(tmp_path):
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        "extensions = ['myst_nb', 'book_cells']\nnb_execution_mode = 'off'\n")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Page"),
        nbformat.v4.new_code_cell("# output not compared by nbval: widget model ids are new "
                                  "on every run\nexplorer.show()"),
        nbformat.v4.new_code_cell("# machine-dependent (output not compared by nbval): live "
                                  "timings of this CPU\ntime_it()"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, src / "index.ipynb")
    app = Sphinx(str(src), str(src), str(tmp_path / "out"), str(tmp_path / "doctrees"), "html",
                 status=None, warning=None, freshenv=True)
    app.build()
    html = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert "explorer" in html and "time_it" in html
    assert "nbval" not in html
    assert "machine-dependent: live timings of this CPU" in html
