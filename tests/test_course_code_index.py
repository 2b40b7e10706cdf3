"""The checker's index of the course's code, kept on disk (``_course_code.load_index``).

Compiling and fingerprinting ``course_lib`` takes about 1.5 s; every session's first check and
every grading check server paid it. The index is now kept in the package's folder with the digest
of what it was built from, and taken only when that digest is the files' own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from course_lib.toolkit.checking import _course_code as cc

MODULE = '''"""A module of a tiny package."""

KINDS = ("causal", "sliding")


def pick(kind):
    """A docstring: recognisable by content."""
    if kind in {"causal", "sliding", "document", "prefix", "chunked"}:
        return kind.upper()
    return None
'''


def _package(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "mod.py").write_text(MODULE)
    (root / "sub" / "_machinery.py").write_text("def hidden():\n    return 1\n")
    return root


def _exclude(root: Path) -> frozenset[str]:
    return frozenset({str((root / "sub" / "_machinery.py").resolve())})


def _refuse_build(monkeypatch) -> None:
    def build(*args, **kwargs):
        raise AssertionError("the index was built again")
    monkeypatch.setattr(cc, "build_index", build)


def test_the_index_is_written_once_and_read_back_equal(tmp_path, monkeypatch):
    root = _package(tmp_path)
    built = cc.build_index(root, _exclude(root))
    assert cc.load_index(root, _exclude(root)) == built
    data = json.loads((root / cc.INDEX_FILE).read_text())
    assert data["digest"] == cc.index_digest(root, _exclude(root))
    assert (root / cc.INDEX_FILE).stat().st_mode & 0o777 == 0o644
    _refuse_build(monkeypatch)
    again = cc.load_index(root, _exclude(root))
    assert again == built
    assert any("sub.mod.pick" in q for names in again.names.values() for q in names)
    assert not any("hidden" in q for names in again.names.values() for q in names)


def test_a_changed_file_or_a_damaged_index_is_built_again(tmp_path):
    root = _package(tmp_path)
    cc.load_index(root, _exclude(root))
    (root / "sub" / "mod.py").write_text(MODULE + "\n\ndef added(x):\n    '''New.'''\n"
                                         "    return x\n")
    index = cc.load_index(root, _exclude(root))
    assert any(q.endswith("sub.mod.added") for names in index.names.values() for q in names)
    # an index claiming other files' digest, or no JSON at all, is not taken
    data = json.loads((root / cc.INDEX_FILE).read_text())
    forged = {**data, "digest": "0" * 64, "names": {}}
    (root / cc.INDEX_FILE).write_text(json.dumps(forged))
    assert cc.load_index(root, _exclude(root)).names == index.names
    (root / cc.INDEX_FILE).write_text("{ not json")
    assert cc.load_index(root, _exclude(root)).names == index.names
    assert json.loads((root / cc.INDEX_FILE).read_text())["digest"] == data["digest"]


def test_a_read_only_package_is_indexed_in_memory(tmp_path, monkeypatch):
    """As in the grading sandbox, whose copy of the package is mounted read-only (the tests run
    as root here, so the folder's mode would not stop the write: the refusal is simulated)."""
    root = _package(tmp_path)
    built = cc.build_index(root, _exclude(root))

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(cc.tempfile, "mkstemp", read_only)
    assert cc.load_index(root, _exclude(root)) == built
    assert not [p for p in root.iterdir() if p.name.startswith(cc.INDEX_FILE)]


def test_a_failed_write_leaves_no_file_behind(tmp_path, monkeypatch):
    root = _package(tmp_path)
    built = cc.build_index(root, _exclude(root))

    def refuse(src, dst):
        raise PermissionError(dst)
    monkeypatch.setattr(cc.os, "replace", refuse)
    assert cc.load_index(root, _exclude(root)) == built
    assert not [p for p in root.iterdir() if p.name.startswith(cc.INDEX_FILE)]


def test_fingerprints_are_the_same_under_any_string_hash(tmp_path):
    """A set literal compiles to a frozenset constant whose order follows the string hash: the
    fingerprint sorts its members, so an index written by one process holds in the next."""
    root = _package(tmp_path)
    # the module alone (standard library only): no torch to import in each process
    code = ("import sys, hashlib, importlib.util\nfrom pathlib import Path\n"
            f"spec = importlib.util.spec_from_file_location('cc', {cc.__file__!r})\n"
            "cc = sys.modules['cc'] = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(cc)\n"
            "root = Path(sys.argv[1])\n"
            "ex = frozenset({str((root / 'sub' / '_machinery.py').resolve())})\n"
            "print(hashlib.sha256(cc._to_json(cc.build_index(root, ex), '').encode())"
            ".hexdigest())\n")
    digests = set()
    for seed in ("1", "2", "3"):
        out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True,
                             text=True, env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests


def test_the_installed_package_index_matches_a_fresh_build(monkeypatch):
    root = cc.PACKAGE.resolve()
    exclude = frozenset(str(Path(f).resolve()) for f in cc.machinery_files())
    fresh = cc.build_index(root, exclude)
    assert cc.package_index(root) == fresh
    assert cc.course_code() == fresh


def test_the_grading_copy_of_the_package_carries_its_index(tmp_path, monkeypatch):
    from course_lib.toolkit.grading import sandbox

    copy = sandbox.learner_copy(tmp_path)
    assert (copy / cc.INDEX_FILE).is_file()
    index = cc.package_index(copy)
    # the copy's own code: no exercises module (the cases, oracles, solutions) in it
    assert not any(".exercises" in q for names in index.names.values() for q in names)
    assert any(".exercises" in q for names in cc.course_code().names.values() for q in names)
    _refuse_build(monkeypatch)
    assert cc.package_index(copy) == index


def test_the_grading_copy_is_named_by_the_course_not_by_its_index(tmp_path):
    """The copy's folder is named by the package's files; the package's own index (which also
    names the exercises modules' functions) is neither copied nor part of that name."""
    from course_lib.toolkit.grading import sandbox

    cc.course_code()
    assert (cc.PACKAGE / cc.INDEX_FILE).is_file()
    files = sandbox._learner_files()
    assert not [p for p in files if p.name.startswith(cc.INDEX_FILE)]
    copy = sandbox.learner_copy(tmp_path)
    data = json.loads((copy / cc.INDEX_FILE).read_text())
    assert data["digest"] == cc.index_digest(copy.resolve(), frozenset(
        str(p.resolve()) for p in (copy / "toolkit" / "checking").glob("_*.py")
        if p.name != "__init__.py"))
