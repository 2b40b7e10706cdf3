"""Run the stages of a gate one after another, then print how long each took.

    python tools/stage_timer.py [--summary-file FILE] NAME=COMMAND [NAME=COMMAND ...]

Each COMMAND runs in ``bash -c`` in the current directory, in order. The first stage that fails
stops the run (as ``make`` would); the summary table is printed in every case (pass, failure,
Ctrl-C), and the exit status is that of the failed stage (0 when all passed). Standard library
only: it runs before the virtual environment exists.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Stage:
    name: str
    command: str
    status: str = "not run"
    seconds: float = 0.0


def parse(args: list[str]) -> list[Stage]:
    stages = []
    for arg in args:
        name, sep, command = arg.partition("=")
        if not sep or not name or not command:
            raise SystemExit(f"stage_timer: expected NAME=COMMAND, got {arg!r}")
        stages.append(Stage(name, command))
    return stages


def fmt(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m:d}:{s:02d}"


def summary(stages: list[Stage], total: float) -> str:
    width = max(len(s.name) for s in stages + [Stage("total", "")])
    lines = ["", "== stage timings (m:ss)"]
    lines += [f"  {s.name:<{width}}  {fmt(s.seconds) if s.status != 'not run' else '-':>6}  "
              f"{s.status}" for s in stages]
    failed = [s.name for s in stages if s.status.startswith("FAILED")]
    lines.append(f"  {'total':<{width}}  {fmt(total):>6}  "
                 + (f"FAILED at {failed[0]}" if failed else "ok"))
    return "\n".join(lines)


def run(stages: list[Stage], runner=subprocess.call) -> int:
    """Run ``stages`` in order; returns the exit status of the first failure, else 0."""
    code = 0
    for stage in stages:
        print(f"== {stage.name}: {stage.command}", flush=True)
        start = time.monotonic()
        try:
            rc = runner(["bash", "-c", stage.command])
        except KeyboardInterrupt:
            rc = 130
        stage.seconds = time.monotonic() - start
        stage.status = "ok" if rc == 0 else f"FAILED (exit {rc})"
        if rc != 0:
            code = rc
            break
    return code


def main(argv: list[str]) -> int:
    out = None
    if argv[:1] == ["--summary-file"]:
        out, argv = Path(argv[1]), argv[2:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    stages = parse(argv)
    start = time.monotonic()
    code = run(stages)
    text = summary(stages, time.monotonic() - start)
    print(text, flush=True)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text.lstrip() + "\n", encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
