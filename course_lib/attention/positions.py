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
* :func:`scaled_rope_frequencies`: RoPE past the training length, with Hugging Face's
  ``rope_scaling`` dicts (linear, dynamic NTK, YaRN, Llama 3).
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

RopeScaling = dict  # a Hugging Face ``rope_scaling`` dict, e.g. {"rope_type": "yarn", ...}

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")


def rope_frequencies(E: int, base: float = 10000.0) -> torch.Tensor:
    r"""``(E/2,)`` float64 angular frequencies :math:`\theta_i = \mathrm{base}^{-2i/E}`."""
    if not isinstance(E, int) or E <= 0 or E % 2:
        raise ValueError(f"RoPE needs an even, positive head width E (features are rotated in "
                         f"pairs), got E={E!r}")
    if not base > 1:
        raise ValueError(f"the RoPE base must be > 1, got base={base!r}")
    return base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)


def _key(cfg: dict, name: str, default: float | None = None) -> float:
    value = cfg.get(name)
    if value is None:
        if default is None:
            raise ValueError(f"rope_scaling of type {cfg.get('rope_type', cfg.get('type'))!r} "
                             f"needs the key {name!r}, got {cfg!r}")
        return default
    return float(value)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def scaled_rope_frequencies(E: int, base: float = 10000.0,
                            rope_scaling: RopeScaling | None = None,
                            seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    r"""``(theta (E/2,) float64, attention_factor)``: RoPE frequencies under ``rope_scaling``.

    ``rope_scaling`` is a Hugging Face config dict (``"rope_type"``, or the legacy ``"type"``),
    with transformers' keys and defaults:

    * ``"linear"`` (position interpolation, Chen et al.): :math:`\theta_i / s`, ``s = factor``.
    * ``"dynamic"`` (dynamic NTK): for ``seq_len > original_max_position_embeddings`` (= ``M``),
      the base becomes :math:`b\,(s\,\ell/M - (s-1))^{E/(E-2)}` with ``ℓ = seq_len``; below
      ``M`` nothing changes.
    * ``"yarn"`` (Peng et al.): dimensions that turn more than ``beta_fast`` (default 32) times
      over ``M`` positions keep :math:`\theta_i`; those turning fewer than ``beta_slow``
      (default 1) times get :math:`\theta_i/s`; a linear ramp between them. Attention factor
      ``attention_factor``, else :math:`0.1\ln s + 1` (or the ``mscale``/``mscale_all_dim``
      ratio), multiplies cos and sin. ``truncate`` (default True) rounds the ramp's ends.
    * ``"llama3"``: wavelengths :math:`2\pi/\theta_i` shorter than ``M / high_freq_factor``
      keep :math:`\theta_i`, longer than ``M / low_freq_factor`` get :math:`\theta_i/s`,
      smooth interpolation between.

    ``M`` is ``original_max_position_embeddings`` (needed by all but linear). ``seq_len`` (only
    for ``"dynamic"``) is the length the table is built for: the largest position + 1.
    """
    theta = rope_frequencies(E, base)
    if rope_scaling is None:
        return theta, 1.0
    if not isinstance(rope_scaling, dict):
        raise TypeError(f"rope_scaling must be a dict like {{'rope_type': 'linear', "
                        f"'factor': 2.0}} or None, got {type(rope_scaling).__name__}")
    kind = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"rope_scaling['rope_type'] must be one of {ROPE_TYPES}, got {kind!r}")
    if kind == "default":
        return theta, 1.0
    s = _key(rope_scaling, "factor")
    if not s >= 1:
        raise ValueError(f"rope_scaling['factor'] must be >= 1, got {s}")
    if kind == "linear":
        return theta / s, 1.0
    M = _key(rope_scaling, "original_max_position_embeddings")
    if kind == "dynamic":
        ell = M if seq_len is None or seq_len <= M else float(seq_len)
        new_base = base * ((s * ell / M) - (s - 1)) ** (E / (E - 2))
        return rope_frequencies(E, new_base), 1.0
    if kind == "yarn":
        factor = rope_scaling.get("attention_factor")
        mscale, mscale_all = rope_scaling.get("mscale"), rope_scaling.get("mscale_all_dim")
        if factor is None:
            factor = (_yarn_mscale(s, mscale) / _yarn_mscale(s, mscale_all)
                      if mscale and mscale_all else _yarn_mscale(s))
        beta_fast = rope_scaling.get("beta_fast") or 32.0
        beta_slow = rope_scaling.get("beta_slow") or 1.0

        def dim_of(rotations: float) -> float:  # the dimension turning `rotations` times in M
            return E * math.log(M / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low, high = dim_of(beta_fast), dim_of(beta_slow)
        if rope_scaling.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, E - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(E // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        return theta / s * ramp + theta * (1 - ramp), float(factor)
    # llama3
    lo, hi = _key(rope_scaling, "low_freq_factor"), _key(rope_scaling, "high_freq_factor")
    wavelen = 2 * math.pi / theta
    smooth = ((M / wavelen - lo) / (hi - lo)).clamp(0, 1)
    return theta / s * (1 - smooth) + theta * smooth, 1.0


def softmax_mscale(rope_scaling: RopeScaling | None) -> float:
    r"""DeepSeek's factor on the softmax scale under RoPE scaling: :math:`m^2` with
    :math:`m = 0.1\,\mathrm{mscale\_all\_dim}\,\ln s + 1` (``s = factor``; ``m = 1`` for
    ``s <= 1``) when ``rope_scaling`` has a non-zero ``mscale_all_dim`` and a type other than
    ``"default"``; else 1.

    DeepSeek-V2/V3 (and transformers' ``DeepseekV3Attention``) multiply the scores' scale
    :math:`1/\sqrt{E}` by it, on top of YaRN's attention factor on cos and sin (which only
    reaches the rotary features): with ``mscale = mscale_all_dim`` that factor is 1 and this one
    alone raises the scale, for every feature.
    """
    if rope_scaling is None:
        return 1.0
    kind = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
    m_all = rope_scaling.get("mscale_all_dim")
    if kind == "default" or not m_all:
        return 1.0
    return _yarn_mscale(_key(rope_scaling, "factor"), float(m_all)) ** 2


def _positions(L: int, offset: int, position_ids: torch.Tensor | None) -> torch.Tensor:
    """float64 positions: ``(L,)`` ``offset … offset+L−1``, or ``position_ids`` ``(B, L)``."""
    if position_ids is None:
        if L < 0 or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"L and offset must be ints >= 0, got L={L}, offset={offset!r}")
        return torch.arange(offset, offset + L, dtype=torch.float64)
    if offset:
        raise ValueError(f"pass offset or position_ids, not both (got offset={offset})")
    if (not isinstance(position_ids, torch.Tensor) or position_ids.is_floating_point()
            or position_ids.is_complex() or position_ids.dtype == torch.bool
            or position_ids.dim() != 2 or position_ids.shape[1] != L):
        got = (f"{position_ids.dtype} of shape {_shape(position_ids)}"
               if isinstance(position_ids, torch.Tensor) else type(position_ids).__name__)
        raise ValueError(f"position_ids must be an integer tensor of shape (B, L) with L={L}, "
                         f"got {got}")
    if position_ids.numel() and int(position_ids.min()) < 0:
        raise ValueError(f"position_ids must be >= 0, got min {int(position_ids.min())}")
    return position_ids.to(torch.float64)


def rope_angles(L: int, E: int, *, base: float = 10000.0, offset: int = 0,
                rope_scaling: RopeScaling | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
    r"""float64 angles :math:`m\,\theta_i`: ``(L, E/2)`` for positions ``offset … offset+L−1``,
    or ``(B, L, E/2)`` for ``position_ids (B, L)``; ``theta`` scaled by ``rope_scaling``."""
    pos = _positions(L, offset, position_ids)
    seq_len = int(pos.max()) + 1 if pos.numel() else 0
    theta, _ = scaled_rope_frequencies(E, base, rope_scaling, seq_len)
    return pos[..., None] * theta


def rope_cache(L: int, E: int, base: float = 10000.0, offset: int = 0, *,
               rope_scaling: RopeScaling | None = None,
               position_ids: torch.Tensor | None = None,
               dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(cos, sin)``, each ``(L, E)`` for positions ``offset … offset+L−1``, or ``(B, L, E)``
    for per-row ``position_ids (B, L)``.

    Split-halves layout: column ``c`` holds the angle of pair ``c mod E/2``, i.e.
    ``cos = [cos(mθ), cos(mθ)]``. Angles are computed in float64, then cast to ``dtype``.
    ``rope_cache(L, E, offset=o)`` equals ``rope_cache(o + L, E)`` sliced to rows ``o:``.
    ``rope_scaling`` (see :func:`scaled_rope_frequencies`) scales the frequencies; YaRN's
    attention factor multiplies cos and sin, as in transformers.
    """
    pos = _positions(L, offset, position_ids)
    seq_len = int(pos.max()) + 1 if pos.numel() else 0
    theta, factor = scaled_rope_frequencies(E, base, rope_scaling, seq_len)
    a = pos[..., None] * theta
    a = torch.cat([a, a], dim=-1)
    return ((a.cos() * factor).to(dtype=dtype, device=device),
            (a.sin() * factor).to(dtype=dtype, device=device))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last dim (halves): a 90° turn of every pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor | None = None,
               sin: torch.Tensor | None = None, *, offset: int = 0,
               position_ids: torch.Tensor | None = None, base: float = 10000.0,
               rope_scaling: RopeScaling | None = None) -> torch.Tensor:
    r"""Rotate ``x (..., L, E)`` (even ``E``) by its positions ``offset … offset+L−1``.

    .. math:: \mathrm{RoPE}(x)_m = x_m \odot \cos(m\theta) + \mathrm{rotate\_half}(x_m) \odot
              \sin(m\theta)

    ``position_ids``: instead of ``offset``, an integer tensor ``(B, L)`` giving each row its
    own positions (left-padded batches); ``x`` is then ``(B, ..., L, E)``.
    ``cos``/``sin``: an optional precomputed cache ``(P, E)`` from :func:`rope_cache` with
    ``P >`` every position used; rows ``offset:offset+L`` (or ``position_ids``) are read (a
    decoder builds the cache once for its maximum length and passes ``offset`` = the number of
    tokens already cached). Without a cache, it is computed for ``base`` and ``rope_scaling``
    (see :func:`scaled_rope_frequencies`). Returns a tensor like ``x``.
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
    if position_ids is not None:
        _positions(L, offset, position_ids)               # validates
        if x.dim() < 3 or x.shape[0] != position_ids.shape[0]:
            raise ValueError(f"position_ids of shape {_shape(position_ids)} need x of shape "
                             f"(B, ..., L, E) with B={position_ids.shape[0]} and "
                             f"L={position_ids.shape[1]}, got x of shape {_shape(x)}")
    if cos is None:
        cos, sin = rope_cache(L, E, base, offset, rope_scaling=rope_scaling,
                              position_ids=position_ids, dtype=x.dtype, device=x.device)
    else:
        assert sin is not None
        if rope_scaling is not None:
            raise ValueError("pass rope_scaling to rope_cache when you precompute cos and sin, "
                             "not to apply_rope as well")
        need = offset + L if position_ids is None else (
            int(position_ids.max()) + 1 if position_ids.numel() else 0)
        for name, t in (("cos", cos), ("sin", sin)):
            if t.dim() != 2 or t.shape[-1] != E or t.shape[0] < need:
                where = ("offset + L = " + f"{offset} + {L}" if position_ids is None
                         else f"max(position_ids) + 1 = {need}")
                raise ValueError(
                    f"{name} must have shape (P, E) with E={E} and P >= {where}, got {name} "
                    f"of shape {_shape(t)} for x of shape {_shape(x)}")
        if position_ids is None:
            cos, sin = cos[offset:offset + L], sin[offset:offset + L]
        else:
            idx = position_ids.to(cos.device)
            cos, sin = cos[idx], sin[idx]
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if position_ids is not None:                       # (B, L, E) -> (B, 1, ..., L, E)
        cos = cos.reshape(cos.shape[0], *([1] * (x.dim() - 3)), L, E)
        sin = sin.reshape(cos.shape)
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
