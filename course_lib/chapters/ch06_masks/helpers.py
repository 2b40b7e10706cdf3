r"""Companions of :mod:`course_lib.masks` for the masks chapter: the code learners meet elsewhere.

* :func:`textbook_attention` -- ``masked_fill`` + ``torch.softmax``, as in most tutorials (it
  returns NaN on a fully masked row; the course's implementations return zeros).
* conversions between the three mask conventions: SDPA (bool, True = may attend),
  ``nn.MultiheadAttention`` (bool, True = *ignore*), and the "``mask == 0``" tutorials
  (integer 1 = keep, 0 = hide).
* :func:`causal_mask_bottom_right`: the alignment incremental decoding needs when ``L != S``.
* :func:`fill_value_rows`: what ``-inf``, ``finfo.min`` and ``-1e9`` do in each dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from course_lib.toolkit.display import markdown_table as markdown_table  # used by the chapter

# ----------------------------------------------------------------------------- textbook code


def textbook_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       mask: torch.Tensor | None = None, fill: float = float("-inf"),
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The attention found in most tutorials: ``softmax(masked_fill(QKᵀ/√E, ~mask, fill)) V``.

    ``mask`` is bool (True = may attend), broadcastable to ``(..., L, S)``. Returns
    ``(out (..., L, Ev), weights (..., L, S))``. With ``fill=-inf`` a row with no allowed key
    computes ``exp(-inf - (-inf)) = exp(nan)``: the whole row is NaN.
    """
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def tutorial_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       keep: torch.Tensor) -> torch.Tensor:
    """The "``mask == 0``" convention: ``keep`` is 1 (or True) to attend, 0 to hide; fill -1e9."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    scores = scores.masked_fill(keep == 0, -1e9)
    return torch.softmax(scores, dim=-1) @ value


# ----------------------------------------------------------------------------- conventions


def to_key_padding_mask(mask: torch.Tensor) -> torch.Tensor:
    """``(B, 1, 1, S)`` SDPA padding mask (True = real token) -> ``(B, S)`` ``key_padding_mask``
    of :class:`torch.nn.MultiheadAttention` (True = *ignore* this key)."""
    if mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[2] != 1:
        raise ValueError(f"expected a (B, 1, 1, S) padding mask, got {tuple(mask.shape)}")
    return ~mask[:, 0, 0, :]


def from_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """``(B, S)`` ``key_padding_mask`` (True = ignore) -> ``(B, 1, 1, S)`` mask (True = attend)."""
    return ~key_padding_mask.bool()[:, None, None, :]


def to_mha_attn_mask(mask: torch.Tensor) -> torch.Tensor:
    """``(L, S)`` SDPA mask -> ``attn_mask`` of ``nn.MultiheadAttention`` (True = not allowed)."""
    return ~mask


def from_keep01(keep: torch.Tensor) -> torch.Tensor:
    """A tutorial's 1 = keep / 0 = hide mask (any dtype) -> SDPA bool mask (True = attend)."""
    return keep != 0


CONVENTIONS: list[dict[str, str]] = [
    {"API": "`F.scaled_dot_product_attention(attn_mask=...)`, `course_lib`",
     "dtype": "bool", "True means": "may attend", "to SDPA": "as is"},
    {"API": "`nn.MultiheadAttention(key_padding_mask=...)`", "dtype": "bool (B, S)",
     "True means": "ignore (padding)", "to SDPA": "`~kpm[:, None, None, :]`"},
    {"API": "`nn.MultiheadAttention(attn_mask=...)`", "dtype": "bool (L, S)",
     "True means": "not allowed", "to SDPA": "`~attn_mask`"},
    {"API": "tutorials: `scores.masked_fill(mask == 0, -1e9)`", "dtype": "int 0/1",
     "True means": "1 = keep", "to SDPA": "`mask != 0`"},
    {"API": "additive float mask (SDPA, MHA)", "dtype": "float",
     "True means": "0 = keep, -inf = hide", "to SDPA": "`mask == 0`"},
]


# ----------------------------------------------------------------------------- L != S


def causal_mask_bottom_right(L: int, S: int) -> torch.Tensor:
    """``(L, S)`` bool, True where ``j <= i + (S - L)``: the ``L`` queries are the *last* ``L``
    positions of the ``S`` keys (decoding with a KV cache). Equals the top-left mask when L = S."""
    return torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)


# ----------------------------------------------------------------------------- fill values


def fill_value(fill: str | float, dtype: torch.dtype) -> float:
    """The fill as stored in ``dtype``: ``'-inf'``, ``'finfo_min'`` or a number (may round)."""
    if fill == "-inf":
        value = float("-inf")
    elif fill == "finfo_min":
        value = torch.finfo(dtype).min
    else:
        value = float(fill)
    return torch.tensor(value, dtype=dtype).item()


def dead_row_verdict(weights: torch.Tensor) -> str:
    """Name what a 1-D row of weights over fully masked keys looks like: NaN, zeros or uniform."""
    w = weights.double()
    if torch.isnan(w).any():
        return "NaN"
    if torch.all(w == 0):
        return "zeros"
    if torch.allclose(w, torch.full_like(w, 1.0 / w.numel()), atol=1e-3):
        return f"uniform 1/{w.numel()}"
    return "other"


def masked_fill_outcome(fill: str | float, dtype: torch.dtype) -> str:
    """What ``scores.masked_fill(mask, fill)`` does on ``dtype`` scores with the fill as written
    (a Python number, not converted first): ``"ok"``, or the error's type and first line."""
    value = {"-inf": float("-inf"), "finfo_min": torch.finfo(dtype).min}.get(fill, fill)
    try:
        torch.zeros(2, dtype=dtype).masked_fill(torch.tensor([True, False]), float(value))
    except (RuntimeError, OverflowError) as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0]}"
    return "ok"


def fill_value_rows(dtypes: Sequence[torch.dtype] = (torch.float32, torch.float16, torch.bfloat16),
                    fills: Sequence[str | float] = ("-inf", "finfo_min", -1e9),
                    score: float = -20.0, n_keys: int = 4) -> list[dict[str, Any]]:
    """For each dtype and fill: whether ``masked_fill`` accepts the fill as written, the fill as a
    tensor of that dtype (``torch.tensor(fill, dtype=dtype)``, what a float32 additive mask holds
    after ``.to(dtype)``), ``score + fill``, ``fill + fill`` (two masks added), the weight a
    masked key gets in a live row, and the weights of a dead row.

    The last four columns use the converted fill, in ``dtype``, with ``masked_fill`` + ``softmax``.
    """
    rows = []
    scores = torch.linspace(-1.0, 2.0, n_keys)
    for dtype in dtypes:
        for fill in fills:
            f = fill_value(fill, dtype)
            ft = torch.tensor(f, dtype=dtype)
            live = scores.to(dtype).masked_fill(torch.arange(n_keys) == 0, f)  # key 0 masked
            dead = scores.to(dtype).masked_fill(torch.ones(n_keys, dtype=torch.bool), f)
            rows.append({
                "dtype": str(dtype).replace("torch.", ""),
                "fill": fill if isinstance(fill, str) else f"{fill:g}",
                "masked_fill(fill)": masked_fill_outcome(fill, dtype),
                "stored": f,
                "score + fill": (torch.tensor(score, dtype=dtype) + ft).item(),
                "fill + fill": (ft + ft).item(),
                "masked weight (live row)": torch.softmax(live.float(), -1)[0].item(),
                "dead row": dead_row_verdict(torch.softmax(dead, -1)),
            })
    return rows
