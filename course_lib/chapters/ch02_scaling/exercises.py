"""Chapter 2 (scaling): ``scaled_scores`` = QKᵀ/√E."""

from __future__ import annotations

import math

import torch

from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.checking._probes import scale_probe


def _cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    f64, f16 = torch.float64, torch.float16
    return [
        Case("unbatched, L != S", (r(5, 8), r(7, 8))),
        Case("batched heads", (r(2, 3, 4, 16), r(2, 3, 6, 16))),
        Case("float64, odd sizes", (r(3, 7, 5, dtype=f64), r(3, 3, 5, dtype=f64))),
        Case("keys as wide as they are many", (r(3, 9), r(9, 9)), note="S == E"),
        Case("float16", (r(6, 32).to(f16), r(10, 32).to(f16))),
        Case("large magnitudes", (100 * r(4, 12), 100 * r(5, 12))),
    ]


def _oracle(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    # computed in float64, rounded once to the inputs' dtype
    return (q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])).to(q.dtype)


def _magnitude(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    # the size of the E products each score sums: rounding is relative to it where they cancel
    return q.double().abs() @ k.double().abs().transpose(-2, -1) / math.sqrt(q.shape[-1])


def scaled_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scores QKᵀ/√E: q (..., L, E), k (..., S, E) -> (..., L, S)."""
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def _no_scaling(q, k):
    return q @ k.transpose(-2, -1)


def _sqrt_L(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-2])


def _sqrt_S(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2])


def _divide_by_E(q, k):
    return q @ k.transpose(-2, -1) / q.shape[-1]


def _missing_transpose(q, k):
    return q @ k / math.sqrt(q.shape[-1])


def _times_sqrt_E(q, k):
    return q @ k.transpose(-2, -1) * math.sqrt(q.shape[-1])


SCALED_SCORES = Exercise(
    id="scaled_scores",
    chapter="02_scaling",
    title="Scaled dot-product scores",
    signature="scaled_scores(q (..., L, E), k (..., S, E)) -> (..., L, S)",
    params=("q", "k"),
    cases=_cases,
    oracle=_oracle,
    solution=scaled_scores,
    probes=(scale_probe(
        lambda f, q, k: ((q.double() @ k.double().transpose(-2, -1)) * f).to(q.dtype),
        lambda q, k: q.shape[-1] ** -0.5,
        {"1/E": lambda q, k: 1 / q.shape[-1], "1": lambda q, k: 1.0,
         "√E": lambda q, k: q.shape[-1] ** 0.5, "1/√S": lambda q, k: k.shape[-2] ** -0.5,
         "1/√L": lambda q, k: q.shape[-2] ** -0.5},
        "1/√E", "Divide by √E with E = q.shape[-1], the width of a query and a key (the last "
        "axis: whatever the batch axes, shape[-1] is E).",
        "02_scaling: The math: Var(q · k) = E", what="the scores q kᵀ multiplied by"),),
    tolerances={torch.float16: (1e-2, 1e-2)},
    magnitude=_magnitude,
    hints=(
        "Every query must be compared with every key: a matrix product whose result has one row "
        "per query (L) and one column per key (S).",
        "k has shape (..., S, E); to multiply q (..., L, E) by it you need k with its last two "
        "dims swapped. Then divide by the square root of the vector width E = q.shape[-1].",
        "return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
    ),
    mistakes=(
        Mistake("no_scaling", "You returned QKᵀ without scaling: divide by √E (E = q.shape[-1], "
                              "the width of each vector) so the scores' variance stays near 1.",
                _no_scaling),
        Mistake("sqrt_of_L", "You divided by the square root of L (the number of queries, "
                             "q.shape[-2]). The scale is 1/√E with E = q.shape[-1], the width "
                             "of each vector.", _sqrt_L),
        Mistake("sqrt_of_S", "You divided by the square root of S (the number of keys, "
                             "k.shape[-2]). The scale is 1/√E with E = q.shape[-1], the width "
                             "of each vector.", _sqrt_S),
        Mistake("divide_by_E", "You divided by E instead of √E. A dot product of E unit-variance "
                               "terms has variance E, so its standard deviation is √E: divide "
                               "by math.sqrt(E).", _divide_by_E),
        Mistake("missing_transpose", "You multiplied q @ k without transposing k. Use "
                                     "k.transpose(-2, -1) (swap only the last two dims) so each "
                                     "query meets each key.", _missing_transpose),
        Mistake("times_sqrt_E", "You multiplied the scores by √E instead of dividing: that "
                                "makes their spread E times larger, not 1. Divide by "
                                "math.sqrt(q.shape[-1]).", _times_sqrt_E),
    ),
)
