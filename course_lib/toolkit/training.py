"""A plain PyTorch training loop for the chapters that train a small model in a cell.

``fit`` is AdamW with warm-up and cosine decay; ``single_thread`` runs a block on one intra-op
thread (for models this small one thread is fastest, and results do not depend on the core count).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run the block with one intra-op thread, then restore the previous setting."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@dataclass
class History:
    """Per-step training loss and accuracy (on the training batch), and wall-clock seconds."""

    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    seconds: float = 0.0


def fit(model: torch.nn.Module, step_fn: Callable[[int], tuple[torch.Tensor, float]],
        steps: int, lr: float, weight_decay: float = 0.0, cosine: bool = True,
        solved_after: int | None = None) -> History:
    """AdamW with linear warm-up (5 % of ``steps``), then cosine decay (or a constant rate).

    ``step_fn(step) -> (loss, accuracy)`` on a fresh batch. With ``solved_after = k`` training
    stops early once the last ``k`` batches were all classified perfectly (``steps`` is then a
    maximum): a run that is stuck keeps training instead of stopping on a fixed count.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    warm = max(1, steps // 20)

    def schedule(s: int) -> float:
        if s < warm:
            return (s + 1) / warm
        if not cosine:
            return 1.0
        return 0.5 * (1 + torch.cos(torch.tensor((s - warm) / (steps - warm) * torch.pi)).item())

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    hist, t0 = History(), time.perf_counter()
    model.train()
    for s in range(steps):
        loss, acc = step_fn(s)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        hist.loss.append(loss.item())
        hist.accuracy.append(acc)
        if solved_after and len(hist.accuracy) >= solved_after \
                and min(hist.accuracy[-solved_after:]) == 1.0:
            break
    model.eval()
    hist.seconds = time.perf_counter() - t0
    return hist
