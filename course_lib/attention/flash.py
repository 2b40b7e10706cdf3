r"""FlashAttention's algorithm in plain PyTorch: tiles of queries and keys, online softmax.

For each block of queries ``Q_i`` we sweep the key/value blocks ``K_j, V_j`` and keep three
running statistics per query row, the symbols of the Flash chapter's derivation:

.. math::
    S_{ij} = s\,Q_i K_j^\top + M_{ij}, \qquad
    m^{new} = \max\big(m,\ \mathrm{rowmax}(S_{ij})\big), \qquad
    P_{ij} = e^{S_{ij} - m^{new}},

    \ell \leftarrow e^{m - m^{new}}\,\ell + \mathrm{rowsum}(P_{ij}), \qquad
    O \leftarrow e^{m - m^{new}}\,O + P_{ij} V_j, \qquad m \leftarrow m^{new},

and return :math:`O / \ell` once all key blocks are seen. Only ``(B_q, B_k)`` tiles of scores
ever exist: memory is ``O(L·E + B_q·B_k)`` per head instead of ``O(L·S)``.

Shapes: query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)`` → ``(..., L, Ev)``;
same semantics as :func:`torch.nn.functional.scaled_dot_product_attention`, including
``torch.nn.attention.bias`` causal masks (both alignments, computed tile by tile) and empty
dimensions; ``attn_mask`` with ``is_causal=True`` raises ``ValueError`` (torch's documented
contract; torch 2.13's default CPU kernel silently applies both).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._validate import causal_alignment, check_sdpa_args, compute_dtype, expand_gqa

#: default (query rows, key rows) per tile: few, large tiles keep Python's per-op cost small;
#: long key blocks make the rescale of O (once per key block) rare. A float32 tile of scores is
#: ``B·H·B_q·B_k·4`` bytes, 16 MiB for 8 heads.
DEFAULT_BLOCK_SIZE = (1024, 512)
#: with ``is_causal`` smaller query blocks waste less of the tiles that straddle the diagonal
DEFAULT_CAUSAL_BLOCK_SIZE = (512, 512)


def _block_sizes(block_size: int | tuple[int, int] | None, is_causal: bool) -> tuple[int, int]:
    """``None`` → default; ``b`` → ``(b, b)``; ``(b_q, b_k)`` as given. Must be positive ints."""
    if block_size is None:
        return DEFAULT_CAUSAL_BLOCK_SIZE if is_causal else DEFAULT_BLOCK_SIZE
    sizes = (block_size, block_size) if not isinstance(block_size, (tuple, list)) \
        else tuple(block_size)
    if len(sizes) != 2 or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0
                                  for b in sizes):
        raise ValueError(f"block_size must be a positive int or a pair (B_q, B_k) of positive "
                         f"ints, got {block_size!r}")
    return sizes


def _tile(mask: torch.Tensor, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
    """The ``[i0:i1, j0:j1]`` tile of a mask broadcastable to ``(..., L, S)`` (size-1 dims kept)."""
    rows = slice(i0, i1) if mask.shape[-2] > 1 else slice(None)
    cols = slice(j0, j1) if mask.shape[-1] > 1 else slice(None)
    return mask[..., rows, cols]


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    block_size: int | tuple[int, int] | None = None,
) -> torch.Tensor:
    """softmax(QKᵀ·s + M) V computed tile by tile; returns ``(..., L, Ev)``, never an ``(L, S)``.

    ``block_size``: rows per tile, an int for both or ``(B_q, B_k)`` for query/key blocks
    (default :data:`DEFAULT_BLOCK_SIZE`, or :data:`DEFAULT_CAUSAL_BLOCK_SIZE` when causal).
    ``attn_mask``: bool (True = may attend), additive float, or a ``torch.nn.attention.bias``
    causal bias, whose variant sets the causal diagonal (no ``(L, S)`` mask is built when its
    lengths are the inputs'); ``attn_mask`` with ``is_causal=True`` raises ``ValueError``.
    Gradients flow through ordinary torch ops; autograd then keeps every tile ``P_ij`` for the
    backward pass (FlashAttention recomputes them instead).
    """
    check_sdpa_args(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    attn_mask, align = causal_alignment(query, key, attn_mask, is_causal)
    is_causal = align is not None
    bq, bk = _block_sizes(block_size, is_causal)
    if enable_gqa:
        key, value = expand_gqa(query, key, value)
    dtype, work = query.dtype, compute_dtype(query.dtype)
    L, S, E, Ev = query.shape[-2], key.shape[-2], query.shape[-1], value.shape[-1]
    if E == 0:
        s = 1.0  # QKᵀ is an empty sum, all zeros, for any scale (torch: uniform weights, no NaN)
    else:
        s = 1.0 / math.sqrt(E) if scale is None else scale
    # causal: key j is visible to query i iff j <= i + d (d = S - L when aligned bottom right)
    d = S - L if align == "bottom_right" else 0
    batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    N = math.prod(batch)

    def flat(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:  # (..., r, c) -> (N, r, c)
        return t.expand(*batch, rows, cols).reshape(N, rows, cols)

    q = flat(query.to(work) * s, L, E)                     # fold the scale into Q once
    kT = flat(key.to(work), S, E).transpose(1, 2)          # (N, E, S)
    v = flat(value.to(work), S, Ev)
    fold_ell = dropout_p == 0.0
    if fold_ell:  # P [V | 1] = [P V | rowsum P]: ℓ rides along as the last column of O
        v = torch.cat([v, v.new_ones(v.shape[0], S, 1)], dim=-1)
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.to(work)

    out = q.new_empty((N, L, Ev))
    for i0 in range(0, L, bq):
        i1 = min(i0 + bq, L)
        m = q.new_full((N, i1 - i0, 1), float("-inf"))    # m: running row max of the scores
        ell = torch.zeros_like(m)                          # ℓ: running sum of e^{S - m}
        O = q.new_zeros((N, i1 - i0, v.shape[-1]))         # O: running sum of e^{S - m} V
        for j0 in range(0, S, bk):
            j1 = min(j0 + bk, S)
            if is_causal and j0 > i1 - 1 + d:
                break                                      # every later key is in the future
            S_ij = torch.bmm(q[:, i0:i1], kT[:, :, j0:j1])  # (N, B_q, B_k) scores
            if is_causal and j1 - 1 > i0 + d:              # tile crosses the diagonal
                rows = torch.arange(i0, i1, device=q.device)[:, None]
                cols = torch.arange(j0, j1, device=q.device)
                S_ij.masked_fill_(cols > rows + d, float("-inf"))
            elif attn_mask is not None:
                tile = _tile(attn_mask, i0, i1, j0, j1)
                grid = S_ij.view(*batch, i1 - i0, j1 - j0)  # broadcast the mask over batch dims
                if tile.dtype == torch.bool:
                    grid.masked_fill_(tile.logical_not(), float("-inf"))
                else:
                    grid.add_(tile)
            # m only stabilizes exp (the result does not depend on it): no gradient through it
            row_max = S_ij.detach().flatten(0, 1).amax(dim=1).view_as(m)  # 2-d amax: faster
            m_new = torch.maximum(m, row_max)
            m_sub = m_new                                  # a row masked so far has m = -inf:
            if attn_mask is not None or d < 0:             # subtract 0 instead (its P is 0)
                m_sub = m_new.masked_fill(m_new == float("-inf"), 0.0)
            P_ij = S_ij.sub_(m_sub).exp_()                 # e^{S - m_new}, in place
            alpha = torch.exp(m - m_sub)                   # e^{m - m_new} rescales old ℓ and O
            if not fold_ell:
                ell = alpha * ell + P_ij.sum(dim=-1, keepdim=True)
                P_ij = F.dropout(P_ij, p=dropout_p)        # ℓ keeps the undropped sum
            O = O.mul_(alpha).baddbmm_(P_ij, v[:, j0:j1])  # O <- e^{m - m_new} O + P V
            m = m_new
            del S_ij, P_ij                                 # free this tile before the next
        if fold_ell:
            O, ell = O[..., :-1], O[..., -1:]
        out[:, i0:i1] = O / ell.masked_fill(ell == 0, 1.0)  # fully masked row: 0 / 1 = 0
    if L == 0 or S == 0:  # no tile ran: out is empty (L = 0) or zeros (S = 0, no key to see).
        # An empty sum is exactly 0 but links the inputs to autograd: zero gradients, as torch.
        out = out + sum(t.narrow(-1, 0, 0).sum().to(work) for t in (query, key, value))
    return out.reshape(*batch, L, Ev).to(dtype)
