"""Run one learner call safely: time limit, captured output, forbidden calls, N×N watch.

The call runs in a daemon worker thread. Inside it a :class:`_Watch` dispatch mode sees every
aten operator (so forbidden kernels are caught however they were reached) and every freshly
allocated tensor (so an N×N tensor is caught), and a trace function catches calls to forbidden
Python functions and, once the time limit has passed, stops the learner's code at its next line
(a thread-local mechanism: no asynchronous exceptions, which would slow every other thread).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import sys
import threading
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..dispatch_mode import EagerDispatchMode
from ._policy import family
from ._spec import FORBIDDEN_GROUPS


class ForbiddenCall(BaseException):
    """Raised inside the learner's call when it reaches a forbidden operation.

    A ``BaseException`` so that a learner's ``except Exception`` does not swallow it.
    """


class _TimeLimit(BaseException):
    """Injected into a runaway learner thread to stop it."""


@dataclass
class CallOutcome:
    value: Any = None
    error: BaseException | None = None
    traceback_text: str = ""
    timed_out: bool = False
    forbidden: str | None = None  # label of the forbidden group reached
    square: tuple[int, ...] | None = None  # shape of an N×N tensor created
    left_torch: bool = False         # turned a tensor into numpy where N×N is watched
    printed: str = ""
    tamper: str | None = None        # a checker internal the learner touched (isolated runs)
    course_call: str | None = None   # qualified name of a course_lib function the learner called
    error_type: str = ""             # the learner's exception's class name ("" if none)
    placeholder: bool = False        # the learner's own ``raise NotImplementedError``
    memory: bool = False             # the error is a failed allocation (memory cap)
    ended: str | None = None         # the worker process died: how (isolated runs only)
    policy: str | None = None        # what the worker's policy refused (a thread, a process...)
    extension: tuple[str, str] | None = None   # an exercise extension's (mistake, message)
    inputs_after: list[Any] = field(default_factory=list)   # the argument copies after the call


def holds_square(shape: Any, n: int) -> bool:
    """Whether a tensor of ``shape`` is an N×N matrix, or as large as one in any other shape
    (a flat ``(B·H, L·S)`` buffer, a ``(L·S,)`` vector): two dims ``>= n``, or ``>= n²``
    elements."""
    dims = [int(s) for s in shape]
    numel = 1
    for d in dims:
        numel *= d
    return sum(1 for d in dims if d >= n) >= 2 or numel >= n * n


#: Ways out of torch into numpy (or plain Python numbers), where the N×N watch cannot follow:
#: refused in a case with ``max_square`` when the learner's own code takes them.
_TO_NUMPY = frozenset({"numpy", "__array__", "__dlpack__", "tolist", "__array_wrap__",
                       "to_dlpack"})


class _Watch(EagerDispatchMode):
    def __init__(self, aten_names: dict[str, str], max_square: int | None,
                 outcome: CallOutcome) -> None:
        super().__init__()
        self.aten_names = aten_names
        self.max_square = max_square
        self.outcome = outcome

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in self.aten_names:
            if self.outcome.forbidden is None:
                self.outcome.forbidden = self.aten_names[name]
            raise ForbiddenCall(self.aten_names[name])
        out = func(*args, **(kwargs or {}))
        if self.max_square is not None and not getattr(func, "is_view", False):
            outs = out if isinstance(out, (tuple, list)) else (out,)
            for o in outs:
                if isinstance(o, torch.Tensor) and self.outcome.square is None \
                        and holds_square(o.shape, self.max_square):
                    self.outcome.square = tuple(int(s) for s in o.shape)
        return out


class _FunctionWatch(TorchFunctionMode):
    """Sees torch API calls (``torch.softmax``, ``F.scaled_dot_product_attention``...)."""

    def __init__(self, names: dict[str, str], outcome: CallOutcome,
                 max_square: int | None = None) -> None:
        super().__init__()
        self.names = names
        self.outcome = outcome
        self.max_square = max_square

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if self.max_square is not None and name in _TO_NUMPY \
                and not _asked_by_a_library(sys._getframe(1)):
            self.outcome.left_torch = True
            raise ForbiddenCall("numpy")
        label = self.names.get(name)
        if label is not None:
            if self.outcome.forbidden is None:
                self.outcome.forbidden = label
            raise ForbiddenCall(label)
        return func(*args, **(kwargs or {}))


def _resolve_forbidden() -> dict[str, dict[Any, str]]:
    """``{group: {code object: label}}`` for every ``"python"`` entry of FORBIDDEN_GROUPS.

    Resolved once, at import: an entry naming a module or function that does not exist is a bug
    in this package (it would silently forbid nothing), so it raises ImportError here.
    """
    table: dict[str, dict[Any, str]] = {}
    for g, group in FORBIDDEN_GROUPS.items():
        table[g] = {}
        for spec in group["python"]:
            mod_name, fn_name = spec.split(":")
            try:
                fn: Any = importlib.import_module(mod_name)
                for part in fn_name.split("."):     # a method: "Class.forward"
                    fn = getattr(fn, part)
            except (ImportError, AttributeError) as e:
                raise ImportError(f"FORBIDDEN_GROUPS[{g!r}] names {spec!r}, which does not "
                                  f"resolve: {e}") from e
            table[g][fn.__code__] = group["label"]
    return table


_FORBIDDEN_CODES = _resolve_forbidden()


def _forbidden_code_objects(groups: tuple[str, ...]) -> dict[Any, str]:
    codes: dict[Any, str] = {}
    for g in groups:
        codes.update(_FORBIDDEN_CODES[g])
    return codes


def _dirs(module_file: str) -> tuple[str, ...]:
    """A module's folder, as written and with symlinks resolved."""
    return tuple({str(Path(module_file).parent), str(Path(module_file).resolve().parent)})


_OUR_DIR = _dirs(__file__)
_TORCH_DIR = _dirs(torch.__file__)
_NOT_LEARNER = (*_OUR_DIR, *_TORCH_DIR, *_dirs(threading.__file__))


def _package_dirs(name: str) -> tuple[str, ...]:
    """An installed package's folder, found without importing it (empty if not installed)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        return ()
    return _dirs(spec.origin)


#: Libraries whose own lines are not traced (call events still are: the time limit and the
#: course guard still act on every call). Triton's interpreter runs a kernel as plain Python:
#: line events in it made a checked kernel ~3x slower than the same kernel unchecked.
_NO_LINE_EVENTS = (*_TORCH_DIR, *_package_dirs("triton"))
#: An object's identity as an int, like id() but without id()'s audit event (builtins.id): the
#: pointer hash, one-to-one for live objects (callers still check ``known is obj``).
_identity = object.__hash__
#: Where a conversion to numpy passes through on its way (``np.asarray(t)`` calls torch's
#: ``Tensor.__array__``, which calls ``t.numpy()``), and the library allowed to ask for one.
_CONVERTERS = (*_TORCH_DIR, *_package_dirs("numpy"))
_TRITON_DIR = _package_dirs("triton")


def _asked_by_a_library(frame: Any) -> bool:
    """Whether the first frame outside torch and numpy, from ``frame`` outwards, is Triton's
    (its interpreter's own conversions), not the learner's code."""
    while frame is not None and frame.f_code.co_filename.startswith(_CONVERTERS):
        frame = frame.f_back
    return bool(_TRITON_DIR) and frame is not None \
        and frame.f_code.co_filename.startswith(_TRITON_DIR)


def learner_traceback(exc: BaseException) -> str:
    """The traceback trimmed to the learner's own frames, without file names (deterministic)."""
    frames = traceback.extract_tb(exc.__traceback__)
    keep = []
    for fr in frames:
        fname = fr.filename or ""
        resolved = str(Path(fname).resolve()) if fname else ""
        if fname.startswith(_NOT_LEARNER) or resolved.startswith(_NOT_LEARNER) \
                or "site-packages" in fname or "dist-packages" in fname:
            continue  # the checker's, torch's, the standard library's or a library's frames
        line = (fr.line or "").strip()
        keep.append(f"  line {fr.lineno}, in {fr.name}" + (f": {line}" if line else ""))
    head = "Traceback (your code only):\n" if keep else ""
    last = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    lines = last.splitlines()
    if len(lines) > 6 or len(last) > 600:  # torch's dispatcher errors list every backend
        last = "\n".join(lines[:6])[:600].rstrip() + " [...]"
    return head + "\n".join(keep) + ("\n" if keep else "") + last


def _importing(frame) -> bool:
    """Whether ``frame`` runs inside an import (stopping there would leave a broken module)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def raised_as_placeholder(exc: BaseException) -> bool:
    """True for the learner's own ``raise NotImplementedError`` (not one from torch)."""
    if not isinstance(exc, NotImplementedError):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False
    line = (frames[-1].line or "").strip()
    if line:
        return line.startswith("raise NotImplementedError")
    return not str(exc).startswith("Could not run")   # no source: torch's own message differs


def is_memory_error(exc: BaseException) -> bool:
    """A failed allocation: Python's MemoryError or torch's allocator refusing."""
    if isinstance(exc, MemoryError):
        return True
    try:
        text = str(exc)
    except Exception:
        return False
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text
                                              or "DefaultCPUAllocator" in text)


def _own_code(fn: Any) -> dict[int, Any]:
    """``{id: code}`` of ``fn``'s code object and every code object nested in it (a function or
    a bound method; read without running any of the learner's code, such as a ``__getattr__``)."""
    own: dict[int, Any] = {}
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if not isinstance(fn, types.FunctionType):
        return own
    stack = [fn.__code__]
    while stack:
        code = stack.pop()
        if isinstance(code, types.CodeType) and id(code) not in own:
            own[id(code)] = code
            stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return own


def run_call(fn: Callable[..., Any], args: tuple[Any, ...], *, timeout: float,
             forbidden: tuple[str, ...] = (), max_square: int | None = None,
             course: Any = None, outcome: CallOutcome | None = None,
             extension: Any = None, threaded: bool = True,
             between: Callable[..., Any] | None = None) -> CallOutcome:
    """Call ``fn(*args)`` under the watch; never raises.

    ``course``: a guard with ``refused(frame) -> name | None`` (see ``_isolation``) that refuses
    calls into the course's own code, and ``plain(code) -> bool``: whether ``code`` is judged
    for good (not course code), so that its calls need not be asked about again. ``outcome``:
    fill this one (the worker's policy records into it too). ``extension``: the exercise's
    :class:`~._spec.CallExtension`, entered around the call; its verdict on the returned value
    goes to ``outcome.extension``. ``threaded=False`` (the worker, where no thread may start):
    call in this thread, with no time limit (the parent kills a worker that overruns).
    ``between``: the trace function in force outside the learner's call (the worker's, which
    lets no learner code run while it reports), back in place as soon as the call returns.
    """
    outcome = CallOutcome() if outcome is None else outcome
    aten = {n: FORBIDDEN_GROUPS[g]["label"] for g in forbidden for n in family(g)}
    api = {n: FORBIDDEN_GROUPS[g]["label"] for g in forbidden
           for n in FORBIDDEN_GROUPS[g].get("torch", ())}
    codes = _forbidden_code_objects(forbidden)

    stop = [False]  # set by this thread on time-out; the worker's tracer then raises
    # bound now, before the learner's code runs: patching the guard's class later changes nothing
    refused = course.refused if course is not None else None
    # What the learner handed in (the function and the helpers nested in it, by identity) is
    # theirs, even where it reads like the course's solution (the book's own solution cells are
    # typed copies of it); the guard judges what it *calls*. A function that lives in a course
    # file is not the learner's: handing in the course's own function stays refused.
    own = _own_code(fn)
    entry = next(iter(own.values()), None)
    if entry is not None and course is not None and course._course_file(entry.co_filename):
        own = {}

    def local_trace(frame, event, arg):
        if stop[0] and not _importing(frame):
            raise _TimeLimit
        return local_trace

    plain = course.plain if course is not None else None
    # Code objects judged once for good: neither forbidden nor course code (or the learner's
    # own), by identity -> what to return. A Triton kernel under the interpreter makes hundreds
    # of thousands of calls: judging each afresh made a chapter 9 check about 1.5x slower.
    # Keyed by _identity, not id(): id() raises the audit event builtins.id, which the check
    # worker's audit hook (_policy) would then judge once per call of the learner's code.
    settled: dict[int, tuple[Any, Any]] = {}
    identity = _identity      # bound now, like ``refused``: no module attribute to reset later

    def global_trace(frame, event, arg):
        if stop[0] and not _importing(frame):
            raise _TimeLimit
        code = frame.f_code
        known = settled.get(identity(code))
        if known is not None and known[0] is code:
            return known[1]
        label = codes.get(code)
        if label is not None:
            if outcome.forbidden is None:
                outcome.forbidden = label
            raise ForbiddenCall(label)
        settles = True
        if refused is not None and own.get(id(code)) is not code:
            name = refused(frame)
            if name is not None:
                if outcome.course_call is None:
                    outcome.course_call = name
                raise ForbiddenCall(name)
            settles = plain(code)   # course code: allowed from this caller, maybe not another
        # no line events inside torch/triton: cheaper, no endless loops there; none at all
        # unthreaded (a worker), where the parent, not this tracer, stops a call that overruns
        tracer = None if not threaded or code.co_filename.startswith(_NO_LINE_EVENTS) \
            else local_trace
        if settles:
            settled[identity(code)] = (code, tracer)
        return tracer

    def target() -> None:
        try:
            with contextlib.ExitStack() as around:
                judge = around.enter_context(extension.around_call()) if extension else None
                try:
                    sys.settrace(global_trace)
                    with contextlib.ExitStack() as modes:
                        if api or max_square:
                            modes.enter_context(_FunctionWatch(api, outcome, max_square))
                        if aten or max_square:
                            modes.enter_context(_Watch(aten, max_square, outcome))
                        outcome.value = fn(*args)
                finally:
                    sys.settrace(between)
                if judge is not None:
                    outcome.extension = judge(outcome.value)
        except _TimeLimit:
            outcome.timed_out = True
        except BaseException as e:  # the learner's error, whatever it is
            outcome.error = e
            try:
                outcome.error_type = type(e).__name__
                outcome.placeholder = raised_as_placeholder(e)
                outcome.memory = is_memory_error(e)
            except Exception:
                outcome.error_type = outcome.error_type or "Exception"
            try:
                outcome.traceback_text = learner_traceback(e)
            except Exception:
                outcome.traceback_text = f"{type(e).__name__}: {e}"
        finally:
            sys.settrace(None)

    if aten or max_square:
        _warm_up()
    buf, err = io.StringIO(), io.StringIO()
    if not threaded:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            target()
        outcome.printed = buf.getvalue()
        return outcome
    thread = threading.Thread(target=target, name="course_lib-check", daemon=True)
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        thread.start()
        try:
            thread.join(timeout)
        except BaseException:       # e.g. KeyboardInterrupt: stop the learner's code too
            stop[0] = True
            raise
        if thread.is_alive():
            outcome.timed_out = True
            stop[0] = True          # the thread stops at its next line of Python
            thread.join(0.2)
    outcome.printed = buf.getvalue()
    return outcome


_WARM = False


def _warm_up() -> None:
    """Run the watch once in this thread, so no lazy import happens under the time limit."""
    global _WARM
    if not _WARM:
        with _Watch({"_no_such_op": ""}, 2, CallOutcome()):
            (torch.ones(2, 2) @ torch.ones(2, 2)).exp()
        _WARM = True
