r"""Computations of the positions chapter, built on :mod:`course_lib.attention.positions`.

* :func:`permutation_gap`: how far attention is from permutation-equivariant, with and without
  positions added.
* :func:`rope_score_grid`: the scores :math:`R_m q \cdot R_n k` over a grid of positions.
* :func:`rope_distance_profile`: the score of a vector with itself at distance :math:`\Delta`,
  averaged over the pairs, :math:`\frac{2}{E}\sum_i \cos(\Delta\,\theta_i)`.
* :func:`unseen_angle_pairs`: which frequency pairs meet rotation angles beyond a training length
  that they never met within it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.attention import IMPLEMENTATIONS, positions
from course_lib.attention.multihead import MultiHeadAttention
from course_lib.toolkit.display import markdown_table as markdown_table  # used by the chapter


def permutation_gap(layer: MultiHeadAttention, x: torch.Tensor, perm: torch.Tensor,
                    pos: torch.Tensor | None = None) -> float:
    """``max |layer(x[perm] + pos) - layer(x + pos)[perm]|`` for ``x (B, N, D)``.

    Zero (up to rounding) means: shuffling the tokens only shuffles the outputs.
    """
    pos = torch.zeros_like(x[0]) if pos is None else pos
    with torch.no_grad():
        shuffled = layer(x[:, perm] + pos)
        unshuffled = layer(x + pos)[:, perm]
    return (shuffled - unshuffled).abs().max().item()


def rope_score_grid(q: torch.Tensor, k: torch.Tensor, n_positions: int,
                    base: float = 10000.0) -> torch.Tensor:
    """``(P, P)`` scores ``RoPE(q at m) · RoPE(k at n)`` for ``m, n < P``; ``q, k`` are ``(E,)``."""
    qs = positions.apply_rope(q.expand(n_positions, -1), base=base)   # row m: q at position m
    ks = positions.apply_rope(k.expand(n_positions, -1), base=base)
    return qs @ ks.T


def rope_distance_profile(distances: torch.Tensor, E: int, base: float = 10000.0
                          ) -> torch.Tensor:
    r"""Mean over the pairs of :math:`\cos(\Delta\theta_i)`: ``RoPE(u)_m · RoPE(u)_{m-Δ} / E``
    for the all-ones ``u``. 1 at distance 0."""
    theta = positions.rope_frequencies(E, base)
    return torch.cos(distances.to(torch.float64)[:, None] * theta[None, :]).mean(-1)


def unseen_angle_pairs(E: int, train_len: int, new_len: int, base: float = 10000.0
                       ) -> dict[str, object]:
    """Pairs whose angle at some position ``< new_len`` was never taken in ``0 … train_len−1``.

    A pair that turned through a full circle (``2π``) during training has met every angle; the
    slower ones have met only ``[0, (train_len−1)θ_i]``. Returns counts and the indices.
    """
    theta = positions.rope_frequencies(E, base)
    seen = (train_len - 1) * theta
    full_turn = seen >= 2 * math.pi
    beyond = ((new_len - 1) * theta > seen) & ~full_turn
    return {"pairs": E // 2, "full_turn": int(full_turn.sum()),
            "unseen": int(beyond.sum()), "unseen_idx": beyond.nonzero().flatten().tolist(),
            "wavelengths": 2 * math.pi / theta}


def attention_with_alibi(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         bias: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same ALiBi attention through each of ``course_lib``'s implementations and torch."""
    outs = {name: fn(q, k, v, attn_mask=bias) for name, fn in IMPLEMENTATIONS.items()}
    outs["torch F.sdpa"] = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    return outs


def scaling_methods(E: int, train_len: int, factor: float, new_len: int,
                    base: float = 10000.0) -> dict[str, torch.Tensor]:
    r"""``{method: (E/2,) float64 frequencies}`` for RoPE run at ``new_len`` after training at
    ``train_len``: unscaled, position interpolation (``linear``), NTK-aware (base raised to
    :math:`b\,s^{E/(E-2)}`), dynamic NTK at ``new_len``, YaRN and Llama 3 (its default
    ``low_freq_factor`` 1, ``high_freq_factor`` 4), with ``M = train_len``, ``s = factor``."""
    M = {"original_max_position_embeddings": train_len, "factor": factor}
    cfgs = {"linear (position interpolation)": {"rope_type": "linear", "factor": factor},
            "dynamic NTK": {"rope_type": "dynamic", **M},
            "YaRN": {"rope_type": "yarn", **M},
            "Llama 3": {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        **M}}
    out = {"none": positions.rope_frequencies(E, base),
           "NTK-aware base": positions.rope_frequencies(E, base * factor ** (E / (E - 2)))}
    for name, cfg in cfgs.items():
        out[name] = positions.scaled_rope_frequencies(E, base, cfg, seq_len=new_len)[0]
    return out


def unseen_after_scaling(theta: torch.Tensor, scaled: torch.Tensor, train_len: int,
                         new_len: int) -> torch.Tensor:
    """Bool per pair: at position ``new_len − 1`` with frequencies ``scaled`` the pair's angle
    leaves the range ``[0, min(2π, train_len·θ))`` that the trained positions
    ``0 … train_len − 1`` cover, one step each, with ``theta``."""
    covered = (train_len * theta).clamp(max=2 * math.pi)
    reached = ((new_len - 1) * scaled).clamp(max=2 * math.pi)
    return reached > covered * (1 + 1e-12)


def scaling_rows(E: int, train_len: int, factor: float, new_len: int,
                 base: float = 10000.0) -> list[dict[str, object]]:
    """Per method: pairs kept (frequency within 0.1% of θ), divided by the factor, in
    between, and pairs that still meet angles unseen in training at ``new_len``."""
    methods = scaling_methods(E, train_len, factor, new_len, base)
    theta = methods["none"]
    rows = []
    for name, scaled in methods.items():
        ratio = scaled / theta
        kept = (ratio - 1).abs() < 1e-3
        divided = (ratio * factor - 1).abs() < 1e-3
        rows.append({"method": name, "pairs kept": int(kept.sum()),
                     "pairs divided by s": int(divided.sum()),
                     "pairs in between": int((~kept & ~divided).sum()),
                     "pairs with unseen angles": int(unseen_after_scaling(
                         theta, scaled, train_len, new_len).sum())})
    return rows
