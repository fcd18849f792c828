"""Changes as CQL statements for a hub cluster: pure, no I/O (the sink is :mod:`._hub`).

Every statement carries the change's original write time (``USING TIMESTAMP``, µs of
``cdc$time``), so that last-write-wins makes the replay of any set of changes, in any order and
any number of times, leave the state :func:`~ringflow.pipeline.materialize` computes (reference
scylla-cdc.md §7, the replicator example). Per operation (``cdc$operation``):

- insert (2): ``INSERT`` of the key and the changed columns (writes the row marker); a column in
  ``deleted`` is bound to null (a tombstone); an overwritten non-frozen collection (``deleted``
  flag) is bound to its new elements, which the hub writes as a collection tombstone at
  ``ts - 1`` plus the elements at ``ts``, exactly as the source did. Element additions or
  removals that an INSERT cannot express go into a second statement (an UPDATE at the same ts).
- update (1): ``UPDATE ... SET`` per column: an atomic value or null; a non-frozen collection
  ``c = ?`` when overwritten (``deleted`` flag, with its elements or null), else
  ``c = c + ?`` for added elements and ``c = c - ?`` for removed ones (set elements, map keys);
  a non-frozen UDT ``u.f = ?`` per added or removed (null) field. No clustering key in a table
  that has one: the static row (only the partition key in ``WHERE``).
- row delete (3): ``DELETE FROM t USING TIMESTAMP ? WHERE <full key>``; partition delete (4):
  ``WHERE <partition key>``.
- range delete (5-8): the start and end bound changes are paired (:func:`pair_range_bounds`) and
  become ``DELETE ... WHERE <partition key> [AND <equal prefix>] AND c > / >= ? [AND c < / <= ?]``.
  Bounds are in clustering order, so a DESC column's operators are flipped. A range whose bounds
  differ in more than one column cannot be one single-column slice: it is split into several
  slices of the same timestamp whose union is the range (at most ``2 x clustering depth``).
- pre-/post-images (0, 9) are not deltas: no statement.

TTL: an INSERT or UPDATE always says ``USING TIMESTAMP ? AND TTL ?`` (0 = no TTL, which also
overrides a ``default_time_to_live`` of the target). A TTL'd change is written with its
*remaining* TTL, ``write second + cdc$ttl - now``, so the hub's cells expire at the source's
instant and a later replay does not extend their life (with the log's original TTL every replay
would win the tie on expiry and live longer). A change whose TTL has already run out is written
as what its cells now are: tombstones at its timestamp (atomic columns null, collection elements
and UDT fields removed); an expired insert's row marker is written with a 1-second TTL at its
timestamp (CQL cannot write a dead marker, but the expiring one still shadows older markers).

Non-frozen lists (approximation): a list element's path is a timeuuid minted by the coordinator
(ringflow: the write time with random low bits), and CQL can neither write an element under a
given path nor remove one by path. So a list overwrite is replayed as ``l = [...]`` and added
elements as ``l = l + [...]`` (in path order, at the original timestamp, so appends of different
writes keep their order); removals by path (``cdc$deleted_elements_l``) are not expressible and
are skipped and counted (:attr:`HubCql.skipped_list_removals`). Replaying a list delta twice
appends its elements twice. Tables whose lists must replicate exactly should use frozen lists.

Statement texts are cached per shape (operation, columns and what is done to each), so the sink
prepares each shape once per session.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ringflow.cdc import CdcOperation
from ringflow.cql import quote_name
from ringflow.pipeline._changes import (
    IMAGE_OPERATIONS,
    RANGE_END_OPERATIONS,
    RANGE_START_OPERATIONS,
    Change,
    clustering_prefix,
    validate_change,
)
from ringflow.pipeline._errors import InvalidChange
from ringflow.pipeline._materialize import US_PER_SECOND
from ringflow.pipeline._spark_types import cql_sort_key
from ringflow.schema import (
    TIMEUUID,
    ClusteringOrder,
    Column,
    CqlType,
    Duration,
    ListType,
    MapType,
    NativeType,
    SetType,
    Table,
    TupleType,
    UserType,
)

_FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">="}


@dataclass(frozen=True, slots=True)
class HubStatement:
    """One CQL statement with ``?`` markers and the values bound to them, in order."""

    cql: str
    values: tuple[object, ...]


# --- values for the driver ----------------------------------------------------------------------


def driver_value(cql_type: CqlType, value: object) -> object:
    """A codec value (as :func:`~ringflow.pipeline.from_spark_value` gives) in the form the
    Python driver serializes: UDTs as tuples in field order, durations as the driver's,
    inet addresses as text; collections converted element-wise."""
    if value is None:
        return None
    if isinstance(cql_type, NativeType):
        return _native_driver_value(cql_type.name, value)
    if isinstance(cql_type, ListType):
        return [driver_value(cql_type.element, item) for item in _items(value)]
    if isinstance(cql_type, SetType):
        return {_hashable(driver_value(cql_type.element, item)) for item in _items(value)}
    if isinstance(cql_type, MapType):
        pairs = value.items() if isinstance(value, Mapping) else _items(value)
        return {
            _hashable(driver_value(cql_type.key, k)): driver_value(cql_type.value, v)
            for k, v in pairs
        }
    if isinstance(cql_type, TupleType):
        items = list(_items(value))
        return tuple(driver_value(t, v) for t, v in zip(cql_type.elements, items, strict=False))
    if isinstance(cql_type, UserType):
        fields = (
            value
            if isinstance(value, Mapping)
            else dict(zip(cql_type.field_names, _items(value), strict=False))
        )
        return tuple(
            driver_value(t, fields.get(n))
            for n, t in zip(cql_type.field_names, cql_type.field_types, strict=True)
        )
    raise InvalidChange(f"no driver value for CQL type {cql_type.cql_name()}")


def _items(value: object) -> Iterable[Any]:
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return value
    raise InvalidChange(f"expected a collection value, got {value!r}")


def _hashable(value: object) -> object:
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, dict):
        return tuple(value.items())
    if isinstance(value, set):
        return frozenset(value)
    return value


def _native_driver_value(name: str, value: object) -> object:
    if name == "duration" and isinstance(value, Duration):
        from cassandra.util import Duration as DriverDuration

        return DriverDuration(value.months, value.days, value.nanoseconds)
    if name == "inet" and isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    return value


# --- statements ---------------------------------------------------------------------------------


class HubCql:
    """Builds the statements of changes of ``table`` against ``keyspace.target`` on the hub."""

    def __init__(self, table: Table, keyspace: str, target: str) -> None:
        self.table = table
        self.name = f"{quote_name(keyspace)}.{quote_name(target)}"
        self.skipped_list_removals = 0
        self._texts: dict[tuple[object, ...], str] = {}

    def _text(self, shape: tuple[object, ...], build: Any) -> str:
        found = self._texts.get(shape)
        if found is None:
            found = self._texts[shape] = build()
        return found

    @property
    def shapes(self) -> int:
        """How many distinct statement texts were built (each is prepared once)."""
        return len(self._texts)

    def statements(
        self, change: Change, now_s: int, *, checked: bool = False
    ) -> list[HubStatement]:
        """The statements of one change (not a range bound: see :meth:`range_delete`);
        ``checked``: the caller validated ``change`` against the table already."""
        if not checked:
            validate_change(self.table, change)
        operation = change.operation
        if operation in IMAGE_OPERATIONS:
            return []
        if operation in RANGE_START_OPERATIONS or operation in RANGE_END_OPERATIONS:
            raise InvalidChange(f"range bound {operation.name} must be paired: use range_delete")
        if operation is CdcOperation.PARTITION_DELETE:
            return [self._delete(change, self.table.partition_key_columns)]
        if operation is CdcOperation.ROW_DELETE:
            return [self._delete(change, self.table.primary_key_columns)]
        ttl = _remaining_ttl(change, now_s)
        if ttl is not None and ttl <= 0:
            return self._expired(change)
        if change.operation is CdcOperation.INSERT:
            return self._insert(change, ttl or 0)
        update = self._update(change, ttl or 0, self._assignments(change))
        return [] if update is None else [update]

    def _key_columns(self, change: Change) -> tuple[Column, ...]:
        if self.table.clustering_columns and not clustering_prefix(self.table, change):
            return self.table.partition_key_columns
        return self.table.primary_key_columns

    def _where(self, columns: Sequence[Column]) -> str:
        return " AND ".join(f"{quote_name(c.name)} = ?" for c in columns)

    def _key_values(self, change: Change, columns: Sequence[Column]) -> tuple[object, ...]:
        return tuple(driver_value(c.type, change.key[c.name]) for c in columns)

    def _delete(self, change: Change, columns: Sequence[Column]) -> HubStatement:
        names = tuple(c.name for c in columns)
        text = self._text(
            ("delete", names),
            lambda: f"DELETE FROM {self.name} USING TIMESTAMP ? WHERE {self._where(columns)}",
        )
        return HubStatement(text, (change.time_us, *self._key_values(change, columns)))

    def _expired(self, change: Change) -> list[HubStatement]:
        """A change whose TTL ran out before replication: its cells as tombstones and, for an
        insert, its row marker as one that expires a second from now. CQL cannot write a dead
        marker, but an expiring one at the same timestamp still supersedes every older live
        marker, so an older insert cannot keep the row alive on the hub."""
        tombstones = expired_as_tombstones(self.table, change)
        update = self._update(tombstones, 0, self._assignments(tombstones))
        statements = [] if update is None else [update]
        if change.operation is CdcOperation.INSERT:
            marker_only = replace(change, values={}, deleted=frozenset(), deleted_elements={})
            statements.extend(self._insert(marker_only, _EXPIRED_MARKER_TTL_S))
        return statements

    def _insert(self, change: Change, ttl: int) -> list[HubStatement]:
        key_columns = self.table.primary_key_columns
        assignments = self._assignments(change)
        whole = [(name, value) for name, kind, value in assignments if kind == "set"]
        names = tuple(c.name for c in key_columns) + tuple(n for n, _ in whole)
        text = self._text(
            ("insert", names),
            lambda: (
                f"INSERT INTO {self.name} ({', '.join(quote_name(n) for n in names)}) "
                f"VALUES ({', '.join('?' for _ in names)}) USING TIMESTAMP ? AND TTL ?"
            ),
        )
        values = (*self._key_values(change, key_columns), *(v for _, v in whole))
        insert = HubStatement(text, (*values, change.time_us, ttl))
        rest = [a for a in assignments if a[1] != "set"]
        update = self._update(change, ttl, rest) if rest else None
        return [insert] if update is None else [insert, update]

    def _update(
        self, change: Change, ttl: int, assignments: Sequence[tuple[str, str, object]]
    ) -> HubStatement | None:
        if not assignments:
            return None
        key_columns = self._key_columns(change)
        shape = ("update", tuple(c.name for c in key_columns), tuple(a[:2] for a in assignments))
        text = self._text(
            shape,
            lambda: (
                f"UPDATE {self.name} USING TIMESTAMP ? AND TTL ? SET "
                + ", ".join(_assignment_text(name, kind) for name, kind, _ in assignments)
                + f" WHERE {self._where(key_columns)}"
            ),
        )
        values = (change.time_us, ttl, *(v for _, _, v in assignments))
        return HubStatement(text, (*values, *self._key_values(change, key_columns)))

    def _assignments(self, change: Change) -> list[tuple[str, str, object]]:
        """(column, kind, bound value) per touched column, in table order. Kinds: ``set``
        (``c = ?``), ``add`` (``c = c + ?``), ``remove`` (``c = c - ?``), ``field:<f>``
        (``c.f = ?``)."""
        touched = set(change.values) | change.deleted | set(change.deleted_elements)
        result: list[tuple[str, str, object]] = []
        for column in self.table.static_columns + self.table.regular_columns:
            if column.name not in touched:
                continue
            if not column.type.is_multicell:
                value = None if column.name in change.deleted else change.values.get(column.name)
                result.append((column.name, "set", driver_value(column.type, value)))
            elif isinstance(column.type, UserType):
                result += _udt_assignments(column, change)
            else:
                result += self._collection_assignments(column, change)
        return result

    def _collection_assignments(
        self, column: Column, change: Change
    ) -> list[tuple[str, str, object]]:
        base = column.type
        added = _collection_delta(base, change.values.get(column.name))
        if column.name in change.deleted:
            return [(column.name, "set", added)]
        result: list[tuple[str, str, object]] = []
        if added is not None:
            result.append((column.name, "add", added))
        removed = change.deleted_elements.get(column.name)
        if removed and isinstance(base, ListType):
            self.skipped_list_removals += len(removed)
        elif removed and isinstance(base, SetType | MapType):
            key_type = base.element if isinstance(base, SetType) else base.key
            keys = {_hashable(driver_value(key_type, k)) for k in removed}
            result.append((column.name, "remove", keys))
        return result

    def range_delete(self, start: Change, end: Change) -> list[HubStatement]:
        """The DELETE statements (one or a few slices) of a paired range delete."""
        for bound in (start, end):
            validate_change(self.table, bound)
        s_prefix, e_prefix = (
            clustering_prefix(self.table, start),
            clustering_prefix(self.table, end),
        )
        s_incl = start.operation is CdcOperation.RANGE_DELETE_START_INCLUSIVE or not s_prefix
        e_incl = end.operation is CdcOperation.RANGE_DELETE_END_INCLUSIVE or not e_prefix
        slices = range_slices(s_prefix, s_incl, e_prefix, e_incl)
        partition = self.table.partition_key_columns
        key_values = self._key_values(start, partition)
        clustering = self.table.clustering_columns
        result = []
        for equal, column_slice in slices:
            columns = clustering[: len(equal)]
            conditions = [f"{quote_name(c.name)} = ?" for c in columns]
            values = [driver_value(c.type, v) for c, v in zip(columns, equal, strict=True)]
            if column_slice is not None:
                column = clustering[len(equal)]
                for op, value in column_slice:
                    cql_op = _FLIP[op] if column.order is ClusteringOrder.DESC else op
                    conditions.append(f"{quote_name(column.name)} {cql_op} ?")
                    values.append(driver_value(column.type, value))
            where = " AND ".join([self._where(partition), *conditions])
            text = self._text(
                ("range", where),
                lambda w=where: f"DELETE FROM {self.name} USING TIMESTAMP ? WHERE {w}",
            )
            result.append(HubStatement(text, (start.time_us, *key_values, *values)))
        return result


def _assignment_text(name: str, kind: str) -> str:
    quoted = quote_name(name)
    if kind == "add":
        return f"{quoted} = {quoted} + ?"
    if kind == "remove":
        return f"{quoted} = {quoted} - ?"
    if kind.startswith("field:"):
        return f"{quoted}.{quote_name(kind[6:])} = ?"
    return f"{quoted} = ?"


def _collection_delta(base: CqlType, value: object) -> object:
    """The added elements of a set, map or list delta as a driver value (None if none)."""
    if value is None:
        return None
    if isinstance(base, ListType):
        paths: Mapping[Any, Any] = value if isinstance(value, Mapping) else dict(_items(value))
        ordered = sorted(paths.items(), key=lambda pair: cql_sort_key(TIMEUUID, pair[0]))
        return [driver_value(base.element, item) for _, item in ordered]
    return driver_value(base.frozen_form(), value)


def _udt_assignments(column: Column, change: Change) -> list[tuple[str, str, object]]:
    base = column.type
    assert isinstance(base, UserType)
    value = change.values.get(column.name)
    fields: Mapping[str, object] = (
        value
        if isinstance(value, Mapping)
        else dict(zip(base.field_names, _items(value or ()), strict=False))
    )
    if column.name in change.deleted:
        whole = None if value is None else driver_value(base.frozen_form(), fields)
        return [(column.name, "set", whole)]
    result: list[tuple[str, str, object]] = []
    removed = {int(str(index)) for index in change.deleted_elements.get(column.name, ())}
    for index, (name, field_type) in enumerate(
        zip(base.field_names, base.field_types, strict=True)
    ):
        if fields.get(name) is not None:
            result.append((column.name, f"field:{name}", driver_value(field_type, fields[name])))
        elif index in removed:
            result.append((column.name, f"field:{name}", None))
    return result


_EXPIRED_MARKER_TTL_S = 1


def _remaining_ttl(change: Change, now_s: int) -> int | None:
    if not change.ttl_s:
        return None
    return change.time_us // US_PER_SECOND + change.ttl_s - now_s


def expired_as_tombstones(table: Table, change: Change) -> Change:
    """An expired TTL'd insert or update as the update of tombstones it has become: atomic
    values deleted, collection elements and UDT fields removed, no row marker, no TTL."""
    deleted = set(change.deleted)
    removed = {name: set(paths) for name, paths in change.deleted_elements.items()}
    for name, value in change.values.items():
        base = table.column(name).type
        if not base.is_multicell:
            deleted.add(name)
        elif isinstance(base, UserType):
            fields = (
                value
                if isinstance(value, Mapping)
                else dict(zip(base.field_names, _items(value), strict=False))
            )
            indices = {i for i, n in enumerate(base.field_names) if fields.get(n) is not None}
            removed.setdefault(name, set()).update(indices)
        elif isinstance(base, SetType):
            removed.setdefault(name, set()).update(_items(value))
        elif isinstance(base, MapType | ListType):
            paths = value if isinstance(value, Mapping) else dict(_items(value))
            removed.setdefault(name, set()).update(paths)
    return replace(
        change,
        operation=CdcOperation.UPDATE,
        values={},
        deleted=frozenset(deleted),
        deleted_elements={n: frozenset(p) for n, p in removed.items()},
        ttl_s=None,
    )


# --- range deletes ------------------------------------------------------------------------------

Slice = tuple[tuple[object, ...], tuple[tuple[str, object], ...] | None]
"""(equal prefix, clustering-order conditions on the next column or None)."""


def range_slices(
    start: Sequence[object], start_inclusive: bool, end: Sequence[object], end_inclusive: bool
) -> list[Slice]:
    """The single-column slices (in clustering order) whose union is the range from ``start``
    to ``end`` (clustering prefixes; an empty prefix is unbounded). Empty for an empty range;
    InvalidChange for a range unbounded on both sides (it would be a partition delete)."""
    common = 0
    while common < min(len(start), len(end)) and start[common] == end[common]:
        common += 1
    if not start and not end:
        raise InvalidChange("a range delete unbounded on both sides cannot be replayed in CQL")
    if common == len(start) == len(end):
        return [(tuple(start), None)] if start_inclusive and end_inclusive else []
    if (common == len(start) and not start_inclusive) or (common == len(end) and not end_inclusive):
        return []  # after (before) all rows of a prefix the other bound lies within
    if common == len(start):
        return _upper_slices(end, end_inclusive, common)
    if common == len(end):
        return _lower_slices(start, start_inclusive, common)
    middle: list[tuple[str, object]] = []
    middle.append((">=" if start_inclusive and len(start) == common + 1 else ">", start[common]))
    middle.append(("<=" if end_inclusive and len(end) == common + 1 else "<", end[common]))
    slices: list[Slice] = [(tuple(start[:common]), tuple(middle))]
    slices += _lower_slices(start, start_inclusive, common + 1)
    slices += _upper_slices(end, end_inclusive, common + 1)
    return slices


def _lower_slices(bound: Sequence[object], inclusive: bool, depth: int) -> list[Slice]:
    """Rows with the prefix ``bound[:depth]`` at or after (``inclusive``) ``bound``."""
    last = len(bound) - 1
    return [
        (tuple(bound[:j]), ((">=" if inclusive and j == last else ">", bound[j]),))
        for j in range(depth, len(bound))
    ]


def _upper_slices(bound: Sequence[object], inclusive: bool, depth: int) -> list[Slice]:
    """Rows with the prefix ``bound[:depth]`` before or at (``inclusive``) ``bound``."""
    last = len(bound) - 1
    return [
        (tuple(bound[:j]), (("<=" if inclusive and j == last else "<", bound[j]),))
        for j in range(depth, len(bound))
    ]


def range_bound_order(change: Change) -> tuple[bytes, int, bytes, int]:
    """The log order of a bound within a task: stream, time, batch_seq_no."""
    return (change.stream_id, change.time_us, change.time.bytes, change.batch_seq_no)


def pair_range_bounds(
    table: Table, bounds: Iterable[Change]
) -> tuple[list[tuple[Change, Change]], list[Change]]:
    """Pair start and end bounds (same stream, time, partition; consecutive batch_seq_no),
    duplicates dropped; returns the pairs and the bounds left without a partner."""
    partition = [c.name for c in table.partition_key_columns]
    unique = {(b.stream_id, b.time.bytes, b.batch_seq_no, b.operation): b for b in bounds}
    ordered = sorted(unique.values(), key=range_bound_order)
    pairs: list[tuple[Change, Change]] = []
    alone: list[Change] = []
    index = 0
    while index < len(ordered):
        first = ordered[index]
        second = ordered[index + 1] if index + 1 < len(ordered) else None
        if (
            second is not None
            and first.operation in RANGE_START_OPERATIONS
            and second.operation in RANGE_END_OPERATIONS
            and (first.stream_id, first.time) == (second.stream_id, second.time)
            and all(first.key.get(n) == second.key.get(n) for n in partition)
            and second.batch_seq_no == first.batch_seq_no + 1
        ):
            pairs.append((first, second))
            index += 2
        else:
            alone.append(first)
            index += 1
    return pairs, alone
