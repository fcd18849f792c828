"""A node drops the captured slices every channel has (issue 14 §2: "peers with the same digest
mark theirs sent (synch-delete); a node drops slice data once every enabled channel has it";
REPLICATION.md decisions 1 and 4; the planner's rules 5-6).

Every ``interval_ms`` (default 2 s):

1. list at most ``slices_per_round_max`` of the node's sealed slices (on the storage thread),
   from where the last round stopped (a cursor over the store's key order, back to the start
   once the end is reached), and keep the **published** ones: an open or unpublished slice is
   never dropped (its peers' planner may not have seen it yet);
2. read the channels now, at QUORUM (``ChannelWatch.refresh``); without a fresh, complete read
   (a failure, or a row that does not decode as a channel) nothing is dropped this round;
3. read, at QUORUM, the ``system_replication.sent`` partitions of those slices: one per
   collecting channel of their table and slice start (``replication.sent_partitions``), at
   most ``reads_per_round_max`` (the slices past that wait for the next round);
4. drop, on the storage thread, every copy ``replication.drop_decisions`` allows: every
   channel of its table with collection enabled has the copy done, by its digest from any
   node (synch-delete: a peer's identical copy was sent) or by this node. A copy a read
   failed for is kept. Each drop is logged at DEBUG and counted.

**A table with no collecting channel holds nothing back**: the rule "every collecting channel
has it" is vacuously true, so its sealed, published slices are dropped at the next round (a
channel with collection paused, DSE's ``channel pause --collection``, holds nothing either).
Start nodes with ``--drop-sent-slices off`` to keep every slice until the capture's cap.

A channel created after a round read the channels cannot hold back what that round drops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster.service._cdc_tables import RowValues, read_partition_rows
from ringflow.cluster.service._channel_watch import ChannelRead, ChannelWatch
from ringflow.cluster.service._periodic import PeriodicRounds
from ringflow.cql import DISTRIBUTED_TABLES
from ringflow.errors import RingflowError
from ringflow.replication import (
    REPLICATION_KEYSPACE,
    SENT_TABLE,
    SealedSlice,
    SentPartition,
    SentRecord,
    SliceKey,
    drop_decisions,
    sent_from_row,
    sent_partitions,
)
from ringflow.storage import CapturedSlice

if TYPE_CHECKING:
    from ringflow.cluster.service._node import ClusterNode

_log = logging.getLogger(__name__)

SYNCH_DELETE_INTERVAL_MS: Final = 2_000
SLICES_PER_ROUND_MAX: Final = 512
READS_PER_ROUND_MAX: Final = 64
Dropped = list[CapturedSlice]


class SynchDelete:
    """Drops the node's slices every collecting channel has sent (module docstring)."""

    def __init__(
        self,
        cluster: ClusterNode,
        channels: ChannelWatch,
        *,
        interval_ms: int = SYNCH_DELETE_INTERVAL_MS,
        slices_per_round_max: int = SLICES_PER_ROUND_MAX,
        reads_per_round_max: int = READS_PER_ROUND_MAX,
    ) -> None:
        self._cluster = cluster
        self._channels = channels
        self._slices_max = slices_per_round_max
        self._reads_max = reads_per_round_max
        self._sent = DISTRIBUTED_TABLES[REPLICATION_KEYSPACE, SENT_TABLE]
        self._cursor: SliceKey | None = None
        self.dropped_slices = 0
        self.dropped_rows = 0
        self.dropped_bytes = 0
        self.failures = 0
        self.last_error: str | None = None
        """The last failure (kept after recovery; ``failing``: the last round had one)."""
        self.failing = False
        self._round_failed = False
        self._rounds = PeriodicRounds(cluster.clock, interval_ms, self._round, "synch-delete")

    def start(self) -> None:
        self._rounds.start()

    def stop(self) -> None:
        self._rounds.stop()

    def _round(self, finished: Callable[[], None]) -> None:
        capture = self._cluster.store.capture
        after, limit = self._cursor, self._slices_max
        self._round_failed = False

        def finish() -> None:
            if not self._round_failed and self.failing:
                _log.info("synch-delete works again")
                self.failing = False
            finished()

        def listed(found: list[CapturedSlice] | None, error: BaseException | None) -> None:
            if error is not None or found is None:
                self._failed("listing sealed slices", error)
                finish()
                return
            self._cursor = found[-1].key if len(found) == limit else None
            published = [held for held in found if held.published]
            if not published:
                finish()
                return
            self._channels.refresh(
                lambda read, error: self._read_sent(published, read, error, finish)
            )

        self._cluster.offload(lambda: capture.slices(sealed=True, after=after, limit=limit), listed)

    def _read_sent(
        self,
        held: list[CapturedSlice],
        read: ChannelRead | None,
        error: BaseException | None,
        finish: Callable[[], None],
    ) -> None:
        if error is not None or read is None:
            self._failed("reading the channels", error)
            finish()
            return
        if read.unreadable:
            self._failed("channels unreadable", RingflowError(", ".join(read.unreadable)))
            finish()
            return
        node = self._cluster.host.host_id
        copies = [captured.sealed_slice(node) for captured in held]
        copies, partitions = self._bounded(copies, read)
        records: list[SentRecord] = []
        done: set[SentPartition] = set()
        remaining = len(partitions)

        def decide() -> None:
            try:
                keys = drop_decisions(node, copies, read.channels, records, done)
            except RingflowError as failure:
                self._failed("deciding drops", failure)
                finish()
                return
            by_key = {captured.key: captured for captured in held}
            self._drop([by_key[key] for key in keys], finish)

        if not partitions:
            decide()
            return
        for partition in partitions:

            def answered(
                rows: list[RowValues] | None,
                error: BaseException | None,
                partition: SentPartition = partition,
            ) -> None:
                nonlocal remaining
                try:
                    if error is not None or rows is None:
                        raise error or RingflowError("sent read without an answer")
                    records.extend(sent_from_row(row) for row in rows)
                    done.add(partition)
                except Exception as failure:  # a bad row keeps the copies of its partition
                    self._failed(f"reading sent records of {partition}", failure)
                remaining -= 1
                if remaining == 0:
                    decide()

            read_partition_rows(
                self._cluster, self._sent, partition.key_values, ConsistencyLevel.QUORUM, answered
            )

    def _bounded(
        self, copies: list[SealedSlice], read: ChannelRead
    ) -> tuple[list[SealedSlice], list[SentPartition]]:
        """The first copies whose ``sent`` partitions fit in ``reads_per_round_max`` (the rest
        wait: the cursor goes back to the last copy kept); the first copy always goes (a
        table with more collecting channels than that still makes progress)."""
        wanted: set[SentPartition] = set()
        kept: list[SealedSlice] = []
        for copy in copies:
            more = wanted | set(sent_partitions([copy], read.channels))
            if len(more) > self._reads_max and kept:
                self._cursor = kept[-1].key if kept else self._cursor
                break
            wanted = more
            kept.append(copy)
        return kept, sorted(wanted)

    def _drop(self, doomed: Sequence[CapturedSlice], finish: Callable[[], None]) -> None:
        if not doomed:
            finish()
            return
        capture = self._cluster.store.capture

        def work() -> Dropped:
            return [captured for captured in doomed if capture.drop(captured.key)]

        def dropped(result: Dropped | None, error: BaseException | None) -> None:
            if error is not None or result is None:
                self._failed("dropping sent slices", error)
                finish()
                return
            for captured in result:
                _log.debug(
                    "dropped slice %s (%d rows, %d bytes): every collecting channel has it",
                    captured.key, captured.row_count, captured.size_bytes,
                )  # fmt: skip
                self.dropped_slices += 1
                self.dropped_rows += captured.row_count
                self.dropped_bytes += captured.size_bytes
            finish()

        self._cluster.offload(work, dropped)

    def _failed(self, what: str, error: BaseException | None) -> None:
        self.failures += 1
        text = f"{what}: {type(error).__name__}: {error}"
        if not self.failing:
            _log.warning("synch-delete: %s (retrying every round)", text)
        self.last_error = text
        self.failing = self._round_failed = True

    def status(self) -> dict[str, object]:
        """For ``status.json``: what was dropped (this run), failures, the last error."""
        return {
            "dropped_slices": self.dropped_slices,
            "dropped_rows": self.dropped_rows,
            "dropped_bytes": self.dropped_bytes,
            "failures": self.failures,
            "failing": self.failing,
            "last_error": self.last_error,
            "rounds": self._rounds.rounds,
        }
