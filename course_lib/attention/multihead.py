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
from .registry import IMPLEMENTATIONS


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(B, N, H·E)`` → ``(B, H, N, E)``: features ``h·E … h·E+E−1`` go to head ``h``."""
    B, N, D = x.shape
    if D % num_heads:
        raise ValueError(f"last dim {D} of shape {tuple(x.shape)} is not divisible by "
                         f"num_heads={num_heads}")
    return x.reshape(B, N, num_heads, D // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, N, E)`` → ``(B, N, H·E)``, the inverse of :func:`split_heads`."""
    B, H, N, E = x.shape
    return x.transpose(1, 2).reshape(B, N, H * E)


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
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation must be one of {sorted(IMPLEMENTATIONS)}, "
                             f"got {implementation!r}")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.implementation = implementation
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)  # rows: [W_q; W_k; W_v]
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

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
        q, k, v = (split_heads(t, self.num_heads) for t in self._project(query, key, value))
        attend = IMPLEMENTATIONS[self.implementation]
        p = self.dropout if self.training else 0.0
        out = attend(q, k, v, attn_mask=attn_mask, dropout_p=p, is_causal=is_causal)
        out = self.out_proj(merge_heads(out))  # (B, L, D)
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


class TransformerBlock(nn.Module):
    r"""Attention and (optionally) MLP sub-layers with residual connections; ``(B, N, D)``.

    pre-norm (``norm_first=True``): ``x = x + MHA(LN(x))``, then ``x = x + MLP(LN(x))``;
    post-norm (the original Transformer): ``x = LN(x + MHA(x))``, then ``x = LN(x + MLP(x))``.
    ``layer_norm=False`` replaces LN by the identity; ``mlp=False`` drops the MLP sub-layer.
    The MLP is ``Linear(D, 4D) → GELU → Linear(4D, D)``.
    """

    def __init__(self, embed_dim: int, num_heads: int, *, norm_first: bool = True,
                 mlp: bool = True, layer_norm: bool = True, implementation: str = "sdpa") -> None:
        super().__init__()
        self.norm_first = norm_first
        self.ln1 = nn.LayerNorm(embed_dim) if layer_norm else nn.Identity()
        self.attn = MultiHeadAttention(embed_dim, num_heads, implementation=implementation)
        self.ln2: nn.Module | None = None
        self.mlp: nn.Module | None = None
        if mlp:
            self.ln2 = nn.LayerNorm(embed_dim) if layer_norm else nn.Identity()
            self.mlp = nn.Sequential(nn.Linear(embed_dim, 4 * embed_dim), nn.GELU(),
                                     nn.Linear(4 * embed_dim, embed_dim))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                is_causal: bool = False, need_weights: bool = False):
        """``x (B, N, D)`` → ``(B, N, D)``, or ``(out, weights (B, H, N, N))`` if
        ``need_weights``; ``attn_mask`` as in :meth:`MultiHeadAttention.forward`."""
        h = self.ln1(x) if self.norm_first else x
        a = self.attn(h, attn_mask=attn_mask, is_causal=is_causal, need_weights=need_weights)
        a, w = a if need_weights else (a, None)
        x = x + a if self.norm_first else self.ln1(x + a)
        if self.mlp is not None:
            x = x + self.mlp(self.ln2(x)) if self.norm_first else self.ln2(x + self.mlp(x))
        return (x, w) if need_weights else x
