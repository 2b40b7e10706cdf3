"""Grading fast (issue 53): the checks alone when the extraction is certain, warm grading
processes. No class is graded here: the modes' verdicts are compared on a class in
``test_grading_cluster.py``; the time split is measured by ``bench/grade_class.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from course_lib.toolkit import grading, workbook
from course_lib.toolkit.checking import registry
from course_lib.toolkit.grading import extract, runner
from course_lib.toolkit.grading.job import Job

ROOT = Path(__file__).resolve().parent.parent


def _nb(*cells: str) -> dict:
    return {"cells": [{"cell_type": "code", "source": c} for c in cells]}


HELPER = "SCALE = 2\ndef helper(x):\n    return x * SCALE\n"
SOFTMAX = "def softmax(x):\n    try:\n        return helper(x)\n    except Exception as e:\n" \
          "        raise e\n"


def test_certain_when_dropped_statements_touch_nothing_the_functions_need():
    nb = _nb("import torch\n%matplotlib inline\n", HELPER, SOFTMAX,
             "for e in range(3):\n    print(softmax(e))\n", "%%time\nsoftmax(1)\n",
             "def broken(:\n")
    assert extract.uncertain(nb, {"softmax"}) is None
    assert extract.uncertain(_nb(SOFTMAX), {"softmax"}) is None   # a NameError either way


@pytest.mark.parametrize("cell, why", [
    ("from helpers import *\n", "import *"),
    ("exec('SCALE = 3')\n", "exec"),
    ("globals()['SCALE'] = 3\n", "globals"),
    ("%run helpers.py\n", "magic"),
    ("for SCALE in range(3):\n    pass\n", "`SCALE` is changed"),
    ("del SCALE\n", "`SCALE` is changed"),
])
def test_uncertain_names_the_reason(cell, why):
    assert why in (extract.uncertain(_nb(HELPER, cell, SOFTMAX), {"softmax"}) or "")


def test_every_chapters_untouched_workbook_is_certain():
    chapters = {e.chapter for e in registry().values()}
    for chapter in sorted(chapters):
        nb = workbook.learner_copy(json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text()),
                                   chapter)
        names = {e.function_name for e in registry().values() if e.chapter == chapter}
        assert extract.uncertain(nb, names) is None, chapter


def test_run_mode_is_checked():
    with pytest.raises(ValueError, match="run must be one of"):
        grading.grade([], "/nonexistent/gb.csv", run="cells", progress=False)


def _job(tmp_path: Path, name: str, **kw) -> Job:
    nb = _nb("import time\ntime.sleep(60)\n")
    return Job(notebook=f"{name}.ipynb", learner=name, chapter="03_softmax", exercises=[],
               seed=1, workdir=str(tmp_path / name), source=json.dumps(nb),
               sandboxed=False, **kw)


@pytest.mark.slow
def test_a_warm_process_grades_one_notebook_after_another_and_dies_with_a_time_out(tmp_path):
    try:
        first, _ = runner.run_job(_job(tmp_path, "a", run="functions"), 120)
        proc = runner._LOCAL.proc
        second, _ = runner.run_job(_job(tmp_path, "b", run="functions"), 120)
        assert (first["status"], second["status"]) == ("checked", "checked")
        assert runner._LOCAL.proc is proc and proc.jobs == 2     # one process, two notebooks
        # The whole notebook, run over the limit: this row times out, the process is gone and
        # the next notebook gets a fresh one.
        late, _ = runner.run_job(_job(tmp_path, "c", run="all"), 1.0)
        assert late["status"] == "timeout" and "over 1 s" in late["detail"]
        assert proc.proc.poll() is not None and not proc.folder.exists()
        with pytest.raises(ProcessLookupError):
            os.killpg(proc.proc.pid, 0)                          # nothing it started lives
        third, _ = runner.run_job(_job(tmp_path, "d", run="functions"), 120)
        assert third["status"] == "checked" and runner._LOCAL.proc is not proc
    finally:
        runner.stop_all()
