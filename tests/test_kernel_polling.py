"""course_lib.toolkit.kernel_polling: shell replies waited for in short polls, with no kernel.

The fake shell channel reproduces the stall seen under load: a reply that arrives while a poll is
already waiting is noticed only when that poll's timeout ends.
"""

from __future__ import annotations

import asyncio
import math
import time
from queue import Empty
from types import SimpleNamespace

import pytest

from course_lib.toolkit.kernel_polling import poll_shell_in_slices

REPLY = {"parent_header": {"msg_id": "cell"}, "content": {"status": "ok"}}


class StallingShell:
    """``get_msg`` sees a reply available from ``ready`` seconds on only at the end of a poll
    that started before then (or at once, for a poll started after); no reply: ``Empty``."""

    def __init__(self, ready: float = math.inf) -> None:
        self.start = time.monotonic()
        self.ready = ready
        self.timeouts: list[float | None] = []

    def now(self) -> float:
        return time.monotonic() - self.start

    async def get_msg(self, timeout: float | None = None) -> dict:
        self.timeouts.append(timeout)
        if self.now() >= self.ready:
            return REPLY
        if timeout is None:   # the bug: a reply arriving mid-poll is never noticed
            await asyncio.sleep(3600)
        await asyncio.sleep(timeout)
        if self.now() >= self.ready:
            return REPLY
        raise Empty


def _kc(shell: StallingShell) -> SimpleNamespace:
    return SimpleNamespace(shell_channel=shell)


def _timed(kc: SimpleNamespace, timeout: float | None) -> tuple[object, float]:
    async def go() -> tuple[object, float]:
        start = time.monotonic()
        try:
            msg: object = await kc.shell_channel.get_msg(timeout=timeout)
        except Empty as e:
            msg = e
        return msg, time.monotonic() - start
    return asyncio.run(go())


def test_the_fake_reproduces_the_stall_without_slicing():
    shell = StallingShell(ready=0.1)
    msg, took = _timed(_kc(shell), timeout=0.6)
    assert msg == REPLY and took >= 0.55


def test_a_reply_is_seen_within_one_step_whatever_the_timeout():
    shell = StallingShell(ready=0.3)
    kc = _kc(shell)
    poll_shell_in_slices(kc, step=0.1)
    msg, took = _timed(kc, timeout=30.0)
    assert msg == REPLY
    assert 0.3 <= took <= 0.3 + 0.1 + 0.3
    assert all(t is not None and t <= 0.1 for t in shell.timeouts)


def test_no_reply_still_times_out_at_the_deadline():
    shell = StallingShell()
    kc = _kc(shell)
    poll_shell_in_slices(kc, step=0.1)
    msg, took = _timed(kc, timeout=0.5)
    assert isinstance(msg, Empty)
    assert 0.45 <= took <= 1.6
    assert len(shell.timeouts) >= 5 and all(0 <= t <= 0.1 for t in shell.timeouts)


def test_zero_timeout_polls_once():
    shell = StallingShell()
    kc = _kc(shell)
    poll_shell_in_slices(kc, step=0.1)
    msg, took = _timed(kc, timeout=0)
    assert isinstance(msg, Empty) and took < 0.2 and shell.timeouts == [0.0]


def test_no_timeout_polls_until_the_reply():
    shell = StallingShell(ready=0.3)
    kc = _kc(shell)
    poll_shell_in_slices(kc, step=0.1)
    msg, took = _timed(kc, timeout=None)
    assert msg == REPLY
    assert 0.3 <= took <= 0.3 + 0.1 + 0.3
    assert None not in shell.timeouts


def test_applying_twice_is_applying_once():
    shell = StallingShell(ready=0.0)
    kc = _kc(shell)
    poll_shell_in_slices(kc, step=0.1)
    wrapped = kc.shell_channel.get_msg
    poll_shell_in_slices(kc, step=0.1)
    assert kc.shell_channel.get_msg is wrapped


@pytest.mark.parametrize("step", [0.1, 1.0])
def test_a_ready_reply_returns_at_once(step):
    kc = _kc(StallingShell(ready=0.0))
    poll_shell_in_slices(kc, step=step)
    msg, took = _timed(kc, timeout=10.0)
    assert msg == REPLY and took < 0.2
