"""Capstone explorer: pick an example sequence and a head of the trained induction model, see
its attention map with the previous-token and induction diagonals marked."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch

from course_lib.toolkit.explorer import Control, Explorer
from course_lib.toolkit.plotting import heatmap

from . import probes, tasks


@dataclass
class Example:
    """One sequence: ``tokens (N,)``, its ``period`` and the ``(layers, heads, N, N)`` maps."""

    name: str
    tokens: torch.Tensor
    period: int
    maps: torch.Tensor


def make_examples(model: torch.nn.Module, periods=(8, 6, 5), seq_len: int = 16,
                  vocab_size: int = 24, seed: int = 7) -> list[Example]:
    """Random filler + a block of ``p`` tokens + its repeat, for each ``p``; maps from ``model``."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for p in periods:
        block = torch.randperm(vocab_size, generator=g)[: seq_len - p]
        tokens = torch.cat([block, block[seq_len - 2 * p:]])           # filler, block, block
        with torch.no_grad():
            _, maps = model(tokens[None], return_attention=True)
        filler = seq_len - 2 * p
        name = f"period {p}" + (f" after {filler} filler tokens" if filler else "")
        out.append(Example(name, tokens, p, torch.stack([m[0] for m in maps])))
    return out


def head_label(layer: int, head: int) -> str:
    return f"layer {layer + 1}, head {head + 1}"


def draw(fig: plt.Figure, example: Example, layer: int, head: int) -> None:
    """The map of ``(layer, head)`` on ``example``; squares mark A[i, i-1] (previous token) and
    circles A[i, i-p+1] (induction) over the repeat."""
    attn = example.maps[layer, head]
    n, p = attn.shape[-1], example.period
    start = n - 2 * p
    labels = tasks.as_letters(example.tokens)
    ax = fig.add_subplot(1, 1, 1)
    heatmap(ax, attn, labels, labels, vmin=0, vmax=1, xlabel="key token",
            ylabel="query token", cmap="Blues")
    rows = torch.arange(start + p, n)
    ax.scatter(rows - p + 1, rows, s=60, facecolors="none", edgecolors="#c2410c",
               label="induction: key i-p+1")
    prev = torch.arange(1, n)
    ax.scatter(prev - 1, prev, s=25, marker="s", facecolors="none", edgecolors="#6b7280",
               label="previous token: key i-1")
    sub = attn[start:, start:]  # the block and its repeat (period p)
    ind = float(probes.induction_score(sub, p))
    pt = float(probes.previous_token_score(attn))
    ax.set_title(f"{head_label(layer, head)} on '{example.name}'\n"
                 f"previous-token score {pt:.2f}, induction score {ind:.2f}", fontsize=9)
    ax.legend(loc="upper right", fontsize=7, framealpha=0.9)
    fig.tight_layout()


def head_explorer(model: torch.nn.Module, examples: list[Example] | None = None) -> Explorer:
    """Controls: example (dropdown) and head (dropdown); the book shows every head on every
    example (``len(examples) × layers × heads`` frames)."""
    examples = examples or make_examples(model)
    n_layers, n_heads = examples[0].maps.shape[:2]
    heads = [head_label(layer, h) for layer in range(n_layers) for h in range(n_heads)]
    by_name = {e.name: e for e in examples}

    def _draw(fig: plt.Figure, example: str, head: str) -> None:
        k = heads.index(head)
        draw(fig, by_name[example], k // n_heads, k % n_heads)

    controls = {
        "example": Control("example", [e.name for e in examples], kind="dropdown"),
        "head": Control("head", heads, default=heads[-1], kind="dropdown"),
    }
    frames = [{"example": e.name, "head": h} for e in examples for h in heads]
    return Explorer(_draw, controls, frames=frames, figsize=(5.6, 5.0), interval_ms=900)

