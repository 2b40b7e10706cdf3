r"""Where tokens are: absolute sinusoids, rotary embeddings (RoPE) and ALiBi biases.

Shapes follow the course: queries ``(..., L, E)``, keys ``(..., S, E)``, ``H`` heads.

* :func:`sinusoidal_positions` ``(N, D)``: the fixed table added to token embeddings
  (Vaswani et al.), :math:`P_{t,2i} = \sin(t\,\omega_i)`, :math:`P_{t,2i+1} = \cos(t\,\omega_i)`,
  :math:`\omega_i = \mathrm{base}^{-2i/D}`.
* :func:`rope_cache` / :func:`apply_rope`: rotary position embedding (Su et al.). Feature pair
  ``i`` of the vector at position ``m`` is rotated by the angle :math:`m\,\theta_i`,
  :math:`\theta_i = \mathrm{base}^{-2i/E}`, so that :math:`R_m q \cdot R_n k` depends on
  :math:`m - n` only.

  **Pairing convention: split halves** (GPT-NeoX, Hugging Face's ``rotate_half``): feature
  ``i`` is paired with feature ``i + E/2``, for ``i < E/2``. The RoFormer paper (and Meta's
  original Llama code) pairs adjacent features ``(2i, 2i+1)`` instead. Both are rotations with
  the same angles; they differ by a fixed permutation of the features, so weights trained with
  one convention need that permutation to run with the other.
* :func:`alibi_slopes` / :func:`alibi_bias`: ALiBi (Press et al.), a per-head linear penalty
  :math:`m_h (j - i)` added to the scores, passed as a float ``attn_mask``.
"""

from __future__ import annotations

import math

import torch


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


# --------------------------------------------------------------------------- sinusoids


def sinusoidal_positions(n: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """``(n, d)`` float32: ``P[t, 2i] = sin(t / base^{2i/d})``, ``P[t, 2i+1] = cos(same)``."""
    if d % 2:
        raise ValueError(f"sinusoidal positions need an even width, got d={d}")
    t = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(base) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    p = torch.zeros(n, d)
    p[:, 0::2] = torch.sin(t * freq)
    p[:, 1::2] = torch.cos(t * freq)
    return p


# --------------------------------------------------------------------------- RoPE


def rope_frequencies(E: int, base: float = 10000.0) -> torch.Tensor:
    r"""``(E/2,)`` float64 angular frequencies :math:`\theta_i = \mathrm{base}^{-2i/E}`."""
    if not isinstance(E, int) or E <= 0 or E % 2:
        raise ValueError(f"RoPE needs an even, positive head width E (features are rotated in "
                         f"pairs), got E={E!r}")
    if not base > 1:
        raise ValueError(f"the RoPE base must be > 1, got base={base!r}")
    return base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)


def rope_angles(L: int, E: int, *, base: float = 10000.0, offset: int = 0) -> torch.Tensor:
    r"""``(L, E/2)`` float64 angles :math:`m\,\theta_i`, positions ``m = offset … offset+L−1``."""
    if L < 0 or offset < 0:
        raise ValueError(f"L and offset must be >= 0, got L={L}, offset={offset}")
    pos = torch.arange(offset, offset + L, dtype=torch.float64)
    return pos[:, None] * rope_frequencies(E, base)[None, :]


def rope_cache(L: int, E: int, base: float = 10000.0, offset: int = 0, *,
               dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(cos, sin)``, each ``(L, E)``, for positions ``offset … offset+L−1``.

    Split-halves layout: column ``c`` holds the angle of pair ``c mod E/2``, i.e.
    ``cos = [cos(mθ), cos(mθ)]``. Angles are computed in float64, then cast to ``dtype``.
    ``rope_cache(L, E, offset=o)`` equals ``rope_cache(o + L, E)`` sliced to rows ``o:``.
    """
    a = rope_angles(L, E, base=base, offset=offset)
    a = torch.cat([a, a], dim=-1)
    return a.cos().to(dtype=dtype, device=device), a.sin().to(dtype=dtype, device=device)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last dim (halves): a 90° turn of every pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor | None = None,
               sin: torch.Tensor | None = None, *, offset: int = 0,
               base: float = 10000.0) -> torch.Tensor:
    r"""Rotate ``x (..., L, E)`` (even ``E``) by its positions ``offset … offset+L−1``.

    .. math:: \mathrm{RoPE}(x)_m = x_m \odot \cos(m\theta) + \mathrm{rotate\_half}(x_m) \odot
              \sin(m\theta)

    ``cos``/``sin``: an optional precomputed cache ``(P, E)`` from :func:`rope_cache` with
    ``P >= offset + L``; rows ``offset:offset+L`` are used (a decoder builds the cache once for
    its maximum length and passes ``offset`` = the number of tokens already cached). Without a
    cache, it is computed for ``base``. Returns a tensor like ``x``.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"apply_rope needs a floating-point tensor x, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() < 2:
        raise ValueError(f"apply_rope needs x of shape (..., L, E), got shape {_shape(x)}")
    L, E = x.shape[-2], x.shape[-1]
    if E % 2:
        raise ValueError(f"apply_rope needs an even last dim E (features are rotated in pairs), "
                         f"got x of shape {_shape(x)} with E={E}")
    if not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an int >= 0, got {offset!r}")
    if (cos is None) != (sin is None):
        raise ValueError("pass both cos and sin (from rope_cache), or neither")
    if cos is None:
        cos, sin = rope_cache(L, E, base, offset, dtype=x.dtype, device=x.device)
    else:
        assert sin is not None
        for name, t in (("cos", cos), ("sin", sin)):
            if t.dim() != 2 or t.shape[-1] != E or t.shape[0] < offset + L:
                raise ValueError(
                    f"{name} must have shape (P, E) with E={E} and P >= offset + L = "
                    f"{offset} + {L}, got {name} of shape {_shape(t)} for x of shape {_shape(x)}")
        cos = cos[offset:offset + L].to(x.dtype)
        sin = sin[offset:offset + L].to(x.dtype)
    return x * cos + rotate_half(x) * sin


# --------------------------------------------------------------------------- ALiBi


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (i + 1) for i in range(n)]


def alibi_slopes(H: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    r"""``(H,)`` ALiBi slopes :math:`m_h`, as in Press et al.

    For ``H`` a power of two: the geometric sequence :math:`m_h = 2^{-8(h+1)/H}`, ``h = 0 … H−1``
    (``H = 8``: 1/2, 1/4, …, 1/256). Otherwise, with ``c`` the largest power of two below ``H``:
    the ``c`` slopes for ``c`` heads, then every other slope of the ``2c``-head sequence
    (its odd-numbered ones: ``2^{-4/c·1}, 2^{-4/c·3}, …``) until there are ``H``.
    """
    if not isinstance(H, int) or H < 1:
        raise ValueError(f"alibi_slopes needs a number of heads H >= 1, got H={H!r}")
    c = 2 ** int(math.floor(math.log2(H)))
    slopes = _power_of_two_slopes(c)
    if c < H:
        slopes += _power_of_two_slopes(2 * c)[0::2][:H - c]
    return torch.tensor(slopes, dtype=dtype)


def alibi_bias(H: int, L: int, S: int | None = None, *, causal: bool = False,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    r"""``(H, L, S)`` float additive mask :math:`b_{hij} = m_h\,(j - i')`, ``i' = i + S − L``.

    ``j`` is the key position, ``i'`` the query's position when the ``L`` queries are the last
    ``L`` of the ``S`` positions (bottom-right alignment, as in decoding with a KV cache; with
    ``S = L`` simply ``i' = i``). The bias is 0 on the current token and ``−m_h · distance`` for
    past keys. Future keys get a positive bias: ALiBi is meant for causal attention, so pass
    ``causal=True`` to put ``-inf`` there (then the mask alone does causal ALiBi; do not also set
    ``is_causal``). Broadcasts against scores ``(B, H, L, S)``.
    """
    S = L if S is None else S
    if L < 0 or S < 0 or L > S:
        raise ValueError(f"alibi_bias needs 0 <= L <= S (queries are the last L of S positions), "
                         f"got L={L}, S={S}")
    q_pos = torch.arange(S - L, S, dtype=torch.float64)[:, None]      # (L, 1)
    k_pos = torch.arange(S, dtype=torch.float64)[None, :]             # (1, S)
    rel = k_pos - q_pos                                               # (L, S): j - i'
    bias = alibi_slopes(H, torch.float64)[:, None, None] * rel         # (H, L, S)
    if causal:
        bias = bias.masked_fill(rel > 0, float("-inf"))
    return bias.to(dtype)
