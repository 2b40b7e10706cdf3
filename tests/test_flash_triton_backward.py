"""Chapter 9's backward kernels: against autograd under the interpreter, the exercise
``triton_flash_backward`` and its diagnosed mistakes (written as a learner's Triton kernels), and
the TF32 emulation of the checker."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from engine_verdict import diagnosed

from course_lib import exercises
from course_lib.chapters import ch09_flash_triton as chapter

pytestmark = pytest.mark.skipif(not chapter.TRITON_AVAILABLE, reason=chapter.TRITON_MISSING)

if chapter.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    from course_lib.chapters.ch09_flash_triton import checking, kernels

LOG2E = math.log2(math.e)


@pytest.fixture(autouse=True)
def _course_code_allowed(monkeypatch):
    """The broken kernels call the course's delta kernel: allow course code here."""
    for ex in exercises.registry().values():
        monkeypatch.setattr(ex, "allowed_course_calls", ("course_lib",))


def _qkv(b, h, n, e, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, e, generator=g) for _ in range(4))


def _autograd(q, k, v, dout, causal):
    qq, kk, vv = (t.double().requires_grad_() for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
    out.backward(dout.double())
    return qq.grad, kk.grad, vv.grad


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,blocks", [(37, (32, 32)), (5, (16, 16)), (50, (32, 16))])
def test_backward_kernels_match_autograd(causal, n, blocks):
    q, k, v, dout = _qkv(1, 2, n, 16)
    out, lse = kernels.flash_forward(q, k, v, causal, *blocks)
    grads = kernels.flash_backward(q, k, v, out, lse, dout, causal, *blocks)
    for got, want in zip(grads, _autograd(q, k, v, dout, causal), strict=True):
        assert got.dtype == torch.float32 and got.shape == want.shape
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_backward_kernels_follow_the_gpu_rules():
    for fn in (kernels.flash_bwd_delta_kernel, kernels.flash_bwd_dkdv_kernel,
               kernels.flash_bwd_dq_kernel):
        assert checking.gpu_source_problems(fn) == []


def test_backward_solution_passes():
    r = exercises.check("triton_flash_backward",
                        exercises.get_exercise("triton_flash_backward").solution,
                        record=False, seed=1)
    assert r.passed, r.message


# ------------------------------------------------------------------ a learner's broken kernel


if chapter.TRITON_AVAILABLE:
    @triton.jit
    def _row_dots(o_ptr, do_ptr, delta_ptr, N, BLOCK: tl.constexpr, E: tl.constexpr):
        """D = rowsum(dO ∘ O) in a kernel: the exercise lets torch only allocate, view and cast."""
        bh = tl.program_id(1)
        rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        at = bh * N * E + rows[:, None] * E + tl.arange(0, E)[None, :]
        o = tl.load(o_ptr + at, mask=rows[:, None] < N, other=0.0)
        do = tl.load(do_ptr + at, mask=rows[:, None] < N, other=0.0)
        tl.store(delta_ptr + bh * N + rows, tl.sum(o * do, axis=1), mask=rows < N)

    @triton.jit
    def _buggy_bwd(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, N,
                   sm_scale, IS_CAUSAL: tl.constexpr, BLOCK: tl.constexpr, E: tl.constexpr,
                   D_TERM: tl.constexpr, DS_SCALE: tl.constexpr, LSE_LOG2E: tl.constexpr,
                   DIAG: tl.constexpr, DK_SCALED: tl.constexpr, FOR_DQ: tl.constexpr):
        """FOR_DQ: program (query block, bh) computes dQ; else (key block, bh) dK and dV."""
        bh = tl.program_id(1)
        mine = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        dims = tl.arange(0, E)
        base = bh * N * E
        own = base + mine[:, None] * E + dims[None, :]
        acc = tl.zeros((BLOCK, E), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK, E), dtype=tl.float32)
        if FOR_DQ:
            q = tl.load(q_ptr + own, mask=mine[:, None] < N, other=0.0)
            do = tl.load(do_ptr + own, mask=mine[:, None] < N, other=0.0)
            lse = tl.load(lse_ptr + bh * N + mine, mask=mine < N, other=0.0)
            delta = tl.load(delta_ptr + bh * N + mine, mask=mine < N, other=0.0)
        else:
            k = tl.load(k_ptr + own, mask=mine[:, None] < N, other=0.0)
            v = tl.load(v_ptr + own, mask=mine[:, None] < N, other=0.0)
        for start in range(0, N, BLOCK):
            other = start + tl.arange(0, BLOCK)
            at = base + other[:, None] * E + dims[None, :]
            if FOR_DQ:
                rows = mine
                keys = other
                k = tl.load(k_ptr + at, mask=other[:, None] < N, other=0.0)
                v = tl.load(v_ptr + at, mask=other[:, None] < N, other=0.0)
            else:
                rows = other
                keys = mine
                q = tl.load(q_ptr + at, mask=other[:, None] < N, other=0.0)
                do = tl.load(do_ptr + at, mask=other[:, None] < N, other=0.0)
                lse = tl.load(lse_ptr + bh * N + other, mask=other < N, other=0.0)
                delta = tl.load(delta_ptr + bh * N + other, mask=other < N, other=0.0)
            if DK_SCALED or FOR_DQ:
                s = tl.dot(q, tl.trans(k)) * sm_scale
            else:
                s = tl.dot(q, tl.trans(k))                   # unscaled scores in dK/dV
            keep = (rows[:, None] < N) & (keys[None, :] < N)
            if IS_CAUSAL:
                keep = keep & (keys[None, :] <= rows[:, None] + DIAG)
            l2e = 1.4426950408889634
            if LSE_LOG2E:
                p = tl.where(keep, tl.exp2(s * l2e - lse[:, None] * l2e), 0.0)
            else:
                p = tl.where(keep, tl.exp2(s * l2e - lse[:, None]), 0.0)
            dp = tl.dot(do, tl.trans(v))
            if D_TERM:
                ds = p * (dp - delta[:, None])
            else:
                ds = p * dp
            if FOR_DQ:
                acc += tl.dot(ds, k)
            else:
                acc += tl.dot(tl.trans(ds), q)
                acc2 += tl.dot(tl.trans(p), do)
        if FOR_DQ:
            tl.store(dq_ptr + own, acc * DS_SCALE, mask=mine[:, None] < N)
        else:
            tl.store(dk_ptr + own, acc * DS_SCALE, mask=mine[:, None] < N)
            tl.store(dv_ptr + own, acc2, mask=mine[:, None] < N)


def _buggy_backward(block=16, ds_scale=None, **bugs):
    flags = dict(D_TERM=True, LSE_LOG2E=True, DIAG=0, DK_SCALED=True)
    flags.update(bugs)

    def backward(q, k, v, out, lse, dout, is_causal=False):
        B, H, N, E = q.shape
        delta = torch.empty((B, H, N), dtype=torch.float32)
        _row_dots[(triton.cdiv(N, block), B * H)](out, dout, delta, N, BLOCK=block, E=E)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        scale = 1 / math.sqrt(E)
        factor = scale if ds_scale is None else ds_scale(E)
        for for_dq in (True, False):
            _buggy_bwd[(triton.cdiv(N, block), B * H)](
                q, k, v, dout, lse, delta, dq, dk, dv, N, scale, IS_CAUSAL=is_causal,
                BLOCK=block, E=E, DS_SCALE=factor, FOR_DQ=for_dq, **flags)
        return dq, dk, dv
    return backward


@pytest.mark.slow
def test_the_buggy_backward_without_bugs_passes():
    r = exercises.check("triton_flash_backward", _buggy_backward(), record=False, seed=2)
    assert r.passed, r.message


@pytest.mark.slow
@pytest.mark.parametrize("mistake,fn", [
    ("d_term_forgotten", lambda: _buggy_backward(D_TERM=False)),
    ("ds_scale_log2e", lambda: _buggy_backward(ds_scale=lambda e: LOG2E / math.sqrt(e))),
    ("ds_scale_missing", lambda: _buggy_backward(ds_scale=lambda e: 1.0)),
    ("lse_base_e_in_exp2", lambda: _buggy_backward(LSE_LOG2E=False)),
    ("causal_one_ahead_bwd", lambda: _buggy_backward(DIAG=1)),
    ("causal_excludes_diagonal_bwd", lambda: _buggy_backward(DIAG=-1)),
    ("dk_from_unscaled_scores", lambda: _buggy_backward(DK_SCALED=False)),
])
def test_backward_mistakes_are_diagnosed(mistake, fn):
    # the worker's verdict is the same (test_the_worker_names_the_same_mistake_in_the_backward_*)
    r = diagnosed("triton_flash_backward", fn(), seed=3)
    assert not r.passed and r.mistake == mistake, r.message
    declared = {m.id: m.message for m in exercises.get_exercise("triton_flash_backward").mistakes}
    assert r.message.startswith(declared[mistake])


def test_the_worker_names_the_same_mistake_in_the_backward_exercise():
    fn = _buggy_backward(D_TERM=False)
    learner = exercises.check("triton_flash_backward", fn, record=False, seed=3)
    engine = diagnosed("triton_flash_backward", fn, seed=3)
    assert learner.mistake == "d_term_forgotten", learner.message
    assert (learner.mistake, learner.message) == (engine.mistake, engine.message)


@pytest.mark.slow
def test_dk_from_unscaled_scores_is_named_on_every_seed():
    """Its terms reach about 1e6 and cancel: the learner's float32 kernel and the float64
    simulation differ by float32 rounding of those terms, beyond twice the exercise's tolerance
    of the result (it was named on 11 of 12 seeds). The mistake's own tolerance covers it."""
    fn = _buggy_backward(DK_SCALED=False)
    verdicts = {seed: diagnosed("triton_flash_backward", fn, seed).mistake
                for seed in range(12)}
    assert set(verdicts.values()) == {"dk_from_unscaled_scores"}, verdicts


# ------------------------------------------------------------------ TF32


def test_tf32_truncation_is_the_default_and_keeps_10_mantissa_bits():
    x = np.array([1.0, 1 + 2 ** -10, 1 + 2 ** -11, 1 + 2 ** -10 + 2 ** -11 + 2 ** -12,
                  -3.0000002, -(1 + 2 ** -11 + 2 ** -12), np.inf, np.nan], dtype=np.float32)
    r = checking.to_tf32(x)
    assert r[0] == 1.0 and r[1] == 1 + 2 ** -10          # representable: unchanged
    assert r[2] == 1.0 and r[3] == 1 + 2 ** -10          # the low bits are dropped, never carried
    assert r[4] == -3.0 and r[5] == -1.0                 # toward zero for negatives too
    assert np.isinf(r[6]) and np.isnan(r[7])
    draws = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    cut = checking.to_tf32(draws)
    assert not (cut.view(np.uint32) & 0x1FFF).any()      # the 13 low mantissa bits are zero
    rel = np.abs((cut - draws) / draws)
    assert rel.max() < 2 ** -10 and rel.max() > 2 ** -11  # unit round-off 2^-10, not 2^-11
    assert (np.abs(cut) <= np.abs(draws)).all()


def test_tf32_round_to_nearest_is_the_other_option():
    x = np.array([1 + 2 ** -11, 1 + 2 ** -12, -3.0000002, -(1 + 2 ** -11)], dtype=np.float32)
    r = checking.to_tf32(x, rounding="nearest")
    assert r[0] == 1 + 2 ** -10                          # a tie rounds away from zero
    assert r[1] == 1.0 and r[2] == -3.0                  # below half an ulp: down
    assert r[3] == -(1 + 2 ** -10)
    draws = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    rel = np.abs((checking.to_tf32(draws, "nearest") - draws) / draws)
    assert rel.max() <= 2 ** -11
    with pytest.raises(ValueError, match="rounding"):
        checking.to_tf32(draws, "stochastic")
    with pytest.raises(ValueError, match="rounding"):
        with checking.emulate_tf32(rounding="up"):
            pass


def test_tf32_emulation_changes_float32_dots_only_inside_the_context():
    q, k, v, _ = _qkv(1, 1, 32, 16, seed=5)
    want = torch.softmax(q.double() @ k.double().transpose(-2, -1) / 4, -1) @ v.double()
    exact, _ = kernels.flash_forward(q, k, v, False, 16, 16)
    with checking.emulate_tf32():
        tf32, _ = kernels.flash_forward(q, k, v, False, 16, 16)
    with checking.emulate_tf32(rounding="nearest"):
        nearest, _ = kernels.flash_forward(q, k, v, False, 16, 16)
    again, _ = kernels.flash_forward(q, k, v, False, 16, 16)
    err = lambda o: float((o.double() - want).abs().max())   # noqa: E731
    assert err(exact) < 2e-6 and err(again) == err(exact)
    assert 1e-4 < err(nearest) < err(tf32) < 1e-2       # TF32: 10 mantissa bits in the dots


# --------------------------------------------------------------------------- GPU benchmark's check


@pytest.mark.parametrize("causal", [False, True])
def test_gpu_benchmark_check_measures_the_kernels_against_float32(causal):
    """The check the GPU run records (bench.errors_vs_float32), here under the interpreter with a
    ragged length, a GPU-sized query block and separate backward tiles: float32 inputs agree with
    the float32 reference to round-off, and a planted wrong kernel is caught."""
    from course_lib.chapters.ch09_flash_triton import bench

    found = bench.errors_vs_float32(80, 16, causal, torch.float32, "cpu", config=(64, 32, 4, 2),
                                    bwd_config=(32, 32, None, None), backends=("math",),
                                    batch=1, heads=2)
    assert set(found["triton"]) == {"out", "lse", "dq", "dk", "dv"}
    assert max(found["triton"].values()) < 1e-5, found
    assert max(found["math"].values()) < 1e-5, found
    half = bench.errors_vs_float32(80, 16, causal, torch.float16, "cpu", batch=1, heads=2)
    assert 1e-5 < half["triton"]["out"] < 5e-3      # fp16 inputs: rounding shows, and stays small


def test_gpu_benchmark_check_catches_a_wrong_forward(monkeypatch):
    from course_lib.chapters.ch09_flash_triton import bench

    right = kernels.flash_forward

    def off_by_scale(q, k, v, is_causal=False, *args):
        return right(q * 1.1, k, v, is_causal, *args)

    monkeypatch.setattr(kernels, "flash_forward", off_by_scale)
    found = bench.errors_vs_float32(64, 16, False, torch.float32, "cpu", batch=1, heads=1)
    assert found["triton"]["out"] > 1e-2 and found["triton"]["lse"] > 1e-2


def test_gpu_benchmark_refuses_to_time_without_a_gpu():
    from course_lib.chapters.ch09_flash_triton import bench

    if torch.cuda.is_available() and not chapter.INTERPRETED:
        pytest.skip("a GPU is present")
    with pytest.raises(SystemExit, match="CUDA"):
        bench.run([64])
