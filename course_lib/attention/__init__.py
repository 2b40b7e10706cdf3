"""The attention core: torch only, no teaching code.

``reference`` (every intermediate materialized), ``flash`` (tiled, online softmax) and ``sdpa``
(torch's fused kernel behind the course's checks) share torch's SDPA signature and are listed in
:data:`IMPLEMENTATIONS`; ``masks`` builds masks in the SDPA convention (True = may attend),
``softmax`` holds the one safe softmax, ``multihead`` the multi-head layer built on any of them,
``positions`` the position encodings (sinusoids, RoPE, ALiBi).
"""

from . import flash, masks, multihead, positions, reference, sdpa, softmax
from .multihead import MultiHeadAttention, TransformerBlock, merge_heads, split_heads
from .registry import IMPLEMENTATIONS, AttentionFn

__all__ = ["IMPLEMENTATIONS", "AttentionFn", "MultiHeadAttention", "flash", "masks",
           "merge_heads", "multihead", "positions", "reference", "sdpa", "softmax", "split_heads",
           "TransformerBlock"]
