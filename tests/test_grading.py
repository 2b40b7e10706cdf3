"""Grading a class: a synthetic class of learners' chapter-3 workbooks, graded twice.

The learners: right, wrong (a declared mistake), partly done, and malicious ones that loop
forever, exhaust memory, kill their kernel, write and delete files, edit the gradebook, read
another learner's submission, and look for the grading seed. Each changes nothing but its own
row, the row says why, and a second run writes the identical gradebook.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from course_lib import exercises
from course_lib.__main__ import main as cli
from course_lib.toolkit import grading, workbook
from course_lib.toolkit.grading import extract, report, sandbox, submissions
from course_lib.toolkit.grading.store import ResultCache

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "03_softmax"
IDS = [e["id"] for e in exercises.list_exercises() if e["chapter"] == CHAPTER]
# The cell limit of these gradings. The looping learner spins a core for this long. The other
# cells of chapter 3 take 2.8 s in all on an idle machine, the slowest 1.5 s (the imports; then a
# check, 0.6 s), so 20 s is 13 times that. Shell replies are polled in 1 s slices (kernel_polling),
# so a reply no longer waits out the limit under load, as it did when this was 45 s.
CELL_LIMIT = 20

RIGHT_SOFTMAX = """def softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(dim=dim, keepdim=True)
"""
NO_SHIFT_SOFTMAX = """def softmax(x, dim=-1):
    e = x.exp()
    return e / e.sum(dim=dim, keepdim=True)
"""
RIGHT_SELF_ATTENTION = exercises.solution("self_attention").replace(
    "self_attention_solution", "self_attention")


def _workbook_copy() -> dict:
    nb = json.loads((ROOT / "book" / f"{CHAPTER}.ipynb").read_text())
    return workbook.learner_copy(nb, CHAPTER)


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def _notebook(defs: dict[str, str], extra_cells: list[str] = (), first: str = "") -> dict:
    """The chapter's workbook with the starters of ``defs`` replaced, ``extra_cells`` at the end
    and ``first`` as a code cell after the setup cell."""
    nb = _workbook_copy()
    for cell in nb["cells"]:
        for name, body in defs.items():
            if cell["cell_type"] == "code" and _source(cell).startswith(f"def {name}("):
                cell["source"] = body
    for text in extra_cells:
        nb["cells"].append({"cell_type": "code", "metadata": {}, "source": text,
                            "outputs": [], "execution_count": None})
    if first:
        nb["cells"].insert(1, {"cell_type": "code", "metadata": {}, "source": first,
                               "outputs": [], "execution_count": None})
    return nb


def _write(folder: Path, name: str, nb: dict) -> Path:
    path = folder / f"{name}.ipynb"
    path.write_text(json.dumps(nb))
    return path


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> dict[str, Path]:
    """The class: submissions/, the outputs' folder, and a file 'outside' to protect."""
    base = tmp_path_factory.mktemp("grading")
    subs, outdir = base / "submissions", base / "out"
    subs.mkdir()
    outdir.mkdir()
    gradebook = outdir / "gradebook.csv"
    precious = base / "precious.txt"
    precious.write_text("instructor's file\n")
    alice = _write(subs, "alice", _notebook({"softmax": RIGHT_SOFTMAX,
                                             "self_attention": RIGHT_SELF_ATTENTION}))
    _write(subs, "bob", _notebook({"softmax": NO_SHIFT_SOFTMAX}))
    _write(subs, "carol", _notebook({"softmax": RIGHT_SOFTMAX}))            # partly done
    # Malicious learners. Each also defines a right softmax, so their row shows what was graded.
    _write(subs, "loops", _notebook({"softmax": RIGHT_SOFTMAX}, ["while True:\n    pass\n"]))
    _write(subs, "hog", _notebook({"softmax": RIGHT_SOFTMAX},     # over the 4 GiB cap
                                  ["hog = bytearray(6 * 1024 ** 3)\n"]))
    _write(subs, "killer", _notebook({"softmax": RIGHT_SOFTMAX},
                                     ["import os\nos.kill(os.getpid(), 9)\n"]))
    _write(subs, "vandal", _notebook({"softmax": RIGHT_SOFTMAX}, [
        f"import os, shutil\nopen({str(precious)!r}, 'w').write('gone')\n",
        f"os.remove({str(precious)!r})\n",
        f"shutil.rmtree({str(subs)!r})\n",
        f"open({str(gradebook)!r}, 'w').write('learner,softmax\\nvandal,1\\n')\n",
        "import subprocess\nsubprocess.run(['rm', '-rf', '/tmp/x'])\n"]))
    # Reads alice's notebook to copy her answer: in the kernel, and inside the graded function.
    _write(subs, "copycat", _notebook({
        "softmax": (f"_alice = open({str(alice)!r}).read()\n\n"
                    "def softmax(x, dim=-1):\n    assert _alice\n"
                    "    m = x.amax(dim=dim, keepdim=True)\n    e = (x - m).exp()\n"
                    "    return e / e.sum(dim=dim, keepdim=True)\n")},
        [f"print(open({str(alice)!r}).read()[:10])\n"]))
    # Looks for the grading seed where a grader might leave it, and edits the gradebook from the
    # function the checker loads.
    _write(subs, "snoop", _notebook({
        "softmax": ("import os, glob\n"
                    "_seen = [k for k in os.environ if 'SEED' in k.upper()]\n"
                    f"_book = open({str(gradebook)!r}, 'a')\n\n"
                    "def softmax(x, dim=-1):\n    _book.write('snoop,1\\n')\n"
                    "    m = x.amax(dim=dim, keepdim=True)\n    e = (x - m).exp()\n"
                    "    return e / e.sum(dim=dim, keepdim=True)\n")},
        ["import os\nprint(sorted(k for k in os.environ if 'SEED' in k.upper()))\n"
         "print(open(f'/proc/{os.getppid()}/cmdline').read())\n"]))
    return {"subs": subs, "out": outdir, "gradebook": gradebook, "precious": precious}


def _grade(klass, **kw):
    out = klass["out"]
    learners = sorted(klass["subs"].glob("*.ipynb"))    # what `grade submissions/*` passes
    return grading.grade(learners, klass["gradebook"], log=out / "attempts.csv",
                         feedback=out / "feedback", jobs=2, progress=False,
                         cell_timeout=CELL_LIMIT, notebook_timeout=400, **kw)


def _rows(gradebook: Path) -> dict[str, dict[str, str]]:
    with gradebook.open(newline="") as f:
        return {r["learner"]: r for r in csv.DictReader(f)}


@pytest.mark.slow
def test_a_class_is_graded_exactly_safely_and_reproducibly(klass, monkeypatch, tmp_path):
    """One flow (one grading of nine notebooks is the expensive part): the gradebook, the
    malicious learners' rows, the attempt log, feedback, summary, and the second run."""
    record = tmp_path / "instructor" / "progress.sqlite3"
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(record))   # whose record a check would use
    cache = klass["out"] / "cache.sqlite3"
    run = _grade(klass, cache=cache)
    assert not record.exists(), "grading recorded checks in a progress record"
    first = klass["gradebook"].read_bytes()
    rows = _rows(klass["gradebook"])
    assert list(rows) == sorted(["alice", "bob", "carol", "loops", "hog", "killer", "vandal",
                                 "copycat", "snoop"])
    assert list(next(iter(rows.values()))) == ["learner", *IDS, "total", "status"]
    want = {  # learner: (softmax, self_attention, how the notebook ran)
        "alice": ("1", "1", "ran"), "bob": ("0", "", "ran"), "carol": ("1", "", "ran"),
        "loops": ("1", "", "timeout"), "hog": ("1", "", "raised"),
        "killer": ("1", "", "crashed"), "vandal": ("1", "", "raised"),
        "copycat": ("0", "", "raised"), "snoop": ("0", "", "raised")}
    for learner, (soft, attn, status) in want.items():
        row = rows[learner]
        assert (row["softmax"], row["self_attention"]) == (soft, attn), (learner, row)
        assert row["status"].split(": ", 1)[1].startswith(status), (learner, row["status"])
        assert row["total"] == str([soft, attn].count("1"))
    # the cell's limit, named as such (nbclient's CellTimeoutError is also a TimeoutError)
    assert f"ran over {CELL_LIMIT} s" in rows["loops"]["status"], rows["loops"]["status"]
    assert "notebook" not in rows["loops"]["status"], rows["loops"]["status"]
    assert "kernel died" in rows["killer"]["status"]

    # Nothing outside a row changed: the instructor's file, the other submissions.
    assert klass["precious"].read_text() == "instructor's file\n"
    assert len(list(klass["subs"].glob("*.ipynb"))) == 9
    log = {(r["learner"], r["exercise"]): r
           for r in csv.DictReader((klass["out"] / "attempts.csv").open(newline=""))}
    ns: dict = {}
    exec(NO_SHIFT_SOFTMAX, ns)      # what the checker itself says of bob's function
    own = exercises.check("softmax", ns["softmax"], seed=grading.DEFAULT_SEED, record=False)
    assert own.mistake and not own.passed
    assert log["bob", "softmax"]["verdict"] == "failed"
    assert log["bob", "softmax"]["mistake"] == own.mistake
    assert log["bob", "softmax"]["message"] == own.message
    assert "not allowed" in log["copycat", "softmax"]["message"]      # reading alice's file
    assert "not allowed" in log["snoop", "softmax"]["message"]        # editing the gradebook
    assert log["carol", "self_attention"]["verdict"] == "not_attempted"
    feedback = (klass["out"] / "feedback" / "bob.md").read_text()
    assert "✗ `softmax`" in feedback and own.message.strip() in feedback
    line = next(x for x in run.summary.splitlines() if x.startswith("| softmax"))
    assert "6/9" in line and "67%" in line, line      # alice carol loops hog killer vandal

    # The second run: from the cache, the identical file; graded anew, the identical rows.
    again = _grade(klass, cache=cache)
    assert again.graded == 0, ("every notebook should come from the cache", again.cache_errors,
                               sorted(p.name for p in klass["out"].iterdir()))
    assert klass["gradebook"].read_bytes() == first
    subset = [klass["subs"] / f"{n}.ipynb" for n in ("alice", "bob", "carol")]
    out = klass["out"] / "fresh.csv"
    grading.grade(subset, out, jobs=2, progress=False, cell_timeout=CELL_LIMIT,
                  notebook_timeout=400, cache=None)
    fresh = out.read_text().splitlines()
    assert fresh[0] == first.decode().splitlines()[0]
    assert fresh[1:] == [x for x in first.decode().splitlines()[1:]
                         if x.split(",", 1)[0] in ("alice", "bob", "carol")]


@pytest.mark.slow
def test_cli_grades_one_late_submission_only(tmp_path, capsys):
    subs = tmp_path / "late"
    subs.mkdir()
    nb = _notebook({"softmax": RIGHT_SOFTMAX})
    nb["metadata"]["course_lib"]["learner"] = "dana"       # metadata names the learner
    _write(subs, "whatever-name", nb)
    out = tmp_path / "book.csv"
    assert cli(["grade", str(subs), "--out", str(out), "--jobs", "1"]) == 0
    first = capsys.readouterr().out
    assert "1 run now" in first and "| softmax" in first
    assert _rows(out)["dana"]["softmax"] == "1"
    # A late notebook in the same folder (no metadata: its learner is the folder's name).
    _write(subs, "late2", _notebook({"softmax": NO_SHIFT_SOFTMAX}))
    assert cli(["grade", str(subs), "--out", str(out), "--jobs", "1"]) == 0
    assert "1 run now" in capsys.readouterr().out       # dana's came from the cache
    rows = _rows(out)
    assert rows["dana"]["softmax"] == "1" and rows["late"]["softmax"] == "0"
    assert cli(["grade", str(tmp_path / "missing.ipynb"), "--out", str(out)]) == 2


# --------------------------------------------------------------------------- fast unit tests


def test_extract_keeps_what_the_functions_use_and_drops_the_rest():
    nb = {"cells": [
        {"cell_type": "code", "source": "import torch\n%matplotlib inline\nSCALE = 2\n"},
        {"cell_type": "code", "source": "def helper(x):\n    return x * SCALE\n"},
        {"cell_type": "code", "source": "plot(helper(3))\nfor i in range(3):\n    pass\n"},
        {"cell_type": "code", "source": "def softmax(x, dim=-1):\n    return helper(x)\n"},
        {"cell_type": "code", "source": "UNUSED = expensive()\n"},
        {"cell_type": "code", "source": "def broken(:\n"}]}
    m = extract.learner_module(nb, {"softmax", "broken", "absent"})
    ns: dict = {}
    exec(m.source, ns)
    assert ns["softmax"](3) == 6 and "UNUSED" not in ns and "plot" not in m.source
    assert m.defined == {"softmax"}
    assert "syntax error" in m.syntax_errors["broken"] and "absent" not in m.syntax_errors


def test_submissions_name_learners_by_file_folder_or_metadata(tmp_path):
    (tmp_path / "amy").mkdir()
    nb = {"cells": [], "metadata": {}}
    (tmp_path / "amy" / "03_softmax.ipynb").write_text(json.dumps(nb))
    (tmp_path / "ben.ipynb").write_text(json.dumps(nb))
    nb["metadata"]["course_lib"] = {"learner": "cy"}
    (tmp_path / "x.ipynb").write_text(json.dumps(nb))
    found = submissions.discover([tmp_path / "amy", tmp_path / "ben.ipynb", tmp_path / "x.ipynb"])
    assert [s.learner for s in found] == ["amy", "ben", "cy"]
    with pytest.raises(submissions.SubmissionError, match="not a notebook"):
        submissions.discover([tmp_path / "nope.txt"])
    table = {"softmax": "03_softmax"}
    assert submissions.chapter_of({"cells": [{"source": 'exercises.check("softmax", f)'}]},
                                  Path("hw.ipynb"), table) == "03_softmax"


def test_fence_refuses_writes_reads_and_programs(tmp_path):
    fence = sandbox.Fence(writable=[tmp_path / "mine"], hidden=[tmp_path / "others"])
    (tmp_path / "mine").mkdir()
    fence("open", (str(tmp_path / "mine" / "a.txt"), "w", 0))
    fence("open", ("/etc/hostname", "r", 0))
    for event, args in [("open", (str(tmp_path / "x.txt"), "w", 0)),
                        ("open", (str(tmp_path / "others" / "a.ipynb"), "r", 0)),
                        ("os.remove", (str(tmp_path / "x.txt"), -1)),
                        ("shutil.rmtree", (str(tmp_path), None)),
                        ("os.listdir", (str(tmp_path / "others"),)),
                        ("subprocess.Popen", ("rm", ["rm"], None, None)),
                        ("os.kill", (1, 9))]:
        with pytest.raises(PermissionError, match="grading"):
            fence(event, args)


def test_gradebook_scores_best_notebook_and_blank_for_not_attempted():
    results = [
        {"learner": "a", "notebook": "1.ipynb", "chapter": "c", "status": "ran", "detail": "",
         "verdicts": [{"exercise": "e1", "verdict": "failed", "mistake": "m", "message": "",
                       "seconds": 0}, {"exercise": "e2", "verdict": "not_attempted",
                                       "mistake": "", "message": "", "seconds": 0}]},
        {"learner": "a", "notebook": "2.ipynb", "chapter": "c", "status": "ran", "detail": "",
         "verdicts": [{"exercise": "e1", "verdict": "passed", "mistake": "", "message": "",
                       "seconds": 0}]}]
    text = report.gradebook_csv(results, ["e1", "e2"])
    assert text.splitlines() == ["learner,e1,e2,total,status",
                                 "a,1,,1,1.ipynb: ran; 2.ipynb: ran"]
    assert "m (1)" in report.summary_markdown(results, ["e1", "e2"])


def test_result_cache_sets_a_damaged_file_aside(tmp_path):
    path = tmp_path / "cache.sqlite3"
    path.write_bytes(b"not a database at all" * 100)
    cache = ResultCache(path)
    cache.put("k", {"v": 1})
    assert cache.get("k") == {"v": 1}
    cache.close()
    assert list(tmp_path.glob("cache.sqlite3.damaged-*"))
