"""Chapter 2 explorer: widen d_k with and without scaling; watch scores spread and softmax
saturate."""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from course_lib.toolkit.explorer import Control, Explorer

from .plots import draw_scaling_frame

DIMS = tuple(2**i for i in range(11))          # 1 ... 1024
BOOK_DIMS = (1, 4, 16, 64, 256, 1024)
SCALINGS = ("unscaled", "scaled")


def draw_scaling(fig: plt.Figure, d_k: int, scaling: str) -> dict[str, torch.Tensor]:
    """Draw one frame for key width ``d_k`` and ``scaling`` in ``SCALINGS``."""
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {SCALINGS}, got {scaling!r}")
    return draw_scaling_frame(fig, d_k, scaled=scaling == "scaled")


def scaling_explorer() -> Explorer:
    """A d_k slider and a scaled/unscaled toggle. In the book the player sweeps d_k unscaled,
    then the same widths scaled (12 frames)."""
    return Explorer(
        draw=draw_scaling,
        controls={
            "d_k": Control("E (head width)", DIMS, default=64),
            "scaling": Control("scaling", SCALINGS, default="unscaled", kind="toggle"),
        },
        frames=[{"d_k": d, "scaling": m} for m in SCALINGS for d in BOOK_DIMS],
        figsize=(8.5, 3.2),
    )
