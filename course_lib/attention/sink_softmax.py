r"""A learned attention sink (gpt-oss): one logit per head that takes probability mass and adds
no value.

.. math:: p_{ij} = \frac{e^{s_{ij}}}{e^{b_h} + \sum_{j'} e^{s_{ij'}}}, \qquad
          o_i = \sum_j p_{ij} v_j = \sigma(\mathrm{LSE}_j\, s_{ij} - b_h)\,
          \mathrm{softmax}(s_i) V

The sink ``b_h`` is in the normaliser only: the weights of a row sum to
:math:`\sigma(\mathrm{LSE} - b_h) < 1`, and what is missing went to "nothing". A head with
nothing to read no longer has to park its mass on a real token (the first one, as Xiao et al.
found: StreamingLLM). This is another idea than chapter 10's *kept* sink tokens (``KVCache``'s
``sinks``), which keep the first tokens' keys in a rolling cache; a learned sink has no key.
Following Miller's "Attention Is Off By One" (a constant sink ``b = 0``) and gpt-oss, where
``b_h`` is a parameter of each head.

Shapes: scores ``(..., H, L, S)``, sinks ``(H,)``.
"""

from __future__ import annotations

import math

import torch

from ._validate import (
    causal_alignment,
    check_sdpa_args,
    compute_dtype,
    fold_groups,
    query_groups,
    uneven_gqa,
    unfold_groups,
)
from .masks import causal_mask


def _check_sinks(sinks: object, heads: int, where: str) -> torch.Tensor:
    if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point():
        raise TypeError(f"sinks must be a floating-point tensor of shape (H,), got "
                        f"{getattr(sinks, 'dtype', type(sinks).__name__)}")
    if tuple(sinks.shape) != (heads,):
        raise ValueError(f"sinks must have shape (H,) = ({heads},) for {where}, got "
                         f"{tuple(sinks.shape)}")
    return sinks


def sink_softmax(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """``e^s / (e^b + Σ e^s)`` over the last dim of ``scores (..., H, L, S)``, ``b = sinks (H,)``.

    Max-shifted with the sink included, so nothing overflows; ``-inf`` scores get 0; a fully
    masked row gives zeros (all its mass on the sink). Returns a tensor like ``scores`` whose rows
    sum to ``σ(LSE(s) − b) < 1``.
    """
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        raise TypeError(f"scores must be a floating-point tensor, got "
                        f"{getattr(scores, 'dtype', type(scores).__name__)}")
    if scores.dim() < 3:
        raise ValueError(f"scores must have shape (..., H, L, S), got {tuple(scores.shape)}")
    H = scores.shape[-3]
    b = _check_sinks(sinks, H, f"scores of shape {tuple(scores.shape)}")
    b = b.to(scores.dtype).reshape(H, 1, 1).expand(*scores.shape[:-1], 1)
    m = torch.maximum(scores.amax(dim=-1, keepdim=True), b) if scores.shape[-1] else b
    e = torch.exp(scores - m)                       # exp(-inf) = 0 for masked keys
    return e / (torch.exp(b - m) + e.sum(dim=-1, keepdim=True))


def sink_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   sinks: torch.Tensor, attn_mask: torch.Tensor | None = None,
                   is_causal: bool = False, scale: float | None = None,
                   enable_gqa: bool = False) -> torch.Tensor:
    """Attention whose softmax has a learned sink per query head: ``sink_softmax(QKᵀ·s + M) V``.

    Arguments as :func:`torch.nn.functional.scaled_dot_product_attention` (query
    ``(B, Hq, L, E)``, key ``(B, Hkv, S, E)``, value ``(B, Hkv, S, Ev)``, bool masks True = may
    attend, ``enable_gqa``), without dropout, plus ``sinks (Hq,)``. Returns ``(B, Hq, L, Ev)``.
    """
    check_sdpa_args(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa)
    if query.dim() < 3:
        raise ValueError(f"sink_attention needs a head dim: query (..., H, L, E), got "
                         f"{tuple(query.shape)}")
    _check_sinks(sinks, query.shape[-3], f"query of shape {tuple(query.shape)}")
    key, value, enable_gqa = uneven_gqa(query, key, value, enable_gqa)
    attn_mask, align = causal_alignment(query, key, attn_mask, is_causal)
    groups = query_groups(query, key, enable_gqa)
    dt = compute_dtype(query.dtype)
    q, k = query.to(dt), key.to(dt)
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    s = 1.0 / math.sqrt(E) if scale is None else scale
    scores = unfold_groups(fold_groups(q, groups) @ k.transpose(-2, -1), groups) * s
    if align is not None:
        attn_mask = causal_mask(L, S, device=q.device, align=align)
    if attn_mask is not None:
        scores = (scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                  else scores + attn_mask.to(dt))
    p = sink_softmax(scores, sinks)
    out = fold_groups(p, groups) @ value.to(dt)
    return unfold_groups(out, groups).to(query.dtype)


def sink_share(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """``(..., H, L)``: the mass each query gives the sink, ``1 − Σ_j p_ij = σ(b − LSE(s))``."""
    return 1.0 - sink_softmax(scores, sinks).sum(dim=-1)


__all__ = ["sink_attention", "sink_share", "sink_softmax"]
