r"""Attention over a sequence split across processes: ring attention and Ulysses (all-to-all).

Each of the ``W`` ranks of a ``torch.distributed`` process group holds one shard of the sequence:
query, key and value ``(..., L/W, E)``. Both methods return each rank's shard of the output of
attention over the *whole* sequence, equal to single-process attention.

**Ring attention** {Liu et al. 2023}: K/V shards travel round the ring (rank ``r`` sends to
``r+1`` and receives from ``r-1``, ``batch_isend_irecv``) while each rank attends its queries to
the shard it holds; the partial results merge exactly by log-sum-exp (:func:`merge_partials`).
At step ``t`` rank ``r`` holds the K/V of rank ``(r - t) mod W``. The backward pass
(:class:`RingAttentionFunction`) sends the K/V shards round again with dK/dV accumulators beside
them, recomputing each block's ``P = e^{S - lse}`` from the saved lse as the Flash chapter's
backward does; after ``W`` hops every accumulator is home.

Causal masking and the **zigzag** layout {Brandon et al. 2023 stripe; the zigzag of ring-flash-
attention and Llama 3's context parallelism}: the sequence is cut into ``2W`` chunks and rank
``r`` holds chunks ``r`` and ``2W-1-r``, so every rank owns one early and one late chunk and
does the same causal work (``"contiguous"``: rank ``r`` holds chunk ``r`` and the last rank does
``W`` times the first's). :func:`ring_schedule` says which chunk pairs each rank computes.

**Ulysses** {Jacobs et al. 2023}: an all-to-all turns sequence shards ``(B, H, L/W, E)`` into
head shards ``(B, H/W, L, E)``, each rank attends its ``H/W`` heads over the whole sequence (any
of the course's implementations), and a second all-to-all turns the result back. Needs ``H``
divisible by ``W``.

Arguments are checked SDPA-style on every rank and then compared across ranks (one small
``all_gather_object``), so a bad call raises the same clear ``ValueError``/``TypeError`` on every
rank instead of hanging one of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ._validate import check_sdpa_args, compute_dtype
from .merge import merge_partials, partial_attention

LAYOUTS = ("contiguous", "zigzag")
_NEG_INF = float("-inf")


# --------------------------------------------------------------------------- layout, schedule


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def chunks_per_rank(layout: str) -> int:
    """Sequence chunks each rank holds: 1 (contiguous) or 2 (zigzag)."""
    _check_layout(layout)
    return 1 if layout == "contiguous" else 2


def chunk_ids(rank: int, world: int, layout: str = "contiguous") -> tuple[int, ...]:
    """The global chunk indices rank ``rank`` holds, in order: ``(r,)`` of ``W`` chunks
    (contiguous) or ``(r, 2W-1-r)`` of ``2W`` chunks (zigzag)."""
    _check_layout(layout)
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, world) = [0, {world}), got {rank}")
    return (rank,) if layout == "contiguous" else (rank, 2 * world - 1 - rank)


def _check_divisible(length: int, world: int, layout: str, what: str = "the sequence") -> int:
    n = world * chunks_per_rank(layout)
    if world < 1:
        raise ValueError(f"world (the number of ranks) must be >= 1, got {world}")
    if length % n:
        raise ValueError(f"{what} length {length} is not divisible by {n} chunks "
                         f"({world} ranks, layout {layout!r})")
    return length // n


def shard_sequence(x: torch.Tensor, rank: int, world: int, layout: str = "contiguous",
                   dim: int = -2) -> torch.Tensor:
    """Rank ``rank``'s shard of ``x`` along ``dim`` (the sequence): ``(..., L/W, E)``.

    Contiguous: chunk ``r`` of ``W``; zigzag: chunks ``r`` and ``2W-1-r`` of ``2W``, concatenated.
    """
    c = _check_divisible(x.shape[dim], world, layout)
    parts = [x.narrow(dim, i * c, c) for i in chunk_ids(rank, world, layout)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=dim)


def unshard_sequence(shards: list[torch.Tensor], layout: str = "contiguous",
                     dim: int = -2) -> torch.Tensor:
    """Inverse of :func:`shard_sequence`: the full sequence from the shards of ranks 0..W-1."""
    world = len(shards)
    n = chunks_per_rank(layout)
    pieces: dict[int, torch.Tensor] = {}
    for r, shard in enumerate(shards):
        c = _check_divisible(shard.shape[dim], 1, layout, what="a shard's")
        for i, chunk in enumerate(chunk_ids(r, world, layout)):
            pieces[chunk] = shard.narrow(dim, i * c, c)
    return torch.cat([pieces[i] for i in range(world * n)], dim=dim)


@dataclass(frozen=True)
class BlockPair:
    """Queries of global chunk ``q_chunk`` against keys of ``k_chunk``: ``kind`` is ``"full"``
    (every key visible), ``"diagonal"`` (the same chunk: a causal mask) or ``"skipped"``
    (every key in the future: not computed)."""

    q_chunk: int
    k_chunk: int
    kind: str


def _pair_kind(a: int, b: int, is_causal: bool) -> str:
    if not is_causal or b < a:
        return "full"
    return "diagonal" if a == b else "skipped"


@dataclass(frozen=True)
class RingStep:
    """What rank ``rank`` does at ring step ``step``: attends to the K/V of ``source``."""

    step: int
    rank: int
    source: int
    pairs: tuple[BlockPair, ...]

    @property
    def computed(self) -> int:
        """Block pairs computed (a diagonal one counts whole: it is computed, then masked)."""
        return sum(p.kind != "skipped" for p in self.pairs)


def ring_schedule(world: int, *, is_causal: bool = False, layout: str = "contiguous"
                  ) -> list[list[RingStep]]:
    """``schedule[t][r]``: rank ``r`` at step ``t`` holds the K/V of rank ``(r - t) mod W`` and
    computes these chunk pairs (the exact plan :func:`ring_attention` follows)."""
    if world < 1:
        raise ValueError(f"world (the number of ranks) must be >= 1, got {world}")
    steps = []
    for t in range(world):
        row = []
        for r in range(world):
            src = (r - t) % world
            pairs = tuple(BlockPair(a, b, _pair_kind(a, b, is_causal))
                          for a in chunk_ids(r, world, layout)
                          for b in chunk_ids(src, world, layout))
            row.append(RingStep(t, r, src, pairs))
        steps.append(row)
    return steps


# --------------------------------------------------------------------------- process group


def _world(group: Any) -> tuple[int, int]:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("attention across processes needs an initialized process group: call "
                           "torch.distributed.init_process_group(...) in every rank first")
    return dist.get_rank(group), dist.get_world_size(group)


def _peer(group: Any, rank: int) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def _agree(name: str, error: str | None, meta: tuple, group: Any, world: int) -> None:
    """Raise the same error on every rank if any rank's arguments are bad or differ."""
    if world == 1:
        if error:
            raise ValueError(f"{name}: {error}")
        return
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, (error, meta), group=group)
    bad = [f"rank {r}: {e}" for r, (e, _) in enumerate(everyone) if e]
    if bad:
        raise ValueError(f"{name}: " + "; ".join(bad))
    metas = [m for _, m in everyone]
    if any(m != metas[0] for m in metas):
        listed = "; ".join(f"rank {r}: {m}" for r, m in enumerate(metas))
        raise ValueError(f"{name}: every rank must pass the same shapes, dtype and options, got "
                         f"{listed}")


def _local_error(check: Callable[[], None]) -> str | None:
    try:
        check()
    except (TypeError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def _shape(t: Any) -> tuple[int, ...] | str:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__


def _scale(E: int, scale: float | None) -> float:
    return (1.0 / math.sqrt(E) if E else 1.0) if scale is None else float(scale)


# --------------------------------------------------------------------------- ring attention


class _Exchange:
    """Send tensors to the next rank and receive the same shapes from the previous one."""

    def __init__(self, tensors: list[torch.Tensor], rank: int, world: int, group: Any) -> None:
        nxt, prv = _peer(group, (rank + 1) % world), _peer(group, (rank - 1) % world)
        sends = [t.contiguous() for t in tensors]
        self.received = [torch.empty_like(t) for t in sends]
        ops = [dist.P2POp(dist.isend, t, nxt, group) for t in sends]
        ops += [dist.P2POp(dist.irecv, t, prv, group) for t in self.received]
        self._keep = sends
        self._requests = dist.batch_isend_irecv(ops)

    def wait(self) -> list[torch.Tensor]:
        for req in self._requests:
            req.wait()
        return self.received


@dataclass(frozen=True)
class _RingPlan:
    rank: int
    world: int
    group: Any
    is_causal: bool
    layout: str
    scale: float
    dtype: torch.dtype
    work: torch.dtype

    def chunks(self, x: torch.Tensor) -> list[torch.Tensor]:
        return list(x.chunk(chunks_per_rank(self.layout), dim=-2))

    def pairs(self, source: int) -> list[tuple[int, int, str]]:
        """``(i, j, kind)``: my chunk i against the source's chunk j (local chunk indices)."""
        mine = chunk_ids(self.rank, self.world, self.layout)
        theirs = chunk_ids(source, self.world, self.layout)
        return [(i, j, _pair_kind(a, b, self.is_causal))
                for i, a in enumerate(mine) for j, b in enumerate(theirs)]


def _diagonal_mask(c: int, device: torch.device) -> torch.Tensor:
    return torch.ones(c, c, dtype=torch.bool, device=device).tril()


def _ring_forward(plan: _RingPlan, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` of my queries over every rank's keys, in the compute dtype."""
    qc = plan.chunks(q.to(plan.work))
    outs = [x.new_zeros((*x.shape[:-1], v.shape[-1])) for x in qc]
    lses = [x.new_full(x.shape[:-1], _NEG_INF) for x in qc]
    k_cur, v_cur = k, v
    for t in range(plan.world):
        source = (plan.rank - t) % plan.world
        exchange = (_Exchange([k_cur, v_cur], plan.rank, plan.world, plan.group)
                    if t < plan.world - 1 else None)       # next block in flight during compute
        kc, vc = plan.chunks(k_cur.to(plan.work)), plan.chunks(v_cur.to(plan.work))
        for i, j, kind in plan.pairs(source):
            if kind == "skipped":
                continue
            mask = _diagonal_mask(qc[i].shape[-2], q.device) if kind == "diagonal" else None
            o, lse = partial_attention(qc[i], kc[j], vc[j], mask, plan.scale)
            outs[i], lses[i] = merge_partials(outs[i], lses[i], o, lse)
        if exchange is not None:
            k_cur, v_cur = exchange.wait()
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def _ring_backward(plan: _RingPlan, q, k, v, out, lse, dout):
    """dQ, dK, dV: each block's P recomputed from the saved lse; dK/dV ride with their K/V."""
    qw = q.to(plan.work)
    qc, doc = plan.chunks(qw), plan.chunks(dout.to(plan.work))
    D = (dout.to(plan.work) * out).sum(dim=-1)                # D = rowsum(dO ∘ O)
    Dc, lsec = plan.chunks(D.unsqueeze(-1)), plan.chunks(lse.unsqueeze(-1))
    lsec = [x.masked_fill(x == _NEG_INF, float("inf")) for x in lsec]   # empty row: P = 0
    dq = [torch.zeros_like(x) for x in qc]
    k_cur, v_cur = k, v
    dk_cur = torch.zeros(k.shape, dtype=plan.work, device=k.device)
    dv_cur = torch.zeros(v.shape, dtype=plan.work, device=v.device)
    s = plan.scale
    for t in range(plan.world):
        source = (plan.rank - t) % plan.world
        exchange = (_Exchange([k_cur, v_cur], plan.rank, plan.world, plan.group)
                    if t < plan.world - 1 else None)
        kc, vc = plan.chunks(k_cur.to(plan.work)), plan.chunks(v_cur.to(plan.work))
        dkc, dvc = plan.chunks(dk_cur), plan.chunks(dv_cur)   # views: written in place
        for i, j, kind in plan.pairs(source):
            if kind == "skipped":
                continue
            scores = (qc[i] @ kc[j].transpose(-2, -1)) * s
            if kind == "diagonal":
                scores = scores.masked_fill(~_diagonal_mask(scores.shape[-1], q.device),
                                            _NEG_INF)
            P = torch.exp(scores - lsec[i])                   # recomputed, already normalised
            dvc[j] += P.transpose(-2, -1) @ doc[i]            # dV += Pᵀ dO
            dS = P * (doc[i] @ vc[j].transpose(-2, -1) - Dc[i])   # dS = P ∘ (dO Vᵀ − D)
            dq[i] += s * (dS @ kc[j])                         # dQ += s dS K
            dkc[j] += s * (dS.transpose(-2, -1) @ qc[i])      # dK += s dSᵀ Q
        if exchange is not None:
            k_cur, v_cur = exchange.wait()
        if plan.world > 1:                                    # the accumulators follow their K/V
            dk_cur, dv_cur = _Exchange([dk_cur, dv_cur], plan.rank, plan.world,
                                       plan.group).wait()
    return torch.cat(dq, dim=-2), dk_cur, dv_cur


class RingAttentionFunction(torch.autograd.Function):
    """Ring attention with a ring backward: saves Q, K, V (this rank's shards), O and the lse
    only, ``O(L/W · E)`` per rank. Use :func:`ring_attention`, which validates and plans."""

    @staticmethod
    def forward(ctx, query, key, value, plan: _RingPlan):
        out, lse = _ring_forward(plan, query, key, value)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.plan = plan
        return out.to(plan.dtype)

    @staticmethod
    def backward(ctx, dout):
        query, key, value, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(ctx.plan, query, key, value, out, lse, dout)
        return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype), None


def ring_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                   is_causal: bool = False, scale: float | None = None, group: Any = None,
                   layout: str = "contiguous") -> torch.Tensor:
    """This rank's shard of softmax(s QKᵀ + M) V over the whole sequence: ``(..., L/W, Ev)``.

    query ``(..., L/W, E)``, key ``(..., S/W, E)``, value ``(..., S/W, Ev)``: this rank's shards
    (:func:`shard_sequence` with the same ``layout``); same batch dims on every rank, no
    broadcasting. ``is_causal``: position ``i`` sees keys ``j <= i`` of the global sequence
    (needs ``L == S``). ``layout="zigzag"``: each shard is chunks ``r`` and ``2W-1-r`` of ``2W``
    (balanced causal work). ``group``: the process group (default: the world). Differentiable.
    """
    rank, world = _world(group)

    def check() -> None:
        check_sdpa_args(query, key, value, None, 0.0, is_causal, scale, False)
        _check_layout(layout)
        if not query.shape[:-2] == key.shape[:-2] == value.shape[:-2]:
            raise ValueError(f"query {_shape(query)}, key {_shape(key)} and value "
                             f"{_shape(value)} must have the same batch dims (no broadcasting)")
        if is_causal and query.shape[-2] != key.shape[-2]:
            raise ValueError(f"is_causal=True needs query and key shards of the same length, "
                             f"got query {_shape(query)} and key {_shape(key)}")
        n = chunks_per_rank(layout)
        for name, t in (("query", query), ("key", key)):
            if t.shape[-2] % n:
                raise ValueError(f"layout 'zigzag' holds 2 chunks per rank: the {name} shard "
                                 f"length must be even, got {name} {_shape(t)}")

    error = _local_error(check)
    meta = (_shape(query), _shape(key), _shape(value), str(getattr(query, "dtype", None)),
            bool(is_causal), scale, layout)
    _agree("ring_attention", error, meta, group, world)
    plan = _RingPlan(rank, world, group, bool(is_causal), layout, _scale(query.shape[-1], scale),
                     query.dtype, compute_dtype(query.dtype))
    return RingAttentionFunction.apply(query, key, value, plan)


# --------------------------------------------------------------------------- Ulysses


def _all_to_all(x: torch.Tensor, scatter: int, gather: int, group: Any, world: int
                ) -> torch.Tensor:
    chunks = [c.contiguous() for c in x.chunk(world, dim=scatter)]
    received = [torch.empty_like(c) for c in chunks]
    dist.all_to_all(received, chunks, group=group)
    return torch.cat(received, dim=gather)


class _AllToAll(torch.autograd.Function):
    """Split along ``scatter`` into W pieces, piece j to rank j, concatenate what arrives along
    ``gather``. Its gradient is the same exchange with the two dims swapped."""

    @staticmethod
    def forward(ctx, x, scatter: int, gather: int, group: Any, world: int):
        ctx.args = (scatter, gather, group, world)
        return _all_to_all(x, scatter, gather, group, world)

    @staticmethod
    def backward(ctx, grad):
        scatter, gather, group, world = ctx.args
        return _all_to_all(grad, gather, scatter, group, world), None, None, None, None


def sequence_to_heads(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """``(..., H, L/W, E)`` sequence shards → ``(..., H/W, L, E)`` head shards (all-to-all)."""
    _, world = _world(group)
    return _AllToAll.apply(x, x.dim() - 3, x.dim() - 2, group, world)


def heads_to_sequence(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """``(..., H/W, L, E)`` head shards → ``(..., H, L/W, E)`` sequence shards (all-to-all)."""
    _, world = _world(group)
    return _AllToAll.apply(x, x.dim() - 2, x.dim() - 3, group, world)


def ulysses_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                      is_causal: bool = False, scale: float | None = None, group: Any = None,
                      attend: str | Callable[..., torch.Tensor] = "reference") -> torch.Tensor:
    """This rank's shard of attention over the whole sequence, by two all-to-alls.

    query, key ``(..., H, L/W, E)``, value ``(..., H, L/W, Ev)``: contiguous sequence shards
    (rank r holds positions ``r·L/W .. (r+1)·L/W - 1``), the head dim at -3, ``H`` divisible by
    ``W``. Rank r attends heads ``r·H/W .. (r+1)·H/W - 1`` over all ``L`` positions with
    ``attend`` (a name in ``IMPLEMENTATIONS`` or a function with SDPA's signature). Returns
    ``(..., H, L/W, Ev)``. Differentiable.
    """
    from .registry import IMPLEMENTATIONS
    _, world = _world(group)

    def check() -> None:
        check_sdpa_args(query, key, value, None, 0.0, is_causal, scale, False)
        if query.dim() < 3 or not query.shape[:-2] == key.shape[:-2] == value.shape[:-2]:
            raise ValueError(f"query {_shape(query)}, key {_shape(key)} and value "
                             f"{_shape(value)} need a head dim (-3) and the same batch dims")
        if query.shape[-2] != key.shape[-2]:
            raise ValueError(f"query and key shards must have the same length, got query "
                             f"{_shape(query)} and key {_shape(key)}")
        if query.shape[-3] % world:
            raise ValueError(f"Ulysses splits the heads across ranks: H = {query.shape[-3]} "
                             f"heads (query {_shape(query)}) is not divisible by the group "
                             f"size W = {world}")
        if isinstance(attend, str) and attend not in IMPLEMENTATIONS:
            raise ValueError(f"attend must be one of {sorted(IMPLEMENTATIONS)} or a function, "
                             f"got {attend!r}")

    error = _local_error(check)
    meta = (_shape(query), _shape(key), _shape(value), str(getattr(query, "dtype", None)),
            bool(is_causal), scale, attend if isinstance(attend, str) else "function")
    _agree("ulysses_attention", error, meta, group, world)
    fn = IMPLEMENTATIONS[attend] if isinstance(attend, str) else attend
    q, k, v = (sequence_to_heads(t, group) for t in (query, key, value))
    out = fn(q, k, v, is_causal=is_causal, scale=scale)          # (..., H/W, L, Ev)
    return heads_to_sequence(out, group)
