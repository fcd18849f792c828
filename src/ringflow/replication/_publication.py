"""A node's side of the replicated slice state: what it publishes, and what it reads to drop
(issue 14 §1-2; REPLICATION.md decisions 4 and 5; seed 002 "Time slice CRC processing").

Pure helpers for the node's publication and synch-delete services (``cluster.service``):

* **Publication batches** (:func:`publication_batches`): the sealed slices a node publishes,
  grouped by their partition of ``system_replication.slices`` (keyspace, table, slice start),
  at most ``rows_max`` rows per write, oldest first. The node writes each batch at QUORUM and
  marks its slices published only once it is acknowledged; then it raises its seal watermark
  of each table (``SealWatermark``), never before: a reader that sees a watermark sees every
  slice due at or before it (the planner's rule 2).
* **Sent partitions** (:func:`sent_partitions`): the partitions of ``system_replication.sent``
  (keyspace, table, channel, slice start) a node reads to decide which of its copies it may
  drop: one per collecting channel of a copy's table and slice start. A table without a
  collecting channel needs none: nothing holds its data back (the planner's rule 6, vacuously
  true), so its sealed, published slices are dropped at once.
* :func:`drop_decisions`: ``droppable`` over the copies whose partitions were all read (a copy
  with a partition unread is kept for a later round).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from ringflow.replication._channels import Channel
from ringflow.replication._model import ReplicationArgumentError, SealedSlice, SliceKey
from ringflow.replication._planner import SentIndex, SentRecord, droppable

DEFAULT_PUBLICATION_ROWS_MAX = 64
"""Rows of ``slices`` per publication write (one partition: a slice start's ranges)."""


@dataclass(frozen=True, slots=True, order=True)
class SentPartition:
    """One partition of ``system_replication.sent``: a channel's records of one slice start."""

    keyspace: str
    table: str
    channel: str
    slice_start_ms: int

    @property
    def key_values(self) -> tuple[str, str, str, int]:
        """The partition key's values in the table's order (keyspace_name, table_name,
        channel, slice_start_ms)."""
        return (self.keyspace, self.table, self.channel, self.slice_start_ms)


def publication_batches(
    sealed: Iterable[SealedSlice], rows_max: int = DEFAULT_PUBLICATION_ROWS_MAX
) -> list[tuple[SealedSlice, ...]]:
    """``sealed`` grouped by partition of ``system_replication.slices`` (keyspace, table, slice
    start), each group cut into batches of at most ``rows_max``; batches in the order their
    first slice came (the caller passes oldest seal first), slices in key order."""
    if type(rows_max) is not int or rows_max < 1:
        raise ReplicationArgumentError(f"rows_max must be an int >= 1, got {rows_max!r}")
    groups: dict[tuple[str, str, int], list[SealedSlice]] = {}
    for copy in sealed:
        if not isinstance(copy, SealedSlice):
            raise ReplicationArgumentError(f"expected SealedSlice, got {copy!r}")
        key = copy.key
        groups.setdefault((key.keyspace, key.table, key.slice_start_ms), []).append(copy)
    batches: list[tuple[SealedSlice, ...]] = []
    for copies in groups.values():
        copies.sort(key=lambda copy: copy.key)
        batches.extend(
            tuple(copies[index : index + rows_max]) for index in range(0, len(copies), rows_max)
        )
    return batches


def collecting_tables(channels: Iterable[Channel]) -> dict[tuple[str, str], tuple[str, ...]]:
    """The channels with collection enabled, by source (keyspace, table), names sorted."""
    found: dict[tuple[str, str], list[str]] = {}
    for channel in channels:
        if channel.collection_enabled:
            found.setdefault((channel.source_keyspace, channel.source_table), []).append(
                channel.name
            )
    return {table: tuple(sorted(names)) for table, names in found.items()}


def sent_partitions(
    copies: Iterable[SealedSlice], channels: Iterable[Channel]
) -> list[SentPartition]:
    """The ``sent`` partitions to read before deciding whether ``copies`` may be dropped
    (module docstring), sorted; none for a table without a collecting channel."""
    collecting = collecting_tables(channels)
    wanted: set[SentPartition] = set()
    for copy in copies:
        key = copy.key
        for name in collecting.get((key.keyspace, key.table), ()):
            wanted.add(SentPartition(key.keyspace, key.table, name, key.slice_start_ms))
    return sorted(wanted)


def partitions_of(key: SliceKey, channels: Iterable[Channel]) -> list[SentPartition]:
    """The ``sent`` partitions whose records decide whether ``key``'s copy is done."""
    names = collecting_tables(channels).get((key.keyspace, key.table), ())
    return [SentPartition(key.keyspace, key.table, name, key.slice_start_ms) for name in names]


def drop_decisions(
    node: uuid.UUID,
    copies: Sequence[SealedSlice],
    channels: Sequence[Channel],
    records: Iterable[SentRecord],
    read: Collection[SentPartition],
) -> tuple[SliceKey, ...]:
    """The keys of ``node``'s ``copies`` it may drop now: ``droppable`` by ``records``, among
    the copies whose every ``sent`` partition is in ``read`` (sorted)."""
    decidable = [
        copy
        for copy in copies
        if all(partition in read for partition in partitions_of(copy.key, channels))
    ]
    return droppable(node, decidable, channels, SentIndex.of(records))
