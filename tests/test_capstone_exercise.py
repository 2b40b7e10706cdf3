"""The ``induction_score`` exercise: listed, solution passes, each declared mistake is named."""

from __future__ import annotations

import pytest
import torch

from course_lib import exercises
from course_lib.chapters.ch12_capstone import exercises as ch12_capstone


@pytest.fixture(autouse=True)
def _progress_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "progress.json"))


def test_listed_for_the_capstone() -> None:
    ids = {e["id"]: e for e in exercises.list_exercises()}
    assert ids["induction_score"]["chapter"] == "12_capstone"


def test_solution_passes_and_mistakes_are_diagnosed(monkeypatch) -> None:
    # the course's own solution and mistakes live in course_lib: allow calls into it here
    monkeypatch.setattr(ch12_capstone.INDUCTION_SCORE, "allowed_course_calls", ("course_lib",))
    assert exercises.check("induction_score", ch12_capstone.induction_score).passed
    for mistake in ch12_capstone.INDUCTION_SCORE.mistakes:
        result = exercises.check("induction_score", mistake.fn)
        assert not result.passed
        assert result.mistake == mistake.id


def test_other_styles_pass() -> None:
    def with_diagonal(attn, period):
        return attn.diagonal(-(period - 1))[1:].mean()          # a 0-d tensor

    def with_loop(attn, period):
        n = attn.shape[0]
        return sum(float(attn[i, i - period + 1]) for i in range(period, n)) / (n - period)

    assert exercises.check("induction_score", with_diagonal).passed
    assert exercises.check("induction_score", with_loop).passed


def test_off_by_one_message_names_the_duplicate_token_head() -> None:
    def off_by_one(attn, period):
        rows = torch.arange(period, attn.shape[0])
        return attn[rows, rows - period].mean().item()

    result = exercises.check("induction_score", off_by_one)
    assert result.mistake == "same_token"
    assert "attn[i, i - period + 1]" in result.message
