"""The fence around a learner's code while it is graded: files, processes, signals, memory.

:func:`install` adds a Python audit hook (PEP 578) to the current process; it cannot be removed,
and it is inherited by forked children (the checkers' workers). From then on:

* files are written, created, renamed, deleted or re-permissioned only under ``writable``
  folders (the notebook's own scratch folder);
* nothing under ``hidden`` is opened or listed (except under ``writable`` and ``visible``): the
  other learners' submissions and grading folders, the grader's outputs and cache;
* a forked child does not fork again (the checkers' workers are the grader's only children that
  run learner code, and none outlives its check);
* no new program is started (``subprocess``, ``os.system``, ``exec``, ``posix_spawn``), no signal
  is sent to another process, and ``ctypes`` loads no library and reads no raw memory;
* with ``memory``, the address space is capped (``RLIMIT_AS``): a runaway allocation fails with
  ``MemoryError`` instead of taking the machine.

A refusal raises ``PermissionError`` naming what was refused, so the learner's notebook shows why.
What this cannot see: native code that opens files itself (a C extension's own I/O). The grader
therefore never trusts a file a notebook could reach: it writes its outputs after the notebooks
have run, and keeps each notebook's inputs in memory (see ``job.py``).
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Iterable
from pathlib import Path

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {            # event -> indices of the path arguments that must be writable
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1),
    "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.symlink": (1,),
    "os.link": (1,), "os.utime": (0,), "shutil.rmtree": (0,), "shutil.move": (0, 1),
    "shutil.copyfile": (1,), "shutil.copytree": (1,), "os.setxattr": (0,),
    "os.removexattr": (0,),
}
_LIST_EVENTS = ("os.listdir", "os.scandir", "glob.glob", "os.chdir")
_REFUSED_EVENTS = {
    "subprocess.Popen": "starting a program", "os.system": "starting a program",
    "os.exec": "starting a program", "os.posix_spawn": "starting a program",
    "os.spawn": "starting a program", "os.startfile": "starting a program",
    "pty.spawn": "starting a program",
    "os.kill": "sending a signal to another process",
    "os.killpg": "sending a signal to another process",
    "signal.pthread_kill": "sending a signal to a thread",
    "ctypes.dlopen": "loading a native library", "ctypes.dlsym": "loading a native symbol",
    "ctypes.cdata": "reading raw memory", "ctypes.cdata/buffer": "reading raw memory",
    "ctypes.string_at": "reading raw memory", "ctypes.wstring_at": "reading raw memory",
    "sys._getframe": None,       # allowed (None): listed so the table documents it
}


def _resolve(path: object) -> Path | None:
    if isinstance(path, int):            # a file descriptor: already open, nothing new
        return None
    try:
        text = os.fsdecode(path)         # str, bytes, os.PathLike
    except TypeError:
        return None
    return Path(os.path.abspath(text))


def _under(path: Path, roots: tuple[Path, ...]) -> bool:
    return any(path == r or r in path.parents for r in roots)


class Fence:
    """The rules one :func:`install` enforces (kept for tests and messages)."""

    def __init__(self, writable: Iterable[str | Path], hidden: Iterable[str | Path],
                 visible: Iterable[str | Path] = ()) -> None:
        self.writable = tuple(Path(os.path.realpath(p)) for p in writable)
        self.hidden = tuple(Path(os.path.realpath(p)) for p in hidden)
        self.visible = self.writable + tuple(Path(os.path.realpath(p)) for p in visible)
        self.owner = os.getpid()

    def _real(self, path: Path) -> Path:
        try:
            return Path(os.path.realpath(path))
        except (OSError, ValueError):
            return path

    def check_read(self, path: Path) -> None:
        real = self._real(path)
        if _under(real, self.visible):
            return
        if _under(path, self.hidden) or _under(real, self.hidden):
            raise PermissionError(f"grading: reading {path} is not allowed (another learner's "
                                  "work or the grader's own files)")

    def check_write(self, path: Path) -> None:
        self.check_read(path)
        real = self._real(path)
        if not _under(real, self.writable) and not _under(path, self.writable):
            raise PermissionError(f"grading: writing {path} is not allowed; a notebook may "
                                  "write only in its own folder")

    def __call__(self, event: str, args: tuple) -> None:
        if event == "open":
            path = _resolve(args[0]) if args else None
            if path is None:
                return
            mode = args[1] if len(args) > 1 else None
            flags = args[2] if len(args) > 2 else 0
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) \
                or bool((flags or 0) & _WRITE_FLAGS)
            (self.check_write if writes else self.check_read)(path)
        elif event in _PATH_EVENTS:
            for i in _PATH_EVENTS[event]:
                if i < len(args) and (path := _resolve(args[i])) is not None:
                    self.check_write(path)
        elif event in _LIST_EVENTS:
            if args and (path := _resolve(args[0] if args[0] is not None else ".")):
                self.check_read(path)
        elif event in ("os.kill", "os.killpg") and args and args[0] == os.getpid():
            return                          # a process may signal itself (KeyboardInterrupt)
        elif event in ("os.fork", "os.forkpty") and os.getpid() != self.owner:
            raise PermissionError("grading: a forked process may not fork again")
        elif _REFUSED_EVENTS.get(event):
            raise PermissionError(f"grading: {_REFUSED_EVENTS[event]} is not allowed "
                                  f"({event})")


def cap_memory(limit_bytes: int | None) -> None:
    """Cap this process's address space (and its children's) at ``limit_bytes``."""
    if limit_bytes:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        new = limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (new, new))


def install(writable: Iterable[str | Path], hidden: Iterable[str | Path],
            memory: int | None = None, visible: Iterable[str | Path] = ()) -> Fence:
    """Fence this process in for good (see the module docstring); returns the rules.

    ``visible``: folders under a ``hidden`` one that stay readable (the job's own folder).
    """
    fence = Fence(writable, hidden, visible)
    cap_memory(memory)
    sys.addaudithook(fence)
    return fence
