r"""The one safe softmax of the course: the max shift, and zeros (not NaN) for a dead row.

.. math:: \mathrm{softmax}(x)_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}}, \quad m = \max_j x_j

A row that is entirely ``-inf`` (a query with no allowed key) gives zeros, torch's SDPA
convention, instead of the NaN of ``-inf - (-inf)``.
"""

from __future__ import annotations

import torch


def safe_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x − m) / Σ exp(x − m), m = max(x) over ``dim``; same shape as ``x`` ``(..., n)``.

    Every exponent is ≤ 0, so nothing overflows; ``-inf`` entries get weight 0; a row that is
    entirely ``-inf`` returns zeros.
    """
    if x.shape[dim] == 0:
        return x                                 # no keys: nothing to normalise (amax would raise)
    m = x.amax(dim=dim, keepdim=True)
    m = m.masked_fill(m == float("-inf"), 0.0)  # dead row: any finite shift will do
    e = torch.exp(x - m)                         # exp(-inf) = 0 for masked keys
    z = e.sum(dim=dim, keepdim=True)
    return e / torch.where(z == 0, torch.ones_like(z), z)  # dead row: 0 / 1 = 0
