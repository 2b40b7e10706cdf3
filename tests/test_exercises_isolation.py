"""Adversarial submissions: each is refused with a specific message, nothing leaks into the
learner's session, and ``check`` never raises (the learner's code runs in a worker process)."""

from __future__ import annotations

import ctypes
import math
import os
import signal
import sys
import time

import pytest
import torch

from course_lib import exercises
from course_lib.toolkit.checking import _engine, _isolation

pytestmark = pytest.mark.skipif(not _isolation.fork_available(), reason="needs os.fork (Linux)")


@pytest.fixture(autouse=True)
def _progress_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "progress.json"))


def _stable(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


# ---------------------------------------------------------------- the course's own answers


def test_course_functions_are_refused_by_where_their_code_lives():
    from course_lib import masks
    from course_lib.chapters.ch03_softmax import helpers as softmax_tools

    cases = [
        ("causal_mask", lambda n: masks.causal_mask(n), "course_lib.attention.masks.causal_mask"),
        ("softmax", exercises.get_exercise("softmax").solution,
         "course_lib.chapters.ch03_softmax.exercises.softmax"),
    ]
    for exercise_id, fn, name in cases:
        result = exercises.check(exercise_id, fn)
        assert not result.passed and result.mistake == "course_call", result.message
        assert result.message.startswith(f"`{name}` is the course's own answer: write it "
                                          "yourself")
    # the course's softmax is also on the exercise's forbidden list, which is reported first
    result = exercises.check("softmax", lambda x, dim=-1: softmax_tools.stable_softmax(x, dim))
    assert not result.passed and result.mistake == "forbidden_call", result.message


def test_the_exercise_solution_reached_through_exercises_is_refused():
    def sneaky(blocks):
        from course_lib import exercises as ex

        return ex.get_exercise("online_softmax_stats").solution(blocks)

    result = exercises.check("online_softmax_stats", sneaky)
    assert result.mistake == "course_call" and "course_lib.toolkit.checking" in result.message


def test_course_call_cannot_be_swallowed():
    from course_lib import masks

    def sneaky(n):
        try:
            return masks.causal_mask(n)
        except BaseException:
            return torch.ones(n, n, dtype=torch.bool).tril()

    assert exercises.check("causal_mask", sneaky).mistake == "course_call"


def test_an_exercise_can_allow_course_calls(monkeypatch):
    from course_lib import masks

    ex = exercises.get_exercise("causal_mask")
    monkeypatch.setattr(ex, "allowed_course_calls", ("course_lib.attention.masks.causal_mask",))
    assert exercises.check("causal_mask", lambda n: masks.causal_mask(n)).passed


def test_importing_course_lib_inside_the_function_is_fine():
    def imports(n):
        import course_lib.masks  # noqa: F401

        return torch.ones(n, n, dtype=torch.bool).tril()

    assert exercises.check("causal_mask", imports).passed


def test_switching_the_tracer_off_is_refused():
    from course_lib import masks

    def untraced(n):
        sys.settrace(None)
        return masks.causal_mask(n)

    result = exercises.check("causal_mask", untraced)
    assert result.mistake == "tampering" and "sys.settrace" in result.message


# ---------------------------------------------------------------- patched comparisons, subclasses


def test_patched_comparisons_do_not_pass():
    def patcher(x, dim=-1):
        torch.allclose = lambda *a, **k: True
        torch.testing.assert_close = lambda *a, **k: None
        torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
        torch.equal = lambda *a: True
        return torch.zeros_like(x)

    result = exercises.check("softmax", patcher)
    assert result.mistake == "wrong_values"
    assert torch.equal(torch.zeros(2), torch.zeros(2)) and not torch.allclose(
        torch.zeros(2), torch.ones(2))          # the session's torch is untouched


def test_tensor_subclass_with_overridden_comparisons_is_refused():
    def subclassed(x, dim=-1):
        class Liar(torch.Tensor):
            def __eq__(self, other):
                return True

            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                return super().__torch_function__(func, types, args, kwargs or {})

        return torch.zeros_like(x).as_subclass(Liar)

    result = exercises.check("softmax", subclassed)
    assert result.mistake == "wrong_type" and "subclass of torch.Tensor" in result.message


def test_int_subclass_equal_to_everything_is_refused():
    def count(n, d):
        class Anything(int):
            def __eq__(self, other):
                return True

            __hash__ = int.__hash__

        return Anything(0)

    result = exercises.check("attention_flops", count)
    assert result.mistake == "wrong_type" and "Anything" in result.message


def test_returning_the_input_object_itself_is_judged_on_its_values():
    assert exercises.check("softmax", lambda x, dim=-1: x).mistake == "wrong_values"


def test_in_place_modification_of_inputs_is_still_caught():
    def in_place(x, dim=-1):
        x -= x.amax(dim=dim, keepdim=True)
        x.exp_()
        return x / x.sum(dim=dim, keepdim=True)

    assert exercises.check("softmax", in_place).mistake == "modified_input"


# ---------------------------------------------------------------- session state does not leak


@pytest.mark.parametrize(("change", "read"), [
    (lambda: torch.set_default_dtype(torch.float64), torch.get_default_dtype),
    (lambda: torch.set_grad_enabled(False), torch.is_grad_enabled),
    (lambda: torch.manual_seed(1234), lambda: torch.get_rng_state().clone()),
    (lambda: torch.set_num_threads(1 if torch.get_num_threads() > 1 else 2),
     torch.get_num_threads),
], ids=["default_dtype", "grad_mode", "rng_state", "num_threads"])
def test_state_changes_do_not_leak_into_the_session(change, read):
    def changer(x, dim=-1):
        change()
        return _stable(x, dim)

    before = read()
    result = exercises.check("softmax", changer)
    after = read()
    assert result.passed, result.message
    if isinstance(before, torch.Tensor):
        assert torch.equal(before, after)
    else:
        assert before == after


# ---------------------------------------------------------------- exits, crashes, hangs, memory


def test_os_exit_is_refused_in_the_worker():
    """Only the checker ends its worker (issue 52: a forger left with os._exit(0) after
    writing its own reports); the session goes on."""
    result = exercises.check("softmax", lambda x, dim=-1: os._exit(3))
    assert result.mistake == "tampering" and "os._exit" in result.message, result.message
    assert exercises.check("softmax", _stable).passed


def test_sys_exit_and_keyboard_interrupt_are_errors():
    def exits(x, dim=-1):
        sys.exit(0)

    def interrupts(x, dim=-1):
        raise KeyboardInterrupt

    def base(x, dim=-1):
        raise BaseException("odd")

    for fn, name in ((exits, "SystemExit"), (interrupts, "KeyboardInterrupt"),
                     (base, "BaseException")):
        result = exercises.check("softmax", fn)
        assert result.mistake == "raised" and name in result.message


def test_segfault_ends_only_the_worker():
    # ctypes is refused by the worker's policy (test_exercises_policy); faulthandler's own
    # test helper still crashes the interpreter for real.
    import faulthandler

    result = exercises.check("softmax", lambda x, dim=-1: faulthandler._sigsegv())
    assert result.mistake == "crashed" and "SIGSEGV" in result.message
    result = exercises.check("softmax", lambda x, dim=-1: ctypes.string_at(0))
    assert result.mistake == "worker_policy" and "raw memory" in result.message


def test_signal_to_the_session_is_refused():
    def kill_parent(x, dim=-1):
        os.kill(os.getppid(), signal.SIGKILL)
        return _stable(x, dim)

    result = exercises.check("softmax", kill_parent)
    assert result.mistake == "worker_policy" and "sends a signal to another process" \
        in result.message


def test_endless_loop_is_stopped_by_killing_the_worker():
    def forever(x, dim=-1):
        while True:
            pass

    t0 = time.monotonic()
    result = exercises.check("softmax", forever, timeout=0.3)
    assert time.monotonic() - t0 < 10
    assert result.mistake == "timeout" and "did not finish within 0.3 s" in result.message


def test_huge_allocation_hits_the_memory_cap():
    def hog(x, dim=-1):
        return torch.ones(2 ** 31 // 4 * 3, dtype=torch.float32)   # 6 GiB > the 2 GiB cap

    def grows(x, dim=-1):
        keep = []
        while True:
            keep.append(torch.empty(2 ** 24))    # 64 MiB at a time

    # The cap is on the worker's address space (RLIMIT_AS): a block counts once allocated,
    # written or not. With torch.ones the kernel also had to hand out and zero 2 GiB of pages:
    # 20.7 s of this test on a 2-core AMD EPYC VM. Without a cap the loop would run until the
    # time limit, which is only a bound.
    for fn in (hog, grows):
        result = exercises.check("softmax", fn, timeout=600)
        assert result.mistake == "memory_limit", result.message
        assert "memory" in result.message


def test_check_never_raises_on_odd_callables():
    class Callable:
        def __call__(self, x, dim=-1):
            return _stable(x, dim)

        def __getattr__(self, name):
            raise RuntimeError("boom")

    assert exercises.check("softmax", Callable()).passed


# ---------------------------------------------------------------- notebook-style functions


def test_closures_lambdas_and_helpers_stay_checkable():
    shift = {"use_max": True}

    def helper(x, dim):
        return x.amax(dim=dim, keepdim=True) if shift["use_max"] else 0

    def closure_softmax(x, dim=-1):
        e = torch.exp(x - helper(x, dim))
        return e / e.sum(dim=dim, keepdim=True)

    assert exercises.check("softmax", closure_softmax).passed
    assert exercises.check("scaled_scores",
                           lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).passed


# ---------------------------------------------------------------- diagnosis order


def test_dtype_is_named_before_a_mistake_that_matches_the_values():
    def float32_always(x, dim=-1):
        x = x.float()
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    result = exercises.check("softmax", float32_always, seed=0)
    assert result.mistake == "dtype_not_kept"          # the dtype, not the values' mistake
    assert "dtype float32; expected float64" in result.message.splitlines()[1]
    assert "overflows" not in result.message


def test_an_exception_is_named_before_nan_rows():
    def indexes(q, k, v, mask):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        s[~mask] = float("-inf")       # IndexError for a broadcasting mask
        return torch.softmax(s, dim=-1) @ v

    result = exercises.check("masked_attention", indexes, seed=0)
    assert result.mistake == "raised", result.message
    assert result.message.splitlines()[0].startswith("First failing case 'padding, L != S'")
    assert "IndexError" in result.message.splitlines()[1] or "IndexError" in result.message


# ---------------------------------------------------------------- the engine API


def test_in_process_and_isolated_verdicts_agree():
    ex = exercises.get_exercise("softmax")
    for fn in (_stable, ex.mistakes[0].fn):
        a = _engine.run_check(ex, fn, seed=5, refuse_course=False)
        b = _engine.run_check(ex, fn, seed=5, isolate=False, refuse_course=False)
        c = _engine.run_check(ex, fn, seed=5, isolate=False, watch=False)
        assert repr(a) == repr(b) == repr(c)


# ---------------------------------------------------------------- the command line


def test_cli_time_limit_covers_loading_the_file(tmp_path, capsys):
    from course_lib.__main__ import main

    looping = tmp_path / "looping.py"
    looping.write_text("while True:\n    pass\n\ndef softmax(x, dim=-1):\n    return x\n")
    t0 = time.monotonic()
    assert main(["check", "softmax", str(looping), "--timeout", "1"]) == 2
    assert time.monotonic() - t0 < 15
    err = capsys.readouterr().err
    assert "did not finish within 1 s" in err and "top level" in err

    exits = tmp_path / "exits.py"
    exits.write_text("import os\nos._exit(4)\n")
    assert main(["check", "softmax", str(exits)]) == 1
    captured = capsys.readouterr()
    assert "os._exit" in captured.out + captured.err


def test_cli_checks_in_the_worker(tmp_path, capsys):
    from course_lib.__main__ import main

    good = tmp_path / "good.py"
    good.write_text("import torch\nfrom course_lib import masks\n\n"
                    "def causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).tril()\n\n"
                    "def cheat(n):\n    return masks.causal_mask(n)\n")
    assert main(["check", "causal_mask", str(good)]) == 0
    assert main(["check", "causal_mask", str(good), "--function", "cheat"]) == 1
    assert "is the course's own answer" in capsys.readouterr().out
