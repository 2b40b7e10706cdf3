"""The attention core: torch only, no teaching code.

``reference`` (every intermediate materialized), ``flash`` (tiled, online softmax) and ``sdpa``
(torch's fused kernel behind the course's checks) share torch's SDPA signature and are listed in
:data:`IMPLEMENTATIONS`; ``masks`` builds masks in the SDPA convention (True = may attend),
``softmax`` holds the one safe softmax, ``multihead`` the multi-head layer built on any of them,
``positions`` the position encodings (sinusoids, RoPE, ALiBi), ``kv_cache`` the decoding cache
(``KVCache``, ``decode_step``, ``repeat_kv`` for grouped-query attention), ``latent``
multi-head latent attention (``MultiHeadLatentAttention``: a compressed cache, absorbed decoding).
``merge`` merges partial attentions by log-sum-exp (``merge_partials``), ``distributed`` attends
over a sequence split across processes (``ring_attention``, ``ulysses_attention``).
Today's open models: ``qk_norm`` (``head_rms_norm``), ``sink_softmax`` (learned sinks),
``output_gate`` (gated attention), ``layer_pattern`` (local/global/NoPE layers), ``delta_rule``
(the gated delta rule, recurrent and chunked), ``gated_deltanet`` (``GatedDeltaNet``),
``sparse_topk`` (an indexer's top-k sparse attention), ``open_attention`` (``OpenAttention``).
"""

from . import (
           delta_rule,
           flash,
           kv_cache,
           latent,
           layer_pattern,
           masks,
           multihead,
           output_gate,
           positions,
           qk_norm,
           reference,
           sdpa,
           sink_softmax,
           softmax,
           sparse_topk,
)
from .distributed import ring_attention, ulysses_attention
from .gated_deltanet import GatedDeltaNet
from .kv_cache import KVCache, decode_step, repeat_kv
from .latent import MultiHeadLatentAttention
from .merge import merge_partials, partial_attention
from .multihead import MultiHeadAttention, TransformerBlock, merge_heads, split_heads
from .open_attention import OpenAttention
from .registry import IMPLEMENTATIONS, AttentionFn

__all__ = ["IMPLEMENTATIONS", "AttentionFn", "KVCache", "MultiHeadAttention",
           "MultiHeadLatentAttention", "decode_step", "flash", "kv_cache", "latent", "masks",
           "merge_heads", "multihead", "positions", "reference",
           "repeat_kv", "sdpa", "softmax", "split_heads",
           "TransformerBlock", "distributed", "merge", "merge_partials", "partial_attention",
           "ring_attention", "ulysses_attention", "GatedDeltaNet", "OpenAttention", "delta_rule",
           "layer_pattern", "output_gate", "qk_norm", "sink_softmax", "sparse_topk"]
