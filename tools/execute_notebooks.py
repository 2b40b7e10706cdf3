"""Re-execute the book's notebooks in place: the one way their stored outputs are produced.

    .venv/bin/python tools/execute_notebooks.py                 # every book/*.ipynb
    .venv/bin/python tools/execute_notebooks.py book/06_masks.ipynb

Each notebook runs top to bottom in a fresh kernel of this interpreter, from ``book/`` (so
relative paths resolve as under nbval and the book build), with the environment nbval sees in
``make test``: ``PYTHONHASHSEED=0``, no ``MPLBACKEND`` (it changes figure outputs), no
``COURSE_LIB_BOOK`` (explorers as live widgets), and a throw-away progress record, so executing a
chapter never records anything in the learner's own one. Seeds live in the notebooks themselves.

Cell timing metadata is not written (it would change on every run); outputs, execution counts and
widget state are.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course_lib.toolkit.kernel_polling import poll_shell_in_slices

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"


def execution_env(progress_dir: str) -> dict[str, str]:
    """The environment every notebook kernel gets (the one ``make test``'s nbval uses)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MPLBACKEND", "COURSE_LIB_BOOK")}
    env["PYTHONHASHSEED"] = "0"
    env["COURSE_LIB_PROGRESS"] = str(Path(progress_dir) / "progress")
    return env


def execute(path: Path, timeout: int) -> tuple[Path, float]:
    """Run ``path`` in a fresh kernel and write it back in place; returns (path, seconds)."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="course-lib-exec-") as progress_dir:
        env = execution_env(progress_dir)  # computed before the clear, or it would be empty
        os.environ.clear()
        os.environ.update(env)
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                record_timing=False,
                                resources={"metadata": {"path": str(path.parent)}},
                                on_notebook_start=lambda notebook: poll_shell_in_slices(client.kc))
        client.execute()
    nbformat.write(nb, path)
    return path, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to execute (default: every book/*.ipynb)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="notebooks run at once")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks] or sorted(BOOK.glob("*.ipynb"))
    failed = 0
    # One process per notebook: each clears and sets its own environment.
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(execute, p, args.timeout): p for p in paths}
        for future, p in futures.items():
            try:
                _, seconds = future.result()
                print(f"executed {p.relative_to(ROOT)} in {seconds:.0f} s")
            except Exception as e:  # report every failing notebook, then fail
                failed += 1
                print(f"FAILED {p.relative_to(ROOT)}: {type(e).__name__}: {e}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
