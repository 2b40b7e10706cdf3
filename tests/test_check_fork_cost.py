"""A check's worker starts without redoing what its parent already knows (issue 50).

The policy trusts the checker's own code by identity (``_policy.machinery_code``: every function
of the checker's modules). The table used to be made in each forked worker, by a walk over every
loaded module that resolved each module's file with ``os.path.realpath``: about 11,000 ``lstat``
calls and 40 ms per check in a test worker, and every module object the walk touched was a page
the fork had to copy (4,600 page faults per check, 2,600 now). Now the walk resolves only the
files named like the checker's own, and the parent makes the table just before it forks: a
softmax check took 91 ms of CPU (parent and worker), now 44 ms.
"""

from __future__ import annotations

import os
from pathlib import Path

from course_lib import exercises
from course_lib.toolkit.checking import _isolation, _policy
from course_lib.toolkit.checking._course_code import machinery_files

RIGHT = """def softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(dim=dim, keepdim=True)
"""


def _softmax():
    ns: dict = {}
    exec(RIGHT, ns)
    return ns["softmax"]


def test_the_walk_resolves_only_files_named_like_the_checkers(monkeypatch):
    files = machinery_files()
    names = {os.path.basename(f) for f in files}
    resolved: list[str] = []
    realpath = os.path.realpath

    def counting(path, *args, **kwargs):
        resolved.append(path)
        return realpath(path, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", counting)
    table = _policy.machinery_code(files)
    assert all(os.path.basename(p) in names for p in resolved), resolved[:5]
    assert len(resolved) <= len(files)
    # what the table is for: the checker's own code by identity, never a relabelled copy
    own = _isolation.run_call.__code__
    assert table.get(id(own)) is own
    assert table.get(id(_policy.install.__code__)) is _policy.install.__code__
    copy = own.replace(co_filename=_isolation.__file__)
    assert id(copy) not in table


def test_the_forked_worker_is_handed_its_parents_table(monkeypatch, tmp_path: Path):
    """Every process that makes the table writes its pid: only this one may (the worker would
    write its own), once per check."""
    made = tmp_path / "made"
    walk = _policy.machinery_code

    def noting(files):
        fd = os.open(made, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        return walk(files)

    monkeypatch.setattr(_policy, "machinery_code", noting)
    fn = _softmax()
    first = exercises.check("softmax", fn, seed=3, record=False)
    second = exercises.check("softmax", fn, seed=4, record=False)
    assert first.passed and second.passed, (first.message, second.message)
    assert made.read_text().split() == [str(os.getpid())] * 2
