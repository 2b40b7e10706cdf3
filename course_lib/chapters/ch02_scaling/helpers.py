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


def additive_scores(q: torch.Tensor, k: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor,
                    v: torch.Tensor) -> torch.Tensor:
    """Additive (Bahdanau) scores ``s_ij = vᵀ tanh(q_i W_q + k_j W_k)``.

    ``q (L, E)``, ``k (S, E)``, ``w_q, w_k (E, A)``, ``v (A,)`` → ``(L, S)``. Each score is a sum
    of ``A`` bounded terms, ``|s_ij| ≤ ‖v‖₁`` whatever ``E``: no ``1/√E`` is needed.
    """
    return torch.tanh((q @ w_q)[:, None, :] + (k @ w_k)[None, :, :]) @ v


INITS = ("nn.Linear default", "Xavier/Glorot uniform", "nn.MultiheadAttention")


def init_variances(init: str, d_model: int = 512, num_heads: int = 8, n_tokens: int = 2048,
                   seed: int = 0) -> dict[str, float]:
    """Measured ``Var(q_i)`` and ``Var(q·k/√E)`` at initialisation for unit-variance tokens.

    ``q = x W_Q``, ``k = x W_K`` with ``x (n_tokens, D)`` standard normal, ``W`` initialised as
    ``init`` (one of :data:`INITS`); scores per head of width ``E = D / H`` between two disjoint
    halves of the tokens. Theory: ``Var(q_i) = D·Var(W)`` and ``Var(score) = Var(q_i)·Var(k_i)``.
    """
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    D, H = d_model, num_heads
    E = D // H
    with torch.random.fork_rng(devices=[]):      # the caller's global RNG is left alone
        torch.manual_seed(seed)
        if init == "nn.MultiheadAttention":
            w_q, w_k, _ = torch.nn.MultiheadAttention(D, H).in_proj_weight.detach().chunk(3)
        else:
            w_q, w_k = (torch.nn.Linear(D, D).weight.detach() for _ in range(2))
            if init == "Xavier/Glorot uniform":
                w_q, w_k = (torch.nn.init.xavier_uniform_(w.clone()) for w in (w_q, w_k))
    x = torch.randn(n_tokens, D, generator=torch.Generator().manual_seed(seed + 1))
    q = (x @ w_q.T).view(n_tokens, H, E).transpose(0, 1)          # (H, n, E)
    k = (x @ w_k.T).view(n_tokens, H, E).transpose(0, 1)
    half = n_tokens // 2
    s = q[:, :half] @ k[:, half:].transpose(-2, -1) / math.sqrt(E)
    return {"Var(W)": float(w_q.var()), "Var(q_i)": float(q.var()), "Var(score)": float(s.var())}
