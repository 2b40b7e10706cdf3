"""The attention core: torch only, no teaching code.

``reference`` (every intermediate materialized), ``flash`` (tiled, online softmax) and ``sdpa``
(torch's fused kernel behind the course's checks) share torch's SDPA signature and are listed in
:data:`IMPLEMENTATIONS`; ``masks`` builds masks in the SDPA convention (True = may attend),
``softmax`` holds the one safe softmax, ``multihead`` the multi-head layer built on any of them.
"""

from . import flash, kv_cache, masks, multihead, reference, sdpa, softmax
from .kv_cache import KVCache, decode_step, repeat_kv
from .multihead import MultiHeadAttention, TransformerBlock, merge_heads, split_heads
from .registry import IMPLEMENTATIONS, AttentionFn

__all__ = ["IMPLEMENTATIONS", "AttentionFn", "KVCache", "MultiHeadAttention", "decode_step",
           "flash", "kv_cache", "masks", "repeat_kv",
           "merge_heads", "multihead", "reference", "sdpa", "softmax", "split_heads",
           "TransformerBlock"]
