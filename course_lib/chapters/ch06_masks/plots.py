"""Figures of the masks chapter: mask grids, the broadcasting picture, causal alignment for L ≠ S.

A mask cell is drawn filled (teal) where the query may attend the key and pale where it may not.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import ListedColormap

from course_lib.toolkit.plotting import heatmap

ALLOWED = "#1b9e77"
BLOCKED = "#eeeeee"
MASK_CMAP = ListedColormap([BLOCKED, ALLOWED])


def draw_mask(ax: plt.Axes, mask: torch.Tensor, row_labels: Sequence[str] | None = None,
              col_labels: Sequence[str] | None = None, *, title: str | None = None,
              xlabel: str = "key", ylabel: str = "query", marks: bool = True) -> None:
    """Draw a 2-D bool mask ``(rows, cols)``: teal = may attend, pale = hidden (✓ / · marks)."""
    m = np.asarray(mask.detach().cpu().bool().numpy() if isinstance(mask, torch.Tensor) else mask)
    if m.ndim != 2:
        raise ValueError(f"draw_mask needs a 2-D mask, got shape {m.shape}")
    ax.imshow(m.astype(float), cmap=MASK_CMAP, vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(np.arange(-0.5, m.shape[1]), minor=True)
    ax.set_yticks(np.arange(-0.5, m.shape[0]), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    if row_labels is not None:
        ax.set_yticks(range(m.shape[0]), labels=list(row_labels))
    else:
        ax.set_yticks(range(m.shape[0]))
    if col_labels is not None:
        ax.set_xticks(range(m.shape[1]), labels=list(col_labels), rotation=45, ha="right")
    else:
        ax.set_xticks(range(m.shape[1]))
    if marks and m.size <= 144:
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                ax.text(j, i, "✓" if m[i, j] else "·", ha="center", va="center", fontsize=8,
                        color="white" if m[i, j] else "#888888")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)


def plot_broadcast(fig: plt.Figure, pad: torch.Tensor, causal: torch.Tensor,
                   token_labels: Sequence[Sequence[str]], heads: int = 4) -> None:
    """The broadcasting picture: pad ``(B,1,1,S)`` & causal ``(1,1,L,S)`` -> ``(B,H,L,S)``.

    Left: the B padding rows; middle: the causal grid; right: the combined mask of each sequence
    (identical for all ``heads`` heads).
    """
    B, S = pad.shape[0], pad.shape[-1]
    L = causal.shape[-2]
    combined = pad & causal.view(1, 1, L, S)                      # (B, 1, L, S)
    gs = fig.add_gridspec(2, B + 2, height_ratios=[1, 3], width_ratios=[1.3, 1.3] + [1] * B,
                          wspace=0.45, hspace=0.6)
    ax = fig.add_subplot(gs[:, 0])
    draw_mask(ax, pad[:, 0, 0, :], [f"seq {b}" for b in range(B)], [f"k{j}" for j in range(S)],
              title=f"padding {tuple(pad.shape)}", ylabel="sequence b")
    ax = fig.add_subplot(gs[:, 1])
    draw_mask(ax, causal, [f"q{i}" for i in range(L)], [f"k{j}" for j in range(S)],
              title=f"causal (1, 1, {L}, {S})")
    for b in range(B):
        ax = fig.add_subplot(gs[:, 2 + b])
        draw_mask(ax, combined[b, 0], list(token_labels[b][:L]), list(token_labels[b]),
                  title=f"seq {b}: (b={b}, h, :, :)", ylabel="query" if b == 0 else "")
    fig.suptitle(f"pad & causal broadcast to (B, H, L, S) = ({B}, {heads}, {L}, {S}); "
                 "the same mask for every head", fontsize=10)


def plot_masked_weights(fig: plt.Figure, weights: torch.Tensor, masks: torch.Tensor,
                        token_labels: Sequence[Sequence[str]], titles: Sequence[str]) -> None:
    """One weight heatmap per sequence, hidden cells hatched. weights/masks ``(B, L, S)``."""
    B = weights.shape[0]
    axes = fig.subplots(1, B)
    axes = np.atleast_1d(axes)
    for b, ax in enumerate(axes):
        labels = list(token_labels[b])
        heatmap(ax, weights[b], labels[: weights.shape[1]], labels, title=titles[b],
                vmin=0, vmax=1, annotate=True, fmt="{:.2f}", colorbar=b == B - 1,
                ylabel="query" if b == 0 else "")
        _hatch_hidden(ax, masks[b])


def _hatch_hidden(ax: plt.Axes, mask: torch.Tensor) -> None:
    m = mask.bool().cpu().numpy()
    for i, j in zip(*np.nonzero(~m), strict=True):
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                                   edgecolor="#bbbbbb", linewidth=0))


def plot_alignment(fig: plt.Figure, top_left: torch.Tensor, bottom_right: torch.Tensor) -> None:
    """Top-left vs bottom-right causal alignment of an ``(L, S)`` mask, side by side."""
    L, S = top_left.shape
    axes = fig.subplots(1, 2)
    rows = [f"new {i} (pos {S - L + i})" for i in range(L)]
    cols = [f"k{j}" + (" (cache)" if j < S - L else "") for j in range(S)]
    draw_mask(axes[0], top_left, rows, cols,
              title=f"top-left: j ≤ i  (torch is_causal, L={L}, S={S})")
    draw_mask(axes[1], bottom_right, rows, cols,
              title=f"bottom-right: j ≤ i + (S − L) = i + {S - L}", ylabel="")
