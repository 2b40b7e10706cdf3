"""Flash before and after the torch.func rewrite (commit 6c6db5e), timed alternately.

    python bench/flash_rewrite.py                 # 7 rounds, writes bench/results/flash_rewrite.md
    python bench/flash_rewrite.py --pairs 3 --n 2048 --train-n 512 --out -   # quick, to stdout

"before" is ``course_lib/attention/flash.py`` at ``6c6db5e^``, "rewrite" the same file at
``6c6db5e`` (the torch.func rewrite as it landed), both read with ``git show`` and loaded as
siblings of the current module (so they use today's ``_validate``); "after" is the working
tree's. Each round times every variant once (``torch.utils.benchmark.Timer``, a few calls
each), the order reversed every other round, so that a change of load hits all; the table gives
the median and range over the rounds of the wall time and of the process CPU time per call
(less sensitive to other jobs taking the cores), and torch's SDPA for scale. Two workloads:
the inference forward (``torch.inference_mode``) at B=1, H=8, E=64, n=4096, float32, and a
training step (forward, ``backward`` of ``out.sum()``) at a smaller n. The machine facts (CPU,
threads, torch version, load average at start and end) go into the table: on a loaded machine
every number is noisy.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.benchmark import Timer  # noqa: E402

from course_lib.attention import flash as after  # noqa: E402

BEFORE_COMMIT = "6c6db5e^"
REWRITE_COMMIT = "6c6db5e"


def load_before(commit: str = BEFORE_COMMIT, name: str = "_flash_before"):
    """The flash module at ``commit``, imported as ``course_lib.attention.<name>``."""
    source = subprocess.run(["git", "show", f"{commit}:course_lib/attention/flash.py"],
                            cwd=ROOT, check=True, capture_output=True, text=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="flash_before_"))
    path = folder / f"{name}.py"
    path.write_text(source)
    name = f"course_lib.attention.{name}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def inputs(n: int, heads: int, e: int, grad: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, heads, n, e, generator=g).requires_grad_(grad) for _ in range(3)]


def forward_stmt(fn, q, k, v):
    def run():
        with torch.inference_mode():
            fn(q, k, v)
    return run


def train_stmt(fn, q, k, v):
    def run():
        out = fn(q, k, v)
        out.sum().backward()
        for t in (q, k, v):
            t.grad = None
    return run


def time_once(run, number: int) -> tuple[float, float]:
    """(wall, process CPU) seconds per call: one block of ``number`` calls after a warm-up."""
    run()
    cpu = time.process_time()
    wall = Timer(stmt="run()", globals={"run": run}).timeit(number).mean
    return wall, (time.process_time() - cpu) / number


def measure(fns: dict, make, pairs: int, number: int) -> dict[str, list[tuple[float, float]]]:
    """Alternating rounds: round r runs the functions in order, reversed on odd rounds."""
    names = list(fns)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(pairs):
        for name in (names if r % 2 == 0 else names[::-1]):
            times[name].append(time_once(make(fns[name]), number))
    return times


def row(label: str, times: dict[str, list[tuple[float, float]]], which: int,
        unit: float = 1e3) -> str:
    """One table row: ``which`` 0 = wall, 1 = CPU time."""
    ts = {k: [t[which] for t in v] for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in ts.items()}
    cells = [f"{med[k] * unit:.0f} ({min(v) * unit:.0f}–{max(v) * unit:.0f})"
             for k, v in ts.items()]
    wins = sum(a < b for a, b in zip(ts["after"], ts["before"], strict=True))
    return (f"| {label}, {('wall', 'CPU')[which]} | " + " | ".join(cells)
            + f" | {med['rewrite'] / med['before']:.3f} | {med['after'] / med['before']:.3f}"
            f" | {wins}/{len(ts['after'])} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--n", type=int, default=4096, help="sequence length of the forward")
    ap.add_argument("--train-n", type=int, default=1024, help="sequence length of the step")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--e", type=int, default=64)
    ap.add_argument("--number", type=int, default=3, help="calls per timing")
    ap.add_argument("--out", default=str(ROOT / "bench/results/flash_rewrite.md"),
                    help="markdown file, or - for stdout")
    args = ap.parse_args(argv)
    before = load_before()
    rewrite = load_before(REWRITE_COMMIT, "_flash_rewrite")
    fns = {"before": before.scaled_dot_product_attention,
           "rewrite": rewrite.scaled_dot_product_attention,
           "after": after.scaled_dot_product_attention,
           "torch": F.scaled_dot_product_attention}
    load_start = os.getloadavg()
    fwd = measure(fns, lambda fn: forward_stmt(fn, *inputs(args.n, args.heads, args.e, False)),
                  args.pairs, args.number)
    train = measure(fns, lambda fn: train_stmt(fn, *inputs(args.train_n, args.heads, args.e,
                                                           True)),
                    args.pairs, args.number)
    load_end = os.getloadavg()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "course_lib/attention/flash.py"],
                           cwd=ROOT, capture_output=True, text=True).stdout.strip()
    cores = os.cpu_count()
    loaded = max(load_start[0], load_end[0]) > 0.5 * (cores or 1)
    lines = [
        "# Flash before and after the torch.func rewrite",
        "",
        f"`python bench/flash_rewrite.py --pairs {args.pairs} --n {args.n} "
        f"--train-n {args.train_n}`: `before` = `course_lib/attention/flash.py` at "
        f"`{BEFORE_COMMIT}` (before the torch.func rewrite), `rewrite` = the same at "
        f"`{REWRITE_COMMIT}` (the rewrite as it landed), `after` = the working tree, "
        f"{head}{' with flash.py modified' if dirty else ''} (issue 55: "
        "in-place tile updates where no graph is recorded and no torch.func transform wraps "
        "the operands), `torch` = `torch.nn.functional.scaled_dot_product_attention` (default "
        f"CPU kernel). {args.pairs} rounds, the order reversed every other round; each cell is "
        f"the median over the rounds of the time per call (a block of {args.number} calls), in "
        "ms, (min–max); wall time and the process's CPU time (both threads). The ratios are "
        "of the medians; `after wins` counts the rounds in which after beat before.",
        "",
        f"Machine: {cpu_model()}, {cores} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), Python {platform.python_version()}; "
        f"load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end"
        + (" — **measured under load** (other jobs shared the cores): the ranges are the "
           "noise." if loaded else "."),
        "",
        "| workload | before | rewrite | after | torch | rewrite/before | after/before "
        "| after wins |",
        "|---|---|---|---|---|---|---|---|",
        *(row(f"forward, inference mode, B=1 H={args.heads} E={args.e} n={args.n} fp32", fwd,
              w) for w in (0, 1)),
        *(row(f"training step (forward + backward), B=1 H={args.heads} E={args.e} "
              f"n={args.train_n} fp32", train, w) for w in (0, 1)),
        "",
    ]
    text = "\n".join(lines)
    if args.out == "-":
        print(text)
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
