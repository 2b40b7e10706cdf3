r"""Chapter 1 helpers: attention as a soft lookup in a library, and Q, K, V from one sequence.

A *hard* lookup returns the value whose key equals the query; a *soft* lookup returns a blend of
all values, weighted by how well each key matches:

.. math:: w = \mathrm{softmax}(K q / T), \qquad r = w^\top V

Shapes: query ``(d,)``, keys ``(n, d)``, values ``(n, m)`` → weights ``(n,)``, retrieved ``(m,)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

TOPICS: tuple[str, ...] = ("cooking", "astronomy", "history")
CONTENTS: tuple[str, ...] = ("recipes", "star charts", "maps", "timelines")


@dataclass(frozen=True)
class Library:
    """A tiny library: ``titles`` (n,), ``keys`` (n, d) topic vectors, ``values`` (n, m) contents.

    Each key says how much a book is *about* each topic in :data:`TOPICS`; each value row says
    what a reader *gets* from the book, as fractions of :data:`CONTENTS` that sum to 1.
    """

    titles: tuple[str, ...]
    keys: torch.Tensor
    values: torch.Tensor
    topics: tuple[str, ...] = TOPICS
    contents: tuple[str, ...] = CONTENTS

    def best(self, weights: torch.Tensor) -> str:
        """Title of the book with the largest of the ``(n,)`` weights."""
        return self.titles[int(weights.argmax())]

    def topic(self, name: str) -> torch.Tensor:
        """The ``(d,)`` unit query vector that asks for one topic, e.g. ``topic("astronomy")``."""
        q = torch.zeros(len(self.topics), dtype=self.keys.dtype)
        q[self.topics.index(name)] = 1.0
        return q


def make_library(sharpness: float = 4.0) -> Library:
    """The chapter's five books. Keys are unit topic vectors times ``sharpness`` (a match score of
    ``sharpness`` for a perfect match, 0 for an unrelated book)."""
    h = 1.0 / math.sqrt(2.0)
    titles = ("Kitchen Basics", "Night Sky Atlas", "Rise of Rome",
              "Food Through the Ages", "Navigating by the Stars")
    keys = torch.tensor([
        [1.0, 0.0, 0.0],   # cooking
        [0.0, 1.0, 0.0],   # astronomy
        [0.0, 0.0, 1.0],   # history
        [h, 0.0, h],       # cooking + history
        [0.0, h, h],       # astronomy + history
    ], dtype=torch.float64) * sharpness
    values = torch.tensor([
        # recipes, star charts, maps, timelines
        [0.90, 0.00, 0.00, 0.10],
        [0.00, 0.90, 0.10, 0.00],
        [0.00, 0.00, 0.40, 0.60],
        [0.50, 0.00, 0.10, 0.40],
        [0.00, 0.40, 0.50, 0.10],
    ], dtype=torch.float64)
    return Library(titles, keys, values)


def hard_lookup(catalogue: dict[str, str], query: str) -> str:
    """A Python dictionary lookup: the exact key or a ``KeyError``, never a blend."""
    return catalogue[query]


def soft_lookup(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``w = softmax(keys @ query / T)`` (n,) and ``r = w @ values`` (m,); returns (w, r)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    scores = keys @ query                               # (n,) one match score per book
    weights = torch.softmax(scores / temperature, dim=-1)
    return weights, weights @ values


def interpolate(a: torch.Tensor, b: torch.Tensor, t: float) -> torch.Tensor:
    """The query ``(1 - t) a + t b``: t = 0 asks for ``a``, t = 1 for ``b``."""
    return (1.0 - t) * a + t * b


# ---------------------------------------------------------------------------------------------
# Q, K, V from one sequence
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AttentionSteps:
    """Every intermediate of single-head attention for one sequence.

    ``q`` (L, E), ``k`` (S, E), ``v`` (S, Ev), ``scores`` = q kᵀ (L, S),
    ``scaled`` = scores / √E, ``weights`` = softmax(scaled) (L, S), ``output`` = weights v (L, Ev).
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    scores: torch.Tensor
    scaled: torch.Tensor
    weights: torch.Tensor
    output: torch.Tensor


def embed(tokens: Sequence[str], D: int = 4, seed: int = 0) -> torch.Tensor:
    """``(len(tokens), D)`` embeddings (model width ``D``): one seeded random vector per
    *distinct* word, so a repeated word gets the same row (there is no position information)."""
    vocab = sorted(set(tokens))
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(len(vocab), D, generator=g, dtype=torch.float64)
    return table[[vocab.index(t) for t in tokens]]


def projections(
    D: int = 4, E: int = 3, Ev: int = 3, seed: int = 2, tied: bool = False
) -> dict[str, torch.Tensor]:
    """Seeded weight matrices ``w_q`` (D, E), ``w_k`` (D, E), ``w_v`` (D, Ev) with N(0, 1)
    entries. With ``tied=True`` the key projection is the query projection (W_K = W_Q)."""
    g = torch.Generator().manual_seed(seed)
    w_q, w_k, w_v = (torch.randn(D, cols, generator=g, dtype=torch.float64)
                     for cols in (E, E, Ev))
    return {"w_q": w_q, "w_k": w_q.clone() if tied else w_k, "w_v": w_v}


def attention_steps(
    x_q: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w_v: torch.Tensor,
    x_kv: torch.Tensor | None = None,
) -> AttentionSteps:
    """Attention with every step kept. Self-attention when ``x_kv`` is None (queries, keys and
    values all come from ``x_q`` (L, D)); cross-attention when ``x_kv`` (S, D) is another sequence.
    """
    x_kv = x_q if x_kv is None else x_kv
    q, k, v = x_q @ w_q, x_kv @ w_k, x_kv @ w_v          # (L, E), (S, E), (S, Ev)
    scores = q @ k.T                                     # (L, S)
    scaled = scores / math.sqrt(q.shape[-1])
    weights = torch.softmax(scaled, dim=-1)
    return AttentionSteps(q, k, v, scores, scaled, weights, weights @ v)


def diagonal_argmax_rate(scores: torch.Tensor) -> float:
    """Fraction of rows of ``(..., L, L)`` scores whose largest entry is on the diagonal."""
    idx = torch.arange(scores.shape[-1], device=scores.device)
    return (scores.argmax(dim=-1) == idx).double().mean().item()


def tied_vs_untied_diagonal_rate(
    trials: int = 200, L: int = 8, D: int = 16, E: int = 16, seed: int = 0
) -> tuple[float, float]:
    """Over ``trials`` random sequences and projections: how often a token's highest score is
    itself, with W_K = W_Q (tied) and with independent W_K. Returns (tied, untied)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(trials, L, D, generator=g, dtype=torch.float64)
    w_q = torch.randn(trials, D, E, generator=g, dtype=torch.float64)
    w_k = torch.randn(trials, D, E, generator=g, dtype=torch.float64)
    q, k = x @ w_q, x @ w_k
    tied = diagonal_argmax_rate(q @ q.transpose(-2, -1))
    untied = diagonal_argmax_rate(q @ k.transpose(-2, -1))
    return tied, untied


def conv_reach(layers: int, kernel: int, length: int = 4096) -> int:
    """How far apart two tokens can be and still interact after ``layers`` stacked 1-D
    convolutions of odd width ``kernel`` (stride 1, 'same' padding). Measured, not assumed: a
    one-hot signal at the centre of a ``length``-token sequence is pushed through the layers with
    an all-ones kernel and the farthest token it reached is returned."""
    if kernel % 2 == 0 or kernel < 3:
        raise ValueError("kernel must be odd and at least 3")
    x = torch.zeros(1, 1, length, dtype=torch.float64)
    centre = length // 2
    x[0, 0, centre] = 1.0
    w = torch.ones(1, 1, kernel, dtype=torch.float64)
    for _ in range(layers):
        x = torch.nn.functional.conv1d(x, w, padding=kernel // 2)
    reached = torch.nonzero(x[0, 0]).flatten()
    return int((reached - centre).abs().max())


def conv_layers_to_connect(distance: int, kernel: int) -> int:
    """The fewest stacked convolutions of width ``kernel`` after which tokens ``distance`` apart
    interact: each layer reaches ``(kernel - 1) // 2`` tokens further, so
    ``ceil(distance / ((kernel - 1) // 2))``, confirmed with :func:`conv_reach` (that many layers
    reach, one fewer does not). One self-attention layer always suffices."""
    step = (kernel - 1) // 2
    layers = -(-distance // step)
    length = 2 * distance + 2 * kernel + 1
    assert conv_reach(layers, kernel, length) >= distance
    assert layers == 0 or conv_reach(layers - 1, kernel, length) < distance
    return layers
