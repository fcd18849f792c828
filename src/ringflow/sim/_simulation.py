"""``Simulation``: one seed, one loop, one network, named processes and the trace of it all.

The facade a test drives (reliability-and-style.md §A2.4): build it from a seed, add processes
with factories, schedule faults (``at``/``after`` with ``crash``, ``partition``, ``heal``,
``set_skew_ms``), run it (``run_for``, ``run_until_true``, ``run_until_quiet``) and check
invariants. Everything random derives from the seed (``derive_seed``: one stream for the
network, one per process incarnation, one for the scenario itself via ``Simulation.rng``), so
``Simulation(seed)`` replays the same ``trace`` event for event; ``describe()`` prints what a
failure report needs. Nothing reads the wall clock, and nothing iterates a set in hash order.

Each process gets a ``SimDisk`` in its own directory under ``data_root`` (a temporary directory,
made when the first process is added and removed by ``close``, unless one was given).
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, final

from ringflow.errors import ClientError, invariant
from ringflow.runtime import check_name
from ringflow.sim._disk import SimDisk
from ringflow.sim._loop import (
    DEFAULT_MAX_EVENTS_PER_RUN,
    DEFAULT_MAX_PENDING,
    ScheduledCall,
    SimLoop,
    derive_seed,
)
from ringflow.sim._network import NetworkConfig, SimNetwork
from ringflow.sim._process import NodeFactory, SimClock, SimProcess
from ringflow.sim._trace import DEFAULT_MAX_TRACE_ENTRIES, Note, Trace

DEFAULT_EPOCH_MS: Final = 1_700_000_000_000
"""Wall-clock time at virtual time 0 (2023-11-14T22:13:20Z): realistic for generations."""
DEFAULT_MAX_PROCESSES: Final = 256


@final
class Simulation:
    """A deterministic, seeded world of simulated processes on a simulated network."""

    def __init__(
        self,
        seed: int,
        *,
        network: NetworkConfig | None = None,
        max_events_per_run: int = DEFAULT_MAX_EVENTS_PER_RUN,
        max_pending_events: int = DEFAULT_MAX_PENDING,
        max_trace_entries: int = DEFAULT_MAX_TRACE_ENTRIES,
        max_processes: int = DEFAULT_MAX_PROCESSES,
        epoch_ms: int = DEFAULT_EPOCH_MS,
        data_root: Path | None = None,
    ) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ClientError(f"seed must be an int, got {seed!r}")
        self.seed = seed
        self.rng = random.Random(derive_seed(seed, "scenario"))
        """For the scenario's own choices (which node to crash, when)."""
        self.loop = SimLoop(max_events_per_run=max_events_per_run, max_pending=max_pending_events)
        self.trace = Trace(max_trace_entries)
        self.network = SimNetwork(
            self.loop, random.Random(derive_seed(seed, "network")), self.trace, network
        )
        self.epoch_us = epoch_ms * 1000
        self.clock = SimClock(self.loop, self.trace, epoch_us=self.epoch_us)
        """The driver's clock: no skew, no owner (its timers survive every crash)."""
        self.max_processes = max_processes
        self._owns_root = data_root is None
        self._data_root = None if data_root is None else Path(data_root)
        self._processes: dict[str, SimProcess] = {}
        self._closed = False

    # --- time ----------------------------------------------------------------------------------

    def now_us(self) -> int:
        """Virtual microseconds since the simulation started."""
        return self.loop.now_us

    def now_ms(self) -> int:
        return self.loop.now_us // 1000

    @property
    def data_root(self) -> Path:
        """Where process disks live; a temporary directory is made on first use if none given."""
        if self._data_root is None:
            self._data_root = Path(tempfile.mkdtemp(prefix="ringflow-sim-"))
        return self._data_root

    # --- processes -----------------------------------------------------------------------------

    def add_process(
        self, name: str, factory: NodeFactory, *, skew_ms: int = 0, start: bool = True
    ) -> SimProcess:
        """Create process ``name`` (a disk-safe name) and, by default, start it now."""
        self._check_open()
        check_name(name)
        if "/" in name or name in self._processes:
            raise ClientError(f"process name {name!r} is nested or already taken")
        if len(self._processes) >= self.max_processes:
            raise ClientError(f"{len(self._processes)} processes, limit {self.max_processes}")
        process = SimProcess(
            name,
            factory,
            loop=self.loop,
            network=self.network,
            trace=self.trace,
            disk=SimDisk(self.data_root / name),
            seed=self.seed,
            epoch_us=self.epoch_us,
        )
        self._processes[name] = process
        if skew_ms:
            process.set_skew_ms(skew_ms)
        if start:
            process.start()
        return process

    def process(self, name: str) -> SimProcess:
        try:
            return self._processes[name]
        except KeyError:
            raise ClientError(f"no process named {name!r}") from None

    @property
    def processes(self) -> list[SimProcess]:
        return list(self._processes.values())

    def crash(self, name: str, *, power_loss: bool = False) -> None:
        self.process(name).crash(power_loss=power_loss)

    def restart(self, name: str) -> object:
        return self.process(name).restart()

    def set_skew_ms(self, name: str, skew_ms: int) -> None:
        self.process(name).set_skew_ms(skew_ms)

    # --- faults --------------------------------------------------------------------------------

    def partition(self, *groups: Iterable[str]) -> None:
        """Cut traffic between groups of process names (both directions)."""
        for group in groups:
            for name in group:
                self.process(name)
        self.network.partition(*groups)

    def isolate(self, name: str) -> None:
        self.process(name)
        self.network.isolate(name)

    def heal(self) -> None:
        self.network.heal()

    def configure_network(self, config: NetworkConfig) -> None:
        self.network.configure(config)

    # --- scheduling and running ----------------------------------------------------------------

    def at(self, time_ms: int, callback: Callable[[], object]) -> ScheduledCall:
        """Run ``callback`` (a fault, a check) at virtual ``time_ms``."""
        return self.loop.call_at(time_ms * 1000, callback)

    def after(self, delay_ms: int, callback: Callable[[], object]) -> ScheduledCall:
        return self.loop.call_later(delay_ms * 1000, callback)

    def note(self, text: str) -> None:
        """Write a line of the scenario's own into the trace."""
        self.trace.record(self.loop.now_us, Note(text))

    def add_invariant(self, check: Callable[[], object]) -> None:
        """Run ``check()`` after every event; it raises to fail the run."""
        self.loop.add_hook(check)

    def acting_process(self) -> str | None:
        """The process whose code the last event ran (a timer of it, a message to it), if
        it still runs; for invariants that check only what may have changed."""
        owner = self.loop.acting
        return owner.name if owner is not None and owner.alive else None

    def run_for(self, duration_ms: int, *, max_events: int | None = None) -> int:
        """Advance virtual time by ``duration_ms``; returns the number of events run."""
        return self.loop.run_until(self.loop.now_us + duration_ms * 1000, max_events=max_events)

    def run_until(self, time_ms: int, *, max_events: int | None = None) -> int:
        return self.loop.run_until(time_ms * 1000, max_events=max_events)

    def run_until_quiet(self, *, max_events: int | None = None) -> int:
        return self.loop.run_until_quiet(max_events=max_events)

    def run_until_true(
        self, predicate: Callable[[], bool], *, timeout_ms: int, max_events: int | None = None
    ) -> bool:
        """Run until ``predicate()`` holds or ``timeout_ms`` of virtual time have passed."""
        deadline_us = self.loop.now_us + timeout_ms * 1000
        return self.loop.run_until_true(predicate, deadline_us=deadline_us, max_events=max_events)

    # --- reports and lifecycle -----------------------------------------------------------------

    def describe(self) -> str:
        """What reproduces this run: the seed and the network settings (plus the commit)."""
        config = self.network.config
        return (
            f"Simulation(seed={self.seed}) at {self.loop.now_us} us after "
            f"{self.loop.events_run} events; network {config}; trace digest "
            f"{self.trace.digest()}"
        )

    def validate(self) -> None:
        self.loop.validate()
        self.network.validate()
        self.trace.validate()
        for process in self._processes.values():
            process.validate()
        invariant(len(self._processes) <= self.max_processes, "too many processes")

    def _check_open(self) -> None:
        if self._closed:
            raise ClientError("the simulation is closed")

    def close(self) -> None:
        """Close every disk and, if the simulation made it, remove the data directory."""
        if self._closed:
            return
        self._closed = True
        for process in self._processes.values():
            process.disk.close()
        if self._owns_root and self._data_root is not None:
            shutil.rmtree(self._data_root, ignore_errors=True)

    def __enter__(self) -> Simulation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
