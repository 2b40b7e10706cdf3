"""The positions chapter: helpers, figures and explorer drawn headlessly, frozen check texts."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from course_lib import MultiHeadAttention, exercises
from course_lib.attention import positions
from course_lib.chapters.ch05_positions import explorer as pw
from course_lib.chapters.ch05_positions import helpers, plots

PASS_MESSAGES = {
    "apply_rope": "All 6 cases passed: batched heads; decoding, offset 7; float64, base 100; "
                  "one pair; wide head; float16, offset 3000.",
    "alibi_bias": "All 4 cases passed: 8 heads, L = S = 5; 4 heads, decoding: L = 2, S = 6; "
                  "16 heads, L = S = 3; 2 heads, L = 1, S = 4.",
}


@pytest.fixture(autouse=True)
def _progress_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "progress.json"))


@pytest.fixture()
def _course_code_allowed(monkeypatch):
    """The frozen texts come from the course's own solutions, which live in course_lib."""
    for ex in exercises.registry().values():
        monkeypatch.setattr(ex, "allowed_course_calls", ("course_lib",))


@pytest.mark.parametrize("exercise_id", sorted(PASS_MESSAGES))
def test_pass_texts_are_frozen(exercise_id, _course_code_allowed):
    passed = exercises.check(exercise_id, exercises.get_exercise(exercise_id).solution)
    assert repr(passed) == f"✓ {exercise_id}: Correct!\n{PASS_MESSAGES[exercise_id]}"


def test_wrong_submissions_fail():
    assert not exercises.check("apply_rope", lambda x, offset=0, base=10000.0: x).passed
    assert not exercises.check(
        "apply_rope", lambda x, offset=0, base=10000.0: positions.apply_rope(x)).passed
    assert not exercises.check("alibi_bias",
                               lambda H, L, S: torch.zeros(H, L, S)).passed
    # the core's bias with causal=True (-inf in the future) is not what the exercise asks
    assert not exercises.check("alibi_bias",
                               lambda H, L, S: positions.alibi_bias(H, L, S, causal=True)).passed


def test_permutation_gap_zero_without_positions_only():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 2).eval()
    x = torch.randn(1, 6, 16)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert helpers.permutation_gap(layer, x, perm) < 1e-5
    assert helpers.permutation_gap(layer, x, perm, positions.sinusoidal_positions(6, 16)) > 1e-2


def test_score_grid_is_constant_on_diagonals():
    q, k = torch.randn(2, 8, dtype=torch.float64).unbind(0)
    g = helpers.rope_score_grid(q, k, 10)
    for d in (-3, 0, 4):
        diag = g.diagonal(offset=d)
        assert torch.allclose(diag, diag[0].expand_as(diag), atol=1e-10)
    assert not torch.allclose(g.diagonal(0)[0], g.diagonal(1)[0])


def test_distance_profile_and_unseen_pairs():
    p = helpers.rope_distance_profile(torch.tensor([0, 1, 1000]), 64)
    assert p[0].item() == pytest.approx(1.0) and p[1] < 1 and p[2] < p[1]
    u = helpers.unseen_angle_pairs(64, train_len=512, new_len=2048)
    # theta_i * 511 >= 2 pi  <=>  wavelength <= 511
    want = int((u["wavelengths"] <= 511).sum())
    assert u["full_turn"] == want and u["unseen"] == 32 - want
    assert helpers.unseen_angle_pairs(64, 512, 512)["unseen"] == 0


def test_alibi_helper_agrees_across_implementations():
    q, k, v = torch.randn(3, 1, 4, 5, 8, dtype=torch.float64).unbind(0)
    outs = helpers.attention_with_alibi(q, k, v, positions.alibi_bias(4, 5, causal=True,
                                                                      dtype=torch.float64))
    assert set(outs) == {"reference", "flash", "sdpa", "torch F.sdpa"}
    for out in outs.values():
        torch.testing.assert_close(out, outs["torch F.sdpa"])


def test_figures_draw():
    fig = plt.figure()
    plots.plot_frequency_bands(fig, E=16, n_positions=20, train_len=50)
    assert len(fig.axes) >= 2
    fig, ax = plt.subplots()
    plots.plot_relative_scores(ax, torch.randn(5, 5))
    plots.plot_distance_profiles(ax, torch.arange(5), {"a": torch.ones(5)}, train_len=3)
    fig = plt.figure()
    bias = positions.alibi_bias(4, 5, causal=True)
    plots.plot_alibi(fig, bias, torch.softmax(bias[:, -1], -1), heads=(0, 3))
    assert len(fig.axes) >= 3
    plt.close("all")


def test_explorer_score_depends_only_on_distance():
    s = []
    for m in (3, 7, 10):
        fig = plt.figure()
        s.append(pw.draw_rope_pairs(fig, m=m, n=m - 3))
        plt.close(fig)
    assert s[0] == pytest.approx(s[1], abs=1e-9) and s[1] == pytest.approx(s[2], abs=1e-9)
    fig = plt.figure()
    assert pw.draw_rope_pairs(fig, m=9, n=2) != pytest.approx(s[0], abs=1e-6)
    plt.close(fig)
    q, _ = pw.explorer_vectors()
    r = positions.apply_rope(q[None], offset=4, base=pw.BASE)[0]
    assert pw.rotated_pair(q, 4, 1).tolist() == [r[1].item(), r[1 + pw.E // 2].item()]


def test_explorer_frames():
    ex = pw.rope_explorer()
    frames = ex.player_frames()
    assert 6 <= len(frames) <= 15
    assert all(0 <= f["n"] < pw.N_POSITIONS and 0 <= f["m"] < pw.N_POSITIONS for f in frames)
    fig = ex.render()
    assert len(fig.axes) == len(pw.PAIRS) + 1
    plt.close(fig)


def test_scaling_methods_change_the_pairs_the_papers_say():
    from course_lib.chapters.ch05_positions import helpers as h
    m = h.scaling_methods(64, 512, 4.0, 2048)
    theta = m["none"]
    assert torch.allclose(m["linear (position interpolation)"], theta / 4)
    ntk = m["NTK-aware base"] / theta
    assert ntk[0] == 1 and torch.isclose(ntk[-1], torch.tensor(0.25, dtype=torch.float64))
    rows = {r["method"]: r for r in h.scaling_rows(64, 512, 4.0, 2048)}
    assert rows["linear (position interpolation)"]["pairs with unseen angles"] == 0
    assert rows["none"]["pairs with unseen angles"] == h.unseen_angle_pairs(64, 512, 2048)[
        "unseen"] == 16
    for r in rows.values():
        assert r["pairs kept"] + r["pairs divided by s"] + r["pairs in between"] == 32
    # a pair just inside the trained range is not unseen; one step further is
    t = torch.tensor([0.001], dtype=torch.float64)
    assert not h.unseen_after_scaling(t, t, 512, 512)[0]
    assert h.unseen_after_scaling(t, t, 512, 514)[0]
