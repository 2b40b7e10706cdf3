"""Issue 51's routes around an algorithmic exercise: each is refused, with a message naming the
rule it breaks (the rules are said in the statements: ``Exercise.signature`` / the chapter).

Run through the check's watch in this process (``isolate=False``): the rules are the same in the
worker, which ``test_exercises_isolation`` covers.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.toolkit.checking._engine import run_check
from course_lib.toolkit.checking._registry import registry
from course_lib.toolkit.checking._spec import FORBIDDEN_GROUPS, attention_modules

pytestmark = pytest.mark.usefixtures("one_thread")


def _check(exercise_id, fn):
    return run_check(registry()[exercise_id], fn, seed=0, isolate=False, watch=True)


# ----------------------------------------------------------------------------- flash (ch. 8)


def flash_by_query_blocks(q, k, v, block_size=64):
    """Plain softmax attention, 32 queries at a time: no online softmax at all."""
    outs = []
    for i in range(0, q.shape[-2], 32):
        s = q[..., i:i + 32, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        outs.append(torch.softmax(s, dim=-1) @ v)
    return torch.cat(outs, dim=-2)


def flash_by_single_queries(q, k, v, block_size=64):
    """Plain softmax attention one query at a time: one row of S scores per step."""
    outs = []
    for i in range(q.shape[-2]):
        s = q[..., i:i + 1, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        outs.append(torch.softmax(s, dim=-1) @ v)
    return torch.cat(outs, dim=-2)


def flash_key_blocks(q, k, v, block_size=64):
    """The algorithm: key blocks, running max and sum (a right answer in another style)."""
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    ell = torch.zeros_like(m)
    acc = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for kb, vb in zip(k.split(block_size, -2), v.split(block_size, -2), strict=True):
        s = torch.einsum("bhle,bhse->bhls", q, kb) / math.sqrt(q.shape[-1])
        new = torch.maximum(m, s.amax(-1, keepdim=True))
        p, a = torch.exp(s - new), torch.exp(m - new)
        ell, acc, m = a * ell + p.sum(-1, keepdim=True), a * acc + p @ vb, new
    return acc / ell


@pytest.mark.parametrize("fn", [flash_by_query_blocks, flash_by_single_queries])
def test_flash_without_the_online_softmax_is_refused(fn):
    r = _check("flash_attention", fn)
    assert r.mistake == "nxn_tensor" and r.failed_case == "few queries, many keys", r.message
    assert "block by block" in r.message


def test_flash_with_key_blocks_passes():
    assert _check("flash_attention", flash_key_blocks).passed


def flash_backward_by_autograd(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    """The forward 32 queries at a time, differentiated by autograd: no dS = P∘(dP − D)."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    L, S = q.shape[-2], k.shape[-2]
    outs = []
    with torch.enable_grad():
        for i in range(0, L, 32):
            s = q[..., i:i + 32, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if is_causal:
                keep = torch.ones(L, S, dtype=torch.bool).tril(S - L)[i:i + 32]
                s = s.masked_fill(~keep, float("-inf"))
            outs.append(torch.softmax(s, -1) @ v)
        o = torch.cat(outs, -2)
        return torch.autograd.grad(o, (q, k, v), grad_out)


def flash_backward_by_tensor_backward(q, k, v, out, lse, grad_out, is_causal=False,
                                      block_size=64):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    with torch.enable_grad():
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        (torch.softmax(s, -1) @ v).backward(grad_out)
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("fn", [flash_backward_by_autograd, flash_backward_by_tensor_backward])
def test_flash_backward_by_autograd_is_refused(fn):
    r = _check("flash_backward", fn)
    assert r.mistake == "forbidden_call", r.message
    assert "automatic differentiation" in r.message


# ---------------------------------------------------------------------------- softmax (ch. 3)


def softmax_by_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim, keepdim=True))


def softmax_by_the_gradient_of_logsumexp(x, dim=-1):
    x = x.detach().requires_grad_()
    with torch.enable_grad():
        (g,) = torch.autograd.grad(torch.logsumexp(x, dim).sum(), x)
    return g


@pytest.mark.parametrize("fn", [softmax_by_logsumexp, softmax_by_the_gradient_of_logsumexp])
def test_softmax_by_logsumexp_is_refused(fn):
    r = _check("softmax", fn)
    assert r.mistake == "forbidden_call", r.message
    assert "logsumexp" in r.message


# ------------------------------------------------------------- attention modules (ch. 4, 6)


def test_every_attention_module_of_torch_nn_and_ao_is_found_by_walking():
    found = attention_modules()
    assert "torch.nn.modules.activation:MultiheadAttention.forward" in found
    assert "torch.ao.nn.quantizable.modules.activation:MultiheadAttention.forward" in found
    for group in ("mha", "sdpa"):
        assert set(found) <= set(FORBIDDEN_GROUPS[group]["python"])


def _ao_mha(E, H, w_q, w_k, w_v, w_o, dtype):
    from torch.ao.nn.quantizable import MultiheadAttention
    m = MultiheadAttention(E, H, bias=False, batch_first=True).to(dtype)
    with torch.no_grad():
        m.linear_Q.weight.copy_(w_q.T)
        m.linear_K.weight.copy_(w_k.T)
        m.linear_V.weight.copy_(w_v.T)
        m.out_proj.weight.copy_(w_o.T)
    return m


def mha_by_torch_ao(x, w_qkv, w_o, num_heads):
    D = x.shape[-1]
    m = _ao_mha(D, num_heads, *w_qkv.split(D, dim=-1), w_o, x.dtype)
    return m(x, x, x, need_weights=False)[0]


def masked_attention_by_torch_ao(q, k, v, mask):
    """Identity weights, the values zero-padded to the query width, the mask inverted."""
    E, Ev = q.shape[-1], v.shape[-1]
    eye = torch.eye(E, dtype=q.dtype)
    m = _ao_mha(E, 1, eye, eye, eye, eye, q.dtype)
    v = F.pad(v, (0, E - Ev))
    flat = (q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:]),
            v.reshape(-1, *v.shape[-2:]))
    keep = mask.expand(*q.shape[:-1], k.shape[-2]).reshape(-1, q.shape[-2], k.shape[-2])
    out = m(*flat, attn_mask=~keep, need_weights=False)[0]
    return out.reshape(*q.shape[:-1], E)[..., :Ev]


@pytest.mark.parametrize("exercise_id, fn", [("multi_head_attention", mha_by_torch_ao),
                                             ("masked_attention", masked_attention_by_torch_ao)])
def test_an_attention_module_of_torch_ao_is_refused(exercise_id, fn):
    r = _check(exercise_id, fn)
    assert r.mistake == "forbidden_call", (r.mistake, r.message)


def test_functional_mha_is_refused_too():
    def mha_functional(x, w_qkv, w_o, num_heads):
        xt = x.transpose(0, 1)
        D = x.shape[-1]
        return F.multi_head_attention_forward(
            xt, xt, xt, D, num_heads, None, None, None, None, False, 0.0, w_o.T, None,
            use_separate_proj_weight=True, q_proj_weight=w_qkv[:, :D].T,
            k_proj_weight=w_qkv[:, D:2 * D].T, v_proj_weight=w_qkv[:, 2 * D:].T,
            need_weights=False)[0].transpose(0, 1)
    assert _check("multi_head_attention", mha_functional).mistake == "forbidden_call"


# ----------------------------------------------------------------- online softmax (ch. 8)


def stats_two_passes(blocks):
    """list(blocks), then the max and the sum in two passes: no online rescaling at all."""
    blocks = list(blocks)
    m = max(b.max() for b in blocks)
    return m, sum(torch.exp(b - m).sum() for b in blocks)


def stats_by_cat(blocks):
    x = torch.cat(list(blocks))
    m = x.max()
    return m, torch.exp(x - m).sum()


def stats_one_pass(blocks):
    """The algorithm, written another way: a running max and a rescaled sum."""
    m, ell = torch.tensor(float("-inf")), torch.tensor(0.0)
    for block in blocks:
        new = torch.maximum(m, block.max())
        if torch.isneginf(new):
            continue
        ell = ell * torch.exp(m - new) + torch.exp(block - new).sum()
        m = new
    return m, ell


@pytest.mark.parametrize("fn", [stats_two_passes, stats_by_cat])
def test_online_softmax_stats_that_keeps_the_stream_is_refused(fn):
    r = _check("online_softmax_stats", fn)
    assert r.mistake == "stream_held", r.message
    assert "keeps one at a time" in r.message


def test_online_softmax_stats_in_one_pass_passes_in_the_worker_too():
    ex = registry()["online_softmax_stats"]
    assert _check("online_softmax_stats", stats_one_pass).passed
    assert run_check(ex, stats_two_passes, seed=1, isolate=True).mistake == "stream_held"
    assert run_check(ex, ex.solution, seed=1, isolate=True, refuse_course=False).passed


# ----------------------------------------------------------------------- Triton (ch. 9)

try:
    import triton
    import triton.language as tl

    import course_lib.chapters.ch09_flash_triton  # noqa: F401  (sets the interpreter up first)
except ImportError:   # no Triton wheel for this platform: the Triton exercises cannot run
    triton = None

needs_triton = pytest.mark.skipif(triton is None, reason="Triton is not installed")


def _jit(fn):
    return triton.jit(fn) if triton is not None else fn


@_jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


@_jit
def _mm_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        x = tl.load(a + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K),
                    other=0.0)
        y = tl.load(b + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _copied_by_a_kernel(y):
    y = y.contiguous()
    out = torch.empty_like(y)
    _copy_kernel[(triton.cdiv(y.numel(), 64),)](y, out, y.numel(), BLOCK=64)
    return out


def triton_softmax_in_torch(x):
    """exp and sum in torch, the result copied out by a three-line kernel."""
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return _copied_by_a_kernel(e / e.sum(-1, keepdim=True))


def triton_matmul_by_cdist(a, b):
    """A matrix product without a matmul: |a|² + |b|² - cdist², halved."""
    d = torch.cdist(a.double(), b.T.double()) ** 2
    ab = ((a.double() ** 2).sum(1)[:, None] + (b.T.double() ** 2).sum(1)[None, :] - d) / 2
    return _copied_by_a_kernel(ab.to(a.dtype))


def triton_matmul_host_casts(a, b):
    """Right: the inputs cast to float32 on the host, the product in the kernel, cast back."""
    a32, b32 = a.float().contiguous(), b.float().contiguous()
    M, K = a32.shape
    N = b32.shape[1]
    c = torch.empty(M, N, dtype=torch.float32)
    _mm_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a32, b32, c, M, N, K, BM=16, BN=16,
                                                          BK=16)
    return c.to(a.dtype)


@needs_triton
@pytest.mark.parametrize("exercise_id, fn", [("triton_softmax", triton_softmax_in_torch),
                                             ("triton_matmul", triton_matmul_by_cdist)])
def test_a_triton_answer_computed_by_torch_is_refused(exercise_id, fn):
    r = _check(exercise_id, fn)
    assert r.mistake == "computed_in_torch", r.message
    assert "computed inside your Triton kernel" in r.message


@needs_triton
def test_a_triton_matmul_with_host_casts_passes():
    """Dtype casts on the host are not computation (a false reject of issue 51)."""
    r = _check("triton_matmul", triton_matmul_host_casts)
    assert r.passed, (r.mistake, r.message)
