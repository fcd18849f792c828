"""From stored atoms to rows: raw merged rows, and CQL result rows with reconcile applied. Pure.

The store streams ``atoms`` rows (ordered by token, partition key, ``ck``) and a partition's
``partition_atoms`` into these functions; nothing here touches SQLite. Two views:

* **raw** (:func:`assemble_rows`, :func:`raw_mutation`): the stored, already last-write-wins
  merged state with every tombstone, as a :class:`Mutation`; for repair, streaming and hints.
  A packed row (one atom holding the whole row) is decoded, and several stored versions of one
  row, packed or per cell, are merged with ``merge_rows``.
* **CQL** (:func:`result_rows`): each row shadowed by the partition deletion, the range
  tombstones covering it (``low <= ck < high``, see ``_keys``), its own deletion and collection
  tombstones (``shadow_row`` from the reconcile module); TTLs judged at ``now_s``; rows without
  live primary-key liveness or a live cell are absent (CQL existence, ``is_row_live``).

Static rows follow CQL: static column values are reported on every row of the partition; a
partition whose static row is live but which has no live clustered row yields one *static-only*
row (``ResultRow.static_only``, clustering ``()``) when the read does not restrict clustering
(Cassandra ``SelectStatement``: static content is returned for a partition without rows only
for queries without clustering restrictions).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, groupby
from operator import itemgetter

import msgpack

from ringflow.errors import InternalError, InvalidRequest
from ringflow.schema import (
    NO_DELETION_TIME,
    Cell,
    ClusteringBound,
    ColumnData,
    ComplexColumn,
    DeletionTime,
    LivenessInfo,
    Mutation,
    RangeTombstone,
    Row,
    liveness_is_live,
    merge_rows,
    serialized_collection_from_cells,
    shadow_row,
)
from ringflow.storage._catalog import TableInfo
from ringflow.storage._errors import MutationDecodeError, ResultTooLarge, TooManyTombstones
from ringflow.storage._keys import STATIC_CK, split_partition_key
from ringflow.storage._limits import StoreLimits
from ringflow.storage._mutation_codec import UniformRow, decode_row, decode_uniform_row
from ringflow.storage._sqlite_layout import (
    KIND_CELL,
    KIND_CLUSTERING,
    KIND_COLLECTION_DELETION,
    KIND_LIVENESS,
    KIND_PACKED_ROW,
    KIND_PARTITION_DELETION,
    KIND_ROW_DELETION,
)

AtomTuple = tuple[int, bytes, bytes, int, str, bytes, int, int, int, bytes]
"""An ``atoms`` row as selected: (token, pk, ck, kind, col, path, ts, ttl, ldt, value)."""
PartitionAtomTuple = tuple[int, bytes, int, bytes, bytes, int, int, bytes]
"""A ``partition_atoms`` row as selected: (token, pk, kind, low, high, ts, ldt, bounds)."""

_ROW_KEY = itemgetter(0, 1, 2)


@dataclass(frozen=True, slots=True)
class ResultRow:
    """One CQL row: its key, the live values of its static and regular columns, and, for each
    live simple column, its write time and remaining TTL (CQL ``WRITETIME()``/``TTL()``).

    Values are serialized bytes; a non-frozen collection is given in its frozen serialization.
    A column absent from ``values`` is null.
    """

    token: int
    partition_key: tuple[bytes, ...]
    clustering: tuple[bytes, ...]
    values: Mapping[str, bytes]
    writetime_us: Mapping[str, int] = field(default_factory=dict)
    ttl_s: Mapping[str, int] = field(default_factory=dict)
    static_only: bool = False


@dataclass(slots=True)
class TombstoneBudget:
    """Counts tombstones met by one read and fails it past the limit (Cassandra's
    ``tombstone_failure_threshold``): row and collection deletions, cell tombstones, expired
    cells and range tombstones."""

    limit: int
    seen: int = 0

    def add(self, count: int) -> None:
        self.seen += count
        if self.seen > self.limit:
            raise TooManyTombstones(
                f"read met more than {self.limit} tombstones ({self.seen} so far); "
                "purge them with compact() or narrow the read"
            )


@dataclass(frozen=True, slots=True)
class StoredRangeTombstone:
    low: bytes
    high: bytes
    deletion: DeletionTime
    bounds: bytes


@dataclass(frozen=True, slots=True)
class PartitionTombstones:
    """A partition's partition deletion and range tombstones, as stored."""

    partition_deletion: DeletionTime | None = None
    ranges: tuple[StoredRangeTombstone, ...] = ()

    @classmethod
    def of(cls, rows: Iterable[PartitionAtomTuple]) -> PartitionTombstones:
        deletion: DeletionTime | None = None
        ranges: list[StoredRangeTombstone] = []
        for _token, _pk, kind, low, high, ts, ldt, bounds in rows:
            if kind == KIND_PARTITION_DELETION:
                deletion = DeletionTime(ts, ldt)
            else:
                ranges.append(StoredRangeTombstone(low, high, DeletionTime(ts, ldt), bounds))
        return cls(deletion, tuple(ranges))

    @property
    def is_empty(self) -> bool:
        return self.partition_deletion is None and not self.ranges

    def covering(self, ck: bytes) -> list[DeletionTime]:
        """The deletions shadowing the row stored at ``ck`` (the static row: partition only)."""
        found = [] if self.partition_deletion is None else [self.partition_deletion]
        if ck != STATIC_CK:
            found.extend(rt.deletion for rt in self.ranges if rt.low <= ck < rt.high)
        return found

    def range_tombstones(self) -> tuple[RangeTombstone, ...]:
        """The stored range tombstones with their original bounds."""
        result = []
        for stored in self.ranges:
            start, start_inclusive, end, end_inclusive = msgpack.unpackb(stored.bounds)
            result.append(
                RangeTombstone(
                    ClusteringBound(tuple(start), start_inclusive),
                    ClusteringBound(tuple(end), end_inclusive),
                    stored.deletion,
                )
            )
        return tuple(result)


@dataclass(frozen=True, slots=True)
class StoredRow:
    """A row as stored: where it sits (``ck``) and its merged content with tombstones."""

    ck: bytes
    row: Row
    canonical: bool = True
    """Stored in the table's own form: per-cell atoms, or exactly one packed atom for a
    ``packed_rows`` table. Compaction rewrites rows that are not."""


def _is_tombstone_atom(kind: int, ttl: int, ldt: int, now_s: int) -> bool:
    if kind in (KIND_ROW_DELETION, KIND_COLLECTION_DELETION):
        return True
    return kind == KIND_CELL and ldt != NO_DELETION_TIME and (ttl == 0 or ldt <= now_s)


def _build_row(
    info: TableInfo, ck: bytes, atoms: Iterable[AtomTuple], budget: TombstoneBudget | None,
    now_s: int,
) -> StoredRow:  # fmt: skip
    known = info.static_columns if ck == STATIC_CK else info.regular_columns
    multicell = info.multicell
    clustering: tuple[bytes, ...] = ()
    liveness: LivenessInfo | None = None
    deletion: DeletionTime | None = None
    cells: dict[str, ColumnData] = {}
    elements: dict[str, list[Cell]] = {}
    collection_deletions: dict[str, DeletionTime] = {}
    tombstones = 0
    packed: list[bytes] = []
    per_cell = False
    for _t, _p, _c, kind, col, path, ts, ttl, ldt, value in atoms:
        if (ldt != NO_DELETION_TIME or kind != KIND_CELL) and _is_tombstone_atom(
            kind, ttl, ldt, now_s
        ):
            tombstones += 1
        if kind == KIND_CELL:
            per_cell = True
            if col in multicell:
                elements.setdefault(col, []).append(Cell(ts, value, ttl, ldt, path))
            elif col in known:
                cells[col] = Cell(ts, value, ttl, ldt)
        elif kind == KIND_PACKED_ROW:
            packed.append(value)
        elif kind == KIND_LIVENESS:
            per_cell, liveness = True, LivenessInfo(ts, ttl, ldt)
        elif kind == KIND_CLUSTERING:
            clustering = tuple(msgpack.unpackb(value))
        elif kind == KIND_ROW_DELETION:
            per_cell, deletion = True, DeletionTime(ts, ldt)
        elif kind == KIND_COLLECTION_DELETION:
            per_cell, collection_deletions[col] = True, DeletionTime(ts, ldt)
    for name in sorted(elements.keys() | collection_deletions.keys()):
        if name in known:
            by_path = sorted(elements.get(name, ()), key=_path_of)  # canonical: raw path bytes
            cells[name] = ComplexColumn(tuple(by_path), collection_deletions.get(name))
    if packed:
        versions = [_unpacked(info, ck, value, known) for value in packed]
        for version in versions:
            tombstones += row_tombstones(version, now_s)
        row = _merged(versions, Row(clustering, liveness, deletion, cells) if per_cell else None)
    else:
        row = Row(clustering, liveness, deletion, cells)
    if info.dropped_at_us:
        row = _without_dropped_cells(row, info.dropped_at_us)
    if budget is not None and tombstones:
        budget.add(tombstones)
    if len(row.clustering) != (0 if ck == STATIC_CK else info.clustering_arity):
        message = (
            f"table {info.qualified_name}: stored row {ck!r} has clustering {row.clustering!r}"
        )
        raise InternalError(message)  # the message is built only when it fails
    canonical = (len(packed) == 1 and not per_cell) if info.packed_rows else not packed
    return StoredRow(ck, row, canonical)


def stored_row_of(info: TableInfo, ck: bytes, row: Row) -> StoredRow:
    """``row`` of a raw partition held in memory (a coordinator's reconciled read) as
    :func:`_build_row` would have read it back from the store: only the table's columns of its
    kind (static or regular), without the cells of dropped columns; InternalError for a
    clustering of the wrong arity."""
    known = info.static_columns if ck == STATIC_CK else info.regular_columns
    if not all(name in known for name in row.cells):
        cells = {name: data for name, data in row.cells.items() if name in known}
        row = Row(row.clustering, row.liveness, row.deletion, cells)
    if info.dropped_at_us:
        row = _without_dropped_cells(row, info.dropped_at_us)
    if len(row.clustering) != (0 if ck == STATIC_CK else info.clustering_arity):
        message = f"table {info.qualified_name}: row {ck!r} has clustering {row.clustering!r}"
        raise InternalError(message)
    return StoredRow(ck, row)


def _without_dropped_cells(row: Row, dropped_at_us: Mapping[str, int]) -> Row:
    """``row`` without the cells (and collection tombstones) of re-added columns written at or
    before their drop: Cassandra skips them at every read (``BTreeRow.filter`` with the
    table's dropped columns), so compaction, streaming and repair never bring them back."""
    if not any(name in dropped_at_us for name in row.cells):
        return row
    cells: dict[str, ColumnData] = {}
    for name, data in row.cells.items():
        at = dropped_at_us.get(name)
        if at is None:
            cells[name] = data
        elif isinstance(data, Cell):
            if data.timestamp_us > at:
                cells[name] = data
        else:
            kept = tuple(cell for cell in data.cells if cell.timestamp_us > at)
            deletion = data.deletion
            if deletion is not None and deletion.marked_for_delete_at_us <= at:
                deletion = None
            if kept or deletion is not None:
                cells[name] = ComplexColumn(kept, deletion)
    return Row(row.clustering, row.liveness, row.deletion, cells)


def _corrupt(info: TableInfo, ck: bytes, error: MutationDecodeError) -> InternalError:
    return InternalError(f"table {info.qualified_name}: corrupt packed row {ck!r}: {error}")


def _unpacked(info: TableInfo, ck: bytes, value: bytes, known: Mapping[str, object]) -> Row:
    try:
        row = decode_row(value)
    except MutationDecodeError as error:
        raise _corrupt(info, ck, error) from error
    if all(name in known for name in row.cells):
        return row
    cells = {name: data for name, data in row.cells.items() if name in known}
    return Row(row.clustering, row.liveness, row.deletion, cells)


def _merged(versions: list[Row], per_cell: Row | None) -> Row:
    """Every stored version of one row merged with the reconcile rules."""
    merged = versions[0]
    for version in versions[1:]:
        merged = merge_rows(merged, version)
    if per_cell is not None:
        clustered = Row(merged.clustering, per_cell.liveness, per_cell.deletion, per_cell.cells)
        merged = merge_rows(merged, clustered)
    return merged


def row_tombstones(row: Row, now_s: int) -> int:
    """Tombstones in a packed row, counted as the per-cell form would count them."""
    count = 0 if row.deletion is None else 1
    for data in row.cells.values():
        if isinstance(data, Cell):  # the common case, without a generator per cell
            ldt = data.local_deletion_time_s
            if ldt != NO_DELETION_TIME and (data.ttl_s == 0 or ldt <= now_s):
                count += 1
            continue
        if data.deletion is not None:
            count += 1
        count += sum(
            1
            for cell in data.cells
            if cell.local_deletion_time_s != NO_DELETION_TIME
            and (cell.ttl_s == 0 or cell.local_deletion_time_s <= now_s)
        )
    return count


def _path_of(cell: Cell) -> bytes:
    return cell.path or b""


def assemble_rows(
    info: TableInfo,
    atoms: Iterable[AtomTuple],
    budget: TombstoneBudget | None = None,
    now_s: int = 0,
) -> Iterator[StoredRow]:
    """Group consecutive atoms of one row (same token, pk, ck) into stored rows, in input
    order. ``budget`` (if given) counts the tombstones met, judging expiry at ``now_s``."""
    for (_token, _pk, ck), group in groupby(atoms, key=_ROW_KEY):
        yield _build_row(info, ck, group, budget, now_s)


def raw_mutation(
    info: TableInfo,
    partition_key: bytes,
    rows: Iterable[StoredRow],
    tombstones: PartitionTombstones,
) -> Mutation | None:
    """The stored state of one partition as a Mutation, or None if nothing is stored."""
    static_row: Row | None = None
    clustered: list[Row] = []
    for stored in rows:
        if stored.ck == STATIC_CK:
            static_row = stored.row
        else:
            clustered.append(stored.row)
    if static_row is None and not clustered and tombstones.is_empty:
        return None
    return Mutation(
        info.table.keyspace,
        info.table.name,
        split_partition_key(partition_key, info.partition_key_arity),
        tombstones.partition_deletion,
        static_row,
        tuple(clustered),
        tombstones.range_tombstones(),
    )


@dataclass(frozen=True, slots=True)
class LiveValues:
    """The live content of one row after shadowing and expiry."""

    values: dict[str, bytes]
    writetime_us: dict[str, int]
    ttl_s: dict[str, int]


def _has_collection_deletion(row: Row) -> bool:
    return any(
        isinstance(data, ComplexColumn) and data.deletion is not None for data in row.cells.values()
    )


def live_values(
    info: TableInfo,
    stored: StoredRow,
    tombstones: PartitionTombstones,
    now_s: int,
) -> LiveValues | None:
    """The row's live values at ``now_s``, or None if the row does not exist (not live)."""
    row = stored.row
    deletions = tombstones.covering(stored.ck) if not tombstones.is_empty else []
    has_collection_deletion = bool(info.multicell) and _has_collection_deletion(row)
    if deletions or row.deletion is not None or has_collection_deletion:
        row = shadow_row(row, deletions)
    values: dict[str, bytes] = {}
    writetime_us: dict[str, int] = {}
    ttl_s: dict[str, int] = {}
    for name, data in row.cells.items():
        if isinstance(data, Cell):
            if data.is_live(now_s):
                values[name] = data.value
                writetime_us[name] = data.timestamp_us
                if data.ttl_s > 0:
                    ttl_s[name] = data.local_deletion_time_s - now_s
            continue
        elements = [(cell.path or b"", cell.value) for cell in data.cells if cell.is_live(now_s)]
        if elements:
            order = info.path_orders[name]
            elements.sort(key=lambda element: order(element[0]))
            values[name] = serialized_collection_from_cells(info.multicell_types[name], elements)
    live = bool(values) or (row.liveness is not None and liveness_is_live(row.liveness, now_s))
    return LiveValues(values, writetime_us, ttl_s) if live else None


@dataclass(frozen=True, slots=True)
class RowRequest:
    """What a CQL read wants from each partition."""

    columns: frozenset[str] | None
    now_s: int
    allow_static_only: bool


def row_request(
    info: TableInfo, columns: Sequence[str] | None, now_s: int, unrestricted: bool
) -> RowRequest:
    """A read's request, checked: ``now_s`` an int, ``columns`` (None: all) of the table;
    ``unrestricted`` (no clustering restriction) lets a static-only row be returned."""
    if type(now_s) is not int:
        raise InvalidRequest(f"now_s must be an int, got {now_s!r}")
    if columns is None:
        return RowRequest(None, now_s, unrestricted)
    for name in columns:
        if not info.table.has_column(name):
            raise InvalidRequest(f"table {info.qualified_name} has no column {name!r}")
    return RowRequest(frozenset(columns), now_s, unrestricted)


def row_cap(limits: StoreLimits, limit: int | None) -> int:
    """How many rows a partition read collects: ``limit``, at most one past the result limit
    (so that :func:`checked_result` can tell it was passed)."""
    cap = limits.max_result_rows + 1
    if limit is None:
        return cap
    if type(limit) is not int or limit <= 0:
        raise InvalidRequest(f"limit must be a positive int, got {limit!r}")
    return min(limit, cap)


def checked_result(info: TableInfo, rows: list[ResultRow], limits: StoreLimits) -> list[ResultRow]:
    """``rows``, or ResultTooLarge past ``max_result_rows``."""
    if len(rows) > limits.max_result_rows:
        raise ResultTooLarge(
            f"read of {info.qualified_name} returns more than {limits.max_result_rows} "
            "rows; pass a limit or page with scan()"
        )
    return rows


def checked_page_size(limits: StoreLimits, page_size: int) -> int:
    """``page_size``, or InvalidRequest unless it is in 1..``max_page_size_rows``."""
    maximum = limits.max_page_size_rows
    if type(page_size) is not int or not 0 < page_size <= maximum:
        raise InvalidRequest(f"page_size must be in 1..{maximum}, got {page_size!r}")
    return page_size


def _project(
    columns: frozenset[str] | None, static: LiveValues | None, regular: LiveValues | None
) -> tuple[dict[str, bytes], dict[str, int], dict[str, int]]:
    """The values, write times and TTLs of a result row: the static row's and the row's own,
    restricted to ``columns``. A row's own values are made for it alone, so a row of a
    partition without static values and a read of every column keeps its dicts."""
    if static is None and columns is None and regular is not None:
        return regular.values, regular.writetime_us, regular.ttl_s
    values: dict[str, bytes] = {}
    writetime_us: dict[str, int] = {}
    ttl_s: dict[str, int] = {}
    for part in (static, regular):
        if part is not None:
            values.update(part.values)
            writetime_us.update(part.writetime_us)
            ttl_s.update(part.ttl_s)
    if columns is not None:
        values = {k: v for k, v in values.items() if k in columns}
        writetime_us = {k: v for k, v in writetime_us.items() if k in columns}
        ttl_s = {k: v for k, v in ttl_s.items() if k in columns}
    return values, writetime_us, ttl_s


LiveRow = tuple[bytes, tuple[bytes, ...], LiveValues | None]
"""A stored row's ``ck``, clustering values and live values (None: the row is not live)."""


def live_rows(
    info: TableInfo,
    atoms: Iterable[AtomTuple],
    tombstones: PartitionTombstones,
    budget: TombstoneBudget | None,
    now_s: int,
) -> Iterator[LiveRow]:
    """Each row of ``atoms`` (one partition's, grouped like :func:`assemble_rows`) with its
    live values at ``now_s`` (as :func:`live_values` of the assembled row).

    A row stored as one packed atom in the uniform layout (every CDC log row) in a partition
    without tombstones is answered from the decoded fields, without building its cells."""
    fast = info.packed_rows and tombstones.is_empty
    for (_token, _pk, ck), group in groupby(atoms, key=_ROW_KEY):
        row_atoms: Iterator[AtomTuple] = group
        if fast:
            first = next(row_atoms)
            second = next(row_atoms, None)
            if second is None and first[3] == KIND_PACKED_ROW:
                try:
                    fields = decode_uniform_row(first[9])
                except MutationDecodeError as error:
                    raise _corrupt(info, ck, error) from error
                if fields is not None:
                    yield ck, fields[0], _uniform_live(info, ck, fields, budget, now_s)
                    continue
            row_atoms = chain((first,) if second is None else (first, second), row_atoms)
        stored = _build_row(info, ck, row_atoms, budget, now_s)
        yield ck, stored.row.clustering, live_values(info, stored, tombstones, now_s)


def stored_live_rows(
    info: TableInfo, rows: Iterable[StoredRow], tombstones: PartitionTombstones, now_s: int
) -> Iterator[LiveRow]:
    """:func:`live_rows` of rows already assembled."""
    for stored in rows:
        yield stored.ck, stored.row.clustering, live_values(info, stored, tombstones, now_s)


def _uniform_live(
    info: TableInfo, ck: bytes, fields: UniformRow, budget: TombstoneBudget | None, now_s: int
) -> LiveValues | None:
    """:func:`live_values` of a uniform packed row (no marker, deletion or collection cell)
    in a partition without tombstones; its dead cells counted in ``budget`` as tombstones."""
    clustering, timestamp_us, ttl_s, deletion_s, values = fields
    known = info.static_columns if ck == STATIC_CK else info.regular_columns
    if len(clustering) != (0 if ck == STATIC_CK else info.clustering_arity):
        message = f"table {info.qualified_name}: stored row {ck!r} has clustering {clustering!r}"
        raise InternalError(message)  # the message is built only when it fails
    if not values.keys() <= known.keys():
        values = {name: value for name, value in values.items() if name in known}
    if info.dropped_at_us:
        dropped = info.dropped_at_us
        values = {
            n: v for n, v in values.items() if timestamp_us > dropped.get(n, timestamp_us - 1)
        }
    if deletion_s != NO_DELETION_TIME and (ttl_s == 0 or deletion_s <= now_s):
        if budget is not None and values:
            budget.add(len(values))  # every cell is a tombstone or expired
        return None
    if not values:
        return None
    writetime_us = dict.fromkeys(values, timestamp_us)
    remaining = dict.fromkeys(values, deletion_s - now_s) if ttl_s > 0 else {}
    return LiveValues(values, writetime_us, remaining)


def result_rows(
    info: TableInfo,
    position: tuple[int, bytes],
    static: StoredRow | None,
    rows: Iterable[LiveRow],
    tombstones: PartitionTombstones,
    request: RowRequest,
) -> Iterator[tuple[bytes, ResultRow]]:
    """The live CQL rows of one partition as ``(ck, row)`` in the order of ``rows`` (from
    :func:`live_rows`); the static-only row (``ck = b""``) last if allowed and the partition
    had no live row."""
    token, pk = position
    partition_key = split_partition_key(pk, info.partition_key_arity)
    now_s = request.now_s
    static_values = None if static is None else live_values(info, static, tombstones, now_s)
    emitted = False
    for ck, clustering, live in rows:
        if live is None:
            continue
        emitted = True
        values, writetime_us, ttl_s = _project(request.columns, static_values, live)
        yield ck, ResultRow(token, partition_key, clustering, values, writetime_us, ttl_s)
    if not emitted and static_values is not None and request.allow_static_only:
        values, writetime_us, ttl_s = _project(request.columns, static_values, None)
        yield (
            STATIC_CK,
            ResultRow(token, partition_key, (), values, writetime_us, ttl_s, static_only=True),
        )


def split_static(
    rows: Iterator[StoredRow],
) -> tuple[StoredRow | None, Iterator[StoredRow]]:
    """Take the static row off the front of a partition's row stream, if it is there."""
    first = next(rows, None)
    if first is None:
        return None, iter(())
    if first.ck == STATIC_CK:
        return first, rows
    return None, _chain_one(first, rows)


def _chain_one(first: StoredRow, rest: Iterator[StoredRow]) -> Iterator[StoredRow]:
    yield first
    yield from rest


def partition_groups(
    atoms: Iterable[AtomTuple],
) -> Iterator[tuple[tuple[int, bytes], Iterator[AtomTuple]]]:
    """Consecutive atoms grouped by partition ``(token, pk)``."""
    return groupby(atoms, key=itemgetter(0, 1))
