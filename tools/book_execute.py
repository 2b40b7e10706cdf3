"""Execute the book's chapters for ``make book``, into the cache the build then reads.

    COURSE_LIB_BOOK=1 .venv/bin/python tools/book_execute.py [--jobs N]

Every build is a fresh one: the cache (myst-nb's jupyter-cache, ``execute_notebooks: cache`` in
``_config.yml``) is emptied first, then every chapter of ``_toc.yml`` runs top to bottom in a
fresh kernel, in ``book/`` (as under nbval), with this process's environment (the Makefile's
``COURSE_LIB_BOOK=1``: explorers as players). A chapter whose cell raises fails the build here,
with its traceback, before Sphinx starts; Sphinx then reads each chapter's run from the cache.

Why a separate step: Sphinx reads the pages one after another (two of the book's extensions are
not parallel-safe), so it could only run one chapter at a time. ``--jobs 2`` runs two at once;
``make test`` does (its book is a test). ``make book`` keeps one at a time (``BOOK_JOBS=1``), so
the live timings a published book shows were measured with no other chapter running beside them.

``--from DIR`` (``make test``): a chapter that nbval has just run natively in the book's
environment (``tools/nbval_capture.py``: every cell ran and matched its stored outputs) is taken
from that run instead of being run again, when its code cells are the ones of the page now and
it ran with ``COURSE_LIB_BOOK=1``; any other chapter runs here. Either way, a widget's view is
dropped before Sphinx reads the page (:func:`drop_dead_widgets`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import nbformat
import yaml
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from jupyter_cache.executors.utils import single_nb_execution
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import CaselessStrEnum

from course_lib.toolkit.kernel_polling import poll_shell_in_slices
from course_lib.toolkit.workbook import WIDGET_VIEW  # a widget's output: dead without a kernel

ROOT = Path(__file__).resolve().parent.parent
# Where jupyter-book points myst-nb's cache (``execute.cache`` of _config.yml left at its default).
CACHE = ROOT / "_build" / ".jupyter_cache"


def toc_files(root: Path = ROOT) -> list[str]:
    """Every page of ``_toc.yml`` as written there (``book/03_softmax``), root first, in order."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]

    def walk(entries: list[dict] | None) -> None:
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return files


def toc_notebooks(root: Path = ROOT) -> list[Path]:
    """The ``.ipynb`` pages of ``_toc.yml``, in its order."""
    return [root / f"{f}.ipynb" for f in toc_files(root) if (root / f"{f}.ipynb").is_file()]


def cell_timeout(root: Path = ROOT) -> int:
    """``execute.timeout`` of ``_config.yml``: the build's limit per cell, in seconds."""
    return int(yaml.safe_load((root / "_config.yml").read_text())["execute"]["timeout"])


class SlicedPollingKernelManager(AsyncKernelManager):
    """nbclient's kernel manager, whose clients wait for shell replies in 1 s polls
    (``course_lib.toolkit.kernel_polling``): given to the ``NotebookClient`` that jupyter-cache
    creates as its ``kernel_manager_class``, so the client still starts and shuts down its own
    kernel.

    The kernel talks to this process over Unix-domain sockets (``transport="ipc"``, files beside
    the kernel's connection file, readable by this user only), not TCP on 127.0.0.1: nothing
    crosses a network port, and ipykernel no longer warns, once per chapter, that its TCP channel
    is unencrypted (``IPKernelApp WARNING | Kernel is running over TCP without encryption``)."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

    def _ip_default(self) -> str:
        # The sockets' path prefix: short (a Unix socket's path has at most 107 bytes, which a
        # socket beside a connection file in a deep runtime folder can exceed), unique per kernel.
        return os.path.join(tempfile.gettempdir(), f"course-kernel-{uuid.uuid4().hex[:12]}")

    def client(self, **kwargs: Any) -> AsyncKernelClient:
        kc = super().client(**kwargs)
        poll_shell_in_slices(kc)
        return kc


def run_chapter(path: Path, timeout: int) -> tuple[str, str | None, float]:
    """Run ``path`` in a fresh kernel from its own folder, as myst-nb's cache mode does:
    (the executed notebook as JSON, the traceback if a cell raised, seconds)."""
    nb = nbformat.read(path, as_version=4)
    result = single_nb_execution(nb, cwd=str(path.parent), timeout=timeout, allow_errors=False,
                                 meta_override=True,
                                 kernel_manager_class=SlicedPollingKernelManager)
    return nbformat.writes(nb), (result.exc_string if result.err else None), result.time


def drop_dead_widgets(nb: Any) -> int:
    """Remove every output that shows a widget (a progress bar in a live session; the explorers
    are players in the book's run and show none): in the HTML book it would be a dead control
    or its text frozen at its first state. Returns how many were removed."""
    dropped = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = [o for o in cell.get("outputs", []) if WIDGET_VIEW not in o.get("data", {})]
        dropped += len(cell.get("outputs", [])) - len(kept)
        cell["outputs"] = kept
    return dropped


def _code(nb: Any) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def captured(path: Path, folder: Path | None) -> tuple[Any | None, str]:
    """nbval's run of the chapter at ``path`` from ``folder`` (``tools/nbval_capture.py``), or
    ``None`` and why it is not used: none there, another mode, or other code cells."""
    if folder is None:
        return None, "no --from"
    run = folder / path.name
    if not run.is_file():
        return None, "nbval's run did not keep it"
    nb = nbformat.read(run, as_version=4)
    if not nb.metadata.get("course_lib_nbval", {}).get("book_mode"):
        return None, "nbval ran it without COURSE_LIB_BOOK=1"
    if _code(nb) != _code(nbformat.read(path, as_version=4)):
        return None, "its code cells differ from the page's"
    return nb, ""


def main(argv: list[str] | None = None, root: Path = ROOT, cache_path: Path = CACHE) -> int:
    """0 if every chapter ran without an error (each then in the cache), else 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=1, help="chapters run at once")
    parser.add_argument("--from", dest="source", type=Path, default=None,
                        help="nbval's native run in the book's environment, to take chapters from")
    args = parser.parse_args(argv)
    notebooks, timeout = toc_notebooks(root), cell_timeout(root)
    shutil.rmtree(cache_path, ignore_errors=True)
    cache = get_cache(str(cache_path))
    start, failed, taken = time.perf_counter(), [], 0

    def keep(path: Path, nb: Any, seconds: float) -> None:
        drop_dead_widgets(nb)
        record = cache.add_nb_to_project(str(path))
        cache.cache_notebook_bundle(
            CacheBundleIn(nb, record.uri, data={"execution_seconds": seconds}),
            check_validity=False, overwrite=True)

    to_run = []
    for path in notebooks:
        nb, why = captured(path, args.source)
        if nb is None:
            to_run.append(path)
            if args.source is not None:
                print(f"runs {path.relative_to(root).as_posix()} here: {why}")
        else:
            keep(path, nb, 0.0)
            taken += 1
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = {path: pool.submit(run_chapter, path, timeout) for path in to_run}
        for path, run in runs.items():
            name = path.relative_to(root).as_posix()
            try:
                executed, traceback, seconds = run.result()
            except Exception as e:   # the kernel died or could not start: a failure, reported
                executed, traceback, seconds = "", f"{type(e).__name__}: {e}", 0.0
            if traceback is not None:
                failed.append(name)
                print(f"FAILED {name}\n{traceback}", file=sys.stderr)
                continue
            keep(path, nbformat.reads(executed, as_version=4), seconds)
            print(f"executed {name} in {seconds:.1f} s")
    if args.source is not None:
        print(f"took {taken} of {len(notebooks)} chapters from nbval's run ({args.source})")
    print(f"executed {len(to_run) - len(failed)} of {len(to_run)} chapters in "
          f"{time.perf_counter() - start:.0f} s, {max(1, args.jobs)} at a time")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
