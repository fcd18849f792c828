"""The store's limits and the pure size accounting that enforces them.

Every batch, read and queue the store handles is bounded (STYLE.md "Invariants and limits are
code"). The defaults follow Cassandra where it has a figure: a mutation may be at most half a
commitlog segment, 16 MiB (``max_mutation_size = commitlog_segment_size / 2``), and a read fails
after 100,000 tombstones (``tombstone_failure_threshold``). The size of a mutation is an estimate
of its serialized size: every payload byte (keys, clustering, values, paths, column names) plus a
fixed overhead per atom. ``apply`` takes it from the flattened atoms it is about to write
(``FlatMutation.size_bytes``); :func:`mutation_size` estimates the same from a Mutation alone
(hints).
"""

from __future__ import annotations

from dataclasses import dataclass

from ringflow.errors import InvalidRequest
from ringflow.schema import Cell, Mutation, Row

MIB = 1024 * 1024
ATOM_OVERHEAD_BYTES = 16
"""Estimated fixed cost of one cell, marker or tombstone (timestamp, TTL, deletion time)."""


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """Bounds on what one call may ask of the store. Every field must be positive.

    The batch limits count what the caller hands to ``apply``; the CDC log rows the store builds
    for it are bounded by that (at most a pre-image, a delta and a post-image row per base row)
    and are not counted again.
    """

    max_mutation_size_bytes: int = 16 * MIB
    """One mutation's estimated serialized size (Cassandra: half a 32 MiB commitlog segment)."""
    max_batch_cells: int = 100_000
    """Atoms (cells, markers, tombstones) in one ``apply`` batch."""
    max_batch_mutations: int = 10_000
    max_result_rows: int = 100_000
    """Rows one ``read_partition`` may return without a ``limit``."""
    max_page_size_rows: int = 10_000
    """Largest ``page_size`` of a scan (and partitions per compaction transaction)."""
    max_tombstones_per_read: int = 100_000
    """Cassandra's ``tombstone_failure_threshold``."""
    max_held_read_bytes: int = 64 * MIB
    """What one statement may hold in memory of the partitions it read through the
    coordinator (their estimated serialized size, ``mutation_size``): a SELECT of a larger
    clustering slice, or of more partitions at once, is refused (``ResultTooLarge``) before
    it holds more (Scylla's ``max_memory_for_unlimited_query_hard_limit`` is 100 MiB)."""
    max_hints_per_target: int = 1_000_000
    max_hints_per_fetch: int = 1_000

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InvalidRequest(f"StoreLimits.{name} must be a positive int, got {value!r}")


@dataclass(frozen=True, slots=True)
class MutationSize:
    """What one mutation costs: estimated bytes and number of atoms (cells, markers, tombstones)."""

    size_bytes: int
    cells: int


def _row_size(row: Row) -> MutationSize:
    size_bytes = sum(len(value) for value in row.clustering) + ATOM_OVERHEAD_BYTES
    cells = 0
    if row.liveness is not None:
        cells += 1
    if row.deletion is not None:
        cells += 1
    for name, data in row.cells.items():
        size_bytes += len(name)
        if isinstance(data, Cell):
            size_bytes += len(data.value) + ATOM_OVERHEAD_BYTES
            cells += 1
            continue
        if data.deletion is not None:
            size_bytes += ATOM_OVERHEAD_BYTES
            cells += 1
        for cell in data.cells:
            size_bytes += len(cell.value) + len(cell.path or b"") + ATOM_OVERHEAD_BYTES
            cells += 1
    return MutationSize(size_bytes, cells)


def mutation_size(mutation: Mutation) -> MutationSize:
    """The estimated serialized size and atom count of ``mutation``."""
    size_bytes = len(mutation.keyspace) + len(mutation.table)
    size_bytes += sum(len(part) for part in mutation.partition_key)
    cells = 0
    if mutation.partition_deletion is not None:
        size_bytes += ATOM_OVERHEAD_BYTES
        cells += 1
    for tombstone in mutation.range_tombstones:
        size_bytes += sum(len(v) for v in tombstone.start.prefix + tombstone.end.prefix)
        size_bytes += ATOM_OVERHEAD_BYTES
        cells += 1
    rows = mutation.rows if mutation.static_row is None else (mutation.static_row, *mutation.rows)
    for row in rows:
        row_size = _row_size(row)
        size_bytes += row_size.size_bytes
        cells += row_size.cells
    return MutationSize(size_bytes, cells)
