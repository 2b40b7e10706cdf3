"""Grade one learner notebook in a process of its own: the ``grading.job`` module.

Reads a :class:`Job` as JSON on standard input and prints a :class:`NotebookResult` as JSON on
its last line of standard output. Two steps:

1. **Run the notebook** top to bottom in a fresh, fenced kernel (``nbclient``; see ``kernel.py``
   and ``sandbox.py``): its own scratch folder as the working directory and home, a time limit per
   cell and per notebook, a memory cap. The outcome (ran / cells that raised / timeout / crashed)
   goes in the gradebook's status column; the kernel's outputs are not trusted for anything.
2. **Grade the exercises** of the notebook's chapter with the course's checkers, in *this*
   process, which never ran learner code: the learner's functions and what they use
   (``extract.py``) are loaded by the checkers' forked worker, with the grading seed, and this
   process is fenced first, so the worker is too. The verdicts are the checkers' own.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

KERNEL_NAME = "course-lib-grading"


@dataclass
class Job:
    """One notebook to grade (see ``course_lib.toolkit.grading.grade`` for the defaults)."""

    notebook: str
    learner: str
    chapter: str
    exercises: list[str]
    seed: int
    workdir: str
    hidden: list[str] = field(default_factory=list)
    cell_timeout: float = 120.0
    notebook_timeout: float = 600.0
    call_timeout: float = 10.0
    memory: int = 4 * 1024 ** 3


@dataclass
class Verdict:
    exercise: str
    verdict: str                 # passed | failed | error | not_attempted
    mistake: str = ""
    message: str = ""
    seconds: float = 0.0


@dataclass
class NotebookResult:
    learner: str
    notebook: str
    chapter: str
    status: str                  # ran | raised | timeout | crashed | refused | unreadable
    detail: str = ""
    verdicts: list[Verdict] = field(default_factory=list)


# --------------------------------------------------------------------------- 1. run the notebook


def _kernel_env(job: Job, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("COURSE_LIB_BOOK", "MPLBACKEND", "JPY_SESSION_NAME")}
    for sub in ("home", "ipython", "mpl", "tmp", "progress"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    env.update({
        "HOME": str(scratch / "home"), "IPYTHONDIR": str(scratch / "ipython"),
        "MPLCONFIGDIR": str(scratch / "mpl"), "TMPDIR": str(scratch / "tmp"),
        "MPLBACKEND": "agg", "PYTHONHASHSEED": "0",
        "COURSE_LIB_PROGRESS": str(scratch / "progress" / "progress.sqlite3"),
        "COURSE_LIB_GRADING_FENCE": json.dumps({
            "writable": [str(scratch)], "hidden": job.hidden, "memory": job.memory,
            "visible": [job.workdir]}),
    })
    return env


def _kernel_spec(workdir: Path) -> Path:
    spec = workdir / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "course_lib.toolkit.grading.kernel", "-f",
                 "{connection_file}"],
        "display_name": "course_lib grading", "language": "python"}))
    return spec.parent


def run_notebook(job: Job, nb: dict[str, Any]) -> tuple[str, str]:
    """Execute ``nb`` in a fenced kernel; ``(status, detail)`` for the gradebook."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from ..kernel_polling import poll_shell_in_slices

    workdir = Path(job.workdir)
    scratch = workdir / "scratch"
    env = _kernel_env(job, scratch)
    os.environ["JUPYTER_RUNTIME_DIR"] = str(workdir / "runtime")
    km = AsyncKernelManager(kernel_name=KERNEL_NAME,
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[
                                str(_kernel_spec(workdir))]))
    notebook = nbformat.reads(json.dumps(nb), as_version=4)
    current = {"cell": 0}

    def on_cell_execute(cell: Any, cell_index: int) -> None:
        current["cell"] = cell_index + 1

    def on_notebook_start(notebook: Any) -> None:
        # The kernel client is up and no cell has run: wait for each reply in 1 s polls, not in
        # one poll as long as the cell limit (see kernel_polling; the limit itself is kept).
        poll_shell_in_slices(client.kc)

    client = NotebookClient(notebook, km=km, timeout=job.cell_timeout, allow_errors=True,
                            record_timing=False, on_cell_execute=on_cell_execute,
                            on_notebook_start=on_notebook_start,
                            resources={"metadata": {"path": str(scratch)}})

    async def execute() -> None:
        # The kernel's own output goes nowhere: only this process writes to its standard output.
        await client.async_execute(env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)

    status, detail = "ran", ""
    try:
        asyncio.run(asyncio.wait_for(execute(), job.notebook_timeout))
    except CellTimeoutError:   # first: it is a TimeoutError too
        status = "timeout"
        detail = f"cell {current['cell']} ran over {job.cell_timeout:g} s"
    except (asyncio.TimeoutError, TimeoutError):
        status = "timeout"
        detail = f"the notebook ran over {job.notebook_timeout:g} s (at cell {current['cell']})"
    except DeadKernelError:
        status = "crashed"
        detail = (f"the kernel died in cell {current['cell']} (memory cap "
                  f"{job.memory / 1024 ** 3:g} GiB, an exit or a crash)")
    except Exception as e:   # nbclient could not start or talk to the kernel
        status, detail = "crashed", f"the notebook could not be run: {type(e).__name__}: {e}"
    finally:
        try:
            if km.has_kernel:
                asyncio.run(km.shutdown_kernel(now=True))
        except Exception:
            pass
    if status == "ran":
        raised = [str(i + 1) for i, c in enumerate(notebook.cells)
                  if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
        if raised:
            status = "raised"
            detail = f"code in cell{'s' if len(raised) > 1 else ''} {', '.join(raised)} raised"
    return status, detail


# --------------------------------------------------------------------------- 2. grade


def grade_exercises(job: Job, nb: dict[str, Any]) -> list[Verdict]:
    """The checkers' verdict on each of ``job.exercises`` (this process gets fenced first)."""
    from course_lib.toolkit.checking import FileSource, get_exercise, run_check

    from . import sandbox
    from .extract import learner_module

    exercises = [get_exercise(i) for i in job.exercises]
    grader = Path(job.workdir) / "grader"
    checks = Path(job.workdir) / "checks"
    grader.mkdir(parents=True, exist_ok=True)
    checks.mkdir(parents=True, exist_ok=True)
    # One module per exercise: what one function needs cannot break another's grading.
    modules = {ex.id: learner_module(nb, {ex.function_name}) for ex in exercises}
    for ex in exercises:
        (grader / f"{ex.id}.py").write_text(modules[ex.id].source)
    os.environ["TMPDIR"] = str(checks)
    sandbox.install(writable=[checks], hidden=job.hidden, visible=[grader])
    verdicts = []
    for ex in exercises:
        name, module = ex.function_name, modules[ex.id]
        if name in module.syntax_errors:
            verdicts.append(Verdict(ex.id, "error", "syntax_error", module.syntax_errors[name]))
            continue
        if name not in module.defined:
            verdicts.append(Verdict(ex.id, "not_attempted", "",
                                    f"The notebook defines no function `{name}`."))
            continue
        started = time.perf_counter()
        result = run_check(ex, FileSource(str(grader / f"{ex.id}.py"), name),
                           timeout=job.call_timeout, seed=job.seed)
        verdict = "passed" if result.passed else result.status
        verdicts.append(Verdict(ex.id, verdict, result.mistake or "", result.message,
                                round(time.perf_counter() - started, 3)))
    return verdicts


def grade_notebook(job: Job) -> NotebookResult:
    """Both steps for one notebook (this process is fenced at the end of it)."""
    try:
        nb = json.loads(Path(job.notebook).read_text(encoding="utf-8"))
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            raise ValueError("not a notebook (no list of cells)")
    except Exception as e:
        return NotebookResult(job.learner, job.notebook, job.chapter, "unreadable",
                              f"{type(e).__name__}: {e}",
                              [Verdict(i, "not_attempted", "", "The notebook could not be read.")
                               for i in job.exercises])
    status, detail = run_notebook(job, nb)
    return NotebookResult(job.learner, job.notebook, job.chapter, status, detail,
                          grade_exercises(job, nb))


def main() -> int:
    job = Job(**json.loads(sys.stdin.read()))
    result = grade_notebook(job)
    sys.stdout.write("\n" + json.dumps(asdict(result)) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
