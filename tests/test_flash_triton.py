"""Chapter 9: the Triton kernels against course_lib.reference under the interpreter, and the
checking support (bounds, GPU rules, diagnosed mistakes) on deliberately broken kernels."""

from __future__ import annotations

import math

import pytest
import torch
from engine_verdict import diagnosed

from course_lib import exercises
from course_lib.attention import reference
from course_lib.chapters import ch09_flash_triton as chapter

pytestmark = pytest.mark.skipif(not chapter.TRITON_AVAILABLE, reason=chapter.TRITON_MISSING)

if chapter.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    from course_lib.chapters.ch09_flash_triton import checking, kernels
    from course_lib.chapters.ch09_flash_triton import exercises as ch_exercises

LN2 = math.log(2.0)


@pytest.fixture(autouse=True)
def _course_code_allowed(monkeypatch):
    """The broken kernels below live in course_lib (as do the solutions): allow calling them. A
    learner's call into course_lib is refused, except the checker's own bounds checks."""
    for ex in exercises.registry().values():
        monkeypatch.setattr(ex, "allowed_course_calls", ("course_lib",))
LOG2E = math.log2(math.e)


def _qkv(b, h, n, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=g).to(dtype) for _ in range(3))


def _lse(q, k, causal):
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return s.logsumexp(-1)


# ------------------------------------------------------------------ the reference kernels


def test_interpreter_is_on_without_a_gpu():
    assert chapter.INTERPRETED and checking.installed()


def test_overflow_checks_are_skipped_only_where_they_would_be_dropped(monkeypatch):
    """Without ``debug`` the interpreter's device_assert is a no-op, so the int64 overflow checks
    it would compute for every integer +, -, * change nothing: an overflowing product wraps the
    same with and without them. With ``debug`` on, both check."""
    from triton.runtime import interpreter

    @triton.jit
    def times(x_ptr, y_ptr, factor, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(y_ptr + i, tl.load(x_ptr + i) * factor)

    builder = interpreter.interpreter_builder
    assert not builder.options.debug and not builder.options.sanitize_overflow
    x = torch.tensor([1, 3, 5, 7], dtype=torch.int32)

    def run(**options):
        monkeypatch.setattr(builder, "options", builder.options.__class__(**options))
        y = torch.empty_like(x)
        times[(1,)](x, y, 2 ** 30, BLOCK=4)
        return y

    skipped, computed = run(sanitize_overflow=False), run(sanitize_overflow=True)
    assert torch.equal(skipped, computed)
    assert torch.equal(skipped, (x.long() * 2 ** 30).to(torch.int32))      # wrapped: 3·2^30 < 0
    with pytest.raises(interpreter.InterpreterError, match="overflow"):
        run(debug=True, sanitize_overflow=True)


def test_a_launch_patches_the_language_once_per_module(monkeypatch):
    """tl.max, tl.sum and a kernel's own @triton.jit helpers are device calls; the interpreter
    patches triton.language at each one. Skipped once the launch has patched the same modules:
    the launch itself (``tl``) and the first standard-library call (``tl.core``)."""
    from triton.runtime import interpreter

    calls = []
    real = interpreter._patch_lang
    monkeypatch.setattr(interpreter, "_patch_lang", lambda fn: calls.append(fn) or real(fn))
    q, k, v = _qkv(1, 1, 64, 16)
    out, lse = kernels.flash_forward(q, k, v, True, 32, 32)
    assert len(calls) == 2, [f.__name__ for f in calls]
    assert torch.allclose(out, reference.scaled_dot_product_attention(q, k, v, is_causal=True),
                          atol=1e-5)
    assert torch.allclose(lse.double(), _lse(q, k, True), atol=1e-5)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,blocks", [(37, (32, 32)), (5, (16, 16)), (50, (32, 16))])
def test_flash_forward_matches_reference(dtype, tol, causal, n, blocks):
    q, k, v = _qkv(1, 2, n, 16, dtype)
    out, lse = kernels.flash_forward(q, k, v, causal, *blocks)
    want = reference.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                  is_causal=causal)
    assert out.dtype == dtype and lse.dtype == torch.float32 and lse.shape == (1, 2, n)
    torch.testing.assert_close(out.double(), want, atol=tol, rtol=tol)
    torch.testing.assert_close(lse.double(), _lse(q, k, causal), atol=tol, rtol=tol)


def test_softmax_and_matmul_kernels():
    x = torch.randn(5, 37)
    torch.testing.assert_close(ch_exercises.triton_softmax(x), torch.softmax(x, -1))
    for dt in (torch.float32, torch.float16):
        a, b = torch.randn(33, 40).to(dt), torch.randn(40, 17).to(dt)
        torch.testing.assert_close(ch_exercises.triton_matmul(a, b).double(),
                                   a.double() @ b.double(), atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("exercise_id,fn", [
    ("triton_softmax", "triton_softmax"), ("triton_matmul", "triton_matmul"),
    ("triton_flash_forward", "triton_flash_forward")])
def test_solutions_pass(exercise_id, fn):
    r = exercises.check(exercise_id, getattr(ch_exercises, fn), record=False, seed=1)
    assert r.passed, r.message


# ------------------------------------------------------------------ bounds and GPU rules


if chapter.TRITON_AVAILABLE:
    @triton.jit
    def _copy_unmasked(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs), mask=offs < n)

    @triton.jit
    def _copy_store_unmasked(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n))

    @triton.jit
    def _copy_masked(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    @triton.jit
    def _copy_first_block(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)        # every program writes the same block: a race
        tl.store(y_ptr + offs, tl.load(x_ptr + tl.program_id(0) * BLOCK + offs))

    @triton.jit
    def _dot_k8(a_ptr, c_ptr, K: tl.constexpr):
        r = tl.arange(0, 16)
        ks = tl.arange(0, K)
        a = tl.load(a_ptr + r[:, None] * K + ks[None, :])
        tl.store(c_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, tl.trans(a)))

    @triton.jit
    def _with_break(x_ptr):
        for i in range(4):
            if i == 2:
                break
        tl.store(x_ptr, torch.exp(1.0))


def test_unmasked_load_past_the_end_is_refused_with_program_id_and_offset():
    x, y = torch.randn(20), torch.empty(20)
    with pytest.raises(checking.OutOfBounds) as e:
        _copy_unmasked[(2,)](x, y, 20, BLOCK=16)
    msg = str(e.value)
    assert "tl.load reads outside the tensor `x_ptr`" in msg
    assert "program id (1, 0, 0)" in msg and "element offset 20" in msg and "20 elements" in msg


def test_unmasked_store_is_refused():
    x, y = torch.randn(20), torch.empty(20)
    with pytest.raises(checking.OutOfBounds, match="tl.store writes outside the tensor `y_ptr`"):
        _copy_store_unmasked[(2,)](x, y, 20, BLOCK=16)


def test_masked_access_passes():
    x, y = torch.randn(20), torch.empty(20)
    _copy_masked[(2,)](x, y, 20, BLOCK=16)
    assert torch.equal(x, y)


def test_dot_with_small_k_for_16_bit_inputs_is_refused():
    a = torch.randn(16, 8).half()
    with pytest.raises(checking.GpuConstraint, match="K ≥ 16 on a GPU.*K = 8"):
        _dot_k8[(1,)](a, torch.empty(16, 16), 8)
    _dot_k8[(1,)](a.float(), torch.empty(16, 16), 8)      # float32: K ≥ 8 is enough


def test_source_rules_are_read_statically():
    problems = checking.gpu_source_problems(_with_break)
    assert any("`break`" in p for p in problems) and any("torch.exp" in p for p in problems)
    assert checking.gpu_source_problems(kernels.flash_fwd_kernel) == []
    with pytest.raises(checking.GpuConstraint, match="would not compile for a GPU"):
        _with_break[(1,)](torch.zeros(1))


def test_non_power_of_two_block_is_refused_by_the_interpreter():
    with pytest.raises(Exception, match="power of 2"):
        _copy_masked[(2,)](torch.randn(20), torch.empty(20), 20, BLOCK=12)


# ------------------------------------------------------------------ diagnosed mistakes


if chapter.TRITON_AVAILABLE:
    @triton.jit
    def _buggy_flash(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, N, qk_scale,
                     IS_CAUSAL: tl.constexpr, BLOCK: tl.constexpr, D: tl.constexpr,
                     MASK_LOADS: tl.constexpr, MASK_SCORES: tl.constexpr,
                     RESCALE_ACC: tl.constexpr, RESCALE_L: tl.constexpr, USE_EXP: tl.constexpr,
                     DIAG: tl.constexpr, WRITE_LSE: tl.constexpr, LSE_SCALE: tl.constexpr,
                     NO_MAX: tl.constexpr, ACC16: tl.constexpr, PV16: tl.constexpr,
                     DROP_TAIL: tl.constexpr, SWAP_IDS: tl.constexpr, HEAD_STRIDE: tl.constexpr,
                     GUARD_EMPTY: tl.constexpr):
        if SWAP_IDS:
            block = tl.program_id(1)
            bh = tl.program_id(0)
        else:
            block = tl.program_id(0)
            bh = tl.program_id(1)
        if HEAD_STRIDE == 0:
            head = bh * N * D
        else:
            head = bh * HEAD_STRIDE                    # a wrong stride per head
        rows = block * BLOCK + tl.arange(0, BLOCK)
        dims = tl.arange(0, D)
        q = tl.load(q_ptr + head + rows[:, None] * D + dims[None, :], mask=rows[:, None] < N,
                    other=0.0)
        m = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
        ell = tl.zeros((BLOCK,), dtype=tl.float32)
        if ACC16:
            acc = tl.zeros((BLOCK, D), dtype=tl.float16)
        else:
            acc = tl.zeros((BLOCK, D), dtype=tl.float32)
        hi = (block + 1) * BLOCK if IS_CAUSAL else N
        if DROP_TAIL:
            hi = hi // BLOCK * BLOCK
        for start in range(0, hi, BLOCK):
            keys = start + tl.arange(0, BLOCK)
            if MASK_LOADS:
                k = tl.load(k_ptr + head + keys[:, None] * D + dims[None, :],
                            mask=keys[:, None] < N, other=0.0)
                v = tl.load(v_ptr + head + keys[:, None] * D + dims[None, :],
                            mask=keys[:, None] < N, other=0.0)
            else:
                k = tl.load(k_ptr + head + keys[:, None] * D + dims[None, :])
                v = tl.load(v_ptr + head + keys[:, None] * D + dims[None, :])
            s = tl.dot(q, tl.trans(k)) * qk_scale
            if MASK_SCORES:
                s = tl.where(keys[None, :] < N, s, float("-inf"))
            if IS_CAUSAL:
                s = tl.where(keys[None, :] <= rows[:, None] + DIAG, s, float("-inf"))
            if NO_MAX:
                m_new = m
                alpha = tl.full((BLOCK,), 1.0, dtype=tl.float32)
                p = tl.exp2(s)
            else:
                m_new = tl.maximum(m, tl.max(s, axis=1))
                if GUARD_EMPTY:   # rows with no key yet: subtract 0 instead of -inf (no NaN)
                    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
                    alpha = tl.exp2(m - m_use)
                    p = tl.exp2(s - m_use[:, None])
                elif USE_EXP:
                    alpha = tl.exp(m - m_new)
                    p = tl.exp(s - m_new[:, None])
                else:
                    alpha = tl.exp2(m - m_new)
                    p = tl.exp2(s - m_new[:, None])
            if RESCALE_L:
                ell = alpha * ell + tl.sum(p, axis=1)
            else:
                ell = ell + tl.sum(p, axis=1)
            if PV16:
                pv = tl.dot(p.to(tl.float16), v.to(tl.float16))
            else:
                pv = tl.dot(p, v)
            if RESCALE_ACC:
                acc = acc * alpha[:, None] + pv
            else:
                acc = acc + pv
            if ACC16:
                acc = acc.to(tl.float16)
            m = m_new
        if NO_MAX:
            m = tl.zeros((BLOCK,), dtype=tl.float32)
        tl.store(o_ptr + head + rows[:, None] * D + dims[None, :], acc / ell[:, None],
                 mask=rows[:, None] < N)
        if WRITE_LSE:
            tl.store(lse_ptr + bh * N + rows, (m + tl.log2(ell)) * LSE_SCALE, mask=rows < N)


_BUG_FLAGS = dict(MASK_LOADS=True, MASK_SCORES=True, RESCALE_ACC=True, RESCALE_L=True,
                  USE_EXP=False, DIAG=0, WRITE_LSE=True, LSE_SCALE=LN2, NO_MAX=False,
                  ACC16=False, PV16=False, DROP_TAIL=False, SWAP_IDS=False, HEAD_STRIDE=0,
                  GUARD_EMPTY=False)


def _buggy(block=32, factor=LOG2E, **bugs):
    flags = dict(_BUG_FLAGS)
    flags.update(bugs)

    def flash_forward(q, k, v, is_causal=False):
        B, H, N, D = q.shape
        out = torch.empty_like(q)
        lse = torch.zeros((B, H, N), dtype=torch.float32)
        _buggy_flash[(triton.cdiv(N, block), B * H)](
            q, k, v, out, lse, N, factor / math.sqrt(D), IS_CAUSAL=is_causal, BLOCK=block, D=D,
            **flags)
        return out, lse
    return flash_forward


def test_the_buggy_kernel_without_bugs_passes():
    r = exercises.check("triton_flash_forward", _buggy(), record=False, seed=2)
    assert r.passed, r.message


@pytest.mark.parametrize("mistake,fn", [
    ("scores_not_masked", lambda: _buggy(MASK_SCORES=False)),
    ("output_not_rescaled", lambda: _buggy(block=16, RESCALE_ACC=False)),
    ("sum_not_rescaled", lambda: _buggy(RESCALE_L=False)),
    ("log2e_missing", lambda: _buggy(factor=1.0)),
    ("log2e_twice", lambda: _buggy(factor=math.log2(math.e) ** 2)),
    ("exp_instead_of_exp2", lambda: _buggy(USE_EXP=True)),
    ("lse_not_written", lambda: _buggy(WRITE_LSE=False)),
    ("lse_base_2", lambda: _buggy(LSE_SCALE=1.0)),
    ("causal_excludes_diagonal", lambda: _buggy(DIAG=-1)),
    ("causal_excludes_diagonal", lambda: _buggy(DIAG=-1, GUARD_EMPTY=True)),   # lse = -inf
    ("causal_one_ahead", lambda: _buggy(DIAG=1)),
    ("no_running_max", lambda: _buggy(NO_MAX=True)),
    ("accumulator_float16", lambda: _buggy(block=16, ACC16=True)),
    ("accumulator_float16", lambda: _buggy(ACC16=True)),
    ("pv_float16", lambda: _buggy(PV16=True)),
    ("pv_float16", lambda: _buggy(block=16, PV16=True)),
    ("key_tail_dropped", lambda: _buggy(block=16, DROP_TAIL=True)),
    ("key_tail_dropped", lambda: _buggy(DROP_TAIL=True)),
])
def test_flash_mistakes_are_diagnosed(mistake, fn):
    r = diagnosed("triton_flash_forward", fn(), seed=3)
    assert not r.passed and r.mistake == mistake, r.message
    declared = {m.reported_id: m.message for m in ch_exercises.TRITON_FLASH_FORWARD.mistakes}
    assert r.message.startswith(declared[mistake])


@pytest.mark.parametrize("exercise_id,fn,seed", [
    ("triton_flash_forward", lambda: _buggy(block=16, RESCALE_ACC=False), 3),
    ("triton_softmax", lambda: _WARM_UPS["no_shift"], 5),
])
def test_the_worker_names_the_same_mistake_as_the_engine(exercise_id, fn, seed):
    """A learner's check runs in the forked worker; the diagnosis tests here run the engine
    in this process (:func:`diagnosed`). Both name the same mistake with the same message."""
    learner = exercises.check(exercise_id, fn(), record=False, seed=seed)
    engine = diagnosed(exercise_id, fn(), seed)
    assert learner.mistake and not learner.passed, learner.message
    assert (learner.mistake, learner.message) == (engine.mistake, engine.message)


def test_flash_unmasked_last_block_is_refused_as_out_of_bounds():
    r = exercises.check("triton_flash_forward", _buggy(MASK_LOADS=False, MASK_SCORES=False),
                        record=False, seed=4)
    assert not r.passed and "tl.load reads outside the tensor `k_ptr`" in r.message, r.message
    assert "program id (0, 1, 0)" in r.message, r.message   # head 1 reads past k's end
    assert "in _buggy_flash: k = tl.load(" in r.message and "_check_access" not in r.message


@pytest.mark.slow
@pytest.mark.parametrize("bug,seed", [
    (dict(SWAP_IDS=True), 6),            # grid (query blocks, B·H) read as (B·H, query blocks)
    (dict(HEAD_STRIDE=16), 7),           # head bh at bh·E: the heads overlap
    (dict(HEAD_STRIDE=40 * 16 * 2), 8),  # head bh at bh·2·L·E: past the end
])
def test_wrong_grid_or_head_stride_points_at_the_offsets_not_at_a_mask(bug, seed):
    r = diagnosed("triton_flash_forward", _buggy(block=16, **bug), seed)
    assert not r.passed, r.message
    assert "Check the offsets, not the mask" in r.message, r.message
    assert "Mask the access" not in r.message, r.message


def test_an_unmasked_tail_that_runs_into_the_next_tensor_is_named_by_its_own():
    """k's unmasked last block reads on past k's end. With q lying right after k in memory
    (here: two views of one buffer; in a check, wherever the allocator put them) most of those
    lanes land in q. The access still belongs to k, where it starts, and the advice is the mask."""
    buf = torch.randn(2, 1, 2, 40, 16)
    k, q = buf[0], buf[1]                       # k's last element is right before q's first
    v = torch.randn(1, 2, 40, 16)
    with pytest.raises(checking.OutOfBounds) as e:
        _buggy(MASK_LOADS=False, MASK_SCORES=False)(q, k, v)
    message = str(e.value)
    assert "tl.load reads outside the tensor `k_ptr`" in message, message
    assert "Mask the access" in message and "Check the offsets" not in message, message


def test_unmasked_tail_still_advises_the_mask():
    r = diagnosed("triton_flash_forward", _buggy(MASK_LOADS=False, MASK_SCORES=False), 4)
    assert "Mask the access" in r.message and "Check the offsets" not in r.message, r.message


def test_two_programs_writing_one_element_is_a_race():
    x, y = torch.randn(32), torch.empty(16)
    with pytest.raises(checking.WriteConflict, match="race"):
        _copy_first_block[(2,)](x, y, 16, BLOCK=16)


def test_attention_in_torch_is_refused():
    def cheat(q, k, v, is_causal=False):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(s, -1) @ v, s.logsumexp(-1)
    r = exercises.check("triton_flash_forward", cheat, record=False)
    assert r.mistake == "forbidden_call"
    r = exercises.check("triton_matmul", lambda a, b: a @ b, record=False)
    assert r.mistake == "forbidden_call" and "matrix products" in r.message


@pytest.mark.slow
def test_float16_softmax_that_subtracts_the_max_is_not_named_no_max_shift():
    """no_max_shift's simulation equals the right answer on ordinary rows: it cannot be what
    went wrong there (it was named on 13 of 20 seeds before the engine's rule)."""
    for seed in range(3):
        r = diagnosed("triton_softmax", _WARM_UPS["fp16_shifted"], seed)
        assert not r.passed and r.mistake != "no_max_shift", r.message


@pytest.mark.parametrize("exercise_id,mistake,fn", [
    ("triton_softmax", "masked_lanes_zero", "pad_zero"),
    ("triton_softmax", "no_max_shift", "no_shift"),
    ("triton_matmul", "accumulator_overwritten", "overwrite"),
])
def test_warm_up_mistakes_are_diagnosed(exercise_id, mistake, fn):
    r = diagnosed(exercise_id, _WARM_UPS[fn], 5)
    assert not r.passed and r.mistake == mistake, r.message


if chapter.TRITON_AVAILABLE:
    @triton.jit
    def _softmax_bug(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr, SHIFT: tl.constexpr,
                     OTHER: tl.constexpr, FP16: tl.constexpr = False):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=OTHER)
        if FP16:
            x = x.to(tl.float16)
        if SHIFT:
            x = x - tl.max(x, axis=0)
        p = tl.exp(x)
        tl.store(y_ptr + row * n_cols + cols, p / tl.sum(p, axis=0), mask=cols < n_cols)

    @triton.jit
    def _matmul_overwrite(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr):
        rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for k0 in range(0, K, BLOCK):
            ks = k0 + tl.arange(0, BLOCK)
            a = tl.load(a_ptr + rows[:, None] * K + ks[None, :],
                        mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
            b = tl.load(b_ptr + ks[:, None] * N + cols[None, :],
                        mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc = tl.dot(a, b)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))

    def _softmax_launch(shift, other, fp16=False):
        def softmax(x):
            y = torch.empty_like(x)
            _softmax_bug[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(
                x.shape[1]), SHIFT=shift, OTHER=other, FP16=fp16)
            return y
        return softmax

    def _overwrite(a, b):
        c = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
        grid = (triton.cdiv(a.shape[0], 16), triton.cdiv(b.shape[1], 16))
        _matmul_overwrite[grid](a, b, c, a.shape[0], b.shape[1], a.shape[1], BLOCK=16)
        return c

    _WARM_UPS = {"pad_zero": _softmax_launch(True, 0.0),
                 "fp16_shifted": _softmax_launch(True, float("-inf"), fp16=True),
                 "no_shift": _softmax_launch(False, float("-inf")), "overwrite": _overwrite}
