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
    """Raise ``TypeError``/``ValueError`` for arguments torch's SDPA would reject.

    Shapes: query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)``,
    attn_mask broadcastable to ``(..., L, S)``, or a ``torch.nn.attention.bias.CausalBias``
    (checked as the mask it stands for, see :func:`causal_alignment`).

    ``attn_mask`` together with ``is_causal=True`` is refused, as torch's documentation says,
    although torch 2.13's default CPU kernel silently applies both (see :func:`_check_mask`).
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"{name} must be a floating-point tensor (float64, float32, bfloat16 or float16), "
                f"got {t.dtype} with shape {_shape(t)}"
            )
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dims (..., length, features), "
                             f"got shape {_shape(t)}")
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(f"query, key and value must share a dtype, got {query.dtype}, "
                        f"{key.dtype}, {value.dtype}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"the last dim (E) of query and key must match: query {_shape(query)} has "
            f"E={query.shape[-1]}, key {_shape(key)} has E={key.shape[-1]}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length S (dim -2): key {_shape(key)} has "
            f"S={key.shape[-2]}, value {_shape(value)} has S={value.shape[-2]}"
        )
    if enable_gqa:
        if query.dim() < 3 or key.dim() < 3 or value.dim() < 3:
            raise ValueError("enable_gqa=True needs a head dim (-3) in query, key and value, got "
                             f"query {_shape(query)}, key {_shape(key)}, value {_shape(value)}")
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hk != hv or hq % hk != 0:
            raise ValueError(
                f"with enable_gqa=True the query heads Hq must be a multiple of the key/value "
                f"heads Hkv: query {_shape(query)} has Hq={hq}, key {_shape(key)} has {hk}, "
                f"value {_shape(value)} has {hv}"
            )
    if not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout_p must be a probability in [0, 1], got {dropout_p!r}")
    if scale is not None and not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    batch = query.shape[:-2]
    if not enable_gqa and not batch == key.shape[:-2] == value.shape[:-2]:  # cheap case first
        try:
            batch = torch.broadcast_shapes(batch, key.shape[:-2], value.shape[:-2])
        except RuntimeError:
            raise ValueError(
                f"batch dims of query {_shape(query)}, key {_shape(key)} and value "
                f"{_shape(value)} do not broadcast"
            ) from None
    if _is_causal_bias(attn_mask):
        if is_causal:
            raise ValueError("a CausalBias attn_mask already is a causal mask: do not also pass "
                             "is_causal=True (torch raises here too)")
        attn_mask, _ = causal_alignment(query, key, attn_mask, False)
    if attn_mask is not None:
        _check_mask(attn_mask, query, key, is_causal, (*batch, query.shape[-2], key.shape[-2]))


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


def _check_mask(attn_mask, query: torch.Tensor, key: torch.Tensor, is_causal: bool,
                target: tuple[int, ...]) -> None:
    """attn_mask: a bool or query-dtype tensor broadcastable to the scores' shape ``target``."""
    if is_causal:
        # torch's docs: "An error is thrown if both attn_mask and is_causal are set". torch 2.13
        # raises in its math kernel, but its default CPU (flash) kernel applies both, mask AND
        # causal, without a word. We keep the documented contract: one unambiguous way to say it.
        raise ValueError(
            "pass either attn_mask or is_causal=True, not both (attn_mask has shape "
            f"{_shape(attn_mask)}); torch documents this as an error, though torch 2.13's "
            "default CPU kernel silently applies both. To apply both, pass one mask, e.g. "
            "masks.combine_masks(attn_mask, masks.causal_mask(L, S)) for a bool mask")
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor or None, got "
                        f"{type(attn_mask).__name__}")
    if attn_mask.dtype not in (torch.bool, torch.float32, query.dtype):
        raise TypeError(
            f"attn_mask must be bool (True = may attend), float32 or the query's dtype "
            f"{query.dtype}, got {attn_mask.dtype} with shape {_shape(attn_mask)}"
        )
    try:
        ok = torch.broadcast_shapes(attn_mask.shape, target) == torch.Size(target)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"attn_mask of shape {_shape(attn_mask)} is not broadcastable to the scores' "
            f"shape (..., L, S) = ({', '.join(map(str, target))}) for query {_shape(query)} "
            f"and key {_shape(key)}"
        )


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
