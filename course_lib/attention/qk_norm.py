r"""QK-norm: RMSNorm on every query and key head before the scores (OLMo 2, Qwen3, Gemma 3).

.. math:: \hat q = \frac{q}{\sqrt{\overline{q^2} + \epsilon}} \odot w_q, \quad
          \hat k = \frac{k}{\sqrt{\overline{k^2} + \epsilon}} \odot w_k

The mean is over one head's ``E`` features, so a query's or key's length cannot grow without
bound and a score :math:`\hat q \cdot \hat k \le E \max|w_q||w_k|` stays bounded: the logits
cannot run away during training, the reason OLMo 2 and Qwen3 give for adding it. ``weight``
``(E,)`` is shared by all heads. Gemma 3 and Qwen3-Next store ``w - 1`` (``unit_offset=True``:
the scale is ``1 + weight``, so a zero weight is the identity scale).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import compute_dtype


def head_rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6, *,
                  unit_offset: bool = False) -> torch.Tensor:
    """RMSNorm over the last dim ``E`` of ``x (..., E)`` (each head's query or key), times
    ``weight (E,)`` (``1 + weight`` with ``unit_offset``); a tensor like ``x``.

    Half-precision inputs are normalised in float32 and rounded once, as torch's kernels do.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() < 1:
        raise ValueError(f"x must have a feature dim (..., E), got shape {tuple(x.shape)}")
    E = x.shape[-1]
    if weight is not None and tuple(weight.shape) != (E,):
        raise ValueError(f"weight must have shape (E,) = ({E},) for x of shape "
                         f"{tuple(x.shape)}, got {tuple(weight.shape)}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    dt = compute_dtype(x.dtype)
    w = None if weight is None else weight.to(dt) + (1.0 if unit_offset else 0.0)
    return F.rms_norm(x.to(dt), (E,), w, eps).to(x.dtype)


class HeadRMSNorm(nn.Module):
    """:func:`head_rms_norm` with a learned ``weight (E,)``: ones, or zeros with
    ``unit_offset`` (both start as the identity scale). Input ``(..., E)``."""

    def __init__(self, head_dim: int, eps: float = 1e-6, *, unit_offset: bool = False) -> None:
        super().__init__()
        if head_dim < 1:
            raise ValueError(f"head_dim must be >= 1, got {head_dim}")
        self.eps, self.unit_offset = eps, unit_offset
        init = torch.zeros if unit_offset else torch.ones
        self.weight = nn.Parameter(init(head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return head_rms_norm(x, self.weight, self.eps, unit_offset=self.unit_offset)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, unit_offset={self.unit_offset}"


__all__ = ["HeadRMSNorm", "head_rms_norm"]
