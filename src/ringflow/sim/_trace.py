"""The simulation's history: typed events with their virtual time, and a digest of all of them.

reliability-and-style.md §A2.4: a failure report is ``(seed, commit)`` and a replay must be
bit-identical, checked by comparing the event trace or its hash. Rules:

* Every event is a frozen, slotted dataclass of plain values (str, int, bool, tuples), so two
  runs compare with ``==`` and ``repr`` is stable across processes (no ids, no hash order).
* ``Trace`` keeps the first ``max_entries`` entries and counts the rest, but its ``digest``
  covers every entry ever recorded: long runs stay bounded in memory and still comparable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, TypeAlias, TypeVar, final

from ringflow.errors import invariant

DEFAULT_MAX_TRACE_ENTRIES: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class MessageSent:
    src: str
    dst: str
    message_id: int
    size: int
    crc32: int


@dataclass(frozen=True, slots=True)
class MessageDelivered:
    src: str
    dst: str
    message_id: int
    copy: int
    """0 for the original, 1 for a network-made duplicate."""


@dataclass(frozen=True, slots=True)
class MessageDropped:
    src: str
    dst: str
    message_id: int
    reason: str
    """``random``, ``partition``, ``no-listener`` or ``closed`` (the receiver closed/crashed)."""


@dataclass(frozen=True, slots=True)
class MessageDuplicated:
    src: str
    dst: str
    message_id: int


@dataclass(frozen=True, slots=True)
class LinkNotified:
    src: str
    dst: str
    up: bool


@dataclass(frozen=True, slots=True)
class ListenerOpened:
    endpoint: str
    host: str


@dataclass(frozen=True, slots=True)
class ListenerClosed:
    endpoint: str


@dataclass(frozen=True, slots=True)
class TimerFired:
    owner: str
    timer_id: int


@dataclass(frozen=True, slots=True)
class ProcessStarted:
    name: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class ProcessCrashed:
    name: str
    incarnation: int
    power_loss: bool


@dataclass(frozen=True, slots=True)
class ClockSkewed:
    name: str
    skew_us: int


@dataclass(frozen=True, slots=True)
class Partitioned:
    pairs: tuple[tuple[str, str], ...]
    """Blocked ``(source host, destination host)`` pairs added, sorted."""


@dataclass(frozen=True, slots=True)
class Isolated:
    host: str


@dataclass(frozen=True, slots=True)
class Healed:
    pass


@dataclass(frozen=True, slots=True)
class Note:
    """A line the scenario itself wrote into the history (``Simulation.note``)."""

    text: str


TraceEvent: TypeAlias = (
    MessageSent
    | MessageDelivered
    | MessageDropped
    | MessageDuplicated
    | LinkNotified
    | ListenerOpened
    | ListenerClosed
    | TimerFired
    | ProcessStarted
    | ProcessCrashed
    | ClockSkewed
    | Partitioned
    | Isolated
    | Healed
    | Note
)


EventT = TypeVar("EventT", bound=TraceEvent)


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One event at virtual time ``time_us`` (microseconds since the simulation started)."""

    time_us: int
    event: TraceEvent


@final
class Trace:
    """Append-only, bounded history of a simulation run."""

    __slots__ = ("_count", "_entries", "_hash", "max_entries")

    def __init__(self, max_entries: int = DEFAULT_MAX_TRACE_ENTRIES) -> None:
        invariant(max_entries >= 0, f"max_entries must be >= 0, got {max_entries}")
        self.max_entries = max_entries
        self._entries: list[TraceEntry] = []
        self._hash = hashlib.blake2b(digest_size=16)
        self._count = 0

    def record(self, time_us: int, event: TraceEvent) -> None:
        entry = TraceEntry(time_us, event)
        self._hash.update(repr(entry).encode())
        self._count += 1
        if len(self._entries) < self.max_entries:
            self._entries.append(entry)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[TraceEntry]:
        return iter(self._entries)

    def __getitem__(self, index: int) -> TraceEntry:
        return self._entries[index]

    @property
    def count(self) -> int:
        """Entries ever recorded, kept or not."""
        return self._count

    @property
    def dropped_entries(self) -> int:
        return self._count - len(self._entries)

    def entries(self) -> list[TraceEntry]:
        return list(self._entries)

    def of_type(self, *kinds: type[TraceEvent]) -> list[TraceEntry]:
        """Kept entries whose event is one of ``kinds``."""
        return [entry for entry in self._entries if isinstance(entry.event, kinds)]

    def timed(self, kind: type[EventT]) -> list[tuple[int, EventT]]:
        """``(time_us, event)`` of every kept event of ``kind``, typed for the caller."""
        return [(e.time_us, e.event) for e in self._entries if isinstance(e.event, kind)]

    def digest(self) -> str:
        """Hex digest over every recorded entry (equal digests: equal histories)."""
        return self._hash.copy().hexdigest()

    def tail(self, count: int = 40) -> str:
        """The last ``count`` kept entries, one per line, for failure messages."""
        lines = [f"{e.time_us:>12} us  {e.event!r}" for e in self._entries[-count:]]
        return "\n".join(lines)

    def validate(self) -> None:
        invariant(len(self._entries) <= self.max_entries, "trace kept more than max_entries")
        invariant(self._count >= len(self._entries), "trace count below kept entries")
        times = [entry.time_us for entry in self._entries[-1000:]]
        invariant(times == sorted(times), "trace times go backwards")
