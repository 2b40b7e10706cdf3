"""What the multi-process tests run in each rank (not a test module itself).

One spawned group per world size runs every check (:func:`suite`) and sends back plain results;
the test modules (``test_ring_attention.py``, ``test_ulysses.py``) compare them with
single-process attention in the parent. :func:`results` runs the group once per test process.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from course_lib.attention import distributed as cp
from course_lib.attention import reference

#: (name, layout, is_causal, dtype, (B, H, L per rank, S per rank, E, Ev), scale)
RING_CONFIGS = [
    ("fp64 contiguous", "contiguous", False, torch.float64, (2, 3, 4, 4, 5, 7), None),
    ("fp64 contiguous causal", "contiguous", True, torch.float64, (2, 3, 4, 4, 5, 7), None),
    ("fp64 zigzag causal", "zigzag", True, torch.float64, (2, 3, 4, 4, 5, 7), None),
    ("fp64 zigzag", "zigzag", False, torch.float64, (1, 2, 6, 6, 4, 4), 0.3),
    ("fp64 cross, S != L", "contiguous", False, torch.float64, (1, 2, 3, 5, 4, 6), None),
    ("fp32 zigzag causal", "zigzag", True, torch.float32, (2, 3, 8, 8, 8, 8), None),
    ("bf16 zigzag causal", "zigzag", True, torch.bfloat16, (2, 3, 8, 8, 8, 8), None),
    ("fp64 no batch dims", "contiguous", True, torch.float64, (None, None, 4, 4, 3, 3), None),
]

#: (name, is_causal, dtype, (B, H per rank, L per rank, E), attend)
ULYSSES_CONFIGS = [
    ("fp64 reference", False, torch.float64, (2, 3, 4, 5), "reference"),
    ("fp64 causal flash", True, torch.float64, (2, 3, 4, 5), "flash"),
    ("fp64 causal sdpa", True, torch.float64, (1, 1, 6, 4), "sdpa"),
    ("bf16 causal", True, torch.bfloat16, (2, 2, 8, 8), "reference"),
]


def global_inputs(shape: tuple, world: int, dtype: torch.dtype, seed: int) -> tuple:
    """q (B, H, L, E), k, v (B, H, S, E/Ev), dO: the whole sequence, float64, same on every rank."""
    B, H, L, S, E, Ev = shape
    batch = tuple(d for d in (B, H) if d is not None)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, L * world, E, generator=g, dtype=torch.float64)
    k = torch.randn(*batch, S * world, E, generator=g, dtype=torch.float64)
    v = torch.randn(*batch, S * world, Ev, generator=g, dtype=torch.float64)
    dout = torch.randn(*batch, L * world, Ev, generator=g, dtype=torch.float64)
    return tuple(t.to(dtype).double() for t in (q, k, v)) + (dout,)


def _ring_case(rank: int, world: int, index: int) -> dict[str, Any]:
    _, layout, causal, dtype, shape, scale = RING_CONFIGS[index]
    q, k, v, dout = global_inputs(shape, world, dtype, seed=index)
    local = [cp.shard_sequence(t, rank, world, layout).to(dtype).requires_grad_()
             for t in (q, k, v)]
    out = cp.ring_attention(*local, is_causal=causal, scale=scale, layout=layout)
    out.backward(cp.shard_sequence(dout, rank, world, layout).to(dtype))
    return {"out": out.detach(), "grads": tuple(t.grad for t in local), "dtype": out.dtype}


def _ulysses_case(rank: int, world: int, index: int) -> dict[str, Any]:
    _, causal, dtype, (B, Hr, L, E), attend = ULYSSES_CONFIGS[index]
    q, k, v, dout = global_inputs((B, Hr * world, L, L, E, E), world, dtype, seed=100 + index)
    local = [cp.shard_sequence(t, rank, world).to(dtype).requires_grad_() for t in (q, k, v)]
    out = cp.ulysses_attention(*local, is_causal=causal, attend=attend)
    out.backward(cp.shard_sequence(dout, rank, world).to(dtype))
    return {"out": out.detach(), "grads": tuple(t.grad for t in local), "dtype": out.dtype}


def _error(call) -> tuple[str, str] | None:
    try:
        call()
    except Exception as err:
        return type(err).__name__, str(err)
    return None


def _errors(rank: int, world: int) -> dict[str, Any]:
    """Bad calls, each raising on every rank (the group stays usable after each)."""
    t = torch.zeros(1, 2, 4, 3, dtype=torch.float64)
    odd = torch.zeros(1, 2, 3, 3, dtype=torch.float64)
    heads = torch.zeros(1, world + 1, 4, 3, dtype=torch.float64)
    mine = torch.zeros(1, 2, 4 + 2 * rank, 3, dtype=torch.float64)   # differs per rank
    bad_dtype = t.to(torch.int64) if rank == world - 1 else t
    out = {
        "zigzag odd shard": _error(lambda: cp.ring_attention(odd, odd, odd, layout="zigzag")),
        "ulysses heads": _error(lambda: cp.ulysses_attention(heads, heads, heads)),
        "mismatched ranks": _error(lambda: cp.ring_attention(mine, mine, mine)),
        "one rank's dtype": _error(lambda: cp.ring_attention(bad_dtype, t, t)),
        "causal lengths": _error(lambda: cp.ring_attention(t, odd, odd, is_causal=True)),
        "bad layout": _error(lambda: cp.ring_attention(t, t, t, layout="striped")),
        "ulysses attend": _error(lambda: cp.ulysses_attention(heads[:, 1:], heads[:, 1:],
                                                              heads[:, 1:], attend="nope")),
    }
    torch.distributed.barrier()       # every rank got through every bad call: nothing hangs
    return out


def _work(rank: int, world: int) -> dict[str, float]:
    """Forward FLOPs this rank computed in causal ring attention, per layout, counted by
    wrapping the block attention the ring calls (2·Lq·S·E for QKᵀ, 2·Lq·S·Ev for PV)."""
    counted = {}
    original = cp.partial_attention
    for layout in cp.LAYOUTS:
        flops = [0]

        def counting(q, k, v, mask=None, scale=None, flops=flops):
            flops[0] += 2 * q.shape[-2] * k.shape[-2] * (q.shape[-1] + v.shape[-1])
            return original(q, k, v, mask, scale)

        cp.partial_attention = counting
        try:
            x = torch.randn(1, 1, 4, 2, generator=torch.Generator().manual_seed(rank))
            cp.ring_attention(x, x, x, is_causal=True, layout=layout)
        finally:
            cp.partial_attention = original
        counted[layout] = flops[0]
    return counted


def peer(rank: int, world: int) -> dict[str, Any]:
    """torch's context_parallel on this CPU mesh: its output shard beside ours, or why not."""
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    q, k, v, _ = global_inputs((1, 2, 4, 4, 8, 8), world, torch.float64, seed=7)
    ours = cp.ring_attention(*(cp.shard_sequence(t, rank, world, "zigzag") for t in (q, k, v)),
                             is_causal=True, layout="zigzag")
    mesh = init_device_mesh("cpu", (world,))
    try:
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    except Exception as err:
        return {"ran": False, "error": f"{type(err).__name__}: {str(err)[:200]}"}
    from torch.distributed.tensor.experimental import context_parallel_unshard
    theirs = context_parallel_unshard(mesh, [theirs], [2])[0]      # the whole output
    shards = [torch.empty_like(ours) for _ in range(world)]
    torch.distributed.all_gather(shards, ours.contiguous())
    return {"ran": True, "ours": cp.unshard_sequence(shards, "zigzag"), "theirs": theirs}


def suite(rank: int, world: int) -> dict[str, Any]:
    """Every check, run once in each rank."""
    return {
        "ring": [_ring_case(rank, world, i) for i in range(len(RING_CONFIGS))],
        "ulysses": [_ulysses_case(rank, world, i) for i in range(len(ULYSSES_CONFIGS))],
        "errors": _errors(rank, world),
        "work": _work(rank, world),
    }


@functools.cache
def results(world: int) -> list[dict[str, Any]]:
    """:func:`suite` on ``world`` CPU processes (gloo), once per test process."""
    from course_lib.chapters.ch13_across_devices.launch import run_ranks
    return run_ranks(suite, world, timeout=240)


@functools.cache
def peer_results() -> list[dict[str, Any]]:
    """:func:`peer` on 2 CPU processes (its own group: importing DTensor takes seconds)."""
    from course_lib.chapters.ch13_across_devices.launch import run_ranks
    return run_ranks(peer, 2, timeout=240)


def expected(kind: str, index: int, world: int) -> dict[str, Any]:
    """The single-process answer (float64 reference attention): out and (dQ, dK, dV), whole."""
    if kind == "ring":
        _, _, causal, dtype, shape, scale = RING_CONFIGS[index]
        q, k, v, dout = global_inputs(shape, world, dtype, seed=index)
    else:
        _, causal, dtype, (B, Hr, L, E), _ = ULYSSES_CONFIGS[index]
        q, k, v, dout = global_inputs((B, Hr * world, L, L, E, E), world, dtype, seed=100 + index)
        scale = None
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = reference.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    out.backward(dout)
    return {"out": out.detach(), "grads": (q.grad, k.grad, v.grad)}
