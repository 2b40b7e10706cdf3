"""The learner's workbook: chapters without solutions, answers folded, edits never overwritten."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib import exercises
from course_lib.__main__ import main
from course_lib.toolkit import workbook

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


def test_the_workbook_contains_no_solution_code(written):
    solution_lines = set()
    for name in CHAPTERS:
        for c in _cells(BOOK / name):
            if "solution" in c.get("metadata", {}).get("tags", []):
                solution_lines |= {ln.strip() for ln in _text(c).splitlines()
                                   if len(ln.strip()) > 25 and not ln.strip().startswith("#")}
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
            [_text(c).split("\n")[0] for c in source if c["cell_type"] == "code"]
        checks = [c for c in cells if c["cell_type"] == "code"
                  and _text(c).startswith("exercises.check(")]
        assert checks and all(c["outputs"] == [] and c["execution_count"] is None
                              for c in checks)
        assert any(c.get("outputs") for c in cells if c["cell_type"] == "code")  # figures stay


def test_check_yourself_answers_are_folded(written):
    text = "\n".join(_text(c) for c in _cells(written / "03_softmax.ipynb")
                     if c["cell_type"] == "markdown")
    assert "{dropdown}" not in text and "{eq}" not in text and "{term}" not in text
    assert text.count("<details><summary>Answer</summary>") == 6
    assert text.count("</details>") == 6
    assert "   <details><summary>Answer</summary>\n\n   Shift invariance (softmax-shift)" in text
    for name in CHAPTERS:
        assert "{dropdown}" not in json.dumps(_cells(written / name)), name


def test_dropdown_conversion_details():
    md = ("1. Q?\n\n   ```{dropdown} Why\n   :open:\n   body with {term}`score <sc>`,\n"
          "   ```python\n   code\n   ```\n   end {cite:p}`k`\n   ```\n\nafter")
    out = workbook._plain_roles(workbook._dropdowns_to_details(md))
    assert out == ("1. Q?\n\n   <details><summary>Why</summary>\n\n   body with score,\n"
                   "   ```python\n   code\n   ```\n   end [k]\n\n   </details>\n\nafter")
    with pytest.raises(workbook.WorkbookError, match="unclosed"):
        workbook._dropdowns_to_details("```{dropdown}\nnever closed")


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
