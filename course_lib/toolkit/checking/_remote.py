"""A check's worker started as a program of its own, for grading inside an OS sandbox.

The forked worker (:func:`._isolation.fork_worker`) inherits the checker's process: fine for a
learner checking their own work, not for grading, where nothing of the grader may be within the
learner's reach. :class:`ForkServer` starts ``python -m course_lib.toolkit.checking._remote``
inside a wrapper (``bwrap ...``) instead, which forks a worker per check with two pipes
(passed over a Unix socket). The parent sends the set-up first
(the learner's file as text, the function's name, the forbidden families, the allowed course
calls, the memory cap and the exercise's extension: no case, no answer, no seed), then, once
the file is loaded, the cases' inputs; the worker (the same :func:`._isolation._child` as a
forked one) answers with plain data. The oracle, the mistakes and the comparisons stay in the
parent.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from ._isolation import CourseGuard, FileSource, _receive, _send, _Worker, machinery_table


def _unwrapped(argv: list[str]) -> list[str]:
    return argv


def _setup(source: FileSource, params: tuple[str, ...], forbidden: tuple[str, ...],
           guard: CourseGuard | None, memory_cap: int | None, extension: Any) -> dict[str, Any]:
    """What the worker is told: the learner's file travels as text (the sandbox mounts none of
    the grader's folders; the worker writes it in its own working folder)."""
    with open(source.path, encoding="utf-8") as f:
        text = f.read()
    return {"file": os.path.basename(source.path), "source": text,
            "function": source.function, "params": tuple(params),
            "forbidden": tuple(forbidden),
            "allowed": None if guard is None else tuple(guard.allowed),
            "memory_cap": memory_cap, "extension": extension}


def _write_source(setup: dict[str, Any]) -> None:
    """In the worker's program: the learner's file, written where it runs."""
    path = os.path.abspath(os.path.basename(setup["file"]))
    with open(path, "w", encoding="utf-8") as f:
        f.write(setup["source"])
    setup["path"] = path


def preimport(path: str) -> list[str]:
    """Import the installed modules that the file at ``path`` imports at its top level (read
    with ``ast``, not run), before the policy is installed: what a forked worker inherits from
    the learner's session, where those imports ran long before the check. Installed code is
    trusted by the policy (:func:`._policy._trusted_dirs`); a module beside the file is not
    imported here."""
    import ast
    import importlib
    import importlib.util

    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError):
        return []
    names: list[str] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            names += [a.name for a in stmt.names]
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            names.append(stmt.module)
    here = os.path.dirname(os.path.abspath(path))
    done = []
    for name in dict.fromkeys(names):
        try:
            spec = importlib.util.find_spec(name.split(".")[0])
            origin = getattr(spec, "origin", None) or ""
            if spec is None or os.path.abspath(origin).startswith(here + os.sep):
                continue
            importlib.import_module(name)
            done.append(name)
        except Exception:
            continue                  # the learner's own load reports it
    return done


def _prepare_for(setup: dict[str, Any]) -> None:
    """What a worker needs before the learner's file loads (imported once per process)."""
    from . import _isolation, _policy
    from ._sandbox import _warm_up

    preimport(setup["path"])
    _warm_up()
    _isolation._warm_serialisation()
    _policy.warm(tuple(setup["forbidden"]))
    _isolation._warm_extension(setup["extension"])     # as run_isolated does before a fork


def _run_worker(setup: dict[str, Any], cases_fd: int, fd: int,
                trusted_code: dict[int, Any] | None = None) -> None:
    """Be the check's worker (the same :func:`._isolation._child` as a forked one);
    ``trusted_code``: the checker's code objects as the server found them before the fork."""
    import random

    import numpy as np
    import torch

    from . import _isolation

    random.seed(0)        # byte-identical files compute the same things, top level included
    np.random.seed(0)
    torch.manual_seed(0)
    guard = None if setup["allowed"] is None else CourseGuard(tuple(setup["allowed"]))
    _isolation._child(fd, cases_fd, FileSource(setup["path"], setup["function"]),
                      tuple(setup["params"]), tuple(setup["forbidden"]), guard,
                      setup["memory_cap"], setup["extension"], None, trusted_code)


# --------------------------------------------------------------------------- one server per job

_STATUS = struct.Struct("<q")


class _ServedWorker(_Worker):
    """A worker forked by a :class:`ForkServer`: its exit status comes over the server's
    socket; ending it early ends the whole server (the next check starts a fresh one)."""

    def __init__(self, server: ForkServer, fd: int) -> None:
        super().__init__(-1, fd)
        self.server = server

    def wait_exit(self, limit: float) -> int | None:
        if self.status is None:
            self.status = self.server.status(limit)
        return self.status

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        if self.status is None and self.server.status(2.0) is None:
            self.server.stop()         # a worker still running: its whole sandbox goes


class ForkServer:
    """One program (one sandbox) serves every check of a job: it imports torch and the course
    once and forks a worker per check.

    The parent sends each check's two pipe ends over a Unix socket (``SCM_RIGHTS``) and the
    set-up over the case pipe; the server loads what the file imports, forks the worker (whose
    policy refuses signals, ``ctypes`` and new processes: it cannot touch the server) and
    reports the worker's exit status. A server that fails to answer, or whose worker has to be
    stopped early, is ended with its sandbox, and the next check starts a new one."""

    def __init__(self, wrap: Callable[[list[str]], list[str]] = _unwrapped,
                 python: str = sys.executable, *, env: dict[str, str] | None = None,
                 cwd: str | None = None) -> None:
        self.wrap, self.python, self.env, self.cwd = wrap, python, env, cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.started = 0

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = self.wrap([self.python, "-m", "course_lib.toolkit.checking._remote",
                          "--serve", str(theirs.fileno())])
        try:
            self.proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(),),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True,
                                         env=self.env, cwd=self.cwd)
        finally:
            theirs.close()
        self.sock = ours
        self.started += 1

    def status(self, limit: float) -> int | None:
        """The last worker's wait status, or ``None`` (no answer within ``limit`` seconds)."""
        if self.sock is None:
            return None
        ready, _, _ = select.select([self.sock], [], [], limit)
        if not ready:
            return None
        data = b""
        try:
            while len(data) < _STATUS.size:
                chunk = self.sock.recv(_STATUS.size - len(data))
                if not chunk:
                    break
                data += chunk
        except OSError:
            data = b""
        if len(data) < _STATUS.size:
            self.stop()
            return None
        return _STATUS.unpack(data)[0]

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.kill()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.sock is not None:
            self.sock.close()
        self.proc, self.sock = None, None

    def __call__(self, source: Any, params: tuple[str, ...], forbidden: tuple[str, ...],
                 guard: CourseGuard | None, memory_cap: int | None, extension: Any,
                 forget: Callable[[], None] | None) -> tuple[_Worker, int]:
        if not isinstance(source, FileSource):
            raise TypeError("a served worker loads the learner's code from a file "
                            f"(a FileSource), not {type(source).__name__}")
        if self.proc is None or self.proc.poll() is not None:
            self.stop()
            self._start()
        r, w = os.pipe()
        cases_r, cases_w = os.pipe()
        try:
            assert self.sock is not None
            socket.send_fds(self.sock, [b"f"], [cases_r, w])
        except OSError:
            self.stop()
            self._start()
            assert self.sock is not None
            socket.send_fds(self.sock, [b"f"], [cases_r, w])
        finally:
            os.close(cases_r)
            os.close(w)
        _send(cases_w, _setup(source, params, forbidden, guard, memory_cap, extension))
        return _ServedWorker(self, r), cases_w

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(control_fd: int) -> int:
    """The server's side: for each request, read the set-up, import, fork a worker, wait for
    it, report its status."""
    sock = socket.socket(fileno=control_fd)
    leave = os._exit          # a worker's policy replaces os._exit: its own exit is bound here
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 16, 2)
        except OSError:
            return 0
        if not msg or len(fds) != 2:
            return 0
        cases_fd, fd = fds
        setup = _receive(cases_fd)
        _write_source(setup)
        _prepare_for(setup)
        trusted = machinery_table()      # before the fork (see there)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the worker
            code = 0
            try:
                sock.close()
                _run_worker(setup, cases_fd, fd, trusted)
            except BaseException:
                code = 70
            finally:
                leave(code)
        os.close(cases_fd)
        os.close(fd)
        _, status = os.waitpid(pid, 0)
        sock.sendall(_STATUS.pack(status))


if __name__ == "__main__":  # pragma: no cover - runs as the worker program
    code = 0
    try:
        if sys.argv[1:2] == ["--serve"]:
            serve(int(sys.argv[2]))
    except BaseException:
        code = 70
    finally:
        os._exit(code)
