"""Issue 39 for chapters 8 and 9: the false accepts of the fresh corpus (item 8), refused with a
named mistake; atomics bounds-checked like loads and stores; and a Triton exercise's result must
be written by a kernel launched during the call (item 6, ``checking.TritonLaunchCheck``).

Each check here runs through ``exercises.check`` (the learner's path: a worker, the watch, the
exercise's extension) unless it says otherwise.
"""

from __future__ import annotations

import math

import pytest
import torch
from learner_corpus_fresh_flash import (
    fb_causal_bottom_right,
    fb_causal_ge,
    fb_exp_then_divide,
)

from course_lib import exercises
from course_lib.chapters import ch09_flash_triton as chapter

triton_only = pytest.mark.skipif(not chapter.TRITON_AVAILABLE, reason=chapter.TRITON_MISSING)

if chapter.TRITON_AVAILABLE:
    import triton
    import triton.language as tl
    from learner_corpus_fresh_flash import (
        tfb_atomic_add_unmasked,
        tfb_exp_then_divide,
        tfb_leaks_inside_diagonal_tiles,
    )

    from course_lib.chapters.ch09_flash_triton import checking


def _check(exercise_id, fn, seed=0):
    return exercises.check(exercise_id, fn, record=False, seed=seed)


def _verdict(exercise_id, fn, seed=0):
    """The engine's bare path (no worker, no watch): the cases, the tolerances and the mistake
    recognition, a dozen times faster for a Triton kernel than under the watch."""
    from course_lib.toolkit.checking._engine import run_check
    return run_check(exercises.get_exercise(exercise_id), fn, seed=seed, isolate=False,
                     watch=False)


# ------------------------------------------------------------------ chapter 8: flash_backward


def test_flash_backward_cases_overflow_exp_and_have_causal_l_not_s():
    cases = exercises.get_exercise("flash_backward").cases(torch.Generator().manual_seed(0))
    causal_ragged = [c for c in cases if c.args[6] and c.args[0].shape[-2] != c.args[1].shape[-2]]
    assert causal_ragged, "no causal case with L != S"
    big = [c for c in cases if c.args[0].dtype == torch.float32
           and bool(torch.isinf(torch.exp(c.args[4])).all())]   # exp(lse) overflows every row
    assert big, "no float32 case whose scores overflow exp"


@pytest.mark.parametrize("fn,mistake", [
    (fb_exp_then_divide, "exp_then_divide"),          # accepted before: no score overflowed
    (fb_causal_bottom_right, "causal_bottom_right"),  # accepted before: every causal L == S
    (fb_causal_ge, "causal_excludes_diagonal"),       # `>=` for `>`: was "wrong values"
])
def test_flash_backward_false_accepts_are_refused_and_named(fn, mistake):
    r = _check("flash_backward", fn)
    assert not r.passed and r.mistake == mistake, r.message


# ------------------------------------------------------------------ chapter 9: the backward


@triton_only
def test_triton_backward_has_a_case_whose_every_score_overflows_exp():
    ex = exercises.get_exercise("triton_flash_backward")
    for seed in range(3):
        cases = ex.cases(torch.Generator().manual_seed(seed))
        big = [c for c in cases if float(c.args[4].min()) > 100]   # lse: every row's scores
        assert big and not big[0].args[6]                          # not causal


@triton_only
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")
def test_triton_backward_exp_then_divide_is_refused_and_named():
    r = _verdict("triton_flash_backward", tfb_exp_then_divide)
    assert not r.passed and r.mistake == "exp_then_divide", r.message
    assert "scores in the hundreds" in r.message


@triton_only
def test_triton_backward_leaking_inside_diagonal_tiles_is_named():
    """Tiles above the diagonal skipped, key i + 1 visible inside the diagonal tiles only."""
    for seed in range(2):
        r = _verdict("triton_flash_backward", tfb_leaks_inside_diagonal_tiles, seed=seed)
        assert not r.passed and r.mistake == "causal_one_ahead_bwd", r.message


@triton_only
def test_triton_backward_atomic_add_past_the_end_of_dq_is_refused():
    r = _check("triton_flash_backward", tfb_atomic_add_unmasked)
    assert not r.passed and r.mistake == "raised", r.message
    assert "tl.atomic_add updates outside the tensor `dq_ptr`" in r.message


# ------------------------------------------------------------------ atomics in checking


if chapter.TRITON_AVAILABLE:
    @triton.jit
    def _add_ones(x_ptr, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
        offs = tl.arange(0, BLOCK)      # every program adds to the same elements
        if MASKED:
            tl.atomic_add(x_ptr + offs, 1.0, mask=offs < n)
        else:
            tl.atomic_add(x_ptr + offs, 1.0)

    @triton.jit
    def _max_past_the_end(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.atomic_max(x_ptr + offs, 1.0)

    @triton.jit
    def _cas_past_the_end(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.atomic_cas(x_ptr + offs, 0, 1)

    @triton.jit
    def _store_then_add(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        if tl.program_id(0) == 0:
            tl.store(x_ptr + offs, 1.0, mask=offs < n)
        else:
            tl.atomic_add(x_ptr + offs, 1.0, mask=offs < n)


@triton_only
def test_atomics_from_several_programs_to_one_element_are_not_a_race():
    x = torch.zeros(10)
    _add_ones[(3,)](x, 10, BLOCK=16, MASKED=True)
    assert torch.equal(x, torch.full((10,), 3.0))


@triton_only
def test_an_unmasked_atomic_past_the_end_is_refused():
    x = torch.zeros(10)
    with pytest.raises(checking.OutOfBounds, match=r"tl\.atomic_add updates outside .* 6 of the "
                                                   r"16 addresses"):
        _add_ones[(1,)](x, 10, BLOCK=16, MASKED=False)
    assert torch.equal(x, torch.zeros(10))       # refused before anything was added
    with pytest.raises(checking.OutOfBounds, match=r"tl\.atomic_max"):
        _max_past_the_end[(2,)](torch.zeros(24), 24, BLOCK=16)
    with pytest.raises(checking.OutOfBounds, match=r"tl\.atomic_cas"):
        _cas_past_the_end[(1,)](torch.zeros(10, dtype=torch.int32), BLOCK=16)


@triton_only
def test_a_store_and_another_programs_atomic_on_one_element_are_a_race():
    with pytest.raises(checking.WriteConflict, match="race"):
        _store_then_add[(2,)](torch.zeros(10), 10, BLOCK=16)


# ------------------------------------------------------------------ the launch check


if chapter.TRITON_AVAILABLE:
    @triton.jit
    def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    @triton.jit
    def _row_softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
        p = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_ptr + row * n_cols + cols, p / tl.sum(p, axis=0), mask=cols < n_cols)

    def _softmax_in_torch(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    def _softmax_flat_buffer(x):
        """Right: the kernel writes a flat buffer, a view of it is returned."""
        y = torch.empty(x.numel())
        _row_softmax[(x.shape[0],)](x.contiguous(), y, x.shape[1],
                                    BLOCK=triton.next_power_of_2(x.shape[1]))
        return y.view(x.shape)

    def _softmax_after_a_dummy_launch(x):
        y = torch.empty(x.numel())
        _double[(triton.cdiv(x.numel(), 64),)](x.contiguous(), y, x.numel(), BLOCK=64)
        return _softmax_in_torch(x)

    def _softmax_copied_out(x):
        y = torch.empty_like(x)
        _row_softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y.clone()

    def _matmul_broadcast(a, b):
        return (a.double()[:, :, None] * b.double()[None, :, :]).sum(1).to(a.dtype)


@triton_only
def test_launch_check_judges_what_the_kernels_wrote():
    check = checking.TritonLaunchCheck(("a", "b"))
    x = torch.randn(40)
    with check.around_call() as judge:
        assert judge(x * 2)[0] == "no_kernel_launch"            # nothing launched
    with check.around_call() as judge:
        y = torch.empty(48)
        _double[(1,)](x, y[8:], 40, BLOCK=64)
        assert judge(y[8:]) is None and judge(y[8:].reshape(5, 8)) is None
        assert judge(y) is None                                  # the buffer, partly written
        assert judge((y[8:], y[8:].view(8, 5))) is None
        assert judge(y[:8]) is not None                          # memory no store reached
        verdict = judge((y[8:], y[8:] + 1))
        assert verdict is not None and "`b`" in verdict[1] and "_double" in verdict[1]
        assert judge(None) is None and judge(3.0) is None       # the comparison says what's wrong
    assert not checking._RECORDERS


@triton_only
@pytest.mark.parametrize("exercise_id,fn", [
    ("triton_softmax", "_softmax_in_torch"),               # issue 39, item 6
    ("triton_matmul", "_matmul_broadcast"),                # issue 39, item 6
])
def test_a_result_no_kernel_wrote_is_refused(exercise_id, fn):
    r = _check(exercise_id, globals()[fn])
    assert not r.passed and r.mistake == "no_kernel_launch", r.message
    assert "Triton kernel" in r.message or "tl.store" in r.message


@triton_only
def test_a_result_torch_computed_after_a_launch_is_refused_by_the_host_rule():
    """Issue 51: torch may allocate, view, copy and cast on the host, not compute."""
    r = _check("triton_softmax", _softmax_after_a_dummy_launch)
    assert not r.passed and r.mistake == "computed_in_torch", r.message
    assert "computed inside your Triton kernel" in r.message


@triton_only
def test_a_copy_of_what_the_kernel_wrote_passes():
    """A copy (or a dtype cast) on the host of the kernel's output is not computation: the
    values are the kernel's (issue 51, the false reject of host-side casts)."""
    r = _check("triton_softmax", _softmax_copied_out)
    assert r.passed, r.message


@triton_only
def test_a_view_of_the_buffer_a_kernel_wrote_passes():
    r = _check("triton_softmax", _softmax_flat_buffer)
    assert r.passed, r.message


@triton_only
def test_torch_results_pass_the_statistical_path_unjudged():
    """The bare path (the course's float64 simulations of mistakes) has no launch check."""
    assert _verdict("triton_softmax", _softmax_in_torch).passed


def test_every_triton_exercise_declares_the_launch_check():
    for eid in ("triton_softmax", "triton_matmul", "triton_flash_forward",
                "triton_flash_backward"):
        ext = exercises.get_exercise(eid).extension
        if chapter.TRITON_AVAILABLE:
            assert isinstance(ext, checking.TritonLaunchCheck), eid
        else:
            assert ext is None


def test_magnitudes_only_for_the_cases_with_scores_in_the_hundreds():
    """The magnitude (the size of the cancelling terms) is computed only where the scores carry
    a large offset; elsewhere the gradient's own size is the scale."""
    for eid in ("flash_backward", "triton_flash_backward"):
        ex = exercises.get_exercise(eid)
        if eid.startswith("triton") and not chapter.TRITON_AVAILABLE:
            continue
        for case in ex.cases(torch.Generator().manual_seed(1)):
            mags = ex.magnitude(*case.args)
            big = float(case.args[4].abs().max()) > 50
            assert (mags is not None) == big, case.name
            if big:
                grads = ex.oracle(*case.args)
                for g, m in zip(grads, mags, strict=True):
                    assert m.shape == g.shape
                    assert bool((m * (1 + 1e-3) + 1e-9 >= g.double().abs()).all())
                    assert math.isfinite(float(m.max()))


if chapter.TRITON_AVAILABLE:
    @triton.jit
    def _store_nothing(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < 0)


@triton_only
def test_a_buffer_the_kernel_received_but_never_stored_to():
    """Alone, it is refused (the result must be what a kernel stores); beside a written output
    it is left to the values, where a forgotten store is a named mistake (lse_not_written)."""
    check = checking.TritonLaunchCheck(("out", "lse"))
    x = torch.randn(8)
    with check.around_call() as judge:
        y, z = torch.empty(8), torch.zeros(8)
        _double[(1,)](x, y, 8, BLOCK=8)
        _store_nothing[(1,)](x, z, 8, BLOCK=8)
        verdict = judge(z)
        assert verdict is not None and "which the kernel received" in verdict[1]
        assert judge((y, z)) is None
        assert judge((y, torch.zeros(8)))[0] == "no_kernel_launch"   # never given to a kernel
