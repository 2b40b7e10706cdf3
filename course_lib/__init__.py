"""course_lib: the companion package of *Self-Attention, Executed*.

Three interchangeable attention implementations share torch's SDPA signature::

    from course_lib import IMPLEMENTATIONS
    for name, attend in IMPLEMENTATIONS.items():
        out = attend(q, k, v, is_causal=True)   # (..., L, E), (..., S, E), (..., S, Ev) -> (..., L, Ev)
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import flash, reference, sdpa

__version__ = "0.1.0"

AttentionFn = Callable[..., torch.Tensor]

IMPLEMENTATIONS: dict[str, AttentionFn] = {
    "reference": reference.scaled_dot_product_attention,
    "flash": flash.scaled_dot_product_attention,
    "sdpa": sdpa.scaled_dot_product_attention,
}

__all__ = ["IMPLEMENTATIONS", "AttentionFn", "flash", "reference", "sdpa", "__version__"]
