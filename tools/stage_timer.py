"""Run the stages of a gate one after another, then print how long each took.

    python tools/stage_timer.py [--summary-file FILE] NAME=COMMAND [NAME=COMMAND ...]

Each COMMAND runs in ``bash -c`` in the current directory, in order. The first stage that fails
stops the run (as ``make`` would); the summary table is printed in every case (pass, failure,
Ctrl-C), and the exit status is that of the failed stage (0 when all passed). Standard library
only: it runs before the virtual environment exists.

Beside each stage's wall time the table gives, where Linux's ``/proc/stat`` is readable, how busy
the machine's CPUs were over the stage and how much of their time the hypervisor took (steal):

* **busy**: ``(user + nice + system + irq + softirq + steal) / all`` over the stage, every core
  and every process on the machine counted. Near 100%, the stage is bound by the CPU: it gets
  faster only by doing less work; well below, something waits (the network, a sleep, one core).
* **steal**: the share of the time a virtual machine wanted its CPUs and the host ran something
  else; the same work then takes longer, so compare wall times only between runs of low steal.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: (busy, steal, all) CPU ticks of the whole machine so far, or None where they are unknown.
Ticks = tuple[int, int, int]


def cpu_ticks(path: str = "/proc/stat") -> Ticks | None:
    """The machine's CPU ticks from the ``cpu`` line of ``/proc/stat`` (all cores): busy is
    user + nice + system + irq + softirq + steal, all adds idle + iowait (guest time is already
    inside user and nice). None where the file is missing or unreadable (not Linux)."""
    try:
        with open(path, encoding="ascii") as f:
            fields = f.readline().split()
        user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    except (OSError, ValueError):
        return None
    busy = user + nice + system + irq + softirq + steal
    return busy, steal, busy + idle + iowait


@dataclass
class Stage:
    name: str
    command: str
    status: str = "not run"
    seconds: float = 0.0
    busy: float | None = None       # share of all CPU time busy over the stage, 0-1
    steal: float | None = None      # share of all CPU time taken by the hypervisor, 0-1

    def measured(self, before: Ticks | None, after: Ticks | None) -> None:
        """Set ``busy`` and ``steal`` from the machine's ticks before and after the stage."""
        if before is None or after is None or after[2] <= before[2]:
            return
        total = after[2] - before[2]
        self.busy = (after[0] - before[0]) / total
        self.steal = (after[1] - before[1]) / total


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


def percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def summary(stages: list[Stage], total: float) -> str:
    width = max(len(s.name) for s in stages + [Stage("total", "")])
    lines = ["", "== stage timings (m:ss; busy: the machine's CPUs over the stage; steal: the "
                 "hypervisor's share)"]
    for s in stages:
        ran = s.status != "not run"
        lines.append(f"  {s.name:<{width}}  {fmt(s.seconds) if ran else '-':>6}  "
                     f"{'busy ' + percent(s.busy) if ran else '':>9}  "
                     f"{'steal ' + percent(s.steal) if ran else '':>10}  {s.status}")
    failed = [s.name for s in stages if s.status.startswith("FAILED")]
    lines.append(f"  {'total':<{width}}  {fmt(total):>6}  {'':>9}  {'':>10}  "
                 + (f"FAILED at {failed[0]}" if failed else "ok"))
    return "\n".join(lines)


def run(stages: list[Stage], runner=subprocess.call,
        ticks: Callable[[], Ticks | None] = cpu_ticks) -> int:
    """Run ``stages`` in order; returns the exit status of the first failure, else 0.
    ``ticks`` reads the machine's CPU ticks before and after each stage."""
    code = 0
    for stage in stages:
        print(f"== {stage.name}: {stage.command}", flush=True)
        start, before = time.monotonic(), ticks()
        try:
            rc = runner(["bash", "-c", stage.command])
        except KeyboardInterrupt:
            rc = 130
        stage.seconds = time.monotonic() - start
        stage.measured(before, ticks())
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
