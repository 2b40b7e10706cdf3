"""The worker's policy: what a learner's code may not do at all, installed before any of it runs.

A check's worker (``_isolation``) is a forked copy of the learner's session. Before the learner's
file is loaded or their function is called, :func:`install` fences the worker in for good (it
lives for one check and is then killed):

* **no concurrency or escape**: no thread is started (``_thread`` is replaced: a thread would run
  without the trace function and torch modes that watch the learner's code), no process is
  forked, no program started, no signal sent to another process, no socket opened, no native
  library loaded or called (``ctypes``; ``cffi`` and sub-interpreters are not importable); the
  events are Python audit events (PEP 578), listed in :data:`REFUSED_EVENTS`;
* **no forbidden torch kernel**: every aten operator of a forbidden family (see
  :data:`~._spec.FORBIDDEN_GROUPS`: every softmax, attention or fused multi-head operator,
  forward and backward, CPU and CUDA, found by pattern in the list of registered operators)
  gets a kernel that refuses, registered with ``torch.library`` for each dispatch key the
  operator has. A kernel override sits below every torch mode, so switching modes off
  (``DisableTorchFunction``, ``_disable_current_modes``) does not reach past it;
* **no switching off the watch**: torch's switches for modes are refused when learner code
  calls them (torch's own code keeps them).

A refusal records what was refused in the running call's outcome (so a learner's ``except``
cannot hide it) and raises :class:`PolicyViolation` (a ``BaseException``).
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ._spec import FORBIDDEN_GROUPS


class PolicyViolation(BaseException):
    """Raised where the learner's code does something the worker's policy refuses."""


#: Audit events refused in the worker -> what the learner's code was doing.
REFUSED_EVENTS: dict[str, str] = {
    "os.fork": "forks a process", "os.forkpty": "forks a process",
    "subprocess.Popen": "starts a program", "os.system": "starts a program",
    "os.exec": "starts a program", "os.posix_spawn": "starts a program",
    "os.spawn": "starts a program", "os.startfile": "starts a program",
    "pty.spawn": "starts a program",
    "signal.pthread_kill": "sends a signal to a thread",
    "socket.__new__": "opens a socket", "socket.socketpair": "opens a socket",
    "ctypes.dlopen": "loads a native library (ctypes)",
    "ctypes.dlsym": "loads a native symbol (ctypes)",
    "ctypes.dlsym/handle": "loads a native symbol (ctypes)",
    "ctypes.call_function": "calls native code (ctypes)",
    "ctypes.cdata": "reads raw memory (ctypes)", "ctypes.cdata/buffer": "reads raw memory (ctypes)",
    "ctypes.string_at": "reads raw memory (ctypes)",
    "ctypes.wstring_at": "reads raw memory (ctypes)",
    "ctypes.addressof": "reads raw memory (ctypes)",
    "ctypes.create_string_buffer": "allocates native memory (ctypes)",
    "mmap.__new__": "maps memory (mmap)",
    "os.kill": "sends a signal to another process",
    "os.killpg": "sends a signal to another process",
}

#: Modules the worker does not import: native code without audit events, other interpreters.
REFUSED_IMPORTS: dict[str, str] = {
    "cffi": "imports cffi (native code)", "_cffi_backend": "imports cffi (native code)",
    "_xxsubinterpreters": "starts a sub-interpreter",
    "_interpreters": "starts a sub-interpreter",
    "_xxinterpchannels": "starts a sub-interpreter",
}

#: torch's switches for its modes, ``(module, attribute)``: learner code that calls one is
#: switching the watch off (torch's own code keeps them).
TORCH_SWITCHES: tuple[tuple[str, str], ...] = (
    ("torch._C", "DisableTorchFunction"), ("torch._C", "DisableTorchFunctionSubclass"),
    ("torch._C", "_DisableTorchDispatch"),
    ("torch._C", "_pop_torch_function_stack"), ("torch._C", "_pop_torch_dispatch_stack"),
    ("torch._C", "_unset_dispatch_mode"),
    ("torch._C", "_ExcludeDispatchKeyGuard"), ("torch._C", "_IncludeDispatchKeyGuard"),
    ("torch._C", "_AutoDispatchBelowAutograd"), ("torch._C", "_ForceDispatchKeyGuard"),
    ("torch._C", "_set_dispatch_mode"), ("torch._C", "_push_on_torch_function_stack"),
    ("torch.utils._python_dispatch", "_disable_current_modes"),
    ("torch.utils._python_dispatch", "_pop_mode"),
    ("torch.utils._python_dispatch", "_pop_mode_temporarily"),
    ("torch.overrides", "_pop_mode"), ("torch.overrides", "_pop_mode_temporarily"),
)

#: Tracing and profiling hooks: the watch's trace function is the learner's to keep.
TRACE_EVENTS = {"sys.settrace": "sys.settrace", "sys.setprofile": "sys.setprofile"}


def _torch_dirs() -> tuple[str, ...]:
    here = Path(torch.__file__).parent
    return tuple({str(here) + "/", str(here.resolve()) + "/"})


_TORCH = _torch_dirs()


class _Recorder:
    """Where a refusal is recorded: ``outcome.policy`` (what was refused) of the running call."""

    def __init__(self) -> None:
        self.outcome: Any = None
        self.first: str | None = None   # a refusal outside any call (loading a file)

    def refuse(self, what: str, field: str = "policy") -> PolicyViolation:
        out = self.outcome
        if out is not None and getattr(out, field, None) is None:
            setattr(out, field, what)
        elif out is None and self.first is None:
            self.first = what
        return PolicyViolation(f"the check does not allow this: your code {what}")


RECORDER = _Recorder()


# --------------------------------------------------------------------------- forbidden kernels


def family(group: str) -> frozenset[str]:
    """The aten operators (base names) of a forbidden group, as registered in this torch."""
    return _families()[group]


@functools.lru_cache(maxsize=1)
def _families() -> dict[str, frozenset[str]]:
    names = {n[6:].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
             if n.startswith("aten::")}
    out = {}
    for g, spec in FORBIDDEN_GROUPS.items():
        pattern = re.compile(spec["aten_family"]) if spec.get("aten_family") else None
        members = {n for n in names if pattern is not None and pattern.search(n)}
        members |= {n for n in spec.get("aten", ()) if n in names}
        members -= set(spec.get("aten_not", ()))
        out[g] = frozenset(members)
    return out


#: Dispatch keys a refusing kernel is registered for, where the operator has a kernel.
_KEYS = ("CPU", "CUDA", "Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
         "CompositeExplicitAutogradNonFunctional", "SparseCPU", "SparseCUDA",
         "NestedTensorCPU", "NestedTensorCUDA", "QuantizedCPU", "QuantizedCUDA", "MkldnnCPU")


@functools.lru_cache(maxsize=8)
def _overloads(groups: tuple[str, ...]) -> tuple[tuple[str, str, str], ...]:
    """``(qualified overload, dispatch key, label)`` for every kernel to refuse (computed once
    in the session, so that each worker only registers)."""
    members = {}
    for g in groups:
        for name in family(g):
            members.setdefault(name, FORBIDDEN_GROUPS[g]["label"])
    found = []
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith("aten::"):
            continue
        base = full[6:].split(".")[0]
        label = members.get(base)
        if label is None:
            continue
        for key in _KEYS:
            if torch._C._dispatch_has_kernel_for_dispatch_key(full, key):
                found.append((full[6:], key, label))
    return tuple(found)


def warm(groups: tuple[str, ...]) -> None:
    """Compute in the session what every worker for these groups registers (once)."""
    _overloads(tuple(sorted(groups)))


_LIBRARIES: list[Any] = []      # kept alive: a Library's registrations end with it


def _refusing_kernel(label: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RECORDER.refuse(label, field="forbidden")
    return refuse


def refuse_kernels(groups: tuple[str, ...]) -> int:
    """Register a refusing kernel for every operator of the groups (this process only)."""
    if not groups:
        return 0
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # "Overriding a previously registered kernel"
        for overload, key, label in _overloads(tuple(sorted(groups))):
            lib.impl(overload, _refusing_kernel(label), key)
    _LIBRARIES.append(lib)
    return len(_overloads(tuple(sorted(groups))))


# --------------------------------------------------------------------------- events, threads


def _audit(event: str, args: tuple[Any, ...]) -> None:
    what = REFUSED_EVENTS.get(event)
    if what is not None:
        if event in ("os.kill", "os.killpg") and args and args[0] in (0, _OWN_PID[0]):
            return              # a process may signal itself
        raise RECORDER.refuse(what)
    if event == "import" and args:
        what = REFUSED_IMPORTS.get(str(args[0]).split(".")[0])
        if what is not None:
            raise RECORDER.refuse(what)
    elif event in TRACE_EVENTS:
        out = RECORDER.outcome
        if out is not None and (out.forbidden or out.course_call):
            return     # CPython switches tracing off itself when the trace function refuses
        if sys._getframe(1).f_code.co_filename not in _MACHINERY[0]:
            raise RECORDER.refuse(TRACE_EVENTS[event], field="tamper")


_OWN_PID = [0]
_MACHINERY: list[frozenset[str]] = [frozenset()]
_GENERATED: list[frozenset[Any]] = [frozenset()]


def generated_code(*classes: type) -> frozenset[Any]:
    """The code objects ``dataclasses`` generated for these classes (compiled as ``<string>``)."""
    return frozenset(f.__code__ for cls in classes for f in vars(cls).values()
                     if callable(f) and getattr(getattr(f, "__code__", None), "co_filename",
                                                "") == "<string>")


def _no_thread(*args: Any, **kwargs: Any) -> Any:
    raise RECORDER.refuse("starts a thread")


def _switch_guard(real: Any, name: str) -> Any:
    """``real`` for torch's own code and the checker's, a refusal for anyone else's."""
    def guarded(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_code.co_filename
        if not caller.startswith(_TORCH) and caller not in _MACHINERY[0]:
            raise RECORDER.refuse(f"{name} (a switch that turns torch's modes off)",
                                  field="tamper")
        return real(*args, **kwargs)
    return guarded


# --------------------------------------------------------------------------- reporting

#: The worker's exit status when learner code ran while it reported (see :func:`reporting`).
REPORTING_EXIT = 71
_CO_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _trusted_dirs() -> tuple[str, ...]:
    """Whose code may run while the worker reports: the standard library and every installed
    package (torch, numpy, triton; Jupyter's and pytest's hooks, which a warning raised while
    reporting may call), and the course itself. Not: the learner's own files and notebook cells."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = {Path(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    dirs |= {Path(p) for p in site.getsitepackages()}
    dirs |= {Path(m.__file__).parent for m in (os, torch)} | {Path(__file__).parents[2]}
    return tuple({f"{d}/" for d in dirs} | {f"{d.resolve()}/" for d in dirs})


_TRUSTED = _trusted_dirs()


def reporting_trace(frame: Any, event: str, arg: Any) -> None:
    code = frame.f_code
    name = code.co_filename
    if name in _MACHINERY[0] or name.startswith(("<frozen", *_TRUSTED)):
        return None
    if code.co_flags & _CO_RESUMABLE or code.co_name == "__del__":
        return None         # a generator closed, an object finalised: not a call of the checker's
    if code in _GENERATED[0]:
        return None         # a dataclass's generated method (file "<string>") of the checker's
    os._exit(REPORTING_EXIT)


def reporting() -> None:
    """From now until the next learner call: no learner code runs in this thread. Between the
    calls the worker copies inputs and reports outcomes with torch and the standard library (code
    of the learner's own files and notebook cells is outside :func:`_trusted_dirs`); a
    function the learner's code put in their place (``torch.save = ...`` at a file's top level)
    would run there unwatched, so it ends the worker instead (the parent reports tampering)."""
    sys.settrace(reporting_trace)


def install(pid: int, machinery: frozenset[str], generated: frozenset[Any] = frozenset()
            ) -> None:
    """Fence this process (a check's worker) in for good; see the module docstring. The
    forbidden kernels come later (:func:`refuse_kernels`), once the learner's file is loaded.

    ``machinery``: the checker's own files, which alone may set the trace function;
    ``generated``: the checker's generated code (see :func:`generated_code`)."""
    import _thread
    import importlib
    import threading

    _OWN_PID[0] = pid
    _MACHINERY[0] = machinery
    _GENERATED[0] = generated
    for module in (_thread, threading):
        for name in ("start_new_thread", "start_joinable_thread", "_start_new_thread",
                     "_start_joinable_thread", "start_new"):
            if hasattr(module, name):
                setattr(module, name, _no_thread)
    for module_name, name in TORCH_SWITCHES:
        owner = importlib.import_module(module_name)
        if hasattr(owner, name):
            setattr(owner, name, _switch_guard(getattr(owner, name), f"{module_name}.{name}"))
    sys.addaudithook(_audit)
