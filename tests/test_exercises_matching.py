"""How a learner's wrong output is matched with a declared mistake (``_engine._recognise``)."""

from __future__ import annotations

import pytest
import torch

from course_lib.toolkit.checking import Case, Exercise, Mistake, _engine
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


def test_a_kept_output_is_used_only_for_the_same_arguments(monkeypatch):
    """A case generator that is not a function of the seed (here: of a counter) gets the mistake's
    output on its own arguments, never the one kept for another check's: once its kept cases are
    gone (here: cleared, as the byte limit would), the new cases differ from those the kept
    mistake output was computed on."""
    made = []

    def drifting(gen):
        made.append(None)
        return [Case("a", (torch.full((3,), float(len(made))),))]

    ex, calls = _counting_exercise(drifting)
    other = Exercise(**{**ex.__dict__, "id": "_memo_probe_2"})     # same mistake object
    learner = lambda x: 2 * x + 1        # noqa: E731
    for e in (ex, ex, other):
        assert run_check(e, learner, seed=3, isolate=False, watch=False).mistake == "plus_one"
    assert len(made) == 2                      # ex's cases kept for seed 3; other's its own
    monkeypatch.setattr(_engine, "_SEEDED", type(_engine._SEEDED)())
    monkeypatch.setattr(_engine, "_SEEDED_BYTES", [0])
    assert run_check(ex, learner, seed=3, isolate=False, watch=False).mistake == "plus_one"
    assert [float(c[0]) for c in calls] == [1.0, 2.0, 3.0]


def test_a_chosen_seeds_cases_and_answers_are_computed_once():
    """Checks with one chosen seed share its cases and the oracle's answers (a class graded with
    one seed, the statistical tests); another seed, or a random one, gets its own."""
    generated, answered = [], []

    def cases(gen):
        generated.append(None)
        return _random_cases(gen)

    def oracle(x):
        answered.append(x.clone())
        return 2 * x

    ex, _ = _counting_exercise(cases)
    ex = Exercise(**{**ex.__dict__, "oracle": oracle})
    right, wrong = (lambda x: 2 * x), (lambda x: 2 * x + 1)
    for fn in (right, wrong, right):
        run_check(ex, fn, seed=11, isolate=False, watch=False)
    assert (len(generated), len(answered)) == (1, 2)      # once, not once per check
    assert run_check(ex, right, seed=12, isolate=False, watch=False).passed
    assert (len(generated), len(answered)) == (2, 4)
    assert not torch.equal(answered[0], answered[2])
    assert run_check(ex, right, isolate=False, watch=False).passed
    assert (len(generated), len(answered)) == (3, 6)
    assert sorted(seed for key, seed in _engine._SEEDED if key == id(ex)) == [11, 12]


def test_kept_cases_stay_within_their_byte_limit(monkeypatch):
    monkeypatch.setattr(_engine, "SEEDED_LIMIT", 4 * 8 * 4)    # room for 4 float32 tensors of 8
    monkeypatch.setattr(_engine, "_SEEDED", type(_engine._SEEDED)())
    monkeypatch.setattr(_engine, "_SEEDED_BYTES", [0])
    ex, _ = _counting_exercise(lambda gen: [Case("a", (torch.randn(8, generator=gen),))])
    for seed in range(6):
        assert run_check(ex, lambda x: 2 * x, seed=seed, isolate=False, watch=False).passed
    kept = [seed for _, seed in _engine._SEEDED]
    assert kept == [4, 5]            # each seed: 32 bytes of case, 32 of answer; oldest out first
    assert _engine._SEEDED_BYTES[0] == sum(k.nbytes for k in _engine._SEEDED.values()) == 128


F32 = DEFAULT_TOLERANCES.__getitem__    # the float32 tolerance: (atol, rtol) by dtype
INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("actual,expected,kind", [
    ([1.0, 2.0], [1.0, 2.0], None),
    ([1.0, 2.0 + 1e-7], [1.0, 2.0], None),                     # within tolerance
    ([INF, 1.0], [INF, 1.0], None),                            # the same infinity
    ([NAN, 1.0], [NAN, 1.0], None),                            # NaN where the answer has NaN
    ([-INF, 1.0], [INF, 1.0], "inf"),                          # the other infinity
    ([5.0, 1.0], [INF, 1.0], "values"),                        # finite where the answer is inf
    ([0.0, 1.0], [-INF, 1.0], "values"),                       # a mask left out
    ([INF, 1.0], [3.0, 1.0], "inf"),
    ([NAN, 1.0], [3.0, 1.0], "nan"),
    ([1.0, 2.5], [1.0, 2.0], "values"),
])
def test_compare_finds_each_kind_of_wrong_entry(actual, expected, kind):
    """The comparison's shortcut (every entry close to a finite answer) never hides a NaN or an
    infinity: each kind of wrong entry is still reported as such. A finite number never passes
    for an infinite answer (rtol·∞ used to let any through)."""
    from course_lib.toolkit.checking._compare import compare

    problem = compare(torch.tensor(expected), torch.tensor(actual), F32)
    assert (problem and problem.kind) == kind, problem


def test_a_finite_output_does_not_match_an_infinite_one():
    assert not same_output(torch.tensor([0.0, 1.0]), torch.tensor([-INF, 1.0]), F32)
    assert same_output(torch.tensor([-INF, 1.0]), torch.tensor([-INF, 1.0]), F32)


def test_compare_with_a_magnitude_that_is_not_finite_still_compares():
    from course_lib.toolkit.checking._compare import compare

    e, a = torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])
    assert compare(e, a, F32, magnitude=torch.tensor([1.0, NAN])).kind == "values"
    assert compare(e, a, F32, magnitude=torch.tensor([1.0, 1e6])) is None   # cancellation
