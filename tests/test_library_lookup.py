"""Chapter 1 helpers: soft lookup, the worked example's steps, tied projections, tables."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib import reference
from course_lib.chapters.ch01_library_analogy.helpers import (
    attention_steps,
    embed,
    hard_lookup,
    interpolate,
    make_library,
    projections,
    soft_lookup,
    tied_vs_untied_diagonal_rate,
)


def test_soft_lookup_is_softmax_of_matches_times_values():
    lib = make_library()
    q = torch.tensor([0.3, -0.2, 0.9], dtype=torch.float64)
    w, r = soft_lookup(q, lib.keys, lib.values, temperature=0.7)
    scores = torch.tensor([float(k @ q) for k in lib.keys], dtype=torch.float64)
    expected = torch.exp(scores / 0.7) / torch.exp(scores / 0.7).sum()
    torch.testing.assert_close(w, expected)
    torch.testing.assert_close(r, sum(wi * v for wi, v in zip(expected, lib.values, strict=True)))


def test_temperature_limits_hard_and_uniform():
    lib = make_library()
    q = lib.topic("astronomy")
    w_cold, r_cold = soft_lookup(q, lib.keys, lib.values, temperature=0.01)
    assert w_cold.argmax().item() == lib.titles.index("Night Sky Atlas")
    torch.testing.assert_close(r_cold, lib.values[1])          # the hard lookup's answer
    w_hot, _ = soft_lookup(q, lib.keys, lib.values, temperature=1e6)
    torch.testing.assert_close(w_hot, torch.full((5,), 0.2, dtype=torch.float64),
                               atol=1e-5, rtol=0)
    with pytest.raises(ValueError):
        soft_lookup(q, lib.keys, lib.values, temperature=0.0)


def test_hard_lookup_needs_exact_key():
    catalogue = {"astronomy": "Night Sky Atlas"}
    assert hard_lookup(catalogue, "astronomy") == "Night Sky Atlas"
    with pytest.raises(KeyError):
        hard_lookup(catalogue, "astronomy and history")


def test_library_values_are_distributions_and_interpolation_endpoints():
    lib = make_library()
    torch.testing.assert_close(lib.values.sum(-1), torch.ones(5, dtype=torch.float64))
    a, b = lib.topic("cooking"), lib.topic("history")
    torch.testing.assert_close(interpolate(a, b, 0.0), a)
    torch.testing.assert_close(interpolate(a, b, 1.0), b)


def test_attention_steps_match_reference_and_torch():
    tokens = "the cat sat on the mat".split()
    x = embed(tokens)
    st = attention_steps(x, **projections())
    torch.testing.assert_close(st.scaled, st.scores / math.sqrt(3))
    torch.testing.assert_close(st.weights.sum(-1), torch.ones(6, dtype=torch.float64))
    torch.testing.assert_close(st.output, st.weights @ st.v)
    torch.testing.assert_close(st.output, reference.scaled_dot_product_attention(st.q, st.k, st.v))
    torch.testing.assert_close(st.output, F.scaled_dot_product_attention(st.q, st.k, st.v))
    # repeated word, no positions: identical rows
    torch.testing.assert_close(st.output[0], st.output[4])


def test_cross_attention_shapes():
    p = projections()
    st = attention_steps(embed(["a", "b"], seed=3), **p, x_kv=embed(list("wxyz"), seed=4))
    assert st.weights.shape == (2, 4) and st.output.shape == (2, 3)


def test_tied_projections_give_symmetric_scores_and_self_preference():
    x = embed("the cat sat on the mat".split())
    st = attention_steps(x, **projections(tied=True))
    torch.testing.assert_close(st.scores, st.scores.T)
    diag = st.scores.diagonal()
    assert (st.scores <= torch.maximum(diag[:, None], diag[None, :]) + 1e-12).all()
    untied = attention_steps(x, **projections()).scores
    assert not torch.allclose(untied, untied.T)
    tied_rate, untied_rate = tied_vs_untied_diagonal_rate(trials=100)
    assert tied_rate > 0.8 and untied_rate < 0.4


def test_library_best():
    lib = make_library()
    assert lib.best(torch.tensor([0.1, 0.2, 0.6, 0.05, 0.05])) == "Rise of Rome"


def test_conv_reach_and_layers_to_connect():
    from course_lib.chapters.ch01_library_analogy.helpers import conv_layers_to_connect, conv_reach

    assert conv_reach(0, 3) == 0
    assert conv_reach(1, 3) == 1 and conv_reach(4, 3) == 4
    assert conv_reach(2, 5) == 4
    assert conv_layers_to_connect(1, 3) == 1
    assert conv_layers_to_connect(10, 3) == 10
    assert conv_layers_to_connect(10, 5) == 5 and conv_layers_to_connect(11, 5) == 6
    with pytest.raises(ValueError):
        conv_reach(1, 4)
