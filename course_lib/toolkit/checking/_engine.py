"""The one generic engine: runs any :class:`~._spec.Exercise` against a learner's function.

For each generated case: compute the oracle's answer, call the learner under the sandbox
(time limit, forbidden calls, N×N watch, captured output), check inputs are unmodified, compare.
On failure, recognise the misconception by comparing the learner's outputs with each declared
mistake's outputs on the same inputs.
"""

from __future__ import annotations

import ast
import dis
import inspect
import os
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._compare import Problem, compare, same_output
from ._describe import describe_case
from ._result import CheckResult
from ._sandbox import CallOutcome, run_call
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


def is_untouched(fn: Callable[..., Any]) -> bool:
    """True if ``fn``'s body is only a docstring, ``...``, ``pass``, ``raise NotImplementedError``
    or ``return None`` (an untouched starter)."""
    code = getattr(fn, "__code__", None)
    if code is not None and getattr(fn, "__name__", "") == "<lambda>":
        # a lambda's source line is often not parseable on its own (it sits inside a call)
        return _trivial_bytecode(code)
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
    except Exception:  # no source (exec'd code): judge by the bytecode
        return code is not None and _trivial_bytecode(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            return _trivial_expr(node.body)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = list(node.body)
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]
            return all(_trivial_stmt(s) for s in body)
    return False


def _trivial_bytecode(code) -> bool:
    """Only loads of None/Ellipsis and returns: the body is ``...``, ``pass`` or a docstring."""
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_CONST", "RETURN_CONST") and ins.argval not in (None, ...):
            return False
        if ins.opname not in ("RESUME", "NOP", "LOAD_CONST", "RETURN_VALUE", "RETURN_CONST"):
            return False
    return True


def _trivial_expr(e: ast.AST | None) -> bool:
    return e is None or (isinstance(e, ast.Constant) and e.value in (None, Ellipsis))


def _trivial_stmt(s: ast.stmt) -> bool:
    if isinstance(s, ast.Pass):
        return True
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
        return s.value.value is Ellipsis or isinstance(s.value.value, str)
    if isinstance(s, ast.Return):
        return _trivial_expr(s.value)
    if isinstance(s, ast.Raise):
        exc = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def _raised_as_placeholder(exc: BaseException) -> bool:
    """True for the learner's own ``raise NotImplementedError`` (not one from torch)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False
    line = (frames[-1].line or "").strip()
    if line:
        return line.startswith("raise NotImplementedError")
    return not str(exc).startswith("Could not run")   # no source: torch's own message differs


def not_attempted(ex: Exercise) -> CheckResult:
    return CheckResult(
        exercise=ex.id, passed=False, status="not_attempted", mistake="not_attempted",
        cases_total=0,
        message=(f"Replace the `...` in `{ex.function_name}` with your code, then run the check "
                 f"again. Stuck? exercises.hint(\"{ex.id}\") gives a first hint."),
    )


def _fmt_seconds(t: float) -> str:
    return f"{t:g} s"


def run_check(ex: Exercise, fn: Callable[..., Any], *, timeout: float = 10.0,
              seed: int | None = None) -> CheckResult:
    """Check ``fn`` against ``ex``; may raise only on a bug in the declaration itself."""
    if is_untouched(fn):
        return not_attempted(ex)
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    gen = torch.Generator().manual_seed(seed)
    cases = ex.cases(gen)
    tol = ex.tolerance
    runs: list[_Run] = []
    printed = False
    for case in cases:
        expected = ex.oracle(*fresh_args(case.args)[0])
        args, watch = fresh_args(case.args, ex.params)
        out = run_call(fn, args, timeout=timeout, forbidden=ex.forbidden,
                       max_square=case.max_square)
        printed = printed or bool(out.printed.strip())
        where = describe_case(ex.params, case)
        if out.timed_out:
            return _fail(ex, cases, runs, printed, "timeout", case,
                         f"Your function did not finish within {_fmt_seconds(timeout)} on {where}, "
                         "so the check stopped it. An endless loop? (a `while` whose condition "
                         "never becomes False, or a loop over an iterator that restarts?)")
        if out.forbidden is not None:
            return _fail(ex, cases, runs, printed, "forbidden_call", case,
                         f"Your function calls {out.forbidden} ({where}). This exercise asks you "
                         "to build it yourself from basic operations (matmul, exp, max, sum, "
                         "masked_fill, ...).")
        if isinstance(out.error, NotImplementedError) and _raised_as_placeholder(out.error):
            res = not_attempted(ex)
            res.message = ("Your function raises NotImplementedError: replace that line with "
                           "your code, then run the check again. Stuck? "
                           f"exercises.hint(\"{ex.id}\") gives a first hint.")
            return res
        if out.error is not None:
            problem = Problem("raised", f"your function raised an error:\n{out.traceback_text}")
        elif out.square is not None:
            shape = "(" + ", ".join(map(str, out.square)) + ")"
            return _fail(ex, cases, runs, printed, "nxn_tensor", case,
                         f"Your function created a tensor of shape {shape} on {where}: that is an "
                         f"N×N (N={case.max_square}) matrix. Work block by block so that no "
                         "tensor is larger than (block_size × N): that is the whole point of "
                         "this algorithm.")
        else:
            modified = [name for name, copy, orig in watch
                        if copy.shape != orig.shape or copy.dtype != orig.dtype
                        or not torch.equal(copy.nan_to_num(), orig.nan_to_num())]
            if modified:
                return _fail(ex, cases, runs, printed, "modified_input", case,
                             f"Your function modified its input `{modified[0]}` in place "
                             f"({where}). Use out-of-place operations instead (x = x - m rather "
                             "than x -= m, masked_fill rather than masked_fill_).")
            try:
                problem = compare(expected, out.value, tol, names=ex.output_names)
            except Exception as e:  # an exotic return value (sparse, complex, a subclass...)
                problem = Problem("type", "your output could not be compared with the right "
                                          f"answer ({type(e).__name__}: "
                                          f"{str(e).splitlines()[0][:200] if str(e) else ''}).")
        runs.append(_Run(case, out, problem))
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
    msg = message + f"\n{passed} of {len(cases)} cases passed before this one."
    if printed:
        msg += _PRINT_NOTE
    return CheckResult(exercise=ex.id, passed=False, status="failed", mistake=mistake,
                       message=msg, cases_run=len(runs) + 1, cases_total=len(cases),
                       failed_case=case.name, details=details, printed=printed)


def _agrees(learner: Any, mistake: Any, tol: Any) -> bool:
    try:
        return same_output(learner, mistake, tol)
    except Exception:
        return False


def _mistake_output(m: Mistake, case: Case) -> tuple[bool, Any]:
    try:
        return True, m.fn(*fresh_args(case.args)[0])
    except Exception:
        return False, None


def _recognise(ex: Exercise, runs: list[_Run]) -> Mistake | None:
    """The declared mistake agreeing with every wrong output (and most right ones)."""
    with_output = [r for r in runs if r.outcome.error is None]
    wrong = [r for r in with_output if r.problem is not None]
    if not wrong:
        return None
    best, best_score = None, -1
    for m in ex.mistakes:
        ok = True
        for r in wrong:
            produced, value = _mistake_output(m, r.case)
            if not produced or not _agrees(r.outcome.value, value, ex.tolerance):
                ok = False
                break
        if not ok:
            continue
        score = 0
        for r in with_output:
            if r.problem is None:
                produced, value = _mistake_output(m, r.case)
                score += int(produced and _agrees(r.outcome.value, value, ex.tolerance))
        if score > best_score:
            best, best_score = m, score
    return best


def _diagnose(ex: Exercise, cases: list[Case], runs: list[_Run], failures: list[_Run],
              printed: bool) -> CheckResult:
    first = failures[0]
    mistake = _recognise(ex, runs)
    where = describe_case(ex.params, first.case)
    assert first.problem is not None
    lines = []
    if mistake is not None:
        lines.append(mistake.message)
        if first.problem.kind != "raised" and first.problem.kind != "values":
            lines.append(f"First failing {where}: {first.problem.text}")
        else:
            lines.append(f"First failing {where}" + (f": {first.problem.text}"
                                                      if first.problem.kind == "raised" else "."))
        mistake_id = mistake.id
        details = first.problem.where
    else:
        lines.append(f"First failing {where}: {first.problem.text}")
        mistake_id = "raised" if first.problem.kind == "raised" \
            else GENERIC_MISTAKES.get(first.problem.kind, "wrong_values")
        details = first.problem.where
        if first.problem.kind in ("values", "nan", "inf") and details:
            lines[-1] += f" ({details})"
    n_ok = sum(1 for r in runs if r.problem is None)
    lines.append(f"{n_ok} of {len(cases)} cases passed.")
    if printed:
        lines.append(_PRINT_NOTE.strip())
    return CheckResult(exercise=ex.id, passed=False, status="failed", mistake=mistake_id,
                       message="\n".join(lines), cases_run=len(runs), cases_total=len(cases),
                       failed_case=first.case.name, details=details, printed=printed)
