"""The OS sandbox a learner's code runs in while it is graded (bubblewrap, Linux).

Every program that runs learner code during grading (the notebook's kernel, each check's worker)
starts as ``bwrap ... python ...`` (:func:`command`): new user, PID, network, IPC, UTS and
cgroup namespaces (``--unshare-all``: no network at all), its own session (``--new-session``:
no terminal to inject into), no capabilities, and it dies with the grader (``--die-with-parent``;
when the namespace's first process dies the kernel kills every process in it, so nothing a
notebook started outlives it). The file system it sees is built from nothing:

* read-only: the system's programs and libraries (``/usr``, ``/lib*``, ``/bin``), the Python
  installation and environment the grader runs in, and a *learner copy* of ``course_lib``
  (:func:`learner_copy`: the package without any chapter's ``exercises.py``, which hold the
  cases, oracles, mistakes and solutions), mounted where ``course_lib`` is;
* writable: one private scratch folder of the job (``/grading``), a fresh ``/tmp`` (a ``tmpfs``
  capped at the disk limit), and nothing else;
* not there at all: the instructor's home and files, other submissions, the gradebook, the
  cache, the grading seed and the course's solutions.

Limits per notebook, not per process (:class:`TreeWatch`): the resident memory of the whole
process tree and its number of processes, polled every 50 ms, end the sandbox when exceeded;
each process also has an address-space cap and a file-size cap (``RLIMIT_AS``,
``RLIMIT_FSIZE``), and the kernel's output and time are capped by ``job.py``. cgroups would
enforce memory and process counts exactly; they are not used (version 1 and not delegated to
users on the machines this was built on), so a burst of processes faster than one poll can exist
for up to 50 ms before the sandbox is ended.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

#: The Debian/Ubuntu (and Fedora, Arch) package that provides ``bwrap``.
PACKAGE = "bubblewrap"
#: Where the job's scratch folder appears inside the sandbox (the same path for every job, so
#: nothing a notebook can read differs between two byte-identical notebooks).
INSIDE = "/grading"
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf", "/etc/mime.types")
#: What the sandbox sees instead of the host's user and host tables (nothing of the machine's
#: accounts or network names to echo into feedback): the sandbox's own user and the loopback.
_ETC_WRITTEN = {
    "/etc/passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                   f"nobody:x:65534:65534:nobody:{INSIDE}/home:/usr/sbin/nologin\n",
    "/etc/group": "root:x:0:\nnogroup:x:65534:\n",
    "/etc/hosts": "127.0.0.1 localhost grading\n::1 localhost\n",
}


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces on this machine."""


@dataclass(frozen=True)
class Limits:
    """Per notebook: ``memory`` (bytes, the process tree's resident total), ``processes``,
    ``disk`` (bytes written to ``/tmp`` and the scratch folder), ``output`` (bytes of cell
    output kept), ``threads`` (of all its processes together)."""

    memory: int = 4 * 1024 ** 3
    processes: int = 32
    disk: int = 256 * 1024 ** 2
    output: int = 2 * 1024 ** 2
    threads: int = 256


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


_CHECKED: dict[str, str | None] = {}


def unavailable_reason() -> str | None:
    """``None`` if bubblewrap works here; else why not, naming the package to install."""
    if "reason" in _CHECKED:
        return _CHECKED["reason"]
    bwrap = find_bwrap()
    if bwrap is None:
        reason = (f"grading runs each notebook in an OS sandbox, and `bwrap` is not installed: "
                  f"install the `{PACKAGE}` package (Debian/Ubuntu: `sudo apt-get install "
                  f"{PACKAGE}`), or pass --no-sandbox for notebooks you trust (yours).")
    else:
        probe = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/",
                                "/", "true"], capture_output=True, text=True, timeout=60)
        reason = None if probe.returncode == 0 else (
            f"`bwrap` cannot create a sandbox on this machine ({probe.stderr.strip()}): "
            "unprivileged user namespaces may be disabled (sysctl "
            "kernel.unprivileged_userns_clone / user.max_user_namespaces); see README "
            "\"For instructors\" for the container recipe, or pass --no-sandbox for notebooks "
            "you trust.")
    _CHECKED["reason"] = reason
    return reason


def course_package() -> Path:
    """The ``course_lib`` package directory this grader runs."""
    return Path(__file__).resolve().parents[2]


def _learner_files() -> list[Path]:
    """The package's files a learner copy holds: not the exercises modules, caches, or the
    checker's index of the whole package (the copy gets its own: :func:`_index`)."""
    from ..checking._course_code import INDEX_FILE

    ignore = ("__pycache__",)
    return sorted(p for p in course_package().rglob("*") if p.is_file()
                  and not any(part in ignore for part in p.parts)
                  and p.name != "exercises.py" and p.suffix not in (".pyc", ".sqlite3")
                  and not p.name.startswith(INDEX_FILE))


def _index(package: Path) -> None:
    """Write the checker's index of ``package``'s code into it (``checking._course_code``)."""
    from ..checking._course_code import package_index

    package_index(package)


def learner_copy(dest: Path | None = None) -> Path:
    """The package as learners' code may see it (no ``exercises.py``), as ``course_lib``.

    Every chapter keeps its helpers, plots, explorer and data (its notebook runs them); what
    grading keeps out of reach are the exercises modules: the cases, oracles, declared mistakes
    and reference solutions. With ``dest``, the copy is made there; without, it is kept in a
    folder named by its content (``/tmp/course-lib-learner-<sha256>``, reused while the course
    is unchanged), so the path a sandbox's mount table shows is the same for every job and run
    and names none of the grader's folders. A folder of that name that is not this user's,
    or is writable by others, is not used."""
    root = course_package()
    files = _learner_files()
    if dest is not None:
        target = Path(dest) / "course_lib"
        for path in files:
            (target / path.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / path.relative_to(root))
        # The checker's index of the copy's code, made here: the sandbox mounts the copy
        # read-only, so each check server would otherwise compile the package (about 1.5 s).
        _index(target)
        # Its bytecode too, for the same reason: Python in the sandbox writes none
        # (PYTHONDONTWRITEBYTECODE), so each kernel and check server compiled the 60-70
        # modules a chapter imports again: 0.27 s of CPU per process (0.3 s once, here).
        import compileall

        compileall.compile_dir(target, quiet=2)
        return target
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    base = Path("/tmp") if os.access("/tmp", os.W_OK) else Path(tempfile.gettempdir())
    home = base / f"course-lib-learner-{digest.hexdigest()[:32]}"
    try:
        info = os.lstat(home)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() \
                and not info.st_mode & 0o022 and (home / "course_lib" / ".complete").is_file():
            _index(home / "course_lib")     # a copy made before the index was kept
            return home / "course_lib"
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            shutil.rmtree(home, ignore_errors=True)      # an unfinished copy of ours
        else:
            return learner_copy(Path(tempfile.mkdtemp(prefix="course-lib-learner-")))
    except FileNotFoundError:
        pass
    building = Path(tempfile.mkdtemp(prefix=f"{home.name}.", dir=base))
    target = learner_copy(building)
    (target / ".complete").write_text("")
    try:
        os.rename(building, home)          # atomic: a reader sees no half-made copy
    except OSError:                        # another grader made it first, or it is not ours
        shutil.rmtree(building, ignore_errors=True)
        done = home / "course_lib" / ".complete"
        if not (done.is_file() and os.lstat(home).st_uid == os.getuid()):
            return learner_copy(Path(tempfile.mkdtemp(prefix="course-lib-learner-")))
    return home / "course_lib"


def _tables() -> Path:
    """The folder of the sandbox's own ``passwd``, ``group`` and ``hosts``
    (:data:`_ETC_WRITTEN`), named by their content (``/tmp/course-lib-etc-<sha256>``): what a
    sandbox's mount table shows of it is the same for every job and names none of the grader's
    folders. A folder of that name that is not this user's or is writable by others is not
    used (a fresh one is made)."""
    digest = hashlib.sha256(repr(sorted(_ETC_WRITTEN.items())).encode()).hexdigest()[:32]
    base = Path("/tmp") if os.access("/tmp", os.W_OK) else Path(tempfile.gettempdir())
    home = base / f"course-lib-etc-{digest}"
    try:
        info = os.lstat(home)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() \
                and not info.st_mode & 0o022 and all(
                    (home / Path(d).name).read_text() == t for d, t in _ETC_WRITTEN.items()):
            return home
        home = Path(tempfile.mkdtemp(prefix="course-lib-etc-"))
    except FileNotFoundError:
        pass
    except OSError:
        home = Path(tempfile.mkdtemp(prefix="course-lib-etc-"))
    building = Path(tempfile.mkdtemp(prefix=f"{home.name}.", dir=home.parent))
    for dest, text in _ETC_WRITTEN.items():
        (building / Path(dest).name).write_text(text)
        os.chmod(building / Path(dest).name, 0o644)
    os.chmod(building, 0o755)
    try:
        os.rename(building, home)       # atomic: a reader sees no half-made folder
    except OSError:                     # another grader made it first
        remove_tree(building)
        return home if home.is_dir() and os.lstat(home).st_uid == os.getuid() else \
            _fresh_tables()
    return home


def _fresh_tables() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="course-lib-etc-"))
    for dest, text in _ETC_WRITTEN.items():
        (folder / Path(dest).name).write_text(text)
    os.chmod(folder, 0o755)
    return folder


def _python_roots() -> list[str]:
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    roots.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    return sorted(roots)


def command(argv: list[str], *, scratch: Path | None, course: Path, limits: Limits,
            env: dict[str, str], extra_ro: list[tuple[str, str]] = (),
            writable: bool = True, args_dir: Path | None = None) -> list[str]:
    """The command that runs ``argv`` in the sandbox described above.

    ``scratch``: the job's folder, mounted at :data:`INSIDE` (read-only unless ``writable``);
    ``None``: a fresh ``tmpfs`` there instead, so nothing of the grader's folders is mounted
    (the checks: their files come over a pipe). ``course``: the learner copy, mounted where this
    grader's ``course_lib`` is; ``env``: the whole environment inside (nothing else is
    passed); ``extra_ro``: more ``(source, destination)`` read-only mounts.

    bubblewrap's own arguments (which name the grader's folders) are not on its command line,
    which the sandbox's first process shows in ``/proc/1/cmdline`` (only ``argv`` is): they
    are written to a file in ``args_dir`` (default: the scratch folder's parent) and reach
    bubblewrap on a file descriptor it closes once read (``--args 3``; standard input is
    ``/dev/null``); and bubblewrap starts with an empty environment (``env -i``), which
    ``/proc/1/environ`` would show. The shell ``exec``s ``env``, which ``exec``s bubblewrap:
    bubblewrap is the caller's own child, so ``--die-with-parent`` ends the sandbox when the
    caller dies (a shell left in between, waiting on a pipe, kept the sandbox running after its
    grader was killed)."""
    bwrap = find_bwrap()
    if bwrap is None:
        raise SandboxUnavailable(unavailable_reason() or "bwrap is missing")
    opts = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", "65534", "--gid", "65534", "--hostname", "grading",
            # First: the mounts below may lie under /tmp (a virtual environment in a clone
            # under /tmp, the learner copy), and a tmpfs mounted later would hide them.
            "--proc", "/proc", "--dev", "/dev", "--size", str(limits.disk), "--tmpfs", "/tmp"]
    for root in _SYSTEM:
        if os.path.isdir(root):
            opts += ["--ro-bind", root, root]
    for path in _ETC:
        if os.path.exists(path):
            opts += ["--ro-bind", path, path]
    folder = Path(args_dir) if args_dir is not None else Path(scratch or ".").parent
    folder.mkdir(parents=True, exist_ok=True)
    tables = _tables()
    for dest in sorted(_ETC_WRITTEN):
        opts += ["--ro-bind", str(tables / Path(dest).name), dest]
    for root in _python_roots():
        opts += ["--ro-bind", root, root]
    opts += ["--ro-bind", str(course), str(course_package())]
    for src, dst in extra_ro:
        opts += ["--ro-bind", src, dst]
    if scratch is None:
        opts += ["--size", str(limits.disk), "--tmpfs", INSIDE]
    else:
        opts += ["--bind" if writable else "--ro-bind", str(scratch), INSIDE]
    opts += ["--chdir", INSIDE, "--clearenv"]
    for k, v in sorted(env.items()):
        opts += ["--setenv", k, v]
    fd, args_file = tempfile.mkstemp(prefix=".bwrap-args-", dir=folder)
    with os.fdopen(fd, "wb") as f:
        f.write(b"".join(os.fsencode(a) + b"\0" for a in opts))
    env_bin = shutil.which("env") or "/usr/bin/env"
    script = 'f=$1 e=$2 b=$3; shift 3; exec "$e" -i "$b" --args 3 -- "$@" 3<"$f" </dev/null'
    return ["/bin/sh", "-c", script, "sh", args_file, env_bin, bwrap, *argv]


_IMPORTS_CHECKED: dict[tuple[str, str], str | None] = {}


def import_problem(course: Path, python: str = sys.executable, timeout: float = 300.0
                   ) -> str | None:
    """``None`` if ``course_lib`` (the learner copy ``course``) and torch import inside the
    sandbox, else what went wrong, in words: the grader says so at start rather than letting
    every notebook "crash" (a ``course_lib`` importable only through ``PYTHONPATH``, which the
    sandbox clears; a virtual environment outside the mounted Python roots). Checked once per
    course copy and interpreter in this process."""
    key = (str(course), python)
    if key in _IMPORTS_CHECKED:
        return _IMPORTS_CHECKED[key]
    folder = Path(tempfile.mkdtemp(prefix="course-lib-probe-"))
    problem: str | None = None
    try:
        argv = command([python, "-c", "import course_lib, torch; print('ok')"], scratch=None,
                       course=course, limits=Limits(), env=inside_env(home="/tmp"),
                       args_dir=folder)
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout, start_new_session=True)
            if proc.returncode != 0 or proc.stdout.strip() != b"ok":
                last = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
                problem = (f"course_lib does not import inside the grading sandbox (exit "
                           f"{proc.returncode}: {last[0][:300]}). The sandbox sees only the "
                           f"Python installation ({', '.join(_python_roots())}) and the course "
                           "copy; install course_lib into that environment (pip install -e .) "
                           "rather than through PYTHONPATH, which the sandbox clears.")
        except subprocess.TimeoutExpired:
            problem = f"importing course_lib inside the grading sandbox took over {timeout:g} s"
    except (OSError, SandboxUnavailable) as e:
        problem = f"the grading sandbox could not start: {e}"
    finally:
        remove_tree(folder)
    _IMPORTS_CHECKED[key] = problem
    return problem


def inside_env(extra: dict[str, str] | None = None, home: str = INSIDE) -> dict[str, str]:
    """The environment of a sandboxed program: nothing of the grader's (no tokens, no paths).
    ``home``: the writable folder that holds its home and caches (``/tmp`` for the checks)."""
    env = {
        "HOME": f"{home}/home", "TMPDIR": "/tmp", "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "agg", "MPLCONFIGDIR": f"{home}/mpl", "IPYTHONDIR": f"{home}/ipython",
        "JUPYTER_CONFIG_DIR": f"{home}/jupyter", "JUPYTER_DATA_DIR": f"{home}/jupyter",
        "TRITON_CACHE_DIR": f"{home}/triton", "TRITON_INTERPRET": "1",
        "COURSE_LIB_PROGRESS": f"{home}/progress/progress.sqlite3",
        "COURSE_LIB_GRADING": "1", "OMP_NUM_THREADS": "1",
    }
    env.update(extra or {})
    return env


def prepare_scratch(scratch: Path) -> None:
    for sub in ("home", "mpl", "ipython", "jupyter", "triton", "progress"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)


def set_limits(memory: int, disk: int) -> None:
    """Per-process caps, set inside the sandbox before learner code runs (address space: the
    tree's cap; the largest file: the disk cap)."""
    import resource

    for which, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_FSIZE, disk),
                         (resource.RLIMIT_CORE, 0)):
        try:
            soft, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass


# --------------------------------------------------------------------------- per-tree limits


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    kids, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(kids.get(pid, ()))
    return found


def resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def thread_count(pid: int) -> int:
    """The threads of process ``pid`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read().decode("ascii", "replace")
        return int(stat_line[stat_line.rindex(")") + 2:].split()[17])
    except (OSError, ValueError, IndexError):
        return 0


def folder_bytes(folder: Path, most: int = 10_000) -> int:
    """Bytes the files below ``folder`` take on disk; a folder of over ``most`` entries counts
    as over any limit (walking it would take longer than a poll). Iterative (a learner's
    1100-deep chain of folders is walked like a flat one) and never follows a link."""
    total, seen, todo = 0, 0, [os.fspath(folder)]
    while todo:
        here = todo.pop()
        try:
            with os.scandir(here) as entries:
                for entry in entries:
                    seen += 1
                    if seen > most:
                        return sys.maxsize
                    try:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                        if entry.is_dir(follow_symlinks=False):
                            todo.append(entry.path)
                    except OSError:
                        pass
        except OSError:
            pass
    return total


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) \
    | getattr(os, "O_CLOEXEC", 0)


def remove_tree(path: str | os.PathLike[str], most: int = 2_000_000) -> str | None:
    """Remove ``path`` and everything below it; never raises. Returns ``None``, or what was left
    and why. Iterative and by directory descriptor (one open at a time, names relative to it):
    a chain of folders deeper than Python's recursion limit or longer than ``PATH_MAX`` goes like
    any other, a folder a learner made unreadable is made readable first, and links are removed,
    never followed. ``most``: the operations allowed (a bound, not a guess at the size)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{os.fsdecode(path)}: {e.strerror}"
    try:
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(path)
            return None
        fd = os.open(path, _DIR_FLAGS)
    except OSError as e:
        return f"{os.fsdecode(path)}: {e.strerror}"
    names: list[str] = []              # the folders below ``path`` we are in, by name
    skipped: list[set[str]] = [set()]  # per level: names that could not be removed
    left = None
    try:
        for _ in range(most):
            sub = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.name in skipped[-1]:
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            sub = entry.name
                            break
                        os.unlink(entry.name, dir_fd=fd)
                    except OSError as e:
                        skipped[-1].add(entry.name)
                        left = f"{entry.name}: {e.strerror}"
            if sub is not None:
                try:
                    child = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                except PermissionError:
                    try:
                        os.chmod(sub, 0o700, dir_fd=fd)
                        child = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                    except OSError as e:
                        skipped[-1].add(sub)
                        left = f"{sub}: {e.strerror}"
                        continue
                except OSError as e:
                    skipped[-1].add(sub)
                    left = f"{sub}: {e.strerror}"
                    continue
                os.close(fd)
                fd = child
                names.append(sub)
                skipped.append(set())
                continue
            if not names:               # back at the top, and it is empty (or what is left)
                break
            parent = os.open("..", _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
            os.close(fd)
            fd = parent
            name = names.pop()
            left_below = skipped.pop()
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError as e:
                skipped[-1].add(name)
                if not left_below:
                    left = f"{name}: {e.strerror}"
        else:
            left = left or f"over {most} operations"
    except BaseException as e:   # never raises: what is left is said
        left = f"{type(e).__name__}: {e}"
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    if not names and not skipped[0] and left is None:
        try:
            os.rmdir(path)
        except OSError as e:
            left = e.strerror
    return None if left is None else f"{os.fsdecode(path)}: not all removed ({left})"


class TreeWatch:
    """Ends a sandbox (SIGKILL to its process group) whose processes together hold more than
    ``limits.memory`` resident bytes or number more than ``limits.processes``, or whose
    ``folder`` (its writable scratch folder, which no ``tmpfs`` caps) holds more than
    ``limits.disk`` bytes; ``reason`` then says which. Use as a context manager around the
    sandbox's life."""

    def __init__(self, root: int, limits: Limits, interval: float = 0.05,
                 folder: Path | None = None) -> None:
        self.root, self.limits, self.interval, self.folder = root, limits, interval, folder
        self.reason: str | None = None
        self.peak_memory = 0
        self.peak_processes = 0
        self.peak_threads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        """Poll until stopped; fails closed: an error here ends the sandbox, with the reason."""
        try:
            self._poll()
        except BaseException as e:
            self.reason = (f"its limits could no longer be watched ({type(e).__name__}), "
                           "so it was ended")
            kill_tree(self.root)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            pids = tree(self.root)
            memory = sum(resident_bytes(p) for p in pids)
            threads = sum(thread_count(p) for p in pids)
            self.peak_memory = max(self.peak_memory, memory)
            self.peak_processes = max(self.peak_processes, len(pids))
            self.peak_threads = max(self.peak_threads, threads)
            if memory > self.limits.memory:
                self.reason = (f"its processes held {memory / 1024 ** 3:.2f} GiB together "
                               f"(limit {self.limits.memory / 1024 ** 3:g} GiB)")
            elif len(pids) > self.limits.processes + 3:   # + sh, bwrap, its namespace's init
                self.reason = (f"it ran {len(pids) - 3} processes at once "
                               f"(limit {self.limits.processes})")
            elif threads > self.limits.threads + 3:
                self.reason = (f"it ran {threads - 3} threads at once "
                               f"(limit {self.limits.threads})")
            elif self.folder is not None and \
                    (used := folder_bytes(self.folder)) > self.limits.disk:
                self.reason = (f"it wrote {used / 1024 ** 2:.0f} MiB to its folder" if
                               used < sys.maxsize else "it made over 10000 files in its folder") \
                    + f" (limit {self.limits.disk / 1024 ** 2:g} MiB)"
            if self.reason:
                kill_tree(self.root)
                return


def kill_tree(root: int) -> None:
    """SIGKILL ``root``'s process group (bwrap started in a session of its own) and every
    process still below it (the sandbox's PID namespace dies with its first process)."""
    pids = tree(root)
    try:
        os.killpg(root, signal.SIGKILL)
    except OSError:
        pass
    for pid in reversed(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def wait_gone(pids: list[int], limit: float = 5.0) -> bool:
    """Whether every pid in ``pids`` is gone within ``limit`` seconds (zombies count as gone)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    state = f.read().decode("ascii", "replace")
                if state[state.rindex(")") + 2] != "Z":
                    alive.append(pid)
            except (OSError, ValueError, IndexError):
                pass
        if not alive:
            return True
        time.sleep(0.05)
    return False
