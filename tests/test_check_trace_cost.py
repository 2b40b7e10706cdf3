"""The watch's per-call work raises no audit event (issue 50).

A check traces every Python call of the learner's code (``_sandbox.run_call``'s global trace:
the time limit, the course guard, the forbidden functions). Its cache of code objects it has
judged was keyed by ``id(code)``, and ``id()`` raises the audit event ``builtins.id``: in a check
worker that is one call of the policy's audit hook (``_policy.install``) per call of the
learner's code. A Triton kernel under the interpreter makes about 1.4 million calls per check;
the hook held about a sixth of py-spy's samples in the worker, and ``tests/test_flash_triton.py``
took 13-30% less CPU in three alternated old/new pairs (62 vs 89, 82 vs 95, 87 vs 102 s). The
trace now keys by the pointer hash (``object.__hash__``, no event), and the hook returns at once
on events it does not judge.

Counted in a forked child of the test: an audit hook cannot be removed once added.
"""

from __future__ import annotations

import os
import select
import signal

from course_lib.toolkit.checking._sandbox import run_call

CALLS = 5000


def _step(i: int) -> int:
    return i + 1


def _learner(n: int) -> int:
    total = 0
    for _ in range(n):
        total = _step(total)
    return total


def _count_id_events() -> int:
    """builtins.id events raised while run_call traces ``_learner(CALLS)`` (in a child)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read)
            seen, watching = [0], [False]

            def hook(event: str, args: tuple) -> None:
                if watching[0] and event == "builtins.id":
                    seen[0] += 1

            import sys

            sys.addaudithook(hook)
            watching[0] = True
            outcome = run_call(_learner, (CALLS,), timeout=60.0, threaded=False)
            watching[0] = False
            ok = outcome.error is None and outcome.value == CALLS
            os.write(write, f"{seen[0] if ok else -1}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    status = None
    try:
        # the child has 60 s; a child that hangs or is left behind by a failure is killed
        ready, _, _ = select.select([read], [], [], 60.0)
        text = os.read(read, 64).decode() if ready else ""
        _, status = os.waitpid(pid, 0) if ready else (pid, None)
    finally:
        os.close(read)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert status is not None, "the child did not answer in 60 s"
    assert os.waitstatus_to_exitcode(status) == 0 and text, (status, text)
    return int(text)


def test_tracing_the_learners_calls_raises_no_audit_event_per_call():
    events = _count_id_events()
    assert events >= 0, "the traced call failed in the child"
    # the old trace raised one per call of the learner's code: CALLS + 1 here
    assert events < 50, f"{events} builtins.id events while {CALLS} calls were traced"
