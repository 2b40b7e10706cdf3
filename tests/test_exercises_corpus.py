"""Learners' submissions (``learner_corpus``) get the verdict they deserve, whatever the seed.

In-process through the engine's bare path (no worker, no watch): these test the cases, the
tolerances and the mistake recognition, not the sandbox.
"""

from __future__ import annotations

import pytest
from learner_corpus import CORPUS, GENERIC

from course_lib.toolkit.checking._engine import run_check
from course_lib.toolkit.checking._registry import registry

FLIP_SEEDS = 100
EXERCISES = list(registry().values())


pytestmark = pytest.mark.usefixtures("one_thread")


def _verdict(ex, fn, seed):
    result = run_check(ex, fn, seed=seed, isolate=False, watch=False)
    return "pass" if result.passed else result.mistake


@pytest.mark.parametrize("exercise_id, want, fn", CORPUS,
                         ids=[f"{e}-{f.__name__}" for e, _, f in CORPUS])
def test_each_submission_gets_its_verdict(exercise_id, want, fn):
    assert _verdict(registry()[exercise_id], fn, seed=0) == want


def test_most_wrong_submissions_get_a_specific_diagnosis():
    wrong = [(e, fn) for e, want, fn in CORPUS if want != "pass"]
    specific = [fn.__name__ for e, fn in wrong
                if _verdict(registry()[e], fn, seed=1) not in GENERIC | {"pass"}]
    assert len(specific) >= 0.8 * len(wrong), (len(specific), len(wrong))


@pytest.mark.slow
@pytest.mark.parametrize("ex", EXERCISES, ids=[e.id for e in EXERCISES])
def test_no_verdict_flips_across_100_seeds(ex):
    """The solution, every declared mistake and every corpus submission: one verdict each."""
    subjects = [("solution", ex.solution), *((m.id, m.fn) for m in ex.mistakes),
                *((f.__name__, f) for e, _, f in CORPUS if e == ex.id)]
    flips = {}
    for name, fn in subjects:
        verdicts = {}
        for seed in range(FLIP_SEEDS):
            verdicts.setdefault(_verdict(ex, fn, seed), seed)
        if len(verdicts) > 1:
            flips[name] = verdicts          # verdict -> first seed that gave it
    assert not flips, flips
