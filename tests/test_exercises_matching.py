"""How a learner's wrong output is matched with a declared mistake (``_engine._recognise``)."""

from __future__ import annotations

import pytest
import torch

from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.checking._compare import same_output
from course_lib.toolkit.checking._engine import run_check
from course_lib.toolkit.checking._spec import DEFAULT_TOLERANCES


def _exercise(*mistakes: Mistake) -> Exercise:
    return Exercise(id="_matching_probe", chapter="00_test", title="probe",
                    signature="double(x) -> like x", params=("x",),
                    cases=lambda gen: [Case("zeros", (torch.zeros(5),))],
                    oracle=lambda x: 2 * x, solution=lambda x: 2 * x, hints=("double it",),
                    mistakes=mistakes)


def test_a_mistake_that_is_right_on_the_failing_case_is_never_named():
    """The mistake's output passes the correctness check; the learner's, 1.5e-5 off, does not
    (atol 1e-5), though the two agree within twice the tolerance."""
    ex = _exercise(Mistake("almost_right", "never shown", lambda x: 2 * x + 1e-7))
    result = run_check(ex, lambda x: 2 * x + 1.5e-5, seed=0, isolate=False, watch=False)
    assert not result.passed and result.mistake == "wrong_values", result.message


def test_a_mistake_that_is_wrong_there_is_named():
    ex = _exercise(Mistake("plus_one", "You added one.", lambda x: 2 * x + 1))
    result = run_check(ex, lambda x: x + x + 1, seed=0, isolate=False, watch=False)
    assert result.mistake == "plus_one" and result.message.startswith("You added one."), \
        result.message


def test_learner_and_mistake_agree_within_twice_the_correctness_tolerance_only():
    tol = DEFAULT_TOLERANCES.get
    atol, _ = DEFAULT_TOLERANCES[torch.float32]
    b = torch.zeros(4)
    assert same_output(b + 1.9 * atol, b, tol)
    assert not same_output(b + 3 * atol, b, tol)     # the old 10x slack accepted this


def test_nan_and_minus_inf_agree_as_nothing_to_attend_to():
    tol = DEFAULT_TOLERANCES.get
    a = torch.tensor([1.0, float("-inf"), float("nan")])
    b = torch.tensor([1.0, float("nan"), float("-inf")])
    assert same_output(a, b, tol) and same_output(b, a, tol)
    assert same_output(torch.tensor(float("-inf")), torch.tensor(float("nan")), tol)
    assert not same_output(torch.tensor([float("inf")]), torch.tensor([float("nan")]), tol)


def test_the_forbidden_call_refusal_counts_like_the_other_messages():
    from course_lib.toolkit.checking._registry import registry

    result = run_check(registry()["softmax"], lambda x, dim=-1: torch.softmax(x, dim), seed=0,
                       isolate=False)
    assert result.mistake == "forbidden_call"
    assert result.message.endswith("\n0 of 8 cases passed."), result.message


def test_variants_of_one_misconception_report_their_family():
    """Two simulations of one bug (at two tile sizes, say): whichever matches, the check reports
    the family's id, so the diagnosis does not depend on which variant matched by a hair."""
    ex = _exercise(Mistake("plus_one_a", "You added one.", lambda x: 2 * x + 1, family="plus_one"),
                   Mistake("plus_one_b", "You added one.", lambda x: 2 * x + 1.0000001,
                           family="plus_one"))
    result = run_check(ex, lambda x: x + x + 1, seed=0, isolate=False, watch=False)
    assert result.mistake == "plus_one" and result.message.startswith("You added one."), \
        result.message


def test_a_family_must_say_one_thing():
    with pytest.raises(ValueError, match="reported as 'f' give different messages"):
        _exercise(Mistake("a", "You added one.", lambda x: 2 * x + 1, family="f"),
                  Mistake("b", "You added two.", lambda x: 2 * x + 2, family="f"))


# --------------------------------------------------------------------------- kept mistake outputs


def _counting_exercise(cases):
    """An exercise whose one mistake (add one) counts its calls."""
    calls = []

    def plus_one(x):
        calls.append(x.clone())
        return 2 * x + 1

    ex = Exercise(id="_memo_probe", chapter="00_test", title="probe",
                  signature="double(x) -> like x", params=("x",), cases=cases,
                  oracle=lambda x: 2 * x, solution=lambda x: 2 * x, hints=("double it",),
                  mistakes=(Mistake("plus_one", "You added one.", plus_one),))
    return ex, calls


def _random_cases(gen):
    return [Case("a", (torch.randn(4, generator=gen),)),
            Case("b", (torch.randn(3, generator=gen),))]


def test_a_chosen_seeds_mistake_outputs_are_computed_once():
    ex, calls = _counting_exercise(_random_cases)
    learner = lambda x: 2 * x + 1        # noqa: E731  (the mistake itself)
    for _ in range(3):
        result = run_check(ex, learner, seed=7, isolate=False, watch=False)
        assert result.mistake == "plus_one"
    assert len(calls) == 2                           # one per case, not per check
    run_check(ex, learner, seed=8, isolate=False, watch=False)
    assert len(calls) == 4                           # another seed: other cases
    assert not torch.equal(calls[0], calls[2])


def test_a_random_seed_keeps_nothing():
    ex, calls = _counting_exercise(_random_cases)
    learner = lambda x: 2 * x + 1        # noqa: E731
    for _ in range(2):
        assert run_check(ex, learner, isolate=False, watch=False).mistake == "plus_one"
    assert len(calls) == 4


def test_a_kept_output_is_used_only_for_the_same_arguments():
    """A case generator that is not a function of the seed (here: of a counter) gets the mistake's
    output on its own arguments, never the one kept for another check's."""
    made = []

    def drifting(gen):
        made.append(None)
        return [Case("a", (torch.full((3,), float(len(made))),))]

    ex, calls = _counting_exercise(drifting)
    other = Exercise(**{**ex.__dict__, "id": "_memo_probe_2"})     # same mistake object
    learner = lambda x: 2 * x + 1        # noqa: E731
    for e in (ex, ex, other):
        assert run_check(e, learner, seed=3, isolate=False, watch=False).mistake == "plus_one"
    assert [float(c[0]) for c in calls] == [1.0, 2.0, 3.0]
