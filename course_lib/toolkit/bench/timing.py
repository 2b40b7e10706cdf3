"""Timing on :class:`torch.utils.benchmark.Timer`, and interleaved rounds.

``Timer`` brings the accelerator synchronisation, the thread setting and a warm-up before each
sample; the clock is wall time (its default) or this process's CPU time (:class:`CpuClock`,
which also splits it into user and system time). :func:`best_time` (CPU only) times single calls
with the standard library's ``timeit``, after one untimed call.

Interleaving: every round times each participant once, in a rotated order, so that slow drift of
the machine (other processes, thermal state) hits all participants alike; the median over rounds
is the robust statistic, the best is the least-disturbed run.
"""

from __future__ import annotations

import contextlib
import math
import resource
import statistics
import time
import timeit
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

CLOCKS = ("wall", "cpu")


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(threads)`` (None: unchanged), then restore."""
    saved = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


class CpuClock:
    """This process's CPU seconds, user + system over all threads (``getrusage``), as a
    ``Timer`` clock. It remembers its last two readings, so after ``Timer.timeit`` (whose last
    interval is the measured one) :meth:`split` gives that interval's user and system seconds.

    CPU time does not count the time other programs hold the CPU: on a shared machine it is
    far more stable than wall time; system time is the OS kernel working for the process
    (e.g. supplying fresh zeroed pages).
    """

    def __init__(self) -> None:
        self.readings: list[tuple[float, float]] = []

    def __call__(self) -> float:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.readings = [*self.readings[-1:], (ru.ru_utime, ru.ru_stime)]
        return ru.ru_utime + ru.ru_stime

    def split(self) -> tuple[float, float]:
        """(user, system) seconds between the last two readings."""
        (u0, s0), (u1, s1) = self.readings
        return u1 - u0, s1 - s0


def _timer(fn: Callable[[], object], cpu_clock: CpuClock | None) -> Any:
    """A ``Timer`` of ``fn()`` on this process's torch threads (and ``cpu_clock``, if any)."""
    # imported here: torch.utils.benchmark imports setuptools (0.15-0.25 s), which every process
    # importing course_lib (a grading kernel, a check server) would otherwise pay for nothing
    from torch.utils import benchmark

    extra = {} if cpu_clock is None else {"timer": cpu_clock}
    return benchmark.Timer(stmt="fn()", globals={"fn": fn},
                           num_threads=torch.get_num_threads(), **extra)


def _cpu_clock(clock: str, device: str | torch.device = "cpu") -> CpuClock | None:
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    if clock == "cpu" and torch.device(device).type != "cpu":
        raise ValueError(f"clock='cpu' times CPU work only, got device={device}")
    return CpuClock() if clock == "cpu" else None


def time_call_split(fn: Callable[[], object], device: str | torch.device = "cpu",
                    number: int = 1, clock: str = "wall") -> tuple[float, float, float]:
    """``(seconds, user, system)`` per call of ``fn``, averaged over ``number`` back-to-back
    calls after ``Timer``'s warm-up; ``user``/``system`` are NaN for ``clock="wall"``.

    ``clock="wall"``: ``Timer``'s clock, which synchronises the accelerator (CUDA) around the
    calls; ``clock="cpu"``: :class:`CpuClock` (CPU only).
    """
    if number < 1:
        raise ValueError(f"number must be >= 1, got {number}")
    cpu_clock = _cpu_clock(clock, device)
    seconds = _timer(fn, cpu_clock).timeit(number).mean
    if cpu_clock is None:
        return seconds, math.nan, math.nan
    user, system = cpu_clock.split()
    return seconds, user / number, system / number


def time_call(fn: Callable[[], object], device: str | torch.device = "cpu",
              number: int = 1, clock: str = "wall") -> float:
    """Seconds per call of ``fn`` averaged over ``number`` back-to-back calls
    (:func:`time_call_split` without the split)."""
    return time_call_split(fn, device, number, clock)[0]


def best_time(fn: Callable[[], object], repeats: int = 5, min_total_s: float = 0.0,
              max_runs: int = 200, clock: str = "wall") -> tuple[float, float, float]:
    """The least disturbed run: ``(seconds, user, system)``, ``seconds`` the fastest of at least
    ``repeats`` timed calls, going on for quick calls until ``min_total_s`` seconds were timed
    (at most ``max_runs``). CPU only.

    One untimed call first (first-call costs: lazy set-up, the allocator's first growth), then
    each run is one call timed on its own: the standard library's ``min(Timer.repeat(...))``
    idiom, on this process's CPU clock (``clock="cpu"``, :class:`CpuClock`) or wall time. (One
    :func:`time_call_split` per run warmed up twice before each: three calls per run.)

    ``user``/``system`` (``clock="cpu"``): ``seconds`` split in the proportion of the user and
    system time of all the timed runs, ``user = seconds · Σuser / Σ(user + system)``. One run's
    split is only as fine as the kernel's CPU accounting (a tick of a few ms): a 7 ms run was
    read as 0 ms user and 7 ms system. NaN for ``clock="wall"``."""
    cpu_clock = _cpu_clock(clock)
    timer = timeit.Timer(fn, timer=cpu_clock or time.perf_counter)
    fn()
    before = resource.getrusage(resource.RUSAGE_SELF)
    runs: list[float] = []
    while len(runs) < repeats or (sum(runs) < min_total_s and len(runs) < max_runs):
        runs += timer.repeat(repeat=1, number=1)
    after = resource.getrusage(resource.RUSAGE_SELF)
    best = min(runs)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    if cpu_clock is None or not user + system > 0:
        return best, math.nan, math.nan
    return best, best * user / (user + system), best * system / (user + system)


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
