"""check() survives anything a learner can submit, with a specific message for each."""

from __future__ import annotations

import math
import sys
import threading
import time

import numpy as np
import pytest
import torch

from course_lib import exercises


@pytest.fixture(autouse=True)
def _progress_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "progress.json"))


def _stable(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


# ---------------------------------------------------------------- untouched starters


def starter_ellipsis(x, dim=-1):
    """Return the softmax of x along dim."""
    ...


def starter_pass(x, dim=-1):
    pass


def starter_raise(x, dim=-1):
    raise NotImplementedError


def starter_raise_call(x, dim=-1):
    # TODO
    raise NotImplementedError("write me")


@pytest.mark.parametrize("fn", [starter_ellipsis, starter_pass, starter_raise, starter_raise_call,
                                lambda x, dim=-1: ...])
def test_untouched_starter_is_not_attempted(fn):
    result = exercises.check("softmax", fn)
    assert not result.passed
    assert result.status == "not_attempted" and result.mistake == "not_attempted"
    assert repr(result).startswith("○ softmax: Not attempted yet.")


def test_partial_work_ending_in_not_implemented_is_not_attempted():
    def half_done(x, dim=-1):
        m = x.amax(dim=dim, keepdim=True)
        if m is not None:
            raise NotImplementedError
        return m

    result = exercises.check("softmax", half_done)
    assert result.mistake == "not_attempted" and "NotImplementedError" in result.message


# ---------------------------------------------------------------- errors and wrong returns


def test_raising_submission_shows_only_learner_frames():
    def helper(x):
        return x @ torch.ones(3, 3, 3)

    def raises(x, dim=-1):
        y = x.exp()
        return helper(y)

    result = exercises.check("softmax", raises)
    assert result.mistake == "raised"
    assert "Traceback (your code only):" in result.message
    assert "in raises: return helper(y)" in result.message
    assert "in helper: return x @ torch.ones(3, 3, 3)" in result.message
    assert "RuntimeError" in result.message
    assert "_sandbox" not in result.message and "threading" not in result.message
    assert "site-packages" not in result.message and ".py" not in result.message


def test_returns_none():
    def forgot_return(x, dim=-1):
        _ = _stable(x, dim)

    result = exercises.check("softmax", forgot_return)
    assert result.mistake == "returned_none" and "`return`" in result.message


def test_returns_numpy():
    result = exercises.check("softmax", lambda x, dim=-1: _stable(x, dim).numpy())
    assert result.mistake == "returned_numpy" and "torch.from_numpy" in result.message


def test_returns_wrong_shape():
    result = exercises.check("softmax", lambda x, dim=-1: _stable(x, dim).sum(dim))
    assert result.mistake == "wrong_shape"
    assert "has shape (4,); expected (4, 7)" in result.message


def test_returns_wrong_dtype():
    result = exercises.check("softmax", lambda x, dim=-1: _stable(x.double(), dim))
    assert result.mistake == "dtype_not_kept"
    assert "dtype float64; expected float32" in result.message


def test_returns_nan():
    result = exercises.check("softmax", lambda x, dim=-1: _stable(x, dim) * float("nan"))
    assert result.mistake == "nan" and "NaN" in result.message


def test_returns_wrong_type_for_int_exercise():
    result = exercises.check("attention_flops", lambda n, d: 4.0 * n * n * d)
    assert result.mistake == "float_count" and "return an int" in result.message
    result = exercises.check("attention_flops", lambda n, d: torch.tensor(4 * n * n * d))
    assert result.mistake == "wrong_type" and ".item()" in result.message


def test_returns_non_tuple_where_tuple_expected():
    def out_only(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        return _stable(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v

    result = exercises.check("self_attention", out_only)
    assert result.mistake == "wrong_type" and "(out, weights)" in result.message


def test_bool_mask_returned_as_float():
    result = exercises.check("causal_mask", lambda n: torch.ones(n, n).tril())
    assert result.mistake == "not_bool" and ".bool()" in result.message


# ---------------------------------------------------------------- prints, time limit


def test_prints_are_captured_and_noted(capsys):
    def chatty(x, dim=-1):
        print("debug", x.shape)
        return _stable(x, dim)

    result = exercises.check("softmax", chatty)
    assert result.passed and result.printed
    assert "printed output" in result.message
    assert "debug" not in capsys.readouterr().out


def test_endless_loop_hits_the_time_limit():
    def forever(x, dim=-1):
        while True:
            pass

    t0 = time.monotonic()
    result = exercises.check("softmax", forever, timeout=0.3)
    assert time.monotonic() - t0 < 5
    assert result.mistake == "timeout" and "did not finish within 0.3 s" in result.message
    # the watched thread is stopped: wait for that (a condition, not a fixed time; bounded)
    deadline = time.monotonic() + 60
    while ([t for t in threading.enumerate() if t.name == "course_lib-check"]
           and time.monotonic() < deadline):
        time.sleep(0.05)
    assert not [t for t in threading.enumerate() if t.name == "course_lib-check"]  # stopped
    # the checker still works afterwards
    assert exercises.check("softmax", _stable).passed


def test_slow_sleep_hits_the_time_limit():
    result = exercises.check("softmax", lambda x, dim=-1: time.sleep(3), timeout=0.2)
    assert result.mistake == "timeout"


# ---------------------------------------------------------------- forbidden calls, properties


@pytest.mark.parametrize("cheat", [
    lambda x, dim=-1: torch.softmax(x, dim),
    lambda x, dim=-1: torch.nn.functional.softmax(x, dim=dim),
    lambda x, dim=-1: x.softmax(dim),
    lambda x, dim=-1: torch.log_softmax(x, dim).exp(),
    lambda x, dim=-1: torch.nn.Softmax(dim=dim)(x),
])
def test_forbidden_softmax(cheat):
    result = exercises.check("softmax", cheat)
    assert result.mistake == "forbidden_call" and "softmax" in result.message


def test_forbidden_call_cannot_be_swallowed():
    def sneaky(x, dim=-1):
        try:
            return torch.softmax(x, dim)
        except Exception:
            return _stable(x, dim)

    assert exercises.check("softmax", sneaky).mistake == "forbidden_call"


def test_forbidden_sdpa_in_masked_and_flash_attention():
    from course_lib import reference

    sdpa = torch.nn.functional.scaled_dot_product_attention
    r1 = exercises.check("masked_attention", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m))
    r2 = exercises.check("flash_attention", lambda q, k, v, block_size=64: sdpa(q, k, v))
    r3 = exercises.check("masked_attention", lambda q, k, v, m:
                         reference.scaled_dot_product_attention(q, k, v, attn_mask=m))
    for r in (r1, r2, r3):
        assert r.mistake == "forbidden_call" and "scaled_dot_product_attention" in r.message


def test_softmax_is_allowed_in_masked_attention():
    def with_softmax(q, k, v, mask):
        s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, -math.inf)
        return torch.nan_to_num(torch.softmax(s, dim=-1)) @ v

    assert exercises.check("masked_attention", with_softmax).passed


def test_input_modified_in_place():
    def in_place(x, dim=-1):
        x -= x.amax(dim=dim, keepdim=True)
        x.exp_()
        return x / x.sum(dim=dim, keepdim=True)

    result = exercises.check("softmax", in_place)
    assert result.mistake == "modified_input" and "`x` in place" in result.message


def test_flash_attention_must_not_build_the_n_by_n_scores():
    def naive(q, k, v, block_size=64):
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).exp()
        return (w / w.sum(-1, keepdim=True)) @ v

    result = exercises.check("flash_attention", naive)
    assert result.mistake == "nxn_tensor"
    assert "N×N (N=256)" in result.message and "L=256, default block" in result.message


# ---------------------------------------------------------------- check never raises


@pytest.mark.parametrize(("exercise_id", "fn", "mistake"), [
    ("softmx", _stable, "unknown_exercise"),
    (None, _stable, "unknown_exercise"),
    ("softmax", 3, "not_callable"),
    ("softmax", torch.ones(3), "not_callable"),
    ("softmax", lambda: 1, "raised"),                    # wrong arity
    ("softmax", lambda x, dim=-1: np.float64(1.0), "wrong_type"),
    ("online_softmax_stats", lambda blocks: len(blocks), "raised"),   # an iterator has no len
])
def test_check_never_raises(exercise_id, fn, mistake):
    result = exercises.check(exercise_id, fn)
    assert not result.passed and result.mistake == mistake
    assert isinstance(repr(result), str) and isinstance(result._repr_html_(), str)


def test_unknown_id_suggests_the_close_one():
    result = exercises.check("softmx", _stable)
    assert "Did you mean 'softmax'" in result.message      # the closest id comes first


def test_system_exit_in_submission_is_caught():
    def exits(x, dim=-1):
        raise SystemExit(3)

    assert exercises.check("softmax", exits).mistake == "raised"


def test_unknown_hint_and_solution_do_not_raise():
    assert "no exercise" in exercises.hint("nope")
    assert "no exercise" in exercises.solution("nope")


def test_time_limit_never_leaves_a_half_imported_module(tmp_path, monkeypatch):
    """The learner's code runs in a worker process: a time-out there kills the worker, and the
    learner's session never sees the import at all (no half-initialised module)."""
    (tmp_path / "course_lib_slow_module.py").write_text(
        "import time\nt0 = time.time()\nwhile time.time() - t0 < 0.8:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def importer(x, dim=-1):
        import course_lib_slow_module  # noqa: F401
        while True:
            pass

    result = exercises.check("softmax", importer, timeout=0.2)
    assert result.mistake == "timeout"
    assert "course_lib_slow_module" not in sys.modules
