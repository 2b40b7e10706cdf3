"""FLOP conventions of the benchmark (one multiply-add counts 2 FLOPs).

Forward attention core for ``(B, H, n, d)`` inputs: two matmuls, ``QKᵀ`` and ``PV``, each
``2·n·n·d`` per head, so ``4·B·H·n²·d``. Causal attention needs only the lower triangle, so the
count is halved (the convention of the FlashAttention benchmarks; the naive path still computes
the full matrix, which is exactly why it is slower). The softmax's ``O(n²)`` exp/max/sum work is
not counted. Forward + backward counts ``3.5×`` the forward (backward = ``2.5×``: five ``n²d``
matmuls, one of them recomputing ``QKᵀ``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BACKWARD_FACTOR = 2.5
FLOP_CONVENTION = (
    "forward = 4*B*H*n^2*d (QK^T and PV, multiply-add = 2 FLOPs), halved when causal; "
    "forward+backward = 3.5x forward; softmax exp/max/sum not counted"
)


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of ``(m, k) @ (k, n)``: ``2·m·k·n``."""
    return 2 * m * k * n


def attention_core_flops(n: int, d: int, s: int | None = None, dv: int | None = None) -> int:
    """FLOPs of ``QKᵀ`` and ``weights·V`` for one head: ``2·n·s·d + 2·n·s·dv`` (= 4n²d if s=n).

    ``n`` queries, ``s`` keys (default ``n``), head width ``d``, value width ``dv`` (default ``d``).
    Softmax, scaling and masking are elementwise, O(n·s), and not counted.
    """
    s = n if s is None else s
    dv = d if dv is None else dv
    return matmul_flops(n, d, s) + matmul_flops(n, s, dv)


def attention_flops(batch: int, heads: int, n: int, d: int, causal: bool = False,
                    backward: bool = False) -> int:
    """FLOPs of the attention core on ``(B, H, n, d)``: ``4·B·H·n²·d``, ÷2 causal, ×3.5 fwd+bwd."""
    for name, val in (("batch", batch), ("heads", heads), ("n", n), ("d", d)):
        if int(val) != val or val < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {val!r}")
    flops = batch * heads * attention_core_flops(n, d)
    if causal:
        flops //= 2
    if backward:
        flops = int(flops * (1 + BACKWARD_FACTOR))
    return flops


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Total FLOPs that :class:`torch.utils.flop_counter.FlopCounterMode` records for ``fn(...)``.

    It counts only ops with a registered formula (matmuls, convolutions, some attention kernels):
    elementwise work such as softmax is free in its eyes.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())
