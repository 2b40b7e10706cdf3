"""The course's Triton kernels and the flash launcher (needs ``triton``; see the package docstring).

The warm-up kernels are launched by the exercises' reference solutions (``exercises.py``), so each
launcher exists once.

Symbols as in chapter 8: for each query row, ``m`` is the running maximum of the scores seen so
far, ``ell`` (ℓ) the running sum of their exponentials relative to ``m``, ``acc`` the running,
un-normalised output O. The flash kernel works in base 2: its scores are multiplied by
``qk_scale = log2(e) / √D``, so ``exp2(s · qk_scale)`` equals ``exp(s / √D)`` and the kernel needs
only ``exp2`` (one hardware instruction on a GPU).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

LOG2E = math.log2(math.e)   # 1 / ln 2
LN2 = math.log(2.0)

# --------------------------------------------------------------------------- row softmax


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    """One program per row: load the whole row (BLOCK ≥ n_cols), softmax it, store it."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)                     # BLOCK is a power of two ≥ n_cols
    inside = cols < n_cols                         # the mask: lanes past the row's end do nothing
    x = tl.load(x_ptr + row * n_cols + cols, mask=inside, other=float("-inf"))
    m = tl.max(x, axis=0)                          # the row's maximum
    p = tl.exp(x - m)                              # padded lanes: exp(-inf) = 0
    tl.store(y_ptr + row * n_cols + cols, p / tl.sum(p, axis=0), mask=inside)


# --------------------------------------------------------------------------- tiled matmul


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Program (i, j) computes the (BLOCK_M, BLOCK_N) tile C[i, j] = Σ_k A[i, k] @ B[k, j]."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)      # accumulate in float32
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :],
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + cols[None, :],
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)                                 # acc += a @ b
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


# --------------------------------------------------------------------------- FlashAttention-2


@triton.jit
def _attend_blocks(acc, ell, m, q, k_ptr, v_ptr, rows, N, qk_scale, lo, hi,
                   BLOCK_N: tl.constexpr, D: tl.constexpr, DIAGONAL: tl.constexpr):
    """Visit the key blocks [lo, hi): the online softmax of chapter 8, in base 2.

    ``DIAGONAL`` tiles straddle the diagonal and need the causal mask; the others do not.
    """
    dims = tl.arange(0, D)
    for start in range(lo, hi, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        real = keys < N                                          # the ragged last block
        k = tl.load(k_ptr + keys[:, None] * D + dims[None, :], mask=real[:, None], other=0.0)
        v = tl.load(v_ptr + keys[:, None] * D + dims[None, :], mask=real[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale                    # log2(e) · q kᵀ / √D
        keep = real[None, :]
        if DIAGONAL:
            keep = keep & (keys[None, :] <= rows[:, None])       # key j ≤ query i
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))                 # (eq-online-m)
        alpha = tl.exp2(m - m_new)                               # re-base the old terms
        p = tl.exp2(s - m_new[:, None])
        ell = alpha * ell + tl.sum(p, axis=1)                    # (eq-online-l)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)    # O ← α·O + P V
        m = m_new
    return acc, ell, m


@triton.jit
def flash_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, N, qk_scale,
                     IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     D: tl.constexpr):
    """Program (i, bh): the BLOCK_M queries of block i of head bh (tensors contiguous)."""
    block = tl.program_id(0)
    bh = tl.program_id(1)                                        # batch · heads + head
    head = bh * N * D                                            # where this head starts
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + head + rows[:, None] * D + dims[None, :], mask=rows[:, None] < N,
                other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    ell = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    if IS_CAUSAL:
        # blocks wholly below the diagonal: no mask at all
        acc, ell, m = _attend_blocks(acc, ell, m, q, k_ptr + head, v_ptr + head, rows, N,
                                     qk_scale, 0, block * BLOCK_M, BLOCK_N, D, False)
        # the diagonal tile(s): causal mask; blocks above the diagonal are never visited
        acc, ell, m = _attend_blocks(acc, ell, m, q, k_ptr + head, v_ptr + head, rows, N,
                                     qk_scale, block * BLOCK_M, (block + 1) * BLOCK_M,
                                     BLOCK_N, D, True)
    else:
        acc, ell, m = _attend_blocks(acc, ell, m, q, k_ptr + head, v_ptr + head, rows, N,
                                     qk_scale, 0, N, BLOCK_N, D, False)
    out = acc / ell[:, None]
    tl.store(o_ptr + head + rows[:, None] * D + dims[None, :], out.to(o_ptr.dtype.element_ty),
             mask=rows[:, None] < N)
    # log-sum-exp of the scaled scores, for the backward pass: base 2 → natural log
    lse = (m + tl.log2(ell)) * 0.6931471805599453                # ln 2
    tl.store(lse_ptr + bh * N + rows, lse, mask=rows < N)


def _launch_options(num_warps: int | None, num_stages: int | None) -> dict[str, int]:
    """Triton's per-launch GPU settings, passed only when given (the interpreter ignores them)."""
    return {k: v for k, v in (("num_warps", num_warps), ("num_stages", num_stages))
            if v is not None}


def flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
                  block_m: int = 32, block_n: int = 32, num_warps: int | None = None,
                  num_stages: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out (B, H, N, D), lse (B, H, N) float32)``; one program per (query block, batch·head).

    ``block_m`` must be a multiple of ``block_n`` (the diagonal tiles are whole key blocks).
    ``num_warps``, ``num_stages``: Triton's launch settings on a GPU (None: Triton's defaults).
    """
    B, H, N, D = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(N, block_m), B * H)
    flash_fwd_kernel[grid](q, k, v, out, lse, N, LOG2E / math.sqrt(D), IS_CAUSAL=is_causal,
                           BLOCK_M=block_m, BLOCK_N=block_n, D=D,
                           **_launch_options(num_warps, num_stages))
    return out, lse


# --------------------------------------------------------------------------- backward
#
# With P = softmax(S), S = Q Kᵀ / √E, and D = rowsum(dO ∘ O) (= rowsum(P ∘ dP), chapter 8):
#   dV = Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP − D),   dQ = dS K / √E,   dK = dSᵀ Q / √E.
# Each tile's P is recomputed from the saved lse: P = exp(S − lse) = exp2(S·log2 e − lse·log2 e).
# Two kernels, so that no two programs write the same block (no atomics): one program per key
# block accumulates dK and dV over the query blocks; one per query block accumulates dQ over the
# key blocks (the split of Triton's fused-attention tutorial; FlashAttention-2 instead runs one
# program per key block that adds its dQ tiles into a float32 buffer with atomic adds).


@triton.jit
def flash_bwd_delta_kernel(o_ptr, do_ptr, delta_ptr, L, BLOCK_M: tl.constexpr, E: tl.constexpr):
    """D = rowsum(dO ∘ O) for BLOCK_M rows of head bh: program (i, bh)."""
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, E)
    at = bh * L * E + rows[:, None] * E + dims[None, :]
    o = tl.load(o_ptr + at, mask=rows[:, None] < L, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + at, mask=rows[:, None] < L, other=0.0).to(tl.float32)
    tl.store(delta_ptr + bh * L + rows, tl.sum(o * do, axis=1), mask=rows < L)


@triton.jit
def flash_bwd_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                          L, S, sm_scale, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, E: tl.constexpr):
    """Program (j, bh): dK and dV of key block j of head bh, summed over the query blocks."""
    bh = tl.program_id(1)
    keys = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, E)
    kv_at = bh * S * E + keys[:, None] * E + dims[None, :]
    k = tl.load(k_ptr + kv_at, mask=keys[:, None] < S, other=0.0)
    v = tl.load(v_ptr + kv_at, mask=keys[:, None] < S, other=0.0)
    dk = tl.zeros((BLOCK_N, E), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, E), dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634                     # log2(e) / √E
    # causal: query rows before this key block see none of it
    lo = (tl.program_id(0) * BLOCK_N) // BLOCK_M * BLOCK_M if IS_CAUSAL else 0
    for start in range(lo, L, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        q_at = bh * L * E + rows[:, None] * E + dims[None, :]
        q = tl.load(q_ptr + q_at, mask=rows[:, None] < L, other=0.0)
        do = tl.load(do_ptr + q_at, mask=rows[:, None] < L, other=0.0)
        lse = tl.load(lse_ptr + bh * L + rows, mask=rows < L, other=0.0)
        delta = tl.load(delta_ptr + bh * L + rows, mask=rows < L, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale                   # (BLOCK_M, BLOCK_N), base 2
        keep = (rows[:, None] < L) & (keys[None, :] < S)
        if IS_CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        p = tl.where(keep, tl.exp2(s - lse[:, None] * 1.4426950408889634), 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do)               # dV += Pᵀ dO
        dp = tl.dot(do, tl.trans(v))                             # dP = dO Vᵀ
        ds = p * (dp - delta[:, None])                           # dS = P ∘ (dP − D)
        dk += tl.dot(tl.trans(ds).to(q.dtype), q)                # dK += dSᵀ Q
    tl.store(dk_ptr + kv_at, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=keys[:, None] < S)
    tl.store(dv_ptr + kv_at, dv.to(dv_ptr.dtype.element_ty), mask=keys[:, None] < S)


@triton.jit
def flash_bwd_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, L, S, sm_scale,
                        IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        E: tl.constexpr):
    """Program (i, bh): dQ of query block i of head bh, summed over the key blocks."""
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, E)
    q_at = bh * L * E + rows[:, None] * E + dims[None, :]
    q = tl.load(q_ptr + q_at, mask=rows[:, None] < L, other=0.0)
    do = tl.load(do_ptr + q_at, mask=rows[:, None] < L, other=0.0)
    lse = tl.load(lse_ptr + bh * L + rows, mask=rows < L, other=0.0)
    delta = tl.load(delta_ptr + bh * L + rows, mask=rows < L, other=0.0)
    dq = tl.zeros((BLOCK_M, E), dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    hi = tl.minimum((tl.program_id(0) + 1) * BLOCK_M, S) if IS_CAUSAL else S
    for start in range(0, hi, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        kv_at = bh * S * E + keys[:, None] * E + dims[None, :]
        k = tl.load(k_ptr + kv_at, mask=keys[:, None] < S, other=0.0)
        v = tl.load(v_ptr + kv_at, mask=keys[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        keep = (rows[:, None] < L) & (keys[None, :] < S)
        if IS_CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        p = tl.where(keep, tl.exp2(s - lse[:, None] * 1.4426950408889634), 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)                          # dQ += dS K
    tl.store(dq_ptr + q_at, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=rows[:, None] < L)


def flash_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, dout: torch.Tensor, is_causal: bool = False,
                   block_m: int = 32, block_n: int = 32, num_warps: int | None = None,
                   num_stages: int | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` from the forward's ``out`` and ``lse``: three launches (D, dK/dV, dQ).

    q, out, dout ``(B, H, L, E)``; k, v ``(B, H, S, E)``; lse ``(B, H, L)`` natural log. Causal
    keeps key j for query i when j ≤ i (top-left, as ``is_causal`` in torch).
    """
    B, H, L, E = q.shape
    S = k.shape[-2]
    q, k, v, out, dout = (t.contiguous() for t in (q, k, v, out, dout))
    lse = lse.contiguous().float()
    delta = torch.empty((B, H, L), dtype=torch.float32, device=q.device)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    scale = 1.0 / math.sqrt(E)
    flash_bwd_delta_kernel[(triton.cdiv(L, block_m), B * H)](out, dout, delta, L,
                                                             BLOCK_M=block_m, E=E)
    flash_bwd_dkdv_kernel[(triton.cdiv(S, block_n), B * H)](
        q, k, v, dout, lse, delta, dk, dv, L, S, scale, IS_CAUSAL=is_causal, BLOCK_M=block_m,
        BLOCK_N=block_n, E=E, **_launch_options(num_warps, num_stages))
    flash_bwd_dq_kernel[(triton.cdiv(L, block_m), B * H)](
        q, k, v, dout, lse, delta, dq, L, S, scale, IS_CAUSAL=is_causal, BLOCK_M=block_m,
        BLOCK_N=block_n, E=E, **_launch_options(num_warps, num_stages))
    return dq, dk, dv
