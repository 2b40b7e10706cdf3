"""FLOP conventions of the benchmark (one multiply-add counts 2 FLOPs).

Forward attention core for ``(B, H, n, d)`` inputs: two matmuls, ``QKᵀ`` and ``PV``, each
``2·n·n·d`` per head, so ``4·B·H·n²·d``. Causal attention needs only the lower triangle, so the
count is halved (the convention of the FlashAttention benchmarks; the naive path still computes
the full matrix, which is exactly why it is slower). The softmax's ``O(n²)`` exp/max/sum work is
not counted. Forward + backward counts ``3.5×`` the forward (backward = ``2.5×``: five ``n²d``
matmuls, one of them recomputing ``QKᵀ``).
"""

from __future__ import annotations

BACKWARD_FACTOR = 2.5
FLOP_CONVENTION = (
    "forward = 4*B*H*n^2*d (QK^T and PV, multiply-add = 2 FLOPs), halved when causal; "
    "forward+backward = 3.5x forward; softmax exp/max/sum not counted"
)


def attention_flops(batch: int, heads: int, n: int, d: int, causal: bool = False,
                    backward: bool = False) -> int:
    """FLOPs of the attention core on ``(B, H, n, d)``: ``4·B·H·n²·d``, ÷2 causal, ×3.5 fwd+bwd."""
    for name, val in (("batch", batch), ("heads", heads), ("n", n), ("d", d)):
        if int(val) != val or val < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {val!r}")
    flops = 4 * batch * heads * n * n * d
    if causal:
        flops //= 2
    if backward:
        flops = int(flops * (1 + BACKWARD_FACTOR))
    return flops


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of ``(m, k) @ (k, n)``: ``2·m·k·n``."""
    return 2 * m * k * n
