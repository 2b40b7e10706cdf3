r"""The attention layer of today's open models, each piece a switch on one module.

.. math:: o = \Big(\mathrm{softmax}_{+b}\big(\tfrac{\mathrm{RoPE}(\mathrm{N}(XW_q))\,
          \mathrm{RoPE}(\mathrm{N}(XW_k))^\top}{\sqrt{E}} + M_w\big)\, XW_v
          \odot \sigma(XW_g)\Big) W_o

* ``qk_norm``: RMSNorm ``N`` on each query and key head (:mod:`.qk_norm`; ``True`` or
  ``"head"``: Qwen3, Gemma 3), or on the whole query and key projections before the split into
  heads (``"projection"``: OLMo 2);
* ``sinks``: a learned sink logit ``b`` per head in the softmax's normaliser (:mod:`.sink_softmax`,
  gpt-oss);
* ``window``: a sliding-window mask ``M_w`` (a local layer, :mod:`.layer_pattern`), ``None``
  for a global layer;
* ``gate``: a sigmoid output gate per head and feature (:mod:`.output_gate`, Qwen3-Next), its
  logits from the same projection as the queries (``q_proj`` has ``2·H·E`` rows: per head, the
  query then the gate);
* ``rotary_dim``: RoPE on the first ``R`` features of each head (Qwen3-Next: a quarter),
  ``0`` for a layer without positions (NoPE); ``rope_scaling`` a Hugging Face dict (gpt-oss:
  YaRN), see :func:`~.positions.scaled_rope_frequencies`.

Grouped-query attention throughout (``num_kv_heads`` divides ``num_heads``). Parameter names
are transformers' (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, ``q_norm``, ``k_norm``,
``sinks``), so a transformers layer's ``state_dict`` loads as it is. Input ``(B, L, D)``.
"""

from __future__ import annotations

import torch
from torch import nn

from .layer_pattern import layer_mask
from .multihead import merge_heads
from .output_gate import gate_output
from .positions import apply_rope, rope_cache
from .qk_norm import HeadRMSNorm
from .reference import scaled_dot_product_attention
from .sink_softmax import sink_attention


class OpenAttention(nn.Module):
    """Causal self-attention with optional QK-norm, learned sinks, a sliding window, an output
    gate and partial or no RoPE (see the module docstring).

    ``scale``: the score scale (default ``1/√E``; Gemma 3 uses ``query_pre_attn_scalar^-1/2``).
    ``norm_unit_offset``: the norms' scale is ``1 + weight`` (Gemma 3, Qwen3-Next).
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int | None = None,
                 head_dim: int | None = None, *, bias: bool = False,
                 qk_norm: bool | str = False,
                 norm_unit_offset: bool = False, norm_eps: float = 1e-6, sinks: bool = False,
                 window: int | None = None, gate: bool = False, rotary_dim: int | None = None,
                 rope_base: float = 10000.0, rope_scaling: dict | None = None,
                 scale: float | None = None) -> None:
        super().__init__()
        Hkv = num_heads if num_kv_heads is None else num_kv_heads
        E = embed_dim // num_heads if head_dim is None else head_dim
        if num_heads < 1 or Hkv < 1 or num_heads % Hkv:
            raise ValueError(f"num_kv_heads={Hkv} must divide num_heads={num_heads}")
        R = E if rotary_dim is None else rotary_dim
        if R < 0 or R > E or R % 2:
            raise ValueError(f"rotary_dim must be even and in [0, head_dim={E}], got {R}")
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1 or None, got {window}")
        self.embed_dim, self.num_heads, self.num_kv_heads, self.head_dim = embed_dim, num_heads, \
            Hkv, E
        self.window, self.gate, self.rotary_dim, self.rope_base = window, gate, R, rope_base
        self.scale, self.rope_scaling = scale, rope_scaling
        self.q_proj = nn.Linear(embed_dim, num_heads * E * (2 if gate else 1), bias=bias)
        self.k_proj = nn.Linear(embed_dim, Hkv * E, bias=bias)
        self.v_proj = nn.Linear(embed_dim, Hkv * E, bias=bias)
        self.o_proj = nn.Linear(num_heads * E, embed_dim, bias=bias)
        if qk_norm not in (False, True, "head", "projection"):
            raise ValueError(f"qk_norm must be False, True, 'head' or 'projection', got "
                             f"{qk_norm!r}")
        if qk_norm:
            wq, wk = (E, E) if qk_norm != "projection" else (num_heads * E, Hkv * E)
            self.q_norm = HeadRMSNorm(wq, norm_eps, unit_offset=norm_unit_offset)
            self.k_norm = HeadRMSNorm(wk, norm_eps, unit_offset=norm_unit_offset)
        self.qk_norm = qk_norm
        if sinks:
            self.sinks = nn.Parameter(torch.zeros(num_heads))

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        R = self.rotary_dim
        if R == 0:
            return x
        return torch.cat([apply_rope(x[..., :R], cos, sin), x[..., R:]], dim=-1)

    def mask(self, L: int, device: torch.device | str | None = None) -> torch.Tensor:
        """``(L, L)`` bool: causal, and the last ``window`` keys for a sliding layer."""
        kind = "full_attention" if self.window is None else "sliding_attention"
        return layer_mask(kind, L, self.window, device)

    def forward(self, x: torch.Tensor, cos: torch.Tensor | None = None,
                sin: torch.Tensor | None = None) -> torch.Tensor:
        """``x (B, L, D)`` → ``(B, L, D)``. ``cos``/``sin`` ``(L, R)`` (split halves, as
        :func:`~.positions.rope_cache`): computed for ``rope_base`` and ``rope_scaling`` when
        not given."""
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must have shape (B, L, D) with D={self.embed_dim}, got "
                             f"{tuple(x.shape)}")
        B, L, _ = x.shape
        H, Hkv, E = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.q_proj(x).view(B, L, H, -1)
        gate = None
        if self.gate:
            q, gate = q.chunk(2, dim=-1)                                   # per head: [q | g]
            gate = gate.reshape(B, L, H * E)
        k = self.k_proj(x).view(B, L, Hkv, E)
        v = self.v_proj(x).view(B, L, Hkv, E).transpose(1, 2)
        if self.qk_norm == "projection":                                   # over all heads
            q = self.q_norm(q.reshape(B, L, H * E)).view(B, L, H, E)
            k = self.k_norm(k.reshape(B, L, Hkv * E)).view(B, L, Hkv, E)
        elif self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        if self.rotary_dim:
            if cos is None or sin is None:
                cos, sin = rope_cache(L, self.rotary_dim, self.rope_base,
                                      rope_scaling=self.rope_scaling, dtype=x.dtype,
                                      device=x.device)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
        mask = self.mask(L, x.device)
        gqa = Hkv != H
        if hasattr(self, "sinks"):
            out = sink_attention(q, k, v, self.sinks, attn_mask=mask, scale=self.scale,
                                 enable_gqa=gqa)
        else:
            out = scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale,
                                               enable_gqa=gqa)
        out = merge_heads(out)
        if gate is not None:
            out = gate_output(out, gate)
        return self.o_proj(out)

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"qk_norm={self.qk_norm}, sinks={hasattr(self, 'sinks')}, window={self.window}, "
                f"gate={self.gate}, rotary_dim={self.rotary_dim}")


__all__ = ["OpenAttention"]
