"""The registry of interchangeable attention implementations, all with torch's SDPA signature.

Query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)`` → ``(..., L, Ev)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import flash, reference, sdpa

AttentionFn = Callable[..., torch.Tensor]

IMPLEMENTATIONS: dict[str, AttentionFn] = {
    "reference": reference.scaled_dot_product_attention,
    "flash": flash.scaled_dot_product_attention,
    "sdpa": sdpa.scaled_dot_product_attention,
}
