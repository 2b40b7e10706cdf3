r"""Learned sparse attention (DeepSeek-V3.2's DeepSeek Sparse Attention): a cheap *indexer*
scores every key for every query, and each query attends to its ``k`` best keys only.

.. math:: I_{ts} = \sum_{j=1}^{H_I} w_{tj}\,\mathrm{ReLU}(s\; q^I_{tj} \cdot k^I_s), \qquad
          o_t = \mathrm{softmax}_{s \in \mathrm{topk}(I_{t\cdot})}(q_t \cdot k_s / \sqrt{E})\,V

The indexer has few small heads (``H_I``, width ``E_I``) and one key per token shared by its
heads, so scoring costs ``L·S·H_I·E_I`` multiply-adds in low precision; attention itself then
costs ``L·k`` instead of ``L·S``. The top-k is not differentiable: the indexer learns from its
own loss (DeepSeek train it to match the attention's distribution), not through the selection.

Shapes: indexer queries ``(B, L, H_I, E_I)``, indexer keys ``(B, S, E_I)``, head weights
``(B, L, H_I)`` → scores ``(B, L, S)``; attention as SDPA, ``(B, H, L, E)``.
"""

from __future__ import annotations

import math

import torch

from .masks import causal_mask
from .reference import scaled_dot_product_attention


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def indexer_scores(index_q: torch.Tensor, index_k: torch.Tensor, weights: torch.Tensor,
                   scale: float | None = None) -> torch.Tensor:
    """``I (B, L, S) = Σ_j w_tj · ReLU(s · q_tj · k_s)``, ``s = 1/√E_I`` by default.

    ``index_q (B, L, H_I, E_I)``, ``index_k (B, S, E_I)``, ``weights (B, L, H_I)``.
    """
    for name, t in (("index_q", index_q), ("index_k", index_k), ("weights", weights)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)}")
    if index_q.dim() != 4 or index_k.dim() != 3 or index_k.shape[0] != index_q.shape[0] \
            or index_k.shape[-1] != index_q.shape[-1]:
        raise ValueError(f"index_q must be (B, L, H_I, E_I) and index_k (B, S, E_I) with the "
                         f"same B and E_I, got index_q {_shape(index_q)} and index_k "
                         f"{_shape(index_k)}")
    if weights.shape != index_q.shape[:3]:
        raise ValueError(f"weights must have shape (B, L, H_I) = {tuple(index_q.shape[:3])} for "
                         f"index_q {_shape(index_q)}, got {_shape(weights)}")
    s = 1.0 / math.sqrt(index_q.shape[-1]) if scale is None else scale
    per_head = torch.relu(torch.einsum("blhe,bse->blhs", index_q, index_k) * s)
    return torch.einsum("blh,blhs->bls", weights, per_head)


def topk_mask(scores: torch.Tensor, topk: int, attn_mask: torch.Tensor | None = None
              ) -> torch.Tensor:
    """``(B, L, S)`` bool, True at each query's ``topk`` highest-scoring keys among those
    ``attn_mask`` allows (bool ``(L, S)`` or ``(B, L, S)``, True = may attend); a query with
    fewer allowed keys keeps all of them. Ties go to the lower index (as ``torch.topk``)."""
    if not isinstance(topk, int) or topk < 1:
        raise ValueError(f"topk must be an int >= 1, got {topk!r}")
    if scores.dim() != 3:
        raise ValueError(f"scores must have shape (B, L, S), got {_shape(scores)}")
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool or attn_mask.shape[-2:] != scores.shape[-2:]:
            raise ValueError(f"attn_mask must be bool (L, S) or (B, L, S) for scores "
                             f"{_shape(scores)}, got {attn_mask.dtype} {_shape(attn_mask)}")
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    idx = scores.topk(min(topk, scores.shape[-1]), dim=-1).indices
    keep = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, idx, True)
    return keep if attn_mask is None else keep & attn_mask


def sparse_topk_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          index_scores: torch.Tensor, topk: int, *, is_causal: bool = True,
                          scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor:
    """Attention of ``query (B, H, L, E)`` over the ``topk`` keys of ``key (B, Hkv, S, E)``
    that ``index_scores (B, L, S)`` ranks highest for each query (causal: among keys
    ``j ≤ i + S − L``); the same keys for every head. Returns ``(B, H, L, Ev)``."""
    if index_scores.dim() != 3 or query.dim() != 4 or index_scores.shape != (
            query.shape[0], query.shape[-2], key.shape[-2]):
        raise ValueError(f"index_scores must have shape (B, L, S) = ({query.shape[0]}, "
                         f"{query.shape[-2]}, {key.shape[-2]}) for query {_shape(query)} and "
                         f"key {_shape(key)}, got {_shape(index_scores)}")
    L, S = query.shape[-2], key.shape[-2]
    allowed = causal_mask(L, S, device=query.device, align="bottom_right") if is_causal else None
    keep = topk_mask(index_scores, topk, allowed)[:, None]             # (B, 1, L, S)
    return scaled_dot_product_attention(query, key, value, attn_mask=keep, scale=scale,
                                        enable_gqa=enable_gqa)


__all__ = ["indexer_scores", "sparse_topk_attention", "topk_mask"]
