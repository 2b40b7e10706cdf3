"""A dependency-free progress bar on stderr (``\\r``-redrawn on a terminal, lines otherwise)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``Progress(total, desc)``; call ``update(label)`` per finished step and ``close()``."""

    def __init__(self, total: int, desc: str = "", width: int = 28,
                 stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = max(int(total), 1)
        self.desc = desc
        self.width = width
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.done = 0
        self.t0 = time.perf_counter()
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_pct = -1

    def line(self, label: str = "") -> str:
        frac = min(self.done / self.total, 1.0)
        filled = int(round(frac * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self.t0
        return (f"{self.desc} [{bar}] {self.done}/{self.total} {100 * frac:3.0f}% "
                f"{elapsed:6.1f}s {label}").rstrip()

    def update(self, label: str = "", steps: int = 1) -> None:
        self.done += steps
        if not self.enabled:
            return
        if self._tty:
            self.stream.write("\r\x1b[2K" + self.line(label))
        else:  # a log file or notebook: one line per 10 % so the output stays short
            pct = int(100 * self.done / self.total) // 10
            if pct == self._last_pct and self.done < self.total:
                return
            self._last_pct = pct
            self.stream.write(self.line(label) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._tty:
            self.stream.write("\n")
            self.stream.flush()
