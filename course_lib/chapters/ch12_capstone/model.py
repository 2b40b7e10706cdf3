r"""A tiny transformer assembled from course parts.

.. math:: h_0 = E[x] + P, \quad h_{\ell} = h_{\ell-1} + \mathrm{MHA}(\mathrm{LN}(h_{\ell-1}))
          \;(+\ \mathrm{MLP}), \quad \mathrm{logits} = \mathrm{LN}(h_L) W_{\mathrm{out}}

Blocks are :class:`course_lib.attention.TransformerBlock` (pre-norm) around
:class:`course_lib.attention.MultiHeadAttention`; masks come from
:mod:`course_lib.attention.masks`. Attention alone is order-blind (permuting the tokens permutes
the outputs), so position enters through ``P``: a learned table or fixed sinusoids.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.attention import TransformerBlock, masks
from course_lib.attention.positions import sinusoidal_positions


class TinyTransformer(nn.Module):
    """Token + position embeddings, ``n_layers`` blocks, a final LayerNorm and a linear read-out.

    ``head="lm"``: next-token logits ``(B, N, vocab)`` under a causal mask.
    ``head="cls"``: class logits ``(B, n_classes)`` read from position 0 (a ``<cls>`` token);
    attention is bidirectional, padded keys (id ``pad_id``) are masked out.
    ``positional``: ``"learned"``, ``"sinusoidal"`` or ``"none"`` (order-blind, for the demo).
    """

    def __init__(self, vocab_size: int, d_model: int = 32, n_heads: int = 2, n_layers: int = 1,
                 max_len: int = 32, head: str = "lm", n_classes: int = 2, mlp: bool = True,
                 layer_norm: bool = True, positional: str = "learned", pad_id: int = 0) -> None:
        super().__init__()
        if head not in ("lm", "cls"):
            raise ValueError(f"head must be 'lm' or 'cls', got {head!r}")
        if positional not in ("learned", "sinusoidal", "none"):
            raise ValueError(f"positional must be 'learned', 'sinusoidal' or 'none', "
                             f"got {positional!r}")
        self.head_kind, self.positional, self.pad_id = head, positional, pad_id
        self.tok = nn.Embedding(vocab_size, d_model)
        if positional == "learned":
            self.pos = nn.Parameter(0.02 * torch.randn(max_len, d_model))
        else:
            table = (sinusoidal_positions(max_len, d_model) if positional == "sinusoidal"
                     else torch.zeros(max_len, d_model))
            self.register_buffer("pos", table, persistent=False)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, mlp=mlp,
                                                     layer_norm=layer_norm)
                                    for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model) if layer_norm else nn.Identity()
        self.out = nn.Linear(d_model, vocab_size if head == "lm" else n_classes)

    def forward(self, tokens: torch.Tensor, return_attention: bool = False):
        """``tokens (B, N)`` → logits; with ``return_attention`` also the list (one per layer)
        of attention weights ``(B, H, N, N)``."""
        B, N = tokens.shape
        x = self.tok(tokens) + self.pos[:N]
        if self.head_kind == "lm":
            mask, causal = None, True
        else:
            mask, causal = masks.padding_mask(tokens, pad_id=self.pad_id), False  # (B, 1, 1, N)
        maps = []
        for block in self.blocks:
            x, w = block(x, mask, causal, need_weights=True) if return_attention else (
                block(x, mask, causal), None)
            maps.append(w)
        x = self.ln_f(x)
        logits = self.out(x) if self.head_kind == "lm" else self.out(x[:, 0])
        return (logits, maps) if return_attention else logits
