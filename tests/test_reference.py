"""course_lib.reference, plus what all three implementations share: dropout and input errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib import IMPLEMENTATIONS, reference


def test_attention_weights_is_the_textbook_softmax():
    q, k = torch.randn(2, 5, 4, dtype=torch.float64), torch.randn(2, 7, 4, dtype=torch.float64)
    w = reference.attention_weights(q, k)
    assert w.shape == (2, 5, 7)
    assert torch.allclose(w, torch.softmax(q @ k.mT / 2.0, dim=-1))   # 1/sqrt(4) = 1/2
    assert torch.allclose(w.sum(-1), torch.ones(2, 5, dtype=torch.float64))


def test_attention_weights_times_value_is_the_output():
    q, k, v = torch.randn(3, 6, 8), torch.randn(3, 9, 8), torch.randn(3, 9, 2)
    mask = torch.rand(6, 9) < 0.5
    w = reference.attention_weights(q, k, attn_mask=mask, scale=0.3)
    assert torch.allclose(w @ v, reference.scaled_dot_product_attention(q, k, v, mask, scale=0.3))
    assert torch.all(w[..., ~mask] == 0)


def test_causal_weights_are_lower_triangular_top_left():
    q, k = torch.randn(4, 3), torch.randn(6, 3)
    w = reference.attention_weights(q, k, is_causal=True)
    below = torch.ones(4, 6, dtype=torch.bool).tril()
    assert torch.all(w[~below] == 0) and torch.all(w[below] > 0)


def test_safe_softmax_dead_row_is_zero():
    x = torch.tensor([[0.0, 1.0], [float("-inf"), float("-inf")]])
    assert torch.equal(reference.safe_softmax(x)[1], torch.zeros(2))


def test_gqa_weights_repeat_key_heads():
    q, k = torch.randn(1, 4, 3, 5), torch.randn(1, 2, 6, 5)
    w = reference.attention_weights(q, k, enable_gqa=True)
    assert torch.allclose(w[:, 1], reference.attention_weights(q[:, 1], k[:, 0]))
    assert torch.allclose(w[:, 2], reference.attention_weights(q[:, 2], k[:, 1]))


# --- dropout, statistically: expectation preserved, a fraction p of weights zeroed -------------

@pytest.mark.parametrize("name", list(IMPLEMENTATIONS))
def test_dropout_preserves_expectation_and_drops_a_fraction_p(name):
    torch.manual_seed(0)
    p, draws, L, S = 0.3, 4000, 4, 6
    q, k = torch.randn(1, L, 8, dtype=torch.float64), torch.randn(1, S, 8, dtype=torch.float64)
    eye = torch.eye(S, dtype=torch.float64)[None]      # V = I: the output *is* the weight matrix
    q = q.expand(draws, L, 8)                          # each batch row is an independent draw
    dropped = IMPLEMENTATIONS[name](q, k, eye, dropout_p=p)
    weights = reference.attention_weights(q[:1], k)
    kept = dropped != 0
    assert abs(1 - kept.double().mean().item() - p) < 0.01           # ~p of the weights zeroed
    assert torch.allclose(dropped[kept], (weights.expand_as(dropped) / (1 - p))[kept])
    stderr = weights * math.sqrt(p / (1 - p)) / math.sqrt(draws)     # std of the mean per weight
    assert torch.all((dropped.mean(0) - weights[0]).abs() < 5 * stderr + 1e-12)


@pytest.mark.parametrize("name", list(IMPLEMENTATIONS))
def test_dropout_one_and_zero(name):
    q = torch.randn(2, 5, 4)
    attend = IMPLEMENTATIONS[name]
    assert torch.equal(attend(q, q, q, dropout_p=1.0), torch.zeros(2, 5, 4))
    assert torch.allclose(attend(q, q, q, dropout_p=0.0), F.scaled_dot_product_attention(q, q, q),
                          atol=1e-6)


# --- bad inputs: the same clear message from every implementation --------------------------------

Q, K, V = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 7)
BAD = [
    ("E mismatch", dict(key=torch.randn(2, 3, 6, 5)), ValueError, r"E of query.*\(2, 3, 5, 4\)"
     r"|last dim \(E\).*query \(2, 3, 5, 4\).*key \(2, 3, 6, 5\)"),
    ("S mismatch", dict(value=torch.randn(2, 3, 8, 7)), ValueError,
     r"key \(2, 3, 6, 4\) has S=6, value \(2, 3, 8, 7\) has S=8"),
    ("mask shape", dict(attn_mask=torch.ones(4, 6, dtype=torch.bool)), ValueError,
     r"attn_mask of shape \(4, 6\).*\(2, 3, 5, 6\)"),
    ("mask dtype", dict(attn_mask=torch.ones(5, 6, dtype=torch.int64)), TypeError,
     r"attn_mask.*torch.int64.*\(5, 6\)"),
    ("mask and causal", dict(attn_mask=torch.ones(5, 6, dtype=torch.bool), is_causal=True),
     ValueError, "attn_mask or is_causal"),
    ("int query", dict(query=torch.ones(2, 3, 5, 4, dtype=torch.int64), key=K.long(),
                       value=V.long()), TypeError,
     r"query must be a floating-point.*torch.int64.*\(2, 3, 5, 4\)"),
    ("mixed dtypes", dict(key=torch.randn(2, 3, 6, 4, dtype=torch.float64)), TypeError,
     "share a dtype"),
    ("gqa heads", dict(query=torch.randn(2, 5, 5, 4), enable_gqa=True), ValueError,
     r"must divide.*query \(2, 5, 5, 4\) has Hq=5.*key \(2, 3, 6, 4\) has 3"),
    ("dropout above 1", dict(dropout_p=1.5), ValueError, r"dropout_p.*1\.5"),
    ("batch", dict(key=torch.randn(4, 3, 6, 4), value=torch.randn(4, 3, 6, 7)), ValueError,
     r"batch dims of query \(2, 3, 5, 4\) and key \(4, 3, 6, 4\)"),
    ("1-d query", dict(query=torch.randn(4)), ValueError, r"query must have at least 2 dims"),
    ("not a tensor", dict(value=[[1.0]]), TypeError, "value must be a torch.Tensor"),
]


@pytest.mark.parametrize("name", list(IMPLEMENTATIONS))
@pytest.mark.parametrize("label,override,error,pattern", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_argument_and_shapes(name, label, override, error, pattern):
    args = dict(query=Q, key=K, value=V)
    args.update(override)
    with pytest.raises(error, match=pattern):
        IMPLEMENTATIONS[name](**args)


def test_torch_rejects_what_we_reject():
    """Our checks are not stricter than torch's: each bad case fails in torch too."""
    for label, override, _, _ in BAD:
        if label == "negative dropout":
            continue  # torch 2.13 silently accepts dropout_p < 0; the issue asks us to refuse it
        args = dict(query=Q, key=K, value=V)
        args.update(override)
        with pytest.raises((RuntimeError, ValueError, TypeError, IndexError)):
            F.scaled_dot_product_attention(**args)
