"""The capstone's learned behaviour holds on seeds other than the chapter's (seed 0)."""

from __future__ import annotations

import pytest

from course_lib.chapters.ch12_capstone import evaluate, train

T = evaluate.THRESHOLDS
SEEDS = [1, 2]

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("seed", SEEDS)
def test_negation_model_attends_to_the_deciding_words(seed: int) -> None:
    model, hist = train.train_negation(seed)
    assert len(hist.loss) < train.NegationConfig().steps  # stopped early: solved
    m = evaluate.negation_metrics(model)
    assert m["accuracy"] >= T["negation_accuracy"], m
    assert m["deciding_mass"] >= T["deciding_mass"], m
    assert m["deciding_mass"] >= T["deciding_mass_vs_uniform"] * m["uniform_mass"], m


@pytest.mark.parametrize("seed", SEEDS)
def test_induction_model_grows_previous_token_and_induction_heads(seed: int) -> None:
    cfg = train.InductionConfig()
    model, _ = train.train_induction(seed, cfg)
    m = evaluate.induction_metrics(model, cfg.seq_len, cfg.vocab_size)
    assert m["repeat_accuracy"] >= T["repeat_accuracy"], m
    assert m["first_copy_accuracy"] <= T["first_copy_accuracy"], m
    assert m["previous_token"][0].max() >= T["best_previous_token"], m
    assert m["induction"][1].max() >= T["best_induction"], m
    assert m["induction"][0].max() < T["layer1_induction"], m
