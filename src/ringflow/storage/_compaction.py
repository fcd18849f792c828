"""gc_grace purge of one partition's stored state. Pure.

Correct, not fancy (cassandra-core.md §6.2): data shadowed by a deletion is dropped at once
(partition deletion, covering range tombstones, the row's own deletion, collection tombstones);
expired cells become tombstones at their write second and expired liveness the expired marker
(``expire_row``); then tombstones, expired cells and dead liveness whose local time is before
``gc_before_s = now_s - gc_grace_seconds`` are dropped (``purge_row``), as are partition
deletions and range tombstones that old. Cassandra only purges a tombstone when no other sstable
holds older data for the key; here the store holds every version of the key in one place and
the shadowed data goes in the same pass, so nothing can come back.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringflow.schema import expire_row, is_row_empty, purge_row, shadow_row
from ringflow.storage._read import PartitionTombstones, StoredRow


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What one ``Store.compact`` call did."""

    partitions_scanned: int = 0
    partitions_rewritten: int = 0
    partitions_removed: int = 0


@dataclass(frozen=True, slots=True)
class CompactedPartition:
    """A partition's state after purge, and whether it differs from what is stored."""

    rows: list[StoredRow]
    tombstones: PartitionTombstones
    changed: bool

    @property
    def is_empty(self) -> bool:
        return not self.rows and self.tombstones.is_empty


def compact_partition(
    rows: list[StoredRow], tombstones: PartitionTombstones, now_s: int, gc_before_s: int
) -> CompactedPartition:
    """The state to keep for one partition (``gc_before_s <= now_s``)."""
    kept: list[StoredRow] = []
    for stored in rows:
        row = shadow_row(stored.row, tombstones.covering(stored.ck))
        row = purge_row(expire_row(row, now_s), gc_before_s)
        if not is_row_empty(row):
            kept.append(StoredRow(stored.ck, row, stored.canonical))
    deletion = tombstones.partition_deletion
    if deletion is not None and deletion.local_deletion_time_s < gc_before_s:
        deletion = None
    ranges = tuple(
        stored
        for stored in tombstones.ranges
        if stored.deletion.local_deletion_time_s >= gc_before_s
    )
    kept_tombstones = PartitionTombstones(deletion, ranges)
    fragmented = any(not stored.canonical for stored in rows)
    changed = fragmented or kept_tombstones != tombstones or kept != rows
    return CompactedPartition(kept, kept_tombstones, changed)
