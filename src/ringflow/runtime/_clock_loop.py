"""An event loop's hand-off calls and an executor over a runtime ``Clock``, for one thread.

Shell code that hands work to the event loop (``call_soon_threadsafe``, ``call_later`` in
seconds) or to an executor (``submit``) is written against asyncio's loop and
``concurrent.futures``. In a runtime with no threads and no asyncio loop (the simulator,
``ringflow.sim``), the same code runs over these: a hand-off is a 0 ms timer of the node's
``Clock``, so it runs after the current callback, in order, and is lost with the node's
incarnation like any of its timers. Nothing here is thread-safe: both are for a runtime whose
callbacks run one at a time on one thread (the ``Clock`` contract).
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from ringflow.runtime._interfaces import TIMER_DELAY_MS_MAX, Clock, TimerHandle

_T = TypeVar("_T")
_P = ParamSpec("_P")


class ClockLoop:
    """``call_soon_threadsafe`` and ``call_later`` (seconds) of asyncio's loop, over ``clock``."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any) -> TimerHandle:
        """Run ``callback(*args)`` after the current callback (a 0 ms timer)."""
        return self._clock.call_later(0, functools.partial(callback, *args))

    def call_later(
        self, delay_s: float, callback: Callable[..., object], *args: Any
    ) -> TimerHandle:
        """Run ``callback(*args)`` ``delay_s`` seconds from now (rounded up to a millisecond)."""
        delay_ms = min(max(0, math.ceil(delay_s * 1000)), TIMER_DELAY_MS_MAX)
        return self._clock.call_later(delay_ms, functools.partial(callback, *args))


class ClockExecutor(concurrent.futures.Executor):
    """An executor whose work runs as 0 ms timers of ``clock``, one at a time, in order.

    ``submit`` returns at once; the future is done when the timer has run the work (never, if
    the incarnation owning the clock crashed first). After ``shutdown`` it refuses work with
    RuntimeError, as a thread pool does."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._closed = False

    def submit(
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> concurrent.futures.Future[_T]:
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as error:
                future.set_exception(error)
            else:
                future.set_result(result)

        self._clock.call_later(0, run)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True
