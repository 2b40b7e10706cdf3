"""Chapter 1 explorer: slide a query from one topic to another and watch what it retrieves."""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from course_lib.toolkit.explorer import Control, Explorer

from .helpers import TOPICS, interpolate, make_library
from .plots import draw_lookup

MIXES = tuple(round(0.1 * i, 1) for i in range(11))
TEMPERATURES = (0.25, 0.5, 1.0, 2.0, 4.0)


def draw_library(
    fig: plt.Figure, mix: float, temperature: float, start: str = "cooking",
    end: str = "astronomy",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw the lookup for the query ``(1 - mix) * topic(start) + mix * topic(end)``; returns
    the ``(weights, retrieved)`` it plotted."""
    lib = make_library()
    query = interpolate(lib.topic(start), lib.topic(end), mix)
    caption = (f"query = {1 - mix:.1f}·{start} + {mix:.1f}·{end},  temperature T = {temperature}")
    return draw_lookup(fig, lib, query, temperature, caption=caption)


def library_explorer() -> Explorer:
    """Sliders: the mix between two topics and the temperature; dropdowns: the two topics.
    In the book, the player sweeps the mix at T = 1."""
    return Explorer(
        draw=draw_library,
        controls={
            "mix": Control("mix", MIXES, default=0.0),
            "temperature": Control("T", TEMPERATURES, default=1.0),
            "start": Control("from", TOPICS, default="cooking", kind="dropdown"),
            "end": Control("to", TOPICS, default="astronomy", kind="dropdown"),
        },
        animate="mix",
        figsize=(8.5, 3.4),
    )
