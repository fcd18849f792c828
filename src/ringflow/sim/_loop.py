"""The simulator's event loop: virtual time, a heap of scheduled calls, limits on every run.

Theory of operation (FoundationDB's single-threaded deterministic simulation, TigerBeetle's VOPR;
reliability-and-style.md §A2): nothing happens except by popping the earliest ``(time_us, seq,
call)`` from one heap and running ``call`` with the clock set to ``time_us``. ``seq`` is a
counter, so calls due at the same microsecond run in the order they were scheduled and a run
depends only on what was scheduled, never on hash order or wall time. Rules:

* Time is an int of microseconds since the start of the simulation and only moves forward.
* Each scheduled call may belong to an ``Owner`` (one incarnation of a simulated process); when
  the owner dies (the process crashed) its calls are skipped without running. Cancelled calls
  are skipped too. Skipped calls are not events.
* **Limits.** Every ``run_*`` call runs at most ``max_events`` events and raises
  ``EventLimitExceeded`` beyond it, so a livelock (two timers re-arming each other forever, a
  message ping-ponging) fails fast with the time it got to; the heap holds at most
  ``max_pending`` calls (``PendingLimitExceeded``).
* An exception raised by a call propagates out of ``run_*`` untouched: in a simulation a node's
  bug is a test failure, with the trace to explain it.
* ``after_event`` hooks (invariant checks) run after every event.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable
from typing import Final, final

from ringflow.errors import ClientError, InternalError, invariant

DEFAULT_MAX_EVENTS_PER_RUN: Final = 1_000_000
DEFAULT_MAX_PENDING: Final = 1_000_000


def derive_seed(seed: int, *labels: str | int) -> int:
    """A 64-bit seed for one random stream of a simulation, stable across Python processes.

    ``hash()`` is salted per process (PYTHONHASHSEED), so streams are derived with BLAKE2b.
    """
    text = repr((seed, *labels)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


class SimulationLimitExceeded(InternalError):
    """A simulation went past one of its limits: a livelock or a leak, i.e. a bug."""


class EventLimitExceeded(SimulationLimitExceeded):
    """A ``run_*`` call ran ``limit`` events without reaching its goal."""

    def __init__(self, limit: int, time_us: int, pending: int) -> None:
        super().__init__(
            f"ran {limit} events without finishing (virtual time {time_us} us, {pending} "
            f"calls pending): a livelock, or raise max_events"
        )
        self.limit = limit
        self.time_us = time_us
        self.pending = pending


class PendingLimitExceeded(SimulationLimitExceeded):
    """More than ``limit`` calls were scheduled at once."""


@final
class Owner:
    """One incarnation of a simulated process; its calls die with it."""

    __slots__ = ("alive", "incarnation", "name")

    def __init__(self, name: str, incarnation: int) -> None:
        self.name = name
        self.incarnation = incarnation
        self.alive = True

    def __repr__(self) -> str:
        state = "alive" if self.alive else "dead"
        return f"Owner({self.name}#{self.incarnation}, {state})"


@final
class ScheduledCall:
    """A call waiting in the heap; the simulator's ``TimerHandle``."""

    __slots__ = ("_cancelled", "_done", "callback", "owner", "time_us")

    def __init__(self, time_us: int, callback: Callable[[], object], owner: Owner | None) -> None:
        self.time_us = time_us
        self.callback = callback
        self.owner = owner
        self._cancelled = False
        self._done = False

    def cancel(self) -> None:
        if not self._done:
            self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def runnable(self) -> bool:
        return not self._cancelled and (self.owner is None or self.owner.alive)


@final
class SimLoop:
    """Virtual-time scheduler. Single-threaded; not re-entrant (a call may not run the loop)."""

    def __init__(
        self,
        *,
        max_events_per_run: int = DEFAULT_MAX_EVENTS_PER_RUN,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        invariant(max_events_per_run >= 1, f"max_events_per_run {max_events_per_run} < 1")
        invariant(max_pending >= 1, f"max_pending {max_pending} < 1")
        self.max_events_per_run = max_events_per_run
        self.max_pending = max_pending
        self._now_us = 0
        self._seq = 0
        self._ids = 0
        self._heap: list[tuple[int, int, ScheduledCall]] = []
        self._events_run = 0
        self._running = False
        self._hooks: list[Callable[[], object]] = []
        self.acting: Owner | None = None
        """The incarnation whose code the event being run (or last run) ran: a timer's owner,
        or the receiver of a message the network hands over (it says so); None for the
        scenario's own calls. Hooks use it to check only the process that acted."""

    @property
    def now_us(self) -> int:
        return self._now_us

    @property
    def events_run(self) -> int:
        """Events run since the loop was created."""
        return self._events_run

    @property
    def pending(self) -> int:
        """Calls in the heap, including cancelled ones not yet discarded."""
        return len(self._heap)

    def new_id(self) -> int:
        """A fresh id for trace events (timers); deterministic like everything else here."""
        self._ids += 1
        return self._ids

    def add_hook(self, hook: Callable[[], object]) -> None:
        """Run ``hook()`` after every event (invariant checks)."""
        self._hooks.append(hook)

    def call_at(
        self, time_us: int, callback: Callable[[], object], *, owner: Owner | None = None
    ) -> ScheduledCall:
        if not isinstance(time_us, int) or time_us < self._now_us:
            raise ClientError(f"cannot schedule at {time_us!r} us: now is {self._now_us} us")
        if len(self._heap) >= self.max_pending:
            self._compact()
            if len(self._heap) >= self.max_pending:
                raise PendingLimitExceeded(f"{len(self._heap)} calls pending, limit reached")
        call = ScheduledCall(time_us, callback, owner)
        self._seq += 1
        heapq.heappush(self._heap, (time_us, self._seq, call))
        return call

    def call_later(
        self, delay_us: int, callback: Callable[[], object], *, owner: Owner | None = None
    ) -> ScheduledCall:
        if not isinstance(delay_us, int) or delay_us < 0:
            raise ClientError(f"delay_us must be an int >= 0, got {delay_us!r}")
        return self.call_at(self._now_us + delay_us, callback, owner=owner)

    def next_time_us(self) -> int | None:
        """When the next runnable call is due (discarding dead ones at the top), or None."""
        heap = self._heap
        while heap and not heap[0][2].runnable:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def step(self) -> bool:
        """Run the next runnable call; False if there is none."""
        self._check_not_running()
        if self.next_time_us() is None:
            return False
        time_us, _seq, call = heapq.heappop(self._heap)
        invariant(time_us >= self._now_us, f"time would go back from {self._now_us} to {time_us}")
        self._now_us = time_us
        call._done = True
        self._events_run += 1
        self.acting = call.owner
        self._running = True
        try:
            call.callback()
        finally:
            self._running = False
        for hook in self._hooks:
            hook()
        return True

    def run_until(self, time_us: int, *, max_events: int | None = None) -> int:
        """Run every call due at or before ``time_us``, then set the clock to ``time_us``."""
        self._check_not_running()
        limit = self._limit(max_events)
        count = 0
        while (next_us := self.next_time_us()) is not None and next_us <= time_us:
            count = self._count(count, limit)
            self.step()
        self._now_us = max(self._now_us, time_us)
        return count

    def run_until_quiet(self, *, max_events: int | None = None) -> int:
        """Run until nothing is scheduled; periodic timers make this hit the event limit."""
        self._check_not_running()
        limit = self._limit(max_events)
        count = 0
        while self.next_time_us() is not None:
            count = self._count(count, limit)
            self.step()
        return count

    def run_until_true(
        self, predicate: Callable[[], bool], *, deadline_us: int, max_events: int | None = None
    ) -> bool:
        """Run until ``predicate()`` holds (checked after every event) or ``deadline_us``."""
        self._check_not_running()
        limit = self._limit(max_events)
        count = 0
        while not predicate():
            next_us = self.next_time_us()
            if next_us is None or next_us > deadline_us:
                self._now_us = max(self._now_us, deadline_us)
                return predicate()
            count = self._count(count, limit)
            self.step()
        return True

    def _limit(self, max_events: int | None) -> int:
        limit = self.max_events_per_run if max_events is None else max_events
        if not isinstance(limit, int) or limit < 1:
            raise ClientError(f"max_events must be an int >= 1, got {limit!r}")
        return limit

    def _count(self, count: int, limit: int) -> int:
        if count >= limit:
            raise EventLimitExceeded(limit, self._now_us, len(self._heap))
        return count + 1

    def _check_not_running(self) -> None:
        if self._running:
            raise ClientError("the simulation loop is not re-entrant: run_* called from an event")

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if entry[2].runnable]
        heapq.heapify(self._heap)

    def validate(self) -> None:
        invariant(len(self._heap) <= self.max_pending, f"{len(self._heap)} calls pending")
        if self._heap:
            time_us, _seq, _call = self._heap[0]
            invariant(time_us >= self._now_us, f"a call at {time_us} us is in the past")
