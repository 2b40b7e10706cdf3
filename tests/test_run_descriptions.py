"""The committed runs' description lines (chapters 8 and 9; issue 45, item 6): short enough for
the book's column at 1400 px (no sideways-scrolling box), and saying so where a run used other
torch / Triton versions than the ones the course installs."""

from __future__ import annotations

from importlib.metadata import version

from course_lib.chapters.ch08_flash import gpu as flash_gpu
from course_lib.chapters.ch09_flash_triton import gpu as triton_gpu
from course_lib.toolkit.bench import RESULTS_DIR, describe_run, load_results
from course_lib.toolkit.bench.report import versions_note

#: characters of monospace output that fit the book's text column at 1400 px without scrolling
COLUMN = 90
TORCH = version("torch").split("+")[0]


def test_versions_note_only_where_the_run_differs():
    assert versions_note({"torch": TORCH + "+cu130"}) == ""       # local tags do not count
    note = versions_note({"torch": "1.0.0"})
    assert note == f"\n(this book runs torch {TORCH}; the numbers are that run's)"
    assert versions_note({"no-such-package-here": "1.0"}) == ""


def test_the_gpu_runs_say_their_versions_in_lines_that_fit():
    runs = flash_gpu.gpu_runs()
    assert runs
    for run in runs.values():
        text = describe_run(run)
        assert all(len(line) <= COLUMN for line in text.splitlines()), text
        recorded = run["meta"]["torch_version"].split("+")[0]
        assert (f"this book runs torch {TORCH}" in text) == (recorded != TORCH), text
    cpu = describe_run(load_results(RESULTS_DIR / "cpu-float32.json"))
    assert all(len(line) <= COLUMN for line in cpu.splitlines()), cpu
    data = triton_gpu.load_gpu_results()
    text = triton_gpu.describe(data)
    assert all(len(line) <= COLUMN - 11 for line in text.splitlines()), text   # date before it
    assert f"torch {data['machine']['torch_version']}, Triton " in text
    if data["machine"]["torch_version"].split("+")[0] != TORCH:
        assert f"this book runs torch {TORCH}" in text
