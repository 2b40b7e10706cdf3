"""torch's fused kernel behind the course's signature (TEMPORARY: core helper extends this)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._validate import check_sdpa_args


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                  is_causal=False, scale=None, enable_gqa=False, backend=None):
    check_sdpa_args(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                          dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                                          enable_gqa=enable_gqa)
