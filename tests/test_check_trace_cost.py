"""The watch's per-call work raises no audit event (issue 50).

A check traces every Python call of the learner's code (``_sandbox.run_call``'s global trace:
the time limit, the course guard, the forbidden functions). Its cache of code objects it has
judged was keyed by ``id(code)``, and ``id()`` raises the audit event ``builtins.id``: in a check
worker that is one call of the policy's audit hook (``_policy.install``) per call of the
learner's code. A Triton kernel under the interpreter makes about 1.4 million calls per check;
the hook's share was about a sixth of the worker's time. The trace now keys by the pointer hash
(``object.__hash__``, no event), and the hook returns at once on events it does not judge.

Counted in a fresh interpreter: an audit hook added there cannot be removed again.
"""

from __future__ import annotations

import subprocess
import sys

CALLS = 5000

PROGRAM = f"""
import sys
from course_lib.toolkit.checking._sandbox import run_call

def step(i):
    return i + 1

def learner(n):
    total = 0
    for i in range(n):
        total = step(total)
    return total

seen = {{"builtins.id": 0}}
watching = [False]

def hook(event, args):
    if watching[0] and event in seen:
        seen[event] += 1

sys.addaudithook(hook)
watching[0] = True
outcome = run_call(learner, ({CALLS},), timeout=60.0, threaded=False)
watching[0] = False
assert outcome.error is None, outcome.error
assert outcome.value == {CALLS}, outcome.value
print(seen["builtins.id"])
"""


def test_tracing_the_learners_calls_raises_no_audit_event_per_call():
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    events = int(done.stdout.split()[-1])
    # the old trace raised one per call of the learner's code: CALLS + 1 here
    assert events < 50, f"{events} builtins.id events while {CALLS} calls were traced"
