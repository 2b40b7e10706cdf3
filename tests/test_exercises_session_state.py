"""Nothing a check does changes the learner's session (issue 51): the first check imports every
chapter's exercises and generates cases (chapter 11's warm up eager flex), every check computes
cases, the oracle's answers and, on a failure, the declared mistakes' and the probes' outputs in
the learner's process. Torch's flags, the warnings filters and the environment must be as they
were, around the first check and around each exercise's check.

Run in a fresh interpreter (the session a learner has), with ``check`` as a learner calls it:
each learner function runs in the check's worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(r'''
    import json, os, sys, warnings
    import torch
    import torch.nn.attention.flex_attention as fa

    def state():
        return {
            # chapter 9's own setup, see ALLOWED_ENV below
            "environ": {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
            "filters": [repr(f) for f in warnings.filters],
            "flex_debug": fa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG,
            "default_dtype": str(torch.get_default_dtype()),
            "grad": torch.is_grad_enabled(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "threads": torch.get_num_threads(),
            "matmul_precision": torch.get_float32_matmul_precision(),
            "mkldnn": torch.backends.mkldnn.enabled,
            "rng": torch.random.get_rng_state().sum().item(),
        }

    from course_lib import exercises
    from course_lib.toolkit.checking._registry import registry

    def wrong(*args, **kwargs):     # an attempt: the cases are generated and run
        return torch.zeros(1)

    changed = {}
    before = state()
    first = exercises.check("document_attention", wrong, seed=0, record=False)
    after = state()
    changed["first check"] = {k: (str(before[k])[:300], str(after[k])[:300])
                              for k in before if before[k] != after[k]}
    only = sys.argv[1:]
    for ex in registry().values():
        if only and ex.id not in only:
            continue
        before = state()
        exercises.check(ex.id, wrong, seed=0, record=False)
        after = state()
        changed[ex.id] = {k: (str(before[k])[:300], str(after[k])[:300])
                          for k in before if before[k] != after[k]}
    print(json.dumps({"first": first.mistake, "changed": changed}))
''')

#: Chapter 9's package sets ``TRITON_INTERPRET=1`` when it is imported without a GPU: Triton reads
#: it when a kernel is defined, so it must be set before any is (the chapter's own setup, which
#: the first check's import of every chapter runs). The one change a check's import may make; the
#: script leaves it out of the environment it compares.
ALLOWED_ENV = ("TRITON_INTERPRET",)


def _run(*ids: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *ids], capture_output=True, text=True,
                          timeout=900, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                            "HOME": "/nonexistent",
                                            "COURSE_LIB_PROGRESS": "/nonexistent/progress"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _unexpected(changed: dict) -> dict:
    return {where: diff for where, diff in changed.items() if diff}


def test_the_first_check_and_chapter_11s_checks_leave_the_session_as_it_was():
    result = _run("document_attention", "softcap_attention", "softmax", "ring_step")
    assert result["first"] == "wrong_shape"     # the check ran its cases
    assert not _unexpected(result["changed"]), result["changed"]


@pytest.mark.slow
def test_every_exercise_check_leaves_the_session_as_it_was():
    result = _run()
    assert not _unexpected(result["changed"]), result["changed"]
