"""course_lib: the companion package of *Self-Attention, Executed*.

Three interchangeable attention implementations share torch's SDPA signature, query
``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)``::

    from course_lib import IMPLEMENTATIONS
    for name, attend in IMPLEMENTATIONS.items():
        out = attend(q, k, v, is_causal=True)  # (..., L, Ev)

Layers: ``course_lib.attention`` (the core, torch only), ``course_lib.toolkit`` (display,
plotting style, explorer base, the exercise checker, the benchmark) and ``course_lib.chapters``
(one package per chapter). The names learners use are re-exported here, and the modules
``course_lib.reference``, ``.flash``, ``.sdpa``, ``.masks``, ``.multihead``, ``.exercises`` and
``.bench`` stay importable under those names (``python -m course_lib.bench`` included).
"""

from __future__ import annotations

import os
import sys

import torch

if not torch.cuda.is_available():
    # Triton (chapter 9) runs kernels on the CPU with its interpreter only if this is set before
    # triton.language is imported, and torch._dynamo imports it (torch.compile, flex_attention,
    # torch.nn.attention.bias): so it is set here, before the course imports anything else.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from .attention import (
    IMPLEMENTATIONS,
    AttentionFn,
    MultiHeadAttention,
    flash,
    masks,
    multihead,
    reference,
    sdpa,
)
from .toolkit import bench
from .toolkit import checking as exercises

__version__ = "0.1.0"

for _name, _module in {"reference": reference, "flash": flash, "sdpa": sdpa, "masks": masks,
                       "multihead": multihead, "exercises": exercises, "bench": bench}.items():
    sys.modules.setdefault(f"{__name__}.{_name}", _module)  # import course_lib.<name> still works

__all__ = ["IMPLEMENTATIONS", "AttentionFn", "MultiHeadAttention", "bench", "exercises", "flash",
           "masks", "multihead", "reference", "sdpa", "__version__"]
