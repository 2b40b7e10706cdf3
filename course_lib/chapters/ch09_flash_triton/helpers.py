"""Chapter 9's computations that need no Triton: the launch grid and which tiles each program
visits (the kernel's schedule, as data), and the interpreter's timing."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: Tile kinds in :func:`tile_kinds`: what a program does with the (query block, key block) tile.
SKIPPED, FULL, RAGGED, DIAGONAL = 0, 1, 2, 3
KIND_NAMES = {SKIPPED: "skipped", FULL: "no mask", RAGGED: "key mask (ragged end)",
              DIAGONAL: "causal mask (diagonal)"}


def cdiv(a: int, b: int) -> int:
    """Ceiling division, like ``triton.cdiv``."""
    return -(-a // b)


def grid(n: int, batch_heads: int, block_m: int) -> tuple[int, int]:
    """The flash kernel's launch grid: (query blocks, batch · heads)."""
    return cdiv(n, block_m), batch_heads


def tile_kinds(n: int, block_m: int, block_n: int, causal: bool) -> np.ndarray:
    """``(query blocks, key blocks)`` array of tile kinds, as the course's kernel visits them.

    Causal: key blocks wholly below the diagonal need no mask, those inside the query block's
    range get the causal mask, later ones are never visited. Not causal: every tile is visited;
    only the last key block needs a mask when ``n`` is not a multiple of ``block_n``.
    """
    if block_m % block_n:
        raise ValueError("block_m must be a multiple of block_n")
    rows, cols = cdiv(n, block_m), cdiv(n, block_n)
    kinds = np.full((rows, cols), SKIPPED, dtype=int)
    for i in range(rows):
        for j in range(cols):
            start = j * block_n
            if causal:
                if start < i * block_m:
                    kinds[i, j] = FULL
                elif start < (i + 1) * block_m:
                    kinds[i, j] = DIAGONAL
            else:
                kinds[i, j] = RAGGED if start + block_n > n else FULL
    return kinds


def tile_counts(kinds: np.ndarray) -> dict[str, int]:
    """How many tiles of each kind."""
    return {KIND_NAMES[k]: int((kinds == k).sum()) for k in KIND_NAMES}


def seconds(fn: Callable[[], Any], rounds: int = 1) -> float:
    """Best wall time of ``rounds`` calls (interpreter timings: seconds, not microseconds)."""
    best = math.inf
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best
