r"""Gated attention (Qiu et al. 2025, used by Qwen3-Next): a sigmoid gate on each head's output,
computed from the layer's input, before the output projection.

.. math:: o = \big(\mathrm{Attn}(Q, K, V) \odot \sigma(X W_g)\big)\, W_o

The gate is elementwise (one per head and feature, ``(B, L, H·E)``). It adds a nonlinearity
between :math:`W_v` and :math:`W_o` (otherwise one low-rank linear map) and lets a head output
~0 without parking its weight on a sink token: the paper reports that it removes the attention
sink and the massive activations. Qwen3-Next computes ``X W_g`` in the same projection as the
queries (``q_proj`` has ``2·H·E`` rows, query and gate interleaved per head).
"""

from __future__ import annotations

import torch


def gate_output(attn: torch.Tensor, gate_logits: torch.Tensor) -> torch.Tensor:
    """``attn ⊙ σ(gate_logits)``: both ``(B, L, H·E)`` (heads merged, before ``W_o``)."""
    for name, t in (("attn", attn), ("gate_logits", gate_logits)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)}")
    if attn.shape != gate_logits.shape:
        raise ValueError(f"attn and gate_logits must have the same shape (B, L, H·E), got attn "
                         f"{tuple(attn.shape)} and gate_logits {tuple(gate_logits.shape)}")
    return attn * torch.sigmoid(gate_logits)


__all__ = ["gate_output"]
