r"""The gated delta rule (Yang, Kautz & Hatamizadeh 2025: Gated DeltaNet; Qwen3-Next, Kimi
Linear): linear attention whose state is a fixed ``(E, Ev)`` matrix per head, updated by the
delta rule (Schlag et al. 2021) after a decay.

.. math:: S_t = \alpha_t \,(I - \beta_t k_t k_t^\top)\, S_{t-1} + \beta_t\, k_t v_t^\top,
          \qquad o_t = S_t^\top q_t \cdot s

with the decay :math:`\alpha_t = e^{g_t} \in (0, 1]` (``g ≤ 0``: log space), the write
strength :math:`\beta_t \in [0, 1]` and ``s`` the query scale (``1/√E`` by default, as SDPA).
Read as three steps: **decay** the state (:math:`S \leftarrow \alpha S`), **erase** what it
stores under :math:`k_t` (:math:`S \leftarrow S - \beta k k^\top S`), **write** the new value
(:math:`S \leftarrow S + \beta k v^\top`); erase and write together are one step of gradient
descent on :math:`\tfrac12\|S^\top k_t - v_t\|^2`: :math:`S \leftarrow S + \beta_t k_t
(v_t - S^\top k_t)^\top`.

Two exact forms (equal in float64 to round-off):

* :func:`gated_delta_rule_recurrent`: one token at a time (:func:`gated_delta_step`), the state
  constant in size, what decoding does;
* :func:`gated_delta_rule_chunked`: chunks of ``C`` tokens, each a few matrix products and one
  triangular solve (the UT transform of DeltaNet's parallel form, Yang et al. 2024), the state
  carried from chunk to chunk: what training does.

Shapes (heads first, like the rest of the course): query/key ``(B, H, L, E)``, value
``(B, H, L, Ev)``, g/beta ``(B, H, L)``, state ``(B, H, E, Ev)``. Keys are usually
L2-normalised first (Qwen3-Next does), which keeps :math:`I - \beta k k^\top` a contraction.
"""

from __future__ import annotations

import math

import torch


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def _check(query, key, value, g, beta, initial_state) -> None:
    for name, t in (("query", query), ("key", key), ("value", value), ("g", g), ("beta", beta)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)}")
    if query.dim() != 4 or key.shape != query.shape:
        raise ValueError(f"query and key must have the same shape (B, H, L, E), got query "
                         f"{_shape(query)} and key {_shape(key)}")
    B, H, L, E = query.shape
    if value.dim() != 4 or value.shape[:3] != (B, H, L):
        raise ValueError(f"value must have shape (B, H, L, Ev) = ({B}, {H}, {L}, Ev) for query "
                         f"{_shape(query)}, got {_shape(value)}")
    for name, t in (("g", g), ("beta", beta)):
        if t.shape != (B, H, L):
            raise ValueError(f"{name} must have shape (B, H, L) = ({B}, {H}, {L}) for query "
                             f"{_shape(query)}, got {_shape(t)}")
    if initial_state is not None and initial_state.shape != (B, H, E, value.shape[-1]):
        raise ValueError(f"initial_state must have shape (B, H, E, Ev) = ({B}, {H}, {E}, "
                         f"{value.shape[-1]}), got {_shape(initial_state)}")


def _scale(E: int, scale: float | None) -> float:
    return 1.0 / math.sqrt(E) if scale is None else scale


def gated_delta_step(state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     g: torch.Tensor, beta: torch.Tensor, scale: float = 1.0
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """One token: ``state (B, H, E, Ev)``, ``q, k (B, H, E)``, ``v (B, H, Ev)``, ``g, beta
    (B, H)`` → ``(o (B, H, Ev), new state)``; decay, erase, write, then read with ``q·scale``."""
    state = state * g.exp()[..., None, None]                             # decay
    stored = (state * k[..., None]).sum(-2)                              # Sᵀk (B, H, Ev)
    state = state + k[..., None] * (beta[..., None] * (v - stored))[..., None, :]  # erase+write
    return (state * (q * scale)[..., None]).sum(-2), state


def gated_delta_rule_recurrent(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                               g: torch.Tensor, beta: torch.Tensor, *,
                               scale: float | None = None,
                               initial_state: torch.Tensor | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token by token: ``(o (B, H, L, Ev), final state (B, H, E, Ev))``; the state starts at
    ``initial_state`` (zeros by default) and never grows."""
    _check(query, key, value, g, beta, initial_state)
    B, H, L, E = query.shape
    state = (query.new_zeros(B, H, E, value.shape[-1]) if initial_state is None
             else initial_state.to(query.dtype))
    s, out = _scale(E, scale), []
    for t in range(L):
        o, state = gated_delta_step(state, query[:, :, t], key[:, :, t], value[:, :, t],
                                    g[:, :, t], beta[:, :, t], s)
        out.append(o)
    o = torch.stack(out, dim=2) if out else value.new_zeros(B, H, 0, value.shape[-1])
    return o, state


def gated_delta_rule_chunked(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             g: torch.Tensor, beta: torch.Tensor, *, chunk_size: int = 64,
                             scale: float | None = None,
                             initial_state: torch.Tensor | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The same result, ``chunk_size`` tokens at a time.

    Inside a chunk with start state :math:`S_0` and cumulative log decay
    :math:`\gamma_r = \sum_{i \le r} g_i`, every update is :math:`S_r = e^{\gamma_r} S_0 +
    \sum_{i \le r} e^{\gamma_r - \gamma_i} k_i \delta_i^\top`, and the corrections
    :math:`\delta` solve one unit lower-triangular system
    :math:`(I + A)\,\Delta = \beta \odot (V - e^{\gamma} \odot K S_0)` with
    :math:`A_{ri} = \beta_r e^{\gamma_r - \gamma_i} k_r^\top k_i` for :math:`i < r`. Then
    :math:`O = s\,(e^{\gamma} \odot Q S_0 + (QK^\top \odot D)\,\Delta)` (``D`` the decays,
    lower triangle with the diagonal) and :math:`S_C = e^{\gamma_C} S_0 +
    (e^{\gamma_C - \gamma} \odot K)^\top \Delta`. The sequence is padded with ``β = 0, g = 0``
    tokens, which change nothing.
    """
    _check(query, key, value, g, beta, initial_state)
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
    B, H, L, E = query.shape
    Ev, C = value.shape[-1], chunk_size
    state = (query.new_zeros(B, H, E, Ev) if initial_state is None
             else initial_state.to(query.dtype))
    pad = (-L) % C
    q, k, v = (torch.nn.functional.pad(x, (0, 0, 0, pad)) for x in (query, key, value))
    g, beta = (torch.nn.functional.pad(x, (0, pad)) for x in (g, beta))
    n = (L + pad) // C
    q, k, v = (x.reshape(B, H, n, C, x.shape[-1]) for x in (q, k, v))
    g, beta = g.reshape(B, H, n, C), beta.reshape(B, H, n, C)
    gamma = g.cumsum(-1)                                                 # (B, H, n, C)
    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    diff = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float("-inf"))
    decay = diff.exp()                                                   # e^{γr−γi}, i ≤ r
    kk = k @ k.transpose(-1, -2)
    A = (beta[..., None] * kk * decay).tril(-1)                          # strictly lower
    system = A + torch.eye(C, dtype=q.dtype, device=q.device)
    qk = (q @ k.transpose(-1, -2)) * decay                               # lower with diagonal
    s, out = _scale(E, scale), []
    for c in range(n):
        eg = gamma[:, :, c].exp()[..., None]                             # (B, H, C, 1)
        rhs = beta[:, :, c, :, None] * (v[:, :, c] - eg * (k[:, :, c] @ state))
        delta = torch.linalg.solve_triangular(system[:, :, c], rhs, upper=False,
                                              unitriangular=True)        # (B, H, C, Ev)
        out.append(s * (eg * (q[:, :, c] @ state) + qk[:, :, c] @ delta))
        last = gamma[:, :, c, -1:]                                       # (B, H, 1)
        tail = (last - gamma[:, :, c]).exp()[..., None]                  # e^{γC−γi}
        state = last.exp()[..., None] * state + (tail * k[:, :, c]).transpose(-1, -2) @ delta
    o = torch.cat(out, dim=2)[:, :, :L] if out else value.new_zeros(B, H, 0, Ev)
    return o, state


def delta_state_bytes(layers: int, heads: int, key_dim: int, value_dim: int,
                      bytes_per_element: int = 2, batch: int = 1) -> int:
    """Bytes of the gated delta rule's states: ``layers · heads · E · Ev`` numbers, whatever the
    number of tokens (a KV cache grows by ``2 · layers · Hkv · E`` numbers per token)."""
    return layers * heads * key_dim * value_dim * bytes_per_element * batch


__all__ = ["delta_state_bytes", "gated_delta_rule_chunked", "gated_delta_rule_recurrent",
           "gated_delta_step"]
