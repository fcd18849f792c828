"""The current-state table of a lakehouse destination (issue 19): one row per base-table row,
kept by merging each micro-batch's changes into the stored state of the partitions they touch.

Semantics are those of :mod:`ringflow.pipeline._materialize` (the oracle every applying sink
follows, as the PostgreSQL ``_live`` view does): per cell the greater (write timestamp, tie
bytes) wins, deletions are timestamps that shadow what is at or below them, so the state only
depends on the *set* of changes applied: a replayed or late batch never makes an older write win.
Deletions leave tombstones: a deleted row stays, ``_deleted = true`` with ``_deleted_at``, and
keeps its merge state, so a late older write to it is still refused.

Layout of the table (:func:`current_arrow_schema`), rows keyed by ``_row``, every part of the
merge state a typed column (no per-row blob to parse), so that a batch of simple changes is
merged over Arrow columns (:mod:`ringflow.pipeline._lakehouse_columns`) and the row logic here
is needed only for what those cannot take (range deletions, static and collection columns):

- the key columns (for a partition's *head* row, the one holding its static columns, partition
  deletion and range tombstones, the clustering columns are null, as ``SELECT *`` shows a
  partition with only a static row); in a table without clustering columns the head is the row;
- per value column ``c``: ``c`` (its live value, null when dead) and ``_wt_c`` (its write
  timestamp in µs; a non-frozen collection: its newest live element's), as the ``_live`` view;
- the merge state of an atomic column ``c``: ``_ts_c`` (the winning cell's timestamp, µs, a
  tombstone's too; null: no cell), ``_ttl_c`` (its TTL in seconds, null: none) and ``_xv_c``
  (its value when ``c`` does not show it: a value past its TTL, or a static value the head row
  does not show); a cell with neither value is a tombstone. A cell at or below a deletion
  covering it is dropped: nothing can bring it back, and a later cell beats it anyway. A
  non-frozen collection keeps its element cells and tombstone in ``_cells_c`` (JSON);
- ``_mk_ts`` and ``_mk_ttl`` (the row marker an INSERT writes), ``_rdel`` (the row's deletion),
  on the head row ``_pdel`` (the partition's deletion) and ``_ranges`` (JSON: its range
  tombstones, the range bounds waiting for their pair, and those already paired);
- ``_deleted`` (the row shows nothing: ``SELECT *`` would not return it), ``_deleted_at`` (the
  newest deletion shadowing it: row, range or partition), ``_expires_at`` (µs: the first second
  a TTL'd value the row shows, its row marker or a static cell, stops being live; null when
  none will), ``_pk`` (the partition key, for the merge to find a partition's rows), ``_row``
  (the row id).

TTL: the table is as of its last commit. Every commit also merges again the rows whose
``_expires_at`` has passed (:class:`Wanted`), so a value past its TTL shows until the next
batch commits; a reader that needs the exact instant filters ``_expires_at``. Range-delete
bounds are paired across batches (a bound whose pair has not arrived waits in the head row's
state).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from ringflow.cdc import CdcOperation
from ringflow.pipeline._changes import (
    IMAGE_OPERATIONS,
    RANGE_END_OPERATIONS,
    RANGE_START_OPERATIONS,
    Change,
    validate_change,
    value_columns,
)
from ringflow.pipeline._materialize import (
    US_PER_SECOND,
    Key,
    LiveRow,
    TableState,
    _Cell,
    _Collection,
    _Partition,
    _Row,
    canonical_value,
    cell_order,
    expiry_s,
    hashable,
)
from ringflow.pipeline._spark_types import arrow_type, from_spark_value, to_spark_value
from ringflow.schema import (
    SMALLINT,
    Column,
    CqlType,
    SetType,
    Table,
    deserialize,
    encode_clustering,
    serialize,
)

PK_FIELD = "_pk"
ROW_FIELD = "_row"
DELETED_FIELD = "_deleted"
DELETED_AT_FIELD = "_deleted_at"
EXPIRES_AT_FIELD = "_expires_at"
MARKER_TS_FIELD = "_mk_ts"
MARKER_TTL_FIELD = "_mk_ttl"
ROW_DELETED_FIELD = "_rdel"
PARTITION_DELETED_FIELD = "_pdel"
RANGES_FIELD = "_ranges"
LEGACY_STATE_FIELD = "_state"
"""The JSON merge state of the first layout (a table still holding it is rebuilt)."""
_NONE = -(2**63)
_PARTITION_OPERATIONS = (
    RANGE_START_OPERATIONS | RANGE_END_OPERATIONS | {CdcOperation.PARTITION_DELETE}
)
_Where = tuple[Key, Key, bytes]
"""Where a change applies: (partition key, clustering prefix, its encoding)."""


def write_time_field(name: str) -> str:
    """``_wt_<name>``: the write timestamp (µs) of column ``name`` (as PostgreSQL's view)."""
    return f"_wt_{name}"


def cell_time_field(name: str) -> str:
    """``_ts_<name>``: the timestamp (µs) of column ``name``'s winning cell, live or not."""
    return f"_ts_{name}"


def cell_ttl_field(name: str) -> str:
    """``_ttl_<name>``: the TTL (s) of column ``name``'s winning cell, null when none."""
    return f"_ttl_{name}"


def kept_value_field(name: str) -> str:
    """``_xv_<name>``: column ``name``'s winning cell's value, when ``name`` does not show it."""
    return f"_xv_{name}"


def cells_field(name: str) -> str:
    """``_cells_<name>``: a non-frozen collection's element cells and tombstone (JSON)."""
    return f"_cells_{name}"


def current_arrow_schema(table: Table) -> Any:
    """The Arrow schema of ``table``'s current-state table (module docstring)."""
    fields = [pa.field(c.name, arrow_type(c.type)) for c in table.primary_key_columns]
    for column in value_columns(table):
        fields.append(pa.field(column.name, arrow_type(column.type)))
        fields.append(pa.field(write_time_field(column.name), pa.int64()))
        if column.type.is_multicell:
            fields.append(pa.field(cells_field(column.name), pa.string()))
        else:
            fields.append(pa.field(cell_time_field(column.name), pa.int64()))
            fields.append(pa.field(cell_ttl_field(column.name), pa.int64()))
            fields.append(pa.field(kept_value_field(column.name), arrow_type(column.type)))
    fields += [
        pa.field(MARKER_TS_FIELD, pa.int64()),
        pa.field(MARKER_TTL_FIELD, pa.int64()),
        pa.field(ROW_DELETED_FIELD, pa.int64()),
        pa.field(PARTITION_DELETED_FIELD, pa.int64()),
        pa.field(RANGES_FIELD, pa.string()),
        pa.field(DELETED_FIELD, pa.bool_()),
        pa.field(DELETED_AT_FIELD, pa.int64()),
        pa.field(EXPIRES_AT_FIELD, pa.int64()),
        pa.field(PK_FIELD, pa.string()),
        pa.field(ROW_FIELD, pa.string()),
    ]
    return pa.schema(fields)


def _hex_key(columns: Sequence[Column], key: Sequence[object]) -> str:
    return ".".join(serialize(c.type, v).hex() for c, v in zip(columns, key, strict=True))


def _key_from_hex(columns: Sequence[Column], text: str) -> Key:
    parts = text.split(".") if columns else []
    return tuple(
        hashable(canonical_value(c.type, deserialize(c.type, bytes.fromhex(p))))
        for c, p in zip(columns, parts, strict=True)
    )


def partition_id(table: Table, pk: Key) -> str:
    """``_pk`` of a partition: its key's serialized bytes, hex, dot-separated."""
    return _hex_key(table.partition_key_columns, pk)


def clustering_id(table: Table, clustering: Key) -> str:
    """A clustering row's part of its ``_row``: its clustering key's serialized bytes, hex,
    dot-separated (as ``_pk``)."""
    return _hex_key(table.clustering_columns, clustering)


def row_id(pk_id: str, clustering: str | None) -> str:
    """``_row``: ``<_pk>/`` for the head row, ``<_pk>/:<clustering_id>`` for a clustering row
    (in a table without clustering columns the row is the head: ``<_pk>/``)."""
    return f"{pk_id}/" if clustering is None else f"{pk_id}/:{clustering}"


class _CellCodec:
    """A row's merge state to and from its typed columns (module docstring); a collection's
    element cells to and from JSON lists ``[timestamp_us, tie hex, value hex or null, expiry]``."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._types = {c.name: c.type for c in value_columns(table)}
        self._atomic = tuple(
            (c.name, c.type, cell_time_field(c.name), cell_ttl_field(c.name))
            for c in value_columns(table)
            if not c.type.is_multicell
        )
        self._multicell = tuple(
            (c.name, cells_field(c.name)) for c in value_columns(table) if c.type.is_multicell
        )
        self._static = frozenset(c.name for c in table.static_columns)

    @staticmethod
    def cell(cell: _Cell | None, encode: Any) -> list[object] | None:
        if cell is None:
            return None
        if cell.value is None:
            value = None
        else:  # the bytes the cell was written or loaded with, else encoded now
            value = (encode(cell.value) if cell.data is None else cell.data).hex()
        return [cell.timestamp_us, cell.order.hex(), value, cell.expires_s]

    @staticmethod
    def uncell(item: Any, decode: Any) -> _Cell | None:
        if item is None:
            return None
        ts, order, value, expires = item
        data = None if value is None else bytes.fromhex(value)
        decoded = None if data is None else decode(data)
        return _Cell(int(ts), bytes.fromhex(order), decoded, expires, data)

    def _element_types(self, base: CqlType) -> tuple[CqlType, CqlType | None]:
        from ringflow.cdc import deleted_elements_type

        path_type = deleted_elements_type(base)
        path = path_type.element if isinstance(path_type, SetType) else SMALLINT
        if isinstance(base, SetType):
            return path, None
        element = getattr(base, "value", None) or getattr(base, "element", None)
        return path, element

    def _element_codec(self, name: str) -> tuple[Any, Any]:
        base = self.table.column(name).type
        path_type, value_type = self._element_types(base)

        def encode(value: tuple[object, object]) -> bytes:
            path, item = value
            body = b"" if value_type is None or item is None else serialize(value_type, item)
            return json.dumps(
                [serialize(path_type, path).hex(), body.hex() if item is not None else None]
            ).encode()

        def decode(data: bytes) -> tuple[object, object]:
            path_hex, item_hex = json.loads(data)
            path = deserialize(path_type, bytes.fromhex(path_hex))
            if value_type is None or item_hex is None:
                return (path, None)
            return (path, deserialize(value_type, bytes.fromhex(item_hex)))

        return encode, decode

    def columns_of(
        self, row: _Row, shadow_us: int, shown: Mapping[str, object], static: bool
    ) -> dict[str, object]:
        """The merge-state columns of ``row`` (its static cells when ``static``): cells at or
        below ``shadow_us`` dropped; ``shown`` the values the output row shows."""
        out: dict[str, object] = {}
        for name, column_type, ts_field, ttl_field in self._atomic:
            if (name in self._static) != static:
                continue
            cell = row.cells.get(name)
            if cell is None or cell.timestamp_us <= shadow_us:
                continue
            out[ts_field] = cell.timestamp_us
            if cell.value is not None:
                out[ttl_field] = _ttl(cell)
                if shown.get(name) is None:
                    out[kept_value_field(name)] = to_spark_value(column_type, cell.value)
        for name, field_name in self._multicell:
            if (name in self._static) != static:
                continue
            collection = row.collections.get(name)
            if collection is None:
                continue
            encode, _ = self._element_codec(name)
            out[field_name] = json.dumps(
                [
                    collection.tombstone_us,
                    [
                        [path.hex(), self.cell(cell, encode)]
                        for path, cell in sorted(collection.elements.items())
                    ],
                ]
            )
        marker = row.marker
        if marker is not None and marker.timestamp_us > shadow_us:
            out[MARKER_TS_FIELD] = marker.timestamp_us
            out[MARKER_TTL_FIELD] = _ttl(marker)
        if not static and row.deletion_us != _NONE:
            out[ROW_DELETED_FIELD] = row.deletion_us
        return out

    def row_from_columns(self, clustering: Key, data: Mapping[str, Any], static: bool) -> _Row:
        """The merge state of a stored row (its static cells when ``static``)."""
        row = _Row(clustering)
        if not static:
            deleted = data.get(ROW_DELETED_FIELD)
            row.deletion_us = _NONE if deleted is None else int(deleted)
        marker_ts = data.get(MARKER_TS_FIELD)
        if marker_ts is not None:
            ttl = data.get(MARKER_TTL_FIELD)
            ts = int(marker_ts)
            row.marker = _Cell(ts, cell_order(ts, b"", ttl), b"", expiry_s(ts, ttl))
        for name, column_type, ts_field, ttl_field in self._atomic:
            if (name in self._static) != static or data.get(ts_field) is None:
                continue
            ts = int(data[ts_field])
            value = data.get(name)
            if value is None:
                value = data.get(kept_value_field(name))
            if value is None:
                row.cells[name] = _Cell(ts, cell_order(ts, None, None), None, None)
                continue
            ttl = data.get(ttl_field)
            cql_value = canonical_value(column_type, from_spark_value(column_type, value))
            encoded = serialize(column_type, cql_value)
            row.cells[name] = _Cell(
                ts, cell_order(ts, encoded, ttl), cql_value, expiry_s(ts, ttl), encoded
            )
        for name, field_name in self._multicell:
            text = data.get(field_name)
            if (name in self._static) != static or text is None:
                continue
            tombstone, items = json.loads(text)
            _, decode = self._element_codec(name)
            collection = _Collection(int(tombstone))
            for path, element in items:
                cell = self.uncell(element, decode)
                if cell is not None:
                    collection.elements[bytes.fromhex(path)] = cell
            row.collections[name] = collection
        return row


@dataclass(frozen=True, slots=True)
class Wanted:
    """The stored rows a batch's merge needs (:meth:`CurrentStateMerge.wanted`): every row of
    ``partitions`` (``_pk``), the ``rows`` (``_row``), and the rows whose ``_expires_at`` is at
    or before ``expired_by_us`` (a TTL'd value they show has died since they were written) with
    their partition's head row, or their whole partition when ``expired_whole`` (a table with
    static columns, whose merge needs whole partitions)."""

    partitions: list[str]
    rows: list[str]
    expired_by_us: int | None = None
    expired_whole: bool = False


@dataclass(slots=True)
class _PartitionEntry:
    """One partition being merged: its key, its pending range bounds and its stored rows."""

    pk: Key
    bounds: dict[tuple[bytes, int], tuple[bool, bytes, int]]
    stored: dict[str, Mapping[str, Any]]  # row id -> the stored row
    paired: set[tuple[bytes, int]] = field(default_factory=set)
    """Bounds already made range tombstones: a replayed one is not pending again."""


class CurrentStateMerge:
    """The merge of one batch, row by row: load the stored rows of the partitions the changes
    touch (:meth:`load`), apply the changes (:meth:`apply`), then take the rows to write
    (:meth:`rows`): those that differ from what is stored. Any batch of any table; the common
    case is merged over columns instead (:mod:`ringflow.pipeline._lakehouse_columns`)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.codec = _CellCodec(table)
        self.state = TableState(table)
        self.partitions: dict[Key, _PartitionEntry] = {}
        self._clustering = table.clustering_columns
        self._last: tuple[Sequence[Change], list[tuple[Change, _Where]]] | None = None
        self._pk_ids: dict[Key, str] = {}
        self._schema_names = current_arrow_schema(table).names

    def _located(self, changes: Sequence[Change]) -> list[tuple[Change, _Where]]:
        """Each change with where it applies (:meth:`TableState.locate`), computed once for
        the ``changes`` sequence :meth:`wanted` and :meth:`apply` are both given (kept, with
        the sequence itself, until another one comes)."""
        if self._last is not None and self._last[0] is changes:
            return self._last[1]
        located = [(change, self.state.locate(change)) for change in changes]
        self._last = (changes, located)
        return located

    def _pk_id(self, pk: Key) -> str:
        found = self._pk_ids.get(pk)
        if found is None:
            found = self._pk_ids[pk] = partition_id(self.table, pk)
        return found

    def partition_ids(self, changes: Sequence[Change]) -> list[str]:
        """The ``_pk`` of every partition ``changes`` touch (to select the stored rows)."""
        return sorted({self._pk_id(where[0]) for _, where in self._located(changes)})

    def wanted(self, changes: Sequence[Change], now_s: int | None = None) -> Wanted:
        """What to :meth:`load` for ``changes`` (and, given ``now_s``, for the rows a TTL
        changed by then). A change to one row needs that row and its partition's head
        (partition deletion, ranges, pending bounds); a partition or range deletion or a table
        with static columns (a static cell shows in every row) needs the whole partition.
        Loading only these keeps a batch's work proportional to the batch, not the table."""
        whole: set[str] = set()
        rows: set[str] = set()
        partition_wide = bool(self.table.static_columns) or not self._clustering
        for change, (pk, prefix, _) in self._located(changes):
            pk_id = self._pk_id(pk)
            if partition_wide or change.operation in _PARTITION_OPERATIONS:
                whole.add(pk_id)
            else:
                rows.add(row_id(pk_id, None))
                rows.add(row_id(pk_id, clustering_id(self.table, prefix)))
        return Wanted(
            sorted(whole),
            sorted(r for r in rows if r.partition("/")[0] not in whole),
            None if now_s is None else now_s * US_PER_SECOND,
            partition_wide,
        )

    def load(self, stored: Iterable[Mapping[str, Any]]) -> None:
        """Load stored rows (dicts of :func:`current_arrow_schema`) of the partitions to merge."""
        clustering_types = [(c.name, c.type) for c in self._clustering]
        encoding = tuple((c.type, c.order) for c in self._clustering)
        for data in stored:
            pk = _key_from_hex(self.table.partition_key_columns, str(data[PK_FIELD]))
            entry = self._entry(pk)
            partition = self.state.partition(pk)
            head = not self._clustering or data[clustering_types[0][0]] is None
            if head:
                deleted = data.get(PARTITION_DELETED_FIELD)
                partition.deletion_us = _NONE if deleted is None else int(deleted)
                if self._clustering:  # else the record is the row (no static columns)
                    partition.static = self.codec.row_from_columns((), data, static=True)
                self._load_ranges(entry, partition, data.get(RANGES_FIELD))
            if not self._clustering or not head:
                clustering = tuple(
                    hashable(canonical_value(t, from_spark_value(t, data[n])))
                    for n, t in clustering_types
                )
                parts = [
                    serialize(t, v) for (_, t), v in zip(clustering_types, clustering, strict=True)
                ]
                encoded = encode_clustering(encoding, parts)
                partition.rows[encoded] = self.codec.row_from_columns(clustering, data, False)
            entry.stored[str(data[ROW_FIELD])] = data

    @staticmethod
    def _load_ranges(entry: _PartitionEntry, partition: _Partition, text: str | None) -> None:
        if text is None:
            return
        ranges = json.loads(text)
        partition.ranges.update(
            (bytes.fromhex(low), bytes.fromhex(high), int(ts)) for low, high, ts in ranges["ranges"]
        )
        entry.paired.update((bytes.fromhex(t), int(q)) for t, q in ranges["paired"])
        for time_hex, seq, is_start, edge, ts in ranges["bounds"]:
            entry.bounds[(bytes.fromhex(time_hex), int(seq))] = (
                bool(is_start),
                bytes.fromhex(edge),
                int(ts),
            )

    def _entry(self, pk: Key) -> _PartitionEntry:
        found = self.partitions.get(pk)
        if found is None:
            found = self.partitions[pk] = _PartitionEntry(pk, {}, {})
        return found

    def apply(self, changes: Sequence[Change], validated: bool = False) -> None:
        """Apply the batch's changes (InvalidChange for one that does not fit the table,
        unless ``validated`` already)."""
        if not validated:
            for change in changes:
                validate_change(self.table, change)
        for change, where in self._located(changes):
            self._entry(where[0])
            if change.operation not in IMAGE_OPERATIONS:
                self.state.apply_at(change, where)
        for (pk, time, seq), bound in self.state.take_bounds().items():
            self._entry(pk).bounds[(time, seq)] = bound
        for entry in self.partitions.values():
            self._pair(entry)

    def _pair(self, entry: _PartitionEntry) -> None:
        """Paired bounds become range tombstones; a bound alone waits for its pair."""
        paired = {bound for bound in entry.bounds if bound in entry.paired}
        for (time, seq), (is_start, edge, ts) in entry.bounds.items():
            if (time, seq) in paired:
                continue
            other = entry.bounds.get((time, seq + 1 if is_start else seq - 1))
            if other is None or other[0] == is_start:
                continue
            paired.add((time, seq))
            entry.paired.add((time, seq))
            if is_start:
                self.state.partition(entry.pk).ranges.add((edge, other[1], ts))
        for done in paired:
            del entry.bounds[done]

    def rows(self, now_s: int) -> list[dict[str, object]]:
        """The rows to write (those that differ from the stored ones), as dicts of the
        current-state schema."""
        live = self.state.live_rows(now_s)
        result = []
        for pk, entry in self.partitions.items():
            partition = self.state.partition(pk)
            for identity, row in self._partition_rows(entry, partition, live, now_s).items():
                stored = entry.stored.get(identity)
                if stored is None or any(row[n] != stored.get(n) for n in self._schema_names):
                    result.append(row)
        return result

    def _partition_rows(
        self,
        entry: _PartitionEntry,
        partition: _Partition,
        live: Mapping[Key, LiveRow],
        now_s: int,
    ) -> dict[str, dict[str, object]]:
        pk_id = self._pk_id(entry.pk)
        head_id = row_id(pk_id, None)
        blank = (None,) * len(self._clustering)
        static_expiry = _next_expiry(partition.static, partition.deletion_us, now_s)
        built: dict[str, dict[str, object]] = {}
        ranges = None
        if partition.ranges or entry.bounds or entry.paired:
            ranges = json.dumps(
                {
                    "ranges": sorted([lo.hex(), hi.hex(), ts] for lo, hi, ts in partition.ranges),
                    "bounds": sorted(
                        [time.hex(), seq, is_start, edge.hex(), ts]
                        for (time, seq), (is_start, edge, ts) in entry.bounds.items()
                    ),
                    "paired": sorted([time.hex(), seq] for time, seq in entry.paired),
                }
            )
        if self._clustering:
            key = entry.pk + blank
            found = live.get(key)
            shown = found.values if found else {}
            head = self.codec.columns_of(partition.static, partition.deletion_us, shown, True)
            if partition.deletion_us != _NONE:
                head[PARTITION_DELETED_FIELD] = partition.deletion_us
            if ranges is not None:
                head[RANGES_FIELD] = ranges
            if head or found is not None or head_id in entry.stored:
                expires = None if static_expiry is None or found is None else static_expiry
                built[head_id] = self._output_row(
                    key, found, partition.deletion_us, expires, pk_id, head_id, head
                )
        for encoded, row in partition.rows.items():
            ck_id = clustering_id(self.table, row.clustering) if self._clustering else None
            identity = row_id(pk_id, ck_id)
            covering = [ts for low, high, ts in partition.ranges if low <= encoded < high]
            shadow = max(partition.deletion_us, row.deletion_us, *covering)
            key = entry.pk + row.clustering
            found = live.get(key)
            shown = found.values if found else {}
            columns = self.codec.columns_of(row, shadow, shown, False)
            if not self._clustering and partition.deletion_us != _NONE:  # the head is the row
                columns[PARTITION_DELETED_FIELD] = partition.deletion_us
            expiry = _sooner(static_expiry, _next_expiry(row, shadow, now_s))
            expires = None if expiry is None or found is None else expiry
            built[identity] = self._output_row(
                key, found, shadow, expires, pk_id, identity, columns
            )
        if not self._clustering and head_id not in built and partition.deletion_us != _NONE:
            columns = {PARTITION_DELETED_FIELD: partition.deletion_us}
            built[head_id] = self._output_row(
                entry.pk, None, partition.deletion_us, None, pk_id, head_id, columns
            )
        return built

    def _output_row(
        self,
        key: Key,
        found: LiveRow | None,
        shadow_us: int,
        expires_s: int | None,
        pk_id: str,
        identity: str,
        state: Mapping[str, object],
    ) -> dict[str, object]:
        row: dict[str, object] = dict.fromkeys(self._schema_names)
        for column, value in zip(self.table.primary_key_columns, key, strict=True):
            row[column.name] = None if value is None else to_spark_value(column.type, value)
        values = found.values if found else {}
        times = found.write_times_us if found else {}
        for column in value_columns(self.table):
            value = values.get(column.name)
            row[column.name] = None if value is None else to_spark_value(column.type, value)
            row[write_time_field(column.name)] = times.get(column.name)
        row.update(state)
        row[DELETED_FIELD] = found is None
        row[DELETED_AT_FIELD] = None if shadow_us == _NONE else shadow_us
        row[EXPIRES_AT_FIELD] = None if expires_s is None else expires_s * US_PER_SECOND
        row[PK_FIELD] = pk_id
        row[ROW_FIELD] = identity
        return row


def _ttl(cell: _Cell) -> int | None:
    """The TTL (s) a live or expiring cell was written with, None when it has none."""
    if cell.expires_s is None:
        return None
    return cell.expires_s - cell.timestamp_us // US_PER_SECOND


def _next_expiry(row: _Row, shadow_us: int, now_s: int) -> int | None:
    """The first second one of ``row``'s live TTL'd cells (marker, cells, collection elements)
    stops being live at ``now_s`` with ``shadow_us`` covering it; None when none will."""
    soonest: int | None = None
    for cell in (row.marker, *row.cells.values()):
        if cell is not None and cell.expires_s is not None and cell.live(shadow_us, now_s):
            soonest = _sooner(soonest, cell.expires_s)
    for collection in row.collections.values():
        floor = max(shadow_us, collection.tombstone_us)
        for cell in collection.elements.values():
            if cell.expires_s is not None and cell.live(floor, now_s):
                soonest = _sooner(soonest, cell.expires_s)
    return soonest


def _sooner(first: int | None, second: int | None) -> int | None:
    if first is None:
        return second
    return first if second is None else min(first, second)


def current_rows_table(table: Table, rows: Sequence[Mapping[str, object]]) -> Any:
    """``rows`` (from :meth:`CurrentStateMerge.rows`) as an Arrow table of the schema."""
    return pa.Table.from_pylist(list(rows), schema=current_arrow_schema(table))


def selection_mask(found: Any, wanted: Wanted) -> Any:
    """Which rows of ``found`` (an Arrow table with ``_pk``, ``_row`` and ``_expires_at``)
    ``wanted`` names (a boolean array)."""
    partition_ids, row_ids = expired_ids(found, wanted)
    return pc.or_(
        pc.is_in(
            found.column(PK_FIELD).cast(pa.string()),
            value_set=pa.array(wanted.partitions + partition_ids, pa.string()),
        ),
        pc.is_in(
            found.column(ROW_FIELD).cast(pa.string()),
            value_set=pa.array(wanted.rows + row_ids, pa.string()),
        ),
    )


def expired_ids(found: Any, wanted: Wanted) -> tuple[list[str], list[str]]:
    """What the rows of ``found`` expired by ``wanted.expired_by_us`` bring in: (``_pk`` of
    whole partitions, ``_row`` of rows and their heads)."""
    if wanted.expired_by_us is None:
        return [], []
    expired = found.filter(
        pc.less_equal(found.column(EXPIRES_AT_FIELD), pa.scalar(wanted.expired_by_us, pa.int64()))
    )
    partitions = sorted({str(p) for p in expired.column(PK_FIELD).to_pylist()})
    if wanted.expired_whole:
        return partitions, []
    rows = [str(r) for r in expired.column(ROW_FIELD).to_pylist()]
    return [], rows + [row_id(p, None) for p in partitions]


def conform(found: Any, schema: Any) -> Any:
    """``found`` (rows read back from a table) with the columns of ``schema``, in its order and
    types: a column the table does not have yet (added to the source since) is null."""
    columns = []
    for target in schema:
        index = found.schema.get_field_index(target.name)
        if index < 0:
            columns.append(pa.nulls(found.num_rows, target.type))
        else:
            columns.append(found.column(index).cast(target.type))
    return pa.Table.from_arrays(columns, schema=schema)


def without_rows(found: Any, rows: Any) -> Any:
    """The rows of ``found`` whose ``_row`` is not one of ``rows``'."""
    return found.filter(
        pc.invert(
            pc.is_in(found.column(ROW_FIELD), value_set=rows.column(ROW_FIELD).combine_chunks())
        )
    )
