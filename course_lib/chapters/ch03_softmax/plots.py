"""Figures for the Softmax chapter: temperature, exp overflow per dtype, saturation."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from .helpers import jacobian_norm, overflow_limits, stable_softmax

DTYPE_COLOURS = {torch.float16: "#d95f02", torch.bfloat16: "#7570b3", torch.float32: "#1b9e77",
                 torch.float64: "#666666"}


def plot_temperature(ax: plt.Axes, logits: torch.Tensor, temperatures: Sequence[float],
                     labels: Sequence[str]) -> np.ndarray:
    """Grouped bars of softmax(logits / T) for each T; returns the ``(len(T), n)`` weights drawn."""
    n, k = len(labels), len(temperatures)
    width = 0.8 / k
    cmap = plt.get_cmap("viridis")
    drawn = []
    for i, t in enumerate(temperatures):
        p = stable_softmax(logits.to(torch.float64) / t).numpy()
        drawn.append(p)
        ax.bar(np.arange(n) + (i - (k - 1) / 2) * width, p, width, label=f"T = {t:g}",
               color=cmap(i / max(k - 1, 1) * 0.85))
    ax.set_xticks(range(n), labels=list(labels))
    ax.set_xlabel("token")
    ax.set_ylabel("softmax weight (probability)")
    ax.set_ylim(0, 1)
    ax.legend(frameon=False)
    return np.stack(drawn)


def plot_exp_range(ax: plt.Axes, dtypes: Sequence[torch.dtype]) -> dict[torch.dtype, tuple]:
    """For each dtype, the interval of x where exp(x) is finite and non-zero, on a number line.

    Returns ``{dtype: (underflow, overflow)}`` as drawn: exp(x) = 0 left of the bar (still
    harmless in softmax) and exp(x) = inf right of it (fatal: inf / inf = NaN).
    """
    drawn = {}
    for i, dt in enumerate(dtypes):
        lim = overflow_limits(dt)
        colour = DTYPE_COLOURS.get(dt, "black")
        ax.barh(i, lim.exp_overflow - lim.exp_underflow, left=lim.exp_underflow, height=0.5,
                color=colour, alpha=0.85)
        ax.text(lim.exp_overflow + 2, i, f"inf for x > {lim.exp_overflow:.2f}", va="center",
                fontsize=9)
        ax.text(lim.exp_underflow - 2, i, f"0 for x < {lim.exp_underflow:.1f}", va="center",
                ha="right", fontsize=9)
        drawn[dt] = (lim.exp_underflow, lim.exp_overflow)
    ax.axvline(0, color="gray", lw=0.8, ls=":")
    ax.set_yticks(range(len(dtypes)), labels=[str(d).replace("torch.", "") for d in dtypes])
    ax.set_xlabel("logit x")
    ax.set_xlim(-170, 150)
    ax.set_title("where exp(x) is representable (finite and non-zero)")
    return drawn


def plot_saturation(fig: plt.Figure, logits: torch.Tensor, scales: Sequence[float],
                    show_scales: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Left: softmax(c·logits) for a few c. Right: max weight and ‖J‖₂ versus c (log axis).

    Returns ``(max_weight, jac_norm)``, each of length ``len(scales)``.
    """
    ax1, ax2 = fig.subplots(1, 2)
    n = logits.numel()
    for i, c in enumerate(show_scales):
        p = stable_softmax(c * logits.to(torch.float64)).numpy()
        ax1.plot(range(n), p, marker="o", label=f"c = {c:g}",
                 color=plt.get_cmap("viridis")(i / max(len(show_scales) - 1, 1) * 0.85))
    ax1.set_xlabel("logit index (sorted)")
    ax1.set_ylabel("weight")
    ax1.set_title("softmax(c · x)")
    ax1.legend(frameon=False)
    pmax = np.array([float(stable_softmax(c * logits.to(torch.float64)).max()) for c in scales])
    jn = np.array([jacobian_norm(logits, c) for c in scales])
    ax2.semilogx(scales, jn, color="#d95f02", label="‖∂p/∂x‖₂ (Jacobian norm)")
    ax2.semilogx(scales, pmax, color="#1b9e77", ls="--", label="largest weight")
    ax2.axhline(0.5, color="gray", lw=0.8, ls=":")
    ax2.set_xlabel("logit scale c = 1/T  (log axis)")
    ax2.set_ylabel("value")
    ax2.set_title("saturation kills the gradient")
    ax2.legend(frameon=False, loc="upper left")
    fig.tight_layout()
    return pmax, jn
