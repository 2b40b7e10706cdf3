"""Run the learner's function apart from the checker: one forked worker process per check.

Why a fork: functions defined in notebook cells (closures, lambdas, helpers from other cells)
cannot be pickled for a spawned interpreter or a pre-started worker; a forked child inherits them
as they are. Measured on the course machines (``python bench/check_latency.py --models``): a fork
costs about 20-50 ms, a pre-started worker 5-12 ms (but it only takes module-level functions),
a spawned interpreter 2-4 s (it imports torch).

The worker caps its address space, uses one thread, sends its prints nowhere, runs in a process
group of its own (killed whole), and installs the policy (:mod:`._policy`: no threads, processes,
sockets or native code) before any learner code runs. It loads the learner's file under that
policy, and only then receives the cases from the parent (a file's top level finds nothing to
answer). Each call runs under the watch: forbidden kernels refused, the course guard
(:class:`CourseGuard`: the trace function sees every Python frame whose code lives in the
``course_lib`` package or is a copy of such code, recognised by content; the checker's own
machinery excepted), the N×N watch and the exercise's extension. Between calls no learner code
runs at all (the policy's reporting trace). After each call the worker sends the outcome as
``torch.save`` bytes of plain data (:mod:`._wire`): tensors become plain dense tensors, other
objects are only described. The parent loads them with ``torch.load(..., weights_only=True)``,
compares them with the oracle's answers (in the parent, out of the learner's reach) and enforces
the time limit by killing the worker. Whatever the learner's code does inside the worker (patch
torch, change the default dtype, exit, crash, loop, allocate) cannot reach the parent: the
learner's session.
"""

from __future__ import annotations

import faulthandler
import gc
import importlib.util
import io
import os
import secrets
import select
import signal
import struct
import sys
import time
import traceback
import types
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import _policy
from ._course_code import CodeCache, course_code, course_dirs, machinery_files, shape
from ._sandbox import CallOutcome, _warm_up, run_call
from ._spec import Case, fresh_args
from ._untouched import is_untouched
from ._wire import decode, encode

#: A check's cases, or a function that makes them (when the worker is ready for them).
Cases = list[Case] | Callable[[], list[Case]]
#: Bytes the worker may allocate beyond the address space it inherits from the session.
MEMORY_CAP = 2 * 1024 ** 3
#: Seconds the worker may take to start (before the learner's code runs; not the learner's time).
START_LIMIT = 60.0
_HEADER = struct.Struct("<Q")
_MAX_MESSAGE = 1 << 30


def fork_available() -> bool:
    return hasattr(os, "fork") and sys.platform.startswith("linux")


# --------------------------------------------------------------------------- the course guard


def qualified_name(frame: Any) -> str:
    module = frame.f_globals.get("__name__", "?") if isinstance(frame.f_globals, dict) else "?"
    code = frame.f_code
    return f"{module}.{getattr(code, 'co_qualname', code.co_name)}"


class CourseGuard:
    """Refuses a call from the learner's code into the course's own code.

    Course code is recognised two ways: by its file (inside the ``course_lib`` package, not the
    checker's own machinery) and by its content (see :mod:`._course_code`: a relabelled, copied,
    recompiled or marshalled course function has the fingerprint of the original). A frame of
    course code is refused unless it is a genuine module body (an import), its caller is genuine
    course code (course code may call its own helpers once legitimately entered: an import, or
    a function the exercise allows), or the exercise allows it. *Genuine* means both: a course
    file and a course fingerprint, so a learner's code relabelled with a course file name is not
    trusted as a caller. ``allowed``: qualified names (or module prefixes) of course functions
    this exercise lets the learner call; a copy is named by its original's names, whatever
    names it claims.
    """

    def __init__(self, allowed: tuple[str, ...] = ()) -> None:
        self.dirs = course_dirs()
        self.machinery = machinery_files()
        self.allowed = tuple(allowed)
        self.index = course_code()
        self.fingerprint = CodeCache()
        self._plain: dict[int, Any] = {}      # code objects seen that are not course code

    def _course_file(self, filename: str) -> bool:
        return filename.startswith(self.dirs) and filename not in self.machinery

    def _genuine(self, code: Any) -> bool:
        return self._course_file(code.co_filename) and self.fingerprint(code) in self.index.names

    def _allowed(self, names: tuple[str, ...]) -> bool:
        return any(n == a or n.startswith(a + ".") for n in names for a in self.allowed)

    def plain(self, code: Any) -> bool:
        """Whether :meth:`refused` found ``code`` not to be course code (a verdict for good)."""
        return self._plain.get(id(code)) is code

    def refused(self, frame: Any) -> str | None:
        code = frame.f_code
        if self._plain.get(id(code)) is code:   # asked on every call: the common answer first
            return None
        by_content = False
        if shape(code) in self.index.shapes:
            fp = self.fingerprint(code)
            by_content = fp in self.index.recognisable
        if not by_content and not self._course_file(code.co_filename):
            self._plain[id(code)] = code
            return None
        fp = self.fingerprint(code)
        if fp in self.index.modules and self._course_file(code.co_filename):
            return None                      # importing course_lib stays allowed
        back = frame.f_back
        if back is not None and self._genuine(back.f_code):
            return None
        claimed = qualified_name(frame)
        names = self.index.names[fp] if by_content else (claimed,)
        if self._allowed(names):
            return None
        return claimed if claimed in names else names[0]


# --------------------------------------------------------------------------- sources


@dataclass
class FileSource:
    """The learner's function as ``function`` in the file ``path`` (the command line)."""

    path: str
    function: str


@dataclass
class Prepared:
    """What the worker found before the first call."""

    untouched: bool = False
    load_error: str | None = None        # "could not load FILE: ..." (a usage error)
    outcome: CallOutcome | None = None   # loading timed out or ended the process


def load_file(path: str) -> Any:
    """Import the learner's file as a fresh module (its ``__main__`` block does not run)."""
    p = Path(path)
    name = f"course_lib_submission_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {path} as Python code (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _untouched(fn: Any) -> bool:
    try:
        return bool(is_untouched(fn))
    except BaseException:   # an odd callable (its attributes raise...): judge it by its calls
        return False


def _prepare(source: Any) -> tuple[Callable[..., Any] | None, Prepared]:
    if not isinstance(source, FileSource):
        return source, Prepared(untouched=_untouched(source))
    if not Path(source.path).is_file():
        return None, Prepared(load_error=f"no such file: {source.path}")
    try:
        module = load_file(source.path)
    except BaseException as e:  # SyntaxError, ImportError, SystemExit in the learner's file...
        lines = traceback.format_exception_only(type(e), e)
        return None, Prepared(load_error=f"could not load {source.path}:\n"
                                         + "".join(lines).rstrip())
    fn = getattr(module, source.function, None)
    if fn is None or not callable(fn):
        defined = sorted(k for k, v in vars(module).items()
                         if callable(v) and getattr(v, "__module__", None) == module.__name__)
        return None, Prepared(load_error=(
            f"{source.path} defines no function named {source.function!r}"
            + (f" (it defines: {', '.join(defined)}); use --function NAME" if defined else "")))
    return fn, Prepared(untouched=_untouched(fn))


# --------------------------------------------------------------------------- in-process runner


def run_in_process(source: Any, cases: Cases, params: tuple[str, ...], *,
                   forbidden: tuple[str, ...], guard: CourseGuard | None,
                   timeout: float, extension: Any = None) -> Iterator[Any]:
    """Yields a :class:`Prepared`, then one :class:`CallOutcome` per case (no isolation, no
    policy: the course's own tests, and platforms without ``fork``)."""
    fn, prepared = _prepare(source)
    yield prepared
    if fn is None or prepared.untouched:
        return
    for case in (cases() if callable(cases) else cases):
        args, watch = fresh_args(case.args, params)
        out = run_call(fn, args, timeout=timeout, forbidden=forbidden,
                       max_square=case.max_square, course=guard, extension=extension)
        out.inputs_after = [copy for _, copy, _ in watch]
        yield out


def run_bare(source: Any, cases: Cases, params: tuple[str, ...]) -> Iterator[Any]:
    """Yields like :func:`run_in_process` with no watch at all (no time limit, no forbidden
    calls, no N×N watch): the course's statistical tests of its own solutions and mistakes."""
    fn, prepared = _prepare(source)
    yield prepared
    if fn is None or prepared.untouched:
        return
    for case in (cases() if callable(cases) else cases):
        args, watch = fresh_args(case.args, params)
        out = CallOutcome()
        try:
            out.value = fn(*args)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:   # chapter 9's bounds checks derive from BaseException
            out.error, out.error_type = e, type(e).__name__
            out.traceback_text = f"{type(e).__name__}: {e}"
        out.inputs_after = [copy for _, copy, _ in watch]
        yield out


# --------------------------------------------------------------------------- the worker (child)

def _vm_bytes() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except Exception:
        return None
    return None


def _setup_child(memory_cap: int | None, protected: tuple[int, ...] = (),
                 trusted_code: dict[int, Any] | None = None) -> Callable[..., Any]:
    """Set the worker up and install the policy; returns the reporting trace function.
    ``trusted_code``: the checker's code objects as the parent found them just before the fork
    (:func:`._policy.machinery_code`; ``None``: found here)."""
    try:
        os.setpgid(0, 0)    # a group of its own: the parent kills it whole (see _Worker.close)
    except OSError:
        pass
    gc.freeze()     # the inherited objects: a collection here would copy every page they are on
    faulthandler.disable()   # a crash of the learner's code is reported by the parent, quietly
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except Exception:
            pass
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
    except Exception:
        pass
    sys.stdout = io.StringIO()
    sys.stderr = io.StringIO()
    if memory_cap:
        vm = _vm_bytes()
        if vm is not None:
            try:
                import resource

                limit = vm + int(memory_cap)
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            except Exception:
                pass
    torch.set_num_threads(1)
    return _policy.install(os.getpid(), machinery_files(),
                           _policy.generated_code(CallOutcome, Prepared, FileSource, Case),
                           protected, trusted_code)


def _send(fd: int, obj: Any, save: Callable[..., Any] | None = None,
          write: Callable[[int, Any], int] | None = None) -> None:
    """``obj`` as ``torch.save`` bytes behind a length header: the worker's outcomes (plain data,
    read with ``weights_only``), or the parent's cases for its own worker (read in full).
    ``save``, ``write``: ``torch.save`` and ``os.write`` as the worker bound them before any
    learner code ran (the policy then refuses ``os.write`` on this descriptor)."""
    buf = io.BytesIO()
    (save or torch.save)(obj, buf)
    data = buf.getvalue()
    view = memoryview(_HEADER.pack(len(data)) + data)
    write = write or os.write
    while view:
        n = write(fd, view)
        view = view[n:]


_SERIALISATION_WARM = [False]


def _warm_serialisation() -> None:
    """Save and load once here, so every worker inherits torch.save's lazy set-up (ms each)."""
    if not _SERIALISATION_WARM[0]:
        buf = io.BytesIO()
        torch.save({"kind": "warm", "t": torch.zeros(2), "x": (1, [2.0], None)}, buf)
        torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
        machinery_files()
        course_dirs()
        course_code()      # compiled once in the session: every worker inherits the index
        _SERIALISATION_WARM[0] = True


def _warm_extension(extension: Any) -> None:
    """The exercise's extension prepared before the fork (``CallExtension.warm``; an extension
    that is not a ``CallExtension`` may lack it): its first imports would otherwise run in the
    worker under the reporting trace, which refuses the code they compile from strings."""
    warm = getattr(extension, "warm", None)
    if warm is not None:
        warm()


def _encode_outcome(out: CallOutcome) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "kind": "case", "error_type": out.error_type, "traceback": out.traceback_text,
        "placeholder": out.placeholder, "memory": out.memory, "forbidden": out.forbidden,
        "course_call": out.course_call, "tamper": out.tamper, "policy": out.policy,
        "extension": list(out.extension) if out.extension is not None else None,
        "square": list(out.square) if out.square is not None else None,
        "left_torch": out.left_torch,
        "printed": out.printed[:20000],
        "inputs": [encode(c) for c in out.inputs_after],
    }
    if not out.error_type:
        msg["value"] = encode(out.value)
    return msg


def _load_watched(source: Any) -> tuple[Callable[..., Any] | None, Prepared]:
    """:func:`_prepare` under the policy: a file's top level is the learner's code too, and so
    is whatever an odd callable runs when it is inspected (its ``__getattr__``...). The cases
    do not exist in the worker yet (:func:`run_isolated` sends them once the file is loaded), so
    the top level may run what a chapter's notebook runs (the course's helpers, torch's
    softmax) with nothing to compute an answer from. Reading a plain function's source runs
    none of the learner's code."""
    if isinstance(source, types.FunctionType | types.MethodType):
        return _prepare(source)
    load = CallOutcome()
    recorder, call, prepare = _policy.RECORDER, run_call, _prepare
    recorder.outcome = load
    call(lambda: prepare(source), (), timeout=1e9, outcome=load, threaded=False)
    recorder.outcome = None
    if refused(load) or load.error_type or not isinstance(load.value, tuple):
        return None, Prepared(outcome=load)
    return load.value


def refused(out: CallOutcome) -> bool:
    """Whether the watch or the policy refused something in this call."""
    return bool(out.forbidden or out.course_call or out.tamper or out.policy)


def _receive(fd: int) -> Any:
    """The cases, sent by the parent once the learner's file is loaded (trusted data)."""
    head = b""
    while len(head) < _HEADER.size:
        chunk = os.read(fd, _HEADER.size - len(head))
        if not chunk:
            raise EOFError("the checker closed the connection")
        head += chunk
    size = _HEADER.unpack(head)[0]
    parts, got = [], 0
    while got < size:
        chunk = os.read(fd, min(size - got, 1 << 20))
        if not chunk:
            raise EOFError("the checker closed the connection")
        parts.append(chunk)
        got += len(chunk)
    return torch.load(io.BytesIO(b"".join(parts)), weights_only=False)


def _child(fd: int, cases_fd: int, source: Any, params: tuple[str, ...],
           forbidden: tuple[str, ...], guard: CourseGuard | None,
           memory_cap: int | None, extension: Any, forget: Callable[[], None] | None,
           trusted_code: dict[int, Any] | None = None) -> None:
    # Bound before any learner code runs: a file's top level that rebinds these module names
    # (``_isolation.run_call = ...``, ``torch.save = ...``, ``os.write = ...``) changes nothing
    # here, and the policy refuses changing the functions themselves (``__code__``).
    call, encode_outcome, copies, receive = run_call, _encode_outcome, fresh_args, _receive
    save, write, settrace = torch.save, os.write, sys.settrace
    send_raw = _send

    def send(obj: Any) -> None:
        send_raw(fd, obj, save, write)

    recorder, refuse_kernels = _policy.RECORDER, _policy.refuse_kernels
    between = _setup_child(memory_cap, (fd, cases_fd), trusted_code)
    del trusted_code      # the policy's closure holds it now
    if forget is not None:
        forget()          # the session's kept cases and answers of chosen seeds: not here
    send({"kind": "ready"})
    fn, prepared = _load_watched(source)
    settrace(between)     # from now until the next call no learner code runs (see _policy)
    loaded = prepared.outcome
    send({"kind": "loaded", "untouched": prepared.untouched,
          "load_error": prepared.load_error,
          "refused": encode_outcome(loaded) if loaded is not None else None})
    if fn is None or prepared.untouched:
        return
    refuse_kernels(forbidden)
    # The cases and this run's nonce: the nonce lives only in this frame (no learner code may
    # hold a frame, walk gc or read the cases' descriptor), and every report carries it.
    received = receive(cases_fd)
    cases, nonce = received["cases"], received["nonce"]
    del received
    for case in cases:
        args, watch = copies(case.args, params)
        out = CallOutcome()
        recorder.outcome = out
        call(fn, args, timeout=1e9, forbidden=forbidden, max_square=case.max_square,
             course=guard, outcome=out, extension=extension, threaded=False,
             between=between)
        recorder.outcome = None
        out.inputs_after = [copy for _, copy, _ in watch]
        msg = encode_outcome(out)
        msg["nonce"] = nonce
        out.value = out.error = None
        send(msg)
    send({"kind": "done", "count": len(cases), "nonce": nonce})


# --------------------------------------------------------------------------- the parent


class _Worker:
    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd
        self.buf = b""
        self.status: int | None = None

    def recv(self, limit: float) -> Any:
        """The next message, ``"timeout"`` after ``limit`` seconds, or ``None`` at EOF."""
        deadline = time.monotonic() + limit
        need = _HEADER.size
        size = None
        while True:
            if len(self.buf) >= need:
                if size is None:
                    size = _HEADER.unpack(self.buf[:_HEADER.size])[0]
                    if size > _MAX_MESSAGE:
                        return None
                    need = _HEADER.size + size
                    continue
                data, self.buf = self.buf[_HEADER.size:need], self.buf[need:]
                try:
                    msg = torch.load(io.BytesIO(data), weights_only=True)
                except Exception:
                    return None
                return msg if isinstance(msg, dict) else None
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return "timeout"
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk

    def wait_exit(self, limit: float) -> int | None:
        deadline = time.monotonic() + limit
        while self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.status = status
                break
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)
        return self.status

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        try:     # the worker's group: anything it started goes with it
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.status = os.waitpid(self.pid, 0)[1]
            except ChildProcessError:
                pass


def _ended(status: int | None) -> str:
    if status is None:
        return "closed its connection to the checker"
    if os.WIFEXITED(status):
        return f"exit:{os.WEXITSTATUS(status)}"
    if os.WIFSIGNALED(status):
        return f"signal:{os.WTERMSIG(status)}"
    return "ended"


def _decode_outcome(msg: dict[str, Any]) -> CallOutcome:
    out = CallOutcome()
    out.error_type = str(msg.get("error_type") or "")
    out.traceback_text = str(msg.get("traceback") or "")
    out.placeholder = bool(msg.get("placeholder"))
    out.memory = bool(msg.get("memory"))
    forbidden, course, tamper = msg.get("forbidden"), msg.get("course_call"), msg.get("tamper")
    out.forbidden = str(forbidden) if forbidden is not None else None
    out.course_call = str(course) if course is not None else None
    if tamper is not None:
        out.tamper = str(tamper)
    policy, extension = msg.get("policy"), msg.get("extension")
    out.policy = str(policy) if policy is not None else None
    if isinstance(extension, list) and len(extension) == 2:
        out.extension = (str(extension[0]), str(extension[1]))
    out.left_torch = bool(msg.get("left_torch"))
    square = msg.get("square")
    if isinstance(square, list):
        out.square = tuple(int(s) for s in square)
    out.printed = str(msg.get("printed") or "")
    inputs = msg.get("inputs")
    out.inputs_after = [decode(x) for x in inputs] if isinstance(inputs, list) else []
    if not out.error_type:
        out.value = decode(msg.get("value"))
    return out


#: Starts a check's worker: ``(source, params, forbidden, guard, memory_cap, extension,
#: forget) -> (worker, cases_fd)``. The worker reports on ``worker.fd`` and reads its cases from
#: ``cases_fd``. :func:`fork_worker` is the default; ``checking._remote`` starts one in another
#: program (grading runs it inside an OS sandbox).
Launcher = Callable[..., tuple["_Worker", int]]


def machinery_table() -> dict[int, Any]:
    """The checker's own code objects by identity (:func:`._policy.machinery_code` of
    :func:`machinery_files`), for a worker about to be forked: made in the parent (or the grading
    server) just before the fork, since in the child each module the walk reads is a page the
    fork copies."""
    return _policy.machinery_code(machinery_files())


def fork_worker(source: Any, params: tuple[str, ...], forbidden: tuple[str, ...],
                guard: CourseGuard | None, memory_cap: int | None, extension: Any,
                forget: Callable[[], None] | None) -> tuple[_Worker, int]:
    """A forked worker (see the module docstring): it inherits ``source`` as it is."""
    r, w = os.pipe()
    cases_r, cases_w = os.pipe()
    trusted = machinery_table()    # here: found in the child, every module read is a page copied
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # "fork() in a multi-threaded process": we exec
        pid = os.fork()                       # nothing and leave with os._exit
    if pid == 0:  # pragma: no cover - the worker; coverage cannot follow it
        code, leave = 0, os._exit      # the policy replaces os._exit: bound before it does
        try:
            os.close(r)
            os.close(cases_w)
            _child(w, cases_r, source, params, forbidden, guard, memory_cap, extension, forget,
                   trusted)
        except BaseException:
            code = 70
        finally:
            leave(code)
    os.close(w)
    os.close(cases_r)
    return _Worker(pid, r), cases_w


def _forged(why: str) -> CallOutcome:
    return CallOutcome(tamper=f"the checker's own reporting (its reports broke the protocol: "
                              f"{why})")


def _verified(worker: _Worker, count: int, nonce: str, timeout: float) -> Iterator[CallOutcome]:
    """The worker's ``count`` case outcomes, yielded only once the run is known to be the
    worker's own: every report carries this run's nonce (sent with the cases, never to learner
    code), exactly ``count`` of them, then ``done`` with the count, then nothing (end of file),
    and the worker exits normally (status 0, which only the checker's own code reaches: the
    policy refuses ``os._exit``). Anything else is forged or cut short: one outcome says so
    (tampering), or the time-out or the end of the process it was. A slow or crashing honest
    function gets the outcomes before the one that stopped, then that one."""
    outs: list[CallOutcome] = []
    for _ in range(count):
        msg = worker.recv(timeout)
        if msg == "timeout":
            yield from outs
            yield CallOutcome(timed_out=True)
            return
        if not isinstance(msg, dict) or msg.get("kind") != "case":
            status = worker.wait_exit(timeout)
            if isinstance(msg, dict) and status is not None and os.WIFEXITED(status) \
                    and os.WEXITSTATUS(status) == 0:
                yield _forged(f"a {str(msg.get('kind'))[:20]!r} message where a case was due")
                return
            yield from outs
            yield CallOutcome(timed_out=True) if status is None \
                else CallOutcome(ended=_ended(status))
            return
        if msg.get("nonce") != nonce:
            yield _forged("a report without this run's nonce")
            return
        outs.append(_decode_outcome(msg))
    end = worker.recv(timeout)
    if end == "timeout":
        yield _forged("no final report after the last case")
        return
    if not isinstance(end, dict):
        status = worker.wait_exit(timeout)
        if status is not None and not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            yield from outs[:-1]
            yield CallOutcome(ended=_ended(status))
        else:
            yield _forged("no final report after the last case")
        return
    if end.get("kind") != "done" or end.get("nonce") != nonce or end.get("count") != count:
        yield _forged("a final report that is not the checker's")
        return
    tail = worker.recv(min(timeout, 10.0))
    if tail is not None:
        yield _forged("more reports than cases" if tail != "timeout"
                      else "the worker did not end after its final report")
        return
    status = worker.wait_exit(timeout)
    if status is None or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        yield _forged(f"the worker did not end normally ({_ended(status)})")
        return
    yield from outs


def run_isolated(source: Any, cases: Cases, params: tuple[str, ...], *,
                 forbidden: tuple[str, ...], guard: CourseGuard | None, timeout: float,
                 memory_cap: int | None = MEMORY_CAP, extension: Any = None,
                 forget: Callable[[], None] | None = None,
                 launcher: Launcher | None = None) -> Iterator[Any]:
    """Like :func:`run_in_process`, with the learner's code in a forked worker (``launcher``:
    another way to start one, see :data:`Launcher`).

    The worker is forked before the cases exist (``cases`` may be a function that makes them),
    loads the learner's file, and only then receives them: a file's top level has no inputs to
    compute answers from. ``forget`` runs in the worker first (the engine drops its copies of
    the cases and answers of chosen seeds there). A call (or loading a :class:`FileSource`) that
    takes longer than ``timeout`` yields an outcome with ``timed_out``; a worker that dies yields
    one with ``ended`` ("exit:N", "signal:N"). The worker is killed when the generator closes.
    """
    _warm_up()
    _warm_serialisation()
    _policy.warm(forbidden)
    _warm_extension(extension)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    worker, cases_w = (launcher or fork_worker)(source, params, forbidden, guard, memory_cap,
                                                extension, forget)
    try:
        msg = worker.recv(START_LIMIT)
        if not isinstance(msg, dict) or msg.get("kind") != "ready":
            status = worker.wait_exit(1.0)
            raise RuntimeError(f"the check's worker process did not start ({_ended(status)})")
        limit = timeout if isinstance(source, FileSource) else max(timeout, START_LIMIT)
        msg = worker.recv(limit)
        if msg == "timeout":
            yield Prepared(outcome=CallOutcome(timed_out=True))
            return
        if not isinstance(msg, dict) or msg.get("kind") != "loaded":
            yield Prepared(outcome=CallOutcome(ended=_ended(worker.wait_exit(timeout))))
            return
        load_error, loaded = msg.get("load_error"), msg.get("refused")
        prepared = Prepared(untouched=bool(msg.get("untouched")),
                            load_error=str(load_error) if load_error is not None else None,
                            outcome=_decode_outcome(loaded) if isinstance(loaded, dict) else None)
        yield prepared
        if prepared.untouched or prepared.load_error is not None or prepared.outcome is not None:
            return
        made = cases() if callable(cases) else cases
        nonce = secrets.token_hex(16)
        try:
            _send(cases_w, {"cases": made, "nonce": nonce})
        except OSError:            # the worker is gone: its status says how
            status = worker.wait_exit(timeout)
            yield CallOutcome(ended=_ended(status)) if status is not None \
                else CallOutcome(timed_out=True)
            return
        yield from _verified(worker, len(made), nonce, timeout)
    finally:
        try:
            os.close(cases_w)
        except OSError:
            pass
        worker.close()
