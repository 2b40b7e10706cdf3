r"""FlashAttention's algorithm in plain PyTorch: tiles of queries and keys, online softmax, and a
backward pass that recomputes the tiles instead of storing them.

Forward. For each block of queries ``Q_i`` we sweep the key/value blocks ``K_j, V_j`` and keep
three running statistics per query row, the symbols of the Flash chapter's derivation:

.. math::
    S_{ij} = s\,Q_i K_j^\top + M_{ij}, \qquad
    m^{new} = \max\big(m,\ \mathrm{rowmax}(S_{ij})\big), \qquad
    P_{ij} = e^{S_{ij} - m^{new}},

    \ell \leftarrow e^{m - m^{new}}\,\ell + \mathrm{rowsum}(P_{ij}), \qquad
    O \leftarrow e^{m - m^{new}}\,O + P_{ij} V_j, \qquad m \leftarrow m^{new},

and return :math:`O / \ell` once all key blocks are seen, keeping per row only the log-sum-exp
:math:`\mathrm{lse} = m + \ln \ell`. Only ``(B_q, B_k)`` tiles of scores ever exist.

Backward (:class:`FlashAttentionFunction`). With :math:`D = \mathrm{rowsum}(dO \circ O)`, each
tile is recomputed from the saved lse and contributes

.. math::
    P_{ij} = e^{S_{ij} - \mathrm{lse}_i},\quad dV_j \mathrel{+}= P_{ij}^\top dO_i,\quad
    dP_{ij} = dO_i V_j^\top,\quad dS_{ij} = P_{ij} \circ (dP_{ij} - D_i),

    dQ_i \mathrel{+}= s\, dS_{ij} K_j, \qquad dK_j \mathrel{+}= s\, dS_{ij}^\top Q_i, \qquad
    dM_{ij} = dS_{ij}\ \text{(float masks)}.

Saved for the backward pass: Q, K, V, O and the lse, ``O(L·E)`` per head; a training step needs
``O(L·E + B_q·B_k)`` memory instead of the ``O(L·S)`` that autograd through the tiles keeps
(:func:`tile_autograd_attention`, kept for contrast).

Grouped-query attention (``enable_gqa``): the G query heads of one key/value head are stacked
as rows over that head, so K and V are never copied per query head (no ``repeat_interleave``).

Shapes: query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)`` → ``(..., L, Ev)``;
same semantics as :func:`torch.nn.functional.scaled_dot_product_attention`, including
``torch.nn.attention.bias`` causal masks (both alignments, computed tile by tile) and empty
dimensions; ``attn_mask`` with ``is_causal=True`` raises ``ValueError`` (torch's documented
contract; torch 2.13's default CPU kernel silently applies both).

Dropout: each tile ``(i, j)`` draws its keep-mask from its own generator, seeded from one base
seed (drawn from torch's default CPU generator, so ``torch.manual_seed`` makes a call
reproducible) and the tile's index; the backward pass regenerates the same masks. The masks
therefore differ from the ones ``torch.nn.functional.dropout`` would draw from the global RNG
stream, and depend on the block size, though each weight is still kept with probability
``1 - p`` and scaled by ``1 / (1 - p)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._validate import causal_alignment, check_sdpa_args, compute_dtype, query_groups

#: default (query rows, key rows) per tile: few, large tiles keep Python's per-op cost small;
#: long key blocks make the rescale of O (once per key block) rare. A float32 tile of scores is
#: ``B·H·B_q·B_k·4`` bytes, 16 MiB for 8 heads.
DEFAULT_BLOCK_SIZE = (1024, 512)
#: with ``is_causal`` smaller query blocks waste less of the tiles that straddle the diagonal
DEFAULT_CAUSAL_BLOCK_SIZE = (512, 512)
_NEG_INF = float("-inf")


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


@dataclass(frozen=True)
class _Plan:
    """Everything about one call that is not a tensor: sizes, scale, causal diagonal, tiles.

    Scores live as ``(N, G·B_q, B_k)`` tiles: ``N = prod(kv_batch)`` key/value heads, each
    shared by ``G`` query heads whose rows are stacked (``G = 1`` without GQA).
    """

    batch: tuple[int, ...]      # the scores' batch dims (..., Hq)
    kv_batch: tuple[int, ...]   # (..., Hkv) with GQA, else batch
    groups: int
    L: int
    S: int
    E: int
    Ev: int
    scale: float
    causal: bool
    d: int                      # key j visible to query i iff j <= i + d (causal)
    bq: int
    bk: int
    dropout_p: float
    seed: int
    dtype: torch.dtype
    work: torch.dtype

    @property
    def N(self) -> int:
        return math.prod(self.kv_batch)

    def blocks(self, n: int, b: int) -> list[tuple[int, int, int]]:
        return [(t, a, min(a + b, n)) for t, a in enumerate(range(0, n, b))]

    def past_diagonal(self, i1: int, j0: int) -> bool:
        """Every key from ``j0`` on is in the future of every query row below ``i1``."""
        return self.causal and j0 > i1 - 1 + self.d


def _plan(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, block_size):
    """Validate, resolve causal alignment and sizes; returns ``(plan, attn_mask or None)``."""
    check_sdpa_args(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    attn_mask, align = causal_alignment(query, key, attn_mask, is_causal)
    bq, bk = _block_sizes(block_size, align is not None)
    L, S, E, Ev = query.shape[-2], key.shape[-2], query.shape[-1], value.shape[-1]
    groups = query_groups(query, key, enable_gqa)
    if enable_gqa:
        outer = torch.broadcast_shapes(query.shape[:-3], key.shape[:-3], value.shape[:-3])
        kv_batch = (*outer, key.shape[-3])
        batch = (*outer, query.shape[-3])
    else:
        batch = kv_batch = tuple(torch.broadcast_shapes(query.shape[:-2], key.shape[:-2],
                                                        value.shape[:-2]))
    if E == 0:
        s = 1.0  # QKᵀ is an empty sum, all zeros, for any scale (torch: uniform weights, no NaN)
    else:
        s = 1.0 / math.sqrt(E) if scale is None else float(scale)
    seed = int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else 0
    plan = _Plan(tuple(batch), tuple(kv_batch), groups, L, S, E, Ev, s, align is not None,
                 S - L if align == "bottom_right" else 0, bq, bk, float(dropout_p), seed,
                 query.dtype, compute_dtype(query.dtype))
    return plan, attn_mask


def _operands(plan: _Plan, query, key, value):
    """``q = s·Q`` as ``(N, G, L, E)``, ``Kᵀ`` as ``(N, E, S)``, V as ``(N, S, Ev)``, in the
    compute dtype. Views of the inputs wherever their layout allows (K and V are never copied
    per query head)."""
    N, G, L, S = plan.N, plan.groups, plan.L, plan.S
    q = (query.to(plan.work) * plan.scale).expand(*plan.batch, L, plan.E).reshape(N, G, L, plan.E)
    kT = key.to(plan.work).expand(*plan.kv_batch, S, plan.E).reshape(N, S, plan.E).transpose(1, 2)
    v = value.to(plan.work).expand(*plan.kv_batch, S, plan.Ev).reshape(N, S, plan.Ev)
    return q, kT, v


def _grouped_mask(mask: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """A mask broadcastable to ``(*batch, L, S)`` viewed as ``(*kv_batch, G, L, S)``-broadcastable
    (a view: same storage, so gradients written into it land in the mask's own shape)."""
    full = len(plan.batch) + 2
    mask = mask.reshape((1,) * (full - mask.dim()) + tuple(mask.shape))
    if plan.groups > 1 and mask.shape[-3] > 1:
        return mask.unflatten(-3, (-1, plan.groups))
    return mask.unsqueeze(-3)


def _scores(plan: _Plan, q_i, kT, mask, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
    """The tile ``S_ij = s·Q_i K_jᵀ + M_ij`` as ``(N, G·B_q, B_k)`` (masked entries ``-inf``)."""
    S_ij = torch.bmm(q_i, kT[:, :, j0:j1])
    grid = S_ij.view(*plan.kv_batch, plan.groups, i1 - i0, j1 - j0)
    if plan.causal and j1 - 1 > i0 + plan.d:           # tile crosses the diagonal
        rows = torch.arange(i0, i1, device=S_ij.device)[:, None]
        cols = torch.arange(j0, j1, device=S_ij.device)
        grid.masked_fill_(cols > rows + plan.d, _NEG_INF)
    elif mask is not None:
        tile = _tile(mask, i0, i1, j0, j1)             # broadcasts over the batch dims
        if tile.dtype == torch.bool:
            grid.masked_fill_(tile.logical_not(), _NEG_INF)
        else:
            grid.add_(tile)
    return S_ij


def _dropout_scale(plan: _Plan, ti: int, tj: int, like: torch.Tensor) -> torch.Tensor:
    """Tile ``(ti, tj)``'s dropout factors: 0 (dropped, probability p) or ``1/(1-p)``, drawn from
    a generator seeded by the call's base seed and the tile index (regenerated in backward)."""
    gen = torch.Generator(device=like.device)
    gen.manual_seed((plan.seed + 0x9E3779B97F4A7C15 * (ti * (1 << 20) + tj + 1)) % (1 << 63))
    keep = torch.rand(like.shape, generator=gen, device=like.device, dtype=like.dtype)
    keep = keep >= plan.dropout_p
    return keep.to(like.dtype) * (0.0 if plan.dropout_p == 1.0 else 1.0 / (1.0 - plan.dropout_p))


def _forward_tiles(plan: _Plan, q, kT, v, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """Online softmax over the tiles: ``O`` as ``(N, G, L, Ev)`` and ``lse`` as ``(N, G, L, 1)``
    (``-inf`` for a row that sees no key). Differentiable by autograd, which then keeps every
    tile's P: the contrast path."""
    N, G = plan.N, plan.groups
    out = q.new_empty((N, G, plan.L, plan.Ev))
    lse = q.new_empty((N, G, plan.L, 1))
    may_be_dead = mask is not None or plan.d < 0       # a row may have seen no key yet
    for ti, i0, i1 in plan.blocks(plan.L, plan.bq):
        rows = G * (i1 - i0)
        q_i = q[:, :, i0:i1].reshape(N, rows, plan.E)   # the G heads' rows stacked
        m = q.new_full((N, rows, 1), _NEG_INF)          # m: running row max of the scores
        ell = q.new_zeros((N, rows, 1))                  # ℓ: running sum of e^{S - m}
        O = q.new_zeros((N, rows, plan.Ev))              # O: running sum of e^{S - m} V
        for tj, j0, j1 in plan.blocks(plan.S, plan.bk):
            if plan.past_diagonal(i1, j0):
                break                                    # every later key is in the future
            S_ij = _scores(plan, q_i, kT, mask, i0, i1, j0, j1)
            # m only stabilizes exp (the result does not depend on it): no gradient through it
            m_new = torch.maximum(m, S_ij.detach().amax(dim=-1, keepdim=True))
            m_sub = m_new.masked_fill(m_new == _NEG_INF, 0.0) if may_be_dead else m_new
            P_ij = S_ij.sub_(m_sub).exp_()               # e^{S - m_new}, in place
            alpha = torch.exp(m - m_sub)                 # e^{m - m_new} rescales old ℓ and O
            ell = alpha * ell + P_ij.sum(dim=-1, keepdim=True)  # ℓ keeps the undropped sum
            if plan.dropout_p > 0:
                P_ij = P_ij * _dropout_scale(plan, ti, tj, P_ij)
            O = O.mul_(alpha).baddbmm_(P_ij, v[:, j0:j1])  # O <- e^{m - m_new} O + P V
            m = m_new
            del S_ij, P_ij                               # free this tile before the next
        out[:, :, i0:i1] = (O / ell.masked_fill(ell == 0, 1.0)).view(N, G, i1 - i0, plan.Ev)
        lse[:, :, i0:i1] = (m + ell.detach().log()).view(N, G, i1 - i0, 1)  # dead row: -inf
    return out, lse


def _sum_to(t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum ``t`` over the dims where ``shape`` (same rank) broadcasts (has size 1)."""
    dims = [i for i, (a, b) in enumerate(zip(t.shape, shape, strict=True)) if b == 1 and a != 1]
    return t.sum(dim=dims, keepdim=True) if dims else t


def _backward_tiles(plan: _Plan, q, kT, v, mask, out, lse, dout, dmask):
    """dQ (unscaled by s), dK, dV tile by tile from the recomputed ``P = e^{S - lse}``;
    ``dmask`` (a grouped view, or None) accumulates ``dS`` for a float mask."""
    N, G = plan.N, plan.groups
    dq = q.new_zeros(q.shape)
    dk, dv = q.new_zeros((N, plan.S, plan.E)), q.new_zeros((N, plan.S, plan.Ev))
    lse = lse.masked_fill(lse == _NEG_INF, float("inf"))  # a dead row: P = e^{-inf} = 0
    D = (dout * out).sum(dim=-1, keepdim=True)            # D = rowsum(dO ∘ O) = rowsum(P ∘ dP)
    for ti, i0, i1 in plan.blocks(plan.L, plan.bq):
        rows = G * (i1 - i0)
        q_i = q[:, :, i0:i1].reshape(N, rows, plan.E)
        do_i = dout[:, :, i0:i1].reshape(N, rows, plan.Ev)
        lse_i = lse[:, :, i0:i1].reshape(N, rows, 1)
        D_i = D[:, :, i0:i1].reshape(N, rows, 1)
        dq_i = q.new_zeros((N, rows, plan.E))
        for tj, j0, j1 in plan.blocks(plan.S, plan.bk):
            if plan.past_diagonal(i1, j0):
                break
            P_ij = _scores(plan, q_i, kT, mask, i0, i1, j0, j1).sub_(lse_i).exp_()  # recomputed
            dP_ij = torch.bmm(do_i, v[:, j0:j1].transpose(1, 2))                  # dO_i V_jᵀ
            if plan.dropout_p > 0:
                keep = _dropout_scale(plan, ti, tj, P_ij)                         # same mask
                dv[:, j0:j1].baddbmm_((P_ij * keep).transpose(1, 2), do_i)
                dP_ij.mul_(keep)
            else:
                dv[:, j0:j1].baddbmm_(P_ij.transpose(1, 2), do_i)                 # Pᵀ dO
            dS_ij = P_ij.mul_(dP_ij.sub_(D_i))                                    # P ∘ (dP − D)
            dq_i.baddbmm_(dS_ij, kT[:, :, j0:j1].transpose(1, 2))                 # dS K
            dk[:, j0:j1].baddbmm_(dS_ij.transpose(1, 2), q_i)                     # dSᵀ (sQ)
            if dmask is not None:
                tile = _tile(dmask, i0, i1, j0, j1)
                grid = dS_ij.view(*plan.kv_batch, G, i1 - i0, j1 - j0)
                tile.add_(_sum_to(grid, tile.shape))
            del P_ij, dP_ij, dS_ij
        dq[:, :, i0:i1] = dq_i.view(N, G, i1 - i0, plan.E)
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """Tiled attention whose backward pass recomputes each tile's P from the saved lse.

    ``forward(query, key, value, attn_mask, plan)`` saves Q, K, V, the mask, O and the lse only;
    ``backward`` returns dQ, dK, dV and, for a float ``attn_mask``, its gradient dS (summed over
    the dims it broadcasts over). Use :func:`scaled_dot_product_attention`, which builds ``plan``.
    """

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, plan: _Plan):
        q, kT, v = _operands(plan, query, key, value)
        mask = None
        if attn_mask is not None:
            mask = _grouped_mask(attn_mask if attn_mask.dtype == torch.bool
                                 else attn_mask.to(plan.work), plan)
        out, lse = _forward_tiles(plan, q, kT, v, mask)
        ctx.plan = plan
        out = out.view(*plan.batch, plan.L, plan.Ev)          # (..., L, Ev)
        ctx.save_for_backward(query, key, value, attn_mask, out, lse.view(*plan.batch, plan.L))
        return out.to(plan.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        plan: _Plan = ctx.plan
        query, key, value, attn_mask, out, lse = ctx.saved_tensors
        out = out.reshape(plan.N, plan.groups, plan.L, plan.Ev)
        lse = lse.reshape(plan.N, plan.groups, plan.L, 1)
        q, kT, v = _operands(plan, query, key, value)
        mask = dmask_full = dmask = None
        if attn_mask is not None:
            mask = _grouped_mask(attn_mask if attn_mask.dtype == torch.bool
                                 else attn_mask.to(plan.work), plan)
            if ctx.needs_input_grad[3]:
                dmask_full = torch.zeros(attn_mask.shape, dtype=plan.work,
                                         device=attn_mask.device)
                dmask = _grouped_mask(dmask_full, plan)
        dout = grad_out.to(plan.work).expand(*plan.batch, plan.L, plan.Ev)
        dout = dout.reshape(plan.N, plan.groups, plan.L, plan.Ev)
        dq, dk, dv = _backward_tiles(plan, q, kT, v, mask, out, lse, dout, dmask)
        dq = (dq * plan.scale).view(*plan.batch, plan.L, plan.E)
        dk = dk.view(*plan.kv_batch, plan.S, plan.E)
        dv = dv.view(*plan.kv_batch, plan.S, plan.Ev)
        grads = [g.sum_to_size(t.shape).to(t.dtype) if need else None
                 for g, t, need in zip((dq, dk, dv), (query, key, value),
                                       ctx.needs_input_grad[:3], strict=True)]
        if dmask_full is not None:
            dmask_full = dmask_full.to(attn_mask.dtype)
        return (*grads, dmask_full, None)


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
    ``attn_mask``: bool (True = may attend), additive float (differentiable), or a
    ``torch.nn.attention.bias`` causal bias, whose variant sets the causal diagonal (no
    ``(L, S)`` mask is built when its lengths are the inputs'); ``attn_mask`` with
    ``is_causal=True`` raises ``ValueError``. The backward pass recomputes each tile's P from
    the saved log-sum-exp (:class:`FlashAttentionFunction`): a training step holds no ``(L, S)``
    tensor either. ``dropout_p > 0``: per-tile dropout masks from a per-call seed (see the
    module docstring: not torch's RNG stream).
    """
    plan, attn_mask = _plan(query, key, value, attn_mask, dropout_p, is_causal, scale,
                            enable_gqa, block_size)
    return FlashAttentionFunction.apply(query, key, value, attn_mask, plan)


def tile_autograd_attention(
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
    """The same tiled forward pass with gradients left to ordinary autograd (for contrast).

    Same arguments and result as :func:`scaled_dot_product_attention` (same dropout masks for
    the same seed), but autograd keeps every tile ``P_ij`` for the backward pass: ``O(L·S)``
    memory in a training step, what FlashAttention's recomputation avoids.
    """
    plan, attn_mask = _plan(query, key, value, attn_mask, dropout_p, is_causal, scale,
                            enable_gqa, block_size)
    q, kT, v = _operands(plan, query, key, value)
    mask = None
    if attn_mask is not None:
        mask = _grouped_mask(attn_mask if attn_mask.dtype == torch.bool
                             else attn_mask.to(plan.work), plan)
    out, _ = _forward_tiles(plan, q, kT, v, mask)
    if plan.L == 0 or plan.S == 0:  # no tile ran: link the inputs to autograd (zero gradients)
        out = out + sum(t.narrow(-1, 0, 0).sum().to(plan.work) for t in (query, key, value))
    return out.view(*plan.batch, plan.L, plan.Ev).to(plan.dtype)
