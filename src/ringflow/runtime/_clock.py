"""The real clock: wall time from ``time.time_ns``, monotonic time and timers from asyncio.

The asyncio shell's implementation of ``Clock`` (``_interfaces.py``). Timers go through the
event loop's ``call_later``, which measures on ``loop.time()`` (``time.monotonic``), so timer
deadlines and ``monotonic_ms`` share one clock. Wall time is read fresh on every call and may
jump with NTP; nothing here smooths it.
"""

from __future__ import annotations

import asyncio
import time
from typing import final

from ringflow.errors import invariant
from ringflow.runtime._interfaces import Clock, TimerCallback, TimerHandle, check_delay_ms


@final
class _AsyncioTimer:
    """``TimerHandle`` over an ``asyncio.TimerHandle``."""

    __slots__ = ("_handle",)

    def __init__(self, handle: asyncio.TimerHandle) -> None:
        self._handle = handle

    def cancel(self) -> None:
        self._handle.cancel()

    def cancelled(self) -> bool:
        return self._handle.cancelled()


@final
class SystemClock:
    """``Clock`` backed by the operating system and an asyncio event loop."""

    __slots__ = ("_loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop if loop is not None else asyncio.get_running_loop()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def now_us(self) -> int:
        return time.time_ns() // 1_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def call_later(self, delay_ms: int, callback: TimerCallback) -> TimerHandle:
        delay_ms = check_delay_ms(delay_ms)
        return _AsyncioTimer(self._loop.call_later(delay_ms / 1000.0, callback))

    def validate(self) -> None:
        """Nothing to check but that the loop is usable."""
        invariant(not self._loop.is_closed(), "SystemClock's event loop is closed")


def _conforms(clock: SystemClock) -> Clock:
    """Never called: makes mypy prove ``SystemClock`` implements ``Clock``."""
    return clock
