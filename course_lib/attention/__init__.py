"""The attention core: torch only, no teaching code.

``reference`` (every intermediate materialized), ``flash`` (tiled, online softmax) and ``sdpa``
(torch's fused kernel behind the course's checks) share torch's SDPA signature and are listed in
:data:`IMPLEMENTATIONS`; ``masks`` builds masks in the SDPA convention (True = may attend),
``softmax`` holds the one safe softmax, ``multihead`` the multi-head layer built on any of them,
``positions`` the position encodings (sinusoids, RoPE, ALiBi), ``kv_cache`` the decoding cache
(``KVCache``, ``decode_step``, ``repeat_kv`` for grouped-query attention).
"""

from . import flash, kv_cache, masks, multihead, positions, reference, sdpa, softmax
from .kv_cache import KVCache, decode_step, repeat_kv
from .multihead import MultiHeadAttention, TransformerBlock, merge_heads, split_heads
from .registry import IMPLEMENTATIONS, AttentionFn

__all__ = ["IMPLEMENTATIONS", "AttentionFn", "KVCache", "MultiHeadAttention", "decode_step",
           "flash", "kv_cache", "masks", "merge_heads", "multihead", "positions", "reference",
           "repeat_kv", "sdpa", "softmax", "split_heads",
           "TransformerBlock"]
