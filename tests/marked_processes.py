"""Finding the processes a test started, by a marker on their command line.

A test that starts processes (a sandbox, a daemon inside one, a launcher) puts a unique marker
in their arguments, then asks which processes still carry it: none once they should be gone, and
whatever is left it kills itself (``kill_marked``), so a failing test leaves nothing running.
"""

from __future__ import annotations

import contextlib
import os
import signal


def marked(marker: str) -> list[int]:
    """Processes (other than this one) whose command line contains ``marker``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def kill_marked(marker: str) -> list[int]:
    """SIGKILL every process ``marked(marker)`` finds; the pids it found."""
    pids = marked(marker)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return pids
