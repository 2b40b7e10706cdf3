"""What training keeps in memory for the backward pass, counted exactly.

Autograd saves activations during the forward pass for use in the backward pass; that is the
memory mixed precision (``torch.autocast``: smaller dtypes) and recomputation
(``torch.utils.checkpoint``: save only the block's input, recompute the rest) reduce. Counting the
saved tensors through ``torch.autograd.graph.saved_tensors_hooks`` gives the same number on every
machine, unlike a resident-set measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


def saved_activation_bytes(fn: Callable[[], Any], params: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the distinct tensors autograd saves while ``fn()`` runs, parameters excluded.

    A tensor saved by several ops (same storage, dtype and shape) counts once.
    """
    skip = {p.data_ptr() for p in params}
    seen: dict[tuple, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in skip:
            seen[(t.data_ptr(), t.dtype, tuple(t.shape))] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())
