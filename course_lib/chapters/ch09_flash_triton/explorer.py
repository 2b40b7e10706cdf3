"""Explorer for the Triton chapter: the tiles each program of the flash kernel visits, for any
sequence length, block size and mask (no Triton needed: it draws the kernel's schedule)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from course_lib.toolkit.explorer import Control, Explorer

from .plots import tile_map


def draw_schedule(fig: plt.Figure, n: int = 100, block: int = 32, causal: bool = True) -> None:
    ax = fig.subplots(1, 1)
    tile_map(ax, n, block, block, causal)
    fig.tight_layout()


def schedule_explorer() -> Explorer:
    """Sliders for N and the block size, a causal toggle."""
    return Explorer(
        draw=draw_schedule,
        controls={"n": Control("N", [5, 40, 64, 100, 200, 256], default=100),
                  "block": Control("block", [16, 32, 64], default=32),
                  "causal": Control("causal", [False, True], default=True, kind="toggle")},
        figsize=(7.0, 4.0),
    )
