"""Grade one learner notebook in a process of its own: the ``grading.job`` module.

Reads a :class:`Job` as JSON on standard input and prints a :class:`NotebookResult` as JSON on
its last line of standard output. This process is the grader's (trusted) side: it holds the
notebook, the grading seed, the cases and the oracle, and runs no learner code itself. Two steps:

1. **Run the notebook** top to bottom (``nbclient``, here) in a kernel started inside the OS
   sandbox (``sandbox.py``; the kernel talks to this process over Unix sockets in the job's
   scratch folder, as the sandbox has no network): a time limit per cell (a cell that runs over
   is interrupted and the next cells still run) and per notebook, the sandbox's limits per
   process tree, and a cap on the output kept. The outcome (ran / cells that raised / timed out
   / ended) goes in the gradebook's notes; the kernel's outputs are not trusted for anything.
2. **Grade the exercises** of the notebook's chapter with the course's checkers: the learner's
   functions and what they use (``extract.py``) are written to a fresh scratch folder and loaded
   by a check worker started in a fresh sandbox of its own (``checking._remote``); the worker
   receives only the inputs of each case and sends back what the function returned, which this
   process compares with the oracle's answers. The verdicts are the checkers' own.
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

from .sandbox import INSIDE, Limits

KERNEL_NAME = "course-lib-grading"
#: Characters of a checker's message kept in the gradebook's log, the feedback and the cache.
MESSAGE_LIMIT = 4000


@dataclass
class Job:
    """One notebook to grade (see ``course_lib.toolkit.grading.grade`` for the defaults)."""

    notebook: str                # a name for messages only: the notebook itself is ``source``
    learner: str
    chapter: str
    exercises: list[str]
    seed: int
    workdir: str
    course_copy: str = ""        # the learner copy of course_lib (``sandbox.learner_copy``)
    source: str = ""             # the notebook's JSON text, read by the grader
    sandboxed: bool = True
    cell_timeout: float = 120.0
    notebook_timeout: float = 600.0
    call_timeout: float = 10.0
    memory: int = Limits.memory
    processes: int = Limits.processes
    disk: int = Limits.disk
    output: int = Limits.output
    #: ``"all"``: run the whole notebook in a kernel for its status, then check the functions;
    #: ``"functions"``: only the checks, which run the graded functions and what they use (the
    #: whole notebook still runs when the extraction is not certain: ``extract.uncertain``).
    run: str = "all"

    @property
    def limits(self) -> Limits:
        return Limits(self.memory, self.processes, self.disk, self.output)


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
    status: str                  # ran | checked | raised | timeout | crashed | refused | ...
    detail: str = ""
    verdicts: list[Verdict] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)   # exercise -> the graded source
    #: Where this notebook's time went, in seconds (``python``: this process's start and imports,
    #: ``kernel``: the sandboxed kernel's start, ``cells``: running the cells, ``checks_start``:
    #: the check sandbox's start, ``checks``: the checks). Not in the gradebook (not
    #: reproducible); ``bench/grade_class.py`` reports it.
    timings: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- 1. run the notebook


def _runner(job: Job, scratch: Path, argv: list[str], env: dict[str, str]) -> list[str]:
    """The command that runs ``argv`` for this job: in the sandbox, or (``--no-sandbox``) as is."""
    from . import sandbox

    if not job.sandboxed:
        return argv
    return sandbox.command(argv, scratch=scratch, course=Path(job.course_copy),
                           limits=job.limits, env=env)


def _inside(job: Job, scratch: Path) -> str:
    """Where the scratch folder is for the sandboxed program."""
    return INSIDE if job.sandboxed else str(scratch)


def _kernel_spec(job: Job, workdir: Path, scratch: Path) -> Path:
    from . import sandbox

    inside = _inside(job, scratch)
    env = sandbox.inside_env({"COURSE_LIB_GRADING_LIMITS": json.dumps(
        {"memory": job.memory, "disk": job.disk})})
    if not job.sandboxed:
        env = {k: v.replace(INSIDE, inside) for k, v in env.items()}
        env["PATH"] = os.environ.get("PATH", env["PATH"])
    argv = [sys.executable, "-m", "course_lib.toolkit.grading.kernel", "-f",
            f"{inside}/run/kernel.json"]
    spec = workdir / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": _runner(job, scratch, argv, env), "env": {} if job.sandboxed else env,
        "display_name": "course_lib grading", "language": "python",
        "interrupt_mode": "message"}))
    return spec.parent


def run_notebook(job: Job, nb: dict[str, Any], timings: dict[str, float] | None = None
                 ) -> tuple[str, str]:
    """Execute ``nb`` in a sandboxed kernel; ``(status, detail)`` for the gradebook.
    ``timings`` receives ``kernel`` (its start) and ``cells`` (the cells), in seconds."""
    timings = {} if timings is None else timings
    started = time.perf_counter()
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    from ..kernel_polling import poll_shell_in_slices
    from . import sandbox

    workdir = Path(job.workdir)
    scratch = workdir / "scratch"
    sandbox.prepare_scratch(scratch)
    (scratch / "run").mkdir(exist_ok=True)
    os.environ["JUPYTER_RUNTIME_DIR"] = str(workdir / "runtime")
    km = AsyncKernelManager(kernel_name=KERNEL_NAME, transport="ipc",
                            ip=str(scratch / "run" / "ipc"),
                            connection_file=str(scratch / "run" / "client.json"),
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[
                                str(_kernel_spec(job, workdir, scratch))]))
    # The kernel reaches the same sockets at the paths it sees (the scratch folder is mounted
    # elsewhere inside the sandbox): its own copy of the connection file says where.
    km.write_connection_file()
    info = json.loads(Path(km.connection_file).read_text())
    info["ip"] = f"{_inside(job, scratch)}/run/ipc"
    (scratch / "run" / "kernel.json").write_text(json.dumps(info))
    notebook = nbformat.reads(json.dumps(nb), as_version=4)
    state: dict[str, Any] = {"cell": 0, "timed_out": [], "output": 0, "dropped": False,
                             "watch": None}

    class Client(NotebookClient):
        def output(self, outs: list[Any], msg: dict[str, Any], display_id: Any,
                   cell_index: int) -> Any:
            state["output"] += len(json.dumps(msg.get("content", {}), default=str))
            if state["output"] > job.output:
                state["dropped"] = True     # the notebook's outputs count for nothing anyway
                return None
            return super().output(outs, msg, display_id, cell_index)

        async def _async_handle_timeout(self, timeout: int, cell: Any = None) -> Any:
            state["timed_out"].append(state["cell"])
            return await super()._async_handle_timeout(timeout, cell)

    def on_cell_execute(cell: Any, cell_index: int) -> None:
        state["cell"] = cell_index + 1

    def on_notebook_start(notebook: Any) -> None:
        # The kernel client is up and no cell has run: wait for each reply in 1 s polls, not in
        # one poll as long as the cell limit (see kernel_polling; the limit itself is kept).
        poll_shell_in_slices(client.kc)
        timings["kernel"] = round(time.perf_counter() - started, 3)
        pid = getattr(getattr(km, "provisioner", None), "pid", None)
        if pid and job.sandboxed:
            state["watch"] = sandbox.TreeWatch(int(pid), job.limits,
                                               folder=scratch).__enter__()

    client = Client(notebook, km=km, timeout=job.cell_timeout, allow_errors=True,
                    interrupt_on_timeout=True,
                    error_on_timeout={"ename": "CellTimeoutError", "evalue": "",
                                      "traceback": []},
                    record_timing=False, on_cell_execute=on_cell_execute,
                    on_notebook_start=on_notebook_start,
                    resources={"metadata": {"path": str(scratch)}})

    async def execute() -> None:
        # The kernel's own output goes nowhere: only this process writes to its standard output.
        await client.async_execute(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    status, detail = "ran", ""
    try:
        asyncio.run(asyncio.wait_for(execute(), job.notebook_timeout))
    except (asyncio.TimeoutError, TimeoutError):
        status = "timeout"
        detail = f"the notebook ran over {job.notebook_timeout:g} s (at cell {state['cell']})"
    except DeadKernelError:
        status = "crashed"
        detail = (f"the kernel ended in cell {state['cell']} (an exit, a crash, or the "
                  f"address-space cap of {job.memory / 1024 ** 3:g} GiB)")
    except Exception as e:   # nbclient could not start or talk to the kernel
        status, detail = "crashed", f"the notebook could not be run: {type(e).__name__}: {e}"
    finally:
        watch = state["watch"]
        pid = getattr(getattr(km, "provisioner", None), "pid", None)
        try:
            if km.has_kernel:
                asyncio.run(km.shutdown_kernel(now=True))
        except Exception:
            pass
        if pid:
            sandbox.kill_tree(int(pid))
        if watch is not None:
            watch.__exit__(None, None, None)
        timings["cells"] = round(time.perf_counter() - started - timings.get("kernel", 0.0), 3)
    if watch is not None and watch.reason:
        status = "crashed"
        detail = f"the sandbox was ended in cell {state['cell']}: {watch.reason}"
    notes = [detail] if detail else []
    if status == "ran":
        timed = set(state["timed_out"])
        raised = [f"{i + 1} ({errors[0].get('ename', '?')})"
                  for i, c in enumerate(notebook.cells) if i + 1 not in timed
                  and (errors := [o for o in c.get("outputs", [])
                                  if o.get("output_type") == "error"])]
        if raised:
            status = "raised"
            notes.append(f"code in cell{'s' if len(raised) > 1 else ''} {', '.join(raised)} "
                         "raised")
        if timed:
            status = "timeout" if status == "ran" else status
            cells = ", ".join(str(c) for c in sorted(timed))
            notes.append(f"cell{'s' if len(timed) > 1 else ''} {cells} ran over "
                         f"{job.cell_timeout:g} s and {'were' if len(timed) > 1 else 'was'} "
                         "stopped; the cells after still ran")
    if state["dropped"]:
        notes.append(f"output beyond {job.output / 1024 ** 2:g} MiB was not kept")
    return status, "; ".join(notes)


# --------------------------------------------------------------------------- 2. grade


def _launcher(job: Job, folder: Path) -> Any:
    """How this job's check workers start: forked by one server in a sandbox (with
    ``--no-sandbox``, by a plain server process running in ``folder``). The learner's files
    travel to it as text: the sandbox mounts no folder of the grader's (``/grading`` is its own
    ``tmpfs``), so nothing a function can read there differs between jobs or runs."""
    from course_lib.toolkit.checking._remote import ForkServer

    from . import sandbox

    if not job.sandboxed:
        env = {k: v.replace(INSIDE, str(folder)) for k, v in sandbox.inside_env().items()}
        return ForkServer(env={**env, "PATH": os.environ.get("PATH", env["PATH"])},
                          cwd=str(folder))

    def wrap(argv: list[str]) -> list[str]:
        return sandbox.command(argv, scratch=None, course=Path(job.course_copy),
                               limits=job.limits, env=sandbox.inside_env(home="/tmp"),
                               args_dir=folder)

    return ForkServer(wrap)


def grade_exercises(job: Job, nb: dict[str, Any], timings: dict[str, float] | None = None
                    ) -> tuple[list[Verdict], dict[str, str]]:
    """The checkers' verdict on each of ``job.exercises``, and the source each one graded.
    ``timings`` receives ``checks_start`` (the check sandbox's start) and ``checks``."""
    timings = {} if timings is None else timings
    from course_lib.toolkit.checking import FileSource, get_exercise, run_check
    from course_lib.toolkit.checking._engine import not_attempted

    from .extract import learner_module

    exercises = [get_exercise(i) for i in job.exercises]
    # One module per exercise: what one function needs cannot break another's grading.
    modules = {ex.id: learner_module(nb, {ex.function_name}) for ex in exercises}
    verdicts: dict[str, Verdict] = {}
    sources: dict[str, str] = {}
    folder = Path(job.workdir) / "checks"
    folder.mkdir(parents=True)
    graded = []
    for ex in exercises:
        name, module = ex.function_name, modules[ex.id]
        if name in module.syntax_errors:
            verdicts[ex.id] = Verdict(ex.id, "error", "syntax_error", module.syntax_errors[name])
        elif name not in module.defined:
            verdicts[ex.id] = Verdict(ex.id, "not_attempted", "",
                                      f"The notebook defines no function `{name}`.")
        elif name in module.untouched:        # the starter as handed out: nothing to run
            sources[ex.id] = module.source
            verdicts[ex.id] = Verdict(ex.id, "not_attempted", "not_attempted",
                                      not_attempted(ex).message)
        else:
            # Each exercise's module under its own name: what one function needs cannot break
            # another's grading, and the server imports what they share once.
            sources[ex.id] = module.source
            (folder / f"{ex.id}.py").write_text(module.source, encoding="utf-8")
            graded.append(ex)
    if graded:
        began = time.perf_counter()
        with _launcher(job, folder) as launcher:
            timings["checks_start"] = round(time.perf_counter() - began, 3)
            for ex in graded:
                started = time.perf_counter()
                result = run_check(ex, FileSource(str(folder / f"{ex.id}.py"),
                                                  ex.function_name),
                                   timeout=job.call_timeout, seed=job.seed, launcher=launcher)
                verdict = "passed" if result.passed else result.status
                verdicts[ex.id] = Verdict(ex.id, verdict, result.mistake or "",
                                          _capped(result.message),
                                          round(time.perf_counter() - started, 3))
        timings["checks"] = round(time.perf_counter() - began - timings["checks_start"], 3)
    return [verdicts[ex.id] for ex in exercises], sources


def _capped(text: str, limit: int = MESSAGE_LIMIT) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more " \
                                                          "characters not kept]"


def grade_notebook(job: Job) -> NotebookResult:
    """Both steps for one notebook."""
    try:
        nb = json.loads(job.source)
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            raise ValueError("not a notebook (no list of cells)")
    except Exception as e:
        return NotebookResult(job.learner, job.notebook, job.chapter, "unreadable",
                              _capped(f"{type(e).__name__}: {e}", 300),
                              [Verdict(i, "not_attempted", "", "The notebook could not be read.")
                               for i in job.exercises])
    from .extract import uncertain

    timings: dict[str, float] = {}
    began = time.perf_counter()
    why = None
    if job.run == "functions":
        from course_lib.toolkit.checking import get_exercise

        why = uncertain(nb, {get_exercise(i).function_name for i in job.exercises})
    if job.run == "functions" and why is None:
        status, detail = "checked", ""
    else:
        status, detail = run_notebook(job, nb, timings)
        if why is not None:
            detail = "; ".join(x for x in (f"the whole notebook was run: {why}", detail) if x)
    verdicts, sources = grade_exercises(job, nb, timings)
    timings["inside"] = round(time.perf_counter() - began, 3)
    return NotebookResult(job.learner, job.notebook, job.chapter, status, _capped(detail, 1000),
                          verdicts, sources, timings)


def _die_with_parent() -> None:
    """A warm process whose parent (the grader, a Dask worker) is gone ends at once, with the
    sandboxes it started (they die with their parent): no orphan grades on."""
    import signal
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """One job from standard input; with ``--serve``, one job per line until standard input
    ends (a warm grading process: ``runner.py``), each result on a line of its own."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["--serve"]:
        job = Job(**json.loads(sys.stdin.read()))
        result = grade_notebook(job)
        sys.stdout.write("\n" + json.dumps(asdict(result)) + "\n")
        sys.stdout.flush()
        return 0
    _die_with_parent()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = Job(**json.loads(line))
        try:
            result = grade_notebook(job)
        except Exception as e:     # this job's row says why; the next job still runs
            result = NotebookResult(job.learner, job.notebook, job.chapter, "crashed",
                                    _capped(f"the grader failed: {type(e).__name__}: {e}", 300))
        sys.stdout.write("\n" + json.dumps(asdict(result)) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
