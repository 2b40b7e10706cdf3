"""Wall-clock timing with the right synchronisation, and interleaved rounds.

Interleaving: every round times each participant once, in a rotated order, so that slow drift of
the machine (other processes, thermal state) hits all participants alike; the median over rounds
is the robust statistic, the best is the least-disturbed run.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import torch


def synchronize(device: str | torch.device) -> None:
    """Wait for queued kernels on ``device`` (a no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], device: str | torch.device = "cpu",
              number: int = 1) -> float:
    """Seconds per call of ``fn`` averaged over ``number`` back-to-back calls.

    CPU: ``time.perf_counter``; CUDA: CUDA events after a synchronize (kernel time, not launch).
    """
    if number < 1:
        raise ValueError(f"number must be >= 1, got {number}")
    if torch.device(device).type == "cuda":
        synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / number
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def calls_per_sample(seconds_per_call: float, min_sample_s: float) -> int:
    """How many back-to-back calls make one sample last at least ``min_sample_s``."""
    if seconds_per_call <= 0:
        return 1
    return max(1, math.ceil(min_sample_s / seconds_per_call))


def summarize(times: Sequence[float]) -> dict[str, float]:
    """``{"median_s", "best_s", "mean_s", "rounds"}`` of a list of per-call times (seconds)."""
    if len(times) == 0:
        raise ValueError("summarize needs at least one time")
    return {
        "median_s": float(statistics.median(times)),
        "best_s": float(min(times)),
        "mean_s": float(statistics.fmean(times)),
        "rounds": len(times),
    }


def interleaved_rounds(
    participants: Mapping[str, Callable[[], object]],
    rounds: int,
    device: str | torch.device = "cpu",
    warmup: int = 1,
    min_sample_s: float = 0.02,
    on_step: Callable[[str, int], None] | None = None,
) -> dict[str, list[float]]:
    """Time every participant once per round, order rotated each round; ``{name: [s/call]}``.

    Each participant is first called ``warmup`` times (the last warm-up call is timed to pick how
    many calls make one sample last ``min_sample_s``, which keeps fast calls out of timer noise).
    ``on_step(name, round)`` is called after each sample (progress bars).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    names = list(participants)
    number: dict[str, int] = {}
    for name in names:
        for _ in range(max(warmup - 1, 0)):
            participants[name]()
        number[name] = calls_per_sample(time_call(participants[name], device), min_sample_s)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(time_call(participants[name], device, number[name]))
            if on_step is not None:
                on_step(name, r)
    return times
