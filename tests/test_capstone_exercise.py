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
        assert result.mistake == mistake.reported_id


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


def test_causal_block_listed_solution_passes_mistakes_diagnosed(monkeypatch) -> None:
    ids = {e["id"]: e for e in exercises.list_exercises()}
    assert ids["causal_block"]["chapter"] == "12_capstone"
    assert len(ch12_capstone.CAUSAL_BLOCK.mistakes) >= 2
    monkeypatch.setattr(ch12_capstone.CAUSAL_BLOCK, "allowed_course_calls", ("course_lib",))
    assert exercises.check("causal_block", ch12_capstone.causal_block).passed
    for mistake in ch12_capstone.CAUSAL_BLOCK.mistakes:
        result = exercises.check("causal_block", mistake.fn)
        assert not result.passed
        assert result.mistake == mistake.reported_id, (mistake.id, result)


def test_causal_block_learner_may_use_the_course_layer_and_masks() -> None:
    from course_lib import masks

    def with_mask(x, attn, ln1, ln2, mlp):
        x = x + attn(ln1(x), attn_mask=masks.causal_mask(x.shape[-2]))
        return x + mlp(ln2(x))

    def with_flag(x, attn, ln1, ln2, mlp):
        x = x + attn(ln1(x), is_causal=True)
        return x + mlp(ln2(x))

    assert exercises.check("causal_block", with_mask).passed
    assert exercises.check("causal_block", with_flag).passed


def test_causal_block_equals_the_course_transformer_block() -> None:
    from course_lib.attention import TransformerBlock
    torch.manual_seed(0)
    block = TransformerBlock(8, 2).eval()
    x = torch.randn(2, 5, 8)
    ours = ch12_capstone.causal_block(x, block.attn, block.ln1, block.ln2, block.mlp)
    torch.testing.assert_close(ours, block(x, is_causal=True))


def test_saved_activation_bytes_counts_what_checkpoint_and_autocast_save() -> None:
    from torch.utils.checkpoint import checkpoint

    from course_lib.attention import TransformerBlock
    from course_lib.chapters.ch12_capstone.memory import saved_activation_bytes
    torch.manual_seed(0)
    block = TransformerBlock(16, 2)
    x = torch.randn(2, 8, 16, requires_grad=True)
    params = list(block.parameters())
    plain = saved_activation_bytes(lambda: block(x, is_causal=True), params)
    ckpt = saved_activation_bytes(
        lambda: checkpoint(block, x, None, True, use_reentrant=False), params)
    assert ckpt == x.numel() * 4 < plain                  # only the block's input is kept

    def bf16():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return block(x, is_causal=True)

    assert saved_activation_bytes(bf16, params) < plain
    assert saved_activation_bytes(lambda: (x * 2).sum()) == 0   # a constant factor saves nothing
