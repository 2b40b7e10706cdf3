"""Issue 39's fresh corpus of learners' submissions (``learner_corpus_fresh``, chapters 1-7 and
10-12; ``learner_corpus_fresh_flash``, chapters 8 and 9, where present): each gets its verdict,
and at least 80% of the wrong ones get a specific diagnosis, a mistake the exercise declares
(not "wrong values", "raised", "wrong shape", ...).

In-process through the engine's bare path (no worker, no watch), as ``test_exercises_corpus``.
"""

from __future__ import annotations

import functools
import importlib

import pytest
from engine_verdict import diagnosed
from learner_corpus_fresh import FRESH

from course_lib.toolkit.checking._generic import is_generic_id
from course_lib.toolkit.checking._registry import registry

try:    # written for chapters 8 and 9 alongside this one; counted in the share when present
    FRESH_FLASH = importlib.import_module("learner_corpus_fresh_flash").FRESH_FLASH
except ModuleNotFoundError as e:
    if e.name != "learner_corpus_fresh_flash":
        raise
    FRESH_FLASH = []

#: The least share of wrong submissions that must get a declared mistake.
SPECIFIC_SHARE = 0.8

pytestmark = pytest.mark.usefixtures("one_thread")


@functools.cache
def _verdict(exercise_id: str, fn, seed: int = 0) -> str:
    result = diagnosed(exercise_id, fn, seed)
    return "pass" if result.passed else str(result.mistake)


def _declared(exercise_id: str) -> set[str]:
    """The ids that name a mistake of this exercise: its declared mistakes and probes."""
    ex = registry()[exercise_id]
    return ({m.reported_id for m in ex.mistakes} | {p.id for p in ex.probes}
            | {i for p in ex.probes for i in p.ids.values()})


def _named(exercise_id: str, verdict: str) -> bool:
    """A specific diagnosis: declared, a probe's, or one of the hypotheses of every exercise."""
    return verdict in _declared(exercise_id) or is_generic_id(verdict,
                                                              registry()[exercise_id].params)


@pytest.mark.parametrize("exercise_id, want, fn", FRESH,
                         ids=[f"{e}-{f.__name__}" for e, _, f in FRESH])
def test_each_fresh_submission_gets_its_verdict(exercise_id, want, fn):
    assert want == "pass" or _named(exercise_id, want) or want in (
        "raised", "wrong_values", "wrong_shape", "wrong_dtype", "wrong_type", "nan", "inf")
    assert _verdict(exercise_id, fn) == want


def _share(corpus) -> tuple[int, int, list[str]]:
    """(wrong submissions, specifically diagnosed ones, names of the others)."""
    wrong = [(e, fn) for e, want, fn in corpus if want != "pass"]
    generic = [f"{e}:{fn.__name__}={_verdict(e, fn)}" for e, fn in wrong
               if not _named(e, _verdict(e, fn))]
    return len(wrong), len(wrong) - len(generic), generic


def test_most_fresh_wrong_submissions_get_a_specific_diagnosis():
    total, named, generic = _share(FRESH)
    print(f"\nfresh corpus, chapters 1-7 and 10-12: {named} of {total} wrong submissions named "
          f"({named / total:.1%}); generic: {generic}")
    assert named >= SPECIFIC_SHARE * total, (named, total, generic)
    if FRESH_FLASH:
        flash_total, flash_named, flash_generic = _share(FRESH_FLASH)
        print(f"fresh corpus, chapters 8-9: {flash_named} of {flash_total} named; "
              f"generic: {flash_generic}")
        both_total, both_named = total + flash_total, named + flash_named
        print(f"both: {both_named} of {both_total} ({both_named / both_total:.1%})")
        assert both_named >= SPECIFIC_SHARE * both_total, (both_named, both_total,
                                                            generic + flash_generic)


def test_every_fresh_right_submission_passes():
    """Right answers in unusual styles: none may be rejected (seed 0 above; seeds 1-4 here)."""
    rejected = [(e, fn.__name__, seed, _verdict(e, fn, seed)) for e, want, fn in FRESH
                if want == "pass" for seed in range(1, 5) if _verdict(e, fn, seed) != "pass"]
    assert not rejected, rejected
