"""Chapter 1 (library analogy): ``retrieve``, a soft dictionary look-up."""

from __future__ import annotations

import math

import torch

from course_lib.attention import reference
from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.checking._probes import scale_probe


def _cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    sharp_keys = r(6, 4)
    sharp_query = 1.5 * sharp_keys[2] + 0.1 * r(4)
    return [
        Case("basic", (r(4), r(5, 4), r(5, 3))),
        Case("float64, odd sizes", (r(7, dtype=torch.float64), r(3, 7, dtype=torch.float64),
                                    r(3, 6, dtype=torch.float64))),
        Case("one matching key", (sharp_query, sharp_keys, r(6, 2)),
             note="the query is close to key 2"),
        Case("many keys", (r(16), r(33, 16), r(33, 5))),
    ]


def _oracle(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    w = reference.attention_weights(query[None, :], keys, scale=1.0)[0]   # (S,)
    return w @ values


def _retrieve_scaled(factor, query, keys, values):
    w = reference.attention_weights(query[None, :].double(), keys.double(), scale=factor)[0]
    return (w @ values.double()).to(values.dtype)


def retrieve(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Soft look-up: weights = softmax(keys · query) over the S keys; return weights · values."""
    weights = torch.softmax(keys @ query, dim=-1)  # (S,), sums to 1
    return weights @ values                         # (Ev,) weighted average


def _scaled(query, keys, values):
    return torch.softmax(keys @ query / math.sqrt(query.shape[-1]), dim=-1) @ values


def _wrong_axis(query, keys, values):
    scores = keys @ query[:, None]                   # (S, 1)
    return (torch.softmax(scores, dim=-1) * values).sum(0)   # softmax over the size-1 axis


def _returns_weights(query, keys, values):
    return torch.softmax(keys @ query, dim=-1)


def _no_softmax(query, keys, values):
    return (keys @ query) @ values


def _hard_argmax(query, keys, values):
    return values[(keys @ query).argmax()].clone()


def _normalised_without_exp(query, keys, values):
    scores = keys @ query
    return (scores / scores.sum()) @ values


def _mean_not_sum(query, keys, values):
    weights = torch.softmax(keys @ query, dim=-1)
    return (weights[:, None] * values).mean(0)


def _cosine_similarity(query, keys, values):
    q = query / query.norm()
    k = keys / keys.norm(dim=-1, keepdim=True)
    return torch.softmax(k @ q, dim=-1) @ values


RETRIEVE = Exercise(
    id="retrieve",
    chapter="01_library_analogy",
    title="Soft retrieval from a library",
    signature="retrieve(query (E,), keys (S, E), values (S, Ev)) -> (Ev,)",
    params=("query", "keys", "values"),
    cases=_cases,
    oracle=_oracle,
    probes=(scale_probe(
        _retrieve_scaled, lambda *a: 1.0, {"1/√E": lambda q, *a: q.shape[0] ** -0.5},
        "1 (no scaling)", "The retrieval of this chapter scores each key by the plain dot "
        "product keys @ query (the 1/√E of chapter 2 comes later): softmax(keys @ query) @ "
        "values.", "01_library_analogy: The math of a soft lookup", ids={"1": "no_scaling"},
        what="a lookup with its scores multiplied by"),),
    solution=retrieve,
    hints=(
        "Score every key against the query with a dot product: that gives one number per key.",
        "Turn the S scores into weights that are positive and sum to 1 (a softmax over the S "
        "keys), then mix the values with those weights. No 1/sqrt(E) scaling here.",
        "weights = torch.softmax(keys @ query, dim=-1)  # (S,); return weights @ values  # (Ev,)",
    ),
    mistakes=(
        Mistake("scaled", "You divided the scores by sqrt(E). That scaling belongs to scaled "
                          "dot-product attention (next chapter); retrieve uses the raw "
                          "dot products keys · query.", _scaled),
        Mistake("wrong_axis", "Your softmax ran over an axis of size 1, so every weight is 1 and "
                              "you returned the plain sum of the values. Take the softmax over the "
                              "S keys (the scores should have shape (S,)).", _wrong_axis),
        Mistake("returns_weights", "You returned the weights (one per key, shape (S,)) instead "
                                   "of the retrieved value: finish with weights @ values.",
                _returns_weights),
        Mistake("no_softmax", "You mixed the values with the raw scores. Turn the scores into "
                              "weights with a softmax first (positive, summing to 1).",
                _no_softmax),
        Mistake("hard_argmax", "You returned the value of the single best key (a hard look-up). "
                               "Attention is soft: every value contributes, weighted by the "
                               "softmax of the scores.", _hard_argmax),
        Mistake("normalised_without_exp", "You divided the scores by their sum. That makes them "
                                          "sum to 1, but negative scores stay negative weights "
                                          "and a zero sum blows up: exponentiate first "
                                          "(a softmax), then normalise.",
                _normalised_without_exp),
        Mistake("mean_not_sum", "You averaged the weighted values over the S keys (.mean), "
                                "which divides the answer by S once more: the softmax weights "
                                "already sum to 1, so add the weighted values up (.sum, or "
                                "weights @ values).", _mean_not_sum),
        Mistake("cosine_similarity", "You normalised the query and the keys (cosine "
                                     "similarity). The look-up scores are the plain dot "
                                     "products keys @ query: a longer key vector is meant to "
                                     "score higher.", _cosine_similarity),
    ),
)
