"""The measurements the capstone chapter asserts, as functions (used by the tests on other seeds).

The chapter computes the same numbers inline, on the same held-out data (generator seed 123), and
asserts the same :data:`THRESHOLDS`.
"""

from __future__ import annotations

import torch

from . import probes, tasks

#: What a successful run must reach (the chapter asserts these values).
THRESHOLDS = {
    "negation_accuracy": 0.97,        # >= on 1000 fresh sentences
    "deciding_mass": 0.35,            # >= mean <cls> weight on the deciding words (heads averaged)
    "deciding_mass_vs_uniform": 1.5,  # >= this many times the evenly-spread weight
    "repeat_accuracy": 0.9,           # >= next-token accuracy inside the repeat
    "first_copy_accuracy": 0.2,       # <= in the first copy (nothing to copy from)
    "best_previous_token": 0.4,       # >= best layer-1 previous-token score
    "best_induction": 0.7,            # >= best layer-2 induction score
    "layer1_induction": 0.2,          # <  every layer-1 induction score
}


@torch.no_grad()
def negation_metrics(model: torch.nn.Module, n: int = 1000, seed: int = 123) -> dict[str, float]:
    """Accuracy, mean ``<cls>`` attention mass on the deciding words, and its uniform baseline."""
    test = tasks.negation_batch(n, torch.Generator().manual_seed(seed))
    logits, (maps,) = model(test.tokens, return_attention=True)
    mass = probes.attention_mass(maps[:, :, 0, :].mean(1), test.deciding)
    uniform = test.deciding.sum(1) / (test.tokens != 0).sum(1)
    return {"accuracy": (logits.argmax(-1) == test.labels).float().mean().item(),
            "deciding_mass": mass.mean().item(), "uniform_mass": uniform.float().mean().item()}


@torch.no_grad()
def induction_metrics(model: torch.nn.Module, seq_len: int = 16, vocab_size: int = 24,
                      n: int = 200, seed: int = 123) -> dict[str, object]:
    """Accuracies in/before the repeat and the ``(layers, heads)`` score tables on pure repeats."""
    period = seq_len // 2
    g = torch.Generator().manual_seed(seed)
    seqs = torch.stack([tasks.repeated_tokens(period, vocab_size, g) for _ in range(n)])
    logits, maps = model(seqs, return_attention=True)
    correct = (logits[:, :-1].argmax(-1) == seqs[:, 1:]).float()
    return {"repeat_accuracy": correct[:, period:].mean().item(),
            "first_copy_accuracy": correct[:, : period - 1].mean().item(),
            "previous_token": probes.head_table(maps, probes.previous_token_score),
            "induction": probes.head_table(maps, lambda a: probes.induction_score(a, period))}
