"""Figures of the capstone chapter: training curves, attention of a classifier's ``<cls>`` token,
per-head attention maps of the induction model, per-position accuracy, positional tables."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from course_lib.toolkit.plotting import _to_numpy, heatmap

HIGHLIGHT = "#c2410c"  # orange-red, readable on white


def smooth(values: Sequence[float], window: int = 10) -> np.ndarray:
    """Running mean over ``window`` steps (shorter at the start): ``(T,)`` → ``(T,)``."""
    x = np.asarray(values, dtype=np.float64)
    c = np.cumsum(np.insert(x, 0, 0.0))
    idx = np.arange(1, len(x) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def training_curves(fig: plt.Figure, histories: dict, window: int = 10) -> None:
    """Loss (log scale) and training-batch accuracy vs step, one line per ``{name: History}``."""
    ax_loss, ax_acc = fig.subplots(1, 2)
    for name, h in histories.items():
        steps = np.arange(1, len(h.loss) + 1)
        ax_loss.plot(steps, smooth(h.loss, window), label=name)
        ax_acc.plot(steps, smooth(h.accuracy, window), label=name)
    ax_loss.set_yscale("log")
    ax_loss.set_xlabel("training step")
    ax_loss.set_ylabel("cross-entropy loss (nats)")
    ax_loss.set_title("loss (running mean)")
    ax_acc.set_xlabel("training step")
    ax_acc.set_ylabel("accuracy on the batch")
    ax_acc.set_ylim(0, 1.02)
    ax_acc.set_title("accuracy (running mean)")
    ax_acc.legend(loc="lower right")
    fig.tight_layout()


def cls_attention(fig: plt.Figure, sentences: Sequence[Sequence[str]], rows: torch.Tensor,
                  deciding: torch.Tensor, predictions: Sequence[str]) -> None:
    """One panel per sentence: the ``<cls>`` query's weights ``rows (n, H, N)`` over its words,
    one row per head; deciding words in bold orange. ``deciding (n, N)`` bool."""
    n = len(sentences)
    axes = np.atleast_1d(fig.subplots(n, 1))
    for k, (ax, words) in enumerate(zip(axes, sentences, strict=True)):
        w = _to_numpy(rows[k][:, : len(words)])
        heatmap(ax, w, [f"head {h + 1}" for h in range(w.shape[0])], list(words), vmin=0,
                vmax=1, annotate=True, xlabel="", ylabel="", colorbar=False)
        for j, label in enumerate(ax.get_xticklabels()):
            if bool(deciding[k, j]):
                label.set_color(HIGHLIGHT)
                label.set_fontweight("bold")
        ax.set_title(f"model says: {predictions[k]}", fontsize=10, loc="left")
    axes[-1].set_xlabel("key word (attended by <cls>)")
    fig.tight_layout()


def head_grid(fig: plt.Figure, maps: torch.Tensor, labels: Sequence[str],
              titles: Sequence[Sequence[str]]) -> None:
    """Grid of attention maps ``maps (layers, heads, N, N)`` on one sequence, token labels on
    both axes; ``titles[layer][head]`` above each panel."""
    n_layers, n_heads = maps.shape[:2]
    axes = np.asarray(fig.subplots(n_layers, n_heads, squeeze=False))
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            heatmap(ax, maps[layer, head], labels, labels, vmin=0, vmax=1, colorbar=False,
                    title=titles[layer][head], xlabel="key token", ylabel="query token")
            ax.tick_params(labelsize=8)
    fig.tight_layout()


def position_accuracy(ax: plt.Axes, accuracy: torch.Tensor, period: int,
                      chance: float | None = None) -> None:
    """Next-token accuracy per position ``accuracy (N-1,)`` on sequences repeating with
    ``period``; the start of the repeat is marked, and the chance level when given."""
    acc = _to_numpy(accuracy)
    pos = np.arange(len(acc))
    ax.bar(pos, acc, color=["#9ca3af" if p < period else "#2563eb" for p in pos])
    ax.axvline(period - 0.5, color=HIGHLIGHT, linestyle="--", label="the repeat starts")
    if chance is not None:
        ax.axhline(chance, color="0.3", linestyle=":", label=f"chance ({chance:.2f})")
    ax.set_xlabel("position of the query (predicting the next token)")
    ax.set_ylabel("next-token accuracy")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="upper left")


def positions_table(ax: plt.Axes, table: torch.Tensor) -> None:
    """The sinusoidal table ``(N, d)`` as an image: rows = positions, columns = features."""
    heatmap(ax, table, xlabel="feature index i (dimensionless)", ylabel="position t",
            cmap="RdBu_r", vmin=-1, vmax=1, title="sinusoidal positions P[t, i]")
