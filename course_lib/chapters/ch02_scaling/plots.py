"""Figures of chapter 2 (scaling by √d_k): variance growth, softmax saturation, vanishing
Jacobian, and the explorer's three-panel frame."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from .helpers import entropy, random_qk, scores

SCALED, UNSCALED = "#0072b2", "#d55e00"


def plot_variance(
    ax: plt.Axes, dims: Sequence[int], var_unscaled: Sequence[float],
    var_scaled: Sequence[float],
) -> None:
    """Measured Var(q·k) and Var(q·k/√d_k) against d_k (log-log), with the lines y = d_k, y = 1."""
    d = np.asarray(dims, dtype=float)
    ax.plot(d, d, color="grey", ls="--", lw=1, label=r"theory: $y = E$")
    ax.plot(d, np.ones_like(d), color="grey", ls=":", lw=1, label=r"theory: $y = 1$")
    ax.plot(d, var_unscaled, "o", color=UNSCALED, label=r"measured Var$(q\cdot k)$")
    ax.plot(d, var_scaled, "s", color=SCALED, label=r"measured Var$(q\cdot k/\sqrt{E})$")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel(r"key width $E$ (dimensions, log scale)")
    ax.set_ylabel("variance of the score (log scale)")
    ax.set_title("Dot products grow with width; scaling undoes it")
    ax.legend(fontsize=8, frameon=False)


def plot_saturation(
    axes: Sequence[plt.Axes], dims: Sequence[int], stats: dict[str, dict[str, torch.Tensor]],
    n_keys: int,
) -> None:
    """Two panels against d_k: the mean largest weight and the mean entropy of the softmax."""
    ax_m, ax_h = axes
    for mode, colour in (("unscaled", UNSCALED), ("scaled", SCALED)):
        ax_m.plot(dims, stats[mode]["max_weight"].numpy(), "o-", color=colour, label=mode)
        ax_h.plot(dims, stats[mode]["entropy"].numpy(), "o-", color=colour, label=mode)
    ax_m.axhline(1.0, color="grey", ls=":", lw=1)
    ax_m.set_ylim(0, 1.05)
    ax_m.set_ylabel("mean largest weight")
    ax_m.set_title("Unscaled softmax becomes one-hot")
    ax_h.axhline(math.log(n_keys), color="grey", ls=":", lw=1)
    ax_h.annotate(f"uniform: log {n_keys}", (dims[0], math.log(n_keys)), fontsize=8,
                  color="grey", textcoords="offset points", xytext=(2, -11))
    ax_h.set_ylim(0, math.log(n_keys) * 1.08)
    ax_h.set_ylabel("mean entropy (nats)")
    ax_h.set_title("... and loses its entropy")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel(r"key width $E$ (log scale)")
        ax.legend(fontsize=8, frameon=False)


def plot_jacobian(
    ax: plt.Axes, dims: Sequence[int], stats: dict[str, dict[str, torch.Tensor]]
) -> None:
    """Mean Frobenius norm of the softmax Jacobian against d_k, scaled and unscaled."""
    for mode, colour in (("unscaled", UNSCALED), ("scaled", SCALED)):
        ax.plot(dims, stats[mode]["jacobian"].numpy(), "o-", color=colour, label=mode)
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(r"key width $E$ (log scale)")
    ax.set_ylabel(r"mean $\|\partial\,\mathrm{softmax} / \partial\,\mathrm{scores}\|_F$")
    ax.set_title("Without scaling the gradient through softmax vanishes")
    ax.legend(fontsize=8, frameon=False)


def draw_scaling_frame(
    fig: plt.Figure, d_k: int, scaled: bool, n_keys: int = 16, n_queries: int = 256,
    x_limit: float = 100.0, seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Explorer frame: histogram of all scores, the softmax weights of query 0 over ``n_keys``
    keys, and their entropy. Returns ``{"scores", "weights", "entropy"}`` as plotted."""
    q, k = random_qk(d_k, n_queries, n_keys, seed=seed)
    s = scores(q, k, scaled=scaled)                    # (n_queries, n_keys)
    w = torch.softmax(s[0], dim=-1)                    # weights of the first query
    h = entropy(w)
    ax_s, ax_w = fig.subplots(1, 2)
    colour = SCALED if scaled else UNSCALED
    clipped = s.flatten().clamp(-x_limit, x_limit).numpy()
    ax_s.hist(clipped, bins=np.linspace(-x_limit, x_limit, 101), color=colour)
    ax_s.set_xlim(-x_limit, x_limit)
    ax_s.set_xlabel("score value")
    ax_s.set_ylabel("count (query-key pairs)")
    label = r"$q\cdot k/\sqrt{E}$" if scaled else r"$q\cdot k$"
    ax_s.set_title(f"{label} at $E$ = {d_k}: std {s.std().item():.1f}")
    ax_w.bar(np.arange(n_keys), w.numpy(), color=colour)
    ax_w.set_ylim(0, 1)
    ax_w.set_xlabel("key index")
    ax_w.set_ylabel("softmax weight")
    ax_w.set_xticks(range(0, n_keys, 3))
    ax_w.set_title(f"query 0: entropy {h.item():.2f} of {math.log(n_keys):.2f} nats")
    fig.tight_layout()
    return {"scores": s, "weights": w, "entropy": h}
