"""course_lib: the companion package of *Self-Attention, Executed*.

Three interchangeable attention implementations share torch's SDPA signature, query
``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)``::

    from course_lib import IMPLEMENTATIONS
    for name, attend in IMPLEMENTATIONS.items():
        out = attend(q, k, v, is_causal=True)  # (..., L, Ev)
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import flash, masks, reference, sdpa

__version__ = "0.1.0"

AttentionFn = Callable[..., torch.Tensor]

IMPLEMENTATIONS: dict[str, AttentionFn] = {
    "reference": reference.scaled_dot_product_attention,
    "flash": flash.scaled_dot_product_attention,
    "sdpa": sdpa.scaled_dot_product_attention,
}

from . import multihead  # noqa: E402  (uses IMPLEMENTATIONS at call time)

__all__ = ["IMPLEMENTATIONS", "AttentionFn", "flash", "masks", "multihead", "reference", "sdpa",
           "__version__"]
