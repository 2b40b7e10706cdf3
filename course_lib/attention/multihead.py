r"""Multi-head attention built on any of the course's three attention implementations.

.. math:: \mathrm{MHA}(X) = \mathrm{concat}_h\,\mathrm{Attn}(XW_q^h, XW_k^h, XW_v^h)\; W_o

Shapes: query ``(B, L, D)``, key/value ``(B, S, D)`` → ``(B, L, D)`` with ``D = H · E``
(``E = D / H`` features per head). Masks follow the SDPA convention (bool True = may attend),
*not* ``nn.MultiheadAttention``'s (True = masked out).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import reference


def _implementations() -> dict:
    from . import IMPLEMENTATIONS  # late import: course_lib/__init__ imports this module
    return IMPLEMENTATIONS


class MultiHeadAttention(nn.Module):
    """Fused-qkv multi-head attention whose inner kernel is ``implementation``.

    Parameters
    ----------
    embed_dim : model width ``D``; must be divisible by ``num_heads``.
    num_heads : number of heads ``H``.
    bias : add biases to the qkv and output projections.
    dropout : dropout probability on the attention weights (only in ``train()`` mode).
    implementation : ``"reference"``, ``"flash"`` or ``"sdpa"`` (``course_lib.IMPLEMENTATIONS``).
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, dropout: float = 0.0,
                 implementation: str = "sdpa") -> None:
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
        if implementation not in _implementations():
            raise ValueError(f"implementation must be one of {sorted(_implementations())}, "
                             f"got {implementation!r}")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.implementation = implementation
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)  # rows: [W_q; W_k; W_v]
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, L, D)`` → ``(B, H, L, E)``."""
        B, L, _ = x.shape
        return x.view(B, L, self.num_heads, -1).transpose(1, 2)

    def _project(self, query, key, value):
        """q, k, v = X W_qᵀ + b_q, ...; one fused matmul for self-attention."""
        if key is None and value is None:
            return self.qkv(query).chunk(3, dim=-1)
        key = query if key is None else key
        value = key if value is None else value
        w, b = self.qkv.weight.chunk(3), (self.qkv.bias.chunk(3) if self.qkv.bias is not None
                                          else (None, None, None))
        return F.linear(query, w[0], b[0]), F.linear(key, w[1], b[1]), F.linear(value, w[2], b[2])

    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None,
                value: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None,
                is_causal: bool = False, need_weights: bool = False):
        """Return ``out (B, L, D)``, or ``(out, weights (B, H, L, S))`` if ``need_weights``.

        ``attn_mask``: bool (True = may attend) or additive float, broadcastable to
        ``(B, H, L, S)``; e.g. ``masks.padding_mask(tokens)`` ``(B, 1, 1, S)``. The returned
        weights are the pre-dropout probabilities.
        """
        if query.dim() != 3 or query.shape[-1] != self.embed_dim:
            raise ValueError(f"query must be (B, L, {self.embed_dim}), got {tuple(query.shape)}")
        q, k, v = (self._split_heads(t) for t in self._project(query, key, value))
        attend = _implementations()[self.implementation]
        p = self.dropout if self.training else 0.0
        out = attend(q, k, v, attn_mask=attn_mask, dropout_p=p, is_causal=is_causal)
        B, H, L, E = out.shape
        out = self.out_proj(out.transpose(1, 2).reshape(B, L, H * E))  # merge heads, (B, L, D)
        if not need_weights:
            return out
        weights = reference.attention_weights(q, k, attn_mask=attn_mask, is_causal=is_causal)
        return out, weights

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention, implementation: str = "sdpa"
                   ) -> MultiHeadAttention:
        """Copy the weights of a ``batch_first=True`` ``nn.MultiheadAttention``; outputs then match.

        Remember the mask conventions differ: torch's module takes True = *masked out*.
        """
        if not module.batch_first:
            raise ValueError("from_torch needs nn.MultiheadAttention(..., batch_first=True)")
        if not module._qkv_same_embed_dim or module.bias_k is not None or module.add_zero_attn:
            raise ValueError("from_torch supports kdim = vdim = embed_dim, no add_bias_kv, "
                             "no add_zero_attn")
        bias = module.in_proj_bias is not None
        new = cls(module.embed_dim, module.num_heads, bias=bias, dropout=module.dropout,
                  implementation=implementation)
        p = module.in_proj_weight
        new = new.to(device=p.device, dtype=p.dtype)
        with torch.no_grad():
            new.qkv.weight.copy_(module.in_proj_weight)
            new.out_proj.weight.copy_(module.out_proj.weight)
            if bias:
                new.qkv.bias.copy_(module.in_proj_bias)
                new.out_proj.bias.copy_(module.out_proj.bias)
        new.train(module.training)
        return new

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"dropout={self.dropout}, implementation={self.implementation!r}")
