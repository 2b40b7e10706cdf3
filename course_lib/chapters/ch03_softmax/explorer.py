"""Explorer for the Softmax chapter: temperature and one logit → the distribution."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from course_lib.toolkit.explorer import Control, Explorer

from .helpers import entropy, stable_softmax

TOKENS = ("the", "cat", "sat", "on", "a", "mat")
BASE_LOGITS = (1.0, 2.5, 0.5, -0.5, 0.0, 1.8)
TEMPERATURES = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
BOOSTS = (-2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0)


def logits_for(boost: float) -> torch.Tensor:
    """The explorer's logits ``(6,)``: fixed values, with ``boost`` added to the logit of "sat"."""
    x = torch.tensor(BASE_LOGITS, dtype=torch.float64)
    x[2] = x[2] + boost
    return x


def draw_temperature(fig: plt.Figure, temperature: float = 1.0, boost: float = 0.0) -> np.ndarray:
    """Left: the logits. Right: softmax(logits / T) with its entropy. Returns the weights drawn."""
    x = logits_for(boost)
    p = stable_softmax(x / temperature)
    ax1, ax2 = fig.subplots(1, 2)
    colours = ["#7570b3" if i == 2 else "#999999" for i in range(len(TOKENS))]
    ax1.bar(TOKENS, x.numpy(), color=colours)
    ax1.axhline(0, color="black", lw=0.6)
    ax1.set_ylim(-2.5, 7)
    ax1.set_ylabel("logit")
    ax1.set_xlabel("token")
    ax1.set_title(f"logits x\nT = {temperature:g}")
    ax2.bar(TOKENS, p.numpy(), color=["#7570b3" if i == 2 else "#1b9e77" for i in range(6)])
    ax2.axhline(1 / len(TOKENS), color="gray", ls=":", lw=1)
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("probability")
    ax2.set_xlabel("token")
    h = float(entropy(p))
    ax2.set_title(f"softmax(x / T)\nentropy {h:.2f} nats (max {np.log(len(TOKENS)):.2f})")
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.17, top=0.83, wspace=0.3)  # fast
    return p.numpy()


def temperature_explorer() -> Explorer:
    """Temperature slider and a boost for the logit of "sat"; the book animates the temperature."""
    return Explorer(
        draw=draw_temperature,
        controls={
            "temperature": Control("T", TEMPERATURES, default=1.0),
            "boost": Control("boost 'sat'", BOOSTS, default=0.0),
        },
        animate="temperature",
        figsize=(8.0, 3.2),
    )
