"""Grade a class on a Dask cluster (``dask.distributed``): ``--scheduler`` or ``--cluster``.

    python -m course_lib grade submissions/* --out gradebook.csv --scheduler tcp://HOST:8786
    python -m course_lib grade submissions/* --out gradebook.csv \\
        --cluster slurm --cluster-config docs/grading/slurm.yaml --jobs 40

The client (this process) reads the submissions, keeps the cache and alone writes the gradebook;
each notebook is one Dask task, :func:`grade_job`, which grades it on a worker exactly as on one
machine: in the worker's warm grading process (``runner.py``), its cells and functions in
bubblewrap sandboxes there. Every worker must be a grading machine as the one-machine grader
needs (Linux, bubblewrap, the course's environment; ``docs/grading.md``). The job, seed included,
travels to the worker that grades it through the scheduler: use Dask's TLS settings or a private
network (``docs/grading.md``, "Larger classes"). A worker that dies mid-notebook: the scheduler
gives the notebook to another worker (Dask's ``allowed-failures``), the client counts each
notebook once, when its result arrives; a run that stops resumes from the cache, which receives
each result as it arrives.

``--cluster KIND --cluster-config FILE`` starts the workers through ``dask-jobqueue`` (``slurm``,
``pbs``, ``sge``, ``lsf``, ``htcondor``): FILE (YAML or TOML) holds the keyword arguments of
that cluster class (``cores``, ``memory``, ``walltime``, ``queue``, ...), and ``--jobs`` is the
number of batch jobs asked for (one worker each).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .job import Job

#: ``--cluster`` kinds and their ``dask_jobqueue`` classes.
JOBQUEUE = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "sge": "SGECluster",
            "lsf": "LSFCluster", "htcondor": "HTCondorCluster"}


def grade_job(job: dict[str, Any], limit: float) -> tuple[dict[str, Any], float]:
    """The task a worker runs: grade one notebook (``job``: a :class:`Job` as a dict) in a
    folder of this machine's, with this machine's learner copy of the course; the result as a
    dict and its wall seconds. The folder is removed after."""
    from . import runner, sandbox

    local = Job(**job)
    folder = Path(tempfile.mkdtemp(prefix="course-lib-grading-task-"))
    local.workdir = str(folder / "job")
    if local.sandboxed:
        local.course_copy = str(sandbox.learner_copy())
    try:
        return runner.run_job(local, limit)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def load_config(path: str | Path) -> dict[str, Any]:
    """A ``--cluster-config`` file (YAML or TOML): the keyword arguments of the cluster class."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yml", ".yaml"):
        import yaml

        data = yaml.safe_load(text)
    else:
        import tomllib

        data = tomllib.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a cluster configuration is a mapping of keyword arguments")
    return data


def jobqueue_cluster(kind: str, config: str | Path | dict[str, Any]) -> Any:
    """A ``dask_jobqueue`` cluster of ``kind`` (see :data:`JOBQUEUE`) from ``config``; no job is
    submitted until it is scaled."""
    if kind not in JOBQUEUE:
        raise ValueError(f"--cluster must be one of {', '.join(JOBQUEUE)}, not {kind!r}")
    import dask_jobqueue

    kwargs = config if isinstance(config, dict) else load_config(config)
    return getattr(dask_jobqueue, JOBQUEUE[kind])(**kwargs)


class DaskPool:
    """The client side: ``submit(job, limit)`` returns a future whose ``result()`` is
    :func:`grade_job`'s; ``dashboard`` is the Dask dashboard's address (``None`` without
    bokeh)."""

    def __init__(self, scheduler: str | None = None, cluster: str | None = None,
                 cluster_config: str | Path | None = None, jobs: int = 1,
                 security: Any = None) -> None:
        from distributed import Client

        self.cluster = None
        if cluster is not None:
            if cluster_config is None:
                raise ValueError("--cluster needs --cluster-config FILE")
            self.cluster = jobqueue_cluster(cluster, cluster_config)
            self.cluster.scale(jobs=max(1, jobs))
            self.client = Client(self.cluster, security=security)
        elif scheduler is not None:
            self.client = Client(scheduler, security=security, timeout="60s")
        else:
            raise ValueError("a scheduler address or a cluster kind")
        self.dashboard: str | None = None
        try:
            import bokeh  # noqa: F401

            self.dashboard = self.client.dashboard_link
        except ImportError:
            pass

    def submit(self, job: Job, limit: float) -> Any:
        # The key names what is graded (the job's folder is named by its cache key), so a
        # notebook resubmitted after a worker died is the same task, never a second one.
        return self.client.submit(grade_job, asdict(job), limit, pure=False,
                                  key=f"grade-{Path(job.workdir).name}")

    @staticmethod
    def as_completed(futures: list[Any]) -> Any:
        from distributed import as_completed

        return as_completed(futures)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def __enter__(self) -> DaskPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
