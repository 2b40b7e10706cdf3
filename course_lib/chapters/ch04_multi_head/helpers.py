r"""Helpers for the Multi-head chapter: split/merge heads, parameter counts, a toy layer whose
heads are set by hand, and a residual block with pre- or post-norm.

.. math:: \mathrm{split}: (B, L, H\cdot E) \xrightarrow{\text{view}} (B, L, H, E)
          \xrightarrow{\text{permute}} (B, H, L, E)
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.attention import MultiHeadAttention, TransformerBlock, split_heads
from course_lib.attention import merge_heads as merge_heads  # re-exported for the chapter


def split_heads_without_permute(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The classic bug: ``(B, L, H·E)`` reshaped straight to ``(B, H, L, E)``.

    Shapes are right, contents are not: each "head" gets a run of consecutive memory, i.e. whole
    tokens' worth of features, mixing tokens and feature groups.
    """
    B, L, D = x.shape
    return x.reshape(B, num_heads, L, D // num_heads)


def head_scores(layer: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """Scaled scores ``(B, H, L, L)`` = q_h k_hᵀ / √E of ``layer`` on ``x (B, L, D)`` (no bias
    assumptions: uses the layer's own qkv projection)."""
    q, k, _ = layer.qkv(x).chunk(3, dim=-1)
    qh, kh = split_heads(q, layer.num_heads), split_heads(k, layer.num_heads)
    return qh @ kh.transpose(-2, -1) / qh.shape[-1] ** 0.5


def count_parameters(module: nn.Module) -> int:
    """Number of scalar parameters in ``module`` (trainable or not)."""
    return sum(p.numel() for p in module.parameters())


def mha_parameter_formula(embed_dim: int, bias: bool = True) -> int:
    """Parameters of one multi-head attention layer: 4D² weights (Q, K, V, O) + 4D biases.

    Independent of the number of heads: heads split D, they do not add weights.
    """
    return 4 * embed_dim**2 + (4 * embed_dim if bias else 0)


TOY_SENTENCE = "the cat sat on the mat because the cat was tired".split()
TOY_HEADS = ("previous token", "same word", "first token", "untrained (random)")


def toy_heads_layer(tokens: list[str] | None = None, strength: float = 5.0, seed: int = 0,
                    implementation: str = "sdpa") -> tuple[MultiHeadAttention, torch.Tensor]:
    """A 4-head layer (D = 64, E = 16) whose query/key weights are set by hand, and its input.

    The input ``x (1, L, 64)`` holds a one-hot word id in features 0–15, a one-hot position in
    16–31 and a constant 1 in feature 32. Heads: 0 attends to the previous token, 1 to every
    occurrence of the same word, 2 to the first token, 3 has random weights (what an untrained
    head looks like). The score of a match is ``strength² / √16``.
    """
    tokens = TOY_SENTENCE if tokens is None else tokens
    vocab = {w: i for i, w in enumerate(dict.fromkeys(tokens))}
    n, D, H, E = len(tokens), 64, 4, 16
    if n > 15 or len(vocab) > 16:
        raise ValueError("toy_heads_layer supports at most 15 tokens and 16 distinct words")
    x = torch.zeros(1, n, D)
    for i, w in enumerate(tokens):
        x[0, i, vocab[w]] = 1.0
        x[0, i, 16 + i] = 1.0
    x[0, :, 32] = 1.0
    g = torch.Generator().manual_seed(seed)
    wq, wk = torch.zeros(D, D), torch.zeros(D, D)  # rows = output features, h·E + r
    s = strength
    for i in range(n):                    # head 0: q_i = e_i, k_j = e_{j+1}: match iff j = i-1
        wq[0 * E + i, 16 + i] = s
        wk[0 * E + i + 1, 16 + i] = s
    wk[0 * E + 0, 16 + 0] = s             # ...and token 0, with no predecessor, sees itself
    for w in range(len(vocab)):           # head 1: q = k = word one-hot: match iff same word
        wq[1 * E + w, w] = s
        wk[1 * E + w, w] = s
    wq[2 * E, 32] = s                     # head 2: every query asks for "position 0"
    wk[2 * E, 16] = s
    wq[3 * E:4 * E] = torch.randn(E, D, generator=g)  # head 3: random
    wk[3 * E:4 * E] = torch.randn(E, D, generator=g)
    wv = torch.randn(D, D, generator=g) / D**0.5
    layer = MultiHeadAttention(D, H, bias=False, implementation=implementation)
    with torch.no_grad():
        layer.qkv.weight.copy_(torch.cat([wq, wk, wv]))
        layer.out_proj.weight.copy_(torch.randn(D, D, generator=g) / D**0.5)
    return layer.eval(), x


def token_spread(x: torch.Tensor) -> float:
    """‖X − mean_tokens(X)‖ / ‖X‖ for ``x (B, L, D)``: 0 when every token has the same vector."""
    centred = x - x.mean(dim=-2, keepdim=True)
    return float(centred.norm() / x.norm())


def depth_profile(variant: str, depth: int = 24, embed_dim: int = 64, num_heads: int = 4,
                  tokens: int = 16, batch: int = 4, seed: int = 0,
                  dtype: torch.dtype = torch.float64) -> dict[str, list[float]]:
    """Push random tokens through ``depth`` freshly initialised layers; measure every layer.

    ``variant``: ``"attention only"`` (x ← MHA(x)), ``"attention + residual"`` (x ← x + MHA(x)),
    ``"post-norm"`` or ``"pre-norm"`` (:class:`~course_lib.attention.TransformerBlock`,
    attention + MLP).
    Returns ``spread`` (:func:`token_spread`) and ``rms`` of the stream at depth 0..depth, and
    ``grad`` = ‖∂loss/∂θ_l‖ per layer for a mean-squared-error loss to a random target.
    float64 by default, so the printed numbers do not depend on the CPU's kernels.
    """
    torch.manual_seed(seed)
    if variant in ("attention only", "attention + residual"):
        layers = nn.ModuleList(MultiHeadAttention(embed_dim, num_heads) for _ in range(depth))
    elif variant in ("post-norm", "pre-norm"):
        layers = nn.ModuleList(TransformerBlock(embed_dim, num_heads,
                                                norm_first=variant == "pre-norm")
                               for _ in range(depth))
    else:
        raise ValueError(f"unknown variant {variant!r}")
    final = nn.LayerNorm(embed_dim) if variant == "pre-norm" else nn.Identity()
    layers.to(dtype)
    final.to(dtype)
    h = torch.randn(batch, tokens, embed_dim, dtype=dtype)
    target = torch.randn(batch, tokens, embed_dim, dtype=dtype)
    stream = [h]
    for layer in layers:
        h = h + layer(h) if variant == "attention + residual" else layer(h)
        stream.append(h)
    ((final(h) - target) ** 2).mean().backward()
    with torch.no_grad():
        return {
            "spread": [token_spread(s) for s in stream],
            "rms": [float(s.pow(2).mean().sqrt()) for s in stream],
            "grad": [float(torch.sqrt(sum((p.grad**2).sum() for p in layer.parameters())))
                     for layer in layers],
        }
