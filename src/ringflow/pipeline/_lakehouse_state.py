"""The current-state table of a lakehouse destination (issue 19): one row per base-table row,
kept by merging each micro-batch's changes into the stored state of the partitions they touch.

Semantics are those of :mod:`ringflow.pipeline._materialize` (the oracle every applying sink
follows, as the PostgreSQL ``_live`` view does): per cell the greater (write timestamp, tie
bytes) wins, deletions are timestamps that shadow what is at or below them, so the state only
depends on the *set* of changes applied: a replayed or late batch never makes an older write win.
Deletions leave tombstones: a deleted row stays, ``_deleted = true`` with ``_deleted_at``, and
keeps its merge state, so a late older write to it is still refused.

Layout of the table (:func:`current_arrow_schema`), rows keyed by ``_row``:

- the key columns (for a partition's *head* row, the one holding its static columns, partition
  deletion and range tombstones, the clustering columns are null, as ``SELECT *`` shows a
  partition with only a static row); in a table without clustering columns the head is the row;
- per value column ``c``: ``c`` (its live value, null when dead) and ``_wt_c`` (its write
  timestamp in µs; a non-frozen collection: its newest live element's), as the ``_live`` view;
- ``_deleted`` (the row shows nothing: ``SELECT *`` would not return it), ``_deleted_at`` (the
  newest deletion shadowing it: row, range or partition), ``_expires_at`` (µs: the first second
  a TTL'd value the row shows, its row marker or a static cell, stops being live; null when
  none will), ``_pk`` (the partition key, for the merge to find a partition's rows), ``_row``
  (the row id), ``_state`` (JSON: every cell with its timestamp, tie bytes and expiry, the row
  marker and tombstones: what the merge needs).

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
    hashable,
)
from ringflow.pipeline._spark_types import arrow_type, to_spark_value
from ringflow.schema import (
    SMALLINT,
    Column,
    CqlType,
    SetType,
    Table,
    deserialize,
    serialize,
)

PK_FIELD = "_pk"
ROW_FIELD = "_row"
DELETED_FIELD = "_deleted"
DELETED_AT_FIELD = "_deleted_at"
EXPIRES_AT_FIELD = "_expires_at"
STATE_FIELD = "_state"
_NONE = -(2**63)
_PARTITION_OPERATIONS = (
    RANGE_START_OPERATIONS | RANGE_END_OPERATIONS | {CdcOperation.PARTITION_DELETE}
)
_EMPTY: dict[str, object] = {"marker": None, "deleted": _NONE, "cells": {}, "collections": {}}
_Where = tuple[Key, Key, bytes]
"""Where a change applies: (partition key, clustering prefix, its encoding)."""


def write_time_field(name: str) -> str:
    """``_wt_<name>``: the write timestamp (µs) of column ``name`` (as PostgreSQL's view)."""
    return f"_wt_{name}"


def current_arrow_schema(table: Table) -> Any:
    """The Arrow schema of ``table``'s current-state table (module docstring)."""
    fields = [pa.field(c.name, arrow_type(c.type)) for c in table.primary_key_columns]
    for column in value_columns(table):
        fields.append(pa.field(column.name, arrow_type(column.type)))
        fields.append(pa.field(write_time_field(column.name), pa.int64()))
    fields += [
        pa.field(DELETED_FIELD, pa.bool_()),
        pa.field(DELETED_AT_FIELD, pa.int64()),
        pa.field(EXPIRES_AT_FIELD, pa.int64()),
        pa.field(PK_FIELD, pa.string()),
        pa.field(ROW_FIELD, pa.string()),
        pa.field(STATE_FIELD, pa.string()),
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


def row_id(pk_id: str, encoded_clustering: bytes | None) -> str:
    """``_row``: ``<_pk>/`` for the head row, ``<_pk>/<encoded clustering hex>`` otherwise (in a
    table without clustering columns both are ``<_pk>/``: one row)."""
    return f"{pk_id}/{(encoded_clustering or b'').hex()}"


class _CellCodec:
    """Cells to and from JSON lists ``[timestamp_us, tie hex, value hex or null, expiry]``."""

    def __init__(self, table: Table) -> None:
        self.table = table

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

    def row_to_json(self, row: _Row) -> dict[str, object]:
        cells = {
            name: self.cell(cell, lambda v, n=name: serialize(self.table.column(n).type, v))
            for name, cell in sorted(row.cells.items())
        }
        collections = {}
        for name, collection in sorted(row.collections.items()):
            encode, _ = self._element_codec(name)
            collections[name] = {
                "tombstone": collection.tombstone_us,
                "elements": {
                    path.hex(): self.cell(cell, encode)
                    for path, cell in sorted(collection.elements.items())
                },
            }
        return {
            "marker": self.cell(row.marker, lambda v: b""),
            "deleted": row.deletion_us,
            "cells": cells,
            "collections": collections,
        }

    def row_from_json(self, clustering: Key, data: Mapping[str, Any]) -> _Row:
        row = _Row(clustering, deletion_us=int(data["deleted"]))
        row.marker = self.uncell(data["marker"], lambda b: b"")
        for name, item in data["cells"].items():
            if not self.table.has_column(name):
                continue
            column_type = self.table.column(name).type
            cell = self.uncell(item, lambda b, t=column_type: deserialize(t, b))
            if cell is not None:
                row.cells[name] = cell
        for name, item in data["collections"].items():
            if not self.table.has_column(name):
                continue
            _, decode = self._element_codec(name)
            collection = _Collection(int(item["tombstone"]))
            for path, element in item["elements"].items():
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
    stored: dict[str, str]  # row id -> stored _state JSON
    paired: set[tuple[bytes, int]] = field(default_factory=set)
    """Bounds already made range tombstones: a replayed one is not pending again."""


class CurrentStateMerge:
    """The merge of one batch: load the stored state rows of the partitions the changes touch
    (:meth:`load`), apply the changes (:meth:`apply`), then take the rows to write
    (:meth:`rows`): those whose state changed, and every row of a partition whose head changed
    (a partition or range deletion or a static column shadows or shows them all)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.codec = _CellCodec(table)
        self.state = TableState(table)
        self.partitions: dict[Key, _PartitionEntry] = {}
        self._clustering = table.clustering_columns
        self._last: tuple[Sequence[Change], list[tuple[Change, _Where]]] | None = None
        self._pk_ids: dict[Key, str] = {}

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
        for change, (pk, _, encoded) in self._located(changes):
            pk_id = self._pk_id(pk)
            if partition_wide or change.operation in _PARTITION_OPERATIONS:
                whole.add(pk_id)
            else:
                rows.add(row_id(pk_id, None))
                rows.add(row_id(pk_id, encoded))
        return Wanted(
            sorted(whole),
            sorted(r for r in rows if r.partition("/")[0] not in whole),
            None if now_s is None else now_s * US_PER_SECOND,
            partition_wide,
        )

    def load(self, states: Iterable[str]) -> None:
        """Load stored ``_state`` JSONs (rows of the partitions to merge)."""
        for text in states:
            data = json.loads(text)
            pk = _key_from_hex(self.table.partition_key_columns, data["pk"])
            entry = self._entry(pk)
            partition = self.state.partition(pk)
            head = data.get("partition")
            if head is not None:
                partition.deletion_us = int(head["deleted"])
                partition.ranges.update(
                    (bytes.fromhex(low), bytes.fromhex(high), int(ts))
                    for low, high, ts in head["ranges"]
                )
                partition.static = self.codec.row_from_json((), head["static"])
                entry.paired.update((bytes.fromhex(t), int(q)) for t, q in head["paired"])
                for time_hex, seq, is_start, edge, ts in head["bounds"]:
                    entry.bounds[(bytes.fromhex(time_hex), int(seq))] = (
                        bool(is_start),
                        bytes.fromhex(edge),
                        int(ts),
                    )
            row = data.get("row")
            if row is not None:
                encoded = bytes.fromhex(data["clustering"])
                clustering = _key_from_hex(self._clustering, data["ck"])
                partition.rows[encoded] = self.codec.row_from_json(clustering, row)
            entry.stored[str(data["id"])] = text

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
        """The rows to write (module docstring), as dicts of the current-state schema."""
        live = self.state.live_rows(now_s)
        result = []
        for pk, entry in self.partitions.items():
            partition = self.state.partition(pk)
            built = self._partition_rows(entry, partition, live, now_s)
            pk_id = self._pk_id(pk)
            head_id = row_id(pk_id, None)
            head_changed = head_id in built and built[head_id][STATE_FIELD] != entry.stored.get(
                head_id
            )
            for identity, row in built.items():
                if head_changed or row[STATE_FIELD] != entry.stored.get(identity):
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
        head = {
            "deleted": partition.deletion_us,
            "ranges": sorted([low.hex(), high.hex(), ts] for low, high, ts in partition.ranges),
            "static": self.codec.row_to_json(partition.static),
            "bounds": sorted(
                [time.hex(), seq, is_start, edge.hex(), ts]
                for (time, seq), (is_start, edge, ts) in entry.bounds.items()
            ),
            "paired": sorted([time.hex(), seq] for time, seq in entry.paired),
        }
        blank = (None,) * len(self._clustering)
        parts: dict[str, dict[str, Any]] = {
            row_id(pk_id, None): {"pk": pk_id, "partition": head, "key": entry.pk + blank}
        }
        for encoded, row in partition.rows.items():
            identity = row_id(pk_id, encoded)
            part = parts.setdefault(identity, {"pk": pk_id, "key": entry.pk + row.clustering})
            part["row"] = self.codec.row_to_json(row)
            part["clustering"] = encoded.hex()
            part["ck"] = _hex_key(self._clustering, row.clustering)
            part["key"] = entry.pk + row.clustering
        head_part = parts[row_id(pk_id, None)]
        empty_head = not any(
            (
                partition.deletion_us != _NONE,
                partition.ranges,
                entry.bounds,
                head["static"] != _EMPTY,
            )
        )
        if empty_head and "row" not in head_part and row_id(pk_id, None) not in entry.stored:
            del parts[row_id(pk_id, None)]  # nothing to keep: no row for it
        static_expiry = _next_expiry(partition.static, partition.deletion_us, now_s)
        built = {}
        for identity, part in parts.items():
            shadow = partition.deletion_us
            expiry = static_expiry
            if "row" in part:
                encoded = bytes.fromhex(part["clustering"])
                row = partition.rows[encoded]
                covering = [ts for low, high, ts in partition.ranges if low <= encoded < high]
                shadow = max(shadow, row.deletion_us, *covering)
                expiry = _sooner(expiry, _next_expiry(row, shadow, now_s))
            key: Key = part.pop("key")
            found = live.get(key)
            expires_us = None if expiry is None or found is None else expiry * US_PER_SECOND
            # the expiry is part of the state compared: a row merged again after it passed
            # is written again (it shows less, and expires later or never)
            part["expires"] = expires_us
            state = json.dumps({"id": identity, **part}, sort_keys=True)
            built[identity] = self._output_row(
                key, found, shadow, expires_us, pk_id, identity, state
            )
        return built

    def _output_row(
        self,
        key: Key,
        found: LiveRow | None,
        shadow_us: int,
        expires_us: int | None,
        pk_id: str,
        identity: str,
        state: str,
    ) -> dict[str, object]:
        row: dict[str, object] = {}
        for column, value in zip(self.table.primary_key_columns, key, strict=True):
            row[column.name] = None if value is None else to_spark_value(column.type, value)
        values = found.values if found else {}
        times = found.write_times_us if found else {}
        for column in value_columns(self.table):
            value = values.get(column.name)
            row[column.name] = None if value is None else to_spark_value(column.type, value)
            row[write_time_field(column.name)] = times.get(column.name)
        row[DELETED_FIELD] = found is None
        row[DELETED_AT_FIELD] = None if shadow_us == _NONE else shadow_us
        row[EXPIRES_AT_FIELD] = expires_us
        row[PK_FIELD] = pk_id
        row[ROW_FIELD] = identity
        row[STATE_FIELD] = state
        return row


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


def selected_states(found: Any, wanted: Wanted) -> list[str]:
    """The ``_state`` of the rows of ``found`` (an Arrow table with ``_pk``, ``_row``,
    ``_state`` and, once written, ``_expires_at``) that ``wanted`` names."""
    partition_ids, row_ids = expired_ids(found, wanted)
    keep = pc.or_(
        pc.is_in(
            found.column(PK_FIELD).cast(pa.string()),
            value_set=pa.array(wanted.partitions + partition_ids, pa.string()),
        ),
        pc.is_in(
            found.column(ROW_FIELD).cast(pa.string()),
            value_set=pa.array(wanted.rows + row_ids, pa.string()),
        ),
    )
    return [str(s) for s in found.filter(keep).column(STATE_FIELD).to_pylist()]


def expired_ids(found: Any, wanted: Wanted) -> tuple[list[str], list[str]]:
    """What the rows of ``found`` expired by ``wanted.expired_by_us`` bring in: (``_pk`` of
    whole partitions, ``_row`` of rows and their heads); none for a table written before
    ``_expires_at`` existed."""
    if wanted.expired_by_us is None or EXPIRES_AT_FIELD not in found.column_names:
        return [], []
    expired = found.filter(
        pc.less_equal(found.column(EXPIRES_AT_FIELD), pa.scalar(wanted.expired_by_us, pa.int64()))
    )
    partitions = sorted({str(p) for p in expired.column(PK_FIELD).to_pylist()})
    if wanted.expired_whole:
        return partitions, []
    rows = [str(r) for r in expired.column(ROW_FIELD).to_pylist()]
    return [], rows + [row_id(p, None) for p in partitions]
