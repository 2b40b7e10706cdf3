"""The two seeded recipes the capstone chapter runs, on the toolkit's training loop.

Both recipes train single-threaded (``torch.set_num_threads(1)`` inside, restored after): for
models this small one thread is fastest, and results do not depend on the machine's core count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from course_lib.toolkit.training import History, fit, single_thread

from . import tasks
from .model import TinyTransformer

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
