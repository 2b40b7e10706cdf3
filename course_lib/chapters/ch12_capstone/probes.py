r"""Scores that say what an attention head does, computed from its weights ``A (..., N, N)``.

- previous-token score: :math:`\frac{1}{N-1}\sum_{i=1}^{N-1} A_{i,i-1}`;
- induction score on a sequence with period :math:`p` (``x_i = x_{i-p}`` for ``i >= p``):
  :math:`\frac{1}{N-p}\sum_{i=p}^{N-1} A_{i,\,i-p+1}`, the weight each query in the repeat puts on
  the token right *after* the earlier occurrence of itself;
- attention mass: the weight a query row puts on a chosen set of keys.

Each score is 1 for a head that does exactly that and about ``1/N``-ish for a uniform head.
"""

from __future__ import annotations

import torch


def _check_square(attn: torch.Tensor) -> tuple[int, int]:
    if attn.dim() < 2 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attn must be (..., N, N), got {tuple(attn.shape)}")
    return attn.shape[-2], attn.shape[-1]


def previous_token_score(attn: torch.Tensor) -> torch.Tensor:
    """Mean of the first sub-diagonal ``A[i, i-1]``, ``i = 1..N-1``; ``(..., N, N)`` → ``(...)``."""
    n, _ = _check_square(attn)
    return attn.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


def induction_score(attn: torch.Tensor, period: int) -> torch.Tensor:
    """Mean of ``A[i, i-period+1]`` over the repeat ``i = period..N-1``: (..., N, N) → (...).

    That diagonal sits ``period - 1`` below the main one. (``A[i, i-period]``, one further
    left, is the earlier copy of the *same* token: a duplicate-token head, not an induction head.)
    """
    n, _ = _check_square(attn)
    if not 1 <= period < n:
        raise ValueError(f"period must be in [1, N-1] = [1, {n - 1}], got {period}")
    return attn.diagonal(offset=-(period - 1), dim1=-2, dim2=-1)[..., 1:].mean(-1)


def duplicate_token_score(attn: torch.Tensor, period: int) -> torch.Tensor:
    """Mean of ``A[i, i-period]`` (the earlier copy of the same token), ``i = period..N-1``."""
    n, _ = _check_square(attn)
    if not 1 <= period < n:
        raise ValueError(f"period must be in [1, N-1] = [1, {n - 1}], got {period}")
    return attn.diagonal(offset=-period, dim1=-2, dim2=-1).mean(-1)


def attention_mass(attn_row: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Weight a query row puts on the keys where ``keys`` is True: (..., S), (..., S) → (...)."""
    return (attn_row * keys.to(attn_row.dtype)).sum(-1)


def head_table(maps: list[torch.Tensor], score) -> torch.Tensor:
    """Apply ``score`` to every layer's ``(B, H, N, N)`` map and average over the batch:
    ``(layers, heads)``."""
    return torch.stack([score(m).mean(0) for m in maps])
