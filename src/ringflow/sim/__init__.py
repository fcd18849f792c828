"""Deterministic simulation: virtual time, a seeded faulty network, crashing processes, real disks.

FoundationDB- and TigerBeetle-style testing (reliability-and-style.md §A2): node code written
against ``ringflow.runtime`` (``Clock``, ``Network``, ``Disk``) runs here on one thread with a
virtual clock, so a seed replays a whole cluster's history bit for bit and a failing seed is a
reproducible bug report (``Simulation(seed).trace``). Layers: ``_loop`` (virtual time), ``_trace``
(the history), ``_network`` (delays, drops, duplicates, reordering, partitions), ``_disk``
(crash and power-loss models over a real directory), ``_process`` (incarnations, skew),
``_simulation`` (the facade). The ``_`` modules are private; the public names are re-exported
here.

Modelled: message delay (uniform or exponential-tailed), loss, duplication, reordering,
one-way and two-way partitions, receivers that stop reading (backpressure), process crashes
(memory, timers, in-flight messages and open SQLite transactions lost; the disk kept), power
loss of unsynced appends, wall-clock skew and jumps. Not modelled: bandwidth, connection
setup, clock rate drift, torn or corrupted writes, disk-full and I/O errors, SQLite durability
under ``synchronous=NORMAL``, and threads (the simulator is one thread; code that spawns its
own threads or calls ``asyncio``/``time`` directly escapes it). Each module says more.
"""

from ringflow.sim._disk import SimDisk
from ringflow.sim._loop import (
    DEFAULT_MAX_EVENTS_PER_RUN,
    DEFAULT_MAX_PENDING,
    EventLimitExceeded,
    Owner,
    PendingLimitExceeded,
    ScheduledCall,
    SimLoop,
    SimulationLimitExceeded,
    derive_seed,
)
from ringflow.sim._network import (
    DelayDistribution,
    NetworkConfig,
    SimListener,
    SimNetwork,
    swarm_network_config,
)
from ringflow.sim._process import (
    NodeFactory,
    ProcessDead,
    ProcessNetwork,
    ProcessState,
    SimClock,
    SimProcess,
)
from ringflow.sim._simulation import DEFAULT_EPOCH_MS, DEFAULT_MAX_PROCESSES, Simulation
from ringflow.sim._trace import (
    DEFAULT_MAX_TRACE_ENTRIES,
    ClockSkewed,
    Healed,
    Isolated,
    LinkNotified,
    ListenerClosed,
    ListenerOpened,
    MessageDelivered,
    MessageDropped,
    MessageDuplicated,
    MessageSent,
    Note,
    Partitioned,
    ProcessCrashed,
    ProcessStarted,
    TimerFired,
    Trace,
    TraceEntry,
    TraceEvent,
)

__all__ = [
    "DEFAULT_EPOCH_MS",
    "DEFAULT_MAX_EVENTS_PER_RUN",
    "DEFAULT_MAX_PENDING",
    "DEFAULT_MAX_PROCESSES",
    "DEFAULT_MAX_TRACE_ENTRIES",
    "ClockSkewed",
    "DelayDistribution",
    "EventLimitExceeded",
    "Healed",
    "Isolated",
    "LinkNotified",
    "ListenerClosed",
    "ListenerOpened",
    "MessageDelivered",
    "MessageDropped",
    "MessageDuplicated",
    "MessageSent",
    "NetworkConfig",
    "NodeFactory",
    "Note",
    "Owner",
    "Partitioned",
    "PendingLimitExceeded",
    "ProcessCrashed",
    "ProcessDead",
    "ProcessNetwork",
    "ProcessStarted",
    "ProcessState",
    "ScheduledCall",
    "SimClock",
    "SimDisk",
    "SimListener",
    "SimLoop",
    "SimNetwork",
    "SimProcess",
    "Simulation",
    "SimulationLimitExceeded",
    "TimerFired",
    "Trace",
    "TraceEntry",
    "TraceEvent",
    "derive_seed",
    "swarm_network_config",
]
