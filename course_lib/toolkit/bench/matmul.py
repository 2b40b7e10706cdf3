"""The machine's matrix-multiply rate: the yardstick attention's achieved FLOP/s is compared to."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch

from .flops import matmul_flops
from .timing import interleaved_rounds
from .workloads import matmul

DEFAULT_SIZE = {"cpu": 2048, "cuda": 8192}


def default_matmul_size(device: str = "cpu") -> int:
    """Square size used for the yardstick: 2048 on CPU (~17 GFLOP), 8192 on CUDA (~1.1 TFLOP)."""
    return DEFAULT_SIZE.get(torch.device(device).type, 2048)


def rate_from_times(times_s: Sequence[float], size: int) -> dict[str, float]:
    """``{"gflops_median", "gflops_best", "median_s", "best_s", "samples"}`` for square matmuls."""
    if len(times_s) == 0:
        raise ValueError("need at least one matmul time")
    flops = matmul_flops(size, size, size)
    med, best = statistics.median(times_s), min(times_s)
    return {"gflops_median": flops / med / 1e9, "gflops_best": flops / best / 1e9,
            "median_s": float(med), "best_s": float(best), "samples": len(times_s)}


def matmul_rate(size: int | None = None, dtype: str = "float32", device: str = "cpu",
                rounds: int = 5, min_sample_s: float = 0.05) -> dict[str, object]:
    """Measured FLOP/s of ``(size, size) @ (size, size)`` in ``dtype`` on ``device``.

    Returns ``rate_from_times``'s dict plus ``size``, ``dtype``, ``device``. The sweep instead
    interleaves the same matmul with the attention calls, so both feel the same machine load.
    """
    size = default_matmul_size(device) if size is None else int(size)
    times = interleaved_rounds({"matmul": matmul(size, dtype, device)}, rounds, device,
                               min_sample_s=min_sample_s)["matmul"]
    return {**rate_from_times(times, size), "size": size, "dtype": dtype, "device": str(device)}
