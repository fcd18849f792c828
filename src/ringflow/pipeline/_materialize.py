"""Applying changes by last-write-wins: the table state a stream of changes leaves behind.

The oracle for every sink that applies changes (the lake's :func:`materialize`, the PostgreSQL
sink's guards): replaying the log with its original write timestamps is idempotent and
order-insensitive (reference scylla-cdc.md §7, "Replication example"), so the state only depends
on the *set* of changes. Cassandra's rules (cassandra-core.md §6.1-6.2, ringflow's
``schema._reconcile``) restated on changes:

- A cell is ``(timestamp, tie bytes, value or tombstone, expiry)``; of two versions the greater
  ``(timestamp, tie bytes)`` wins. :func:`cell_order` builds the tie bytes so that their
  unsigned order is Cassandra's tie rule at equal timestamps: an expiring or dead cell beats a
  plain live one, a tombstone beats an expiring one, the later local deletion time wins, then the
  greater serialized value, then the lower TTL. The local deletion time is not in the log: it is
  taken as ``write second + ttl`` (expiring) or ``write second`` (tombstone), which is what the
  coordinator computes when client and server clocks agree.
- An insert writes the row marker (a cell with an empty value and the change's TTL) and its
  columns; an update writes columns only; ``cdc$deleted_X`` writes a tombstone cell.
- A non-frozen collection is a set of element cells keyed by their path (list: the timeuuid,
  set: the element, map: the key, UDT: the field index). ``cdc$deleted_X`` on it is a collection
  tombstone at ``time - 1`` (the log files an overwrite's tombstone, put at ``T - 1``, with its
  cells at ``T``: ringflow.cdc ``_log_split``); ``cdc$deleted_elements_X`` are element tombstones.
  A ``DELETE c`` written alone at ``T`` is therefore replayed at ``T - 1``: the only state that
  differs is an element written at exactly ``T`` by another statement.
- Deletions shadow data at or below their timestamp: a row delete its row, a range delete (the
  start and end bound changes paired by ``cdc$time`` and consecutive ``cdc$batch_seq_no``) the
  clustering rows between its bounds (clustering order, DESC columns reversed), a partition
  delete everything in the partition including the static row.
- At ``now_s`` a cell is live if it is not a tombstone, is newer than every deletion covering it
  and ``now_s < expiry``. A row is live if its marker or any cell is live; a partition whose rows
  are all dead but whose static row is live shows one row with null clustering columns, as
  ``SELECT *`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ringflow.cdc import CdcOperation, deleted_elements_type
from ringflow.pipeline._changes import (
    IMAGE_OPERATIONS,
    RANGE_END_OPERATIONS,
    RANGE_START_OPERATIONS,
    Change,
    clustering_prefix,
    validate_change,
)
from ringflow.pipeline._errors import InvalidChange
from ringflow.schema import (
    SMALLINT,
    Column,
    CqlType,
    ListType,
    MapType,
    NativeType,
    SetType,
    Table,
    UserType,
    comparable_bytes,
    deserialize,
    encode_clustering,
    prefix_upper_bound,
    serialize,
)

US_PER_SECOND = 1_000_000
_LDT_OFFSET = 2**63
_TTL_MAX = 2**32 - 1

Key = tuple[object, ...]
_K = TypeVar("_K")


def cell_order(timestamp_us: int, value: bytes | None, ttl_s: int | None) -> bytes:
    """Tie bytes of a cell (``value`` None = tombstone): at equal timestamps the greater wins."""
    tombstone = value is None
    if tombstone:
        has_ldt, ldt = 1, timestamp_us // US_PER_SECOND
    elif ttl_s:
        has_ldt, ldt = 1, timestamp_us // US_PER_SECOND + ttl_s
    else:
        has_ldt, ldt = 0, 0
    escaped = (value or b"").replace(b"\x00", b"\x00\xff") + b"\x00\x00"
    head = bytes((has_ldt, int(tombstone))) + (ldt + _LDT_OFFSET).to_bytes(8, "big")
    return head + escaped + (_TTL_MAX - (ttl_s or 0)).to_bytes(4, "big")


def expiry_s(timestamp_us: int, ttl_s: int | None) -> int | None:
    """The second a value written at ``timestamp_us`` with ``ttl_s`` stops being live."""
    return None if not ttl_s else timestamp_us // US_PER_SECOND + ttl_s


@dataclass(frozen=True, slots=True)
class LiveRow:
    """One row of ``SELECT *`` over the materialized table, with each value's write time.

    ``key`` is the primary key in table order (clustering ``None`` for a static-only row);
    ``values`` maps each live non-key column to its codec value (a non-frozen collection as its
    whole value); ``write_times_us`` the cell's timestamp (a non-frozen collection: its newest
    live element's).
    """

    key: Key
    values: Mapping[str, object]
    write_times_us: Mapping[str, int]


@dataclass(slots=True)
class _Cell:
    timestamp_us: int
    order: bytes
    value: object | None  # None is a tombstone
    expires_s: int | None
    data: bytes | None = None
    """The value's bytes as its writer encoded them, when known (a cache for re-encoders)."""

    def beats(self, other: _Cell | None) -> bool:
        return other is None or (self.timestamp_us, self.order) > (other.timestamp_us, other.order)

    def live(self, shadow_us: int, now_s: int) -> bool:
        if self.value is None or self.timestamp_us <= shadow_us:
            return False
        return self.expires_s is None or now_s < self.expires_s


@dataclass(slots=True)
class _Collection:
    tombstone_us: int = -(2**63)
    elements: dict[bytes, _Cell] = field(default_factory=dict)


@dataclass(slots=True)
class _Row:
    clustering: Key
    marker: _Cell | None = None
    deletion_us: int = -(2**63)
    cells: dict[str, _Cell] = field(default_factory=dict)
    collections: dict[str, _Collection] = field(default_factory=dict)


@dataclass(slots=True)
class _Partition:
    static: _Row
    deletion_us: int = -(2**63)
    ranges: set[tuple[bytes, bytes, int]] = field(default_factory=set)
    rows: dict[bytes, _Row] = field(default_factory=dict)


def _put(cells: dict[_K, _Cell], key: _K, cell: _Cell) -> None:
    if cell.beats(cells.get(key)):
        cells[key] = cell


class TableState:
    """The LWW state of one table fed change by change (in any order, duplicates allowed)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._clustering_types = tuple((c.type, c.order) for c in table.clustering_columns)
        self._partitions: dict[Key, _Partition] = {}
        self._bounds: dict[tuple[Key, bytes, int], tuple[bool, bytes, int]] = {}

    def apply(self, change: Change, validated: bool = False) -> None:
        """Apply one change; InvalidChange if it does not fit the table (not checked again
        when ``validated``: e.g. built by ``change_from_row``, which validates)."""
        if not validated:
            validate_change(self.table, change)
        if change.operation not in IMAGE_OPERATIONS:
            self.apply_at(change, self.locate(change))

    def locate(self, change: Change) -> tuple[Key, Key, bytes]:
        """Where ``change`` applies, as this state keys it: (partition key, clustering prefix,
        its encoding); computed once by a caller that needs it before applying too."""
        prefix = clustering_prefix(self.table, change)
        return self.partition_key(change), prefix, self._encode(prefix)

    def apply_at(self, change: Change, where: tuple[Key, Key, bytes]) -> None:
        """Apply a validated change that is not an image at ``where`` (:meth:`locate`)."""
        pk, prefix, encoded = where
        operation = change.operation
        partition = self.partition(pk)
        if operation is CdcOperation.PARTITION_DELETE:
            partition.deletion_us = max(partition.deletion_us, change.time_us)
        elif operation in RANGE_START_OPERATIONS or operation in RANGE_END_OPERATIONS:
            self._range_bound(change, pk, encoded)
        elif operation is CdcOperation.ROW_DELETE:
            row = self._row(partition, change, encoded)
            row.deletion_us = max(row.deletion_us, change.time_us)
        else:
            static = bool(self.table.clustering_columns) and not prefix
            row = partition.static if static else self._row(partition, change, encoded)
            if operation is CdcOperation.INSERT:
                ts = change.time_us
                marker = _Cell(
                    ts, cell_order(ts, b"", change.ttl_s), b"", expiry_s(ts, change.ttl_s)
                )
                if marker.beats(row.marker):
                    row.marker = marker
            self._write_columns(row, change)

    def partition_key(self, change: Change) -> Key:
        """The key of the partition ``change`` belongs to, as this state keys partitions."""
        return self._key(change, self.table.partition_key_columns)

    def partition(self, key: Key) -> _Partition:
        """The state of partition ``key`` (empty when nothing was applied to it): the
        current-state table (:mod:`ringflow.pipeline._lakehouse_state`) loads stored state
        into it."""
        found = self._partitions.get(key)
        if found is None:
            found = self._partitions[key] = _Partition(static=_Row(()))
        return found

    def take_bounds(self) -> dict[tuple[Key, bytes, int], tuple[bool, bytes, int]]:
        """Remove and return the range bounds applied so far, by (partition key, time bytes,
        batch seq no): (is start, edge, timestamp), for a caller that pairs them itself."""
        bounds, self._bounds = self._bounds, {}
        return bounds

    def row_encoding(self, change: Change) -> bytes:
        """The encoded clustering of the row ``change`` writes (b"" without clustering
        columns), as this state keys a partition's rows."""
        return self._encode(clustering_prefix(self.table, change))

    @staticmethod
    def _key(change: Change, columns: Sequence[Column]) -> Key:
        return tuple(hashable(canonical_value(c.type, change.key[c.name])) for c in columns)

    def _encode(self, prefix: Sequence[object]) -> bytes:
        parts = [serialize(t, v) for (t, _), v in zip(self._clustering_types, prefix, strict=False)]
        return encode_clustering(self._clustering_types, parts)

    def _row(self, partition: _Partition, change: Change, encoded: bytes) -> _Row:
        found = partition.rows.get(encoded)
        if found is None:
            found = partition.rows[encoded] = _Row(self._key(change, self.table.clustering_columns))
        return found

    def _range_bound(self, change: Change, pk: Key, encoded: bytes) -> None:
        """Remember one bound; pairs are made when reading, so order and repeats don't matter."""
        operation = change.operation
        upper = operation in (
            CdcOperation.RANGE_DELETE_START_EXCLUSIVE,
            CdcOperation.RANGE_DELETE_END_INCLUSIVE,
        )
        edge = prefix_upper_bound(encoded) if upper else encoded
        is_start = operation in RANGE_START_OPERATIONS
        self._bounds[(pk, change.time.bytes, change.batch_seq_no)] = (
            is_start,
            edge,
            change.time_us,
        )

    def _pair_ranges(self) -> None:
        """Turn paired bounds into range tombstones; InvalidChange for a bound left alone."""
        alone = []
        for (pk, time, seq), (is_start, edge, ts) in self._bounds.items():
            other = self._bounds.get((pk, time, seq + 1 if is_start else seq - 1))
            if other is None or other[0] == is_start:
                alone.append((pk, time.hex(), seq))
            elif is_start:
                self._partitions[pk].ranges.add((edge, other[1], ts))
        if alone:
            raise InvalidChange(f"range delete bounds without their pair: {sorted(alone)[:5]}")

    def _write_columns(self, row: _Row, change: Change) -> None:
        ts, ttl = change.time_us, change.ttl_s
        for name in sorted(set(change.values) | change.deleted | set(change.deleted_elements)):
            column_type = self.table.column(name).type
            if column_type.is_multicell:
                self._write_collection(row, name, column_type, change)
                continue
            if name in change.deleted:
                _put(row.cells, name, _Cell(ts, cell_order(ts, None, None), None, None))
                continue
            value = change.values[name]
            data = serialize(column_type, value, name)
            cell = _Cell(ts, cell_order(ts, data, ttl), value, expiry_s(ts, ttl), data)
            _put(row.cells, name, cell)

    def _write_collection(self, row: _Row, name: str, base: CqlType, change: Change) -> None:
        ts, ttl = change.time_us, change.ttl_s
        collection = row.collections.setdefault(name, _Collection())
        if name in change.deleted:
            collection.tombstone_us = max(collection.tombstone_us, ts - 1)
        path_type = deleted_elements_type(base)
        element_path_type = path_type.element if isinstance(path_type, SetType) else SMALLINT
        for removed in change.deleted_elements.get(name, frozenset()):
            path = comparable_bytes(element_path_type, serialize(element_path_type, removed))
            _put(collection.elements, path, _Cell(ts, cell_order(ts, None, None), None, None))
        value = change.values.get(name)
        for path_value, element_value, value_type in elements(base, value):
            path = comparable_bytes(element_path_type, serialize(element_path_type, path_value))
            data = b"" if value_type is None else serialize(value_type, element_value)
            cell_value = (path_value, element_value)
            cell = _Cell(ts, cell_order(ts, data, ttl), cell_value, expiry_s(ts, ttl))
            _put(collection.elements, path, cell)

    # --- reading ------------------------------------------------------------------------------

    def live_rows(self, now_s: int) -> dict[Key, LiveRow]:
        """``SELECT *`` at ``now_s``, keyed by primary key; InvalidChange for an unpaired range
        bound (a range delete whose other half never arrived)."""
        self._pair_ranges()
        result: dict[Key, LiveRow] = {}
        for pk, partition in self._partitions.items():
            static_values, static_times = self._live_values(
                partition.static, partition.deletion_us, now_s
            )
            live_any = False
            for encoded, row in partition.rows.items():
                shadow = max(
                    partition.deletion_us, row.deletion_us, self._range_shadow(partition, encoded)
                )
                values, times = self._live_values(row, shadow, now_s)
                marker_live = row.marker is not None and row.marker.live(shadow, now_s)
                if not values and not marker_live:
                    continue
                live_any = True
                key = pk + row.clustering
                result[key] = LiveRow(key, {**static_values, **values}, {**static_times, **times})
            if static_values and not live_any:
                key = pk + (None,) * len(self._clustering_types)
                result[key] = LiveRow(key, static_values, static_times)
        return result

    @staticmethod
    def _range_shadow(partition: _Partition, encoded: bytes) -> int:
        covering = [ts for low, high, ts in partition.ranges if low <= encoded < high]
        return max(covering, default=-(2**63))

    def _live_values(
        self, row: _Row, shadow_us: int, now_s: int
    ) -> tuple[dict[str, object], dict[str, int]]:
        values: dict[str, object] = {}
        times: dict[str, int] = {}
        for name, cell in row.cells.items():
            if cell.live(shadow_us, now_s):
                values[name] = canonical_value(self.table.column(name).type, cell.value)
                times[name] = cell.timestamp_us
        for name, collection in row.collections.items():
            floor = max(shadow_us, collection.tombstone_us)
            live = [
                (path, cell)
                for path, cell in sorted(collection.elements.items())
                if cell.live(floor, now_s)
            ]
            if live:
                base = self.table.column(name).type
                values[name] = _assemble(base, [cell.value for _, cell in live])
                times[name] = max(cell.timestamp_us for _, cell in live)
        return values, times


def elements(base: CqlType, value: Any) -> Iterable[tuple[object, object, CqlType | None]]:
    """(path value, element value, element value type) of a non-frozen collection delta."""
    if value is None:
        return []
    if isinstance(base, ListType):
        return [(path, item, base.element) for path, item in _mapping(value).items()]
    if isinstance(base, SetType):
        return [(item, None, None) for item in value]
    if isinstance(base, MapType):
        return [(key, item, base.value) for key, item in _mapping(value).items()]
    if isinstance(base, UserType):
        fields = _mapping(value)
        return [
            (index, fields.get(name), base.field_types[index])
            for index, name in enumerate(base.field_names)
            if fields.get(name) is not None
        ]
    raise InvalidChange(f"{base.cql_name()} is not a non-frozen collection or UDT")


def _mapping(value: Any) -> Mapping[object, object]:
    if isinstance(value, Mapping):
        return value
    return dict(value)


def _assemble(base: CqlType, pairs: list[Any]) -> object:
    """The whole value of a non-frozen collection from its live elements in path order."""
    if isinstance(base, ListType):
        whole: object = [item for _, item in pairs]
    elif isinstance(base, SetType):
        whole = [path for path, _ in pairs]
    elif isinstance(base, MapType):
        whole = [(path, item) for path, item in pairs]
    elif isinstance(base, UserType):
        by_index = {int(path): item for path, item in pairs}
        whole = {n: by_index.get(i) for i, n in enumerate(base.field_names)}
    else:
        raise InvalidChange(f"{base.cql_name()} is not a non-frozen collection or UDT")
    return canonical_value(base, whole)


_INT_BITS = {"tinyint": 7, "smallint": 15, "int": 31, "bigint": 63}
_SAME_FORM = {"text": str, "varchar": str, "blob": bytes, "boolean": bool, "double": float}


def canonical_value(cql_type: CqlType, value: object) -> object:
    """The codec's own Python form of a value (sets as frozensets, maps as dicts, ...)."""
    if type(cql_type) is NativeType and _already_canonical(cql_type.name, value):
        return value  # what the round trip below returns, without the codec (hot for keys)
    frozen = cql_type.frozen_form()
    return deserialize(frozen, serialize(frozen, value))


def _already_canonical(name: str, value: object) -> bool:
    """``value`` is the codec's form of a ``name`` value as is: an int in the type's range, an
    ASCII str for text (any other str goes through the codec, which refuses surrogates), a
    bytes blob, a bool, a float double."""
    bits = _INT_BITS.get(name)
    if bits is not None:
        return type(value) is int and -(1 << bits) <= value < (1 << bits)
    form = _SAME_FORM.get(name)
    if form is None or type(value) is not form:
        return False
    return not isinstance(value, str) or value.isascii()


def hashable(value: object) -> object:
    """A hashable stand-in for a key value (lists and UDT dicts as tuples)."""
    if isinstance(value, list | tuple):
        return tuple(hashable(item) for item in value)
    if isinstance(value, dict):
        return tuple((k, hashable(v)) for k, v in value.items())
    return value


def materialize(table: Table, changes: Iterable[Change], now_s: int) -> dict[Key, LiveRow]:
    """The live rows ``changes`` leave in ``table`` at ``now_s`` (module docstring)."""
    state = TableState(table)
    for change in changes:
        state.apply(change)
    return state.live_rows(now_s)
