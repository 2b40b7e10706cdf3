"""The first check in a fresh session passes a right solution (chapter 11's two flex exercises).

In a fresh interpreter nothing of eager flex is imported yet, and the check's worker is forked
before the cases (whose generator warms flex) are made. Flex was then first imported in the
worker, inside the exercise's ``around_call``, while the worker's reporting trace was in force:
the ``namedtuple`` code the import compiles from a string (``<string>``, which no file vouches
for) was refused as the learner's, and a right solution of ``document_attention`` or
``softcap_attention`` was reported as "tampering" on the first check only (the second found
flex imported by the first check's cases). The extension now warms flex before the fork
(``CallExtension.warm``). Run as a learner does: the function defined in a notebook cell,
``exercises.check`` called once, in a process of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from course_lib.toolkit.checking import _isolation

pytestmark = pytest.mark.skipif(not _isolation.fork_available(), reason="needs os.fork (Linux)")

SCRIPT = textwrap.dedent(r'''
    import json, sys
    import torch
    from course_lib import exercises

    cell = exercises.solution(sys.argv[1])          # the notebook's solution cell, as text
    ns = {"torch": torch}
    exec(compile("import math\n" + cell, "/tmp/ipykernel_0/1234567.py", "exec"), ns)
    fn = ns[exercises.get_exercise(sys.argv[1]).function_name]
    first = exercises.check(sys.argv[1], fn, seed=0, record=False)
    print(json.dumps({"passed": first.passed, "status": first.status,
                      "mistake": first.mistake, "message": first.message}))
''')


def _first_check(exercise_id: str, tmp_path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "COURSE_LIB_PROGRESS": str(tmp_path / "progress.json")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, exercise_id], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("exercise_id", ["document_attention", "softcap_attention"])
def test_a_flex_solution_passes_its_first_check_in_a_fresh_session(exercise_id, tmp_path):
    first = _first_check(exercise_id, tmp_path)
    assert first["passed"] and first["status"] == "passed", first
    assert first["mistake"] is None, first


@pytest.mark.slow
def test_a_flex_solution_passes_in_a_grading_worker(tmp_path):
    """A grading worker is forked from a program of its own (``ForkServer``), which generates no
    cases: nothing there had imported flex, and every check of a right solution was refused as
    tampering, not only the first. The server now warms the extension too."""
    from course_lib import exercises
    from course_lib.toolkit.checking import _engine
    from course_lib.toolkit.checking._isolation import FileSource
    from course_lib.toolkit.checking._remote import ForkServer

    ex = exercises.get_exercise("document_attention")
    path = tmp_path / "submission.py"
    path.write_text("import math\nimport torch\n" + exercises.solution(ex.id))
    with ForkServer(cwd=str(tmp_path)) as server:
        result = _engine.run_check(ex, FileSource(str(path), ex.function_name), timeout=60,
                                   seed=0, launcher=server)
    assert result.passed and result.mistake is None, result.message
