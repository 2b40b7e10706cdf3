r"""The textbook attention: every intermediate tensor materialized, one line per formula.

.. math:: \mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(QK^\top \cdot s + M\right) V,
          \quad s = 1/\sqrt{E}

Shapes: query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)`` → ``(..., L, Ev)``.
Semantics are those of :func:`torch.nn.functional.scaled_dot_product_attention` (torch 2.13),
including ``torch.nn.attention.bias`` masks (``causal_upper_left``, ``causal_lower_right``) and
empty dimensions, with one deliberate difference: ``attn_mask`` together with ``is_causal=True``
is refused as torch's math kernel refuses it (``RuntimeError``; ours is also a
``ValueError``); torch 2.13's default CPU kernel instead applies both silently.
bfloat16/float16 inputs are computed in float32 throughout, scores,
probabilities and P·V, and rounded once at the end, as torch's math kernel does.
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
from .softmax import safe_softmax


def _probabilities(query, key, attn_mask, align, scale, groups: int = 1) -> torch.Tensor:
    """softmax(QKᵀ·s + M) in the compute dtype (float32 for half inputs): never rounded here.

    ``groups`` query heads share each key head (GQA): their rows are stacked over that one head
    (:func:`fold_groups`), never a copy of K per query head."""
    q, k = query.to(compute_dtype(query.dtype)), key.to(compute_dtype(query.dtype))
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(E) if E > 0 else 1.0  # E = 0: QKᵀ is an empty sum, all zeros,
    elif E == 0:                                        # which torch keeps at 0 for any scale:
        scale = 1.0                                     # uniform weights, not 0·inf = NaN
    scores = unfold_groups(fold_groups(q, groups) @ k.transpose(-2, -1), groups) * scale
    # scores: (..., L, S); GQA: each key head serves its G query heads' stacked rows
    if align is not None:
        attn_mask = causal_mask(L, S, device=q.device, align=align)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))  # True = may attend
        else:
            scores = scores + attn_mask.to(scores.dtype)            # additive mask
    return safe_softmax(scores)


def attention_weights(
    query: torch.Tensor,
    key: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """The ``(..., L, S)`` probabilities softmax(QKᵀ·s + M); rows sum to 1 (0 if fully masked).

    ``attn_mask``: bool (True = may attend), additive float, or a ``torch.nn.attention.bias``
    causal bias; with ``is_causal=True`` it must be ``None`` (``ValueError`` otherwise, see the
    module docstring). Returned in the input dtype.
    """
    value = key[..., :1]  # weights do not depend on V; a stand-in with the right S
    check_sdpa_args(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa)
    attn_mask, align = causal_alignment(query, key, attn_mask, is_causal)
    groups = query_groups(query, key, enable_gqa)
    return _probabilities(query, key, attn_mask, align, scale, groups).to(query.dtype)


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
    """softmax(QKᵀ·s + M) V, the ``(..., L, S)`` scores materialized; returns ``(..., L, Ev)``.

    ``attn_mask``: bool (True = may attend), additive float, or a ``torch.nn.attention.bias``
    causal bias (``causal_upper_left`` / ``causal_lower_right``: the variant decides the
    alignment). ``attn_mask`` with ``is_causal=True`` is refused, as torch's math kernel refuses it
    (torch 2.13's default CPU kernel silently applies both; combine the masks yourself).
    """
    check_sdpa_args(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    key, value, enable_gqa = uneven_gqa(query, key, value, enable_gqa)  # Hk != Hv: repeated
    attn_mask, align = causal_alignment(query, key, attn_mask, is_causal)
    groups = query_groups(query, key, enable_gqa)  # GQA: G query heads per key/value head
    weights = _probabilities(query, key, attn_mask, align, scale, groups)  # float32 for halves
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)  # kept weights scaled 1/(1-p)
    out = fold_groups(weights, groups) @ value.to(weights.dtype)     # V shared, not copied
    return unfold_groups(out, groups).to(query.dtype)                # rounded once, at the end
