"""Execute the book's chapters for ``make book``, as many at a time as the machine has cores.

    COURSE_LIB_BOOK=1 .venv/bin/python tools/book_execute.py

Sphinx reads the pages one after another (two of the book's extensions are not parallel-safe), so
with ``execute_notebooks: force`` the build ran the twelve chapters one at a time while the other
cores idled. This runs them first, in parallel, with jupyter-cache (the executor myst-nb itself
uses in ``cache`` mode), into the cache the build then reads (``execute_notebooks: cache`` in
``_config.yml``).

Every build is still a fresh one: the cache is emptied first, so every chapter runs top to bottom
in a fresh kernel, in ``book/`` (as under nbval), with this process's environment (the Makefile's
``COURSE_LIB_BOOK=1``: explorers as players). A chapter whose cell raises fails the build here,
with its traceback, before Sphinx starts.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from pathlib import Path

import yaml
from jupyter_cache import get_cache
from jupyter_cache.executors import load_executor

ROOT = Path(__file__).resolve().parent.parent
# Where jupyter-book points myst-nb's cache (``execute.execute_cache_path`` left at its default).
CACHE = ROOT / "_build" / ".jupyter_cache"


def toc_notebooks(root: Path = ROOT) -> list[Path]:
    """The ``.ipynb`` pages of ``_toc.yml``, in its order."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries: list[dict] | None) -> None:
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return [root / f"{f}.ipynb" for f in files if (root / f"{f}.ipynb").is_file()]


def cell_timeout(root: Path = ROOT) -> int:
    """``execute.timeout`` of ``_config.yml``: the build's limit per cell, in seconds."""
    return int(yaml.safe_load((root / "_config.yml").read_text())["execute"]["timeout"])


def main(root: Path = ROOT, cache_path: Path = CACHE) -> int:
    """Empty ``cache_path``, run every chapter of ``root``'s table of contents into it; 0 if all
    ran without an error, else 1 (each failure's traceback printed)."""
    notebooks = toc_notebooks(root)
    shutil.rmtree(cache_path, ignore_errors=True)
    cache = get_cache(str(cache_path))
    for nb in notebooks:
        cache.add_nb_to_project(str(nb))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    executor = load_executor("local-parallel", cache, logger=logging.getLogger("book_execute"))
    start = time.perf_counter()
    result = executor.run_and_cache(timeout=cell_timeout(root), allow_errors=False)
    print(f"executed {len(result.succeeded)} of {len(notebooks)} chapters in "
          f"{time.perf_counter() - start:.0f} s")
    failed = result.excepted + result.errored
    for uri in failed:
        record = cache.get_project_record(uri)
        print(f"FAILED {Path(uri).relative_to(root)}\n{record.traceback or ''}", file=sys.stderr)
    return 1 if failed or len(result.succeeded) != len(notebooks) else 0


if __name__ == "__main__":
    sys.exit(main())
