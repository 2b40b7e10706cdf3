"""Explorer for the masks chapter: pad one sequence of a batch, toggle causal, watch the weights."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from course_lib.attention import masks, reference
from course_lib.toolkit.explorer import Control, Explorer
from course_lib.toolkit.plotting import heatmap

from .plots import _hatch_hidden, draw_mask

SENTENCES = (
    ("the", "cat", "sat", "on", "the", "mat"),
    ("dogs", "bark", "at", "the", "moon", "."),
    ("birds", "sing", "at", "dawn", "each", "day"),
)
PAD_ID = 0
PAD_LABEL = "<pad>"
WIDTH = 8


def _vocab() -> dict[str, int]:
    words = sorted({w for s in SENTENCES for w in s})
    return {w: i + 1 for i, w in enumerate(words)}  # 0 is the pad id


def batch_tokens(sequence: int = 1, pads: int = 2) -> torch.Tensor:
    """``(3, 6)`` token ids of the batch; the last ``pads`` ids of ``sequence`` are pad ids."""
    vocab = _vocab()
    tokens = torch.tensor([[vocab[w] for w in s] for s in SENTENCES])
    if pads:
        tokens[sequence, -pads:] = PAD_ID
    return tokens


def token_labels(tokens: torch.Tensor) -> list[list[str]]:
    """Words for ``(B, S)`` ids, ``<pad>`` for the pad id."""
    inverse = {i: w for w, i in _vocab().items()}
    return [[PAD_LABEL if int(t) == PAD_ID else inverse[int(t)] for t in row] for row in tokens]


def queries_keys(tokens: torch.Tensor, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded embeddings + positions, projected to ``q, k`` of shape ``(B, 1, S, WIDTH)``."""
    g = torch.Generator().manual_seed(seed)
    vocab_size = len(_vocab()) + 1
    emb = torch.randn(vocab_size, WIDTH, generator=g)
    pos = 0.5 * torch.randn(tokens.shape[1], WIDTH, generator=g)
    w_q, w_k = (torch.randn(WIDTH, WIDTH, generator=g) / WIDTH**0.5 for _ in range(2))
    x = emb[tokens] + pos                                   # (B, S, WIDTH)
    return (x @ w_q).unsqueeze(1), (x @ w_k).unsqueeze(1)


def explorer_mask(sequence: int = 1, pads: int = 2, causal: str = "off") -> torch.Tensor:
    """The ``(B, 1, L, S)`` (or ``(B, 1, 1, S)``) bool mask the explorer applies."""
    tokens = batch_tokens(sequence, pads)
    mask = masks.padding_mask(tokens, PAD_ID)                 # (B, 1, 1, S)
    if causal == "on":
        S = tokens.shape[1]
        mask = masks.combine_masks(mask, masks.causal_mask(S).view(1, 1, S, S))
    return mask


def explorer_weights(sequence: int = 1, pads: int = 2, causal: str = "off") -> torch.Tensor:
    """``(B, 1, L, S)`` attention weights of the explorer's batch under :func:`explorer_mask`."""
    tokens = batch_tokens(sequence, pads)
    q, k = queries_keys(tokens)
    return reference.attention_weights(q, k, attn_mask=explorer_mask(sequence, pads, causal))


def draw_padded_batch(fig: plt.Figure, sequence: int = 1, pads: int = 2,
                      causal: str = "off") -> np.ndarray:
    """Left: the mask of the chosen sequence; right: its ``(L, S)`` weights (hidden cells
    hatched). Returns the weights drawn."""
    tokens = batch_tokens(sequence, pads)
    labels = token_labels(tokens)[sequence]
    S = tokens.shape[1]
    mask = explorer_mask(sequence, pads, causal).expand(-1, -1, S, S)[sequence, 0]
    weights = explorer_weights(sequence, pads, causal)[sequence, 0]
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.25]})
    draw_mask(ax1, mask, labels, labels, title=f"mask of seq {sequence}: {pads} pad(s), "
              f"causal {causal}")
    heatmap(ax2, weights, labels, labels, title="attention weights (rows sum to 1)",
            vmin=0, vmax=1, annotate=True, ylabel="")
    _hatch_hidden(ax2, mask)
    fig.tight_layout()
    return weights.numpy()


def padded_batch_explorer() -> Explorer:
    """Choose the padded sequence and its pads, toggle causal; the book plays 10 frames."""
    frames = [{"pads": p, "causal": c} for c in ("off", "on") for p in range(5)]
    return Explorer(
        draw=draw_padded_batch,
        controls={
            "sequence": Control("padded seq", (0, 1, 2), default=1, kind="dropdown"),
            "pads": Control("pads", (0, 1, 2, 3, 4), default=2),
            "causal": Control("causal", ("off", "on"), default="off", kind="toggle"),
        },
        frames=frames,
        figsize=(8.5, 3.6),
    )
