"""The mutation model: what a write is, independent of how it is stored.

Mirrors Cassandra's partition update (cassandra-core.md §6): a mutation targets one partition of
one table and carries any of a partition deletion, range tombstones, a static row and clustered
rows. Rows carry primary-key liveness (the row marker written by INSERT), a row deletion and
cells. A cell has a write timestamp (µs), an optional TTL and a local deletion time (s): for an
expiring cell the expiry time, for a tombstone the deletion's wall-clock time. Non-frozen
collections and UDTs are *complex* columns: one cell per element, keyed by a ``path`` (serialized
map key / set element / list timeuuid / UDT field index as a 2-byte short), plus an optional
collection tombstone.

Values are the native-protocol serialization of the column's type, so this module needs no type
knowledge; clustering values are serialized values too (one per clustering column, a prefix of
the clustering key in bounds). Every class is a frozen value object; reconcile rules live in the
reconcile module.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

NO_DELETION_TIME = 2**63 - 1
"""Local deletion time of a live, non-expiring cell (Cassandra's ``Cell.NO_DELETION_TIME``)."""

NO_TIMESTAMP = -(2**63)
"""Timestamp of 'no liveness' (Cassandra's ``LivenessInfo.NO_TIMESTAMP``)."""


@dataclass(frozen=True, slots=True)
class DeletionTime:
    """A tombstone's timestamp (µs) and the wall-clock second it was written."""

    marked_for_delete_at_us: int
    local_deletion_time_s: int

    def deletes(self, timestamp_us: int) -> bool:
        """Shadows data written at or before its timestamp (``DeletionTime.deletes``)."""
        return timestamp_us <= self.marked_for_delete_at_us

    def supersedes(self, other: DeletionTime) -> bool:
        """Cassandra's ``supersedes``: later timestamp, then later local deletion time."""
        if self.marked_for_delete_at_us != other.marked_for_delete_at_us:
            return self.marked_for_delete_at_us > other.marked_for_delete_at_us
        return self.local_deletion_time_s > other.local_deletion_time_s


@dataclass(frozen=True, slots=True)
class Cell:
    """One value with its version: live, expiring (ttl_s > 0) or a tombstone."""

    timestamp_us: int
    value: bytes = b""
    ttl_s: int = 0
    local_deletion_time_s: int = NO_DELETION_TIME
    path: bytes | None = None

    @classmethod
    def live(cls, timestamp_us: int, value: bytes, path: bytes | None = None) -> Cell:
        return cls(timestamp_us, value, 0, NO_DELETION_TIME, path)

    @classmethod
    def expiring(
        cls, timestamp_us: int, ttl_s: int, now_s: int, value: bytes, path: bytes | None = None
    ) -> Cell:
        """A cell that expires ``ttl_s`` seconds after ``now_s`` (its local expiration time)."""
        return cls(timestamp_us, value, ttl_s, now_s + ttl_s, path)

    @classmethod
    def tombstone(cls, timestamp_us: int, now_s: int, path: bytes | None = None) -> Cell:
        return cls(timestamp_us, b"", 0, now_s, path)

    @classmethod
    def _unchecked(
        cls, timestamp_us: int, value: bytes, ttl_s: int, local_deletion_time_s: int
    ) -> Cell:
        """``cls(timestamp_us, value, ttl_s, local_deletion_time_s)`` without the frozen
        dataclass ``__init__`` (about half its cost): for builders that make many cells."""
        cell = _new_object(cls)
        _set_cell_timestamp(cell, timestamp_us)
        _set_cell_value(cell, value)
        _set_cell_ttl(cell, ttl_s)
        _set_cell_deletion_time(cell, local_deletion_time_s)
        _set_cell_path(cell, None)
        return cell

    @property
    def is_tombstone(self) -> bool:
        return self.local_deletion_time_s != NO_DELETION_TIME and self.ttl_s == 0

    @property
    def is_expiring(self) -> bool:
        return self.ttl_s > 0

    def is_live(self, now_s: int) -> bool:
        """Cassandra's ``isLive``: not a tombstone and, if expiring, not expired at ``now_s``."""
        if self.local_deletion_time_s == NO_DELETION_TIME:
            return True
        return self.ttl_s != 0 and now_s < self.local_deletion_time_s


@dataclass(frozen=True, slots=True)
class ComplexColumn:
    """A non-frozen collection or UDT: element cells sorted by path, and its tombstone."""

    cells: tuple[Cell, ...] = ()
    deletion: DeletionTime | None = None


ColumnData = Cell | ComplexColumn


@dataclass(frozen=True, slots=True)
class LivenessInfo:
    """Primary-key liveness: the row marker written by INSERT (not by UPDATE)."""

    timestamp_us: int
    ttl_s: int = 0
    local_expiration_time_s: int = NO_DELETION_TIME

    @property
    def is_expiring(self) -> bool:
        return self.ttl_s > 0

    def is_live(self, now_s: int) -> bool:
        return self.local_expiration_time_s == NO_DELETION_TIME or now_s < (
            self.local_expiration_time_s
        )


@dataclass(frozen=True, slots=True)
class Row:
    """A clustered row (or the static row, with an empty clustering)."""

    clustering: tuple[bytes, ...] = ()
    liveness: LivenessInfo | None = None
    deletion: DeletionTime | None = None
    cells: Mapping[str, ColumnData] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not isinstance(self.cells, MappingProxyType):
            object.__setattr__(self, "cells", MappingProxyType(dict(self.cells)))

    def __hash__(self) -> int:
        return hash(
            (self.clustering, self.liveness, self.deletion, tuple(sorted(self.cells.items())))
        )

    @classmethod
    def _owning(
        cls,
        clustering: tuple[bytes, ...],
        liveness: LivenessInfo | None,
        deletion: DeletionTime | None,
        cells: dict[str, ColumnData],
    ) -> Row:
        """A row that takes ownership of ``cells`` (a fresh dict nobody else changes): wrapped
        read-only without the copy ``__init__`` makes. For builders that make many rows."""
        row = _new_object(cls)
        _set_row_clustering(row, clustering)
        _set_row_liveness(row, liveness)
        _set_row_deletion(row, deletion)
        _set_row_cells(row, MappingProxyType(cells))
        return row

    def timestamps_us(self) -> Iterator[int]:
        """Every write timestamp of the row: liveness, deletion, cells, collection tombstones."""
        if self.liveness is not None:
            yield self.liveness.timestamp_us
        if self.deletion is not None:
            yield self.deletion.marked_for_delete_at_us
        for data in self.cells.values():
            if isinstance(data, Cell):
                yield data.timestamp_us
            else:
                if data.deletion is not None:
                    yield data.deletion.marked_for_delete_at_us
                yield from (cell.timestamp_us for cell in data.cells)


# Slot setters of the fast constructors above (a frozen dataclass forbids ``setattr``; its own
# ``__init__`` goes through ``object.__setattr__`` the same way).
_new_object = object.__new__
_set_cell_timestamp = Cell.__dict__["timestamp_us"].__set__
_set_cell_value = Cell.__dict__["value"].__set__
_set_cell_ttl = Cell.__dict__["ttl_s"].__set__
_set_cell_deletion_time = Cell.__dict__["local_deletion_time_s"].__set__
_set_cell_path = Cell.__dict__["path"].__set__
_set_row_clustering = Row.__dict__["clustering"].__set__
_set_row_liveness = Row.__dict__["liveness"].__set__
_set_row_deletion = Row.__dict__["deletion"].__set__
_set_row_cells = Row.__dict__["cells"].__set__


@dataclass(frozen=True, slots=True)
class ClusteringBound:
    """One end of a clustering range: a prefix of clustering values; empty means unbounded."""

    prefix: tuple[bytes, ...] = ()
    inclusive: bool = True

    @property
    def is_unbounded(self) -> bool:
        return not self.prefix


@dataclass(frozen=True, slots=True)
class RangeTombstone:
    """A deletion of every clustered row between ``start`` and ``end``."""

    start: ClusteringBound
    end: ClusteringBound
    deletion: DeletionTime


@dataclass(frozen=True, slots=True)
class Mutation:
    """A change to one partition of one table (Cassandra's PartitionUpdate).

    ``partition_key`` holds the serialized value of each partition key column, in key order.
    """

    keyspace: str
    table: str
    partition_key: tuple[bytes, ...]
    partition_deletion: DeletionTime | None = None
    static_row: Row | None = None
    rows: tuple[Row, ...] = ()
    range_tombstones: tuple[RangeTombstone, ...] = ()

    def timestamps_us(self) -> Iterator[int]:
        """Every write timestamp the mutation carries."""
        if self.partition_deletion is not None:
            yield self.partition_deletion.marked_for_delete_at_us
        for tombstone in self.range_tombstones:
            yield tombstone.deletion.marked_for_delete_at_us
        if self.static_row is not None:
            yield from self.static_row.timestamps_us()
        for row in self.rows:
            yield from row.timestamps_us()

    @property
    def is_empty(self) -> bool:
        return (
            self.partition_deletion is None
            and self.static_row is None
            and not self.rows
            and not self.range_tombstones
        )


def _restricted_row(row: Row, columns: Container[str]) -> Row | None:
    """``row`` with only the cells of ``columns`` (the same object when it has no other), or
    None when nothing is left: no liveness, no deletion, no cell."""
    if all(name in columns for name in row.cells):
        return row
    cells = {name: data for name, data in row.cells.items() if name in columns}
    if not cells and row.liveness is None and row.deletion is None:
        return None
    return Row(row.clustering, row.liveness, row.deletion, cells)


def restrict_columns(mutation: Mutation, columns: Container[str]) -> Mutation:
    """``mutation`` with only the cells of the static and regular ``columns`` (rows left with
    nothing are dropped; the keys, row liveness, deletions and tombstones stay): what a node
    whose table has only those columns can hold, e.g. while a schema change that added or
    dropped others has not reached it (Cassandra's read command carries its column filter for
    the same reason). The same object when nothing is removed."""
    static = mutation.static_row
    restricted_static = None if static is None else _restricted_row(static, columns)
    rows = [_restricted_row(row, columns) for row in mutation.rows]
    same = zip(rows, mutation.rows, strict=True)
    if restricted_static is static and all(new is old for new, old in same):
        return mutation
    return Mutation(
        mutation.keyspace,
        mutation.table,
        mutation.partition_key,
        mutation.partition_deletion,
        restricted_static,
        tuple(row for row in rows if row is not None),
        mutation.range_tombstones,
    )
