"""An asyncio event loop and an executor over a runtime ``Clock``, for one thread.

Shell code that hands work to the event loop (``call_soon_threadsafe``, ``call_later`` in
seconds), runs coroutines on it (``create_task``, futures, ``asyncio.wait_for``, ``gather``,
``Lock``) or hands work to an executor (``submit``) is written against asyncio's loop and
``concurrent.futures``. In a runtime with no threads and no asyncio loop of its own (the
simulator, ``ringflow.sim``), the same code runs over these: every callback is a timer of the
node's ``Clock`` (0 ms for a hand-off), so it runs after the current callback, in order, at
the clock's time, and is lost with the node's incarnation like any of its timers (a coroutine
of a crashed node never resumes). While one of its callbacks runs, the loop is asyncio's
running loop, which asyncio's primitives look up. Nothing here is thread-safe: both are for
a runtime whose callbacks run one at a time on one thread (the ``Clock`` contract).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import math
from collections.abc import Callable, Coroutine, Generator
from typing import Any, ParamSpec, TypeVar

from ringflow.runtime._interfaces import TIMER_DELAY_MS_MAX, Clock, TimerHandle

_T = TypeVar("_T")
_P = ParamSpec("_P")


_log = logging.getLogger(__name__)


class ClockLoop(asyncio.AbstractEventLoop):
    """The part of asyncio's loop that futures, tasks and their primitives use, over ``clock``
    (module docstring): ``call_soon[_threadsafe]``, ``call_later``/``call_at`` (seconds of
    ``time()``, the clock's monotonic time, rounded up to a millisecond), ``create_future``,
    ``create_task``. No I/O, subprocesses or ``run_*``: the simulator's step runs the loop."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def time(self) -> float:
        return self._clock.monotonic_ms() / 1000

    def call_soon(  # type: ignore[override]  # a TimerHandle: cancel() only
        self,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` after the current callback (a 0 ms timer)."""
        return self._at(0, callback, args, context)

    call_soon_threadsafe = call_soon  # type: ignore[assignment]  # one thread: the same hand-off

    def call_later(  # type: ignore[override]  # a TimerHandle: cancel() only
        self,
        delay: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` ``delay`` seconds from now (rounded up to a millisecond)."""
        delay_ms = min(max(0, math.ceil(delay * 1000)), TIMER_DELAY_MS_MAX)
        return self._at(delay_ms, callback, args, context)

    def call_at(  # type: ignore[override]  # a TimerHandle: cancel() only
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        return self.call_later(when - self.time(), callback, *args, context=context)

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(
        self,
        coro: Coroutine[Any, Any, _T] | Generator[Any, None, _T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[_T]:
        return asyncio.Task(coro, loop=self, name=name, context=context)

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return True

    def is_closed(self) -> bool:
        return False

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        """What asyncio reports: an exception nobody retrieved is logged as an error; a task
        destroyed while pending only at debug level (what a crash leaves: its coroutines
        never resume)."""
        task = context.get("task")
        level = logging.DEBUG if task is not None and not task.done() else logging.ERROR
        _log.log(level, "%s", context.get("message"), exc_info=context.get("exception"))

    def _at(
        self,
        delay_ms: int,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> TimerHandle:
        def run() -> None:
            previous = asyncio.events._get_running_loop()
            asyncio.events._set_running_loop(self)
            try:
                if context is None:
                    callback(*args)
                else:
                    context.run(callback, *args)
            finally:
                asyncio.events._set_running_loop(previous)

        return self._clock.call_later(delay_ms, run)


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
