"""The current-state merge over columns (issue 19): the common batch merged with Arrow and numpy
instead of change by change, with the same result as the row logic of
:class:`~ringflow.pipeline._lakehouse_state.CurrentStateMerge` (``tests/spark/
test_lakehouse_columns.py`` holds them equal over random batches).

It takes a table whose columns are all atomic with no static column, and whose key and value
types reach Arrow in one canonical form (text, integers, floats, booleans, blobs, UUIDs,
timestamps: ``_PLAIN_TYPES``), and a batch without range deletions over partitions that hold
none: inserts, updates (TTLs, cells set to
null), row and partition deletions. Anything else (:meth:`ColumnsMerge.for_batch` or
:meth:`ColumnsMerge.merge` answer None) goes to the row logic.

Every rule is a maximum, so each is one vectorized step over the batch and the stored rows of
the partitions it touches (:mod:`ringflow.pipeline._materialize` states the rules):

- a row's identity is a dense code of its key columns (``dictionary_encode``), a partition's of
  its partition key; a partition deletion applies to the head row (clustering columns null);
- the partition and row deletions are the maxima of the stored ones and the batch's;
- the row marker (an INSERT's) and each column's cell are the candidates' maxima in Cassandra's
  order at equal timestamps (``cell_order``): a plain value < an expiring one (the longer TTL
  wins) < a tombstone, then the greater serialized value, compared in Python for the rare
  candidates that tie on everything else;
- a cell or marker at or below the row's shadow (its partition's and its own deletion) is
  dropped, as the row logic drops it when it writes the row;
- at ``now_s``: a cell is live when it holds a value past no TTL; a row when its marker or a
  cell is; what it shows, ``_deleted``, ``_deleted_at`` and ``_expires_at`` follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from ringflow.cdc import CdcOperation, deleted_column_name
from ringflow.pipeline._changes import (
    OPERATION_FIELD,
    RANGE_END_OPERATIONS,
    RANGE_START_OPERATIONS,
    TIME_FIELD,
    TIME_US_FIELD,
    TTL_FIELD,
    value_columns,
)
from ringflow.pipeline._lakehouse_state import (
    DELETED_AT_FIELD,
    DELETED_FIELD,
    EXPIRES_AT_FIELD,
    MARKER_TS_FIELD,
    MARKER_TTL_FIELD,
    PARTITION_DELETED_FIELD,
    PK_FIELD,
    RANGES_FIELD,
    ROW_DELETED_FIELD,
    ROW_FIELD,
    Wanted,
    cell_time_field,
    cell_ttl_field,
    current_arrow_schema,
    kept_value_field,
    write_time_field,
)
from ringflow.pipeline._materialize import US_PER_SECOND
from ringflow.pipeline._spark_types import from_spark_value
from ringflow.schema import NativeType, Table, serialize

_NONE = -(2**63)
_PLAIN_TYPES = frozenset(
    {"ascii", "text", "varchar", "int", "bigint", "smallint", "tinyint", "boolean", "float",
     "double", "blob", "uuid", "timeuuid", "timestamp"}
)  # fmt: skip
"""Types whose Arrow values the merge can take as they come: the change rows (``change_to_row``)
hold them in their one canonical form (a str, an int, a float, bytes, a UUID's text, a UTC
timestamp in whole milliseconds), so equal values are equal Arrow values."""
_RANGE_CODES = np.array([int(o) for o in RANGE_START_OPERATIONS | RANGE_END_OPERATIONS])
_IMAGE_CODES = np.array([int(CdcOperation.PRE_IMAGE), int(CdcOperation.POST_IMAGE)])
_INSERT = int(CdcOperation.INSERT)
_UPDATE = int(CdcOperation.UPDATE)
_ROW_DELETE = int(CdcOperation.ROW_DELETE)
_PARTITION_DELETE = int(CdcOperation.PARTITION_DELETE)


def columns_mergeable(table: Table) -> bool:
    """Whether :class:`ColumnsMerge` takes batches of ``table`` (module docstring)."""
    if table.static_columns:
        return False
    columns = [*table.primary_key_columns, *value_columns(table)]
    return all(
        type(c.type) is NativeType and c.type.name in _PLAIN_TYPES and not c.type.is_multicell
        for c in columns
    )


def _null(column: Any) -> Any:
    return column.is_null().to_numpy(zero_copy_only=False)


def _well_formed(table: Table, data: Any, operations: Any) -> bool:
    """What :func:`~ringflow.pipeline._changes.validate_change` checks of these changes, over
    columns: known operations, whole partition keys, the whole clustering key on a row change
    and none on a partition deletion, values only on writes, a write time, TTLs positive."""
    if not np.isin(operations, (_INSERT, _UPDATE, _ROW_DELETE, _PARTITION_DELETE)).all():
        return False
    if any(_null(data.column(c.name)).any() for c in table.partition_key_columns):
        return False
    if _null(data.column(TIME_US_FIELD)).any() or _null(data.column(TIME_FIELD)).any():
        return False
    partition_wide = operations == _PARTITION_DELETE
    for column in table.clustering_columns:
        if (_null(data.column(column.name)) != partition_wide).any():
            return False
    writes = (operations == _INSERT) | (operations == _UPDATE)
    for column in value_columns(table):
        deleted = pc.fill_null(data.column(deleted_column_name(column.name)), False)
        touched = ~_null(data.column(column.name)) | deleted.to_numpy(zero_copy_only=False)
        if (touched & ~writes).any():
            return False
    ttl = data.column(TTL_FIELD)
    if pc.any(pc.less_equal(ttl, 0)).as_py():
        return False
    return all(
        _canonical(data.column(c.name), str(getattr(c.type, "name", "")))
        for c in (*table.primary_key_columns, *value_columns(table))
    )


_UUID_TEXT = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_TIMEUUID_TEXT = "^[0-9a-f]{8}-[0-9a-f]{4}-1[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$"


def _canonical(values: Any, type_name: str) -> bool:
    """Whether every value of a column is in the one form the codec gives it back in (the row
    logic makes values canonical; the column merge takes them as they are): UUIDs as lowercase
    hyphenated text (a timeuuid of version 1), timestamps in whole milliseconds."""
    if type_name in ("uuid", "timeuuid"):
        pattern = _UUID_TEXT if type_name == "uuid" else _TIMEUUID_TEXT
        matches = pc.match_substring_regex(values, pattern)
        return not pc.any(pc.invert(matches)).as_py()
    if type_name == "timestamp":
        micros = pc.cast(values, pa.int64())
        return not pc.any(pc.not_equal(pc.remainder(micros, 1000), 0)).as_py()
    return True


def _numpy(column: Any, fill: int = 0) -> Any:
    """An integer column as an int64 numpy array, nulls as ``fill``."""
    return pc.fill_null(column, fill).to_numpy().astype(np.int64, copy=False)


def _dense(columns: Sequence[Any], size: int) -> tuple[Any, int]:
    """A dense code (0..n-1) of each row's values of ``columns`` (Arrow arrays), nulls equal."""
    code = np.zeros(size, dtype=np.int64)
    count = 1
    for column in columns:
        encoded = pc.dictionary_encode(column)
        indices = _numpy(encoded.indices, -1) + 1
        code = code * (len(encoded.dictionary) + 1) + indices
        unique, code = np.unique(code, return_inverse=True)
        count = len(unique)
    return code.astype(np.int64, copy=False), count


def _last_per_group(group: Any, *keys: Any) -> tuple[Any, Any, Any]:
    """For each group present, the candidate with the greatest ``keys`` (compared in order);
    (groups, winning candidate indices, the sort order and a mask of the sorted positions
    whose predecessor is in the same group with equal keys)."""
    order = np.lexsort((*reversed(keys), group))
    sorted_group = group[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = sorted_group[1:] != sorted_group[:-1]
    same = np.zeros(len(order), dtype=bool)
    if len(order) > 1:
        equal = sorted_group[1:] == sorted_group[:-1]
        for key in keys:
            sorted_key = key[order]
            equal &= sorted_key[1:] == sorted_key[:-1]
        same[1:] = equal
    return sorted_group[last], order[last], (order, same, last)


def _concat(parts: Sequence[Any], arrow_type: Any) -> Any:
    return pa.concat_arrays(
        [
            (p.combine_chunks() if isinstance(p, pa.ChunkedArray) else p).cast(arrow_type)
            for p in parts
        ]
    )


class ColumnsMerge:
    """One batch's merge over columns (module docstring): :meth:`for_batch`, :meth:`wanted`,
    then :meth:`merge` with the stored rows the wanted selection found."""

    def __init__(self, table: Table, data: Any) -> None:
        self.table = table
        self.schema = current_arrow_schema(table)
        self.keys = [c.name for c in table.primary_key_columns]
        self.pk_names = [c.name for c in table.partition_key_columns]
        self.ck_columns = table.clustering_columns
        self.values = list(value_columns(table))
        self.data = data
        self._pk_ids: list[str] | None = None

    @classmethod
    def for_batch(cls, table: Table, data: Any) -> ColumnsMerge | None:
        """The merge of ``data`` (the batch's change rows, Arrow, the change schema of
        ``table``), None when the row logic must take it (module docstring)."""
        if not columns_mergeable(table):
            return None
        operations = _numpy(data.column(OPERATION_FIELD))
        if np.isin(operations, _RANGE_CODES).any():
            return None
        kept = ~np.isin(operations, _IMAGE_CODES)
        if not kept.all():
            data = data.filter(pa.array(kept))
            operations = operations[kept]
        if not _well_formed(table, data, operations):
            return None  # the row logic names the change and the rule it breaks
        return cls(table, data)

    def partition_ids(self) -> list[str]:
        """The ``_pk`` of every partition the batch touches."""
        if self._pk_ids is None:
            unique = self.data.select(self.pk_names).group_by(self.pk_names).aggregate([])
            columns = {n: unique.column(n) for n in self.pk_names}
            found = key_ids(self.table, columns, clustered=False)[0]
            self._pk_ids = sorted(str(i) for i in found.to_pylist())
        return self._pk_ids

    def wanted(self, now_s: int) -> Wanted:
        """The stored rows the merge needs: the whole partitions the batch touches, and those
        holding a row whose TTL'd value has died by ``now_s``."""
        return Wanted(self.partition_ids(), [], now_s * US_PER_SECOND, expired_whole=True)

    def merge(self, stored: Any, now_s: int) -> Any | None:
        """The rows to write (those that differ from ``stored``, the selected rows conformed to
        the schema), None when a stored partition holds range tombstones."""
        if pc.any(pc.is_valid(stored.column(RANGES_FIELD))).as_py():
            return None
        return _Merge(self, stored, now_s).run()


class _Merge:
    """The arrays of one :meth:`ColumnsMerge.merge`: stored rows first, then the changes."""

    def __init__(self, plan: ColumnsMerge, stored: Any, now_s: int) -> None:
        self.plan = plan
        self.stored = stored
        self.data = plan.data
        self.now_s = now_s
        self.n_stored = stored.num_rows
        size = stored.num_rows + self.data.num_rows
        key_arrays = {
            c.name: _concat(
                [stored.column(c.name), self.data.column(c.name)],
                self.plan.schema.field(c.name).type,
            )
            for c in plan.table.primary_key_columns
        }
        self.key_arrays = key_arrays
        self.row_code, self.rows = _dense([key_arrays[n] for n in plan.keys], size)
        self.pk_code, self.partitions = _dense([key_arrays[n] for n in plan.pk_names], size)
        first = np.full(self.rows, size, dtype=np.int64)
        np.minimum.at(first, self.row_code, np.arange(size))
        self.first = first
        self.row_pk = self.pk_code[first]
        if plan.ck_columns:
            head = key_arrays[plan.ck_columns[0].name].is_null().to_numpy(zero_copy_only=False)
            self.head = head[first]
        else:
            self.head = np.zeros(self.rows, dtype=bool)
        self.stored_at = np.full(self.rows, -1, dtype=np.int64)
        self.stored_at[self.row_code[: self.n_stored]] = np.arange(self.n_stored)
        self.op = _numpy(self.data.column(OPERATION_FIELD))
        self.ts = _numpy(self.data.column(TIME_US_FIELD))
        self.ttl = _numpy(self.data.column(TTL_FIELD))
        self.change_row = self.row_code[self.n_stored :]
        self.change_pk = self.pk_code[self.n_stored :]

    def _stored(self, name: str) -> Any:
        return self.stored.column(name)

    def run(self) -> Any:
        # deletions
        pdel = np.full(self.partitions, _NONE, dtype=np.int64)
        np.maximum.at(
            pdel,
            self.pk_code[: self.n_stored],
            _numpy(self._stored(PARTITION_DELETED_FIELD), _NONE),
        )
        is_pd = self.op == _PARTITION_DELETE
        np.maximum.at(pdel, self.change_pk[is_pd], self.ts[is_pd])
        rdel = np.full(self.rows, _NONE, dtype=np.int64)
        rdel[self.row_code[: self.n_stored]] = _numpy(self._stored(ROW_DELETED_FIELD), _NONE)
        is_rd = self.op == _ROW_DELETE
        np.maximum.at(rdel, self.change_row[is_rd], self.ts[is_rd])
        shadow = np.maximum(pdel[self.row_pk], rdel)
        # the row marker: (ts, ttl) greatest, stored and the batch's inserts
        marker_ts = np.full(self.rows, _NONE, dtype=np.int64)
        marker_ttl = np.zeros(self.rows, dtype=np.int64)
        stored_mk = self._stored(MARKER_TS_FIELD).is_valid().to_numpy(zero_copy_only=False)
        is_insert = self.op == _INSERT
        group = np.concatenate(
            [self.row_code[: self.n_stored][stored_mk], self.change_row[is_insert]]
        )
        cand_ts = np.concatenate(
            [_numpy(self._stored(MARKER_TS_FIELD))[stored_mk], self.ts[is_insert]]
        )
        cand_ttl = np.concatenate(
            [_numpy(self._stored(MARKER_TTL_FIELD))[stored_mk], self.ttl[is_insert]]
        )
        if len(group):
            groups, winners, _ = _last_per_group(group, cand_ts, cand_ttl)
            marker_ts[groups] = cand_ts[winners]
            marker_ttl[groups] = cand_ttl[winners]
        marker_kept = marker_ts > shadow
        marker_live = marker_kept & (
            (marker_ttl == 0) | (self.now_s < _seconds(marker_ts) + marker_ttl)
        )
        row_live = marker_live.copy()
        expiry = np.where(
            marker_live & (marker_ttl > 0), _seconds(marker_ts) + marker_ttl, np.iinfo(np.int64).max
        )
        out: dict[str, Any] = {}
        cells = {}
        for column in self.plan.values:
            cell = self._cell(column.name, column.type, shadow)
            cells[column.name] = cell
            live = cell["live"]
            row_live |= live
            ttl = cell["ttl"]
            expiry = np.where(
                live & (ttl > 0), np.minimum(expiry, _seconds(cell["ts"]) + ttl), expiry
            )
        for column in self.plan.values:
            cell = cells[column.name]
            name = column.name
            value = cell["value"]
            live = cell["live"]
            out[name] = pc.if_else(pa.array(live), value, pa.nulls(self.rows, value.type))
            out[write_time_field(name)] = _optional(cell["ts"], live)
            out[cell_time_field(name)] = _optional(cell["ts"], cell["kept"])
            valued = cell["kept"] & ~cell["tomb"]
            out[cell_ttl_field(name)] = _optional(cell["ttl"], valued & (cell["ttl"] > 0))
            kept_value = valued & ~live
            out[kept_value_field(name)] = pc.if_else(
                pa.array(kept_value), value, pa.nulls(self.rows, value.type)
            )
        out[MARKER_TS_FIELD] = _optional(marker_ts, marker_kept)
        out[MARKER_TTL_FIELD] = _optional(marker_ttl, marker_kept & (marker_ttl > 0))
        row_level = ~self.head if self.plan.ck_columns else np.ones(self.rows, dtype=bool)
        out[ROW_DELETED_FIELD] = _optional(rdel, row_level & (rdel != _NONE))
        head_level = self.head if self.plan.ck_columns else np.ones(self.rows, dtype=bool)
        row_pdel = pdel[self.row_pk]
        out[PARTITION_DELETED_FIELD] = _optional(row_pdel, head_level & (row_pdel != _NONE))
        out[RANGES_FIELD] = pa.nulls(self.rows, pa.string())
        out[DELETED_FIELD] = pa.array(~row_live)
        out[DELETED_AT_FIELD] = _optional(shadow, shadow != _NONE)
        out[EXPIRES_AT_FIELD] = _optional(
            expiry * US_PER_SECOND, row_live & (expiry != np.iinfo(np.int64).max)
        )
        keys_first = pa.array(self.first)
        for name in self.plan.keys:
            out[name] = self.key_arrays[name].take(keys_first)
        fields = [f for f in self.plan.schema if f.name not in (PK_FIELD, ROW_FIELD)]
        for field in fields:
            out[field.name] = out[field.name].cast(field.type)
        chosen = pa.array(np.nonzero(self._changed(out, fields))[0])
        for field in fields:
            out[field.name] = out[field.name].take(chosen)
        out[PK_FIELD], out[ROW_FIELD] = self._ids(out, self.stored_at[chosen.to_numpy()])
        return pa.Table.from_arrays(
            [out[f.name] for f in self.plan.schema], schema=self.plan.schema
        )

    def _cell(self, name: str, column_type: Any, shadow: Any) -> dict[str, Any]:
        """Column ``name``'s winning cell per row, and what it shows at ``now_s``."""
        arrow_type = self.plan.schema.field(name).type
        stored_ts = self._stored(cell_time_field(name))
        stored_has = stored_ts.is_valid().to_numpy(zero_copy_only=False)
        stored_value = pc.coalesce(
            self._stored(name).cast(arrow_type),
            self._stored(kept_value_field(name)).cast(arrow_type),
        )
        stored_tomb = stored_value.is_null().to_numpy(zero_copy_only=False)
        stored_ttl = _numpy(self._stored(cell_ttl_field(name)))
        change_value = self.data.column(name).cast(arrow_type)
        deleted = pc.fill_null(self.data.column(deleted_column_name(name)), False).to_numpy(
            zero_copy_only=False
        )
        writes = (self.op == _INSERT) | (self.op == _UPDATE)
        has_value = change_value.is_valid().to_numpy(zero_copy_only=False)
        change_has = writes & (deleted | has_value)
        change_tomb = deleted
        change_ttl = np.where(change_tomb, 0, self.ttl)
        values = _concat([stored_value, change_value], arrow_type)
        position = np.concatenate(
            [np.nonzero(stored_has)[0], self.n_stored + np.nonzero(change_has)[0]]
        )
        group = np.concatenate(
            [self.row_code[: self.n_stored][stored_has], self.change_row[change_has]]
        )
        ts = np.concatenate([_numpy(stored_ts)[stored_has], self.ts[change_has]])
        tomb = np.concatenate([stored_tomb[stored_has], change_tomb[change_has]])
        ttl = np.concatenate([stored_ttl[stored_has], change_ttl[change_has]])
        kind = np.where(tomb, 2, np.where(ttl > 0, 1, 0))
        win_ts = np.full(self.rows, _NONE, dtype=np.int64)
        win_ttl = np.zeros(self.rows, dtype=np.int64)
        win_tomb = np.zeros(self.rows, dtype=bool)
        win_at = np.zeros(self.rows, dtype=np.int64)
        if len(group):
            order_ttl = np.where(kind == 1, ttl, 0)
            groups, winners, (order, same, last) = _last_per_group(group, ts, kind, order_ttl)
            if (same[last] & (kind[winners] != 2)).any():
                self._break_ties(column_type, values, kind, position, order, same, last, winners)
            win_ts[groups] = ts[winners]
            win_ttl[groups] = ttl[winners]
            win_tomb[groups] = tomb[winners]
            win_at[groups] = position[winners]
        kept = win_ts > shadow
        value = values.take(pa.array(win_at))
        live = kept & ~win_tomb & ((win_ttl == 0) | (self.now_s < _seconds(win_ts) + win_ttl))
        return {
            "ts": win_ts,
            "ttl": win_ttl,
            "tomb": win_tomb,
            "kept": kept,
            "live": live,
            "value": value,
        }

    @staticmethod
    def _break_ties(
        column_type: Any,
        values: Any,
        kind: Any,
        position: Any,
        order: Any,
        same: Any,
        last: Any,
        winners: Any,
    ) -> None:
        """Candidates equal on (timestamp, kind, TTL): the greatest serialized value wins (a
        tombstone has none: equal tombstones are the same)."""
        ends = np.nonzero(last)[0]
        for index, end in enumerate(ends):
            if not same[end] or kind[order[end]] == 2:
                continue
            start = end
            while start > 0 and same[start]:
                start -= 1
            candidates = order[start : end + 1]
            best = max(
                candidates,
                key=lambda c: _serialized(column_type, values[int(position[c])].as_py()),
            )
            winners[index] = best

    def _changed(self, out: dict[str, Any], fields: Sequence[Any]) -> Any:
        """Rows that are new or differ from their stored row in a column (``_pk`` and ``_row``
        are the same by construction)."""
        new = self.stored_at < 0
        if new.all():
            return new
        at = pa.array(self.stored_at, mask=new)  # null: no stored row, the take gives null
        differs = new.copy()
        for field in fields:
            mine = out[field.name]
            theirs = self._stored(field.name).take(at)
            equal = pc.fill_null(pc.equal(mine, theirs), False)
            both_null = pc.and_(mine.is_null(), theirs.is_null())
            differs |= ~pc.or_(equal, both_null).to_numpy(zero_copy_only=False)
        return differs

    def _ids(self, out: dict[str, Any], stored_at: Any) -> tuple[Any, Any]:
        """``_pk`` and ``_row`` of the chosen rows (``stored_at``: their stored rows, -1 for
        none): the stored ones', computed (:func:`key_ids`) for new rows."""
        new = stored_at < 0
        at = pa.array(stored_at, mask=new)
        pk_ids = self._stored(PK_FIELD).take(at).cast(pa.string()).combine_chunks()
        row_ids = self._stored(ROW_FIELD).take(at).cast(pa.string()).combine_chunks()
        if not new.any():
            return pk_ids, row_ids
        where = np.nonzero(new)[0]
        keys = {n: out[n].take(pa.array(where)) for n in self.plan.keys}
        new_pk, new_row = key_ids(self.plan.table, keys)
        index = np.arange(len(stored_at))
        index[where] = len(stored_at) + np.arange(len(where))
        order = pa.array(index)
        return (
            pa.concat_arrays([pk_ids, new_pk]).take(order),
            pa.concat_arrays([row_ids, new_row]).take(order),
        )


_INT_WIDTH = {"tinyint": 1, "smallint": 2, "int": 4, "bigint": 8}
_TEXT = frozenset({"ascii", "text", "varchar"})


def _serialized(cql_type: Any, value: object) -> bytes:
    """A column's value (as Arrow gives it) serialized as the CQL codec does."""
    return serialize(cql_type, from_spark_value(cql_type, value))


def _hex_column(values: Any, cql_type: Any) -> Any:
    """Each value's serialized bytes as hex (a string array; nulls stay null): integers by
    numpy (big-endian two's complement), text as its UTF-8, other plain types by the codec."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    nulls = values.is_null().to_numpy(zero_copy_only=False)
    width = _INT_WIDTH.get(cql_type.name)
    if width is not None:
        packed = _numpy(values).astype(f">i{width}").tobytes().hex().encode("ascii")
        text = np.frombuffer(packed, dtype=f"S{2 * width}").astype(str)
        return pa.array(text, pa.string(), mask=nulls)
    items = values.to_pylist()
    if cql_type.name in _TEXT:
        return pa.array([None if v is None else v.encode().hex() for v in items], pa.string())
    return pa.array(
        [None if v is None else _serialized(cql_type, v).hex() for v in items], pa.string()
    )


def _joined(parts: Sequence[Any]) -> Any:
    return parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, ".")


def key_ids(table: Table, columns: Any, clustered: bool = True) -> tuple[Any, Any]:
    """(``_pk``, ``_row``) of rows given as their key ``columns`` (name -> Arrow array), as
    :func:`~ringflow.pipeline._lakehouse_state.partition_id` and ``row_id`` make them; the
    ``_row`` only when ``clustered``."""
    pk = _joined([_hex_column(columns[c.name], c.type) for c in table.partition_key_columns])
    head = pc.binary_join_element_wise(pk, pa.scalar("/"), "")
    if not clustered or not table.clustering_columns:
        return pk, head
    ck = _joined([_hex_column(columns[c.name], c.type) for c in table.clustering_columns])
    row = pc.binary_join_element_wise(pk, pa.scalar("/:"), ck, "")
    return pk, pc.if_else(pc.is_null(ck), head, row)


def _seconds(us: Any) -> Any:
    return us // US_PER_SECOND


def _optional(values: Any, present: Any) -> Any:
    """An int64 Arrow array of ``values`` where ``present``, null elsewhere."""
    return pa.array(values, pa.int64(), mask=~present)
