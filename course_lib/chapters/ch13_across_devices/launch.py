"""Run a function on W CPU processes joined by a ``gloo`` process group, and collect its results.

``run_ranks(fn, world, *args)`` spawns ``world`` processes (``torch.multiprocessing``, start
method ``spawn``: works from a notebook, a test or a script), each of which initialises a process
group through a file store in a fresh temporary directory (no port to pick, no clash with another
run), calls ``fn(rank, world, *args)`` and sends back what it returned (pickled bytes: tensors
are copied, nothing is left in shared memory). ``fn`` must be importable by name (a module-level
function of an installed module), as ``spawn`` requires.

Every wait is bounded (``timeout`` seconds in all, also passed to the process group), and every
process started is ended and joined before ``run_ranks`` returns or raises, whatever happened: an
exception in any rank is raised in the parent with that rank's traceback.
"""

from __future__ import annotations

import datetime
import os
import pickle
import queue
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch


class RankFailed(RuntimeError):
    """A rank raised; the message holds its traceback."""


def _child(rank: int, world: int, store: str, timeout: float, threads: int,
           fn: Callable[..., Any], args: tuple, results: Any) -> None:
    import torch.distributed as dist
    torch.set_num_threads(threads)
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=world,
                                timeout=datetime.timedelta(seconds=timeout))
        try:
            value = fn(rank, world, *args)
            results.put((rank, True, pickle.dumps(value)))
        finally:
            dist.destroy_process_group()
    except BaseException:            # report anything, then exit
        results.put((rank, False, traceback.format_exc()))


def _failures(rank: int, payload: str, world: int, results: Any) -> str:
    """The first failure, and any other rank's reported within a second (a rank that raised
    closes its connections, so the others' collectives fail too: every traceback is shown, in
    rank order, to find the one that started it)."""
    failed = {rank: payload}
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        try:
            other, ok, text = results.get(timeout=max(until - time.monotonic(), 0.01))
        except queue.Empty:
            break
        if not ok:
            failed[other] = text
    return "\n".join(f"rank {r} of {world} raised:\n{failed[r]}" for r in sorted(failed))


def _context() -> Any:
    """``forkserver`` where the platform has it: one server process imports torch and the course
    once (and DTensor, which the peer comparison needs) and forks every rank from it (each
    ``spawn``ed rank would import them again, seconds each); ``spawn`` elsewhere. Both need
    ``fn`` importable by name."""
    import multiprocessing

    import torch.multiprocessing as mp
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "torch.distributed", "course_lib.attention",
                                    __name__, "torch.distributed.tensor.experimental"])
        return ctx
    return mp.get_context("spawn")


def run_ranks(fn: Callable[..., Any], world: int, *args: Any, timeout: float = 120.0,
              threads: int = 1) -> list[Any]:
    """``[fn(0, world, *args), ..., fn(world-1, world, *args)]``, each run in its own process.

    Raises :class:`RankFailed` (with the rank's traceback) if a rank raised, ``TimeoutError`` if
    the ranks did not all finish within ``timeout`` seconds. ``threads``: torch threads per rank.
    """
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    ctx = _context()
    tmp = tempfile.mkdtemp(prefix="course-ranks-")
    results = ctx.Queue()
    procs = [ctx.Process(target=_child, daemon=True,
                         args=(r, world, os.path.join(tmp, "store"), timeout, threads, fn, args,
                               results)) for r in range(world)]
    deadline = time.monotonic() + timeout
    values: dict[int, Any] = {}
    failed = True
    try:
        for p in procs:
            p.start()
        while len(values) < world:
            try:
                rank, ok, payload = results.get(timeout=min(1.0, max(deadline
                                                                     - time.monotonic(), 0.01)))
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{world - len(values)} of {world} ranks did not finish "
                                       f"within {timeout:g} s") from None
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead and results.empty():
                    raise RankFailed(f"a rank process died (exit code {dead[0].exitcode}) "
                                     "without reporting") from None
                continue
            if not ok:
                raise RankFailed(_failures(rank, payload, world, results))
            values[rank] = pickle.loads(payload)
        failed = False
        return [values[r] for r in range(world)]
    finally:               # after a failure the others may wait in a collective: do not wait
        for p in procs:
            if p.is_alive():
                p.join(timeout=1.0 if failed else max(0.0, min(10.0, deadline - time.monotonic())))
            if p.is_alive():
                p.kill()
            p.join(timeout=5.0)
        results.close()
        results.join_thread()
        shutil.rmtree(tmp, ignore_errors=True)
