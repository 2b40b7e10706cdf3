"""The one generic engine: runs any :class:`~._spec.Exercise` against a learner's function.

For each generated case: compute the oracle's answer, call the learner under the sandbox
(time limit, forbidden calls, N×N watch, captured output), check inputs are unmodified, compare.
On failure, recognise the misconception by comparing the learner's outputs with each declared
mistake's outputs on the same inputs.
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ._compare import Problem, compare, same_output
from ._describe import describe_case
from ._generic import explain_form, explain_raised, explain_values
from ._isolation import (
    CourseGuard,
    FileSource,
    Launcher,
    Prepared,
    fork_available,
    run_bare,
    run_in_process,
    run_isolated,
)
from ._policy import REPORTING_EXIT
from ._probes import Fitted, explain
from ._result import CheckResult
from ._sandbox import CallOutcome, raised_as_placeholder
from ._seeding import case_generator
from ._spec import Case, Exercise, Mistake, fresh_args

#: Mistake ids for problems that are not an exercise's declared misconception.
GENERIC_MISTAKES = {
    "none": "returned_none", "numpy": "returned_numpy", "type": "wrong_type",
    "length": "wrong_type", "shape": "wrong_shape", "dtype": "wrong_dtype", "nan": "nan",
    "inf": "inf", "values": "wrong_values",
}


@dataclass
class _Run:
    case: Case
    outcome: CallOutcome
    problem: Problem | None
    expected: Any = None
    #: ``(seed, case index)`` when the caller chose the seed: the case can recur in another check.
    key: tuple[int, int] | None = None


def _raised_as_placeholder(exc: BaseException) -> bool:
    """True for the learner's own ``raise NotImplementedError`` (not one from torch)."""
    return raised_as_placeholder(exc)


def not_attempted(ex: Exercise) -> CheckResult:
    return CheckResult(
        exercise=ex.id, passed=False, status="not_attempted", mistake="not_attempted",
        cases_total=0,
        message=(f"Replace the `...` in `{ex.function_name}` with your code, then run the check "
                 f"again. Stuck? exercises.hint(\"{ex.id}\") gives a first hint."),
    )


def _fmt_seconds(t: float) -> str:
    return f"{t:g} s"


def _ended_message(how: str, where: str) -> tuple[str, str]:
    """(mistake id, message) for a worker process that died while running the learner's code."""
    import signal as _signal

    kind, _, num = how.partition(":")
    if how == f"exit:{REPORTING_EXIT}":
        return "tampering", (
            f"Code of yours ran while the check was reporting on {where}: your code (a file's "
            "top level, or your function) replaced a function of torch's or of the checker's "
            "with its own. The check stopped there; an exercise function must only compute "
            "its result.")
    if kind == "exit":
        return "process_exit", (
            f"Your function ended the Python process (exit status {num}) on {where}: an "
            "os._exit(...) call? The check ran it in a separate process, so your session is "
            "fine; an exercise function must return its result instead.")
    if kind == "signal" and num.isdigit():
        sig = int(num)
        if sig == _signal.SIGKILL:
            return "memory_limit", (
                f"Your function was stopped by the system on {where}, most likely for using too "
                "much memory (a huge tensor?). The check ran it in a separate process, so your "
                "session is fine.")
        try:
            name = _signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        what = {"SIGSEGV": "a segmentation fault", "SIGBUS": "a bus error",
                "SIGABRT": "an abort", "SIGFPE": "a floating-point exception",
                "SIGILL": "an illegal instruction"}.get(name, name)
        return "crashed", (
            f"Your function crashed the Python process ({what}, {name}) on {where}: native code "
            "(ctypes?) or an interpreter bug. The check ran it in a separate process, so your "
            "session is fine.")
    return "crashed", (f"Your function ended the check's worker process on {where} ({how}). "
                       "The check ran it in a separate process, so your session is fine.")


def _load_failed(ex: Exercise, prepared: Prepared, timeout: float) -> CheckResult | None:
    out = prepared.outcome
    refusal = _refusal(out) if out is not None else None
    if refusal is not None:
        mistake, what = refusal
        return CheckResult(
            exercise=ex.id, passed=False, status="failed", mistake=mistake,
            message=(f"Loading your file ran code at its top level that {what}. The check "
                     "watches a file's top level like your function: "
                     + _REFUSAL_ADVICE[mistake]))
    if prepared.load_error is not None:
        message = prepared.load_error
    elif out is not None and out.timed_out:
        message = (f"loading your file did not finish within {_fmt_seconds(timeout)}, so the "
                   "check stopped it. An endless loop at the top level of the file? (Code outside "
                   "functions runs when the file is loaded; put experiments under "
                   "`if __name__ == \"__main__\":`.)")
    elif out is not None and out.ended == f"exit:{REPORTING_EXIT}":
        return CheckResult(exercise=ex.id, passed=False, status="failed", mistake="tampering",
                           message=_ended_message(out.ended, "loading your file")[1])
    elif out is not None and out.ended is not None:
        message = ("loading your file ended the Python process "
                   f"({out.ended.replace(':', ' ')}): code at the top level of the file calls "
                   "os._exit or crashes.")
    else:
        return None
    return CheckResult(exercise=ex.id, passed=False, status="error", mistake="load_error",
                       message=message)


#: What to do instead, by the kind of refusal (a file's top level, or a call).
_REFUSAL_ADVICE = {
    "course_call": "build it from torch operations; the course's helpers are for the "
                   "chapters' experiments.",
    "tampering": "the check uses it to watch your code, so it may not be switched off or "
                 "replaced.",
    "forbidden_call": "this exercise asks you to build it yourself from basic operations "
                      "(matmul, exp, max, sum, masked_fill, ...).",
    "worker_policy": "a check runs your code on its own: no threads, no other processes or "
                     "programs, no sockets, no native code (ctypes, cffi). Compute the answer "
                     "in the function itself, with torch.",
}


def _refusal(out: CallOutcome) -> tuple[str, str] | None:
    """``(mistake id, what the code did)`` when the watch or the policy refused something."""
    if out.course_call is not None:
        return "course_call", f"calls `{out.course_call}`, the course's own answer"
    if out.tamper:
        return "tampering", f"calls {out.tamper}"
    if out.policy is not None:
        return "worker_policy", out.policy
    if out.forbidden is not None:
        return "forbidden_call", f"calls {out.forbidden}"
    return None


def run_check(ex: Exercise, fn: Callable[..., Any] | FileSource, *, timeout: float | None = None,
              seed: int | None = None, isolate: bool = True,
              refuse_course: bool = True, watch: bool = True,
              launcher: Launcher | None = None) -> CheckResult:
    """Check ``fn`` against ``ex``; may raise only on a bug in the declaration itself.

    ``isolate``: run the learner's code in a forked worker (see ``_isolation``); ``False`` runs
    it in this process (the course's own tests and benchmarks: faster, not safe). ``refuse_course``:
    refuse calls into course_lib's code (``False`` for the course's own solutions and mistakes).
    ``fn`` may be a :class:`FileSource` (the command line: the worker loads the file, under the
    same time limit). ``watch=False`` (with ``isolate=False``): call ``fn`` directly, with no time
    limit or watch at all (the statistical tests of the course's own solutions and mistakes).
    ``launcher``: how the worker starts (default: forked; grading starts it in an OS sandbox,
    where the cases, the oracle and the seed stay in this process).
    """
    with session_state_kept():
        return _run_check(ex, fn, timeout=timeout, seed=seed, isolate=isolate,
                          refuse_course=refuse_course, watch=watch, launcher=launcher)


@contextlib.contextmanager
def session_state_kept() -> Iterator[None]:
    """Whatever a check computes in this process (cases, the oracle's answers, the mistakes'
    outputs; the course's nn modules draw their weights from the global generator), the
    learner's session finds its random generators, default dtype and grad mode as they were."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            torch.set_default_dtype(dtype)
            torch.set_grad_enabled(grad)


def _run_check(ex: Exercise, fn: Callable[..., Any] | FileSource, *, timeout: float | None,
               seed: int | None, isolate: bool, refuse_course: bool,
               watch: bool, launcher: Launcher | None = None) -> CheckResult:
    chosen = seed is not None
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    timeout = ex.time_limit if timeout is None else timeout
    made: list[_Seeded] = []

    def cases() -> list[Case]:
        """Made when first asked for: after the worker has loaded the learner's file."""
        if not made:
            made.append(_seeded(ex, seed) if chosen else _Seeded(ex, seed))
        return made[0].cases

    tol = ex.tolerance
    guard = CourseGuard(ex.allowed_course_calls) if refuse_course else None
    if not isolate and not watch:
        stream = run_bare(fn, cases, ex.params)
    elif isolate and (fork_available() or launcher is not None):
        stream = run_isolated(fn, cases, ex.params, forbidden=ex.forbidden, guard=guard,
                              timeout=timeout, extension=ex.extension, forget=forget_kept,
                              launcher=launcher)
    else:
        stream = run_in_process(fn, cases, ex.params, forbidden=ex.forbidden, guard=guard,
                                timeout=timeout, extension=ex.extension)
    with contextlib.closing(stream):
        prepared = next(stream)
        failed = _load_failed(ex, prepared, timeout)
        if failed is not None:
            return failed
        if prepared.untouched:
            return not_attempted(ex)
        cases()
        return _run_cases(ex, made[0], stream, tol, timeout, seed if chosen else None)


def forget_kept() -> None:
    """Drop the kept cases and answers of chosen seeds (in a check's worker, before the
    learner's file loads: it finds none to copy)."""
    _SEEDED.clear()
    _SEEDED_BYTES[0] = 0
    _MISTAKE_OUTPUTS.clear()
    _MISTAKE_OUTPUTS_BYTES[0] = 0


class _Seeded:
    """An exercise's cases for one seed, and the oracle's answers to them (each computed when
    first needed, then kept)."""

    def __init__(self, ex: Exercise, seed: int) -> None:
        self.ex = ex
        self.cases: list[Case] = ex.cases(case_generator(seed))   # every bit of a 62-bit seed
        self._answers: dict[int, Any] = {}
        self.nbytes = _nbytes([c.args for c in self.cases])
        self.kept = False       # counted in _SEEDED_BYTES

    def expected(self, index: int) -> Any:
        if index not in self._answers:
            answer = self.ex.oracle(*fresh_args(self.cases[index].args)[0])
            self._answers[index] = answer
            size = _nbytes(answer)
            self.nbytes += size
            if self.kept:
                _SEEDED_BYTES[0] += size
        return self._answers[index]


#: The cases and answers of chosen seeds, most recent last. The cases are a function of the
#: exercise and the seed, so checks with one seed share them: a class graded with one seed, the
#: statistical tests (every mistake of an exercise checked on each seed), and the kept mistake
#: outputs below then recognise their cases by identity. A random seed (a learner's check) never
#: recurs: nothing is kept for it.
_SEEDED: OrderedDict[tuple[int, int], _Seeded] = OrderedDict()
_SEEDED_BYTES = [0]
SEEDED_LIMIT = 64 * 2 ** 20     # bytes of tensors kept (the entry in use is always kept)


def _seeded(ex: Exercise, seed: int) -> _Seeded:
    key = (id(ex), seed)
    kept = _SEEDED.get(key)
    if kept is not None and kept.ex is ex:   # an entry holds ``ex``: its id is not reused
        _SEEDED.move_to_end(key)
    else:
        if kept is not None:
            kept.kept = False
            _SEEDED_BYTES[0] -= kept.nbytes
        kept = _SEEDED[key] = _Seeded(ex, seed)
        kept.kept = True
        _SEEDED_BYTES[0] += kept.nbytes
    while len(_SEEDED) > 1 and _SEEDED_BYTES[0] > SEEDED_LIMIT:
        _, gone = _SEEDED.popitem(last=False)
        gone.kept = False
        _SEEDED_BYTES[0] -= gone.nbytes
    return kept


def _modified_inputs(ex: Exercise, case: Case, out: CallOutcome) -> list[str]:
    _, watch = fresh_args(case.args, ex.params)
    after = out.inputs_after
    modified = []
    for i, (name, _, orig) in enumerate(watch):
        if name.split("[", 1)[0] in ex.inputs_updated:   # a running result, updated in place
            continue
        copy = after[i] if i < len(after) else None
        if not isinstance(copy, torch.Tensor) or copy.shape != orig.shape \
                or copy.dtype != orig.dtype or not torch.equal(copy.nan_to_num(),
                                                               orig.nan_to_num()):
            modified.append(name)
    return modified


def _run_cases(ex: Exercise, seeded: _Seeded, stream: Any, tol: Any,
               timeout: float, seed: int | None) -> CheckResult:
    runs: list[_Run] = []
    printed = False
    cases = seeded.cases
    for index, (case, out) in enumerate(zip(cases, stream, strict=False)):
        expected = seeded.expected(index)
        printed = printed or bool(out.printed.strip())
        where = describe_case(ex.params, case)
        if out.timed_out:
            return _fail(ex, cases, runs, printed, "timeout", case,
                         f"Your function did not finish within {_fmt_seconds(timeout)} on {where}, "
                         "so the check stopped it. "
                         + (ex.time_limit_note or "An endless loop? (a `while` whose condition "
                            "never becomes False, or a loop over an iterator that restarts?)"))
        if out.ended is not None:
            mistake, message = _ended_message(out.ended, where)
            return _fail(ex, cases, runs, printed, mistake, case, message)
        if out.course_call is not None:
            return _fail(ex, cases, runs, printed, "course_call", case,
                         f"`{out.course_call}` is the course's own answer: write it yourself "
                         f"(your function called it on {where}). Build it from torch "
                         "operations; the course's helpers are for the chapters' experiments.")
        if out.tamper:
            return _fail(ex, cases, runs, printed, "tampering", case,
                         f"Your function called {out.tamper} ({where}): the check uses "
                         "it to watch your code, so it may not be switched off or replaced.")
        if out.policy is not None:
            return _fail(ex, cases, runs, printed, "worker_policy", case,
                         f"Your function {out.policy} ({where}). A check runs your code on "
                         "its own: no threads, no other processes or programs, no sockets, no "
                         "native code (ctypes, cffi). Compute the answer in the function "
                         "itself, with torch.")
        if out.forbidden is not None:
            return _fail(ex, cases, runs, printed, "forbidden_call", case,
                         f"Your function calls {out.forbidden} ({where}). This exercise asks you "
                         "to build it yourself from basic operations (matmul, exp, max, sum, "
                         "masked_fill, ...).")
        if out.placeholder:
            res = not_attempted(ex)
            res.message = ("Your function raises NotImplementedError: replace that line with "
                           "your code, then run the check again. Stuck? "
                           f"exercises.hint(\"{ex.id}\") gives a first hint.")
            return res
        if out.memory:
            return _fail(ex, cases, runs, printed, "memory_limit", case,
                         f"Your function ran out of memory on {where} (it asked for more than "
                         "the check allows: a huge tensor, or one that grows in a loop?). The "
                         "check ran it in a separate process, so your session is fine."
                         + (f"\n{out.traceback_text}" if out.traceback_text else ""))
        if out.left_torch:
            return _fail(ex, cases, runs, printed, "nxn_tensor", case,
                         f"Your function turned a tensor into numpy (or a Python list) on "
                         f"{where}. This case is about memory (no N×N matrix, N="
                         f"{case.max_square}), which the check follows in torch only: stay "
                         "in torch and work block by block.")
        if out.error_type:
            problem = Problem("raised", f"your function raised an error:\n{out.traceback_text}")
        elif out.square is not None:
            shape = "(" + ", ".join(map(str, out.square)) + ")"
            return _fail(ex, cases, runs, printed, "nxn_tensor", case,
                         f"Your function created a tensor of shape {shape} on {where}: that is an "
                         f"N×N (N={case.max_square}) matrix, or as many elements as one in "
                         "another shape. Work block by block so that no tensor is larger than "
                         "(block_size × N): that is the whole point of this algorithm.")
        else:
            modified = _modified_inputs(ex, case, out)
            if modified:
                return _fail(ex, cases, runs, printed, "modified_input", case,
                             f"Your function modified its input `{modified[0]}` in place "
                             f"({where}). Use out-of-place operations instead (x = x - m rather "
                             "than x -= m, masked_fill rather than masked_fill_).")
            if out.extension is not None:
                mistake, message = out.extension
                return _fail(ex, cases, runs, printed, mistake, case,
                             f"{message} (on {where})")
            try:
                magnitude = ex.magnitude(*fresh_args(case.args)[0]) if ex.magnitude else None
                problem = compare(expected, out.value, tol, names=ex.output_names,
                                  magnitude=magnitude)
            except Exception as e:  # an exotic return value (sparse, complex, a subclass...)
                problem = Problem("type", "your output could not be compared with the right "
                                          f"answer ({type(e).__name__}: "
                                          f"{str(e).splitlines()[0][:200] if str(e) else ''}).")
        runs.append(_Run(case, out, problem, expected,
                         None if seed is None else (seed, index)))
    if len(runs) < len(cases):   # the stream ended early: the worker failed to report
        raise RuntimeError("the check's worker process stopped reporting")
    failures = [r for r in runs if r.problem is not None]
    if not failures:
        names = "; ".join(c.name for c in cases)
        msg = f"All {len(cases)} cases passed: {names}."
        if printed:
            msg += _PRINT_NOTE
        return CheckResult(exercise=ex.id, passed=True, status="passed", message=msg,
                           cases_run=len(cases), cases_total=len(cases), printed=printed)
    return _diagnose(ex, cases, runs, failures, printed)


_PRINT_NOTE = ("\nNote: your function printed output during the check (hidden here); "
               "remove the print calls when you are done.")


def _fail(ex: Exercise, cases: list[Case], runs: list[_Run], printed: bool, mistake: str,
          case: Case, message: str, details: str = "") -> CheckResult:
    passed = sum(1 for r in runs if r.problem is None)
    msg = message + f"\n{passed} of {len(cases)} cases passed."
    if printed:
        msg += _PRINT_NOTE
    return CheckResult(exercise=ex.id, passed=False, status="failed", mistake=mistake,
                       message=msg, cases_run=len(runs) + 1, cases_total=len(cases),
                       failed_case=case.name, details=details, printed=printed)


def _agrees(learner: Any, mistake: Any, tol: Any, m: Mistake | None = None) -> bool:
    try:
        if m is not None and m.tolerance is not None:
            return same_output(learner, mistake, m.tolerance, slack=1.0)
        return same_output(learner, mistake, tol)
    except Exception:
        return False


def _compute_mistake_output(m: Mistake, case: Case) -> tuple[bool, Any]:
    try:
        return True, m.fn(*fresh_args(case.args)[0])
    except Exception as e:
        return False, type(e).__name__


#: Declared mistakes' outputs on cases of a chosen seed, most recent last. The cases are a function
#: of the exercise and the seed, and a mistake of its inputs, so checks with one seed share them:
#: a class graded with one seed, and the statistical tests (every mistake of an exercise checked
#: on each seed). A random seed (a learner's check) never recurs: nothing is kept for it.
_MISTAKE_OUTPUTS: OrderedDict[tuple[int, int, int, int], tuple[Any, ...]] = OrderedDict()
_MISTAKE_OUTPUTS_BYTES = [0]
MISTAKE_OUTPUTS_LIMIT = 64 * 2 ** 20     # bytes of tensors kept


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, tuple | list):
        return sum(_nbytes(v) for v in value)
    return 0


def _same_args(a: Any, b: Any) -> bool:
    """Whether two cases' arguments are equal (tensors: shape, dtype and values, NaN included)."""
    if a is b:   # the same seed's kept cases (see _SEEDED)
        return True
    try:
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                    and a.shape == b.shape and a.dtype == b.dtype
                    and torch.equal(a.nan_to_num(), b.nan_to_num())
                    and torch.equal(a.isnan(), b.isnan()))
        if isinstance(a, tuple | list):
            return (type(a) is type(b) and len(a) == len(b)
                    and all(_same_args(x, y) for x, y in zip(a, b, strict=True)))
        return type(a) is type(b) and bool(a == b)
    except Exception:   # not comparable (a sparse tensor, an exotic object): not the same
        return False


def _mistake_output(ex: Exercise, m: Mistake, r: _Run) -> tuple[bool, Any]:
    """``m``'s output on ``r``'s case (``(False, exception name)`` if it raises), computed once
    per (exercise, mistake, seed, case). A kept output is used only for the very same exercise,
    mistake and case arguments (in case a case generator were not a function of the seed)."""
    if r.key is None:
        return _compute_mistake_output(m, r.case)
    # An entry holds ``ex`` and ``m`` themselves, so their ids cannot be reused while it is kept:
    # a key that matches names the very same exercise and mistake.
    key = (id(ex), id(m), *r.key)
    kept = _MISTAKE_OUTPUTS.get(key)
    if kept is not None and _same_args(kept[2], r.case.args):
        _MISTAKE_OUTPUTS.move_to_end(key)
        return kept[3]
    output = _compute_mistake_output(m, r.case)
    size = _nbytes(output[1]) + _nbytes(r.case.args)
    if size <= MISTAKE_OUTPUTS_LIMIT // 8:
        if kept is not None:
            _MISTAKE_OUTPUTS_BYTES[0] -= kept[4]
        _MISTAKE_OUTPUTS[key] = (ex, m, r.case.args, output, size)
        _MISTAKE_OUTPUTS_BYTES[0] += size
        while _MISTAKE_OUTPUTS_BYTES[0] > MISTAKE_OUTPUTS_LIMIT:
            _MISTAKE_OUTPUTS_BYTES[0] -= _MISTAKE_OUTPUTS.popitem(last=False)[1][4]
    return output


def _raises_alike(ex: Exercise, m: Mistake, runs: list[_Run]) -> bool:
    """Whether mistake ``m`` raises the learner's exception type on every run where it raised."""
    raised = [r for r in runs if r.outcome.error_type]
    return bool(raised) and all(_mistake_output(ex, m, r) == (False, r.outcome.error_type)
                                for r in raised)


#: Problems about the form of the output: a mistake explains one only if it has the same problem.
_STRUCTURAL = ("none", "numpy", "type", "length", "shape", "dtype")


def _explains(ex: Exercise, m: Mistake, r: _Run) -> bool:
    """Whether mistake ``m`` reproduces the learner's output on run ``r`` (form and values),
    being itself wrong there: a mistake whose output is right on this case (``no_max_shift`` on
    ordinary rows) explains nothing about it."""
    produced, value = _mistake_output(ex, m, r)
    if not produced or not _agrees(r.outcome.value, value, ex.tolerance, m):
        return False
    # Right on this case means within a tenth of the correctness tolerance (round-off, not a
    # mistake). A tenth and not the tolerance itself: a mistake whose error sits near the
    # tolerance (float16 accumulation in a Triton kernel) may pass a case by a hair that the
    # learner's version of it fails by a hair; the simulation is still what went wrong.
    def tenth(dtype: torch.dtype) -> tuple[float, float]:
        atol, rtol = ex.tolerance(dtype)
        return atol / 10, rtol / 10
    try:
        args = fresh_args(r.case.args)[0]
        magnitude = ex.magnitude(*args) if ex.magnitude else None
        if compare(r.expected, value, tenth, names=ex.output_names,
                   magnitude=magnitude) is None:
            return False
    except Exception:
        return False
    if r.problem is not None and r.problem.kind in _STRUCTURAL:
        try:   # same_output ignores dtypes: the mistake must be wrong in the same way
            own = compare(r.expected, value, ex.tolerance, names=ex.output_names)
        except Exception:
            return False
        return own is not None and own.kind == r.problem.kind
    return True


def _recognise(ex: Exercise, runs: list[_Run]) -> Mistake | None:
    """The declared mistake agreeing with every wrong output (and most right ones)."""
    with_output = [r for r in runs if not r.outcome.error_type]
    wrong = [r for r in with_output if r.problem is not None]
    if not wrong:
        return None
    best, best_score = None, -1
    for m in ex.mistakes:
        if not all(_explains(ex, m, r) for r in wrong):
            continue
        score = 0
        for r in with_output:
            if r.problem is None:
                produced, value = _mistake_output(ex, m, r)
                score += int(produced and _agrees(r.outcome.value, value, ex.tolerance, m))
        if score > best_score:
            best, best_score = m, score
    return best


def _fit(ex: Exercise, runs: list[_Run], first: _Run) -> Fitted | None:
    """A hypothesis fitted to the failing outputs when no declared mistake reproduces them: the
    exercise's own probes, then those that hold for every exercise (``_generic.py``)."""
    def fresh(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return fresh_args(args)[0]
    assert first.problem is not None
    try:
        if first.problem.kind in ("values", "nan", "inf"):
            return ((explain(ex.probes, runs, ex.tolerance, fresh) if ex.probes else None)
                    or explain_values(ex, runs, ex.tolerance, fresh))
        if first.problem.kind in ("shape", "dtype"):
            return explain_form(ex, runs, ex.tolerance)
        if first.problem.kind == "raised":
            return explain_raised(ex, runs)
    except Exception:       # a diagnosis is a bonus: never let it break the check
        return None
    return None


def _diagnose(ex: Exercise, cases: list[Case], runs: list[_Run], failures: list[_Run],
              printed: bool) -> CheckResult:
    # The first real problem: an exception or a wrong form (type, shape, dtype) before values.
    first = next((r for r in failures if r.problem is not None
                  and (r.problem.kind == "raised" or r.problem.kind in _STRUCTURAL)),
                 failures[0])
    mistake = _recognise(ex, runs)
    where = describe_case(ex.params, first.case)
    assert first.problem is not None
    lines = []
    if mistake is None:
        fitted = _fit(ex, runs, first)
        if fitted is not None:
            n_ok = sum(1 for r in runs if r.problem is None)
            shown = ("." if first.problem.kind in ("values", "nan", "inf")
                     else f": {first.problem.text}")
            lines = [fitted.message, f"First failing {where}{shown}",
                     f"{n_ok} of {len(cases)} cases passed."]
            if printed:
                lines.append(_PRINT_NOTE.strip())
            return CheckResult(exercise=ex.id, passed=False, status="failed",
                               mistake=fitted.id, message="\n".join(lines),
                               cases_run=len(runs), cases_total=len(cases),
                               failed_case=first.case.name, details=first.problem.where,
                               printed=printed)
    if mistake is not None and (first.problem.kind != "raised" or _raises_alike(ex, mistake, runs)):
        lines.append(mistake.message)
        if first.problem.kind != "values":
            lines.append(f"First failing {where}: {first.problem.text}")
        else:
            lines.append(f"First failing {where}.")
        mistake_id = mistake.reported_id
        details = first.problem.where
    else:
        lines.append(f"First failing {where}: {first.problem.text}")
        mistake_id = "raised" if first.problem.kind == "raised" \
            else GENERIC_MISTAKES.get(first.problem.kind, "wrong_values")
        details = first.problem.where
        if first.problem.kind in ("values", "nan", "inf") and details:
            lines[-1] += f" ({details})"
        if mistake is not None:
            lines.append(f"Once that is fixed, another case points at a known mistake: "
                         f"{mistake.message}")
    n_ok = sum(1 for r in runs if r.problem is None)
    lines.append(f"{n_ok} of {len(cases)} cases passed.")
    if printed:
        lines.append(_PRINT_NOTE.strip())
    return CheckResult(exercise=ex.id, passed=False, status="failed", mistake=mistake_id,
                       message="\n".join(lines), cases_run=len(runs), cases_total=len(cases),
                       failed_case=first.case.name, details=details, printed=printed)
