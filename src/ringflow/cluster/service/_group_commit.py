"""Group commit of replica writes: the write units waiting for the store go in one transaction.

A replica applies every ``WriteUnit`` it receives (MUTATION_REQ, HINT_REQ, its own share of a
write it coordinates) through ``GroupCommit``. On the node's thread (the event loop or the
simulator), units queue; while one group is being applied on the storage thread, the next one
gathers, and when the store is done the whole queue (at most ``max_group`` units) goes to
``Store.apply_group``: one SQLite transaction, one COMMIT, one WAL fsync for all of them, where
one unit each cost its own. This is Cassandra's "group" commit-log sync and what ScyllaDB's
commitlog does: a write is acknowledged only after the group holding it is durable, so the
"acknowledged means durable" rule is unchanged; under load the fsyncs and transactions are
shared, and when the node is idle a lone unit goes at once (no added wait).

Rules: one group in flight at a time (the store is one SQLite connection); at most
``max_queued`` units wait, beyond that a unit is refused at once (``ReplicaOverloaded``; the
coordinator counts it as that replica's failure, as when a replica drops a mutation); a unit
refused by the store (InvalidRequest) fails alone; a storage failure fails the whole group.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

from ringflow.cluster._write_path import WriteUnit
from ringflow.cluster.service._settings import Offload
from ringflow.errors import ErrorCode, PeerError

MAX_GROUP: Final = 256
"""At most this many write units in one transaction."""
MAX_QUEUED: Final = 8192
"""At most this many write units waiting for the store; more are refused."""

UnitDone = Callable[[BaseException | None], None]
ApplyGroup = Callable[[Sequence[WriteUnit]], Sequence[BaseException | None]]


class ReplicaOverloaded(PeerError):
    """This replica has ``MAX_QUEUED`` writes waiting for its store already."""

    code = ErrorCode.OVERLOADED


class GroupCommit:
    """Queues write units and applies them in groups (see the module docstring)."""

    def __init__(
        self,
        offload: Offload,
        apply_group: ApplyGroup,
        *,
        max_group: int = MAX_GROUP,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        self._offload = offload
        self._apply_group = apply_group
        self._max_group = max_group
        self._max_queued = max_queued
        self._queued: deque[tuple[WriteUnit, UnitDone]] = deque()
        self._busy = False
        self.groups = 0
        """Groups applied so far (with ``units``: the mean group size)."""
        self.units = 0

    @property
    def queued(self) -> int:
        return len(self._queued)

    def submit(self, unit: WriteUnit, done: UnitDone) -> None:
        """Apply ``unit`` with the next group; ``done(error)`` once it is durable (None) or
        refused."""
        if len(self._queued) >= self._max_queued:
            done(ReplicaOverloaded(f"{len(self._queued)} writes already wait for the store"))
            return
        self._queued.append((unit, done))
        if not self._busy:
            self._next_group()

    def _next_group(self) -> None:
        count = min(len(self._queued), self._max_group)
        group = [self._queued.popleft() for _ in range(count)]
        units = [unit for unit, _ in group]
        self._busy = True
        self.groups += 1
        self.units += len(units)

        def finished(
            outcomes: Sequence[BaseException | None] | None, error: BaseException | None
        ) -> None:
            self._busy = False
            for index, (_unit, done) in enumerate(group):
                done(error if error is not None or outcomes is None else outcomes[index])
            if self._queued and not self._busy:
                self._next_group()

        self._offload(lambda: self._apply_group(units), finished)
