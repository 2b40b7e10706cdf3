"""Who handed in what: learners and their notebooks, from the paths an instructor passes.

A path is a learner's notebook (``alice.ipynb``: learner ``alice``) or a learner's folder of
notebooks (``bob/03_softmax.ipynb``, ...: learner ``bob``). Identity comes from the instructor's
side only (the file or folder name, checked against the roster when there is one), never from
anything inside a notebook. The id is the name after one normalisation (:func:`learner_id`);
two submissions from different files or folders whose names give one id are *both* refused,
with a reason that names both (rows never merge onto a classmate's). Each notebook is read
here, once, by the grader (:func:`read_safely`): a symbolic link, a FIFO or another non-file,
an unreadable or oversized file, or an odd name becomes a :class:`Submission` with a
``problem``, which is that row's reason, and grading goes on.
Which chapter a notebook is comes from the workbook's own metadata (``course_lib.workbook.
chapter``), else from a file name ``NN_name.ipynb``, else from the exercise ids its check calls
name; an assignment then decides whether that chapter is graded at all.
"""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CHAPTER_NAME = re.compile(r"^\d\d_\w+$")
_CHECK_CALL = re.compile(r"""check\(\s*["']([\w-]+)["']""")
#: A notebook larger than this is not read (a workbook with its outputs is well under 10 MiB).
MAX_NOTEBOOK_BYTES = 50 * 1024 ** 2


class SubmissionError(ValueError):
    """Paths that name no notebook and no folder."""


@dataclass(frozen=True)
class Submission:
    learner: str
    notebook: Path
    data: bytes | None = None          # the notebook's bytes, as read by the grader
    problem: str | None = None         # why it is not graded (this row's reason)


def learner_id(name: str) -> str:
    """A file or folder name as a learner id, the one normalisation (a roster's ids get the
    same): Unicode NFC; an undecodable byte or a control character becomes U+FFFD. Nothing is
    removed (`` vic`` is not ``vic``); names that still meet are refused by :func:`discover`."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    text = unicodedata.normalize("NFC", text)
    text = "".join(c if unicodedata.category(c)[0] != "C" else "\ufffd" for c in text)
    return text or "\ufffd"


def _shown(path: Path) -> str:
    """A path for a reason: its name, with anything unprintable escaped."""
    return ascii(os.fsdecode(path.name))[1:-1] if not path.name.isprintable() \
        else path.name


def _unmerged(found: list[tuple[Submission, Path]]) -> list[Submission]:
    """``found`` (each with the file or folder its id came from), with every submission whose
    id also comes from another file or folder refused, naming them all."""
    sources: dict[str, set[Path]] = {}
    for sub, source in found:
        sources.setdefault(sub.learner, set()).add(source)
    out = []
    for sub, _ in found:
        clash = sources[sub.learner]
        if len(clash) > 1:
            names = ", ".join(sorted(repr(_shown(p)) for p in clash))
            sub = Submission(sub.learner, sub.notebook, None,
                             f"has a name that reads as learner {sub.learner!r}, as do {names}: "
                             "none of them is graded (rename them apart)")
        out.append(sub)
    return out


def read_safely(path: Path) -> tuple[bytes | None, str | None]:
    """``(bytes, None)``, or ``(None, reason)`` for what is not a plain, readable notebook file.
    Never follows a symbolic link and never blocks on a FIFO or a device."""
    try:
        info = os.lstat(path)
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return None, "is a symbolic link, not a file: not graded"
    if not stat.S_ISREG(info.st_mode):
        return None, "is not a regular file (a FIFO, device or socket): not graded"
    if info.st_size > MAX_NOTEBOOK_BYTES:
        return None, (f"is {info.st_size / 1024 ** 2:.0f} MiB, over the "
                      f"{MAX_NOTEBOOK_BYTES / 1024 ** 2:.0f} MiB a notebook may have")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != \
                (info.st_dev, info.st_ino):
            return None, "changed while it was being read: not graded"
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > MAX_NOTEBOOK_BYTES:
                return None, "grew over the size a notebook may have while it was read"
            chunks.append(chunk)
        return b"".join(chunks), None
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    finally:
        os.close(fd)


#: Entries looked at below one learner's folder (a bound: the walk is iterative, so a chain of
#: folders deeper than Python's recursion limit is walked like a flat one).
MAX_FOLDER_ENTRIES = 100_000


def _notebooks_in(folder: Path) -> list[Path]:
    """Every ``*.ipynb`` below ``folder``, not following symbolic links to folders; iterative,
    and at most :data:`MAX_FOLDER_ENTRIES` entries looked at."""
    found, todo, seen = [], [os.fspath(folder)], 0
    while todo and seen < MAX_FOLDER_ENTRIES:
        here = todo.pop()
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: os.fsencode(e.name))
        except OSError:
            continue
        seen += len(entries)
        subs = []
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir and entry.name != ".ipynb_checkpoints":
                subs.append(entry.path)
            elif not is_dir and entry.name.endswith(".ipynb"):
                found.append(Path(entry.path))
        todo.extend(reversed(subs))
    return sorted(found, key=lambda p: os.fsencode(p))


def discover(paths: list[str | Path]) -> list[Submission]:
    """One :class:`Submission` per notebook, sorted by learner then file name."""
    found: list[tuple[Submission, Path]] = []
    for raw in paths:
        path = Path(raw)
        source = Path(os.path.abspath(path))
        if path.is_symlink():
            found.append((Submission(learner_id(path.stem if path.suffix == ".ipynb"
                                                else path.name), path,
                                     problem="is a symbolic link, not a file: not graded"),
                          source))
        elif path.is_dir():
            source = path.resolve()
            learner = learner_id(source.name)
            notebooks = _notebooks_in(path)
            if not notebooks:
                found.append((Submission(learner, path, problem="has no notebook (.ipynb)"),
                              source))
            for nb in notebooks:
                data, problem = read_safely(nb)
                found.append((Submission(learner, nb, data, problem), source))
        elif path.suffix == ".ipynb" and os.path.lexists(path):
            data, problem = read_safely(path)
            found.append((Submission(learner_id(path.stem), path, data, problem), source))
        else:
            raise SubmissionError(f"{os.fsdecode(raw)!r}: not a notebook (.ipynb) or a folder "
                                  "of notebooks")
    return sorted(_unmerged(found), key=lambda s: (s.learner, os.fsencode(s.notebook.name)))


def chapter_of(nb: dict[str, Any], path: Path, chapter_of_exercise: dict[str, str]) -> str | None:
    """The chapter (``"03_softmax"``) a notebook belongs to, or ``None`` if nothing says."""
    meta = nb.get("metadata", {})
    meta = meta.get("course_lib", {}) if isinstance(meta, dict) else {}
    meta = meta.get("workbook", {}) if isinstance(meta, dict) else {}
    chapters = set(chapter_of_exercise.values())
    written = meta.get("chapter") if isinstance(meta, dict) else None
    if isinstance(written, str):     # as the workbook wrote it: "03_softmax" or a file name
        stem = written.replace("\\", "/").rsplit("/", 1)[-1]
        stem = stem[:-len(".ipynb")] if stem.endswith(".ipynb") else stem
        if stem in chapters:
            return stem
    if _CHAPTER_NAME.match(path.stem) and path.stem in chapters:
        return path.stem
    named = []
    for cell in nb.get("cells", []):
        if not isinstance(cell, dict):
            continue
        src = cell.get("source", "")
        text = "".join(map(str, src)) if isinstance(src, list) else str(src)
        named += [chapter_of_exercise[i] for i in _CHECK_CALL.findall(text)
                  if i in chapter_of_exercise]
    return max(sorted(set(named)), key=named.count) if named else None
