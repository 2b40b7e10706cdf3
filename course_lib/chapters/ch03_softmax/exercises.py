"""Chapter 3 (softmax): a numerically stable ``softmax`` and single-head ``self_attention``."""

from __future__ import annotations

import math

import torch

from course_lib.attention import reference
from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.checking._probes import choice_probe, scale_probe

# --------------------------------------------------------------------------- softmax


def _softmax_cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    with_inf = r(4, 6)
    with_inf[0, 1] = with_inf[2, 0] = with_inf[2, 5] = float("-inf")
    scales = r(3, 8)
    scales[0] += 500.0
    scales[1] -= 500.0
    return [
        Case("rows", (r(4, 7),)),
        Case("dim=0, float64", (r(5, 3, dtype=torch.float64), 0)),
        Case("3-D, dim=1", (r(2, 5, 3), 1)),
        Case("a vector", (r(9, dtype=torch.float64),)),
        Case("-inf entries", (with_inf,), note="some entries are -inf (masked out)"),
        Case("large magnitudes", (1000 * r(3, 6),), note="entries up to about ±3000"),
        Case("rows on different scales", (scales,), note="row 0 near +500, row 1 near -500"),
        Case("float16", (r(4, 9).to(torch.float16),)),
    ]


def _softmax_oracle(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(x.double(), dim=dim).to(x.dtype)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Stable softmax along ``dim``: exp(x - max) / sum(exp(x - max)); same shape and dtype."""
    m = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - m)      # exponents <= 0: no overflow; exp(-inf) = 0
    return e / e.sum(dim=dim, keepdim=True)


def _unstable(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def _ignores_dim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def _no_normalisation(x, dim=-1):
    return torch.exp(x - x.amax(dim=dim, keepdim=True))


def _sum_over_axis_0(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=0, keepdim=True)


def _sum_over_everything(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum()


def _mean_shift(x, dim=-1):
    e = torch.exp(x - x.mean(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _global_max(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


def _min_shift(x, dim=-1):
    e = torch.exp(x - x.amin(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _dtype_not_kept(x, dim=-1, dtype=torch.float64):
    x = x.to(dtype)
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


_DTYPE_NOT_KEPT = ("Your softmax returns another dtype than its input: you converted x (to "
                   "float64 or float32) for the computation but not back. Return the result "
                   "in the input's dtype: .to(x.dtype).")

def _softmax_variant(variant: str, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The softmax with one thing changed: over the last axis whatever ``dim`` is
    (``"last_axis"``), or without the max shift, in x's own dtype (``"unshifted"``: it
    overflows where a learner's guard may hide it)."""
    if variant == "last_axis":
        return _softmax_oracle(x, -1)
    e = torch.exp(x)
    out = e / e.sum(dim=dim, keepdim=True)
    return out.nan_to_num() if variant == "unshifted_guarded" else out


SOFTMAX = Exercise(
    id="softmax",
    chapter="03_softmax",
    title="A numerically stable softmax",
    signature="softmax(x, dim=-1) -> Tensor shaped like x",
    params=("x", "dim"),
    cases=_softmax_cases,
    oracle=_softmax_oracle,
    solution=softmax,
    forbidden=("softmax",),
    probes=(choice_probe(
        "softmax_variant", _softmax_variant,
        {"last_axis": "last_axis", "unshifted": "unshifted",
         "unshifted_guarded": "unshifted_guarded"},
        {"last_axis": "the softmax over the last axis whatever `dim` says",
         "unshifted": "exp(x) / Σ exp(x) without subtracting the maximum, where it does not "
                      "overflow (your output differs only where exp overflows: a guard such as "
                      "nan_to_num hides the overflow, it does not fix it)",
         "unshifted_guarded": "exp(x) / Σ exp(x) without subtracting the maximum, its NaN "
                              "(inf / inf where exp overflows) replaced by nan_to_num: the "
                              "guard hides the overflow, it does not fix it"},
        "Normalise along `dim` (the max and the sum with dim=dim, keepdim=True), and subtract "
        "the maximum along it before exp: exp(x - max) never overflows.",
        "03_softmax: The fix: subtract the maximum",
        ids={"last_axis": "ignores_dim", "unshifted": "not_stable",
             "unshifted_guarded": "not_stable"}),),
    hints=(
        "softmax(x)_i = exp(x_i) / Σ_j exp(x_j), along `dim`. Build it from torch.exp and .sum; "
        "torch.softmax, log_softmax and logsumexp are off limits here.",
        "exp(1000) overflows to inf, and inf/inf is NaN. Subtracting the same number from every "
        "entry of a slice does not change the softmax: subtract the slice's maximum.",
        "m = x.amax(dim=dim, keepdim=True); e = torch.exp(x - m); "
        "return e / e.sum(dim=dim, keepdim=True)",
    ),
    mistakes=(
        Mistake("not_stable", "Your softmax overflows on large inputs (exp(1000) = inf, and "
                              "inf/inf = NaN). Subtract the maximum of each slice before exp; "
                              "the result is mathematically the same.", _unstable),
        Mistake("mean_shift", "You subtracted the mean of each slice, not its maximum: an "
                "entry far above the mean still overflows, and a -inf entry makes the mean -inf "
                "(then -inf - (-inf) = NaN). Subtract x.amax(dim=dim, keepdim=True).",
                _mean_shift),
        Mistake("global_max", "You subtracted the maximum of the whole tensor, not of each "
                              "slice: a slice far below the global maximum underflows to 0/0. "
                              "Use x.amax(dim=dim, keepdim=True).", _global_max),
        Mistake("min_shift", "You subtracted the minimum of each slice, not its maximum: the "
                             "largest entry then sits far above 0 and exp overflows to inf "
                             "(inf/inf = NaN). Subtract x.amax(dim=dim, keepdim=True), so "
                             "every exponent is <= 0.", _min_shift),
        Mistake("dtype_not_kept", _DTYPE_NOT_KEPT, _dtype_not_kept),
        Mistake("dtype_not_kept_float32", _DTYPE_NOT_KEPT,
                lambda x, dim=-1: _dtype_not_kept(x, dim, torch.float32),
                family="dtype_not_kept"),
        Mistake("ignores_dim", "Your softmax always runs over the last axis: use the `dim` "
                               "argument (in amax/max and in sum, with keepdim=True).",
                _ignores_dim),
        Mistake("no_normalisation", "You forgot to divide by the sum: the outputs along `dim` "
                                    "must add up to 1.", _no_normalisation),
        Mistake("sum_over_wrong_axis", "Your slices along `dim` do not sum to 1: you divided by "
                "a sum over axis 0 (e.sum(dim=0)), not over `dim`. Use "
                "e.sum(dim=dim, keepdim=True).", _sum_over_axis_0),
        Mistake("sum_over_everything", "Your slices along `dim` do not sum to 1: you divided by "
                "the sum of the whole tensor (e.sum()), so all entries together sum to 1. "
                "Divide by the sum of each slice: e.sum(dim=dim, keepdim=True).",
                _sum_over_everything),
    ),
)

# --------------------------------------------------------------------------- self-attention


def _sa_cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int, dtype: torch.dtype = torch.float32, s: float = 1.0) -> torch.Tensor:
        return s * torch.randn(*shape, generator=gen, dtype=dtype)

    f64 = torch.float64
    return [
        Case("batched", (r(2, 5, 6), r(6, 4, s=0.5), r(6, 4, s=0.5), r(6, 3))),
        Case("one sequence, float64", (r(1, 7, 3, dtype=f64), r(3, 5, dtype=f64),
                                       r(3, 5, dtype=f64), r(3, 2, dtype=f64))),
        Case("wider values", (r(3, 4, 8), r(8, 6, s=0.4), r(8, 6, s=0.4), r(8, 9))),
        Case("large scores", _overflowing(r(2, 6, 5, s=3.0), r(5, 7), r(5, 7), r(5, 3)),
             note="big projections: the softmax must be stable"),
    ]


def _overflowing(x, w_q, w_k, w_v):
    """The arguments with x scaled so that the largest score is about 200: exp of it overflows
    float32 (past ~88.7) on every seed, so an unshifted softmax always shows."""
    scores = (x @ w_q) @ (x @ w_k).transpose(-2, -1) / math.sqrt(w_q.shape[1])
    top = float(scores.max())
    if top < 200.0:
        x = x * math.sqrt(200.0 / max(top, 1e-3))
    return x, w_q, w_k, w_v


def _sa_oracle(x, w_q, w_k, w_v):
    dtype = x.dtype
    x, w_q, w_k, w_v = (t.double() for t in (x, w_q, w_k, w_v))   # float64, rounded once
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = reference.attention_weights(q, k)      # (B, L, L), scale 1/√E
    return (weights @ v).to(dtype), weights.to(dtype)


def self_attention(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor,
                   w_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Single-head self-attention: x (B, L, D) -> out (B, L, Ev), weights (B, L, L)."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v        # (B,L,E), (B,L,E), (B,L,Ev)
    E = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)        # (B, L, L)
    weights = torch.softmax(scores, dim=-1)     # over keys: rows sum to 1
    return weights @ v, weights


def _sa(x, w_q, w_k, w_v, scale=None, dim=-1, transpose=False, swap=False):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    w = torch.softmax(q @ k.transpose(-2, -1) * s, dim=dim)
    out = (w.transpose(-2, -1) if transpose else w) @ v
    return (w, out) if swap else (out, w)


def _sa_no_scaling(x, w_q, w_k, w_v):
    return _sa(x, w_q, w_k, w_v, scale=1.0)


def _sa_sqrt_D(x, w_q, w_k, w_v):
    return _sa(x, w_q, w_k, w_v, scale=1 / math.sqrt(x.shape[-1]))


def _sa_wrong_axis(x, w_q, w_k, w_v):
    return _sa(x, w_q, w_k, w_v, dim=-2)


def _sa_transposed(x, w_q, w_k, w_v):
    return _sa(x, w_q, w_k, w_v, transpose=True)


def _sa_swapped(x, w_q, w_k, w_v):
    return _sa(x, w_q, w_k, w_v, swap=True)


def _sa_scores_transposed(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return w @ v, w


def _sa_unstable(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    e = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    w = e / e.sum(dim=-1, keepdim=True)
    return w @ v, w


SELF_ATTENTION = Exercise(
    id="self_attention",
    tolerances={torch.float32: (1e-4, 1e-3)},  # float32 attention: exp amplifies rounding
    chapter="03_softmax",
    title="Single-head self-attention",
    signature="self_attention(x (B, L, D), w_q (D, E), w_k (D, E), w_v (D, Ev)) "
              "-> (out (B, L, Ev), weights (B, L, L))",
    params=("x", "w_q", "w_k", "w_v"),
    output_names=("out", "weights"),
    cases=_sa_cases,
    oracle=_sa_oracle,
    probes=(scale_probe(
        lambda f, *a: _sa(*a, scale=f), lambda x, w_q, *a: w_q.shape[-1] ** -0.5,
        {"1/E": lambda x, w_q, *a: 1 / w_q.shape[-1],
         "1/√D": lambda x, *a: x.shape[-1] ** -0.5, "1": lambda *a: 1.0},
        "1/√E", "Divide the scores by √E, E = q.shape[-1] the width of the queries and keys: "
        "that keeps their variance near 1 whatever the width.",
        "02_scaling: The math: Var(q · k) = E"),),
    solution=self_attention,
    hints=(
        "Project x three times: q = x @ w_q, k = x @ w_k, v = x @ w_v. Every token is a query, "
        "a key and a value.",
        "Scores q @ kᵀ (swap the last two dims of k) divided by √E, E = q.shape[-1]; softmax "
        "over the keys (the last axis), so each query's weights sum to 1.",
        "weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1); "
        "return weights @ v, weights",
    ),
    mistakes=(
        Mistake("swapped_outputs", "You returned (weights, out): return (out, weights), in "
                                   "that order.", _sa_swapped),
        Mistake("no_scaling", "You forgot to divide the scores by √E (E = the query/key width, "
                              "w_q.shape[1]).", _sa_no_scaling),
        Mistake("sqrt_of_D", "You divided by √D, the width of x. The scale uses the width of "
                             "the queries and keys, E = w_q.shape[1].", _sa_sqrt_D),
        Mistake("wrong_axis", "Your softmax runs over the queries (dim -2). Each query's "
                              "weights over the keys must sum to 1: softmax over dim -1.",
                _sa_wrong_axis),
        Mistake("transposed_weights", "You multiplied the transposed weights by v. Row i of "
                                      "weights belongs to query i: out = weights @ v.",
                _sa_transposed),
        Mistake("scores_transposed", "You computed k @ qᵀ: row i of those scores belongs to "
                                     "key i, not query i. Compute q @ kᵀ (q rows, k columns), "
                                     "then the softmax over the last axis.",
                _sa_scores_transposed),
        Mistake("unstable_softmax", "Your softmax overflows on large scores (exp of a big "
                                    "score is inf, and inf/inf = NaN). Subtract each row's "
                                    "maximum before exp, or use torch.softmax.",
                _sa_unstable),
    ),
)
