"""Cutting one base mutation into timestamp buckets of single-kind changes, as Scylla does.

Implements ``shared/reference/scylla-cdc.md`` §5 "How one base mutation becomes log rows" steps 1
and 2, following Scylla's ``cdc/split.cc`` (``should_split``, ``extract_changes``,
``process_changes_with_splitting`` / ``_without_splitting``). Rules:

- The mutation is walked in Scylla's order: static row, then each clustered row in clustering
  order (row marker, columns in column-id order — by name — each collection's tombstone before its
  cells in key order, then the row tombstone), then range tombstones, then the partition
  tombstone.
- A mutation with one timestamp, one TTL and one kind of change (only the static row; only row
  upserts; only row deletions; only range deletions) is not split: it is one bucket whose changes
  follow the mutation's order. Anything else is split: each element goes to the bucket of its
  timestamp (a collection tombstone to ``timestamp + 1``, so ``SET c = {...}``'s tombstone at
  T−1 lands with its cells at T), and within a row into one change per (timestamp, TTL), a live
  cell without TTL and a dead cell counting as TTL 0. Changes without TTL come first.
- Inside a split bucket the order is: static-row updates, clustered inserts (the change holding
  the row marker), clustered updates, row deletions, range deletions, the partition deletion. An
  insert keeps the collections that carry a tombstone (``INSERT`` always overwrites them); cells
  added to a collection without one go to a separate update of the same row, since no CQL
  ``INSERT`` adds elements without overwriting.
- A partition deletion is always split (it carries no timestamp in Scylla's "should split" walk).
- Each bucket lists, for the images, the static columns and the clustered rows (with their
  columns) it affects: row deletions affect every regular column; so does a partition deletion
  in a table without clustering key (Scylla issue #26382).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ringflow.cdc._log_values import Clustering, ClusteringKey
from ringflow.errors import InternalError
from ringflow.schema import (
    Cell,
    ColumnData,
    ComplexColumn,
    DeletionTime,
    LivenessInfo,
    Mutation,
    RangeTombstone,
    Row,
    Table,
)

_ChangeKey = tuple[int, int]  # (timestamp_us, ttl_s); no TTL and dead cells count as TTL 0


@dataclass(frozen=True, slots=True)
class RowChange:
    """Cells (and maybe the row marker) of one row sharing one timestamp and one TTL.

    ``clustering`` is None for the static row. ``cells`` maps a column to an atomic cell or to a
    complex column holding this change's collection tombstone and element cells.
    """

    clustering: Clustering | None
    marker: LivenessInfo | None
    cells: Mapping[str, ColumnData]


@dataclass(frozen=True, slots=True)
class RowDeletion:
    clustering: Clustering


@dataclass(frozen=True, slots=True)
class RangeDeletion:
    tombstone: RangeTombstone


@dataclass(frozen=True, slots=True)
class PartitionDeletion:
    deletion: DeletionTime


Change = RowChange | RowDeletion | RangeDeletion | PartitionDeletion


@dataclass(frozen=True, slots=True)
class Bucket:
    """The changes of one ``cdc$time`` and what the images must cover."""

    timestamp_us: int
    changes: tuple[Change, ...]
    affected_static: frozenset[str]
    affected_rows: tuple[tuple[Clustering, frozenset[str]], ...]


def cell_ttl_s(cell: Cell) -> int:
    """Scylla's ``get_ttl``: the TTL of a live expiring cell, else 0."""
    return cell.ttl_s if cell.is_expiring and not cell.is_tombstone else 0


def marker_ttl_s(marker: LivenessInfo) -> int:
    return marker.ttl_s if marker.is_expiring else 0


# --- should we split? ---------------------------------------------------------------------


class _Stop(Exception):
    """Raised inside the walk on the first sign that the mutation must be split."""


@dataclass(slots=True)
class _SplitProbe:
    """Scylla's ``should_split_visitor``: remembers what it has seen, stops on a second kind."""

    timestamp_us: int | None = None
    ttl_s: int | None = None
    had_static_row: bool = False
    had_clustered_row: bool = False
    had_upsert: bool = False
    had_row_marker: bool = False
    had_range_delete: bool = False

    def visit(self, timestamp_us: int, ttl_s: int = 0) -> None:
        if self.timestamp_us is not None and self.timestamp_us != timestamp_us:
            raise _Stop
        if self.ttl_s is not None and self.ttl_s != ttl_s:
            raise _Stop
        self.timestamp_us, self.ttl_s = timestamp_us, ttl_s

    def cells(self, row: Row) -> None:
        for _, data in ordered_cells(row.cells):
            if isinstance(data, Cell):
                self.visit(data.timestamp_us, cell_ttl_s(data))
                continue
            if data.deletion is not None:
                self.visit(data.deletion.marked_for_delete_at_us + 1)
            for cell in data.cells:
                if not cell.is_tombstone and self.had_row_marker:
                    raise _Stop  # collection additions cannot be expressed by an INSERT
                self.visit(cell.timestamp_us, cell_ttl_s(cell))

    def clustered_row(self, row: Row) -> None:
        if row.liveness is not None or row.cells:
            if self.had_static_row:
                raise _Stop
            self.had_clustered_row = self.had_upsert = True
            if row.liveness is not None:
                self.had_row_marker = True
                self.visit(row.liveness.timestamp_us, marker_ttl_s(row.liveness))
            self.cells(row)
        if row.deletion is not None:
            if self.had_static_row or self.had_upsert:
                raise _Stop
            self.had_clustered_row = True
            self.visit(row.deletion.marked_for_delete_at_us)

    def walk(self, mutation: Mutation) -> None:
        if mutation.static_row is not None:
            self.had_static_row = True
            self.cells(mutation.static_row)
        for row in mutation.rows:
            self.clustered_row(row)
        for tombstone in mutation.range_tombstones:
            if self.had_static_row or self.had_clustered_row:
                raise _Stop
            self.had_range_delete = True
            self.visit(tombstone.deletion.marked_for_delete_at_us)
        earlier = self.had_range_delete or self.had_static_row or self.had_clustered_row
        if mutation.partition_deletion is not None and earlier:
            raise _Stop


def should_split(mutation: Mutation) -> bool:
    """Scylla's ``should_split`` on a normalized mutation (see :func:`split_changes`)."""
    probe = _SplitProbe()
    try:
        probe.walk(mutation)
    except _Stop:
        return True
    return probe.timestamp_us is None


# --- extracting changes -------------------------------------------------------------------


def ordered_cells(cells: Mapping[str, ColumnData]) -> Iterator[tuple[str, ColumnData]]:
    """A row's columns in Scylla's column-id order (static and regular ids follow names)."""
    for name in sorted(cells, key=lambda column: column.encode("utf-8")):
        yield name, cells[name]


@dataclass(slots=True)
class _ComplexBuilder:
    cells: list[Cell] = field(default_factory=list)
    deletion: DeletionTime | None = None


_RowParts = dict[str, Cell | _ComplexBuilder]


def _row_parts(row: Row) -> dict[_ChangeKey, _RowParts]:
    """Scylla's ``extract_row_visitor``: the row's cells grouped by (timestamp, TTL)."""
    parts: dict[_ChangeKey, _RowParts] = {}

    def complex_part(key: _ChangeKey, name: str) -> _ComplexBuilder:
        slot = parts.setdefault(key, {}).setdefault(name, _ComplexBuilder())
        if not isinstance(slot, _ComplexBuilder):
            raise InternalError(f"column {name!r} is both atomic and complex in one row")
        return slot

    for name, data in ordered_cells(row.cells):
        if isinstance(data, Cell):
            parts.setdefault((data.timestamp_us, cell_ttl_s(data)), {})[name] = data
            continue
        if data.deletion is not None:
            key = (data.deletion.marked_for_delete_at_us + 1, 0)
            complex_part(key, name).deletion = data.deletion
        for cell in data.cells:
            complex_part((cell.timestamp_us, cell_ttl_s(cell)), name).cells.append(cell)
    return parts


def _freeze(parts: _RowParts) -> dict[str, ColumnData]:
    frozen: dict[str, ColumnData] = {}
    for name, part in parts.items():
        if isinstance(part, Cell):
            frozen[name] = part
        else:
            frozen[name] = ComplexColumn(tuple(part.cells), part.deletion)
    return frozen


@dataclass(slots=True)
class _Batch:
    static_updates: list[RowChange] = field(default_factory=list)
    inserts: list[RowChange] = field(default_factory=list)
    updates: list[RowChange] = field(default_factory=list)
    row_deletions: list[RowDeletion] = field(default_factory=list)
    range_deletions: list[RangeDeletion] = field(default_factory=list)
    partition_deletion: PartitionDeletion | None = None

    def changes(self) -> tuple[Change, ...]:
        tail = [] if self.partition_deletion is None else [self.partition_deletion]
        return (
            *self.static_updates,
            *self.inserts,
            *self.updates,
            *self.row_deletions,
            *self.range_deletions,
            *tail,
        )


def _carries_tombstone(data: ColumnData) -> bool:
    return isinstance(data, Cell) or data.deletion is not None


def _add_clustered_row(batches: dict[int, _Batch], row: Row) -> None:
    parts = _row_parts(row)
    marker = row.liveness
    marker_key = None if marker is None else (marker.timestamp_us, marker_ttl_s(marker))
    if marker_key is not None:
        parts.setdefault(marker_key, {})
    for key in sorted(parts):
        cells = _freeze(parts[key])
        batch = batches.setdefault(key[0], _Batch())
        if key != marker_key:
            batch.updates.append(RowChange(row.clustering, None, cells))
            continue
        kept = {name: data for name, data in cells.items() if _carries_tombstone(data)}
        added = {name: data for name, data in cells.items() if name not in kept}
        batch.inserts.append(RowChange(row.clustering, marker, kept))
        if added:
            batch.updates.append(RowChange(row.clustering, None, added))
    if row.deletion is not None:
        batch = batches.setdefault(row.deletion.marked_for_delete_at_us, _Batch())
        batch.row_deletions.append(RowDeletion(row.clustering))


def _extract_batches(mutation: Mutation) -> dict[int, _Batch]:
    batches: dict[int, _Batch] = {}
    if mutation.static_row is not None:
        parts = _row_parts(mutation.static_row)
        for key in sorted(parts):
            change = RowChange(None, None, _freeze(parts[key]))
            batches.setdefault(key[0], _Batch()).static_updates.append(change)
    for row in mutation.rows:
        _add_clustered_row(batches, row)
    for tombstone in mutation.range_tombstones:
        batch = batches.setdefault(tombstone.deletion.marked_for_delete_at_us, _Batch())
        batch.range_deletions.append(RangeDeletion(tombstone))
    if mutation.partition_deletion is not None:
        deletion = mutation.partition_deletion
        batch = batches.setdefault(deletion.marked_for_delete_at_us, _Batch())
        batch.partition_deletion = PartitionDeletion(deletion)
    return batches


def _unsplit_changes(mutation: Mutation) -> tuple[Change, ...]:
    """Scylla's ``process_changes_without_splitting``: one change per element, mutation order."""
    changes: list[Change] = []
    if mutation.static_row is not None:
        changes.append(RowChange(None, None, mutation.static_row.cells))
    for row in mutation.rows:
        if row.liveness is not None or row.cells:
            changes.append(RowChange(row.clustering, row.liveness, row.cells))
        if row.deletion is not None:
            changes.append(RowDeletion(row.clustering))
    changes.extend(RangeDeletion(tombstone) for tombstone in mutation.range_tombstones)
    return tuple(changes)


def _first_timestamp(mutation: Mutation) -> int:
    """Scylla's ``find_timestamp`` for an unsplit mutation (all its timestamps agree)."""
    probe = _SplitProbe()
    probe.walk(mutation)
    if probe.timestamp_us is None:  # should_split() is true for timestamp-less input
        raise InternalError("an unsplit CDC change without a timestamp")
    return probe.timestamp_us


# --- what the images cover ----------------------------------------------------------------


def _affected(
    base: Table, changes: tuple[Change, ...], key: ClusteringKey
) -> tuple[frozenset[str], tuple[tuple[Clustering, frozenset[str]], ...]]:
    every_regular = frozenset(column.name for column in base.regular_columns)
    static: set[str] = set()
    rows: dict[Clustering, set[str]] = {}
    for change in changes:
        if isinstance(change, RowChange):
            columns = (
                static if change.clustering is None else rows.setdefault(change.clustering, set())
            )
            columns.update(change.cells)
        elif isinstance(change, RowDeletion):
            rows.setdefault(change.clustering, set()).update(every_regular)
        elif isinstance(change, PartitionDeletion) and not base.clustering_columns:
            rows.setdefault((), set()).update(every_regular)
    ordered = sorted(rows, key=key)
    return frozenset(static), tuple((row, frozenset(rows[row])) for row in ordered)


def _bucket(
    base: Table, timestamp_us: int, changes: tuple[Change, ...], key: ClusteringKey
) -> Bucket:
    static, rows = _affected(base, changes, key)
    return Bucket(timestamp_us, changes, static, rows)


def _single_upsert_bucket(base: Table, mutation: Mutation, key: ClusteringKey) -> Bucket | None:
    """The one bucket of the common write, without the general walk: clustered rows upserting
    atomic cells (and maybe a row marker), all with one timestamp and one TTL. None for
    anything else (which :func:`split_changes` then handles in general)."""
    if (
        mutation.static_row is not None
        or mutation.range_tombstones
        or mutation.partition_deletion is not None
        or not mutation.rows
    ):
        return None
    change_key: _ChangeKey | None = None
    for row in mutation.rows:
        marker = row.liveness
        if row.deletion is not None or (marker is None and not row.cells):
            return None
        if marker is not None:
            marker_key = (marker.timestamp_us, marker_ttl_s(marker))
            if change_key is None:
                change_key = marker_key
            elif marker_key != change_key:
                return None
        for data in row.cells.values():
            if type(data) is not Cell:
                return None
            cell_key = (data.timestamp_us, cell_ttl_s(data))
            if change_key is None:
                change_key = cell_key
            elif cell_key != change_key:
                return None
    if change_key is None:
        return None
    changes = tuple(RowChange(row.clustering, row.liveness, row.cells) for row in mutation.rows)
    if len(changes) > 1:
        return _bucket(base, change_key[0], changes, key)
    row = mutation.rows[0]
    return Bucket(change_key[0], changes, frozenset(), ((row.clustering, frozenset(row.cells)),))


def split_changes(base: Table, mutation: Mutation, key: ClusteringKey) -> list[Bucket]:
    """The buckets of ``mutation``, by increasing timestamp.

    ``mutation`` must be normalized: rows in clustering order, without empty rows or empty
    complex columns, collection cells in key order; ``key`` encodes clustering keys in order.
    """
    single = _single_upsert_bucket(base, mutation, key)
    if single is not None:
        return [single]
    return _split(base, mutation, key)


def _split(base: Table, mutation: Mutation, key: ClusteringKey) -> list[Bucket]:
    """:func:`split_changes` in general: Scylla's walk, then one bucket per timestamp."""
    if not should_split(mutation):
        changes = _unsplit_changes(mutation)
        return [_bucket(base, _first_timestamp(mutation), changes, key)]
    batches = _extract_batches(mutation)
    return [_bucket(base, ts, batches[ts].changes(), key) for ts in sorted(batches)]
