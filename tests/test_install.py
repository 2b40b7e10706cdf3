"""A non-editable install (``pip install --target`` of the checkout's wheel, built once per session
by the ``course_lib_wheel`` fixture) runs a chapter from a copy of the notebook outside the
repository, with every figure present, and finds every kind of package data: the FlexAttention
chapter draws its figures from its committed benchmarks (``chapters/ch11_flex_attention/data``),
and a first cell asserts that the complexity and inference chapters' loaders find theirs
(``toolkit/bench/results``, ``chapters/ch10_inference/data``). Chapter 11 rather than chapter 7:
the same proof without chapter 7's live sweep (20 s of its 28 s, already run by nbval twice)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from datetime import datetime
from pathlib import Path

import pytest

from course_lib.toolkit.kernel_polling import poll_shell_in_slices

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "book" / "11_flex_attention.ipynb"


def _figures(nb: dict) -> int:
    return sum("image/png" in out.get("data", {})
               for cell in nb["cells"] if cell["cell_type"] == "code"
               for out in cell.get("outputs", []))


@pytest.mark.slow
@pytest.mark.xdist_group("course_lib_wheel")
def test_non_editable_install_runs_a_chapter_and_finds_the_package_data(tmp_path, monkeypatch,
                                                          course_lib_wheel):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-index", "--no-cache-dir", "--target", str(site), str(course_lib_wheel)],
                   check=True, cwd=tmp_path)
    assert (site / "course_lib" / "toolkit" / "bench" / "results" / "cpu-float32.json").is_file()
    assert (site / "course_lib" / "chapters" / "ch10_inference" / "data" / "decode-cpu.json"
            ).is_file()

    book = tmp_path / "book"
    book.mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    expected = _figures(nb)
    nb.cells.insert(0, nbformat.v4.new_code_cell(
        "import course_lib, pathlib\n"
        f"assert pathlib.Path(course_lib.__file__).is_relative_to({str(site)!r}), "
        "course_lib.__file__\n"
        "from course_lib.chapters.ch07_complexity import helpers as cx\n"
        "from course_lib.chapters.ch10_inference import helpers as inf\n"
        "assert cx.committed_benchmark() is not None, 'no committed benchmark found'\n"
        "assert inf.load_decode_results()['results'] and inf.committed_matmul_rate() > 0\n"))
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "progress.json"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.chdir(book)
    client = nbclient.NotebookClient(nb, timeout=600, startup_timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(book)}})
    start = time.perf_counter()
    with client.setup_kernel():
        ready = time.perf_counter() - start
        poll_shell_in_slices(client.kc)
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
    _warn_if_slow(nb, time.perf_counter() - start, ready)
    assert expected >= 2 and _figures(json.loads(nbformat.writes(nb))) == expected


def _stamp(ex: dict, key: str) -> datetime:
    return datetime.fromisoformat(ex[key].replace("Z", "+00:00"))


def _warn_if_slow(nb, seconds: float, ready: float, limit: float = 120.0) -> None:
    """Name where the time went when the chapter took longer than ``limit`` (usually about 20 s;
    two runs beside other CPU-bound work took 624-630 s, of which the cells 23 s): the kernel's
    start, the slowest cells, the longest pause between one cell's reply and the next one's start.
    A diagnosis for the log, not a verdict."""
    if seconds <= limit:
        return
    cells, pauses, last_reply = [], [], None
    for i, cell in enumerate(nb.cells):
        ex = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in ex and "shell.execute_reply" in ex:
            took = _stamp(ex, "shell.execute_reply") - _stamp(ex, "iopub.execute_input")
            cells.append((took.total_seconds(), i))
            if last_reply is not None and "iopub.status.busy" in ex:
                pauses.append(((_stamp(ex, "iopub.status.busy") - last_reply).total_seconds(), i))
            last_reply = _stamp(ex, "shell.execute_reply")
    slowest = ", ".join(f"cell {i}: {t:.1f} s" for t, i in sorted(cells, reverse=True)[:3])
    pause = max(pauses, default=(0.0, -1))
    warnings.warn(f"the chapter took {seconds:.0f} s in all (kernel ready after "
                  f"{ready:.1f} s; cells: {sum(t for t, _ in cells):.0f} s, slowest {slowest}; "
                  f"longest pause between cells {pause[0]:.1f} s, before cell {pause[1]})",
                  stacklevel=2)
