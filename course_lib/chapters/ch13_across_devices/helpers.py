"""Chapter 13's computations: what each rank runs (module-level, so spawned processes can import
them), a meter of FLOPs and tensor memory, and the cost model of ring and Ulysses attention."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from course_lib.attention import distributed as cp
from course_lib.attention import reference
from course_lib.toolkit.dispatch_mode import EagerDispatchMode

# --------------------------------------------------------------------------- datasheet numbers

#: Published peak numbers, labelled with their source (datasheets, not measurements).
DATASHEET = {
    "H100 SXM bf16 dense": {"value": 989e12, "unit": "FLOP/s",
                            "source": "NVIDIA H100 Tensor Core GPU datasheet (SXM, BF16 dense)"},
    "NVLink 4 (H100 SXM)": {"value": 900e9 / 2, "unit": "B/s per direction",
                            "source": "NVIDIA H100 datasheet: NVLink 900 GB/s total, i.e. 450 "
                                      "GB/s each way"},
    "NDR InfiniBand port": {"value": 400e9 / 8, "unit": "B/s per direction",
                            "source": "NVIDIA ConnectX-7 / Quantum-2 NDR: 400 Gb/s per port"},
}


# --------------------------------------------------------------------------- the meter


class Meter(EagerDispatchMode):
    """Counts matmul FLOPs (2·M·N·K per product) and the peak bytes of the tensors allocated
    while it is on (storages freed when they die; the inputs, allocated before, not counted).
    Both are properties of the program, the same on every machine."""

    _FLOP_OPS = {"mm", "bmm", "addmm", "baddbmm"}

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.live = 0
        self.peak = 0
        self._mine: set[int] = set()
        self._foreign: set[int] = set()

    def _free(self, key: int, nbytes: int) -> None:
        self._mine.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in self._FLOP_OPS:
            a, b = (args[0], args[1]) if name in ("mm", "bmm") else (args[1], args[2])
            self.flops += 2 * a.numel() * b.shape[-1]
        for t in torch.utils._pytree.tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                if id(s) not in self._mine and id(s) not in self._foreign:
                    self._foreign.add(id(s))
                    weakref.finalize(s, self._foreign.discard, id(s))
        out = func(*args, **kwargs)
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                if id(s) not in self._mine and id(s) not in self._foreign:
                    self._mine.add(id(s))
                    self.live += s.nbytes()
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(s, self._free, id(s), s.nbytes())
        return out


# --------------------------------------------------------------------------- rank workers


#: heads and head width of the chapter's runs
HEADS, DIM = 4, 8


def inputs(world: int, shard: int, *, heads: int = HEADS, dim: int = DIM, seed: int = 0,
           dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    """q, k, v, dO ``(1, heads, world·shard, dim)``: the whole sequence, seeded."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, heads, world * shard, dim, generator=g, dtype=dtype)
                 for _ in range(4))


def ring_rank(rank: int, world: int, shard: int, is_causal: bool, layout: str,
              method: str = "ring") -> dict[str, Any]:
    """One rank: its shards of q, k, v; forward (FLOPs and peak tensor bytes metered) and
    backward of ``ring_attention`` (or ``ulysses_attention``); its output and gradients."""
    q, k, v, dout = inputs(world, shard)
    local = [cp.shard_sequence(t, rank, world, layout).requires_grad_() for t in (q, k, v)]
    with Meter() as meter:
        if method == "ring":
            out = cp.ring_attention(*local, is_causal=is_causal, layout=layout)
        else:
            out = cp.ulysses_attention(*local, is_causal=is_causal)
    out.backward(cp.shard_sequence(dout, rank, world, layout))
    return {"out": out.detach(), "grads": [t.grad for t in local], "flops": meter.flops,
            "peak_bytes": meter.peak, "input_bytes": sum(t.nbytes for t in local)}


def ring_layouts(rank: int, world: int, shard: int) -> dict[str, dict[str, Any]]:
    """:func:`ring_rank` for causal attention with each layout, in one group of processes."""
    return {layout: ring_rank(rank, world, shard, True, layout) for layout in cp.LAYOUTS}


def ulysses_and_peer(rank: int, world: int, shard: int) -> dict[str, Any]:
    """Causal Ulysses (:func:`ring_rank`), the error for ``W - 1`` heads, and the
    :func:`context_parallel_probe`."""
    x = torch.zeros(1, world - 1, shard, DIM)
    try:
        cp.ulysses_attention(x, x, x)
        heads_error = "none"
    except ValueError as err:
        # rank 0's message, without "ulysses_attention: rank 0: ValueError: "
        heads_error = str(err).split("ValueError: ", 1)[1].split("; rank")[0]
    return {"ulysses": ring_rank(rank, world, shard, True, "contiguous", method="ulysses"),
            "heads_error": heads_error, "peer": context_parallel_probe(rank, world)}


def one_process(world: int, shard: int, is_causal: bool) -> dict[str, Any]:
    """The same attention on one process (the course's reference): output, gradients, and the
    metered forward of ring attention's own code path run whole (``partial_attention`` over
    the full sequence, what one device would hold)."""
    from course_lib.attention.merge import partial_attention
    q, k, v, dout = inputs(world, shard)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = reference.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    out.backward(dout)
    mask = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril() if is_causal else None
    with torch.no_grad(), Meter() as meter:
        partial_attention(q.detach(), k.detach(), v.detach(), mask)
    return {"out": out.detach(), "grads": [q.grad, k.grad, v.grad], "flops": meter.flops,
            "peak_bytes": meter.peak, "input_bytes": 3 * q.nbytes}


def context_parallel_probe(rank: int, world: int) -> str:
    """Try torch's ``context_parallel`` on this CPU mesh: ``"ran"`` or the exception's type."""
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    q, k, v, _ = inputs(world, 4, dtype=torch.float32)
    mesh = init_device_mesh("cpu", (world,))
    try:
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    except Exception as err:
        return type(err).__name__
    return "ran"


def max_error(ranks: list[dict[str, Any]], whole: dict[str, Any], layout: str) -> float:
    """Largest |distributed − one process| over the output and the three gradients."""
    errs = [(cp.unshard_sequence([r["out"] for r in ranks], layout) - whole["out"]).abs().max()]
    for i in range(3):
        got = cp.unshard_sequence([r["grads"][i] for r in ranks], layout)
        errs.append((got - whole["grads"][i]).abs().max())
    return float(max(errs))


# --------------------------------------------------------------------------- the cost model


#: What a diagonal chunk pair costs, as a fraction of a full one: ``"masked"`` computes it whole
#: and then masks it (the course's ring); ``"tile-skipping"`` is a flash kernel with the causal
#: flag, which skips the tiles above the diagonal (FlashAttention-2, section 3.1): about half.
DIAGONAL_COST = {"masked": 1.0, "tile-skipping": 0.5}


def work_per_rank(world: int, *, layout: str, is_causal: bool = True,
                  kernel: str = "masked") -> list[float]:
    """Block pairs each rank computes over the whole ring, in units of one contiguous
    ``(L/W) × (L/W)`` block (a zigzag chunk pair is a quarter of one); a diagonal pair costs
    ``DIAGONAL_COST[kernel]`` of a full one."""
    if kernel not in DIAGONAL_COST:
        raise ValueError(f"kernel must be one of {sorted(DIAGONAL_COST)}, got {kernel!r}")
    size = 1.0 / chunks_per_rank(layout) ** 2
    cost = {"full": 1.0, "diagonal": DIAGONAL_COST[kernel], "skipped": 0.0}
    return [sum(cost[p.kind] for s in cp.ring_schedule(world, is_causal=is_causal, layout=layout)
                for p in s[r].pairs) * size
            for r in range(world)]


def chunks_per_rank(layout: str) -> int:
    return cp.chunks_per_rank(layout)


def ring_step_cost(seq: int, world: int, heads: int, dim: int, bytes_per_element: int, *,
                   kv_heads: int | None = None, backward: bool = False,
                   accumulator_bytes: int = 4) -> dict[str, float]:
    """One ring step, one rank, no mask, ``c = L/W``. Forward: the FLOPs of ``c²`` scores and
    their P·V (``4·c²·H·E``) and the bytes of the K and V shards it sends (``2·c·H_kv·E·b``).
    Backward: five products (S recomputed, dV, dP, dQ, dK: ``10·c²·H·E``), and it sends K and V
    with their dK, dV accumulators (``2·c·H_kv·E·(b + accumulator_bytes)``)."""
    c = seq / world
    kv = heads if kv_heads is None else kv_heads
    if backward:
        return {"flops": 10 * c * c * heads * dim,
                "bytes": 2 * c * kv * dim * (bytes_per_element + accumulator_bytes)}
    return {"flops": 4 * c * c * heads * dim, "bytes": 2 * c * kv * dim * bytes_per_element}


def min_shard_to_hide(rate: float, bandwidth: float, bytes_per_element: int) -> float:
    """Shortest shard ``L/W`` whose step computes at least as long as it sends:
    ``4 c² H E / rate >= 2 c H E b / bandwidth``  ⇔  ``c >= b · rate / (2 · bandwidth)``."""
    return bytes_per_element * rate / (2 * bandwidth)


def bytes_sent_per_rank(method: str, seq: int, world: int, heads: int, dim: int,
                        bytes_per_element: int, *, kv_heads: int | None = None) -> float:
    """Forward bytes one rank sends, ``H`` query and ``H_kv`` key/value heads (default
    ``H_kv = H``). Ring: its K and V shards, ``W - 1`` hops: ``(W-1)·2·(L/W)·H_kv·E·b``.
    Ulysses: of each all-to-all (Q and O at ``H`` heads, K and V at ``H_kv``) it keeps 1/W of
    its shard and sends the rest: ``(W-1)/W·(L/W)·(2H + 2H_kv)·E·b``. Their ratio is
    ``(1 + H/H_kv)/W``."""
    kv = heads if kv_heads is None else kv_heads
    shard = seq / world * dim * bytes_per_element
    if method == "ring":
        return (world - 1) * 2 * kv * shard
    if method == "ulysses":
        return (world - 1) / world * (2 * heads + 2 * kv) * shard
    raise ValueError(f"method must be 'ring' or 'ulysses', got {method!r}")
