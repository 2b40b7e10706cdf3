"""Chapter 2 helpers: variance growth, entropy, the softmax Jacobian, saturation."""

import math

import pytest
import torch

from course_lib.chapters.ch02_scaling.helpers import (
    dot_product_variance,
    entropy,
    random_qk,
    saturation_stats,
    scores,
    softmax_jacobian,
)


def test_variance_grows_like_d_and_scaling_restores_one():
    for d in (1, 16, 256):
        assert abs(dot_product_variance(d) / d - 1) < 0.1
        assert abs(dot_product_variance(d, scaled=True) - 1) < 0.1


def test_scores_scaling():
    q, k = random_qk(64, 3, 5)
    torch.testing.assert_close(scores(q, k, scaled=False), q @ k.T)
    torch.testing.assert_close(scores(q, k), q @ k.T / 8.0)


def test_entropy_limits():
    assert entropy(torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)).item() == 0.0
    torch.testing.assert_close(entropy(torch.full((8,), 1 / 8, dtype=torch.float64)),
                               torch.tensor(math.log(8), dtype=torch.float64))


def test_softmax_jacobian_matches_autograd():
    x = torch.tensor([0.5, -1.0, 2.0, 0.1], dtype=torch.float64)
    auto = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, -1), x)
    torch.testing.assert_close(softmax_jacobian(torch.softmax(x, -1)), auto)
    one_hot = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    assert softmax_jacobian(one_hot).abs().max().item() == 0.0


def test_saturation_unscaled_collapses_scaled_does_not():
    dims = [4, 64, 1024]
    st = saturation_stats(dims, n_keys=16, n_queries=500)
    un, sc = st["unscaled"], st["scaled"]
    assert un["max_weight"][-1] > 0.9 and sc["max_weight"][-1] < 0.4
    assert un["entropy"][-1] < 0.2 and sc["entropy"][-1] > 2.0
    assert un["jacobian"][-1] < 0.25 * sc["jacobian"][-1]
    assert (un["jacobian"].diff() < 0).all()
    # scaled statistics do not depend on d_k
    assert (sc["max_weight"].max() - sc["max_weight"].min()) < 0.05


def test_additive_scores_match_the_formula_and_stay_bounded():
    from course_lib.chapters.ch02_scaling import helpers as sc2
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(5, 32, generator=g), torch.randn(7, 32, generator=g)
    w_q, w_k, v = torch.randn(32, 6, generator=g), torch.randn(32, 6, generator=g), torch.randn(6)
    s = sc2.additive_scores(q, k, w_q, w_k, v)
    assert s.shape == (5, 7)
    torch.testing.assert_close(s[2, 3], v @ torch.tanh(q[2] @ w_q + k[3] @ w_k))
    assert (s.abs() <= v.abs().sum() + 1e-5).all()
    assert sc2.additive_scores(100 * q, 100 * k, w_q, w_k, v).abs().max() <= v.abs().sum() + 1e-5


def test_init_variances_follow_fan_in_theory():
    from course_lib.chapters.ch02_scaling import helpers as sc2
    state = torch.get_rng_state()
    lin = sc2.init_variances("nn.Linear default", d_model=256, num_heads=4, n_tokens=1024)
    xav = sc2.init_variances("Xavier/Glorot uniform", d_model=256, num_heads=4, n_tokens=1024)
    mha = sc2.init_variances("nn.MultiheadAttention", d_model=256, num_heads=4, n_tokens=1024)
    assert torch.equal(torch.get_rng_state(), state)            # global RNG untouched
    assert abs(lin["Var(W)"] * 3 * 256 - 1) < 0.05              # U(±1/√D): 1/(3D)
    assert abs(lin["Var(q_i)"] - 1 / 3) < 0.03 and abs(lin["Var(score)"] - 1 / 9) < 0.02
    assert abs(xav["Var(q_i)"] - 1) < 0.06 and abs(xav["Var(score)"] - 1) < 0.1
    assert abs(mha["Var(q_i)"] - 0.5) < 0.04 and abs(mha["Var(score)"] - 0.25) < 0.04
    with pytest.raises(ValueError, match="init must be one of"):
        sc2.init_variances("he")
