"""Chapter 11 (capstone): ``induction_score``, reading an induction head off its attention map."""

from __future__ import annotations

import torch

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


def _transposed(attn, period):
    return _oracle(attn.T.contiguous(), period)


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
        Mistake("previous_token", "You computed the previous-token score attn[i, i-1]. The "
                "induction score looks back a whole period: attn[i, i - period + 1].",
                _previous_token),
        Mistake("transposed", "You swapped queries and keys: rows of attn are queries, columns "
                "are keys, so read attn[i, i - period + 1], not attn[i - period + 1, i].",
                _transposed),
    ),
)
