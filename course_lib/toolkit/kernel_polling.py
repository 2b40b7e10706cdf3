"""Wait for a kernel's shell replies in short polls: the one workaround that every place running
notebooks with ``nbclient`` (the install test, the grading job, the book's build) shares.

Standard library only, so that importing it costs nothing.
"""

from __future__ import annotations

import time
from queue import Empty
from typing import Any

__all__ = ["poll_shell_in_slices"]


def poll_shell_in_slices(kc: Any, step: float = 1.0) -> None:
    """Make ``kc.shell_channel.get_msg(timeout=T)`` wait in polls of at most ``step`` seconds.

    Measured reason: under CPU load, nbclient sometimes received a cell's ``execute_reply`` only
    when its single ``get_msg(timeout=<cell limit>)`` poll ended, after the reply had long been
    sent: after chapter 7's widget explorer, stalls of 599.5-599.7 s with a 600 s limit and of
    59.7 s with a 60 s one (3 of 5 runs). Polled in 1 s slices, 5 of 5 runs under the same load
    had no pause over 0.02 s between cells.

    The deadline is kept: with ``timeout=T`` the wrapped call still raises ``queue.Empty`` once
    ``T`` seconds have passed without a reply (so a cell that really runs over its limit still
    times out); ``timeout=None`` still waits for as long as it takes. ``kc`` is a kernel client
    (``jupyter_client``'s asynchronous one, as nbclient uses); apply this after the client exists
    and before cells run. Applying it twice is the same as once.
    """
    channel = kc.shell_channel
    if getattr(channel.get_msg, "_polls_in_slices", False):
        return
    whole = channel.get_msg

    async def get_msg(timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = step if deadline is None else max(0.0, min(step, deadline - time.monotonic()))
            try:
                return await whole(timeout=left)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    get_msg._polls_in_slices = True  # type: ignore[attr-defined]
    channel.get_msg = get_msg
