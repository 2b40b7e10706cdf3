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
dimensions; ``attn_mask`` with ``is_causal=True`` is refused as torch's math kernel refuses it
(torch 2.13's default CPU kernel silently applies both).

Dropout: exactly torch's math backend. ``at::dropout`` draws a keep-mask over the whole
``(..., L, S)`` weight tensor, one generator number per weight in row-major order
(``bernoulli_(1 - p)`` on the CPU). :func:`_plan` records the generator's state where each query
head's ``(L, S)`` stretch of that stream begins (advancing the generator past it, as torch's
draw does); each query-row block then draws its ``(B_q, S)`` rows of every head from those
states, and the backward pass replays the same blocks. Same generator state, same mask, same
result as torch's math kernel, with ``O(B_q·S)`` memory per head instead of ``O(L·S)``
(on the CPU; on other devices the masks are as consistent, but torch's fused dropout draws them
differently).

torch.func: :class:`FlashAttentionFunction` has the ``setup_context`` form, a generated vmap rule
(every op in the forward and backward batches), a ``jvp`` (forward mode, one more tiled pass) and
a backward written in differentiable ops, so ``vmap``, ``grad``, ``jacrev``, ``jacfwd``,
``hessian`` and double backward work, as they do for torch's math kernel.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from ._validate import (
    causal_alignment,
    check_sdpa_args,
    compute_dtype,
    query_groups,
    uneven_gqa,
)

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
    if mask.shape[-2] > 1:
        mask = _cut(mask, -2, i0, i1)
    return _cut(mask, -1, j0, j1) if mask.shape[-1] > 1 else mask


def _in_place_ok(*tensors: torch.Tensor | None) -> bool:
    """Whether the tiles may be updated in place: no autograd graph is being recorded (the
    contrast path, a double backward) and no ``torch.func`` transform, nor the vmap of batched
    gradients, wraps an operand (writing a batched value into a plain tensor fails)."""
    if torch.is_grad_enabled():
        return False
    ft = torch._C._functorch
    return not any(t is not None and (ft.is_functorch_wrapped_tensor(t)
                                      or ft.is_legacy_batchedtensor(t)) for t in tensors)


def _cut(t: torch.Tensor, dim: int, a: int, b: int) -> torch.Tensor:
    """``t`` restricted to ``a:b`` along ``dim``, by ``narrow``: indexing with a slice that covers
    the whole dim returns ``aten::alias``, which the vmap of batched gradients cannot batch."""
    return t.narrow(dim, a, b - a)


@dataclass(frozen=True)
class _Plan:
    """Everything about one call that is not a tensor's values: sizes, scale, causal diagonal,
    tiles, and where each query head's dropout stream starts.

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
    dropout_p: float            # 0 when torch would not drop (p <= 0, NaN, or no weights)
    dtype: torch.dtype
    work: torch.dtype
    device: torch.device
    rng_states: tuple[torch.Tensor, ...] = ()  # per query head h = n·G + g (dropout only)

    @property
    def N(self) -> int:
        return math.prod(self.kv_batch)

    def blocks(self, n: int, b: int) -> list[tuple[int, int, int]]:
        return [(t, a, min(a + b, n)) for t, a in enumerate(range(0, n, b))]

    def past_diagonal(self, i1: int, j0: int) -> bool:
        """Every key from ``j0`` on is in the future of every query row below ``i1``."""
        return self.causal and j0 > i1 - 1 + self.d


def _default_generator(device: torch.device) -> torch.Generator:
    """The generator torch's dropout draws from on ``device``."""
    if device.type == "cpu":
        return torch.default_generator
    module = getattr(torch, device.type)
    return module.default_generators[device.index if device.index is not None
                                     else module.current_device()]


def _dropout_states(heads: int, L: int, S: int, p: float, device, bq: int
                    ) -> tuple[torch.Tensor, ...]:
    """The generator's state at the start of each query head's ``L·S`` stretch of torch's
    dropout stream; leaves the generator where torch's one ``(heads, L, S)`` draw leaves it.
    Skips a stretch ``B_q·S`` numbers at a time (the size of one block's draw)."""
    gen = _default_generator(device)
    states = []
    for _ in range(heads):
        states.append(gen.get_state())
        left = L * S
        while left > 0:                 # one number per weight: draw this head's and drop them
            n = min(left, bq * S)
            torch.empty(n, dtype=torch.bool, device=device).bernoulli_(1 - p, generator=gen)
            left -= n
    return tuple(states)


def _plan(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, block_size):
    """Validate, resolve causal alignment and sizes; returns ``(plan, attn_mask or None, key,
    value)`` (key and value repeated to the query heads only for GQA with Hk != Hv)."""
    check_sdpa_args(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    key, value, enable_gqa = uneven_gqa(query, key, value, enable_gqa)
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
    heads = math.prod(batch)
    # torch's at::dropout draws nothing for p <= 0 (or NaN), for p = 1 (it multiplies by 0),
    # and for an empty weight tensor
    p = float(dropout_p) if dropout_p > 0 and heads * L * S > 0 else 0.0
    states = _dropout_states(heads, L, S, p, query.device, bq) if 0 < p < 1 else ()
    plan = _Plan(tuple(batch), tuple(kv_batch), groups, L, S, E, Ev, s, align is not None,
                 S - L if align == "bottom_right" else 0, bq, bk, p, query.dtype,
                 compute_dtype(query.dtype), query.device, states)
    return plan, attn_mask, key, value


@contextlib.contextmanager
def _outside_functorch():
    """A context in which vmap (torch.func's, or autograd's batched gradients) neither batches
    nor checks randomness: the dropout mask is a replay, the same for every batch element."""
    with contextlib.ExitStack() as stack:
        if hasattr(torch._C, "_DisableFuncTorch"):
            stack.enter_context(torch._C._DisableFuncTorch())
        stack.enter_context(_outside_legacy_vmap())
        yield


@contextlib.contextmanager
def _outside_legacy_vmap():
    """Leave the vmap of ``torch.autograd.grad(..., is_grads_batched=True)`` (gradcheck's
    batched gradients): its ``VmapMode`` nesting is thread-local, set back on exit."""
    inc = getattr(torch._C, "_vmapmode_increment_nesting", None)
    dec = getattr(torch._C, "_vmapmode_decrement_nesting", None)
    if inc is None or dec is None:
        yield
        return
    depth = inc() - 1                                    # the level we are at
    dec()
    for _ in range(depth):
        dec()
    try:
        yield
    finally:
        for _ in range(depth):
            inc()


class _Dropout:
    """Dropout factors, 0 or ``1/(1-p)``, of the weights ``(N, G·B_q, S)`` of one query-row
    block: each query head's rows drawn from its own stretch of torch's stream, in order."""

    def __init__(self, plan: _Plan):
        self.plan = plan
        self.gens = []
        for state in plan.rng_states:
            gen = torch.Generator(device=plan.device)
            gen.set_state(state)
            self.gens.append(gen)

    def rows(self, i0: int, i1: int) -> torch.Tensor | None:
        """The keep-mask (bool) of rows ``i0:i1`` of every head, as ``(N, G·(i1-i0), S)``; the
        generators move on to the next block. ``None`` for p = 1 (every weight dropped)."""
        plan = self.plan
        if not self.gens:
            return None
        # a replay of numbers drawn in _plan, not a fresh random draw: a plain tensor even when
        # vmap runs this (gradcheck's batched gradients vmap the backward)
        with _outside_functorch():
            keep = torch.empty((len(self.gens), i1 - i0, plan.S), dtype=torch.bool,
                               device=plan.device)
            for h, gen in enumerate(self.gens):
                keep[h].bernoulli_(1 - plan.dropout_p, generator=gen)
        return keep.view(plan.N, plan.groups * (i1 - i0), plan.S)

    def factors(self, keep: torch.Tensor | None, j0: int, j1: int, like: torch.Tensor):
        """The tile's factors ``keep / (1 - p)`` in ``like``'s dtype (all 0 for p = 1)."""
        if keep is None:
            return torch.zeros((), dtype=like.dtype, device=like.device)
        return _cut(keep, 2, j0, j1).to(like.dtype) * (1.0 / (1.0 - self.plan.dropout_p))


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
    (a view, so its gradient, computed in this shape, reshapes back to the mask's)."""
    full = len(plan.batch) + 2
    mask = mask.reshape((1,) * (full - mask.dim()) + tuple(mask.shape))
    if plan.groups > 1 and mask.shape[-3] > 1:
        return mask.unflatten(-3, (-1, plan.groups))
    return mask.unsqueeze(-3)


def _mask_operand(attn_mask, plan: _Plan):
    if attn_mask is None:
        return None
    return _grouped_mask(attn_mask if attn_mask.dtype == torch.bool
                         else attn_mask.to(plan.work), plan)


def _grid(plan: _Plan, t: torch.Tensor, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
    """A tile ``(N, G·B_q, B_k)`` seen as ``(*kv_batch, G, B_q, B_k)``, the masks' layout."""
    return t.reshape(*plan.kv_batch, plan.groups, i1 - i0, j1 - j0)


def _scores(plan: _Plan, q_i, kT, mask, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
    """The tile ``S_ij = s·Q_i K_jᵀ + M_ij`` as ``(N, G·B_q, B_k)`` (masked entries ``-inf``)."""
    S_ij = torch.bmm(q_i, _cut(kT, 2, j0, j1))
    if plan.causal and j1 - 1 > i0 + plan.d:           # tile crosses the diagonal
        rows = torch.arange(i0, i1, device=S_ij.device)[:, None]
        cols = torch.arange(j0, j1, device=S_ij.device)
        grid = _grid(plan, S_ij, i0, i1, j0, j1).masked_fill(cols > rows + plan.d, _NEG_INF)
    elif mask is not None:
        tile = _tile(mask, i0, i1, j0, j1)             # broadcasts over the batch dims
        grid = _grid(plan, S_ij, i0, i1, j0, j1)
        grid = grid.masked_fill(tile.logical_not(), _NEG_INF) if tile.dtype == torch.bool \
            else grid + tile
    else:
        return S_ij
    return grid.reshape(S_ij.shape)


def _forward_tiles(plan: _Plan, q, kT, v, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """Online softmax over the tiles: ``O`` as ``(N, G, L, Ev)`` and ``lse`` as ``(N, G, L, 1)``
    (``-inf`` for a row that sees no key). Out-of-place updates, so that autograd (the contrast
    path, double backward) and vmap follow every step; (*) the one in-place step, ``S - m``
    then ``exp``, writes into the fresh tile S, which no gradient needs and which vmap batches
    whenever ``m`` is batched (m comes from S): a tile less at the peak."""
    N, G = plan.N, plan.groups
    drop = _Dropout(plan) if plan.dropout_p > 0 else None
    may_be_dead = mask is not None or plan.d < 0       # a row may have seen no key yet
    in_place = _in_place_ok(q, kT, v, mask)            # plain tensors, no graph: update O in place
    outs, lses = [], []
    for _, i0, i1 in plan.blocks(plan.L, plan.bq):
        rows = G * (i1 - i0)
        q_i = _cut(q, 2, i0, i1).reshape(N, rows, plan.E)   # the G heads' rows stacked
        keep = drop.rows(i0, i1) if drop is not None else None
        m = q.new_full((N, rows, 1), _NEG_INF)          # m: running row max of the scores
        ell = q.new_zeros((N, rows, 1))                  # ℓ: running sum of e^{S - m}
        O = q.new_zeros((N, rows, plan.Ev))              # O: running sum of e^{S - m} V
        for _, j0, j1 in plan.blocks(plan.S, plan.bk):
            if plan.past_diagonal(i1, j0):
                break                                    # every later key is in the future
            S_ij = _scores(plan, q_i, kT, mask, i0, i1, j0, j1)
            # m only stabilizes exp (the result does not depend on it): no gradient through it
            m_new = torch.maximum(m, S_ij.detach().amax(dim=-1, keepdim=True))
            m_sub = m_new.masked_fill(m_new == _NEG_INF, 0.0) if may_be_dead else m_new
            P_ij = S_ij.sub_(m_sub).exp_()               # e^{S - m_new}, in place (*)
            alpha = torch.exp(m - m_sub)                 # e^{m - m_new} rescales old ℓ and O
            ell = alpha * ell + P_ij.sum(dim=-1, keepdim=True)  # ℓ keeps the undropped sum
            if drop is not None:
                P_ij = P_ij * drop.factors(keep, j0, j1, P_ij)
            if in_place:                                 # O <- e^{m - m_new} O + P V
                O = O.mul_(alpha).baddbmm_(P_ij, _cut(v, 1, j0, j1))
            else:
                O = torch.baddbmm(O * alpha, P_ij, _cut(v, 1, j0, j1))
            m = m_new
            del S_ij, P_ij                               # free this tile before the next
        outs.append((O / ell.masked_fill(ell == 0, 1.0)).reshape(N, G, i1 - i0, plan.Ev))
        lses.append((m + ell.detach().log()).reshape(N, G, i1 - i0, 1))  # dead row: -inf
    if not outs:                                         # L = 0
        return q.new_zeros((N, G, 0, plan.Ev)), q.new_zeros((N, G, 0, 1))
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)


def _sum_to(t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum ``t`` over the dims where ``shape`` (same rank) broadcasts (has size 1)."""
    dims = [i for i, (a, b) in enumerate(zip(t.shape, shape, strict=True)) if b == 1 and a != 1]
    return t.sum(dim=dims, keepdim=True) if dims else t


def _add(acc: torch.Tensor | None, t: torch.Tensor) -> torch.Tensor:
    return t if acc is None else acc + t


def _add_in_place(acc: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``acc + a @ b``, accumulated into ``acc`` (a fresh product the first time)."""
    return torch.bmm(a, b) if acc is None else acc.baddbmm_(a, b)


def _backward_tiles(plan: _Plan, q, kT, v, mask, out, lse, dout, dlse, need_dmask: bool):
    """dQ (unscaled by s), dK, dV tile by tile from the recomputed ``P = e^{S - lse}``, and, when
    ``need_dmask``, a float mask's gradient ``dS`` in the grouped mask's shape. ``dlse`` is the
    gradient reaching the log-sum-exp (double backward): ``dS += P ∘ dlse``. Out-of-place ops
    only when the backward must itself be differentiable or batch under vmap; in place (no tile
    allocated for dP ∘ ..., accumulators updated where they are) otherwise."""
    N, G = plan.N, plan.groups
    drop = _Dropout(plan) if plan.dropout_p > 0 else None
    in_place = _in_place_ok(q, kT, v, mask, out, lse, dout, dlse)
    lse = lse.masked_fill(lse == _NEG_INF, float("inf"))  # a dead row: P = e^{-inf} = 0
    D = (dout * out).sum(dim=-1, keepdim=True) - dlse     # rowsum(dO ∘ O) = rowsum(P ∘ dP)
    dq_blocks: list[torch.Tensor] = []
    dk_blocks: list[torch.Tensor | None] = [None] * len(plan.blocks(plan.S, plan.bk))
    dv_blocks: list[torch.Tensor | None] = list(dk_blocks)
    dmask = None
    m_rows, m_cols = (mask.shape[-2] > 1, mask.shape[-1] > 1) if need_dmask else (True, True)
    for _, i0, i1 in plan.blocks(plan.L, plan.bq):
        rows = G * (i1 - i0)
        q_i = _cut(q, 2, i0, i1).reshape(N, rows, plan.E)
        do_i = _cut(dout, 2, i0, i1).reshape(N, rows, plan.Ev)
        lse_i = _cut(lse, 2, i0, i1).reshape(N, rows, 1)
        D_i = _cut(D, 2, i0, i1).reshape(N, rows, 1)
        keep = drop.rows(i0, i1) if drop is not None else None
        dq_i = q.new_zeros((N, rows, plan.E))
        dmask_row = []                                   # this row block's mask gradient
        for tj, j0, j1 in plan.blocks(plan.S, plan.bk):
            if plan.past_diagonal(i1, j0):
                break                                    # (never with a float mask)
            P_ij = _scores(plan, q_i, kT, mask, i0, i1, j0, j1).sub_(lse_i).exp_()  # recomputed
            dP_ij = torch.bmm(do_i, _cut(v, 1, j0, j1).transpose(1, 2))  # dO_i V_jᵀ
            factors = drop.factors(keep, j0, j1, P_ij) if drop is not None else None  # same mask
            PD = P_ij if factors is None else P_ij * factors                      # dropped P
            if in_place:
                dv_blocks[tj] = _add_in_place(dv_blocks[tj], PD.transpose(1, 2), do_i)
                del PD
                if factors is not None:
                    dP_ij.mul_(factors)
                dS_ij = P_ij.mul_(dP_ij.sub_(D_i))                                # P ∘ (dP − D)
                dq_i.baddbmm_(dS_ij, _cut(kT, 2, j0, j1).transpose(1, 2))         # dS K
                dk_blocks[tj] = _add_in_place(dk_blocks[tj], dS_ij.transpose(1, 2), q_i)
            else:
                dv_blocks[tj] = _add(dv_blocks[tj], torch.bmm(PD.transpose(1, 2), do_i))
                del PD
                if factors is not None:
                    dP_ij = dP_ij * factors
                dS_ij = P_ij * (dP_ij - D_i)                                      # P ∘ (dP − D)
                dq_i = torch.baddbmm(dq_i, dS_ij, _cut(kT, 2, j0, j1).transpose(1, 2))  # dS K
                dk_blocks[tj] = _add(dk_blocks[tj], torch.bmm(dS_ij.transpose(1, 2), q_i))
            if need_dmask:
                tile_shape = _tile(mask, i0, i1, j0, j1).shape
                part = _sum_to(_grid(plan, dS_ij, i0, i1, j0, j1), tile_shape)
                if m_cols or not dmask_row:
                    dmask_row.append(part)
                else:
                    dmask_row[0] = dmask_row[0] + part   # a mask of one column: sum the tiles
            del P_ij, dP_ij, dS_ij
        dq_blocks.append(dq_i.reshape(N, G, i1 - i0, plan.E))
        if need_dmask and dmask_row:
            row = torch.cat(dmask_row, dim=-1) if m_cols else dmask_row[0]
            dmask = row if dmask is None else (torch.cat([dmask, row], dim=-2) if m_rows
                                               else dmask + row)
    dq = torch.cat(dq_blocks, dim=2) if dq_blocks else q.new_zeros(q.shape)
    dk = torch.cat([b if b is not None else q.new_zeros((N, j1 - j0, plan.E))
                    for b, (_, j0, j1) in zip(dk_blocks, plan.blocks(plan.S, plan.bk),
                                              strict=True)], dim=1) \
        if dk_blocks else q.new_zeros((N, 0, plan.E))
    dv = torch.cat([b if b is not None else q.new_zeros((N, j1 - j0, plan.Ev))
                    for b, (_, j0, j1) in zip(dv_blocks, plan.blocks(plan.S, plan.bk),
                                              strict=True)], dim=1) \
        if dv_blocks else q.new_zeros((N, 0, plan.Ev))
    if need_dmask and dmask is None:                     # L = 0 or S = 0: no tile ran
        dmask = mask.new_zeros(mask.shape)
    return dq, dk, dv, dmask


def _jvp_tiles(plan: _Plan, q, kT, v, mask, out, lse, tq, tkT, tv, tmask):
    """Forward mode: the tangent of O from tangents of s·Q, Kᵀ, V and a float mask (any may be
    None), in one tiled pass over the recomputed ``P = e^{S - lse}``:
    ``dS = dq Kᵀ + q dKᵀ + dM``, ``c = rowsum(P ∘ dS)`` (= dlse),
    ``dO = Σ_j (P ∘ Δ ∘ dS) V_j + (P ∘ Δ) dV_j − c O`` with Δ the dropout factors."""
    N, G = plan.N, plan.groups
    drop = _Dropout(plan) if plan.dropout_p > 0 else None
    lse = lse.masked_fill(lse == _NEG_INF, float("inf"))
    douts, dlses = [], []
    for _, i0, i1 in plan.blocks(plan.L, plan.bq):
        rows = G * (i1 - i0)
        q_i = _cut(q, 2, i0, i1).reshape(N, rows, plan.E)
        tq_i = _cut(tq, 2, i0, i1).reshape(N, rows, plan.E) if tq is not None else None
        lse_i = _cut(lse, 2, i0, i1).reshape(N, rows, 1)
        keep = drop.rows(i0, i1) if drop is not None else None
        X = q.new_zeros((N, rows, plan.Ev))
        c = q.new_zeros((N, rows, 1))
        for _, j0, j1 in plan.blocks(plan.S, plan.bk):
            if plan.past_diagonal(i1, j0):
                break
            P_ij = _scores(plan, q_i, kT, mask, i0, i1, j0, j1).sub_(lse_i).exp_()
            dS_ij = P_ij.new_zeros(P_ij.shape)
            if tq_i is not None:
                dS_ij = dS_ij + torch.bmm(tq_i, _cut(kT, 2, j0, j1))
            if tkT is not None:
                dS_ij = dS_ij + torch.bmm(q_i, _cut(tkT, 2, j0, j1))
            if tmask is not None:                        # the mask tile, broadcast like M
                grid = _grid(plan, dS_ij, i0, i1, j0, j1)
                dS_ij = (grid + _tile(tmask, i0, i1, j0, j1)).reshape(P_ij.shape)
            PdS = P_ij * dS_ij                           # masked: P = 0, dS finite
            c = c + PdS.sum(dim=-1, keepdim=True)
            PD = P_ij
            if drop is not None:
                factors = drop.factors(keep, j0, j1, P_ij)
                PdS, PD = PdS * factors, P_ij * factors
            X = torch.baddbmm(X, PdS, _cut(v, 1, j0, j1))
            if tv is not None:
                X = torch.baddbmm(X, PD, _cut(tv, 1, j0, j1))
        O_i = _cut(out, 2, i0, i1).reshape(N, rows, plan.Ev)
        douts.append((X - c * O_i).reshape(N, G, i1 - i0, plan.Ev))
        dlses.append(c.reshape(N, G, i1 - i0, 1))
    if not douts:
        return q.new_zeros((N, G, 0, plan.Ev)), q.new_zeros((N, G, 0, 1))
    return torch.cat(douts, dim=2), torch.cat(dlses, dim=2)


def _tangent(plan: _Plan, t, kind: str):
    """A tangent (or None) of query, key or value in the layout ``_operands`` gives its
    primal."""
    if t is None:
        return None
    N, G, L, S = plan.N, plan.groups, plan.L, plan.S
    t = t.to(plan.work)
    if kind == "q":
        return (t * plan.scale).expand(*plan.batch, L, plan.E).reshape(N, G, L, plan.E)
    if kind == "k":
        return t.expand(*plan.kv_batch, S, plan.E).reshape(N, S, plan.E).transpose(1, 2)
    return t.expand(*plan.kv_batch, S, plan.Ev).reshape(N, S, plan.Ev)


class FlashAttentionFunction(torch.autograd.Function):
    """Tiled attention whose backward pass recomputes each tile's P from the saved lse.

    ``forward(query, key, value, attn_mask, plan)`` returns ``(O, lse)``: O ``(..., L, Ev)`` in
    the compute dtype and the log-sum-exp ``(..., L)``; it saves Q, K, V, the mask, O and the
    lse only. ``backward`` returns dQ, dK, dV and, for a float ``attn_mask``, its gradient dS
    (summed over the dims it broadcasts over); ``jvp`` the tangents of O and lse. Written in
    batchable, differentiable torch ops: ``generate_vmap_rule``, double backward and
    ``torch.func`` transforms work. Use :func:`scaled_dot_product_attention`, which builds
    ``plan``.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(query, key, value, attn_mask, plan: _Plan):
        q, kT, v = _operands(plan, query, key, value)
        out, lse = _forward_tiles(plan, q, kT, v, _mask_operand(attn_mask, plan))
        return out.reshape(*plan.batch, plan.L, plan.Ev), lse.reshape(*plan.batch, plan.L)

    @staticmethod
    def setup_context(ctx, inputs, output):
        query, key, value, attn_mask, plan = inputs
        out, lse = output
        ctx.plan = plan
        ctx.save_for_backward(query, key, value, attn_mask, out, lse)
        ctx.save_for_forward(query, key, value, attn_mask, out, lse)

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        plan: _Plan = ctx.plan
        query, key, value, attn_mask, out, lse = ctx.saved_tensors
        N, G, L = plan.N, plan.groups, plan.L
        q, kT, v = _operands(plan, query, key, value)
        mask = _mask_operand(attn_mask, plan)
        need_dmask = attn_mask is not None and ctx.needs_input_grad[3]
        dout = grad_out.to(plan.work).expand(*plan.batch, L, plan.Ev).reshape(N, G, L, plan.Ev)
        dlse = grad_lse.to(plan.work).expand(*plan.batch, L).reshape(N, G, L, 1)
        dq, dk, dv, dmask = _backward_tiles(plan, q, kT, v, mask, out.reshape(N, G, L, plan.Ev),
                                            lse.reshape(N, G, L, 1), dout, dlse, need_dmask)
        dq = (dq * plan.scale).reshape(*plan.batch, L, plan.E)
        dk = dk.reshape(*plan.kv_batch, plan.S, plan.E)
        dv = dv.reshape(*plan.kv_batch, plan.S, plan.Ev)
        grads = [g.sum_to_size(t.shape).to(t.dtype) if need else None
                 for g, t, need in zip((dq, dk, dv), (query, key, value),
                                       ctx.needs_input_grad[:3], strict=True)]
        if need_dmask:
            dmask = dmask.expand(mask.shape).reshape(attn_mask.shape).to(attn_mask.dtype)
        return (*grads, dmask, None)

    @staticmethod
    def jvp(ctx, tq, tk, tv, tmask, _plan_tangent):
        plan: _Plan = ctx.plan
        query, key, value, attn_mask, out, lse = ctx.saved_tensors
        N, G, L = plan.N, plan.groups, plan.L
        q, kT, v = _operands(plan, query, key, value)
        tmask = _mask_operand(tmask, plan) if attn_mask is not None and \
            attn_mask.dtype != torch.bool else None
        dout, dlse = _jvp_tiles(plan, q, kT, v, _mask_operand(attn_mask, plan),
                                out.reshape(N, G, L, plan.Ev), lse.reshape(N, G, L, 1),
                                _tangent(plan, tq, "q"), _tangent(plan, tk, "k"),
                                _tangent(plan, tv, "v"), tmask)
        return dout.reshape(out.shape), dlse.reshape(lse.shape)


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
    ``is_causal=True`` is refused, as torch's math kernel refuses it. The backward pass
    recomputes each tile's P from the saved log-sum-exp (:class:`FlashAttentionFunction`): a
    training step holds no ``(L, S)`` tensor either. ``dropout_p > 0``: torch's math-backend
    dropout mask from the same generator state, drawn one query-row block at a time (see the
    module docstring).
    """
    plan, attn_mask, key, value = _plan(query, key, value, attn_mask, dropout_p, is_causal,
                                        scale, enable_gqa, block_size)
    out, _ = FlashAttentionFunction.apply(query, key, value, attn_mask, plan)
    return out.to(plan.dtype)


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
    the same generator state), but autograd keeps every tile ``P_ij`` for the backward pass:
    ``O(L·S)`` memory in a training step, what FlashAttention's recomputation avoids.
    """
    plan, attn_mask, key, value = _plan(query, key, value, attn_mask, dropout_p, is_causal,
                                        scale, enable_gqa, block_size)
    q, kT, v = _operands(plan, query, key, value)
    out, _ = _forward_tiles(plan, q, kT, v, _mask_operand(attn_mask, plan))
    if plan.L == 0 or plan.S == 0:  # no tile ran: link the inputs to autograd (zero gradients)
        out = out + sum(t.narrow(-1, 0, 0).sum().to(plan.work) for t in (query, key, value))
    return out.reshape(*plan.batch, plan.L, plan.Ev).to(plan.dtype)
