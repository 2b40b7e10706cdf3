r"""Partial attention results and their exact merge by log-sum-exp.

Attend a block of queries to one subset of the keys and keep, beside the output, the log-sum-exp
of each row's scores; two such partials over disjoint key sets merge into the attention over
their union, exactly. With :math:`S = s\,QK^\top + M` over a key set :math:`A`,

.. math::
    \mathrm{lse}_A = \ln \textstyle\sum_{j \in A} e^{S_j}, \qquad
    O_A = \textstyle\sum_{j \in A} e^{S_j - \mathrm{lse}_A} V_j,

and for :math:`A \cup B` (disjoint) with :math:`m = \max(\mathrm{lse}_A, \mathrm{lse}_B)`:

.. math::
    \mathrm{lse} = m + \ln\!\big(e^{\mathrm{lse}_A - m} + e^{\mathrm{lse}_B - m}\big), \qquad
    O = e^{\mathrm{lse}_A - \mathrm{lse}}\, O_A + e^{\mathrm{lse}_B - \mathrm{lse}}\, O_B .

This is the Flash chapter's online-softmax update written for two *normalised* partials (flash's
running ``(m, ℓ, O)`` keeps the sum unnormalised instead; ``lse = m + ln ℓ``). Shifting by the
larger lse keeps every exponent ``<= 0``: no overflow, whatever the scores' size. A row that saw
no key has ``lse = -inf`` and ``O = 0`` and merges as the empty set does.

Shapes: output ``(..., L, Ev)``, lse ``(..., L)`` (the layout of torch's flash kernels).
"""

from __future__ import annotations

import math

import torch

from ._validate import compute_dtype

_NEG_INF = float("-inf")


def merge_partials(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
                   lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attentions over disjoint key sets: ``(out (..., L, Ev), lse (..., L))``.

    ``out = e^{lse_a - lse} out_a + e^{lse_b - lse} out_b`` with
    ``lse = m + ln(e^{lse_a - m} + e^{lse_b - m})``, ``m = max(lse_a, lse_b)``. Rows where both
    lse are ``-inf`` (no key seen) stay ``out = 0``, ``lse = -inf``. Differentiable.
    """
    for name, t in (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if out_a.shape != out_b.shape:
        raise ValueError(f"out_a {tuple(out_a.shape)} and out_b {tuple(out_b.shape)} must have "
                         "the same shape (..., L, Ev)")
    if out_a.dim() < 1 or lse_a.shape != out_a.shape[:-1] or lse_b.shape != out_b.shape[:-1]:
        raise ValueError(f"lse must have the output's shape without its last dim: out "
                         f"{tuple(out_a.shape)} needs lse {tuple(out_a.shape[:-1])}, got lse_a "
                         f"{tuple(lse_a.shape)} and lse_b {tuple(lse_b.shape)}")
    m = torch.maximum(lse_a, lse_b).detach()          # the shift cancels: no gradient through it
    m = m.masked_fill(m == _NEG_INF, 0.0)             # both empty: e^{-inf - 0} = 0, not NaN
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)   # each <= 1
    total = w_a + w_b
    lse = m + torch.log(total)                        # -inf where both are empty
    denom = total.masked_fill(total == 0, 1.0)
    out = (w_a / denom).unsqueeze(-1) * out_a + (w_b / denom).unsqueeze(-1) * out_b
    return out, lse


def partial_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      mask: torch.Tensor | None = None, scale: float | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``query (..., L, E)`` to this block of ``key (..., S, E)``, ``value (..., S,
    Ev)`` only: ``(out (..., L, Ev), lse (..., L))`` in the compute dtype (float32 for halves).

    ``out = softmax(s QKᵀ + M) V`` and ``lse = logsumexp(s QKᵀ + M)`` over these S keys; ``mask``:
    bool, True = may attend, broadcastable to ``(..., L, S)``. A row with no allowed key gets
    ``out = 0``, ``lse = -inf`` (what :func:`merge_partials` expects of an empty block).
    """
    work = compute_dtype(query.dtype)
    q, k, v = query.to(work), key.to(work), value.to(work)
    E = q.shape[-1]
    s = (1.0 / math.sqrt(E) if E else 1.0) if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * s
    if mask is not None:
        scores = scores.masked_fill(~mask, _NEG_INF)
    lse = torch.logsumexp(scores, dim=-1)                       # -inf for an empty row
    p = torch.exp(scores - lse.masked_fill(lse == _NEG_INF, 0.0).unsqueeze(-1))
    return p @ v, lse
