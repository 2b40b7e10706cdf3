"""A plain PyTorch training loop and the two seeded recipes the capstone chapter runs.

Both recipes train single-threaded (``torch.set_num_threads(1)`` inside, restored after): for
models this small one thread is fastest, and results do not depend on the machine's core count.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from . import tasks
from .model import TinyTransformer


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


# ------------------------------------------------------------------------------ the recipes


@dataclass(frozen=True)
class NegationConfig:
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 1
    steps: int = 1000        # at most; stops once solved
    solved_after: int = 25   # ... i.e. after 25 perfect batches in a row
    batch_size: int = 64
    lr: float = 3e-3
    positional: str = "learned"   # or "sinusoidal" (the model's options)


def train_negation(seed: int = 0, cfg: NegationConfig = NegationConfig()
                   ) -> tuple[TinyTransformer, History]:
    """Train the like/dislike classifier on fresh templated sentences each step."""
    with single_thread():
        torch.manual_seed(seed)
        g = torch.Generator().manual_seed(seed)
        model = TinyTransformer(len(tasks.NEGATION_VOCAB), cfg.d_model, cfg.n_heads,
                                cfg.n_layers, max_len=tasks.NEGATION_MAX_LEN, head="cls",
                                positional=cfg.positional)

        def step(_: int):
            batch = tasks.negation_batch(cfg.batch_size, g)
            logits = model(batch.tokens)
            acc = (logits.argmax(-1) == batch.labels).float().mean().item()
            return F.cross_entropy(logits, batch.labels), acc

        hist = fit(model, step, cfg.steps, cfg.lr, cosine=False, solved_after=cfg.solved_after)
    return model, hist


@dataclass(frozen=True)
class InductionConfig:
    vocab_size: int = 24
    seq_len: int = 16
    min_period: int = 2
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    steps: int = 500
    batch_size: int = 64
    lr: float = 1e-2
    positional: str = "learned"   # or "sinusoidal" (the model's options)


def induction_model(cfg: InductionConfig = InductionConfig()) -> TinyTransformer:
    """The two-layer attention-only model (no MLP) of the induction experiment."""
    return TinyTransformer(cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.n_layers,
                           max_len=cfg.seq_len, head="lm", mlp=False, positional=cfg.positional)


def train_induction(seed: int = 0, cfg: InductionConfig = InductionConfig()
                    ) -> tuple[TinyTransformer, History]:
    """Next-token training on :func:`tasks.induction_batch`; loss only on predictable positions."""
    with single_thread():
        torch.manual_seed(seed)
        g = torch.Generator().manual_seed(seed)
        model = induction_model(cfg)

        def step(_: int):
            batch = tasks.induction_batch(cfg.batch_size, cfg.seq_len, cfg.vocab_size, g,
                                         min_period=cfg.min_period)
            logits = model(batch.tokens)
            keep = batch.targets != -100
            acc = (logits.argmax(-1)[keep] == batch.targets[keep]).float().mean().item()
            loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(),
                                   ignore_index=-100)
            return loss, acc

        hist = fit(model, step, cfg.steps, cfg.lr)
    return model, hist
