"""Capstone: ``induction_score`` (reading an induction head off its attention map) and
``causal_block`` (assembling a pre-norm decoder block from MultiHeadAttention and a mask)."""

from __future__ import annotations

import torch
from torch import nn

from course_lib.attention import MultiHeadAttention, masks
from course_lib.toolkit.checking import Case, Exercise, Mistake


def _causal_attention(n: int, gen: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """A random (n, n) causal attention map: rows sum to 1, zeros above the diagonal."""
    scores = 2.0 * torch.randn(n, n, generator=gen, dtype=torch.float64)
    scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(-1).to(dtype)


def _cases(gen: torch.Generator) -> list[Case]:
    return [
        Case("N=12, period 6", (_causal_attention(12, gen), 6), note="two copies of 6 tokens"),
        Case("N=15, period 5", (_causal_attention(15, gen), 5), note="three copies"),
        Case("N=9, period 4", (_causal_attention(9, gen, torch.float64), 4),
             note="float64, the last copy is cut short"),
        Case("N=7, period 2", (_causal_attention(7, gen), 2)),
    ]


def _diagonal_mean(attn: torch.Tensor, period: int, shift: int, first: int) -> torch.Tensor:
    """Mean of attn[i, i - period + shift] over i = first ... N-1, as a 0-d tensor."""
    rows = torch.arange(first, attn.shape[-1])
    return attn[rows, rows - period + shift].mean()


def _oracle(attn: torch.Tensor, period: int) -> torch.Tensor:
    return _diagonal_mean(attn, period, shift=1, first=period)


def induction_score(attn: torch.Tensor, period: int) -> float:
    """Mean weight that query i puts on key i - period + 1, over the repeat i = period ... N-1.

    attn: (N, N) attention weights (row = query, column = key) of one head on a sequence whose
    tokens repeat with this period (token i equals token i - period).
    """
    n = attn.shape[-1]
    rows = torch.arange(period, n)             # queries inside the repeat
    return attn[rows, rows - period + 1].mean().item()


def _same_token(attn, period):            # the earlier copy of the same token
    return _diagonal_mean(attn, period, shift=0, first=period)


def _whole_diagonal(attn, period):         # also row period-1, which is not in the repeat
    return _diagonal_mean(attn, period, shift=1, first=period - 1)


def _summed(attn, period):
    return _oracle(attn, period) * (attn.shape[-1] - period)


def _previous_token(attn, period):
    return attn.diagonal(-1).mean()


def _previous_token_repeat(attn, period):   # attn[i, i-1] over the repeat only
    return _diagonal_mean(attn, period, shift=period - 1, first=period)


def _divided_by_n(attn, period):
    return _oracle(attn, period) * (attn.shape[-1] - period) / attn.shape[-1]


def _transposed(attn, period):
    return _oracle(attn.T.contiguous(), period)


_PREVIOUS_TOKEN = ("You computed the previous-token score attn[i, i-1]. The induction score "
                   "looks back a whole period: attn[i, i - period + 1].")

INDUCTION_SCORE = Exercise(
    id="induction_score",
    chapter="12_capstone",
    title="The induction score of an attention map",
    signature="induction_score(attn (N, N), period) -> float (or a 0-d tensor)",
    params=("attn", "period"),
    cases=_cases,
    oracle=_oracle,
    solution=induction_score,
    hints=(
        "In the repeat, query i holds the same token as position i - period. An induction head "
        "looks at what came *after* that earlier occurrence, to predict what comes next.",
        "So read the weights attn[i, i - period + 1] for the queries i = period, ..., N-1 (the "
        "ones that have an earlier occurrence) and average them: N - period numbers.",
        "rows = torch.arange(period, N); return attn[rows, rows - period + 1].mean().item()",
    ),
    mistakes=(
        Mistake("same_token", "You read attn[i, i - period]: the earlier copy of the same token "
                "(a duplicate-token head). An induction head attends one step later, to the "
                "token that followed it: attn[i, i - period + 1].", _same_token),
        Mistake("whole_diagonal", "You averaged the whole diagonal, including query "
                "i = period - 1, which is still in the first copy and has no earlier occurrence. "
                "Start at i = period.", _whole_diagonal),
        Mistake("sum_not_mean", "You summed the weights; the score is their mean over the "
                "N - period queries of the repeat (so it lies between 0 and 1).", _summed),
        Mistake("previous_token", _PREVIOUS_TOKEN, _previous_token),
        Mistake("previous_token_repeat", _PREVIOUS_TOKEN, _previous_token_repeat,
                family="previous_token"),
        Mistake("divided_by_n", "You divided the sum by N, the size of the map. The score is "
                "the mean over the N - period queries of the repeat (i = period ... N-1): "
                "divide by N - period, or use .mean() on those N - period weights.",
                _divided_by_n),
        Mistake("transposed", "You swapped queries and keys: rows of attn are queries, columns "
                "are keys, so read attn[i, i - period + 1], not attn[i - period + 1, i].",
                _transposed),
    ),
)


# --------------------------------------------------------------------------- causal_block


def _block_parts(D: int, H: int, gen: torch.Generator, dtype=torch.float32):
    """A MultiHeadAttention, two LayerNorms and an MLP with every parameter drawn from ``gen``
    (LayerNorm gains and biases too, so that swapping the norms changes the answer)."""
    attn = MultiHeadAttention(D, H)
    ln1, ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
    mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
    with torch.no_grad():
        for module in (attn, ln1, ln2, mlp):
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / 2)
    return tuple(m.to(dtype).eval() for m in (attn, ln1, ln2, mlp))


def _block_cases(gen: torch.Generator) -> list[Case]:
    def case(name, B, L, D, H, dtype=torch.float32, note=""):
        x = torch.randn(B, L, D, generator=gen, dtype=torch.float64).to(dtype)
        return Case(name, (x, *_block_parts(D, H, gen, dtype)), note=note)

    return [case("B=2, L=5, D=8, H=2", 2, 5, 8, 2),
            case("B=1, L=7, D=12, H=3", 1, 7, 12, 3, note="three heads"),
            case("B=2, L=6, D=8, H=4, float64", 2, 6, 8, 4, torch.float64),
            case("B=3, L=1, D=4, H=1", 3, 1, 4, 1, note="a single token")]


def causal_block(x, attn, ln1, ln2, mlp):
    """Pre-norm decoder block: x + attn(ln1(x)) under a causal mask, then + mlp(ln2(x)).

    x: (B, L, D); attn: a course_lib MultiHeadAttention; ln1, ln2: LayerNorms; mlp: a module.
    """
    L = x.shape[-2]
    keep = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()   # (L, L), True = may attend
    x = x + attn(ln1(x), attn_mask=keep)
    return x + mlp(ln2(x))


def _post_norm(x, attn, ln1, ln2, mlp):
    x = ln1(x + attn(x, attn_mask=masks.causal_mask(x.shape[-2])))
    return ln2(x + mlp(x))


def _no_mask(x, attn, ln1, ln2, mlp):
    x = x + attn(ln1(x))
    return x + mlp(ln2(x))


def _inverted_mask(x, attn, ln1, ln2, mlp):
    x = x + attn(ln1(x), attn_mask=~masks.causal_mask(x.shape[-2]))
    return x + mlp(ln2(x))


def _no_residual(x, attn, ln1, ln2, mlp):
    x = attn(ln1(x), attn_mask=masks.causal_mask(x.shape[-2]))
    return mlp(ln2(x))


def _no_mlp_residual(x, attn, ln1, ln2, mlp):
    x = x + attn(ln1(x), attn_mask=masks.causal_mask(x.shape[-2]))
    return mlp(ln2(x))


def _no_attention_residual(x, attn, ln1, ln2, mlp):
    x = attn(ln1(x), attn_mask=masks.causal_mask(x.shape[-2]))
    return x + mlp(ln2(x))


def _one_norm(x, attn, ln1, ln2, mlp, *, norm="ln1"):
    ln = ln1 if norm == "ln1" else ln2
    x = x + attn(ln(x), attn_mask=masks.causal_mask(x.shape[-2]))
    return x + mlp(ln(x))


def _parallel(x, attn, ln1, ln2, mlp):
    return x + attn(ln1(x), attn_mask=masks.causal_mask(x.shape[-2])) + mlp(ln2(x))


_NO_RESIDUAL = ("You dropped a residual connection: each sub-layer's output is added to its "
                "input, x = x + attn(ln1(x), ...) and then x + mlp(ln2(x)), not attn(...) or "
                "mlp(...) alone.")
_ONE_NORM = ("You used the same LayerNorm before both sub-layers. Each has its own, with its "
             "own learned gain and bias: ln1 before the attention, ln2 before the MLP.")

CAUSAL_BLOCK = Exercise(
    id="causal_block",
    chapter="12_capstone",
    title="Assemble a causal transformer block",
    signature="causal_block(x (B, L, D), attn MultiHeadAttention, ln1, ln2 LayerNorm, mlp) "
              "-> (B, L, D)",
    params=("x", "attn", "ln1", "ln2", "mlp"),
    cases=_block_cases,
    oracle=causal_block,
    solution=causal_block,
    hints=(
        "Two sub-layers, each wrapped the pre-norm way: x = x + sublayer(norm(x)). The first "
        "sub-layer is attention with ln1, the second the MLP with ln2, applied to the updated x.",
        "The attention must not see the future: build the (L, L) mask with "
        "masks.causal_mask(L) (True = may attend, the convention of MultiHeadAttention) and "
        "pass it as attn(ln1(x), attn_mask=mask).",
        "mask = masks.causal_mask(x.shape[-2]); x = x + attn(ln1(x), attn_mask=mask); "
        "return x + mlp(ln2(x))",
    ),
    mistakes=(
        Mistake("inverted_mask", "Your mask is inverted: course_lib's MultiHeadAttention (like "
                "scaled_dot_product_attention) takes True = may attend, so pass "
                "masks.causal_mask(L) itself, not ~masks.causal_mask(L) (that is "
                "nn.MultiheadAttention's convention).", _inverted_mask),
        Mistake("no_mask", "Your attention has no causal mask: every token also reads the tokens "
                "after it. Pass attn_mask=masks.causal_mask(L).", _no_mask),
        Mistake("post_norm", "You normalised after the residual addition (post-norm, the original "
                "Transformer). This block is pre-norm: x = x + attn(ln1(x)), then "
                "x = x + mlp(ln2(x)).", _post_norm),
        Mistake("no_residual", _NO_RESIDUAL, _no_residual),
        Mistake("no_mlp_residual", _NO_RESIDUAL, _no_mlp_residual, family="no_residual"),
        Mistake("no_attention_residual", _NO_RESIDUAL, _no_attention_residual,
                family="no_residual"),
        Mistake("one_norm_twice", _ONE_NORM, _one_norm),
        Mistake("ln2_twice", _ONE_NORM, lambda *a: _one_norm(*a, norm="ln2"),
                family="one_norm_twice"),
        Mistake("parallel", "You fed the MLP the block's input: it reads the *updated* x, after "
                "the attention's residual addition (mlp(ln2(x)) with the new x).", _parallel),
    ),
    allowed_course_calls=("course_lib.attention.multihead", "course_lib.attention.masks"),
    forbidden=("transformer_block",),   # the exercise is the block: TransformerBlock may not do it
)
