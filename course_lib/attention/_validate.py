"""Argument checks shared by the three attention implementations.

Every implementation calls :func:`check_sdpa_args` first, so a learner gets the same clear
message, naming the argument and the shapes, whichever implementation they picked.
"""

from __future__ import annotations

import sys
from types import ModuleType

import torch

from .masks import causal_mask

FLOAT_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def _causal_bias_module() -> ModuleType | None:
    """``torch.nn.attention.bias`` if something imported it, else ``None``.

    A ``CausalBias`` can only exist once that module is imported, so it is never imported here:
    it pulls in ``torch._dynamo`` (about a second), which every process importing the course
    would otherwise pay for (a notebook's kernel, the CLI, each graded notebook).
    """
    return sys.modules.get("torch.nn.attention.bias")


def _is_causal_bias(attn_mask: object) -> bool:
    bias = _causal_bias_module()
    return bias is not None and isinstance(attn_mask, bias.CausalBias)


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


class SDPAValueError(ValueError, RuntimeError):
    """An argument torch's SDPA refuses with a ``RuntimeError``: also a ``ValueError``, the
    course's kind for a bad value, so either ``except`` catches it."""


class SDPATypeError(TypeError, RuntimeError):
    """A dtype torch's SDPA refuses with a ``RuntimeError``: also a ``TypeError``."""


class SDPAIndexError(IndexError, ValueError):
    """``enable_gqa=True`` without a head dim: torch's ``IndexError``, also a ``ValueError``."""


#: torch's own words for the one refusal every implementation states the same way
CAUSAL_AND_MASK = "Explicit attn_mask should not be set when is_causal=True"


def _check_argument_types(query, key, value, attn_mask, dropout_p, is_causal, scale,
                          enable_gqa) -> None:
    """What torch's argument parser refuses (``TypeError``), in its order: the arguments'
    kinds, before any value is looked at."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if attn_mask is not None and not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor or None, got "
                        f"{type(attn_mask).__name__}")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a float, got {type(dropout_p).__name__}")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {type(is_causal).__name__}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa must be a bool, got {type(enable_gqa).__name__}")


def check_sdpa_args(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> None:
    """Refuse exactly what torch's SDPA (its math kernel) refuses, in torch's order, with a
    message naming the argument and the shapes.

    Shapes: query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)``,
    attn_mask broadcastable to ``(..., L, S)``, or a ``torch.nn.attention.bias.CausalBias``
    (checked as the mask it stands for, see :func:`causal_alignment`).

    torch's order: the argument parser (``TypeError``); a ``CausalBias`` with ``is_causal``
    (``ValueError``); ``validate_sdpa_input``: one dtype, one device, at least 2 dims, the mask's
    dtype; then the math kernel: ``attn_mask`` with ``is_causal=True``, the GQA heads, Q·Kᵀ
    (floating dtype, E, batch dims), the mask's shape, ``dropout_p <= 1``, P·V (S, batch dims).
    Exception types are torch's (``RuntimeError``; :class:`SDPAValueError` and
    :class:`SDPATypeError` are also the course's ``ValueError``/``TypeError``). ``dropout_p``
    below 0 (or NaN) means no dropout, as in torch.
    """
    _check_argument_types(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if _is_causal_bias(attn_mask) and is_causal:
        raise ValueError("a CausalBias attn_mask already is a causal mask: do not also pass "
                         "is_causal=True (torch: CausalBias should not be used with "
                         "causal=True)")
    if not (query.dtype == key.dtype == value.dtype):
        raise SDPATypeError(f"query, key and value must share a dtype, got {query.dtype}, "
                            f"{key.dtype}, {value.dtype} (shapes {_shape(query)}, "
                            f"{_shape(key)}, {_shape(value)})")
    if not (query.device == key.device == value.device):
        raise SDPAValueError(f"query, key and value must be on one device, got {query.device}, "
                             f"{key.device}, {value.device}")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() < 2:
            raise SDPAValueError(f"{name} must have at least 2 dims (..., length, features), "
                                 f"got shape {_shape(t)}")
    mask = attn_mask
    if _is_causal_bias(attn_mask):
        mask, _ = causal_alignment(query, key, attn_mask, False)
    if mask is not None and mask.dtype not in (torch.bool, torch.float32, query.dtype):
        raise SDPATypeError(
            f"attn_mask must be bool (True = may attend), float32 or the query's dtype "
            f"{query.dtype}, got {mask.dtype} with shape {_shape(mask)}")
    if attn_mask is not None and is_causal:
        # torch's math kernel raises; its fused CPU kernel (4-d, no dropout) silently applies
        # both. We keep the one unambiguous way to say it.
        raise SDPAValueError(
            f"{CAUSAL_AND_MASK}: pass either attn_mask or is_causal=True, not both (attn_mask "
            f"has shape {_shape(attn_mask)}); torch's default CPU kernel silently applies "
            "both. To apply both, pass one mask, e.g. "
            "masks.combine_masks(attn_mask, masks.causal_mask(L, S)) for a bool mask")
    if enable_gqa:
        for t in (query, key, value):
            if t.dim() < 3:
                raise SDPAIndexError(
                    f"enable_gqa=True needs a head dim (-3) in query, key and value (dimension "
                    f"out of range), got query {_shape(query)}, key {_shape(key)}, "
                    f"value {_shape(value)}")
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hk == 0 or hv == 0 or hq % hk != 0 or hq % hv != 0:
            raise SDPAValueError(
                f"with enable_gqa=True the number of heads in key and value must divide the "
                f"number of heads in query: query {_shape(query)} has Hq={hq}, key "
                f"{_shape(key)} has {hk}, value {_shape(value)} has {hv}")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dtype not in FLOAT_DTYPES:
            raise SDPATypeError(
                f"{name} must be a floating-point tensor (float64, float32, bfloat16 or "
                f"float16), got {t.dtype} with shape {_shape(t)}")
    if query.shape[-1] != key.shape[-1]:
        raise SDPAValueError(
            f"the last dim (E) of query and key must match: query {_shape(query)} has "
            f"E={query.shape[-1]}, key {_shape(key)} has E={key.shape[-1]}")
    outer = (query.shape[:-3], key.shape[:-3]) if enable_gqa else \
        (query.shape[:-2], key.shape[:-2])
    try:
        batch = torch.broadcast_shapes(*outer)
    except RuntimeError:
        raise SDPAValueError(f"batch dims of query {_shape(query)} and key {_shape(key)} do "
                             "not broadcast") from None
    batch = (*batch, query.shape[-3]) if enable_gqa else tuple(batch)
    if mask is not None:
        _check_mask_shape(mask, query, key, (*batch, query.shape[-2], key.shape[-2]))
    if dropout_p > 1:
        raise SDPAValueError(f"dropout_p must be a probability in [0, 1] (torch: dropout "
                             f"probability has to be between 0 and 1), got {dropout_p!r}")
    if key.shape[-2] != value.shape[-2]:
        raise SDPAValueError(
            f"key and value must have the same length S (dim -2): key {_shape(key)} has "
            f"S={key.shape[-2]}, value {_shape(value)} has S={value.shape[-2]}")
    v_outer = value.shape[:-3] if enable_gqa else value.shape[:-2]
    try:
        torch.broadcast_shapes(batch[:-1] if enable_gqa else batch, v_outer)
    except RuntimeError:
        raise SDPAValueError(f"batch dims of query {_shape(query)}, key {_shape(key)} and value "
                             f"{_shape(value)} do not broadcast") from None


def _check_mask_shape(attn_mask, query, key, target: tuple[int, ...]) -> None:
    """attn_mask must broadcast to the scores' shape ``target`` (torch adds it in place)."""
    try:
        ok = torch.broadcast_shapes(attn_mask.shape, target) == torch.Size(target)
    except RuntimeError:
        ok = False
    if not ok:
        raise SDPAValueError(
            f"attn_mask of shape {_shape(attn_mask)} is not broadcastable to the scores' "
            f"shape (..., L, S) = ({', '.join(map(str, target))}) for query {_shape(query)} "
            f"and key {_shape(key)}")


def uneven_gqa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, enable_gqa: bool):
    """``(key, value, enable_gqa)``: with GQA and different head counts in key and value (torch
    allows it when both divide Hq), both repeated to Hq heads and GQA off; else as given."""
    if enable_gqa and key.shape[-3] != value.shape[-3]:
        hq = query.shape[-3]
        return (key.repeat_interleave(hq // key.shape[-3], dim=-3),
                value.repeat_interleave(hq // value.shape[-3], dim=-3), False)
    return key, value, enable_gqa


def causal_alignment(query: torch.Tensor, key: torch.Tensor, attn_mask, is_causal: bool
                     ) -> tuple[torch.Tensor | None, str | None]:
    """``(attn_mask, align)``: the mask to apply and the causal alignment, ``None`` if not causal.

    ``is_causal=True`` is ``"top_left"``. A ``torch.nn.attention.bias.CausalBias`` (from
    ``causal_upper_left(L, S)`` / ``causal_lower_right(L, S)``) is a tensor subclass whose storage
    means nothing: it is read by its ``variant`` and lengths only, exactly as torch dispatches it:

    * ``causal_upper_left``, or either variant with equal lengths: ``is_causal=True`` on the actual
      query and key (``"top_left"``; torch ignores the bias's own lengths here);
    * ``causal_lower_right(Lb, Sb)`` with ``Lb != Sb``: the bool mask ``causal_mask(Lb, Sb,
      align="bottom_right")``, broadcast against the scores; when ``(Lb, Sb)`` is the scores'
      ``(L, S)`` we return ``"bottom_right"`` instead, so that no ``(L, S)`` mask is needed.
    """
    if not _is_causal_bias(attn_mask):
        return attn_mask, ("top_left" if is_causal else None)
    CausalVariant = _causal_bias_module().CausalVariant
    Lb, Sb = attn_mask.seq_len_q, attn_mask.seq_len_kv
    if attn_mask.variant == CausalVariant.UPPER_LEFT or Lb == Sb:
        return None, "top_left"
    if attn_mask.variant != CausalVariant.LOWER_RIGHT:
        raise ValueError(f"CausalBias.variant must be a CausalVariant, got {attn_mask.variant!r}")
    if (Lb, Sb) == (query.shape[-2], key.shape[-2]):
        return None, "bottom_right"
    return causal_mask(Lb, Sb, device=query.device, align="bottom_right"), None


def query_groups(query: torch.Tensor, key: torch.Tensor, enable_gqa: bool) -> int:
    """``G = Hq // Hkv`` query heads per key/value head (1 without ``enable_gqa``)."""
    return query.shape[-3] // key.shape[-3] if enable_gqa else 1


def fold_groups(x: torch.Tensor, groups: int) -> torch.Tensor:
    """``(..., Hkv·G, R, F)`` → ``(..., Hkv, G·R, F)``: the G query heads of one key/value head
    become one stack of rows, so ``x @ Kᵀ`` shares that head's K without copying it (a view when
    ``x`` is contiguous; grouped-query attention without ``repeat_interleave``)."""
    return x if groups == 1 else x.unflatten(-3, (-1, groups)).flatten(-3, -2)


def unfold_groups(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Inverse of :func:`fold_groups`: ``(..., Hkv, G·R, F)`` → ``(..., Hkv·G, R, F)``."""
    if groups == 1:
        return x
    return x.unflatten(-2, (groups, x.shape[-2] // groups)).flatten(-4, -3)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulate half-precision inputs in float32, as torch's kernels do."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
