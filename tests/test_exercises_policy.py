"""The worker's policy (``checking/_policy.py``) against the red team's routes to a green tick.

Each test is one attack of issue 39 that passed before: work done in a thread, a file's top level
running before the watch, torch kernels outside the enumerated names, torch's own switches for
its modes, an N×N matrix hidden in numpy or a flat buffer, the whole exercise done by a library
module, a forked child outliving its check, and a check that moved the session's random numbers.
"""

from __future__ import annotations

import math
import os
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from course_lib import exercises
from course_lib.toolkit.checking import _isolation

pytestmark = pytest.mark.skipif(not _isolation.fork_available(), reason="needs os.fork (Linux)")


@pytest.fixture(autouse=True)
def _progress_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "progress.sqlite3"))


def _check(exercise_id, fn):
    return exercises.check(exercise_id, fn, record=False)


def _sdpa(q, k, v, *rest):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def _in_thread(work):
    """A submission that hands ``work`` to a thread: no watch follows a new thread."""
    def submission(*args):
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("out", work(*args)))
        t.start()
        t.join()
        return box["out"]
    return submission


def _split_heads_solution(x, num_heads):
    return sys.modules["course_lib.chapters.ch04_multi_head.exercises"].split_heads(x, num_heads)


def _softcap_helper(q, k, v, cap):
    from course_lib.chapters.ch11_flex_attention import helpers

    return helpers.softcap_attention(q, k, v, cap)


def _autograd_backward(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    s = leaves[0] @ leaves[1].transpose(-2, -1) / math.sqrt(q.shape[-1])
    p = torch.exp(s - s.amax(-1, keepdim=True))
    o = (p / p.sum(-1, keepdim=True)) @ leaves[2]
    return torch.autograd.grad(o, leaves, grad_out)


THREADED = [
    ("softmax", lambda x, dim=-1: torch.softmax(x, dim)),
    ("split_heads", _split_heads_solution),
    ("flash_attention", _sdpa),
    ("flash_backward", _autograd_backward),
    ("softcap_attention", _softcap_helper),
    ("triton_matmul", lambda a, b: a @ b),
    ("triton_flash_forward", lambda q, k, v, is_causal=False: _sdpa(q, k, v)),
]


@pytest.mark.parametrize("exercise_id, work", THREADED, ids=[e for e, _ in THREADED])
def test_work_handed_to_a_thread_is_refused(exercise_id, work):
    result = _check(exercise_id, _in_thread(work))
    assert not result.passed
    assert result.mistake == "worker_policy" and "starts a thread" in result.message


def _stable(x, dim=-1):
    z = x - x.amax(dim, keepdim=True)
    return z.exp() / z.exp().sum(dim, keepdim=True)


def _forks(x, dim=-1):
    pid = os.fork()
    if pid == 0:                      # the child would outlive the check
        import time
        time.sleep(60)
        os._exit(0)
    return _stable(x, dim)


def _starts_a_program(x, dim=-1):
    import subprocess

    subprocess.Popen(["sleep", "60"])
    return _stable(x, dim)


def _opens_a_socket(x, dim=-1):
    import socket

    socket.socket().close()
    return _stable(x, dim)


def _loads_native_code(x, dim=-1):
    import ctypes

    ctypes.CDLL(None).getpid()
    return _stable(x, dim)


def _reads_raw_memory(x, dim=-1):
    import ctypes

    ctypes.c_int.from_address(id(x))
    return _stable(x, dim)


def _system(x, dim=-1):
    os.system("true")
    return _stable(x, dim)


def _spawns(x, dim=-1):
    os.posix_spawn("/bin/true", ["true"], dict(os.environ))
    return _stable(x, dim)


def _imports_cffi(x, dim=-1):
    sys.modules.pop("cffi", None)
    try:
        import cffi  # noqa: F401
    except ImportError:
        pass
    return _stable(x, dim)


def _swallows_the_refusal(x, dim=-1):
    try:
        threading.Thread(target=lambda: None).start()
    except BaseException:
        pass
    return _stable(x, dim)


ESCAPES = [(_forks, "forks a process"), (_starts_a_program, "starts a program"),
           (_opens_a_socket, "opens a socket"), (_loads_native_code, "loads a native library"),
           (_reads_raw_memory, "reads raw memory"), (_system, "starts a program"),
           (_spawns, "starts a program"), (_swallows_the_refusal, "starts a thread")]


@pytest.mark.parametrize("fn, what", ESCAPES, ids=[f.__name__ for f, _ in ESCAPES])
def test_each_escape_of_the_policy_is_refused(fn, what):
    """Each audit event of the policy (and the thread patch), triggered for real."""
    result = _check("softmax", fn)
    assert result.mistake == "worker_policy", result
    assert what in result.message


def test_cffi_is_not_importable_in_the_worker():
    try:
        import cffi  # noqa: F401
    except ImportError:
        pytest.skip("cffi is not installed here: the import refusal has nothing to refuse")
    result = _check("softmax", _imports_cffi)
    assert result.mistake == "worker_policy" and "cffi" in result.message


def test_the_audit_events_of_the_policy_exist_in_this_python():
    """Every event the policy refuses is raised by this interpreter (seen by a hook in a child
    process, so that nothing here is started for real): a renamed event would refuse nothing."""
    import subprocess

    code = textwrap.dedent("""
        import os, sys, socket, ctypes, subprocess, signal
        seen = set()
        class Stop(Exception): pass
        def hook(event, args):
            if event in WANTED:
                seen.add(event)
                raise Stop
        WANTED = set(sys.argv[1:])
        sys.addaudithook(hook)
        tries = [lambda: os.fork(), lambda: subprocess.Popen(["true"]), lambda: os.system("true"),
                 lambda: os.execv("/bin/true", ["true"]),
                 lambda: os.posix_spawn("/bin/true", ["true"], {}),
                 lambda: socket.socket(), lambda: ctypes.CDLL(None),
                 lambda: ctypes.c_int.from_address(id(seen)),
                 lambda: ctypes.string_at(id(seen), 1),
                 lambda: os.kill(1, 0), lambda: os.killpg(1, 0),
                 lambda: signal.pthread_kill(0, 0)]
        for t in tries:
            try:
                t()
            except Stop:
                pass
            except Exception:
                pass
        print(" ".join(sorted(seen)))
    """)
    wanted = ["os.fork", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
              "socket.__new__", "ctypes.dlopen", "ctypes.cdata", "ctypes.string_at",
              "os.kill", "os.killpg", "signal.pthread_kill"]
    from course_lib.toolkit.checking._policy import REFUSED_EVENTS

    assert set(wanted) <= set(REFUSED_EVENTS)
    out = subprocess.run([sys.executable, "-c", code, *wanted], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert sorted(out) == sorted(wanted)


def test_forbidden_kernels_outside_the_old_names_are_refused():
    def flash_cpu_backward(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
        o, l_, *_ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, is_causal=is_causal)
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, q, k, v, o, l_, 0.0, is_causal)

    def native_mha(q, k, v, block_size=64):
        B, H, L, E = q.shape
        return torch._native_multi_head_attention(
            q, k, v, H * E, H, torch.eye(3 * H * E, dtype=q.dtype), torch.zeros(3 * H * E,
                                                                                   dtype=q.dtype),
            torch.eye(H * E, dtype=q.dtype), torch.zeros(H * E, dtype=q.dtype))[0]

    for exercise_id, fn in (("flash_backward", flash_cpu_backward),
                            ("flash_attention", native_mha)):
        result = _check(exercise_id, fn)
        assert result.mistake == "forbidden_call", (exercise_id, result)


def test_torch_switches_for_modes_are_refused():
    def function_modes_off(x, dim=-1):
        with torch._C.DisableTorchFunction():
            return torch.softmax(x, dim)

    def dispatch_modes_off(q, k, v, block_size=64):
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    for exercise_id, fn in (("softmax", function_modes_off),
                            ("flash_attention", dispatch_modes_off)):
        result = _check(exercise_id, fn)
        assert result.mistake == "tampering", (exercise_id, result)


def test_a_refused_kernel_stays_refused_however_it_is_reached():
    """Below every mode: a boxed call of the kernel, straight from the dispatcher."""
    def boxed(x, dim=-1):
        return torch.ops.aten._softmax.default(x, dim, False)

    result = _check("softmax", boxed)
    assert result.mistake == "forbidden_call"


def _numpy_flash(q, k, v, block_size=64):
    qn, kn, vn = (t.numpy().astype(np.float64) for t in (q, k, v))
    s = qn @ np.swapaxes(kn, -1, -2) / math.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy((p / p.sum(-1, keepdims=True)) @ vn).to(q.dtype)


def _flat_flash(q, k, v, block_size=64):
    B, H, L, E = q.shape
    S = k.shape[-2]
    flat = torch.empty(B * H, L * S, dtype=q.dtype)       # the scores, one row per head
    for i in range(B * H):
        flat[i] = (q.reshape(B * H, L, E)[i] @ k.reshape(B * H, S, E)[i].T).reshape(-1)
    s = flat.view(B, H, L, S) / math.sqrt(E)
    p = torch.exp(s - s.amax(-1, keepdim=True))
    return (p / p.sum(-1, keepdim=True)) @ v


def _per_head_vector(q, k, v, block_size=64):
    B, H, L, E = q.shape
    outs = torch.empty_like(q)
    for b in range(B):
        for h in range(H):
            s = (q[b, h] @ k[b, h].T).reshape(-1) / math.sqrt(E)    # (L·S,): N² elements
            p = s.view(L, -1)
            p = torch.exp(p - p.amax(-1, keepdim=True))
            outs[b, h] = (p / p.sum(-1, keepdim=True)) @ v[b, h]
    return outs


def _asarray_flash(q, k, v, block_size=64):
    qn, kn, vn = (np.asarray(t, dtype=np.float64) for t in (q, k, v))   # via Tensor.__array__
    s = qn @ np.swapaxes(kn, -1, -2) / math.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy((p / p.sum(-1, keepdims=True)) @ vn).to(q.dtype)


@pytest.mark.parametrize("fn", [_numpy_flash, _asarray_flash, _flat_flash, _per_head_vector],
                         ids=lambda f: f.__name__)
def test_an_nxn_matrix_in_numpy_or_another_shape_is_refused(fn):
    result = _check("flash_attention", fn)
    assert result.mistake == "nxn_tensor", result


def test_numpy_backward_is_refused():
    def numpy_backward(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
        qn = q.numpy()
        return tuple(torch.from_numpy(np.zeros_like(qn)) for _ in range(3))

    result = _check("flash_backward", numpy_backward)
    assert result.mistake == "nxn_tensor", result


def test_a_library_module_doing_the_whole_exercise_is_refused():
    def with_transformer_block(x, attn, ln1, ln2, mlp):
        from course_lib.attention.multihead import TransformerBlock

        block = TransformerBlock(x.shape[-1], attn.num_heads)
        block.attn, block.ln1, block.ln2, block.mlp = attn, ln1, ln2, mlp
        L = x.shape[-2]
        return block(x, attn_mask=torch.ones(L, L, dtype=torch.bool).tril())

    def with_nn_mha(x, w_qkv, w_o, num_heads):
        D = x.shape[-1]
        mha = torch.nn.MultiheadAttention(D, num_heads, batch_first=True, bias=False,
                                          dtype=x.dtype)
        with torch.no_grad():
            mha.in_proj_weight.copy_(w_qkv.T)
            mha.out_proj.weight.copy_(w_o.T)
        return mha(x, x, x, need_weights=False)[0]

    result = _check("causal_block", with_transformer_block)
    assert result.mistake in ("forbidden_call", "course_call"), result
    assert "TransformerBlock" in result.message or "transformer block" in result.message
    result = _check("multi_head_attention", with_nn_mha)
    assert result.mistake == "forbidden_call", result


def test_the_worker_runs_in_a_process_group_of_its_own():
    """What the worker started (if anything escaped the policy) is killed with it."""
    def group(x, dim=-1):
        return torch.full_like(x, float(os.getpgrp() == os.getpid()))

    ex = exercises.get_exercise("softmax")
    cases = ex.cases(torch.Generator().manual_seed(0))[:1]
    stream = _isolation.run_isolated(group, cases, ex.params, forbidden=(), guard=None,
                                     timeout=30)
    next(stream)
    out = next(stream)
    stream.close()
    assert bool((out.value == 1).all())


# --------------------------------------------------------------------------- a file's top level


def _file(tmp_path, text):
    path = tmp_path / "submission.py"
    path.write_text(textwrap.dedent(text))
    return _isolation.FileSource(str(path), "softmax")


def test_a_files_top_level_runs_under_the_policy(tmp_path):
    source = _file(tmp_path, """
        import threading
        threading.Thread(target=print).start()
        def softmax(x, dim=-1):
            return x
    """)
    result = exercises.check("softmax", source, record=False)
    assert result.mistake == "worker_policy" and "Loading your file" in result.message


def test_a_files_top_level_may_run_a_chapters_experiments(tmp_path):
    """A graded notebook's top level holds the chapter's own cells (torch's softmax, the
    chapter's helpers): they run, as the cases do not exist in the worker yet."""
    source = _file(tmp_path, """
        import torch
        from course_lib.chapters.ch03_softmax import helpers as st
        DEMO = torch.softmax(torch.randn(3), -1)
        m, l = st.block_stats(torch.randn(6, dtype=torch.float64))
        def softmax(x, dim=-1):
            z = x - x.amax(dim, keepdim=True)
            return z.exp() / z.exp().sum(dim, keepdim=True)
    """)
    assert exercises.check("softmax", source, record=False).passed


def test_a_files_top_level_cannot_replace_the_workers_call(tmp_path):
    source = _file(tmp_path, """
        import torch
        import course_lib.toolkit.checking._isolation as iso
        import course_lib.toolkit.checking._sandbox as sb

        def fake(fn, args, **kw):
            out = kw.get("outcome") or sb.CallOutcome()
            out.value = torch.exp(args[0]) / torch.exp(args[0]).sum(-1, keepdim=True)
            return out

        iso.run_call = sb.run_call = fake
        def softmax(x, dim=-1):
            return x
    """)
    result = exercises.check("softmax", source, record=False)
    assert not result.passed and result.mistake == "wrong_values", result


def test_a_files_top_level_finds_no_cases_to_answer(tmp_path):
    """The red team's route: read the cases off the worker's stack (or the engine's kept cases
    of a chosen seed) at load time and answer them with torch. The worker receives its cases
    only after loading, and drops the session's kept ones first."""
    exercises.check("softmax", _stable, seed=5, record=False)      # kept cases for seed 5
    source = _file(tmp_path, """
        import sys
        import torch
        from course_lib.toolkit.checking import _engine
        ANSWERS = {}

        def answer(case):
            if type(case).__name__ == "Case" and case.args and torch.is_tensor(case.args[0]):
                x = case.args[0]
                dim = case.args[1] if len(case.args) > 1 else -1
                try:        # another exercise's case: not a softmax's
                    ANSWERS[(tuple(x.shape), tuple(x.flatten()[:4].tolist()))] = \
                        torch.softmax(x, dim)
                except Exception:
                    pass

        frame = sys._getframe()
        while frame is not None:
            for value in list(frame.f_locals.values()):
                for item in value if isinstance(value, list) else [value]:
                    answer(item)
                    kept = getattr(item, "cases", None)
                    for case in kept if isinstance(kept, list) else []:
                        answer(case)
            frame = frame.f_back
        for kept in list(_engine._SEEDED.values()):
            for case in kept.cases:
                answer(case)

        def softmax(x, dim=-1):
            return ANSWERS.get((tuple(x.shape), tuple(x.flatten()[:4].tolist())), x)
    """)
    for seed in (5, None):
        # The stack walk is refused (issue 52: frames lead to the worker's own state) and the
        # refusal is recorded even though nothing catches it here.
        result = exercises.check("softmax", source, seed=seed, record=False)
        assert not result.passed and result.mistake == "tampering", result
        assert "sys._getframe" in result.message, result.message
    # Without the stack walk, the engine's kept cases of a chosen seed are not in the worker.
    text = Path(source.path).read_text()
    start, end = text.index("frame = sys._getframe()"), text.index("for kept in list(")
    Path(source.path).write_text(text[:start] + text[end:])
    for seed in (5, None):
        result = exercises.check("softmax", source, seed=seed, record=False)
        assert not result.passed and result.mistake == "wrong_values", result
    # The route itself works where the cases are on the stack (here, in this frame).
    import runpy

    cases = exercises.get_exercise("softmax").cases(torch.Generator().manual_seed(5))
    module = runpy.run_path(source.path)
    assert all(torch.equal(module["softmax"](*c.args), torch.softmax(*c.args[:1], c.args[1]
                                                                     if len(c.args) > 1 else -1))
               for c in cases)


def test_a_replaced_torch_function_cannot_rewrite_the_report(tmp_path):
    source = _file(tmp_path, """
        import torch
        real = torch.save
        def save(obj, buf):
            if isinstance(obj, dict):
                obj["forbidden"] = None
            return real(obj, buf)
        torch.save = save
        def softmax(x, dim=-1):
            return torch.softmax(x, dim)
    """)
    # The worker bound torch.save before loading the file: the replacement never sees a
    # report, and the refusal of torch.softmax is reported as it happened.
    result = exercises.check("softmax", source, record=False)
    assert not result.passed and result.mistake == "forbidden_call", result


# --------------------------------------------------------------------------- the session's state


@pytest.mark.parametrize("exercise_id", [e["id"] for e in exercises.list_exercises()])
def test_a_check_leaves_the_sessions_random_numbers_alone(exercise_id):
    """After ``torch.manual_seed(0)`` the learner's next draw is the same with or without a check
    in between (the cases, the oracle and the mistakes run in this process)."""
    torch.manual_seed(0)
    expected = torch.randn(5)
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    torch.manual_seed(0)
    result = _check(exercise_id, lambda *args: args[0])
    assert result.status in ("failed", "error", "passed")
    assert torch.equal(torch.randn(5), expected)
    assert torch.get_default_dtype() == dtype and torch.is_grad_enabled() == grad


# ------------------------------------------------------ issue 52: reaching into the worker


def _forger(extra_after: bool):
    """A function that reports for the worker: one "clean" message per case, in the worker's
    own format, written with ``os.write`` and ended with ``os._exit(0)``, both bound in the
    session before the check (so the policy's replacements in the worker do not stop them).
    Only this run's nonce, which it cannot read, is missing."""
    import io
    import struct

    real_write, real_exit = os.write, os._exit
    header = struct.Struct("<Q")

    def inode(fd):
        try:
            info = os.fstat(fd)
        except OSError:
            return None
        return (info.st_dev, info.st_ino)

    # The session's own descriptors (pytest's, xdist's): not written to. The worker's pipes
    # are the ones it has beyond these.
    session = {inode(fd) for fd in range(64)} - {None}

    def forge(x, dim=-1):
        value = _stable(x, dim)
        msg = {"kind": "case", "error_type": "", "traceback": "", "placeholder": False,
               "memory": False, "forbidden": None, "course_call": None, "tamper": None,
               "policy": None, "extension": None, "square": None, "left_torch": False,
               "printed": "", "inputs": [x.clone()], "value": value}
        buf = io.BytesIO()
        torch.save(msg, buf)
        data = header.pack(len(buf.getvalue())) + buf.getvalue()
        for fd in range(3, 64):
            if inode(fd) in session or inode(fd) is None:
                continue
            try:
                for _ in range(8):
                    real_write(fd, data)
            except OSError:
                pass
        if not extra_after:
            real_exit(0)
        return value

    return forge


@pytest.mark.parametrize("extra_after", [False, True], ids=["then_exit", "then_return"])
def test_forged_reports_get_no_verdict(extra_after):
    """Issue 52, route 1: a verdict rests on reports that carry the run's nonce, exactly one per
    case, a final one, the end of the stream and the worker's normal exit; forged reports (here
    with right values) are tampering, whether the forger leaves with os._exit(0) or returns."""
    result = exercises.check("softmax", _forger(extra_after), record=False)
    assert not result.passed and result.mistake == "tampering", result
    assert "protocol" in result.message, result.message


@pytest.mark.parametrize("body, label", [
    ("import sys\nsys._getframe(1)", "sys._getframe"),
    ("import inspect\ninspect.stack()", "sys._getframe"),
    ("import traceback\nlist(traceback.walk_stack(None))", "sys._getframe"),
    ("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    e.__traceback__.tb_frame",
     ".tb_frame"),
    ("import gc\ngc.get_referrers(x)", "gc.get_referrers"),
    ("import gc\ngc.get_objects()", "gc.get_objects"),
    ("from course_lib.toolkit.checking import _policy\n"
     "_policy.refuse_kernels.__code__ = (lambda groups: 0).__code__", "__code__"),
    ("from course_lib.toolkit.checking import _isolation\n_isolation.run_call.__code__",
     "__code__ of the checker"),
    ("from course_lib.toolkit.checking import _isolation\n"
     "compile('x = 1', _isolation.__file__, 'exec')", "code made to claim"),
    ("import marshal\nmarshal.loads(marshal.dumps(1))", "marshal"),
    ("from course_lib.toolkit.checking import _isolation\n"
     "_isolation.fresh_args.__defaults__ = (None,)", "the checker's own code"),
    ("import os\nos._exit(0)", "os._exit"),
    ("import sys\nsys.setprofile(None)", "sys.setprofile"),
    ("import fcntl\nfor fd in range(3, 256):\n    try:\n        fcntl.fcntl(fd, fcntl.F_DUPFD)\n"
     "    except OSError:\n        pass", "fcntl on the checker's own report channel"),
    ("for fd in range(3, 256):\n    try:\n        open(fd, 'wb', closefd=False)\n"
     "    except OSError:\n        pass", "open() on the checker's own report channel"),
], ids=["getframe", "inspect_stack", "walk_stack", "tb_frame", "gc_referrers", "gc_objects",
        "code_swap", "read_code", "compile_as_checker", "marshal", "patch_defaults",
        "os_exit", "setprofile", "dup_report_fd", "open_report_fd"])
def test_the_primitives_of_tampering_are_refused(body, label):
    """Issue 52, routes 1 and 2: walking frames or gc into the worker, swapping or reading the
    code of its functions, making code that claims a trusted file, patching its classes and
    leaving with os._exit are refused (tampering: no points), even when caught."""
    ns: dict = {}
    exec("def attempt(x):\n" + textwrap.indent(body, "    ") + "\n", ns)

    def sneaky(x, dim=-1):
        try:
            ns["attempt"](x)
        except BaseException:
            pass
        return _stable(x, dim)

    result = exercises.check("softmax", sneaky, record=False)
    assert not result.passed and result.mistake == "tampering", result
    assert label in result.message, result.message


def test_code_swapped_at_a_files_top_level_does_not_pass_torch_softmax(tmp_path):
    """Issue 52, route 2: a file's top level swaps the code of the worker's ``run_call`` and
    ``refuse_kernels`` (relabelled as the checker's file), then answers with torch.softmax."""
    source = _file(tmp_path, """
        import torch
        from course_lib.toolkit.checking import _isolation, _policy, _sandbox

        def _free(*args, **kwargs):
            return 0

        for target in (_policy.refuse_kernels, _sandbox.run_call):
            try:
                target.__code__ = _free.__code__.replace(co_filename=_sandbox.__file__)
            except BaseException:
                pass

        def softmax(x, dim=-1):
            return torch.softmax(x, dim)
    """)
    result = exercises.check("softmax", source, record=False)
    assert not result.passed and result.mistake == "tampering", result


def test_honest_library_uses_of_frames_still_pass():
    """What the refusals leave alone: a namedtuple or a TypeVar (the standard library reads its
    caller's frame for the module name) and a formatted traceback of the learner's own error
    inside torch's code paths (the checker formats it)."""
    import collections
    import typing

    def honest(x, dim=-1):
        pair = collections.namedtuple("Pair", "a b")(1, 2)
        typing.TypeVar("T")
        return _stable(x, dim) * pair.a

    assert exercises.check("softmax", honest, record=False).passed
    result = exercises.check("softmax", lambda x, dim=-1: 1 / 0, record=False)
    assert result.mistake == "raised" and "ZeroDivisionError" in result.message
