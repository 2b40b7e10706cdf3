"""The learner's workbook: chapters without solutions or test scaffolding, numbered and linked like
the book, edits never overwritten."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib import exercises
from course_lib.__main__ import main
from course_lib.toolkit import workbook
from course_lib.toolkit.book_refs import build_index

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CHAPTERS = sorted(p.name for p in BOOK.glob("[0-9][0-9]_*.ipynb"))


def _cells(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))["cells"]


def _text(cell):
    return "".join(cell["source"])


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    dest = tmp_path_factory.mktemp("wb") / "workbook"
    report = workbook.write_workbook(dest, source=BOOK)
    assert sorted(report.written) == CHAPTERS
    return dest


def test_every_solution_cell_is_tagged_in_the_sources():
    ids_by_chapter: dict[str, int] = {}
    for e in exercises.list_exercises():
        ids_by_chapter[e["chapter"]] = ids_by_chapter.get(e["chapter"], 0) + 1
    for name in CHAPTERS:
        tagged = [c for c in _cells(BOOK / name)
                  if "solution" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == ids_by_chapter[name[:-6]], name
        assert all("_solution(" in _text(c) and "exercises.check(" in _text(c) for c in tagged)


def _code_lines(cell) -> set[str]:
    return {ln.strip() for ln in _text(cell).splitlines()
            if len(ln.strip()) > 25 and not ln.strip().startswith("#")}


def test_the_workbook_contains_no_solution_code(written):
    # A solution's line that the book also shows outside any solution (the kernel signature a
    # starter gives, an import the chapter's own code makes) gives nothing away.
    solution_lines, given = set(), set()
    for name in CHAPTERS:
        for c in _cells(BOOK / name):
            if "solution" in c.get("metadata", {}).get("tags", []):
                solution_lines |= _code_lines(c)
            elif c["cell_type"] == "code":
                given |= _code_lines(c)
    solution_lines -= given
    assert len(solution_lines) > 20
    for name in CHAPTERS:
        cells = _cells(written / name)
        code = "\n".join(_text(c) for c in cells if c["cell_type"] == "code")
        assert "_solution" not in code, name
        leaked = [ln for ln in solution_lines if ln in code]
        assert not leaked, (name, leaked)
        assert not any("solution" in c.get("metadata", {}).get("tags", []) for c in cells)


def test_starters_and_checks_stay_with_their_outputs_cleared(written):
    for name in CHAPTERS:
        source = [c for c in _cells(BOOK / name)
                  if "solution" not in c.get("metadata", {}).get("tags", [])]
        cells = _cells(written / name)
        assert [_text(c).split("\n")[0] for c in cells if c["cell_type"] == "code"] == \
            [workbook.for_readers(_text(c)).split("\n")[0]
             for c in source if c["cell_type"] == "code"]
        checks = [c for c in cells if c["cell_type"] == "code"
                  and _text(c).startswith("exercises.check(")]
        assert checks and all(c["outputs"] == [] and c["execution_count"] is None
                              for c in checks)
        assert any(c.get("outputs") for c in cells if c["cell_type"] == "code")  # figures stay


def test_check_yourself_answers_stay_dropdowns_and_roles_become_markdown(written):
    """jupyterlab-myst renders {dropdown} and {admonition} (tests/browser/test_workbook_lab.py);
    what it cannot resolve in a lone notebook is converted."""
    text = "\n".join(_text(c) for c in _cells(written / "03_softmax.ipynb")
                     if c["cell_type"] == "markdown")
    assert text.count("```{dropdown} Answer") == 6 and "```{admonition} Learning goals" in text
    for role in ("{term}", "{cite", "{doc}", "{numref}"):
        assert role not in text, role
    assert "$$ (" not in text and ":enumerator: 3.1" in text
    for name in CHAPTERS:
        prose = "\n".join(_text(c) for c in _cells(written / name) if c["cell_type"] == "markdown")
        assert not re.search(r"\{(cite(:[pt])?|doc|term|numref)\}`", prose), name
        assert not re.search(r"^\s*\$\$.*\(\S+\)\s*$", prose, re.M), name


BOOK_MD = """# Chapter one

(sec-first)=
## First

$$
a = b
$$ (eq-a)

$$
c = d
$$

1. Item

   $$
   e = f
   $$ (eq-b)

```python
## not a section
$$
not math
$$ (eq-no)
```

(sec-second)=
## Second

See {eq}`eq-b`, {eq}`eq-other`, {numref}`sec-second`, {numref}`Figure %s <fig-x>`,
{ref}`sec-first`, {ref}`the start <sec-first>`, {doc}`02_two`, {doc}`chapter two <02_two>`,
{cite}`dao2022flash`, {cite:t}`dao2022flash`, {cite:p}`solo2020,dao2022flash`,
{term}`scores <score>`, {term}`online softmax`.
"""
BIB = """@article{dao2022flash, author = {Dao, Tri and Fu, Daniel Y. and Ermon, Stefano},
  title = {FlashAttention}, year = {2022}}
@misc{solo2020, author = {Tri Dao}, title = {Solo}, year = {2020}}
"""
TOC = """format: jb-book
root: book/intro
parts:
- numbered: true
  chapters:
  - file: book/02_two
  - file: book/01_one
- chapters:
  - file: book/references
"""


def _mini_book(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    one = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": BOOK_MD},
                     {"cell_type": "code", "metadata": {"mystnb": {"figure": {
                         "caption": "A figure.", "name": "fig-x"}}}, "outputs": [],
                      "source": "plot()", "execution_count": None}],
           "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    two = {"cells": [{"cell_type": "markdown", "metadata": {},
                      "source": "# Two\n\n$$\nx\n$$ (eq-other)\n"}],
           "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (book / "01_one.ipynb").write_text(json.dumps(one))
    (book / "02_two.ipynb").write_text(json.dumps(two))
    (tmp_path / "_toc.yml").write_text(TOC)
    (tmp_path / "_config.yml").write_text(
        "repository:\n  url: https://github.com/someone/course\n")
    (tmp_path / "references.bib").write_text(BIB)
    return book


def test_the_writer_numbers_and_links_like_the_book(tmp_path):
    book = _mini_book(tmp_path)
    index = build_index(book)
    assert index.chapters == {"02_two": 1, "01_one": 2}          # _toc.yml order, not file names
    assert index.base_url == "https://someone.github.io/course/"
    assert {k: t.number for k, t in index.targets.items()} == {
        "eq-a": "2.1", "eq-b": "2.2", "eq-other": "1.1", "sec-first": "2.1",
        "sec-second": "2.2", "fig-x": "2.1"}
    assert index.citations == {"dao2022flash": ("Dao et al.", "2022"), "solo2020": ("Dao", "2020")}

    nb = json.loads((book / "01_one.ipynb").read_text())
    out = _text(workbook.learner_copy(nb, "01_one.ipynb", index)["cells"][0])
    base = "https://someone.github.io/course/book/"
    assert "```{math}\n:label: eq-a\n:enumerator: 2.1\na = b\n```" in out
    assert "```{math}\n:enumerated: false\nc = d\n```" in out
    assert ("   ```{math}\n   :label: eq-b\n   :enumerator: 2.2\n   e = f\n   ```") in out
    assert "$$\nnot math\n$$ (eq-no)" in out                   # code blocks are left alone
    # another chapter: the learner's own copy beside this one, not the website
    assert "See {eq}`eq-b`, [(1.1)](02_two.ipynb), " in out
    assert "[Section 2.2](#sec-second), Figure 2.1,\n" in out
    assert "[First](#sec-first), [the start](#sec-first), " in out
    assert "[Two](02_two.ipynb), [chapter two](02_two.ipynb),\n" in out
    dao, solo = f"{base}references.html#cite-dao2022flash", f"{base}references.html#cite-solo2020"
    assert (f"([Dao et al., 2022]({dao})), [Dao et al. (2022)]({dao}), "
            f"([Dao, 2020]({solo}); [Dao et al., 2022]({dao})),\n") in out
    assert (f"[scores]({base}glossary.html#term-score), "
            f"[online softmax]({base}glossary.html#term-online-softmax).") in out


def test_the_numbers_are_those_of_the_built_book():
    """Against the HTML of a built book (``make book``); skipped where none is built."""
    html = ROOT / "_build" / "html" / "book"
    if not (html / "intro.html").is_file():
        pytest.skip("no built book in _build/html")
    index = build_index(BOOK)
    checked = 0
    for label, target in index.targets.items():
        anchor = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
        page = (html / f"{target.doc}.html").read_text(encoding="utf-8")
        if target.kind == "eq":
            m = re.search(rf'id="equation-{anchor}">.*?class="eqno">\(([\d.]+)\)', page, re.S)
        else:
            m = re.search(rf'href="(?:{target.doc}\.html)?#{anchor}"><span class="std '
                          rf'std-numref">(?:Fig\.|Section) ([\d.]+)', page)
        if m is None and target.kind != "eq":
            continue                                   # a figure or section nobody numrefs
        assert m is not None and m.group(1) == target.number, (label, target)
        checked += 1
    assert checked > 40


def test_test_scaffolding_and_dead_widgets_leave_the_learner_copy(written):
    from course_lib.toolkit.explorer import LIVE_FALLBACK

    explorers = 0
    for name in CHAPTERS:
        book = {c.get("id"): c for c in _cells(BOOK / name)}
        for cell in _cells(written / name):
            if cell["cell_type"] != "code":
                continue
            assert "nbval" not in _text(cell).split("\n", 1)[0]
            outputs = json.dumps(cell["outputs"])
            assert workbook.WIDGET_VIEW not in outputs and "VBox(" not in outputs
            source = _text(book[cell["id"]])
            if source.startswith("# machine-dependent (output not compared by nbval): "):
                assert "nbval-ignore-output" in cell["metadata"]["tags"]
                assert _text(cell) == "# machine-dependent: " + source.split(": ", 1)[1]
            if source.startswith("# output not compared by nbval: widget"):
                assert "nbval-ignore-output" in cell["metadata"]["tags"]
                assert _text(cell) == source.split("\n", 1)[1]
                if cell["outputs"]:       # one line per explorer (chapter 10's cell has two)
                    assert cell["outputs"] == [{"output_type": "display_data", "metadata": {},
                                                "data": {"text/plain": LIVE_FALLBACK}}
                                               ] * len(cell["outputs"])
                    explorers += len(cell["outputs"])
    assert explorers >= 10


def test_a_live_explorer_falls_back_to_a_run_this_cell_line():
    from course_lib.toolkit.explorer import LIVE_FALLBACK, Control, Explorer

    ui = Explorer(draw=lambda fig, a: None, controls={"a": Control("a", [1, 2])}).live()
    bundle = ui._repr_mimebundle_()
    assert bundle["text/plain"] == LIVE_FALLBACK == "Run this cell to show the live explorer."
    assert workbook.WIDGET_VIEW in bundle and "VBox" not in repr(bundle["text/plain"])


def test_an_untagged_solution_is_refused(tmp_path):
    nb = json.loads((BOOK / CHAPTERS[0]).read_text(encoding="utf-8"))
    for c in nb["cells"]:
        c.get("metadata", {}).get("tags", []).clear()
    (tmp_path / CHAPTERS[0]).write_text(json.dumps(nb))
    with pytest.raises(workbook.WorkbookError, match="not tagged 'solution'"):
        workbook.write_workbook(tmp_path / "out", source=tmp_path)


def test_edited_notebooks_are_never_overwritten(tmp_path, capsys):
    dest = tmp_path / "wb"
    assert main(["workbook", str(dest), "--source", str(BOOK)]) == 0
    assert f"{len(CHAPTERS)} written" in capsys.readouterr().out
    edited, ran, stale = (dest / n for n in CHAPTERS[:3])

    nb = json.loads(edited.read_text())
    starter = next(c for c in nb["cells"] if _text(c).startswith("def ") and "..." in _text(c))
    starter["source"] = ["def mine():\n", "    return 42\n"]
    edited.write_text(json.dumps(nb, indent=2))
    mine = edited.read_text()

    nb = json.loads(ran.read_text())                     # ran, not edited: outputs only
    nb["cells"][-2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["hi\n"]}]
    ran.write_text(json.dumps(nb))
    ran_text = ran.read_text()

    nb = json.loads(stale.read_text())                   # written by an older book version
    nb["cells"].pop(0)
    nb["metadata"]["course_lib"]["workbook"]["sources_sha256"] = workbook.sources_sha256(nb)
    stale.write_text(json.dumps(nb))

    assert main(["workbook", str(dest), "--source", str(BOOK)]) == 0
    out = capsys.readouterr().out
    assert f"kept {CHAPTERS[0]}: you have edited it" in out and "--force" in out
    assert "1 updated" in out and "1 kept as edited" in out
    assert edited.read_text() == mine and ran.read_text() == ran_text
    assert stale.read_text() == workbook.dumps(workbook.learner_copy(
        json.loads((BOOK / CHAPTERS[2]).read_text()), CHAPTERS[2]))     # updated to the book

    assert main(["workbook", str(dest), "--source", str(BOOK), "--force"]) == 0
    capsys.readouterr()
    assert "def mine()" not in edited.read_text()
    fresh = workbook.dumps(workbook.learner_copy(json.loads((BOOK / CHAPTERS[0]).read_text()),
                                                 CHAPTERS[0]))
    assert edited.read_text() == fresh


def test_sources_are_found_or_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert workbook.find_source() == ROOT / "book"
    with pytest.raises(workbook.WorkbookError, match="no chapter notebooks"):
        workbook.find_source(tmp_path)
    with pytest.raises(workbook.WorkbookError, match="must not be written over"):
        workbook.write_workbook(BOOK, source=BOOK)
    monkeypatch.setattr(workbook, "__file__", str(tmp_path / "x" / "workbook.py"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(workbook.WorkbookError, match="pass --source"):
        workbook.find_source()
    r = subprocess.run([sys.executable, "-m", "course_lib", "workbook", str(tmp_path / "w"),
                        "--source", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no chapter notebooks" in r.stderr


def test_figures_keep_their_numbered_captions(tmp_path):
    """Issue 45, item 4: the prose says "Figure 2.1"; the figure says it is Fig. 2.1."""
    book = _mini_book(tmp_path)
    index = build_index(book)
    nb = json.loads((book / "01_one.ipynb").read_text())
    cells = workbook.learner_copy(nb, "01_one.ipynb", index)["cells"]
    assert [c["cell_type"] for c in cells] == ["markdown", "code", "markdown"]
    assert _text(cells[2]) == "**Fig. 2.1.** A figure."
    assert cells[2]["metadata"] == {"course_lib": {"caption": True}}


def test_every_book_figure_is_captioned_in_the_workbook(written):
    for name in CHAPTERS:
        book_figures = [c for c in _cells(BOOK / name) if c["cell_type"] == "code"
                        and "solution" not in c["metadata"].get("tags", [])
                        and c["metadata"].get("mystnb", {}).get("figure", {}).get("caption")]
        cells = _cells(written / name)
        captions = [c for c in cells if c["metadata"].get("course_lib", {}).get("caption")]
        assert len(captions) == len(book_figures), name
        for cap in captions:
            i = cells.index(cap)
            assert cells[i - 1]["cell_type"] == "code"
            assert re.match(r"\*\*Fig\. \d+\.\d+\.\*\* \S", _text(cap)), _text(cap)[:60]
