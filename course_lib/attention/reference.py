r"""The textbook attention: every intermediate tensor materialized, one line per formula.

.. math:: \mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(QK^\top \cdot s + M\right) V,
          \quad s = 1/\sqrt{E}

Shapes: query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)`` → ``(..., L, Ev)``.
Semantics are those of :func:`torch.nn.functional.scaled_dot_product_attention` (torch 2.13).
"""

from __future__ import annotations

import math

import torch

from ._validate import check_sdpa_args, compute_dtype, expand_gqa
from .masks import causal_mask
from .softmax import safe_softmax


def attention_weights(
    query: torch.Tensor,
    key: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """The ``(..., L, S)`` probabilities softmax(QKᵀ·s + M); rows sum to 1 (0 if fully masked)."""
    value = key[..., :1]  # weights do not depend on V; a stand-in with the right S
    check_sdpa_args(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa)
    if enable_gqa:
        key, _ = expand_gqa(query, key, value)
    dtype = query.dtype
    q, k = query.to(compute_dtype(dtype)), key.to(compute_dtype(dtype))
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * s                        # (..., L, S)
    if is_causal:
        attn_mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))  # True = may attend
        else:
            scores = scores + attn_mask.to(scores.dtype)            # additive mask
    return safe_softmax(scores).to(dtype)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """softmax(QKᵀ·s + M) V, the ``(..., L, S)`` scores materialized; returns ``(..., L, Ev)``."""
    check_sdpa_args(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if enable_gqa:
        key, value = expand_gqa(query, key, value)
    dtype = query.dtype
    weights = attention_weights(query, key, attn_mask, is_causal, scale).to(compute_dtype(dtype))
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)  # kept weights scaled 1/(1-p)
    return (weights @ value.to(weights.dtype)).to(dtype)
