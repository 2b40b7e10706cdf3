r"""Teaching tools for the Flash chapter: byte counts, a traced tile loop, shape recording.

Symbols are those of :mod:`course_lib.flash`: per query row a running maximum ``m``, a running
sum ``ℓ`` of ``e^{S - m}`` and a rescaled accumulator ``O``; after the last key tile the output
is ``O / ℓ``. Shapes: ``q (L, E)``, ``k (S, E)``, ``v (S, Ev)`` for the single-head tools.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from course_lib.toolkit.dispatch_mode import EagerDispatchMode

#: Vendor peak figures for the memory-hierarchy comparison (NVIDIA H100 SXM5 datasheet:
#: dense BF16 tensor-core throughput and HBM3 bandwidth).
H100_BF16_FLOPS = 989.4e12
H100_HBM_BYTES_PER_S = 3.35e12
#: NVIDIA H200 SXM datasheet, for reading the committed H200 runs: float32 on the CUDA cores (no
#: tensor cores: what float32 matmuls run on unless TF32 is allowed) and HBM3e bandwidth.
H200_FP32_FLOPS = 67e12
H200_HBM_BYTES_PER_S = 4.8e12
#: NVIDIA H100 SXM5 spec sheet / architecture whitepaper: 50 MB of L2 cache shared by the whole
#: chip, 132 SMs, up to 228 KB of shared memory (on-chip SRAM) per SM.
H100_L2_BYTES = 50 * 10**6
H100_SMS = 132
H100_SMEM_PER_SM = 228 * 1024

# ----------------------------------------------------------------------------- byte counting


def naive_bytes(n: int, d: int, bytes_per_element: int = 4) -> int:
    """Bytes one head of the textbook path moves to and from main memory (lower bound).

    Reads Q, K (``2nd``); writes S (``n²``); softmax reads S and writes P (``2n²``); reads P and
    V (``n² + nd``); writes O (``nd``): ``(4n² + 4nd)`` elements.
    """
    return bytes_per_element * (4 * n * n + 4 * n * d)


def flash_bytes(n: int, d: int, block_q: int, bytes_per_element: int = 4) -> int:
    """Bytes one head of the tiled path moves: Q read and O written once (``2nd``), K and V
    re-read once per query block (``2nd·⌈n/B_q⌉``); the tiles stay in fast memory."""
    return bytes_per_element * (2 * n * d + 2 * n * d * math.ceil(n / block_q))


def flash_bytes_l2(n: int, d: int, bytes_per_element: int = 4) -> int:
    """Main-memory bytes of one head of the tiled path when the re-reads of K and V are served
    by the L2 cache: Q, K, V read and O written once each (``4nd``)."""
    return bytes_per_element * 4 * n * d


def arithmetic_intensity(n: int, d: int, path: str = "naive", block_q: int = 128,
                         bytes_per_element: int = 4) -> float:
    """FLOPs per main-memory byte, ``4n²d / bytes``, for ``path`` in ``{"naive", "flash",
    "flash_l2"}`` (``flash``: every K/V re-read from main memory; ``flash_l2``: from L2)."""
    flops = 4 * n * n * d
    if path == "naive":
        return flops / naive_bytes(n, d, bytes_per_element)
    if path == "flash":
        return flops / flash_bytes(n, d, block_q, bytes_per_element)
    if path == "flash_l2":
        return flops / flash_bytes_l2(n, d, bytes_per_element)
    raise ValueError(f"path must be 'naive', 'flash' or 'flash_l2', got {path!r}")


def kv_working_set(n: int, d: int, block_q: int, bytes_per_element: int = 2,
                   sms: int = H100_SMS) -> int:
    """Bytes of K and V that the programs in flight re-read: one program per SM, each a
    (query block, head) pair, ordered head by head, so they span ``⌈sms / ⌈n/B_q⌉⌉`` heads,
    each with ``2·n·d`` elements of K and V. Pessimistic: it assumes the programs are anywhere in
    their sweep over K/V; programs that run in step share far less."""
    heads = math.ceil(sms / math.ceil(n / block_q))
    return heads * 2 * n * d * bytes_per_element


def tile_smem_bytes(block_q: int, block_k: int, d: int, bytes_per_element: int = 2) -> int:
    """Shared-memory bytes of one program's tiles ``Q_i`` (``B_q × d``), ``K_j`` and ``V_j``
    (``B_k × d`` each); the scores tile and the accumulator live in registers."""
    return bytes_per_element * (block_q + 2 * block_k) * d


def gpu_regime_table(ns: list[int], ds: list[int], blocks: list[tuple[int, int]]) -> str:
    """Markdown: for bf16 tiles on an H100 (spec-sheet sizes), whether the tiles fit in one SM's
    shared memory, whether the K/V working set fits in L2, and the resulting main-memory
    intensity against the H100's ridge."""
    ridge = H100_BF16_FLOPS / H100_HBM_BYTES_PER_S
    out = ["| E | B_q × B_k | tiles in shared memory | n | K/V working set | served by | "
           "FLOP/HBM byte | vs ridge |", "|---:|---:|---:|---:|---:|---|---:|---|"]
    for d in ds:
        for bq, bk in blocks:
            smem = tile_smem_bytes(bq, bk, d)
            for n in ns:
                ws = kv_working_set(n, d, bq)
                l2 = ws <= H100_L2_BYTES
                inten = arithmetic_intensity(n, d, "flash_l2" if l2 else "flash", bq, 2)
                out.append(f"| {d} | {bq} × {bk} | {smem / 1024:.0f} KB of 228 KB | {n:,} | "
                           f"{ws / 1e6:.1f} MB | {'L2' if l2 else 'HBM (pessimistic)'} | "
                           f"{inten:,.0f} | {'above' if inten > ridge else 'below'} |")
    return "\n".join(out)


def memory_bandwidth(nbytes: int = 2**28, rounds: int = 5) -> float:
    """Measured main-memory bandwidth in bytes/s: best of ``rounds`` copies of ``nbytes``
    (a copy reads and writes, so it moves ``2·nbytes``)."""
    import time

    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(rounds):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


# ----------------------------------------------------------------------------- traced tiles


@dataclass
class TileStep:
    """The state after processing tile ``(i, j)``: query rows ``rows``, key columns ``cols``."""

    i: int
    j: int
    rows: tuple[int, int]
    cols: tuple[int, int]
    scores: torch.Tensor   #: ``(B_q, B_k)`` scaled scores of this tile (masked entries -inf)
    m: torch.Tensor        #: ``(L,)`` running maxima (``-inf`` for rows not started)
    ell: torch.Tensor      #: ``(L,)`` running sums ℓ
    O: torch.Tensor        #: ``(L, Ev)`` unnormalised accumulators


def tile_trace(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_q: int, block_k: int,
               causal: bool = False) -> list[TileStep]:
    """Run the tiled online-softmax loop on one head and record ``m, ℓ, O`` after every tile.

    ``q (L, E)``, ``k (S, E)``, ``v (S, Ev)``. The last step's ``O / ℓ`` is the attention output.
    """
    L, S = q.shape[0], k.shape[0]
    s = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full((L,), float("-inf"), dtype=q.dtype)
    ell = torch.zeros(L, dtype=q.dtype)
    O = torch.zeros(L, v.shape[-1], dtype=q.dtype)
    steps: list[TileStep] = []
    for i, i0 in enumerate(range(0, L, block_q)):
        i1 = min(i0 + block_q, L)
        for j, j0 in enumerate(range(0, S, block_k)):
            j1 = min(j0 + block_k, S)
            if causal and j0 > i1 - 1:
                break
            S_ij = (q[i0:i1] @ k[j0:j1].T) * s
            if causal:
                rows = torch.arange(i0, i1)[:, None]
                S_ij = S_ij.masked_fill(torch.arange(j0, j1) > rows, float("-inf"))
            m_new = torch.maximum(m[i0:i1], S_ij.amax(dim=-1))
            P_ij = torch.exp(S_ij - m_new[:, None])
            alpha = torch.exp(m[i0:i1] - m_new)            # e^{m_old - m_new}; 0 on first tile
            ell[i0:i1] = alpha * ell[i0:i1] + P_ij.sum(dim=-1)
            O[i0:i1] = alpha[:, None] * O[i0:i1] + P_ij @ v[j0:j1]
            m[i0:i1] = m_new
            steps.append(TileStep(i, j, (i0, i1), (j0, j1), S_ij.clone(), m.clone(),
                                  ell.clone(), O.clone()))
    return steps


def online_softmax_trace(blocks: list[torch.Tensor]) -> list[tuple[float, float]]:
    """``(m, ℓ)`` after each 1-D block of one row of scores, read once, left to right."""
    m, ell, out = -math.inf, 0.0, []
    for b in blocks:
        m_new = max(m, float(b.max()))
        ell = math.exp(m - m_new) * ell + float(torch.exp(b - m_new).sum())
        m = m_new
        out.append((m, ell))
    return out


# ----------------------------------------------------------------------------- shape recording


class ShapeRecorder(EagerDispatchMode):
    """Records the shape of every tensor an ATen op returns while the mode is active."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.shapes.append((str(func.overloadpacket.__name__), tuple(t.shape)))
        return out


def created_shapes(fn: Callable[..., Any], *args: Any, **kwargs: Any
                   ) -> list[tuple[str, tuple[int, ...]]]:
    """``(op name, shape)`` of every tensor created while running ``fn(*args, **kwargs)``."""
    with ShapeRecorder() as rec:
        fn(*args, **kwargs)
    return rec.shapes


def largest_created(shapes: list[tuple[str, tuple[int, ...]]]) -> tuple[str, tuple[int, ...]]:
    """The ``(op, shape)`` with the most elements."""
    return max(shapes, key=lambda s: math.prod(s[1]))


def has_square_tensor(shapes: list[tuple[str, tuple[int, ...]]], L: int, S: int) -> bool:
    """True if any created tensor has ``L`` and ``S`` as two of its dims (an ``(L, S)`` matrix)."""
    for _, shape in shapes:
        dims = list(shape)
        if L in dims:
            dims.remove(L)
            if S in dims:
                return True
    return False


# ----------------------------------------------------------------------------- chapter tables


def intensity_table(ns: list[int], d: int, block_q: int) -> str:
    """Markdown: bytes moved and FLOP/byte of both paths for each n (one head, fp32)."""
    out = ["| n | naive: bytes moved | tiled: bytes moved | naive FLOP/byte | tiled FLOP/byte |",
           "|---:|---:|---:|---:|---:|"]
    for n in ns:
        out.append(f"| {n} | {naive_bytes(n, d) / 2**20:,.1f} MiB | "
                   f"{flash_bytes(n, d, block_q) / 2**20:,.1f} MiB | "
                   f"{arithmetic_intensity(n, d):.1f} | "
                   f"{arithmetic_intensity(n, d, 'flash', block_q):.1f} |")
    return "\n".join(out)


def online_softmax_table(blocks: list[torch.Tensor]) -> str:
    """Markdown: per block, its max, the running m and ℓ, and ℓ recomputed directly from every
    entry seen so far (the invariant ℓ = Σ e^{x − m}); asserts that the two agree."""
    out = ["| block t | max of block | m after t | ℓ after t | Σ e^(x−m), blocks ≤ t |",
           "|---:|---:|---:|---:|---:|"]
    for t, (b, (m_t, ell_t)) in enumerate(zip(blocks, online_softmax_trace(blocks),
                                              strict=True), start=1):
        seen = torch.cat(blocks[:t])
        direct = float(torch.exp(seen - m_t).sum())
        tol = 1e-12 if seen.dtype == torch.float64 else 1e-5
        if m_t != float(seen.max()) or not math.isclose(ell_t, direct, rel_tol=tol):
            raise AssertionError(f"invariant broken after block {t}")
        out.append(f"| {t} | {float(b.max()):.4f} | {m_t:.4f} | {ell_t:.4f} | {direct:.4f} |")
    return "\n".join(out)


def growth_per_doubling(series: dict[int, float], n1: int, n2: int) -> float:
    """Factor by which ``series`` grows per doubling of n between ``n1`` and ``n2``."""
    return (series[n2] / series[n1]) ** (1 / math.log2(n2 / n1))


def causal_tile_counts(n: int, block_q: int, block_k: int) -> dict[str, int]:
    """Tiles of an ``(n, n)`` causal score matrix cut into ``(block_q, block_k)`` tiles, as
    :func:`course_lib.flash.scaled_dot_product_attention` visits them: ``total``, ``skipped``
    (entirely above the diagonal), ``diagonal`` (computed and partly masked) and ``computed``."""
    counts = {"total": 0, "skipped": 0, "diagonal": 0, "computed": 0}
    for i0 in range(0, n, block_q):
        i1 = min(i0 + block_q, n)
        for j0 in range(0, n, block_k):
            j1 = min(j0 + block_k, n)
            counts["total"] += 1
            if j0 > i1 - 1:
                counts["skipped"] += 1
            else:
                counts["computed"] += 1
                counts["diagonal"] += int(j1 - 1 > i0)
    return counts


def round_times(data: dict[str, Any], impl: str, n: int, causal: bool = False) -> list[float]:
    """The per-round times (ms, in round order) of one point of a committed benchmark run."""
    for r in data["results"]:
        if r["impl"] == impl and r["n"] == n and r["causal"] == causal and "times_s" in r:
            return [t * 1e3 for t in r["times_s"]]
    raise KeyError((impl, n, causal))
