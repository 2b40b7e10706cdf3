"""Explorer for chapter 14: a learned sink in the softmax. Choose the sink logit ``b`` and a
row of scores; see the weights of the six keys and the mass the sink takes, σ(b − LSE)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch

from course_lib.attention.sink_softmax import sink_softmax
from course_lib.toolkit.explorer import Control, Explorer
from course_lib.toolkit.plotting import OKABE_ITO

#: Rows of six scores: one key stands out, all alike, or all low (nothing worth reading).
SCORES = {"one stands out": [3.0, 0.5, 0.0, -0.5, 0.2, -1.0],
          "all alike": [0.0] * 6,
          "all low": [-3.0, -3.5, -2.5, -3.0, -4.0, -3.2]}


def sink_weights(sink: float, scores: str) -> tuple[np.ndarray, float]:
    """``(weights (6,), sink share)`` of one row of :data:`SCORES` with sink logit ``sink``."""
    s = torch.tensor(SCORES[scores], dtype=torch.float64).view(1, 1, 6)
    p = sink_softmax(s, torch.tensor([float(sink)], dtype=torch.float64))[0, 0]
    return p.numpy(), 1.0 - float(p.sum())


def draw_sink(fig: plt.Figure, sink: float = 0.0, scores: str = "one stands out") -> float:
    """Bars: the six keys' weights and the sink's share; returns the share."""
    ax = fig.subplots()
    w, share = sink_weights(sink, scores)
    ax.bar(np.arange(6), w, color=OKABE_ITO["blue"], label="keys")
    ax.bar([6.6], [share], color=OKABE_ITO["sky blue"], hatch="//", label="sink (no value)")
    for i, v in enumerate([*w, share]):
        ax.text(i if i < 6 else 6.6, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks([*range(6), 6.6], [f"k{i}" for i in range(6)] + ["sink"])
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("weight")
    ax.set_title(f"b = {sink:g}, scores: {scores}\nthe keys share {1 - share:.2f}", fontsize=9)
    fig.tight_layout()
    return share


def describe(params: dict[str, Any]) -> str:
    """The text alternative of one frame."""
    p = {"sink": 0.0, "scores": "one stands out", **params}
    w, share = sink_weights(p["sink"], p["scores"])
    return (f"Sink logit b = {p['sink']:g}, scores where {p['scores']}: the sink takes "
            f"{share:.2f} of the mass and the six keys "
            + ", ".join(f"{v:.2f}" for v in w) + ".")


def sink_explorer() -> Explorer:
    """The book plays the sink logit from -4 to 4 on each row of scores."""
    values = (-4.0, -2.0, 0.0, 2.0, 4.0)
    frames = [{"sink": b, "scores": s} for s in SCORES for b in values]
    return Explorer(
        draw=draw_sink,
        controls={"sink": Control("sink b", values, default=0.0),
                  "scores": Control("scores", tuple(SCORES), default="one stands out",
                                    kind="dropdown")},
        frames=frames,
        figsize=(3.8, 3.2),
        dpi=96,
        describe=describe,
    )
