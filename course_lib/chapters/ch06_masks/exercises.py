"""Chapter 6 (masks): ``causal_mask``, ``padding_mask``, ``masked_attention``.

Convention everywhere (torch's SDPA): a bool mask is True where a query *may* attend a key.
"""

from __future__ import annotations

import math

import torch

from course_lib.attention import reference
from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.checking._probes import choice_probe, scale_probe

# --------------------------------------------------------------------------- causal_mask


def _causal_cases(gen: torch.Generator) -> list[Case]:
    return [Case("n=5", (5,)), Case("n=1", (1,)), Case("n=2", (2,)), Case("n=8", (8,))]


def _causal_oracle(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril()


def causal_mask(n: int) -> torch.Tensor:
    """(n, n) bool, True where query i may attend key j, i.e. j <= i (the past and itself)."""
    return torch.ones(n, n, dtype=torch.bool).tril()


CAUSAL_MASK = Exercise(
    id="causal_mask",
    chapter="06_masks",
    title="The causal mask",
    signature="causal_mask(n) -> bool (n, n), True where j <= i",
    params=("n",),
    cases=_causal_cases,
    oracle=_causal_oracle,
    solution=causal_mask,
    hints=(
        "Row i is query i, column j is key j. Query i may look at keys 0 ... i: itself and "
        "the past, never the future.",
        "Compare a column of query positions with a row of key positions (broadcasting), or "
        "keep the lower triangle of a matrix of ones. Return bools.",
        "return torch.ones(n, n, dtype=torch.bool).tril()",
    ),
    mistakes=(
        Mistake("inverted", "Your mask is inverted: True must mean 'may attend'. Query i may "
                "attend keys j <= i.", lambda n: ~torch.ones(n, n, dtype=torch.bool).tril()),
        Mistake("strict", "You excluded the diagonal (j < i): a query may attend its own "
                "position, so use j <= i.",
                lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1)),
        Mistake("upper_triangle", "You kept the upper triangle (j >= i): that lets each query "
                "see the future. Query i may attend keys j <= i (the lower triangle).",
                lambda n: torch.ones(n, n, dtype=torch.bool).triu()),
        Mistake("not_bool", "Your mask holds numbers (1 and 0), not booleans. A float mask is "
                "read as values to add to the scores (adding 1 or 0 hides nothing), and "
                "~mask does not flip it: return dtype torch.bool, e.g. "
                "torch.ones(n, n, dtype=torch.bool).tril() or a comparison j <= i.",
                lambda n: torch.ones(n, n).tril()),
    ),
)

# --------------------------------------------------------------------------- padding_mask


def _padding_cases(gen: torch.Generator) -> list[Case]:
    def tokens(B: int, N: int, low: int = 1) -> torch.Tensor:
        return torch.randint(low, 50, (B, N), generator=gen)

    right = tokens(3, 6)
    right[0, 4:] = 0
    right[2, 2:] = 0
    left = tokens(2, 5)
    left[1, :3] = 0
    other = tokens(2, 7, low=0)
    other[0, 1] = other[1, 3] = 0       # token id 0 is a real token here
    other[0, 5:] = 5
    other[1, 6] = 5
    return [
        Case("right padding", (right,), note="pad id 0 at the ends of rows 0 and 2"),
        Case("left padding", (left,), note="pad id 0 at the start of row 1"),
        Case("pad id 5", (other, 5), note="0 is a real token, 5 is padding"),
        Case("no padding", (tokens(1, 4),)),
    ]


def _padding_oracle(tokens: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    return (tokens != pad_id)[:, None, None, :]


def padding_mask(tokens: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """tokens (B, N) -> bool (B, 1, 1, N): True for real tokens; broadcasts over heads, queries."""
    return (tokens != pad_id)[:, None, None, :]


_PAD_MISSING_AXES = (
    "Your mask lacks an axis: it does not broadcast against the scores (B, H, L, S) the way it "
    "should (its batch axis would line up with the heads or the queries). Return "
    "(B, 1, 1, N): mask[:, None, None, :].")

PADDING_MASK = Exercise(
    id="padding_mask",
    chapter="06_masks",
    title="The padding mask",
    signature="padding_mask(tokens (B, N) int, pad_id=0) -> bool (B, 1, 1, N)",
    params=("tokens", "pad_id"),
    cases=_padding_cases,
    oracle=_padding_oracle,
    solution=padding_mask,
    hints=(
        "A key position may be attended if its token is real, i.e. not the pad id.",
        "tokens != pad_id gives (B, N). The scores have shape (B, H, L, S): insert the head and "
        "query axes (size 1) so the mask broadcasts over them.",
        "return (tokens != pad_id)[:, None, None, :]",
    ),
    mistakes=(
        Mistake("inverted", "Your mask is True on the padding. True must mean 'may attend': "
                "use tokens != pad_id.", lambda t, p=0: (t == p)[:, None, None, :]),
        Mistake("missing_axes", _PAD_MISSING_AXES, lambda t, p=0: t != p),
        Mistake("one_axis_missing", _PAD_MISSING_AXES, lambda t, p=0: (t != p)[:, None, :],
                family="missing_axes"),
        Mistake("masks_queries", "Your mask has shape (B, 1, N, 1): it hides queries, not keys. "
                "Padding keys must get no weight: put N on the last axis, (B, 1, 1, N).",
                lambda t, p=0: (t != p)[:, None, :, None]),
        Mistake("hardcoded_pad_zero", "You compared with 0 instead of pad_id: use the pad_id "
                "argument.", lambda t, p=0: (t != 0)[:, None, None, :]),
        Mistake("not_bool", "Your mask holds numbers (1 and 0), not booleans. A float mask is "
                "read as values to add to the scores (adding 1 or 0 hides nothing), and "
                "~mask does not flip it: return the comparison itself, "
                "(tokens != pad_id)[:, None, None, :], a bool tensor.",
                lambda t, p=0: (t != p).float()[:, None, None, :]),
    ),
)

# --------------------------------------------------------------------------- masked attention


def _masked_cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    pad = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    pad[0, ..., 5:] = False
    pad[1, ..., 3:] = False
    dead = torch.rand(5, 4, generator=gen) > 0.4
    dead[0] = True
    dead[1] = False
    dead[3] = False
    f64 = torch.float64
    big_q, big_k = 20 * r(3, 5), 20 * r(4, 5)
    big_k[1] = big_q[0] * (500 * math.sqrt(5) / big_q[0].square().sum())   # score (0, 1) = 500
    return [
        Case("causal", (r(6, 4), r(6, 4), r(6, 3), causal), note="lower-triangular mask"),
        Case("padding, L != S", (r(2, 3, 4, 8), r(2, 3, 7, 8), r(2, 3, 7, 5), pad),
             note="the last keys of each sequence are padding"),
        Case("fully masked rows", (r(5, 6, dtype=f64), r(4, 6, dtype=f64), r(4, 2, dtype=f64),
                                   dead),
             note="rows 1 and 3 of the mask are all False: those queries must get zeros"),
        Case("nothing masked", (big_q, big_k, r(4, 6), torch.ones(3, 4, dtype=torch.bool)),
             note="mask all True; scores in the hundreds: exp overflows without a max shift"),
    ]


def _masked_oracle(q, k, v, mask):
    dtype = q.dtype
    out = reference.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                 attn_mask=mask)
    return out.to(dtype)


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
    """softmax(QKᵀ/√E with -inf where mask is False) V; a query with no allowed key gets zeros."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    m = scores.amax(dim=-1, keepdim=True)
    m = m.clamp(min=torch.finfo(scores.dtype).min)  # finite even on a dead row
    e = torch.exp(scores - m)                       # hidden keys: exp(-inf) = 0
    z = e.sum(dim=-1, keepdim=True)
    z = torch.where(z == 0, torch.ones_like(z), z)  # dead row: 0 / 1 = 0
    return (e / z) @ v


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def _safe(scores):
    return torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)


def _ma_inverted(q, k, v, mask):
    return _safe(_scores(q, k).masked_fill(mask, float("-inf"))) @ v


def _ma_nan_dead_rows(q, k, v, mask):
    return torch.softmax(_scores(q, k).masked_fill(~mask, float("-inf")), dim=-1) @ v


def _ma_after_softmax(q, k, v, mask):
    return (torch.softmax(_scores(q, k), dim=-1) * mask) @ v


def _ma_fill_zero(q, k, v, mask):
    return torch.softmax(_scores(q, k).masked_fill(~mask, 0.0), dim=-1) @ v


def _ma_finite_fill(q, k, v, mask):
    return torch.softmax(_scores(q, k).masked_fill(~mask, -1e9), dim=-1) @ v


def _ma_unstable(q, k, v, mask, *, guard=True):
    e = torch.exp(_scores(q, k).masked_fill(~mask, float("-inf")))
    z = e.sum(dim=-1, keepdim=True)
    return (e / (torch.where(z == 0, torch.ones_like(z), z) if guard else z)) @ v


def _ma_softmax_over(axis, q, k, v, mask):
    """Masked attention with its softmax over ``axis`` (-2: over the queries)."""
    scores = _scores(q.double(), k.double()).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=axis).nan_to_num(0.0).to(q.dtype) @ v


def _ma_mask_as_numbers(how, q, k, v, mask):
    """Attention with the bool mask used as numbers: added to the scores, or multiplied in."""
    scores = _scores(q.double(), k.double())
    m = mask.double()
    scores = scores + m if how == "added" else scores * m
    return (torch.softmax(scores, dim=-1) @ v.double()).to(q.dtype)


def _ma_no_scaling(q, k, v, mask):
    return _safe((q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf"))) @ v


MASKED_ATTENTION = Exercise(
    id="masked_attention",
    tolerances={torch.float32: (1e-4, 1e-3)},  # float32 attention: exp amplifies rounding
    chapter="06_masks",
    title="Attention with a mask",
    signature="masked_attention(q (..., L, E), k (..., S, E), v (..., S, Ev), "
              "mask bool broadcastable to (..., L, S)) -> (..., L, Ev)",
    params=("q", "k", "v", "mask"),
    cases=_masked_cases,
    oracle=_masked_oracle,
    probes=(scale_probe(
        lambda f, q, k, v, mask: reference.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), attn_mask=mask, scale=f).to(q.dtype),
        lambda q, *a: q.shape[-1] ** -0.5,
        {"1/√S": lambda q, k, *a: k.shape[-2] ** -0.5, "1/√L": lambda q, *a: q.shape[-2] ** -0.5,
         "1/E": lambda q, *a: 1 / q.shape[-1], "1": lambda *a: 1.0},
        "1/√E", "Scale the scores by 1/√E, E = q.shape[-1] (the width of a query), before "
        "masking.", "02_scaling: The math: Var(q · k) = E"),
        choice_probe(
            "softmax_axis", _ma_softmax_over, {"queries": -2},
            {"queries": "masked attention whose softmax runs over the queries (dim=-2), so "
                        "each key's column sums to 1, not each query's row"},
            "Each query distributes its attention over the keys: softmax over the last axis "
            "(dim=-1), the keys, so that every row of weights sums to 1.",
            "03_softmax: The math", ids={"queries": "softmax_over_queries"}),
        choice_probe(
            "mask_as_numbers", _ma_mask_as_numbers, {"added": "added", "multiplied": "multiplied"},
            {"added": "attention with the boolean mask added to the scores as 0/1",
             "multiplied": "attention with the scores multiplied by the mask as 0/1 before the "
                           "softmax (a hidden key's score becomes 0, not -inf)"},
            "A hidden key must get weight exp(-inf) = 0: set its score to -inf before the "
            "softmax (scores.masked_fill(~mask, float('-inf'))); a 0/1 mask added to or "
            "multiplied into the scores only nudges them.",
            "06_masks: Bool or additive?",
            ids={"added": "mask_added", "multiplied": "mask_added"}),),
    solution=masked_attention,
    forbidden=("sdpa",),
    hints=(
        "Compute the scaled scores, then make every forbidden key (mask False) impossible "
        "before the softmax: its score becomes -inf, so its weight is exp(-inf) = 0.",
        "A query whose keys are all masked has a row of -inf scores; a plain softmax gives "
        "0/0 = NaN there. Such a query must get zeros: guard the max and the sum.",
        "scores.masked_fill(~mask, -inf); m = amax, replaced by 0 where it is -inf; "
        "e = exp(scores - m); weights = e / where(sum == 0, 1, sum); return weights @ v",
    ),
    mistakes=(
        Mistake("inverted_mask", "You masked the keys where the mask is True. True means 'may "
                "attend': fill -inf where the mask is False (~mask).", _ma_inverted),
        Mistake("nan_on_dead_rows", "Queries whose keys are all masked get NaN (softmax of a "
                "row of -inf is 0/0). They must get zeros: replace a -inf row maximum by 0 and "
                "divide by 1 where the sum is 0.", _ma_nan_dead_rows),
        Mistake("mask_after_softmax", "You applied the mask after the softmax, so the kept "
                "weights no longer sum to 1. Mask the scores (with -inf) before the softmax.",
                _ma_after_softmax),
        Mistake("fill_zero", "You replaced masked scores by 0, but exp(0) = 1: masked keys "
                "still get weight. Fill them with -inf.", _ma_fill_zero),
        Mistake("finite_fill", "You filled masked scores with a large negative number (-1e9, "
                "or the dtype's minimum) instead of -inf. Where a query has some allowed key "
                "that works, but a query with no allowed key gets the same score everywhere, "
                "so it averages all the values instead of returning zeros. Use -inf and guard "
                "the all-masked rows (max replaced by 0, sum 0 replaced by 1).",
                _ma_finite_fill),
        Mistake("no_scaling", "You forgot to scale the scores by 1/√E (E = q.shape[-1]).",
                _ma_no_scaling),
        Mistake("not_stable", "Your softmax overflows on large scores (exp(400) = inf in "
                "float32, and inf/inf = NaN). Subtract each row's maximum (0 for a row with no "
                "allowed key) before exp; the weights are mathematically the same.",
                _ma_unstable),
        Mistake("not_stable_nan_rows", "Your softmax overflows on large scores (exp(400) = inf, "
                "inf/inf = NaN), and queries with no allowed key get 0/0 = NaN. Subtract each "
                "row's maximum (0 where it is -inf) before exp, and divide by 1 where the sum "
                "is 0.", lambda q, k, v, mask: _ma_unstable(q, k, v, mask, guard=False)),
    ),
)
