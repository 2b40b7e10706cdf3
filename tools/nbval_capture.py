"""A pytest plugin that keeps what nbval ran: each notebook with the outputs its kernel produced.

    COURSE_LIB_NBVAL_CAPTURE=DIR pytest --nbval -p nbval_capture ...   (``tools/`` on the path)

``make test`` runs nbval natively with ``COURSE_LIB_BOOK=1`` (the book's environment: explorers
as players; every output nbval compares is the same in both modes) and hands the run to the book
stage (``tools/book_execute.py --from DIR``), so the notebooks run natively once, not twice
(issue 50). A notebook is written to ``DIR/<name>.ipynb`` only when every one of its code cells
ran here and passed (none skipped, none failed): the book takes nothing from a run it would not
have accepted. Each written notebook records the environment it ran in
(``metadata.course_lib_nbval``: ``book_mode``), and its code cells' sources are the ones nbval
read, so the book stage can refuse a run of other sources or of the learners' mode.

Without ``COURSE_LIB_NBVAL_CAPTURE`` the plugin does nothing. Under pytest-xdist each worker
writes the notebooks it ran (nbval's ``--dist loadscope`` keeps a notebook on one worker).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import nbformat
import pytest

ENV = "COURSE_LIB_NBVAL_CAPTURE"
#: notebook path -> {code cell number: (outputs, passed)}
_RUNS: dict[str, dict[int, tuple[list[Any], bool]]] = {}


def _target() -> Path | None:
    folder = os.environ.get(ENV, "")
    return Path(folder) if folder else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    if _target() is None or call.when != "call" or not hasattr(item, "cell_num"):
        return
    report = outcome.get_result()
    outputs = getattr(item, "test_outputs", None)
    cells = _RUNS.setdefault(str(item.parent.path), {})
    cells[item.cell_num] = (copy.deepcopy(list(outputs or [])),
                            report.passed and outputs is not None)


def written(source: Path, runs: dict[int, tuple[list[Any], bool]]) -> Any | None:
    """``source`` with the captured outputs, or ``None`` if a code cell did not run and pass."""
    nb = nbformat.read(source, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    if len(code) != len(runs) or not all(runs.get(i, ([], False))[1] for i in range(len(code))):
        return None
    for i, cell in enumerate(code):
        cell.outputs = [nbformat.from_dict(o) for o in runs[i][0]]
        cell.execution_count = i + 1
        for out in cell.outputs:
            if out.get("output_type") == "execute_result":
                out["execution_count"] = i + 1
    nb.metadata["course_lib_nbval"] = {"book_mode": os.environ.get("COURSE_LIB_BOOK") == "1"}
    return nb


def pytest_sessionfinish(session: pytest.Session) -> None:
    folder = _target()
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    for path, runs in sorted(_RUNS.items()):
        nb = written(Path(path), runs)
        if nb is not None:
            nbformat.write(nb, folder / Path(path).name)
