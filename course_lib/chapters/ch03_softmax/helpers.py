r"""Softmax, taken apart: the naive and stable forms, log-sum-exp, the Jacobian, softmax in blocks.

.. math:: \mathrm{softmax}(x)_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}}, \quad m = \max_j x_j

Everything works over one dimension ``dim`` of a tensor of any shape ``(..., n)``; the chapter
"Softmax" uses these functions to show, live, what goes wrong and why the fixes work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course_lib.attention.softmax import safe_softmax as stable_softmax  # the core's, renamed


def naive_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x) / Σ exp(x) with no shift: overflows to inf (then NaN) for large logits."""
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def logsumexp(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """log Σ exp(x) = m + log Σ exp(x − m), m = max(x); shape of ``x`` without ``dim``."""
    m = x.amax(dim=dim, keepdim=True)
    m = m.masked_fill(m == float("-inf"), 0.0)
    return (m + torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))).squeeze(dim)


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """log softmax(x) = x − logsumexp(x): finite even where softmax underflows to 0."""
    return x - logsumexp(x, dim=dim).unsqueeze(dim)


@dataclass(frozen=True)
class OverflowLimits:
    """Where ``exp`` stops being representable in one floating-point dtype."""

    dtype: torch.dtype
    max_value: float      # finfo(dtype).max
    exp_overflow: float   # log(max): exp(x) = inf for x above this (up to rounding)
    exp_underflow: float  # log(smallest subnormal / 2): exp(x) rounds to 0 below this


def overflow_limits(dtype: torch.dtype) -> OverflowLimits:
    """The largest ``x`` with finite ``exp(x)``, and where it underflows to 0, for ``dtype``.

    Rounding to nearest sends ``exp(x)`` to 0 only once it falls below half the smallest
    subnormal ``s``: the bound is ln(s / 2) = ln(s) − ln 2 (computed as a difference because
    s / 2 is itself 0 in float64).
    """
    fi = torch.finfo(dtype)
    tiny = fi.smallest_normal * fi.eps  # smallest subnormal
    return OverflowLimits(dtype, float(fi.max), math.log(fi.max), math.log(tiny) - math.log(2))


def first_overflow(dtype: torch.dtype, start: float = 0.0, stop: float = 800.0,
                   step: float = 0.01) -> float:
    """The first ``x`` on a grid ``start, start+step, …`` where ``exp(x)`` in ``dtype`` is inf."""
    xs = torch.arange(start, stop, step, dtype=torch.float64)
    bad = torch.isinf(torch.exp(xs.to(dtype)))
    if not bad.any():
        raise ValueError(f"exp does not overflow in {dtype} below {stop}")
    return float(xs[bad.nonzero()[0, 0]])


def first_underflow(dtype: torch.dtype, start: float = 0.0, stop: float = -800.0,
                    step: float = 0.01) -> float:
    """The first ``x`` on a grid ``start, start−step, …`` (downwards) where ``exp(x)`` is 0.

    ``x`` is rounded to ``dtype`` before ``exp``, as a tensor of that dtype would be.
    """
    xs = torch.arange(start, stop, -step, dtype=torch.float64)
    zero = torch.exp(xs.to(dtype)) == 0
    if not zero.any():
        raise ValueError(f"exp does not underflow in {dtype} above {stop}")
    return float(xs[zero.nonzero()[0, 0]])


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """∂softmax/∂x = diag(p) − p pᵀ for probabilities ``p (..., n)``; returns ``(..., n, n)``."""
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def jacobian_norm(logits: torch.Tensor, scale: float = 1.0) -> float:
    """Spectral norm of the softmax Jacobian at ``scale · logits`` (1-D ``logits``).

    It is at most 1/2 and tends to 0 as the softmax saturates (one weight → 1).
    """
    p = stable_softmax(scale * logits.to(torch.float64))
    return float(torch.linalg.matrix_norm(softmax_jacobian(p), ord=2))


def entropy(p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy −Σ p log p in nats (0 log 0 = 0); shape of ``p`` without ``dim``."""
    return -(p * torch.log(p.clamp_min(torch.finfo(p.dtype).tiny))).sum(dim=dim)


def block_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Statistics of one block ``(..., n)``: m = max(x) and ℓ = Σ exp(x − m), each ``(...,)``."""
    m = x.amax(dim=-1)
    return m, torch.exp(x - m.unsqueeze(-1)).sum(dim=-1)


def combine_stats(m1: torch.Tensor, l1: torch.Tensor, m2: torch.Tensor,
                  l2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two blocks' (m, ℓ): m = max(m₁, m₂), ℓ = ℓ₁·e^{m₁−m} + ℓ₂·e^{m₂−m}."""
    m = torch.maximum(m1, m2)
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)


def softmax_in_blocks(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last dim of ``(..., n)`` computed block by block from (m, ℓ) statistics.

    Pass 1 reads each block once and keeps only the running (m, ℓ); pass 2 writes
    exp(x − m) / ℓ. The online-softmax idea behind FlashAttention.
    """
    blocks = torch.split(x, block_size, dim=-1)
    m, l = block_stats(blocks[0])
    for b in blocks[1:]:
        m, l = combine_stats(m, l, *block_stats(b))
    return torch.exp(x - m.unsqueeze(-1)) / l.unsqueeze(-1)
