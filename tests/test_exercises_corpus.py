"""Learners' submissions (``learner_corpus``) get the verdict they deserve, whatever the seed.

In-process through the engine's bare path (no worker, no watch): these test the cases, the
tolerances and the mistake recognition, not the sandbox.
"""

from __future__ import annotations

import os

import pytest
from learner_corpus import CORPUS, GENERIC

from course_lib.toolkit.checking._engine import run_check
from course_lib.toolkit.checking._registry import registry

#: ``make stats`` (``COURSE_LIB_STATS=full``): seeds 0-99; ``make test``: a sample, 0-29.
FLIP_SEEDS = 100 if os.environ.get("COURSE_LIB_STATS") == "full" else 30
#: The exercises learners' submissions are collected for.
WITH_SUBMISSIONS = [e for e in registry().values() if any(c[0] == e.id for c in CORPUS)]


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
@pytest.mark.parametrize("ex", WITH_SUBMISSIONS, ids=[e.id for e in WITH_SUBMISSIONS])
def test_no_verdict_flips_across_100_seeds(ex):
    """Every corpus submission: one verdict on seeds 0-99 (``make stats``; a sample in
    ``make test``).

    The same promise for the course's own code is kept by test_exercises_statistics, whose checks
    run these seeds: the reference solution passes on seeds 0-499, and every declared mistake gets
    one verdict on seeds 0-99."""
    subjects = [f for e, _, f in CORPUS if e == ex.id]
    verdicts: list[dict[str, int]] = [{} for _ in subjects]   # verdict -> first seed giving it
    for seed in range(FLIP_SEEDS):   # seed by seed, as the checks of one seed share work
        for fn, seen in zip(subjects, verdicts, strict=True):
            seen.setdefault(_verdict(ex, fn, seed), seed)
    flips = [(fn.__name__, seen) for fn, seen in zip(subjects, verdicts, strict=True)
             if len(seen) > 1]
    assert not flips, flips
