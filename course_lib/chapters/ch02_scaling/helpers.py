r"""Chapter 2 helpers: why attention divides scores by :math:`\sqrt{d_k}`.

For ``q, k`` with independent zero-mean, unit-variance entries,
:math:`\mathrm{Var}(q\cdot k) = d_k`; dividing by :math:`\sqrt{d_k}` brings it back to 1.
Large scores saturate the softmax: its Jacobian :math:`J = \mathrm{diag}(p) - pp^\top` goes to 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def random_qk(
    d_k: int, n_queries: int, n_keys: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded ``q`` (n_queries, d_k) and ``k`` (n_keys, d_k) with i.i.d. N(0, 1) entries."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_queries, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(n_keys, d_k, generator=g, dtype=torch.float64)
    return q, k


def scores(q: torch.Tensor, k: torch.Tensor, scaled: bool = True) -> torch.Tensor:
    """``(..., L, S)`` dot-product scores q kᵀ, divided by √d_k when ``scaled``."""
    s = q @ k.transpose(-2, -1)
    return s / math.sqrt(q.shape[-1]) if scaled else s


def dot_product_variance(d_k: int, n_pairs: int = 5_000, scaled: bool = False,
                         seed: int = 0) -> float:
    """Empirical variance of ``q·k`` (or ``q·k/√d_k``) over ``n_pairs`` independent pairs."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_pairs, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(n_pairs, d_k, generator=g, dtype=torch.float64)
    s = (q * k).sum(-1)
    s = s / math.sqrt(d_k) if scaled else s
    return s.var().item()


def entropy(p: torch.Tensor) -> torch.Tensor:
    """Shannon entropy ``-Σ p log p`` over the last dim, in nats (0 · log 0 = 0)."""
    return -(p * torch.log(p.clamp_min(1e-300))).sum(-1)


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """``(..., n, n)`` Jacobian of softmax at probabilities ``p`` (..., n): diag(p) − p pᵀ."""
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def saturation_stats(
    dims: Sequence[int], n_keys: int = 16, n_queries: int = 2_000, seed: int = 0
) -> dict[str, dict[str, torch.Tensor]]:
    """For each ``d_k`` in ``dims``, random queries against ``n_keys`` random keys, with and
    without scaling: mean largest weight, mean entropy (nats) and mean Frobenius norm of the
    softmax Jacobian. Returns ``{mode: {stat: (len(dims),) tensor}}`` with mode in
    ``"scaled", "unscaled"`` and stat in ``"max_weight", "entropy", "jacobian"``.
    """
    out: dict[str, dict[str, list[float]]] = {
        mode: {"max_weight": [], "entropy": [], "jacobian": []} for mode in ("scaled", "unscaled")
    }
    for i, d in enumerate(dims):
        q, k = random_qk(d, n_queries, n_keys, seed=seed + i)
        for mode in ("scaled", "unscaled"):
            p = torch.softmax(scores(q, k, scaled=mode == "scaled"), dim=-1)   # (n_queries, n)
            out[mode]["max_weight"].append(p.max(-1).values.mean().item())
            out[mode]["entropy"].append(entropy(p).mean().item())
            jac = torch.linalg.matrix_norm(softmax_jacobian(p))                # Frobenius
            out[mode]["jacobian"].append(jac.mean().item())
    return {mode: {name: torch.tensor(v, dtype=torch.float64) for name, v in stats.items()}
            for mode, stats in out.items()}
