"""Explorer for the FlexAttention chapter: choose a mask and a tile size, see the BlockMask."""

from __future__ import annotations

import matplotlib.pyplot as plt

from course_lib.toolkit.explorer import Control, Explorer

from .helpers import TILE_CASES, tile_case
from .plots import draw_block_mask, tile_legend

BLOCKS = (4, 8, 16, 32)


def draw_tiles(fig: plt.Figure, mask: str = "documents (64)", block: int = 16) -> dict:
    """Draw the mask ``mask`` (a :data:`TILE_CASES` label) with tiles of ``block``; returns the
    tile counts drawn (torch's ``BlockMask``, checked against the dense tile map)."""
    dense, tiles = tile_case(mask, block)
    ax = fig.subplots(1, 1)
    draw_block_mask(ax, dense, block, tiles, title=f"{mask}, tiles of {block}×{block}")
    tile_legend(fig)
    fig.subplots_adjust(bottom=0.2, top=0.85)
    return {"full": tiles.full, "partial": tiles.partial, "skipped": tiles.skipped}


def block_mask_explorer() -> Explorer:
    """Mask (dropdown) and tile size (slider); the book's player shows every mask at 16, then
    the documents mask at every tile size."""
    labels = tuple(TILE_CASES)
    frames = [{"mask": m, "block": 16} for m in labels]
    frames += [{"mask": "documents (64)", "block": b} for b in BLOCKS if b != 16]
    return Explorer(
        draw=draw_tiles,
        controls={
            "mask": Control("mask", labels, default="documents (64)", kind="dropdown"),
            "block": Control("tile size", BLOCKS, default=16),
        },
        frames=frames,
        figsize=(5.0, 4.6),
    )
