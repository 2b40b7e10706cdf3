"""Recognise the course's own code by what it is, not by the file name it claims.

A code object's ``co_filename`` is the learner's to choose (``f.__code__.replace(co_filename=...)``,
``exec(compile(inspect.getsource(f), "<x>", "exec"))``, ``marshal.loads(marshal.dumps(code))``,
``types.FunctionType(code, {})``): all of these keep the bytecode, the constants and the names.
So every ``.py`` file of the ``course_lib`` package (except the checker's own machinery) is
compiled once per session, and each code object in it (functions, lambdas, methods, class and
module bodies, recursively) gets a :func:`fingerprint` of its content: instructions (normalised
where the compiler's output depends on the surrounding module), constants (nested code objects
by their own fingerprint), names, argument counts. File name, line numbers, ``co_name`` and
``co_qualname`` are left out, so a relabelled, renamed, recompiled or marshalled copy has the
fingerprint of the original.

Not every match is a copy: a learner may write, independently, the same one-line body as a
small course function (the oracle ``torch.ones(n, n, dtype=torch.bool).tril()``, a declared
mistake). So a code object is *recognisable* by content only if it carries a docstring (nobody
retypes the course's docstring by chance) or has at least :data:`MIN_INSTRUCTIONS` instructions.
Smaller ones are still refused when called directly (by their file, as before); a relabelled
copy of a one-liner gives the learner nothing they could not type.
"""

from __future__ import annotations

import dis
import functools
import hashlib
import json
import os
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path

#: A code object without a docstring is recognised by content from this many instructions on.
MIN_INSTRUCTIONS = 40


def _const(c: object, memo: dict[int, bytes]) -> bytes:
    if isinstance(c, types.CodeType):
        return b"C" + fingerprint(c, memo)
    if isinstance(c, (tuple, frozenset)):
        # a frozenset's repr follows the string hash, which differs between processes
        # (PYTHONHASHSEED): its members are taken in sorted order, so a fingerprint is the same
        # in every process and an index can be kept on disk (INDEX_FILE)
        parts = [_const(x, memo) for x in c]
        body = b",".join(sorted(parts) if isinstance(c, frozenset) else parts)
        return b"T(" + body + b")" if isinstance(c, tuple) else b"S(" + body + b")"
    return b"K" + repr((type(c).__name__, c)).encode("utf-8", "backslashreplace")


_CACHE = dis.opmap.get("CACHE", -1)
_EXTENDED = dis.opmap["EXTENDED_ARG"]
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
_LOAD_GLOBAL = dis.opmap["LOAD_GLOBAL"]
_LOAD_ATTR = dis.opmap["LOAD_ATTR"]
_LOAD_METHOD = dis.opmap.get("LOAD_METHOD", -1)
_ATTR_FLAG = sys.version_info >= (3, 12)       # LOAD_ATTR's low bit: "push a method"


def _instructions(code: types.CodeType) -> tuple[bytes, int]:
    """The instruction stream (and its length), normalised where the compiler's choice depends
    on the module around the function: CPython 3.11 emits ``LOAD_GLOBAL NULL + math;
    LOAD_ATTR sqrt`` for a module imported at the top of the file and ``LOAD_GLOBAL math;
    LOAD_METHOD sqrt`` otherwise. Cache entries (their sizes differ) and jump targets are left
    out; the rest of the stream pins the code down."""
    raw = code.co_code
    out = bytearray()
    n = 0
    ext = 0
    for k in range(0, len(raw), 2):
        op, arg = raw[k], raw[k + 1] | ext
        if op == _CACHE:
            continue
        if op == _EXTENDED:
            ext = arg << 8
            continue
        ext = 0
        n += 1
        if op == _LOAD_METHOD:
            op = _LOAD_ATTR
        elif op == _LOAD_GLOBAL or (op == _LOAD_ATTR and _ATTR_FLAG):
            arg >>= 1
        if op in _JUMPS:
            arg = 0
        out += op.to_bytes(1, "little") + arg.to_bytes(4, "little")
    return bytes(out), n


def fingerprint(code: types.CodeType, _memo: dict[int, bytes] | None = None) -> bytes:
    """A digest of ``code``'s content; independent of file, lines, name and qualified name."""
    memo = {} if _memo is None else _memo
    key = id(code)
    if key in memo:
        return memo[key]
    h = hashlib.blake2b(digest_size=16)
    h.update(_instructions(code)[0])
    for c in code.co_consts:      # the docstring (never loaded) among them
        h.update(_const(c, memo))
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                   code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount)
                  ).encode("utf-8", "backslashreplace"))
    memo[key] = h.digest()
    return memo[key]


def _has_docstring(code: types.CodeType) -> bool:
    """A function, class or module body whose first constant is its docstring (CPython 3.11+:
    a function without one has ``None`` there; a lambda or comprehension never has one)."""
    return (not code.co_name.startswith("<") or code.co_name == "<module>") \
        and bool(code.co_consts) and isinstance(code.co_consts[0], str)


def _size(code: types.CodeType) -> int:
    return _instructions(code)[1]


@dataclass
class CourseCode:
    """The fingerprints of the course's code: ``names`` maps each to its qualified names."""

    names: dict[bytes, tuple[str, ...]] = field(default_factory=dict)
    recognisable: frozenset[bytes] = frozenset()
    modules: frozenset[bytes] = frozenset()
    #: :func:`shape` of every recognisable code object: a cheap first test (no hashing)
    shapes: frozenset[tuple[object, ...]] = frozenset()


def shape(code: types.CodeType) -> tuple[object, ...]:
    """What a copy keeps and a hash is not needed to compare: names and argument count."""
    return (code.co_names, code.co_varnames, code.co_argcount)


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _walk(code: types.CodeType, prefix: str, out: list[tuple[types.CodeType, str]]) -> None:
    out.append((code, prefix))
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _walk(c, prefix, out)


def build_index(root: Path, exclude: frozenset[str]) -> CourseCode:
    """Compile every ``.py`` under ``root`` except the files in ``exclude`` (resolved paths)."""
    names: dict[bytes, set[str]] = {}
    recognisable: set[bytes] = set()
    modules: set[bytes] = set()
    shapes: set[tuple[object, ...]] = set()
    for path in sorted(root.rglob("*.py")):
        if str(path.resolve()) in exclude:
            continue
        try:
            source = path.read_bytes()
        except OSError:
            continue
        module = _module_name(path, root)
        # optimize=2 as well: the same code with its docstrings and asserts stripped
        for optimize in (0, 2):
            try:
                top = compile(source, str(path), "exec", dont_inherit=True, optimize=optimize)
            except (SyntaxError, ValueError):
                break
            found: list[tuple[types.CodeType, str]] = []
            _walk(top, module, found)
            memo: dict[int, bytes] = {}
            for code, mod in found:
                fp = fingerprint(code, memo)
                qual = mod if code.co_name == "<module>" else f"{mod}.{code.co_qualname}"
                names.setdefault(fp, set()).add(qual)
                if code.co_name == "<module>":
                    modules.add(fp)
                if _has_docstring(code) or _size(code) >= MIN_INSTRUCTIONS:
                    recognisable.add(fp)
                    shapes.add(shape(code))
    return CourseCode(names={k: tuple(sorted(v)) for k, v in names.items()},
                      recognisable=frozenset(recognisable), modules=frozenset(modules),
                      shapes=frozenset(shapes))


#: The ``course_lib`` package's folder (this file is ``course_lib/toolkit/checking/...``).
PACKAGE = Path(__file__).parents[2]

#: The index of a package, kept in the package's own folder (beside ``__pycache__``, and like it
#: skipped where the folder is read-only) with the digest of what it was built from.
INDEX_FILE = ".course-code-index.json"


def index_digest(root: Path, exclude: frozenset[str]) -> str:
    """What :func:`build_index` depends on: the Python that compiles (bytecode differs between
    versions), this module's own source (how code is fingerprinted) and every indexed file, by
    its path in the package and its bytes. Reading and hashing take milliseconds; compiling and
    fingerprinting the package take about 1.5 s (29,000 lines, twice)."""
    h = hashlib.sha256()
    h.update(f"{sys.version}\0{sys.implementation.cache_tag}\0{MIN_INSTRUCTIONS}\0".encode())
    h.update(Path(__file__).read_bytes() + b"\0")
    for path in sorted(root.rglob("*.py")):
        if str(path.resolve()) in exclude:
            continue
        try:
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes()
                     + b"\0")
        except OSError:
            h.update(path.relative_to(root).as_posix().encode() + b"\0unreadable\0")
    return h.hexdigest()


def _to_json(index: CourseCode, digest: str) -> str:
    return json.dumps({
        "digest": digest,
        "names": {fp.hex(): list(qual) for fp, qual in sorted(index.names.items())},
        "recognisable": sorted(fp.hex() for fp in index.recognisable),
        "modules": sorted(fp.hex() for fp in index.modules),
        "shapes": sorted([list(names), list(varnames), argc]
                         for names, varnames, argc in index.shapes)})


def _from_json(data: dict) -> CourseCode:
    return CourseCode(
        names={bytes.fromhex(k): tuple(v) for k, v in data["names"].items()},
        recognisable=frozenset(bytes.fromhex(k) for k in data["recognisable"]),
        modules=frozenset(bytes.fromhex(k) for k in data["modules"]),
        shapes=frozenset((tuple(a), tuple(b), int(c)) for a, b, c in data["shapes"]))


def load_index(root: Path, exclude: frozenset[str]) -> CourseCode:
    """:func:`build_index` of ``root``, taken from ``root``'s :data:`INDEX_FILE` when that was
    built from the same files by the same Python and fingerprinting (its digest says so), else
    built and written there for the next session (atomically; not at all where ``root`` is
    read-only, as in the grading sandbox, whose copy of the package the grader indexed when it
    made it: ``grading.sandbox.learner_copy``).

    The file is as trusted as the package's own files beside it: whoever can write it can edit
    the course's code itself (out of the self-study checks' scope; the grading sandbox mounts the
    package read-only)."""
    digest = index_digest(root, exclude)
    path = root / INDEX_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("digest") == digest:
            return _from_json(data)
    except (OSError, ValueError, KeyError, TypeError):
        pass                         # missing, unreadable or damaged: built again below
    index = build_index(root, exclude)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=INDEX_FILE + ".", dir=root)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_to_json(index, digest))
        os.chmod(tmp, 0o644)              # readable as the package's other files are
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass                         # a read-only package: built in every session
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return index


def package_index(root: Path) -> CourseCode:
    """The index of the ``course_lib`` package at ``root`` (this one, or a copy of it), without
    the checker's own machinery files there: what :func:`course_code` gives a session that
    imported the package from ``root``."""
    here = Path(root) / Path(__file__).parent.relative_to(PACKAGE)
    return load_index(Path(root).resolve(),
                      frozenset(str(p.resolve()) for p in _machinery_modules(here)))


def _machinery_modules(folder: Path) -> list[Path]:
    """The checker's own modules in ``folder``: its ``_*.py`` files but ``__init__.py``."""
    return [p for p in folder.glob("_*.py") if p.name != "__init__.py"]


def _both(path: Path) -> tuple[str, ...]:
    return tuple({str(path), str(path.resolve())})


@functools.lru_cache(maxsize=1)
def course_dirs() -> tuple[str, ...]:
    """The ``course_lib`` package's folder (as imported and resolved), with a trailing slash."""
    return tuple(d.rstrip(os.sep) + os.sep for d in _both(PACKAGE))


@functools.lru_cache(maxsize=1)
def machinery_files() -> frozenset[str]:
    """The checker's own modules: the ``_*.py`` files next to this one (not ``__init__.py``).

    Found by location, not by name, so they stay exempt wherever the package moves them.
    """
    here = Path(__file__).parent
    files: set[str] = set()
    for p in _machinery_modules(here):
        files.update(_both(p))
        files.update(_both(here.resolve() / p.name))
    return frozenset(files)


@functools.lru_cache(maxsize=1)
def course_code() -> CourseCode:
    """The index of the installed ``course_lib`` package (once per session; from its
    :data:`INDEX_FILE` when that is current: :func:`load_index`)."""
    return package_index(PACKAGE)


class CodeCache:
    """``fingerprint`` per code object seen, kept by identity (a trace function asks on every
    call, so each code object is hashed once)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[types.CodeType, bytes]] = {}

    def __call__(self, code: types.CodeType) -> bytes:
        hit = self._seen.get(id(code))
        if hit is not None and hit[0] is code:
            return hit[1]
        fp = fingerprint(code)
        self._seen[id(code)] = (code, fp)
        return fp

