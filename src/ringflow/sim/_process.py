"""Simulated processes: a node built by a factory, started, crashed and restarted on demand.

A node is any object; what makes it a node is that its factory receives a ``Runtime`` (clock,
network, disk, random) and registers callbacks: ``network.listen(...)`` handlers and
``clock.call_later(...)`` timers. The pure cores of ``ringflow.cluster`` (``tick(now_ms)``,
``receive(message, now_ms)`` returning actions) plug in through a thin adapter that turns
timers into ticks and runs the returned ``Send`` actions with ``network.send``.

Rules:

* **Incarnations.** Each ``start`` creates an ``Owner`` (``name#incarnation``), a fresh
  ``Runtime`` and a fresh node from the factory. Everything the incarnation schedules (timers,
  link notifications) belongs to its owner.
* **Crash** kills the owner: pending timers never fire, listeners close, messages in flight to
  the process are lost, the node object is dropped (its in-memory state is gone), and the disk
  crashes (``SimDisk.crash``: uncommitted SQLite transactions vanish; with ``power_loss``,
  unsynced appends too). The runtime handed to a dead incarnation refuses every call with
  ``ProcessDead``, so a stale reference fails loudly. ``restart`` starts a new incarnation on
  the same disk.
* **Clock skew.** The process's wall clock is the simulation's plus ``skew_us`` (settable at any
  time, so a clock can jump backwards); its monotonic clock has a per-process origin and never
  jumps. Timers run on virtual time, unaffected by skew. Rate drift is not modelled.
* **Randomness.** Each incarnation's ``random.Random`` is seeded from ``(simulation seed,
  process name, incarnation)``, so adding a process does not change the others' draws.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from enum import Enum
from typing import final

from ringflow.errors import ClientError, InternalError, invariant
from ringflow.runtime import (
    Endpoint,
    LinkHandler,
    MessageHandler,
    NotListening,
    Runtime,
    TimerCallback,
    check_delay_ms,
)
from ringflow.sim._disk import SimDisk
from ringflow.sim._loop import Owner, ScheduledCall, SimLoop, derive_seed
from ringflow.sim._network import SimListener, SimNetwork
from ringflow.sim._trace import ClockSkewed, ProcessCrashed, ProcessStarted, TimerFired, Trace

NodeFactory = Callable[[Runtime], object]
"""Builds a node for a new incarnation; the returned object is kept as ``SimProcess.node``."""


class ProcessDead(ClientError):
    """A crashed incarnation's runtime was used (a stale reference in node or test code)."""


class ProcessState(Enum):
    CREATED = "created"
    RUNNING = "running"
    CRASHED = "crashed"


@final
class SimClock:
    """``Clock`` of one incarnation (or, with no owner, of the test driver)."""

    __slots__ = ("_epoch_us", "_loop", "_monotonic_origin_us", "_owner", "_skew_us", "_trace")

    def __init__(
        self,
        loop: SimLoop,
        trace: Trace,
        *,
        epoch_us: int,
        monotonic_origin_us: int = 0,
        skew_us: Callable[[], int] = lambda: 0,
        owner: Owner | None = None,
    ) -> None:
        self._loop = loop
        self._trace = trace
        self._epoch_us = epoch_us
        self._monotonic_origin_us = monotonic_origin_us
        self._skew_us = skew_us
        self._owner = owner

    def now_us(self) -> int:
        return self._epoch_us + self._loop.now_us + self._skew_us()

    def now_ms(self) -> int:
        return self.now_us() // 1000

    def monotonic_ms(self) -> int:
        return (self._monotonic_origin_us + self._loop.now_us) // 1000

    def call_later(self, delay_ms: int, callback: TimerCallback) -> ScheduledCall:
        _check_alive(self._owner)
        delay_ms = check_delay_ms(delay_ms)
        trace, loop = self._trace, self._loop
        owner_name = "driver" if self._owner is None else repr_owner(self._owner)
        timer_id = loop.new_id()

        def fire() -> None:
            trace.record(loop.now_us, TimerFired(owner_name, timer_id))
            callback()

        return loop.call_later(delay_ms * 1000, fire, owner=self._owner)


def repr_owner(owner: Owner) -> str:
    return f"{owner.name}#{owner.incarnation}"


def _check_alive(owner: Owner | None) -> None:
    if owner is not None and not owner.alive:
        raise ProcessDead(f"{repr_owner(owner)} crashed; its runtime is dead")


@final
class ProcessNetwork:
    """``Network`` as one incarnation sees it: its listeners are its own, it sends as itself."""

    __slots__ = ("_network", "_owner")

    def __init__(self, network: SimNetwork, owner: Owner) -> None:
        self._network = network
        self._owner = owner

    @property
    def max_frame_bytes(self) -> int:
        return self._network.max_frame_bytes

    def listen(
        self,
        endpoint: Endpoint,
        on_message: MessageHandler,
        *,
        on_link: LinkHandler | None = None,
    ) -> SimListener:
        _check_alive(self._owner)
        return self._network.listen(endpoint, on_message, on_link=on_link, owner=self._owner)

    def send(self, src: Endpoint, dst: Endpoint, payload: bytes) -> None:
        _check_alive(self._owner)
        listener = self._network.listener(src)
        if listener is not None and listener.owner is not self._owner:
            raise NotListening(f"{repr_owner(self._owner)} cannot send as {src}: not its endpoint")
        self._network.send(src, dst, payload)


@final
class SimProcess:
    """One simulated node process across its incarnations."""

    def __init__(
        self,
        name: str,
        factory: NodeFactory,
        *,
        loop: SimLoop,
        network: SimNetwork,
        trace: Trace,
        disk: SimDisk,
        seed: int,
        epoch_us: int,
        skew_us: int = 0,
    ) -> None:
        self.name = name
        self.factory = factory
        self.disk = disk
        self._loop = loop
        self._network = network
        self._trace = trace
        self._seed = seed
        self._epoch_us = epoch_us
        self._skew_us = skew_us
        self._monotonic_origin_us = random.Random(derive_seed(seed, "monotonic", name)).randrange(
            10**12
        )
        self.state = ProcessState.CREATED
        self.incarnation = 0
        self.node: object | None = None
        self.runtime: Runtime | None = None
        self._owner: Owner | None = None

    @property
    def skew_us(self) -> int:
        return self._skew_us

    def set_skew_ms(self, skew_ms: int) -> None:
        """Set the wall-clock offset (may be negative; the clock jumps at once)."""
        if not isinstance(skew_ms, int) or isinstance(skew_ms, bool):
            raise ClientError(f"skew_ms must be an int, got {skew_ms!r}")
        self._skew_us = skew_ms * 1000
        self._trace.record(self._loop.now_us, ClockSkewed(self.name, self._skew_us))

    @property
    def running(self) -> bool:
        return self.state is ProcessState.RUNNING

    @property
    def endpoints(self) -> list[Endpoint]:
        """Endpoints the current incarnation listens on."""
        return [] if self._owner is None else self._network.endpoints_of(self._owner)

    def start(self) -> object:
        """Start a new incarnation: fresh runtime, fresh node from the factory."""
        if self.state is ProcessState.RUNNING:
            raise ClientError(f"process {self.name} is already running")
        self.incarnation += 1
        owner = self._owner = Owner(self.name, self.incarnation)
        rng = random.Random(derive_seed(self._seed, "process", self.name, self.incarnation))
        clock = SimClock(
            self._loop,
            self._trace,
            epoch_us=self._epoch_us,
            monotonic_origin_us=self._monotonic_origin_us,
            skew_us=lambda: self._skew_us,
            owner=owner,
        )
        self.runtime = Runtime(clock, ProcessNetwork(self._network, owner), self.disk, rng)
        self.state = ProcessState.RUNNING
        self._trace.record(self._loop.now_us, ProcessStarted(self.name, self.incarnation))
        self.node = self.factory(self.runtime)
        return self.node

    def crash(self, *, power_loss: bool = False) -> None:
        """Kill the incarnation: timers, listeners, in-flight messages and memory are lost."""
        if self.state is not ProcessState.RUNNING or self._owner is None:
            raise ClientError(f"process {self.name} is not running ({self.state.value})")
        self._owner.alive = False
        self._trace.record(
            self._loop.now_us, ProcessCrashed(self.name, self.incarnation, power_loss)
        )
        self._network.close_owner(self._owner)
        self.disk.crash(power_loss=power_loss)
        self.node = None
        self.runtime = None
        self.state = ProcessState.CRASHED

    def restart(self) -> object:
        """Start the next incarnation of a crashed (or never started) process."""
        if self.state is ProcessState.RUNNING:
            raise ClientError(f"process {self.name} is running; crash it first")
        return self.start()

    def validate(self) -> None:
        if self.state is ProcessState.RUNNING:
            invariant(self._owner is not None and self._owner.alive, f"{self.name}: dead owner")
            invariant(self.runtime is not None, f"{self.name} runs without a runtime")
        else:
            invariant(self.node is None and self.runtime is None, f"{self.name} kept its node")
            invariant(self._owner is None or not self._owner.alive, f"{self.name}: live owner")
        if self.incarnation < 0:
            raise InternalError(f"{self.name}: negative incarnation")
        self.disk.validate()


def _conforms(clock: SimClock, network: ProcessNetwork, disk: SimDisk) -> Runtime:
    """Never called: makes mypy prove the simulated pieces make a ``Runtime``."""
    return Runtime(clock, network, disk, random.Random(0))
