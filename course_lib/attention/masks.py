r"""Attention masks in torch's SDPA convention: bool ``True`` = *may attend*.

A bool mask ``(..., L, S)`` keeps score ``(i, j)`` where it is True; an additive float mask
``M`` is added to the scores, :math:`\mathrm{softmax}(QK^\top s + M)`, so ``M = -inf`` removes a
key and ``M = 0`` keeps it. Both broadcast to the scores' shape ``(B, H, L, S)``.
"""

from __future__ import annotations

import torch

#: ``causal_mask`` alignments: where the diagonal of the ``(L, S)`` grid starts
ALIGNMENTS = ("top_left", "bottom_right")


def causal_mask(L: int, S: int | None = None, device: torch.device | str | None = None, *,
                align: str = "top_left") -> torch.Tensor:
    """``(L, S)`` bool causal mask, True where query ``i`` may see key ``j`` (``S`` defaults to L).

    * ``align="top_left"`` (default): ``j <= i``, query ``i`` sees keys ``0..i``. This is the mask
      torch uses for ``is_causal=True`` and for ``torch.nn.attention.bias.causal_upper_left``.
    * ``align="bottom_right"``: ``j <= i + (S - L)``, the ``L`` queries are the *last* ``L``
      positions of the ``S`` keys (a decoding step with a KV cache); torch's
      ``causal_lower_right``. With ``L > S`` the first ``L - S`` rows see no key (zero output).

    The two are the same mask when ``L == S``.
    """
    S = L if S is None else S
    if L < 0 or S < 0:
        raise ValueError(f"causal_mask needs non-negative lengths, got L={L}, S={S}")
    if align not in ALIGNMENTS:
        raise ValueError(f"align must be one of {ALIGNMENTS}, got {align!r}")
    diagonal = 0 if align == "top_left" else S - L
    return torch.ones(L, S, dtype=torch.bool, device=device).tril(diagonal=diagonal)


def sliding_window_mask(L: int, S: int | None = None, window: int = 1,
                        device: torch.device | str | None = None, *,
                        align: str = "top_left") -> torch.Tensor:
    """``(L, S)`` bool causal mask that also forgets: query ``i`` sees the last ``window`` keys
    up to and including its own position, ``pos(i) - window < j <= pos(i)``.

    ``pos(i) = i`` for ``align="top_left"`` and ``i + (S - L)`` for ``"bottom_right"`` (the
    queries are the last ``L`` positions, as in a decoding step). ``window >= S`` gives
    :func:`causal_mask`; ``window = 1`` lets every query see only itself.
    """
    S = L if S is None else S
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    causal = causal_mask(L, S, device=device, align=align)
    diagonal = (0 if align == "top_left" else S - L) - window
    return causal & ~torch.ones(L, S, dtype=torch.bool, device=device).tril(diagonal=diagonal)


def padding_mask(tokens: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """``(B, 1, 1, S)`` bool from token ids ``(B, S)``: True for real tokens, False for padding.

    The two singleton dims broadcast over heads and query positions: no query attends to a pad key.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"tokens must be a (B, S) tensor of ids, got {shape}")
    return (tokens != pad_id)[:, None, None, :]


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of bool masks, broadcast together: a key is allowed only if every mask allows it.

    ``None`` entries are skipped (``None`` = no constraint); all ``None`` gives ``None``.
    """
    result = None
    for m in masks:
        if m is None:
            continue
        if m.dtype != torch.bool:
            raise TypeError(f"combine_masks takes bool masks, got {m.dtype} with shape "
                            f"{tuple(m.shape)}; combine additive masks by adding them")
        result = m if result is None else result & m
    return result


def to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32,
                fill: str | float = "-inf") -> torch.Tensor:
    r"""Turn a bool mask (True = may attend) into an additive mask: 0 where True, else ``fill``.

    The fill value is a trade-off per dtype:

    * ``"-inf"`` (default): exact, ``exp(-inf) = 0``; torch's SDPA turns a fully masked row into
      zeros, but a naive ``softmax`` gives NaN there (``-inf - (-inf)``).
    * ``"finfo_min"``: ``torch.finfo(dtype).min`` is finite, so no NaN, but a fully masked row
      becomes a *uniform* average instead of zeros, and ``score + min`` can overflow to ``-inf``
      anyway (fine) or, in float16/bfloat16, swallow the score entirely (also fine, it is masked).
    * a float such as ``-1e9``: the classic choice; too large for float16 (max 65504, becomes
      ``-inf``), and in float32 a masked key still gets weight ``exp(-1e9) = 0`` -- correct, but a
      fully masked row is again uniform rather than zero.
    """
    if mask.dtype != torch.bool:
        raise TypeError(f"to_additive takes a bool mask, got {mask.dtype}")
    if not dtype.is_floating_point:
        raise TypeError(f"to_additive needs a floating dtype, got {dtype}")
    if fill == "-inf":
        value = float("-inf")
    elif fill == "finfo_min":
        value = torch.finfo(dtype).min
    elif isinstance(fill, (int, float)):
        value = float(fill)
    else:
        raise ValueError(f"fill must be '-inf', 'finfo_min' or a float, got {fill!r}")
    fill_value = torch.tensor(value, dtype=torch.float64).to(dtype)  # overflow rounds to -inf
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill_(~mask, fill_value.item())
