"""The engine's verdict on a function, computed in the test's own process."""

from __future__ import annotations

from typing import Any

from course_lib import exercises
from course_lib.toolkit.checking._engine import run_check


def diagnosed(exercise_id: str, fn: Any, seed: int) -> Any:
    """``run_check`` on ``fn`` with no forked worker and no watch.

    For tests that assert a diagnosis (which mistake, which advice): the engine makes it from the
    values ``fn`` returned, the same values wherever ``fn`` ran. In the worker a Triton check is
    4-5 times slower: the watch's call trace meets each of the interpreter's Python calls (a
    forward check of the solution on a 2-core AMD EPYC VM: 0.56-0.89 s here, 2.7-3.3 s in the
    worker; the backward one 0.74-0.78 s and 3.4-4.2 s). What the worker adds (refusals, the
    watch, the report channel) is tested through ``exercises.check``, and the Triton tests'
    ``test_the_worker_names_the_same_mistake_*`` show a diagnosis does not change on the way."""
    return run_check(exercises.get_exercise(exercise_id), fn, seed=seed, isolate=False,
                     watch=False)
