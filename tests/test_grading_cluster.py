"""Grading on a Dask cluster (issue 53): a real scheduler and two workers on 127.0.0.1, one of
them killed mid-notebook, give the gradebook the local run gives, byte for byte; dask-jobqueue
renders a Slurm job script from the documented configuration (no Slurm needed).

The class is three chapter-3 workbooks (right, a declared mistake, half done): enough for every
kind of score (points, 0, not attempted) and for a notebook to be running when a worker dies.
It is graded once locally (the ``graded_class`` fixture, which the feedback and report tests
reuse) and once on the cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from course_lib import exercises
from course_lib.toolkit import grading, workbook
from course_lib.toolkit.grading import cluster, sandbox

ROOT = Path(__file__).resolve().parent.parent
SEED = 5353
SANDBOX = sandbox.unavailable_reason()
needs_sandbox = pytest.mark.skipif(SANDBOX is not None and os.environ.get("CI") != "true",
                                   reason=f"no OS sandbox here: {SANDBOX}")


def _class(folder: Path) -> list[Path]:
    nb = workbook.learner_copy(json.loads((ROOT / "book" / "03_softmax.ipynb").read_text()),
                               "03_softmax")
    right = {i: exercises.solution(i) for i in ("softmax", "self_attention")}
    wrong = {"softmax": "def softmax(x, dim=-1):\n    e = x.exp()\n"
                        "    return e / e.sum(dim=dim, keepdim=True)\n"}
    folder.mkdir()
    for name, bodies in (("alice", right), ("bob", wrong), ("carol", {"softmax":
                                                                     right["softmax"]})):
        learner = json.loads(json.dumps(nb))
        for cell in learner["cells"]:
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            for fn, body in bodies.items():
                if cell["cell_type"] == "code" and src.startswith(f"def {fn}("):
                    cell["source"] = body
        (folder / f"{name}.ipynb").write_text(json.dumps(learner))
    return sorted(folder.glob("*.ipynb"))


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory) -> dict:
    """The class graded once on this machine (``--run functions``, 2 jobs)."""
    base = tmp_path_factory.mktemp("class53")
    subs = _class(base / "submissions")
    run = grading.grade(subs, base / "local" / "gradebook.csv", log=base / "local" / "log.csv",
                        feedback=base / "local" / "feedback", jobs=2, seed=SEED,
                        progress=False, run="functions", memory=2 * 1024 ** 3,
                        class_report=base / "local" / "class.html")
    return {"base": base, "subs": subs, "run": run, "gradebook": base / "local" / "gradebook.csv"}


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    with log.open("w") as f:
        return subprocess.Popen([sys.executable, "-m", *args], stdout=f, stderr=subprocess.STDOUT,
                                env=env, cwd=str(ROOT), start_new_session=True)


@pytest.mark.slow
@pytest.mark.xdist_group("grading")
@needs_sandbox
def test_the_graded_class_gets_feedback_a_summary_and_a_report(graded_class):
    out = graded_class["gradebook"].parent
    assert graded_class["gradebook"].read_text().splitlines()[1:] == [
        "alice,1,1,0,2,alice.ipynb: checked", "bob,0,,0,0,bob.ipynb: checked",
        "carol,1,,0,1,carol.ipynb: checked"]
    bob = (out / "feedback" / "bob.md").read_text()
    assert "**Total: 0 of 2 points.**" in bob and "## ✗ `softmax`" in bob
    assert "Not yet: Your softmax overflows on large inputs" in bob
    assert 'exercises.hint("softmax")' in bob and "`def softmax(x, dim=-1):`" in bob
    summary = graded_class["run"].summary
    assert "3 learners: 3 handed in; none missing" in summary
    assert "Your softmax overflows on large inputs" in summary         # a title, not an id
    page = (out / "class.html").read_text()
    assert page.count("<img ") == 2 and "alice, carol" in page        # the same softmax


@pytest.mark.slow
@pytest.mark.xdist_group("grading")
@needs_sandbox
def test_a_dask_cluster_with_a_dying_worker_writes_the_local_gradebook(graded_class, tmp_path):
    from distributed import Client

    file = tmp_path / "scheduler.json"
    procs = [_spawn(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                     "--no-dashboard", "--scheduler-file", str(file)], tmp_path / "s.log")]
    killed: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        for n in range(2):   # no nanny: a killed worker stays dead, its notebook moves on
            procs.append(_spawn(["distributed.cli.dask_worker", "--scheduler-file", str(file),
                                 "--nthreads", "1", "--no-nanny", "--host", "127.0.0.1",
                                 "--no-dashboard", "--name", f"w{n}"], tmp_path / f"w{n}.log"))
        address = json.loads(file.read_text())["address"]
        watcher = Client(address, timeout="60s")
        watcher.wait_for_workers(2, timeout=180)
        workers = watcher.scheduler_info()["workers"]

        def kill_one_mid_notebook() -> None:
            end = time.monotonic() + 600
            while time.monotonic() < end:
                busy = [w for w, tasks in watcher.processing().items() if tasks]
                if busy:
                    time.sleep(1.0)           # inside the notebook: its sandboxes are up
                    name = workers[busy[0]]["name"]           # w0 or w1: procs[1], procs[2]
                    os.killpg(procs[1 + int(str(name)[1:])].pid, signal.SIGKILL)
                    killed.append(busy[0])
                    return
                time.sleep(0.1)

        killer = threading.Thread(target=kill_one_mid_notebook, daemon=True)
        killer.start()
        out = tmp_path / "cluster" / "gradebook.csv"
        run = grading.grade(graded_class["subs"], out, jobs=2, seed=SEED, progress=False,
                            run="functions", memory=2 * 1024 ** 3, scheduler=address)
        killer.join(10)
        watcher.close()
        assert killed, "no worker was killed during the run"
        assert run.graded == 3 and len(run.results) == 3       # each notebook counted once
        assert out.read_bytes() == graded_class["gradebook"].read_bytes()
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)


def test_dask_jobqueue_renders_the_documented_slurm_job_script():
    config = cluster.load_config(ROOT / "docs" / "grading" / "slurm.yaml")
    # The sample leaves the scheduler's network to the site; here it listens on loopback only.
    made = cluster.jobqueue_cluster("slurm", {**config, "scheduler_options":
                                              {"host": "127.0.0.1"}})
    try:
        script = made.job_script()
    finally:
        made.close()
    lines = script.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    for directive in ("-p normal", "-A course-grading", "--cpus-per-task=16", "--mem=96G",
                      "-t 02:00:00", "--exclusive"):
        assert f"#SBATCH {directive}" in lines, directive
    command = lines[-1]
    assert command.startswith("/opt/course/.venv/bin/python -m distributed.cli.dask_worker "
                              "tcp://127.0.0.1:")
    assert "--nthreads 16" in command and "--resources grading=16" in command
    with pytest.raises(ValueError, match="must be one of"):
        cluster.jobqueue_cluster("kubernetes", config)
