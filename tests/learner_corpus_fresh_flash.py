"""A fresh set of submissions for chapters 8 (flash) and 9 (flash in Triton), for issue 39.

Written from the chapters' text (book/08_flash.ipynb, book/09_flash_triton.ipynb), each exercise's
signature and its hints, the way learners write them: per exercise one right submission in an
unusual style and several wrong ones. The Triton submissions are real ``@triton.jit`` kernels
(module level, small tiles, so that the interpreter stays quick) launched by a wrapper.

``FRESH_FLASH``: ``(exercise id, verdict, function)``; the verdict is ``"pass"`` or the id a check
at seed 0 must report (``learner_corpus.GENERIC`` holds the ids that name no mistake). Without
Triton (other platforms) the chapter 9 entries are left out.
"""

from __future__ import annotations

import math

import torch

from course_lib.chapters import ch09_flash_triton as _ch09  # first: sets TRITON_INTERPRET=1

TRITON = _ch09.TRITON_AVAILABLE

# =========================================================================== chapter 8
# --------------------------------------------------------------------------- online_softmax_stats


def os_right_element_by_element(blocks):
    """Right, unusual: Python floats, one entry at a time (the original online normaliser)."""
    m, l, wide = -math.inf, 0.0, True
    for b in blocks:
        wide = wide and b.dtype == torch.float64
        for x in b.tolist():
            if x == -math.inf:
                continue
            if x > m:
                l = l * math.exp(m - x) + 1.0
                m = x
            else:
                l += math.exp(x - m)
    dtype = torch.float64 if wide else torch.float32
    return torch.tensor(m, dtype=dtype), torch.tensor(l, dtype=dtype)


def os_two_passes(blocks):
    """Reads the iterator twice: the second pass sees nothing."""
    m = max(b.max() for b in blocks)
    l = sum(torch.exp(b - m).sum() for b in blocks)
    return m, l


def os_rescale_upside_down(blocks):
    """Starts from the first block, then multiplies the old sum by exp(m_new - m_old)."""
    it = iter(blocks)
    first = next(it)
    m = first.max()
    l = torch.exp(first - m).sum()
    for b in it:
        m_new = torch.maximum(m, b.max())
        l = l * torch.exp(m_new - m) + torch.exp(b - m_new).sum()
        m = m_new
    return m, l


def os_each_block_own_max(blocks):
    """Each block's terms relative to that block's own maximum, never re-based."""
    m = torch.tensor(-math.inf)
    l = torch.tensor(0.0)
    for b in blocks:
        bm = b.max()
        l = l + torch.exp(b - bm).sum()
        m = torch.maximum(m, bm)
    return m, l


def os_python_max_no_rescale(blocks):
    """Keeps the running max, forgets to re-base the sum."""
    m, l = -math.inf, 0.0
    for b in blocks:
        m = max(m, b.max().item())
        l += torch.exp(b - m).sum().item()
    return torch.tensor(m), torch.tensor(l)


def os_returns_log_sum(blocks):
    """Returns the log-sum-exp (as the backward pass wants) instead of ℓ."""
    m = torch.tensor(-math.inf, dtype=torch.float64)
    l = torch.tensor(0.0, dtype=torch.float64)
    dtype = torch.float64
    for b in blocks:
        if b.dtype != torch.float64:
            dtype = torch.float32
        m_new = torch.maximum(m, b.max().double())
        if m_new == -math.inf:
            continue
        l = l * torch.exp(m - m_new) + torch.exp(b.double() - m_new).sum()
        m = m_new
    return m.to(dtype), (m + torch.log(l)).to(dtype)


# --------------------------------------------------------------------------- flash_attention


def fa_right_query_tiles_base2(q, k, v, block_size=64):
    """Right, unusual: query tiles outside, key tiles inside, exponentials in base 2."""
    E = q.shape[-1]
    c = math.log2(math.e) / math.sqrt(E)
    out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for i0 in range(0, q.shape[-2], block_size):
        qi = q[..., i0:i0 + block_size, :] * c
        m = torch.full(qi.shape[:-1], -math.inf, dtype=q.dtype)
        l = torch.zeros(qi.shape[:-1], dtype=q.dtype)
        acc = torch.zeros(qi.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        for j0 in range(0, k.shape[-2], block_size):
            s = torch.einsum("bhie,bhje->bhij", qi, k[..., j0:j0 + block_size, :])
            m_new = torch.maximum(m, s.max(dim=-1).values)
            p = torch.exp2(s - m_new.unsqueeze(-1))
            a = torch.exp2(m - m_new)
            l = a * l + p.sum(-1)
            acc = a.unsqueeze(-1) * acc + torch.einsum("bhij,bhje->bhie", p,
                                                       v[..., j0:j0 + block_size, :])
            m = m_new
        out[..., i0:i0 + block_size, :] = acc / l.unsqueeze(-1)
    return out


def fa_forgot_alpha_on_output(q, k, v, block_size=64):
    scale = q.shape[-1] ** -0.5
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    o = torch.zeros_like(q)
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j:j + block_size, :].mT * scale
        m_new = torch.maximum(m, s.max(-1, keepdim=True).values)
        p = (s - m_new).exp()
        l = l * (m - m_new).exp() + p.sum(-1, keepdim=True)
        o = o + p @ v[..., j:j + block_size, :]
        m = m_new
    return o / l


def fa_block_max_not_running(q, k, v, block_size=64):
    """Re-bases to each block's own maximum (not the running one)."""
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    o = torch.zeros_like(q)
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j:j + block_size, :].transpose(-1, -2) * scale
        m_blk = s.amax(-1, keepdim=True)
        p = torch.exp(s - m_blk)
        alpha = torch.exp(m - m_blk)
        l = alpha * l + p.sum(-1, keepdim=True)
        o = alpha * o + p @ v[..., j:j + block_size, :]
        m = m_blk
    return o / l


def fa_normalised_every_block(q, k, v, block_size=64):
    """Keeps O divided by ℓ after every block, but re-bases it by α only."""
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    o = torch.zeros_like(q)
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j:j + block_size, :].transpose(-1, -2) * scale
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        l = alpha * l + p.sum(-1, keepdim=True)
        o = (alpha * o + p @ v[..., j:j + block_size, :]) / l
        m = m_new
    return o


def fa_alpha_upside_down(q, k, v, block_size=64):
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    o = torch.zeros_like(q)
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j:j + block_size, :].transpose(-1, -2) * scale
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m_new - m)
        l = alpha * l + p.sum(-1, keepdim=True)
        o = alpha * o + p @ v[..., j:j + block_size, :]
        m = m_new
    return o / l


def fa_no_sqrt_scale(q, k, v, block_size=64):
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    o = torch.zeros_like(q)
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j:j + block_size, :].transpose(-1, -2)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        l = alpha * l + p.sum(-1, keepdim=True)
        o = alpha * o + p @ v[..., j:j + block_size, :]
        m = m_new
    return o / l


# --------------------------------------------------------------------------- flash_backward


def fb_right_query_outer_base2(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    """Right, unusual: query blocks outside, key blocks inside, P in base 2."""
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    sc = 1 / math.sqrt(E)
    l2e = 1 / math.log(2)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i0 in range(0, L, block_size):
        i1 = min(i0 + block_size, L)
        qi, doi = q[..., i0:i1, :], grad_out[..., i0:i1, :]
        Di = (doi * out[..., i0:i1, :]).sum(-1, keepdim=True)
        li = lse[..., i0:i1, None] * l2e
        for j0 in range(0, S, block_size):
            j1 = min(j0 + block_size, S)
            if is_causal and j0 > i1 - 1:
                break
            kj, vj = k[..., j0:j1, :], v[..., j0:j1, :]
            p = torch.exp2(qi @ kj.transpose(-1, -2) * (sc * l2e) - li)
            if is_causal:
                keep = torch.arange(j0, j1)[None, :] <= torch.arange(i0, i1)[:, None]
                p = p * keep
            ds = p * (doi @ vj.transpose(-1, -2) - Di)
            dv[..., j0:j1, :] += p.transpose(-1, -2) @ doi
            dk[..., j0:j1, :] += sc * ds.transpose(-1, -2) @ qi
            dq[..., i0:i1, :] += sc * ds @ kj
    return dq, dk, dv


def _fb_blocks(q, k, v, out, lse, grad_out, is_causal, block_size, probs, mask, d_per_block=False,
               dq_assign=False):
    s = q.shape[-1] ** -0.5
    D = (grad_out * out).sum(-1, keepdim=True)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    i = torch.arange(q.shape[-2]).unsqueeze(1)
    for j0 in range(0, k.shape[-2], block_size):
        kj, vj = k[..., j0:j0 + block_size, :], v[..., j0:j0 + block_size, :]
        S_j = q @ kj.transpose(-2, -1) * s
        if is_causal:
            j = torch.arange(j0, j0 + kj.shape[-2]).unsqueeze(0)
            S_j = S_j.masked_fill(mask(i, j, q.shape[-2], k.shape[-2]), float("-inf"))
        P_j = probs(S_j, lse)
        dP_j = grad_out @ vj.transpose(-2, -1)
        if d_per_block:
            D = (P_j * dP_j).sum(-1, keepdim=True)
        dS_j = P_j * (dP_j - D)
        dv[..., j0:j0 + block_size, :] = P_j.transpose(-2, -1) @ grad_out
        dk[..., j0:j0 + block_size, :] = dS_j.transpose(-2, -1) @ q * s
        if dq_assign:
            dq = dS_j @ kj * s
        else:
            dq = dq + dS_j @ kj * s
    return dq, dk, dv


def _future(i, j, L, S):
    return j > i


def _normalised(S_j, lse):
    return torch.exp(S_j - lse.unsqueeze(-1))


def fb_exp_then_divide(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    return _fb_blocks(q, k, v, out, lse, grad_out, is_causal, block_size,
                      lambda S_j, lse: torch.exp(S_j) / torch.exp(lse)[..., None], _future)


def fb_causal_bottom_right(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    """Aligns the causal mask to the last query (as for a KV cache)."""
    return _fb_blocks(q, k, v, out, lse, grad_out, is_causal, block_size, _normalised,
                      lambda i, j, L, S: j > i + (S - L))


def fb_causal_ge(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    return _fb_blocks(q, k, v, out, lse, grad_out, is_causal, block_size, _normalised,
                      lambda i, j, L, S: j >= i)


def fb_D_inside_the_loop(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    """D = rowsum(P ∘ dP) over the current key block only."""
    return _fb_blocks(q, k, v, out, lse, grad_out, is_causal, block_size, _normalised, _future,
                      d_per_block=True)


def fb_dq_assigned(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    """dq = ... (assigned, like dk and dv) instead of dq += ..."""
    return _fb_blocks(q, k, v, out, lse, grad_out, is_causal, block_size, _normalised, _future,
                      dq_assign=True)


def fb_softmax_per_block(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    """Recomputes P with a softmax over the block's own keys, ignoring lse."""
    return _fb_blocks(q, k, v, out, lse, grad_out, is_causal, block_size,
                      lambda S_j, lse: torch.softmax(S_j, dim=-1), _future)


FRESH_FLASH_CH08 = [
    ("online_softmax_stats", "pass", os_right_element_by_element),
    ("online_softmax_stats", "iterator_read_twice", os_two_passes),
    ("online_softmax_stats", "rescale_upside_down", os_rescale_upside_down),
    ("online_softmax_stats", "block_max_only", os_each_block_own_max),
    ("online_softmax_stats", "sum_not_rescaled", os_python_max_no_rescale),
    ("online_softmax_stats", "returned_lse", os_returns_log_sum),
    ("flash_attention", "pass", fa_right_query_tiles_base2),
    ("flash_attention", "output_not_rescaled", fa_forgot_alpha_on_output),
    ("flash_attention", "block_max_not_running", fa_block_max_not_running),
    ("flash_attention", "normalised_every_block", fa_normalised_every_block),
    ("flash_attention", "nan", fa_alpha_upside_down),
    ("flash_attention", "no_scaling", fa_no_sqrt_scale),
    ("flash_backward", "pass", fb_right_query_outer_base2),
    ("flash_backward", "exp_then_divide", fb_exp_then_divide),
    ("flash_backward", "causal_bottom_right", fb_causal_bottom_right),
    ("flash_backward", "causal_excludes_diagonal", fb_causal_ge),
    ("flash_backward", "D_per_block", fb_D_inside_the_loop),
    ("flash_backward", "dq_overwritten", fb_dq_assigned),
    ("flash_backward", "normalised_per_block", fb_softmax_per_block),
]

# =========================================================================== chapter 9

FRESH_FLASH_CH09: list = []

if TRITON:
    import triton
    import triton.language as tl

    # ----------------------------------------------------------------------- triton_softmax

    @triton.jit
    def _ts_chunked_online(x_ptr, y_ptr, n_cols, CHUNK: tl.constexpr):
        """Right, unusual: the row in chunks of CHUNK columns, an online max and sum, then a
        second pass that writes."""
        row = tl.program_id(0)
        base = x_ptr + row * n_cols
        m = float("-inf")
        l = 0.0
        for c0 in range(0, n_cols, CHUNK):
            cols = c0 + tl.arange(0, CHUNK)
            x = tl.load(base + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, axis=0))
            l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        for c0 in range(0, n_cols, CHUNK):
            cols = c0 + tl.arange(0, CHUNK)
            x = tl.load(base + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(y_ptr + row * n_cols + cols, tl.exp(x - m) / l, mask=cols < n_cols)

    def ts_right_chunked_online(x):
        y = torch.empty_like(x)
        _ts_chunked_online[(x.shape[0],)](x, y, x.shape[1], CHUNK=16)
        return y

    @triton.jit
    def _ts_mask_no_other(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        r = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + r * n + offs, mask=offs < n)
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(y_ptr + r * n + offs, e / tl.sum(e, axis=0), mask=offs < n)

    def ts_mask_without_other(x):
        x = x.contiguous()
        out = torch.empty_like(x)
        _ts_mask_no_other[(x.shape[0],)](x, out, x.shape[1],
                                         BLOCK=triton.next_power_of_2(x.shape[1]))
        return out

    @triton.jit
    def _ts_raw_exp(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        ok = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=ok, other=float("-inf"))
        num = tl.exp(x)
        tl.store(y_ptr + row * n_cols + cols, num / tl.sum(num, axis=0), mask=ok)

    def ts_without_max(x):
        y = torch.empty_like(x)
        _ts_raw_exp[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y

    @triton.jit
    def _ts_exp2(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        p = tl.exp2(x - tl.max(x, axis=0))          # exp2 is the fast one
        tl.store(y_ptr + row * n_cols + cols, p / tl.sum(p, axis=0), mask=cols < n_cols)

    def ts_exp2_without_log2e(x):
        y = torch.empty_like(x)
        _ts_exp2[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y

    @triton.jit
    def _ts_unnormalised(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(y_ptr + row * n_cols + cols, tl.exp(x - tl.max(x, axis=0)), mask=cols < n_cols)

    def ts_forgot_the_division(x):
        y = torch.empty_like(x)
        _ts_unnormalised[(x.shape[0],)](x, y, x.shape[1],
                                        BLOCK=triton.next_power_of_2(x.shape[1]))
        return y

    @triton.jit
    def _ts_block64(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
        p = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_ptr + row * n_cols + cols, p / tl.sum(p, axis=0), mask=cols < n_cols)

    def ts_fixed_block_of_64(x):
        y = torch.empty_like(x)
        _ts_block64[(x.shape[0],)](x, y, x.shape[1], BLOCK=64)
        return y

    # ----------------------------------------------------------------------- triton_matmul

    @triton.jit
    def _tm_broadcast_sum(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                          BK: tl.constexpr):
        """Right, unusual: no tl.dot, a broadcast product summed over K in float32."""
        i = tl.program_id(0) * BM + tl.arange(0, BM)
        j = tl.program_id(1) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            kk = k0 + tl.arange(0, BK)
            a = tl.load(a_ptr + i[:, None] * K + kk[None, :],
                        mask=(i[:, None] < M) & (kk[None, :] < K), other=0.0).to(tl.float32)
            b = tl.load(b_ptr + kk[:, None] * N + j[None, :],
                        mask=(kk[:, None] < K) & (j[None, :] < N), other=0.0).to(tl.float32)
            acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
        tl.store(c_ptr + i[:, None] * N + j[None, :], acc, mask=(i[:, None] < M) & (j[None, :] < N))

    def tm_right_broadcast_sum(a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty(M, N, dtype=a.dtype)
        _tm_broadcast_sum[(triton.cdiv(M, 16), triton.cdiv(N, 16))](
            a.contiguous(), b.contiguous(), c, M, N, K, BM=16, BN=16, BK=8)
        return c

    @triton.jit
    def _tm_overwrite(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr):
        rm = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        rn = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for k in range(0, K, BLOCK):
            rk = k + tl.arange(0, BLOCK)
            a = tl.load(a_ptr + rm[:, None] * K + rk[None, :],
                        mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            b = tl.load(b_ptr + rk[:, None] * N + rn[None, :],
                        mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    def tm_accumulator_overwritten(a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=a.dtype)
        _tm_overwrite[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK=32)
        return c

    @triton.jit
    def _tm_whole_k_blocks(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for t in range(0, K // BLOCK_K):                     # whole K blocks only
            ks = t * BLOCK_K + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=rows[:, None] < M, other=0.0)
            b = tl.load(b_ptr + ks[:, None] * N + cols[None, :], mask=cols[None, :] < N, other=0.0)
            acc += tl.dot(a, b)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))

    def tm_k_tail_left_out(a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=a.dtype)
        _tm_whole_k_blocks[(triton.cdiv(M, 16), triton.cdiv(N, 16))](
            a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
        return c

    @triton.jit
    def _tm_plain(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + rows[:, None] * K + ks[None, :],
                        mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
            b = tl.load(b_ptr + ks[:, None] * N + cols[None, :],
                        mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc,
                 mask=(rows[:, None] < M) & (cols[None, :] < N))

    def tm_float32_result(a, b):
        """Allocates the result as torch.empty(M, N): float32 whatever the inputs."""
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty(M, N)
        _tm_plain[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32,
                                                           BLOCK_N=32, BLOCK_K=16)
        return c

    def tm_grid_swapped(a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=a.dtype)
        _tm_plain[(triton.cdiv(N, 32), triton.cdiv(M, 32))](a, b, c, M, N, K, BLOCK_M=32,
                                                           BLOCK_N=32, BLOCK_K=16)
        return c

    @triton.jit
    def _tm_b_strides(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + rows[:, None] * K + ks[None, :],
                        mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
            b = tl.load(b_ptr + ks[:, None] + cols[None, :] * K,      # b's strides as (N, K)
                        mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))

    def tm_b_strides_swapped(a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=a.dtype)
        _tm_b_strides[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32,
                                                               BLOCK_N=32, BLOCK_K=16)
        return c

    # ----------------------------------------------------------------------- triton_flash_forward

    @triton.jit
    def _tff_natural_where(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, L, sm_scale,
                           CAUSAL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                           E: tl.constexpr):
        """Right, unusual: natural exp, one loop, the causal mask applied with tl.where on every
        tile visited (up to the diagonal), lse = m + log ℓ directly."""
        pid = tl.program_id(0)
        head = tl.program_id(1) * L * E
        i = pid * BM + tl.arange(0, BM)
        e = tl.arange(0, E)
        q = tl.load(q_ptr + head + i[:, None] * E + e[None, :], mask=i[:, None] < L, other=0.0)
        m = tl.zeros((BM,), dtype=tl.float32) - float("inf")
        l = tl.zeros((BM,), dtype=tl.float32)
        acc = tl.zeros((BM, E), dtype=tl.float32)
        end = tl.minimum((pid + 1) * BM, L) if CAUSAL else L
        for n0 in range(0, end, BN):
            j = n0 + tl.arange(0, BN)
            kt = tl.load(k_ptr + head + j[None, :] * E + e[:, None], mask=j[None, :] < L, other=0.0)
            vb = tl.load(v_ptr + head + j[:, None] * E + e[None, :], mask=j[:, None] < L, other=0.0)
            s = tl.dot(q, kt) * sm_scale
            ok = j[None, :] < L
            if CAUSAL:
                ok = ok & (j[None, :] <= i[:, None])
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            corr = tl.exp(m - m_new)
            l = l * corr + tl.sum(p, 1)
            acc = acc * corr[:, None] + tl.dot(p, vb)
            m = m_new
        tl.store(o_ptr + head + i[:, None] * E + e[None, :], acc / l[:, None], mask=i[:, None] < L)
        tl.store(lse_ptr + tl.program_id(1) * L + i, m + tl.log(l), mask=i < L)

    def tff_right_natural_exp(q, k, v, is_causal=False):
        B, H, L, E = q.shape
        o = torch.empty_like(q)
        lse = torch.empty(B, H, L)
        _tff_natural_where[(triton.cdiv(L, 16), B * H)](q, k, v, o, lse, L, 1 / math.sqrt(E),
                                                        CAUSAL=is_causal, BM=16, BN=16, E=E)
        return o, lse

    @triton.jit
    def _tff_fa2(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, L, qk_scale, IS_CAUSAL: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, E: tl.constexpr,
                 LSE_NATURAL: tl.constexpr, MASK_SCORES: tl.constexpr):
        """One learner's kernel, handed in twice: once with lse left in base 2, once (an earlier
        version) with the ragged key block's scores unmasked."""
        start_m = tl.program_id(0)
        off = tl.program_id(1) * L * E
        rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, E)
        q = tl.load(q_ptr + off + rows[:, None] * E + d[None, :], mask=rows[:, None] < L,
                    other=0.0)
        m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        l_i = tl.zeros((BLOCK_M,), tl.float32)
        acc = tl.zeros((BLOCK_M, E), tl.float32)
        hi = (start_m + 1) * BLOCK_M if IS_CAUSAL else L
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + tl.arange(0, BLOCK_N)
            k = tl.load(k_ptr + off + cols[:, None] * E + d[None, :], mask=cols[:, None] < L,
                        other=0.0)
            v = tl.load(v_ptr + off + cols[:, None] * E + d[None, :], mask=cols[:, None] < L,
                        other=0.0)
            qk = tl.dot(q, tl.trans(k)) * qk_scale
            if MASK_SCORES:
                qk = tl.where(cols[None, :] < L, qk, float("-inf"))
            if IS_CAUSAL:
                qk = tl.where(cols[None, :] <= rows[:, None], qk, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            p = tl.exp2(qk - m_ij[:, None])
            alpha = tl.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m_i = m_ij
        tl.store(o_ptr + off + rows[:, None] * E + d[None, :], acc / l_i[:, None],
                 mask=rows[:, None] < L)
        lse = m_i + tl.log2(l_i)
        if LSE_NATURAL:
            lse = lse * 0.6931471805599453
        tl.store(lse_ptr + tl.program_id(1) * L + rows, lse, mask=rows < L)

    def _tff_launch(q, k, v, is_causal, **flags):
        B, H, L, E = q.shape
        out = torch.empty_like(q)
        lse = torch.empty((B, H, L), dtype=torch.float32)
        _tff_fa2[(triton.cdiv(L, 32), B * H)](q, k, v, out, lse, L,
                                              1.4426950408889634 / math.sqrt(E),
                                              IS_CAUSAL=is_causal, BLOCK_M=32, BLOCK_N=32, E=E,
                                              **flags)
        return out, lse

    def tff_lse_in_base_2(q, k, v, is_causal=False):
        return _tff_launch(q, k, v, is_causal, LSE_NATURAL=False, MASK_SCORES=True)

    def tff_ragged_scores_unmasked(q, k, v, is_causal=False):
        return _tff_launch(q, k, v, is_causal, LSE_NATURAL=True, MASK_SCORES=False)

    @triton.jit
    def _tff_below_diagonal_only(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, L, scale,
                                 CAUSAL: tl.constexpr, BLOCK: tl.constexpr, E: tl.constexpr):
        """Causal: visits the key blocks before its own query block, and never the diagonal."""
        blk = tl.program_id(0)
        base = tl.program_id(1) * L * E
        r = blk * BLOCK + tl.arange(0, BLOCK)
        e = tl.arange(0, E)
        q = tl.load(q_ptr + base + r[:, None] * E + e[None, :], mask=r[:, None] < L, other=0.0)
        m = tl.full((BLOCK,), float("-inf"), tl.float32)
        ell = tl.zeros((BLOCK,), tl.float32)
        o = tl.zeros((BLOCK, E), tl.float32)
        stop = blk * BLOCK if CAUSAL else L
        for n in range(0, stop, BLOCK):
            c = n + tl.arange(0, BLOCK)
            k = tl.load(k_ptr + base + c[:, None] * E + e[None, :], mask=c[:, None] < L, other=0.0)
            v = tl.load(v_ptr + base + c[:, None] * E + e[None, :], mask=c[:, None] < L, other=0.0)
            s = tl.where(c[None, :] < L, tl.dot(q, tl.trans(k)) * scale, float("-inf"))
            m2 = tl.maximum(m, tl.max(s, axis=1))
            p = tl.exp2(s - m2[:, None])
            a = tl.exp2(m - m2)
            ell = a * ell + tl.sum(p, axis=1)
            o = a[:, None] * o + tl.dot(p, v)
            m = m2
        tl.store(o_ptr + base + r[:, None] * E + e[None, :], o / ell[:, None], mask=r[:, None] < L)
        tl.store(lse_ptr + tl.program_id(1) * L + r, (m + tl.log2(ell)) * 0.6931471805599453,
                 mask=r < L)

    def tff_diagonal_tile_skipped(q, k, v, is_causal=False):
        B, H, L, E = q.shape
        o = torch.empty_like(q)
        lse = torch.empty((B, H, L))
        _tff_below_diagonal_only[(triton.cdiv(L, 16), B * H)](
            q, k, v, o, lse, L, math.log2(math.e) / math.sqrt(E), CAUSAL=is_causal, BLOCK=16, E=E)
        return o, lse

    @triton.jit
    def _tff_variants(Q, K, V, O, LSE, N, sm_scale, CAUSAL: tl.constexpr, BM: tl.constexpr,
                      BN: tl.constexpr, D: tl.constexpr, DIVIDE: tl.constexpr,
                      USE_EXP2: tl.constexpr, LSE_WITH_M: tl.constexpr):
        """Another learner's kernel (natural-log scale), handed in with three different slips."""
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_d = tl.arange(0, D)
        Q += pid_bh * N * D
        K += pid_bh * N * D
        V += pid_bh * N * D
        q = tl.load(Q + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < N, other=0.0)
        m_i = tl.full((BM,), -float("inf"), dtype=tl.float32)
        l_i = tl.zeros((BM,), dtype=tl.float32)
        acc = tl.zeros((BM, D), dtype=tl.float32)
        qk_scale = sm_scale * 1.44269504
        end = (pid_m + 1) * BM if CAUSAL else N
        for start_n in range(0, end, BN):
            offs_n = start_n + tl.arange(0, BN)
            k = tl.load(K + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < N,
                        other=0.0)
            v = tl.load(V + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < N,
                        other=0.0)
            qk = tl.dot(q, tl.trans(k)) * qk_scale
            keep = offs_n[None, :] < N
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            qk = tl.where(keep, qk, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(qk, axis=1))
            if USE_EXP2:
                p = tl.exp2(qk - m_new[:, None])
                alpha = tl.exp2(m_i - m_new)
            else:
                p = tl.exp(qk - m_new[:, None])
                alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m_i = m_new
        if DIVIDE:
            acc = acc / l_i[:, None]
        tl.store(O + pid_bh * N * D + offs_m[:, None] * D + offs_d[None, :], acc,
                 mask=offs_m[:, None] < N)
        if LSE_WITH_M:
            lse = (m_i + tl.log2(l_i)) / 1.44269504
        else:
            lse = tl.log(l_i)
        tl.store(LSE + pid_bh * N + offs_m, lse, mask=offs_m < N)

    def _tff_variant(q, k, v, is_causal, **flags):
        B, H, N, D = q.shape
        o = torch.empty_like(q)
        lse = torch.empty((B, H, N), dtype=torch.float32)
        _tff_variants[(triton.cdiv(N, 32), B * H)](q, k, v, o, lse, N, D ** -0.5, CAUSAL=is_causal,
                                                   BM=32, BN=32, D=D, **flags)
        return o, lse

    def tff_output_not_divided(q, k, v, is_causal=False):
        return _tff_variant(q, k, v, is_causal, DIVIDE=False, USE_EXP2=True, LSE_WITH_M=True)

    def tff_exp_with_log2e_scale(q, k, v, is_causal=False):
        return _tff_variant(q, k, v, is_causal, DIVIDE=True, USE_EXP2=False, LSE_WITH_M=True)

    def tff_lse_forgets_the_max(q, k, v, is_causal=False):
        return _tff_variant(q, k, v, is_causal, DIVIDE=True, USE_EXP2=True, LSE_WITH_M=False)

    # ----------------------------------------------------------------------- triton_flash_backward

    @triton.jit
    def _tfb_one_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, d_ptr, dq_ptr, dk_ptr, dv_ptr, L,
                        sm_scale, CAUSAL: tl.constexpr, BLOCK: tl.constexpr, E: tl.constexpr,
                        MASK_DQ: tl.constexpr):
        """One program per (key block, batch·head): dK and dV summed over the query blocks, and
        each tile's share of dQ added with tl.atomic_add (dq starts at zero)."""
        kb = tl.program_id(0)
        head = tl.program_id(1) * L * E
        keys = kb * BLOCK + tl.arange(0, BLOCK)
        e = tl.arange(0, E)
        k = tl.load(k_ptr + head + keys[:, None] * E + e[None, :], mask=keys[:, None] < L,
                    other=0.0)
        v = tl.load(v_ptr + head + keys[:, None] * E + e[None, :], mask=keys[:, None] < L,
                    other=0.0)
        dk = tl.zeros((BLOCK, E), tl.float32)
        dv = tl.zeros((BLOCK, E), tl.float32)
        first = kb * BLOCK if CAUSAL else 0
        for m0 in range(first, L, BLOCK):
            rows = m0 + tl.arange(0, BLOCK)
            at = head + rows[:, None] * E + e[None, :]
            q = tl.load(q_ptr + at, mask=rows[:, None] < L, other=0.0)
            do = tl.load(do_ptr + at, mask=rows[:, None] < L, other=0.0)
            lse = tl.load(lse_ptr + tl.program_id(1) * L + rows, mask=rows < L, other=0.0)
            dd = tl.load(d_ptr + tl.program_id(1) * L + rows, mask=rows < L, other=0.0)
            s = tl.dot(q, tl.trans(k)) * sm_scale
            ok = (rows[:, None] < L) & (keys[None, :] < L)
            if CAUSAL:
                ok = ok & (keys[None, :] <= rows[:, None])
            p = tl.where(ok, tl.exp(s - lse[:, None]), 0.0)
            dv += tl.dot(tl.trans(p), do)
            ds = p * (tl.dot(do, tl.trans(v)) - dd[:, None])
            dk += tl.dot(tl.trans(ds), q)
            part = tl.dot(ds, k) * sm_scale
            if MASK_DQ:
                tl.atomic_add(dq_ptr + at, part, mask=rows[:, None] < L)
            else:
                tl.atomic_add(dq_ptr + at, part)
        tl.store(dk_ptr + head + keys[:, None] * E + e[None, :], dk * sm_scale,
                 mask=keys[:, None] < L)
        tl.store(dv_ptr + head + keys[:, None] * E + e[None, :], dv, mask=keys[:, None] < L)

    def _tfb_atomic(q, k, v, out, lse, dout, is_causal, mask_dq):
        B, H, L, E = q.shape
        delta = (out * dout).sum(-1)                     # D in torch: a row-wise dot product
        dq = torch.zeros_like(q)
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        _tfb_one_kernel[(triton.cdiv(L, 16), B * H)](
            q, k, v, dout, lse, delta, dq, dk, dv, L, 1 / math.sqrt(E), CAUSAL=is_causal,
            BLOCK=16, E=E, MASK_DQ=mask_dq)
        return dq, dk, dv

    def tfb_right_atomic_dq(q, k, v, out, lse, dout, is_causal=False):
        """Right, unusual: one kernel, dQ by atomics. Its D is computed by torch on the host:
        a right value (the bare path's verdict), which the watch's host rule of issue 51
        refuses (torch may allocate, view, copy and cast in a Triton exercise, not compute)."""
        return _tfb_atomic(q, k, v, out, lse, dout, is_causal, True)

    def tfb_atomic_add_unmasked(q, k, v, out, lse, dout, is_causal=False):
        """The same, with the atomic add of dQ unmasked: the last query block adds past dq's
        end (the interpreter used to let it through, corrupting memory)."""
        return _tfb_atomic(q, k, v, out, lse, dout, is_causal, False)

    @triton.jit
    def _tfb_delta(o_ptr, do_ptr, d_ptr, L, BM: tl.constexpr, E: tl.constexpr):
        r = tl.program_id(0) * BM + tl.arange(0, BM)
        e = tl.arange(0, E)
        at = tl.program_id(1) * L * E + r[:, None] * E + e[None, :]
        o = tl.load(o_ptr + at, mask=r[:, None] < L, other=0.0)
        do = tl.load(do_ptr + at, mask=r[:, None] < L, other=0.0)
        tl.store(d_ptr + tl.program_id(1) * L + r, tl.sum(o * do, 1), mask=r < L)

    @triton.jit
    def _tfb_probs(s, lse, keep, SPLIT: tl.constexpr):
        l2e = 1.4426950408889634
        if SPLIT:      # exp2(a - b) = exp2(a) / exp2(b)
            p = tl.exp2(s * l2e) / tl.exp2(lse[:, None] * l2e)
        else:
            p = tl.exp2(s * l2e - lse[:, None] * l2e)
        return tl.where(keep, p, 0.0)

    @triton.jit
    def _tfb_dkdv(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, d_ptr, dk_ptr, dv_ptr, L, sm_scale,
                  CAUSAL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, E: tl.constexpr,
                  SPLIT: tl.constexpr, AHEAD: tl.constexpr):
        bh = tl.program_id(1)
        keys = tl.program_id(0) * BN + tl.arange(0, BN)
        e = tl.arange(0, E)
        kv = bh * L * E + keys[:, None] * E + e[None, :]
        k = tl.load(k_ptr + kv, mask=keys[:, None] < L, other=0.0)
        v = tl.load(v_ptr + kv, mask=keys[:, None] < L, other=0.0)
        dk = tl.zeros((BN, E), tl.float32)
        dv = tl.zeros((BN, E), tl.float32)
        lo = tl.program_id(0) * BN // BM * BM if CAUSAL else 0   # tiles above the diagonal: skip
        for m0 in range(lo, L, BM):
            rows = m0 + tl.arange(0, BM)
            at = bh * L * E + rows[:, None] * E + e[None, :]
            q = tl.load(q_ptr + at, mask=rows[:, None] < L, other=0.0)
            do = tl.load(do_ptr + at, mask=rows[:, None] < L, other=0.0)
            lse = tl.load(lse_ptr + bh * L + rows, mask=rows < L, other=0.0)
            d = tl.load(d_ptr + bh * L + rows, mask=rows < L, other=0.0)
            keep = (rows[:, None] < L) & (keys[None, :] < L)
            if CAUSAL:
                keep = keep & (rows[:, None] >= keys[None, :] - AHEAD)
            p = _tfb_probs(tl.dot(q, tl.trans(k)) * sm_scale, lse, keep, SPLIT)
            dv += tl.dot(tl.trans(p), do)
            dk += tl.dot(tl.trans(p * (tl.dot(do, tl.trans(v)) - d[:, None])), q)
        tl.store(dk_ptr + kv, dk * sm_scale, mask=keys[:, None] < L)
        tl.store(dv_ptr + kv, dv, mask=keys[:, None] < L)

    @triton.jit
    def _tfb_dq(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, d_ptr, dq_ptr, L, sm_scale,
                CAUSAL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, E: tl.constexpr,
                SPLIT: tl.constexpr, AHEAD: tl.constexpr):
        bh = tl.program_id(1)
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        e = tl.arange(0, E)
        at = bh * L * E + rows[:, None] * E + e[None, :]
        q = tl.load(q_ptr + at, mask=rows[:, None] < L, other=0.0)
        do = tl.load(do_ptr + at, mask=rows[:, None] < L, other=0.0)
        lse = tl.load(lse_ptr + bh * L + rows, mask=rows < L, other=0.0)
        d = tl.load(d_ptr + bh * L + rows, mask=rows < L, other=0.0)
        dq = tl.zeros((BM, E), tl.float32)
        hi = (tl.program_id(0) + 1) * BM if CAUSAL else L         # up to the diagonal tile
        for n0 in range(0, hi, BN):
            keys = n0 + tl.arange(0, BN)
            kv = bh * L * E + keys[:, None] * E + e[None, :]
            k = tl.load(k_ptr + kv, mask=keys[:, None] < L, other=0.0)
            v = tl.load(v_ptr + kv, mask=keys[:, None] < L, other=0.0)
            keep = (rows[:, None] < L) & (keys[None, :] < L)
            if CAUSAL:
                keep = keep & (rows[:, None] >= keys[None, :] - AHEAD)
            p = _tfb_probs(tl.dot(q, tl.trans(k)) * sm_scale, lse, keep, SPLIT)
            dq += tl.dot(p * (tl.dot(do, tl.trans(v)) - d[:, None]), k)
        tl.store(dq_ptr + at, dq * sm_scale, mask=rows[:, None] < L)

    def _tfb_two_kernels(q, k, v, out, lse, dout, is_causal, block, **flags):
        B, H, L, E = q.shape
        delta = torch.empty((B, H, L))
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        grid = (triton.cdiv(L, block), B * H)
        _tfb_delta[grid](out, dout, delta, L, BM=block, E=E)
        args = (q, k, v, dout, lse, delta)
        _tfb_dkdv[grid](*args, dk, dv, L, E ** -0.5, CAUSAL=is_causal, BM=block, BN=block, E=E,
                        **flags)
        _tfb_dq[grid](*args, dq, L, E ** -0.5, CAUSAL=is_causal, BM=block, BN=block, E=E,
                      **flags)
        return dq, dk, dv

    def tfb_exp_then_divide(q, k, v, out, lse, dout, is_causal=False):
        return _tfb_two_kernels(q, k, v, out, lse, dout, is_causal, 32, SPLIT=True, AHEAD=0)

    def tfb_leaks_inside_diagonal_tiles(q, k, v, out, lse, dout, is_causal=False):
        """Skips the tiles above the diagonal, but its mask lets query i see key i + 1."""
        return _tfb_two_kernels(q, k, v, out, lse, dout, is_causal, 16, SPLIT=False, AHEAD=1)

    @triton.jit
    def _tfb_dkdv_b(Q, K, V, DO, LSE, DELTA, DK, DV, seqlen, scale, causal: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD: tl.constexpr,
                    DV_FROM_DS: tl.constexpr, USE_DELTA: tl.constexpr, OUT_SCALE):
        """A third learner: natural exp, the scale passed in twice (for P and for dK)."""
        start_n = tl.program_id(0) * BLOCK_N
        off = tl.program_id(1) * seqlen * HEAD
        offs_n = start_n + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD)
        k = tl.load(K + off + offs_n[:, None] * HEAD + offs_d[None, :],
                    mask=offs_n[:, None] < seqlen, other=0.0)
        v = tl.load(V + off + offs_n[:, None] * HEAD + offs_d[None, :],
                    mask=offs_n[:, None] < seqlen, other=0.0)
        dk = tl.zeros((BLOCK_N, HEAD), dtype=tl.float32)
        dv = tl.zeros((BLOCK_N, HEAD), dtype=tl.float32)
        for start_m in range(0, seqlen, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            q = tl.load(Q + off + offs_m[:, None] * HEAD + offs_d[None, :],
                        mask=offs_m[:, None] < seqlen, other=0.0)
            do = tl.load(DO + off + offs_m[:, None] * HEAD + offs_d[None, :],
                         mask=offs_m[:, None] < seqlen, other=0.0)
            lse = tl.load(LSE + tl.program_id(1) * seqlen + offs_m, mask=offs_m < seqlen,
                          other=float("inf"))
            delta = tl.load(DELTA + tl.program_id(1) * seqlen + offs_m, mask=offs_m < seqlen,
                            other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale
            valid = offs_n[None, :] < seqlen
            if causal:
                valid = valid & (offs_n[None, :] <= offs_m[:, None])
            p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
            dp = tl.dot(do, tl.trans(v))
            if USE_DELTA:
                ds = p * (dp - delta[:, None])
            else:
                ds = p * dp
            if DV_FROM_DS:
                dv += tl.dot(tl.trans(ds), do)
            else:
                dv += tl.dot(tl.trans(p), do)
            dk += tl.dot(tl.trans(ds), q)
        tl.store(DK + off + offs_n[:, None] * HEAD + offs_d[None, :], dk * OUT_SCALE,
                 mask=offs_n[:, None] < seqlen)
        tl.store(DV + off + offs_n[:, None] * HEAD + offs_d[None, :], dv,
                 mask=offs_n[:, None] < seqlen)

    @triton.jit
    def _tfb_dq_b(Q, K, V, DO, LSE, DELTA, DQ, seqlen, scale, causal: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD: tl.constexpr,
                  USE_DELTA: tl.constexpr, OUT_SCALE):
        off = tl.program_id(1) * seqlen * HEAD
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD)
        q = tl.load(Q + off + offs_m[:, None] * HEAD + offs_d[None, :],
                    mask=offs_m[:, None] < seqlen, other=0.0)
        do = tl.load(DO + off + offs_m[:, None] * HEAD + offs_d[None, :],
                     mask=offs_m[:, None] < seqlen, other=0.0)
        lse = tl.load(LSE + tl.program_id(1) * seqlen + offs_m, mask=offs_m < seqlen,
                      other=float("inf"))
        delta = tl.load(DELTA + tl.program_id(1) * seqlen + offs_m, mask=offs_m < seqlen,
                        other=0.0)
        dq = tl.zeros((BLOCK_M, HEAD), dtype=tl.float32)
        for start_n in range(0, seqlen, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            k = tl.load(K + off + offs_n[:, None] * HEAD + offs_d[None, :],
                        mask=offs_n[:, None] < seqlen, other=0.0)
            v = tl.load(V + off + offs_n[:, None] * HEAD + offs_d[None, :],
                        mask=offs_n[:, None] < seqlen, other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale
            valid = offs_n[None, :] < seqlen
            if causal:
                valid = valid & (offs_n[None, :] <= offs_m[:, None])
            p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
            dp = tl.dot(do, tl.trans(v))
            if USE_DELTA:
                ds = p * (dp - delta[:, None])
            else:
                ds = p * dp
            dq += tl.dot(ds, k)
        tl.store(DQ + off + offs_m[:, None] * HEAD + offs_d[None, :], dq * OUT_SCALE,
                 mask=offs_m[:, None] < seqlen)

    def _tfb_third(q, k, v, out, lse, dout, is_causal, out_scale=None, **flags):
        B, H, L, E = q.shape
        delta = (dout * out).sum(dim=-1).contiguous()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        scale = 1.0 / math.sqrt(E)
        out_scale = scale if out_scale is None else out_scale
        use_delta = flags.pop("USE_DELTA", True)
        _tfb_dkdv_b[(triton.cdiv(L, 32), B * H)](q, k, v, dout, lse, delta, dk, dv, L, scale,
                                                 causal=is_causal, BLOCK_M=32, BLOCK_N=32,
                                                 HEAD=E, USE_DELTA=use_delta, OUT_SCALE=out_scale,
                                                 **flags)
        _tfb_dq_b[(triton.cdiv(L, 32), B * H)](q, k, v, dout, lse, delta, dq, L, scale,
                                               causal=is_causal, BLOCK_M=32, BLOCK_N=32, HEAD=E,
                                               USE_DELTA=use_delta, OUT_SCALE=out_scale)
        return dq, dk, dv

    def tfb_dv_from_ds(q, k, v, out, lse, dout, is_causal=False):
        return _tfb_third(q, k, v, out, lse, dout, is_causal, DV_FROM_DS=True)

    def tfb_without_delta(q, k, v, out, lse, dout, is_causal=False):
        return _tfb_third(q, k, v, out, lse, dout, is_causal, DV_FROM_DS=False, USE_DELTA=False)

    def tfb_gradients_scaled_by_qk_scale(q, k, v, out, lse, dout, is_causal=False):
        """Multiplies dQ and dK by log2(e)/√E, the forward kernel's scale."""
        return _tfb_third(q, k, v, out, lse, dout, is_causal,
                          out_scale=math.log2(math.e) / math.sqrt(q.shape[-1]), DV_FROM_DS=False)

    FRESH_FLASH_CH09 = [
        ("triton_softmax", "pass", ts_right_chunked_online),
        ("triton_softmax", "masked_lanes_zero", ts_mask_without_other),
        ("triton_softmax", "no_max_shift", ts_without_max),
        ("triton_softmax", "exp2_without_log2e", ts_exp2_without_log2e),
        ("triton_softmax", "not_normalised", ts_forgot_the_division),
        ("triton_softmax", "raised", ts_fixed_block_of_64),
        ("triton_matmul", "pass", tm_right_broadcast_sum),
        ("triton_matmul", "accumulator_overwritten", tm_accumulator_overwritten),
        ("triton_matmul", "k_tail_dropped", tm_k_tail_left_out),
        ("triton_matmul", "wrong_dtype", tm_float32_result),
        ("triton_matmul", "raised", tm_grid_swapped),
        ("triton_matmul", "strides_swapped", tm_b_strides_swapped),
        ("triton_flash_forward", "pass", tff_right_natural_exp),
        ("triton_flash_forward", "lse_base_2", tff_lse_in_base_2),
        ("triton_flash_forward", "scores_not_masked", tff_ragged_scores_unmasked),
        ("triton_flash_forward", "diagonal_tile_skipped", tff_diagonal_tile_skipped),
        ("triton_flash_forward", "missing_final_division", tff_output_not_divided),
        ("triton_flash_forward", "exp_instead_of_exp2", tff_exp_with_log2e_scale),
        ("triton_flash_forward", "lse_missing_max", tff_lse_forgets_the_max),
        ("triton_flash_backward", "pass", tfb_right_atomic_dq),
        ("triton_flash_backward", "raised", tfb_atomic_add_unmasked),
        ("triton_flash_backward", "exp_then_divide", tfb_exp_then_divide),
        ("triton_flash_backward", "causal_one_ahead_bwd", tfb_leaks_inside_diagonal_tiles),
        ("triton_flash_backward", "dv_from_ds", tfb_dv_from_ds),
        ("triton_flash_backward", "d_term_forgotten", tfb_without_delta),
        ("triton_flash_backward", "ds_scale_log2e", tfb_gradients_scaled_by_qk_scale),
    ]

#: Every submission, chapter 8 then chapter 9.
FRESH_FLASH = FRESH_FLASH_CH08 + FRESH_FLASH_CH09
