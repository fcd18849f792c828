"""INSERT, UPDATE and DELETE to mutations: keys, timestamps, TTLs, cells and tombstones.

Rules (Cassandra ``cql3/statements/ModificationStatement.java``, ``UpdateParameters``,
``Operation``/``Lists``/``Sets``/``Maps``/``UserTypes``; cassandra-core.md §6; re-expressed):

* timestamp: ``USING TIMESTAMP``, else the protocol's default timestamp, else the coordinator's
  monotonic clock; TTL: ``USING TTL`` (0..20 years, 0 = none), else the table's
  ``default_time_to_live``; unset values leave them at their defaults;
* INSERT writes the row marker (primary-key liveness) and one cell per value; UPDATE writes cells
  only; an unset value (-2) writes nothing for its column; null writes a tombstone;
* setting a non-frozen collection replaces it: a collection tombstone at ``timestamp - 1`` plus
  the new elements at ``timestamp``; appends, puts and removals touch only their elements;
  list appends and prepends mint timeuuid paths (``ListPaths``: appends at the write time,
  prepends mirrored before 2010-01-01 as Cassandra's ``PrecisionTime`` does, so they sort first);
  list index operations and ``l - [..]`` read the current list (read-before-write);
* DELETE of whole rows: no clustering restriction = partition deletion; every clustering column
  fixed = row deletions; a prefix or a slice = range tombstones; DELETE of columns needs the
  full primary key (or only static columns);
* keys must be complete (Cassandra's messages name the missing parts), WHERE may only restrict
  primary key columns, ``token()`` and conditions (LWT) are refused.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ringflow.cql._ast import (
    AddTo,
    Assignment,
    DeleteColumn,
    DeleteElement,
    DeleteField,
    DeleteStatement,
    DeleteTarget,
    InsertStatement,
    Operator,
    Prepend,
    RemoveFrom,
    SetElement,
    SetField,
    SetValue,
    Term,
    UpdateStatement,
    UsingClause,
)
from ringflow.cql._exec_common import ExecutorLimits, StatementContext
from ringflow.cql._exec_terms import required_bytes, term_bytes, term_value
from ringflow.cql._exec_where import Key, Restrictions, analyze_where
from ringflow.cql._json_input import MISSING, Missing, insert_json_values
from ringflow.cql._wire import UNSET, Unset
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    BIGINT,
    INT,
    MAX_TTL_SECONDS,
    TEXT,
    Cell,
    Column,
    ColumnData,
    ColumnKind,
    ComplexColumn,
    CqlType,
    DeletionTime,
    ListType,
    LivenessInfo,
    MapType,
    Mutation,
    RangeTombstone,
    Row,
    SetType,
    Table,
    UserType,
    cells_from_collection_value,
    covering_deletions,
    encode_clustering,
    list_values,
    reconcile_cells,
    shadow_row,
    timeuuid_from_micros,
)

_FIELD_INDEX = struct.Struct(">H")
MAX_KEY_COMPONENT_BYTES = 65535
NO_TIMESTAMP = -(2**63)
"""Long.MIN_VALUE: Cassandra's ``LivenessInfo.NO_TIMESTAMP``, never a write's timestamp."""
_REFERENCE_TIME_US = 1_262_304_000_000_000  # 2010-01-01T00:00:00Z, Cassandra's PrecisionTime base

ListReader = Callable[[Table, Key, Key, str], list[Cell]]
"""The live element cells of a list column of one row, in path order (read-before-write)."""


@dataclass(frozen=True, slots=True)
class WriteParameters:
    timestamp_us: int
    ttl_s: int
    now_s: int

    def cell(self, value: bytes | None, path: bytes | None = None) -> Cell:
        if value is None:
            return Cell.tombstone(self.timestamp_us, self.now_s, path)
        if self.ttl_s:
            return Cell.expiring(self.timestamp_us, self.ttl_s, self.now_s, value, path)
        return Cell.live(self.timestamp_us, value, path)

    def liveness(self) -> LivenessInfo:
        if self.ttl_s:
            return LivenessInfo(self.timestamp_us, self.ttl_s, self.now_s + self.ttl_s)
        return LivenessInfo(self.timestamp_us)

    def deletion(self, shift_us: int = 0) -> DeletionTime:
        return DeletionTime(self.timestamp_us - shift_us, self.now_s)


@dataclass(slots=True)
class ListPaths:
    """Mints the timeuuid paths of list elements, strictly increasing per processor."""

    rng: random.Random
    last_append_us: int = -(2**63)
    last_prepend_us: int = 2**63

    def append(self, timestamp_us: int, count: int) -> list[bytes]:
        start = max(timestamp_us, self.last_append_us + 1)
        self.last_append_us = start + count - 1
        return [self._path(start + i) for i in range(count)]

    def prepend(self, timestamp_us: int, count: int) -> list[bytes]:
        mirrored = 2 * _REFERENCE_TIME_US - timestamp_us
        end = min(mirrored, self.last_prepend_us - 1)
        start = end - count + 1
        self.last_prepend_us = start
        return [self._path(start + i) for i in range(count)]

    def _path(self, micros: int) -> bytes:
        try:
            return timeuuid_from_micros(micros, self.rng.getrandbits(64)).bytes
        except ValueError as error:
            raise InvalidRequest(f"cannot mint a list element path: {error}") from None


@dataclass(slots=True)
class WriteContext:
    """What building a modification needs besides the statement."""

    statement: StatementContext
    limits: ExecutorLimits
    default_timestamp: Callable[[], int]
    list_paths: ListPaths
    read_list: ListReader


def write_parameters(using: UsingClause, table: Table, context: WriteContext) -> WriteParameters:
    statement = context.statement
    timestamp = None
    if using.timestamp is not None:
        timestamp = term_value(using.timestamp, BIGINT, "[timestamp]", statement)
        if timestamp is None:
            raise InvalidRequest("Invalid null value of timestamp")
    if timestamp is UNSET or timestamp is None:
        timestamp = context.default_timestamp()
    if timestamp == NO_TIMESTAMP:
        raise InvalidRequest(
            f"Invalid timestamp value: {timestamp} (Long.MIN_VALUE is reserved for no timestamp)"
        )
    ttl = None
    if using.ttl is not None:
        ttl = term_value(using.ttl, INT, "[ttl]", statement)
        if ttl is None:
            raise InvalidRequest("Invalid null value of TTL")
    if ttl is UNSET or ttl is None:
        ttl = table.options.default_time_to_live_s
    assert isinstance(timestamp, int) and isinstance(ttl, int)
    if ttl < 0:
        raise InvalidRequest(f"A TTL must be greater or equal to 0, but was {ttl}")
    if ttl > MAX_TTL_SECONDS:
        raise InvalidRequest(f"ttl is too large. requested ({ttl}) maximum ({MAX_TTL_SECONDS})")
    return WriteParameters(timestamp, ttl, statement.now_s)


# --- rows under construction ---------------------------------------------------------------------


@dataclass(slots=True)
class _RowWrites:
    liveness: LivenessInfo | None = None
    deletion: DeletionTime | None = None
    cells: dict[str, ColumnData] = field(default_factory=dict)

    def put(self, column: Column, data: ColumnData) -> None:
        prior = self.cells.get(column.name)
        if prior is None:
            self.cells[column.name] = data
        elif isinstance(prior, ComplexColumn) and isinstance(data, ComplexColumn):
            deletion = prior.deletion
            if data.deletion is not None and (
                deletion is None or data.deletion.supersedes(deletion)
            ):
                deletion = data.deletion
            # Two operations on one element in one statement (``SET m[2] = 9, m[2] = 6``)
            # write two cells with one timestamp: they reconcile as any two versions do
            # (the tombstone, else the greater value), whatever their order in the statement.
            by_path: dict[bytes | None, Cell] = {}
            for cell in (*prior.cells, *data.cells):
                seen = by_path.get(cell.path)
                by_path[cell.path] = cell if seen is None else reconcile_cells(seen, cell)
            cells = tuple(by_path[path] for path in sorted(by_path, key=lambda p: p or b""))
            self.cells[column.name] = ComplexColumn(cells, deletion)
        else:
            raise InvalidRequest(f"Multiple definitions found for column {column.name}")


@dataclass(slots=True)
class _PartitionWrites:
    table: Table
    key: Key
    deletion: DeletionTime | None = None
    static: _RowWrites | None = None
    rows: dict[Key, _RowWrites] = field(default_factory=dict)
    ranges: list[RangeTombstone] = field(default_factory=list)

    def row(self, clustering: Key) -> _RowWrites:
        for component in clustering:
            if len(component) > MAX_KEY_COMPONENT_BYTES:  # Cassandra's [short] length limit
                raise InvalidRequest(
                    f"Key length of {len(component)} is longer than maximum of "
                    f"{MAX_KEY_COMPONENT_BYTES}"
                )
        return self.rows.setdefault(clustering, _RowWrites())

    def static_row(self) -> _RowWrites:
        if self.static is None:
            self.static = _RowWrites()
        return self.static

    def mutation(self) -> Mutation:
        types = tuple((c.type, c.order) for c in self.table.clustering_columns)
        rows = tuple(
            Row(clustering, writes.liveness, writes.deletion, writes.cells)
            for clustering, writes in sorted(
                self.rows.items(), key=lambda item: encode_clustering(types, item[0])
            )
        )
        static = None
        if self.static is not None and self.static.cells:
            static = Row((), None, None, self.static.cells)
        return Mutation(
            self.table.keyspace,
            self.table.name,
            self.key,
            self.deletion,
            static,
            rows,
            tuple(self.ranges),
        )


# --- INSERT --------------------------------------------------------------------------------------


ValueSource = Callable[[Column], bytes | Unset | None]
"""Gives the serialized value an INSERT writes to a column (a VALUES term or a JSON value)."""


def insert_mutations(
    statement: InsertStatement, table: Table, context: WriteContext
) -> list[Mutation]:
    if statement.if_not_exists:
        raise InvalidRequest("Conditional inserts (IF NOT EXISTS) are not supported by ringflow")
    if statement.json is not None:
        assigned = _json_sources(statement, statement.json, table, context)
    else:
        assigned = _value_sources(statement, table, context)
    params = write_parameters(statement.using, table, context)
    key = _insert_key(assigned, "partition key part", table.partition_key_columns)
    values = [c for c in table.columns if not c.is_primary_key and c.name in assigned]
    static_only = bool(table.clustering_columns) and all(
        c.name not in assigned for c in table.clustering_columns
    )
    if static_only and any(c.kind is ColumnKind.REGULAR for c in values):
        static_only = False
    if static_only and not values:
        static_only = False
    writes = _PartitionWrites(table, key)
    if static_only:
        target = writes.static_row()
    else:
        clustering = _insert_key(assigned, "clustering key", table.clustering_columns)
        target = writes.row(clustering)
        target.liveness = params.liveness()
    for column in values:
        if column.kind is ColumnKind.STATIC and not static_only and table.clustering_columns:
            destination = writes.static_row()
        else:
            destination = target
        data = _set_bytes(column, assigned[column.name](column), params, context)
        if data is not None:
            destination.put(column, data)
    return [writes.mutation()]


def _value_sources(
    statement: InsertStatement, table: Table, context: WriteContext
) -> dict[str, ValueSource]:
    if len(statement.columns) != len(statement.values):
        raise InvalidRequest("Unmatched column names/values")
    assigned: dict[str, ValueSource] = {}
    for name, value in zip(statement.columns, statement.values, strict=True):
        table.column(name)
        if name in assigned:
            raise InvalidRequest(f"Multiple definitions found for column {name}")
        assigned[name] = _term_source(value, table, context)
    return assigned


def _term_source(term: Term, table: Table, context: WriteContext) -> ValueSource:
    return lambda column: term_bytes(term, column.type, column.name, context.statement, table)


def _json_sources(
    statement: InsertStatement, json: Term, table: Table, context: WriteContext
) -> dict[str, ValueSource]:
    """Cassandra's ``Json.Prepared``: every column gets the object's value; a missing one is
    null (``DEFAULT NULL``) or unset (``DEFAULT UNSET``: left out, and Invalid for a key)."""
    text = term_value(json, TEXT, "[json]", context.statement)
    if text is None:
        raise InvalidRequest("Got null for INSERT JSON values")
    if text is UNSET:
        raise InvalidRequest("Got unset for INSERT JSON values")
    assert isinstance(text, str)
    assigned: dict[str, ValueSource] = {}
    for name, value in insert_json_values(text, table).items():
        if value is MISSING and statement.json_default_unset:
            if table.column(name).is_primary_key:
                raise InvalidRequest(f"Invalid unset value for column {name}")
            continue
        assigned[name] = _fixed_source(None if isinstance(value, Missing) else value)
    return assigned


def _fixed_source(value: bytes | None) -> ValueSource:
    return lambda column: value


def _insert_key(
    assigned: dict[str, ValueSource],
    what: str,
    columns: Sequence[Column],
) -> Key:
    missing = [c.name for c in columns if c.name not in assigned]
    if missing:
        label = "partition key parts" if what == "partition key part" else "clustering keys"
        raise InvalidRequest(f"Some {label} are missing: {', '.join(missing)}")
    parts = []
    for column in columns:
        value = assigned[column.name](column)
        if value is None:
            raise InvalidRequest(f"Invalid null value for {what} {column.name}")
        if value is UNSET:
            raise InvalidRequest(f"Invalid unset value for column {column.name}")
        assert isinstance(value, bytes)
        if not value and what == "partition key part":
            raise InvalidRequest("Key may not be empty")
        parts.append(value)
    return tuple(parts)


# --- values and collections ----------------------------------------------------------------------


def _set_value(
    column: Column, term: Term, params: WriteParameters, context: WriteContext
) -> ColumnData | None:
    value = term_bytes(term, column.type, column.name, context.statement)
    return _set_bytes(column, value, params, context)


def _set_bytes(
    column: Column, value: bytes | Unset | None, params: WriteParameters, context: WriteContext
) -> ColumnData | None:
    if value is UNSET:
        return None
    assert value is None or isinstance(value, bytes)
    if not column.type.is_multicell:
        return params.cell(value)
    overwrite = params.deletion(shift_us=1)
    if value is None:
        return ComplexColumn((), overwrite)
    return ComplexColumn(_element_cells(column, value, params, context, append=True), overwrite)


def _element_cells(
    column: Column, value: bytes, params: WriteParameters, context: WriteContext, *, append: bool
) -> tuple[Cell, ...]:
    cql_type = column.type
    if isinstance(cql_type, ListType):
        elements = list_values(cql_type, value, column.name)
        minted = context.list_paths.append if append else context.list_paths.prepend
        paths = minted(params.timestamp_us, len(elements))
        return tuple(params.cell(v, p) for p, v in zip(paths, elements, strict=True))
    pairs = cells_from_collection_value(cql_type, value, column.name)
    return tuple(params.cell(v, p) for p, v in pairs)


# --- UPDATE --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Target:
    """Where an assignment writes: the row (or static row) of one partition."""

    table: Table
    key: Key
    clustering: Key


def _modification_keys(table: Table, restrictions: Restrictions, *, what: str) -> tuple[Key, ...]:
    if restrictions.token_range is not None:
        raise InvalidRequest(
            f"The token function cannot be used in WHERE clauses for {what} statements"
        )
    for row_filter in restrictions.filters:
        column = row_filter.columns[0]
        if column.kind in (ColumnKind.REGULAR, ColumnKind.STATIC):
            raise InvalidRequest(f"Non PRIMARY KEY columns found in where clause: {column.name}")
        if row_filter.operator is Operator.NOT_IN and column.kind is ColumnKind.CLUSTERING:
            # a modification names its rows; a row that is not there is not "all but these"
            raise InvalidRequest(
                f"NOT IN restrictions are not supported on the clustering columns in {what} "
                "statements"
            )
    if restrictions.partition_keys is None:
        restricted = {f.columns[0].name for f in restrictions.filters}
        missing = [c.name for c in table.partition_key_columns if c.name not in restricted]
        if missing:
            raise InvalidRequest(f"Some partition key parts are missing: {', '.join(missing)}")
        raise InvalidRequest(
            "Only EQ and IN relation are supported on the partition key (unless you use the "
            "token() function)"
        )
    if any(not part for key in restrictions.partition_keys for part in key):
        raise InvalidRequest("Key may not be empty")
    if restrictions.needs_filtering:
        first = restrictions.filters[0].columns[0]
        raise InvalidRequest(
            f'PRIMARY KEY column "{first.name}" cannot be restricted as preceding columns are '
            "not restricted by an equality"
        )
    return restrictions.partition_keys


def update_mutations(
    statement: UpdateStatement, table: Table, context: WriteContext
) -> list[Mutation]:
    if statement.if_exists or statement.conditions:
        raise InvalidRequest("Conditional updates (IF ...) are not supported by ringflow")
    params = write_parameters(statement.using, table, context)
    restrictions = analyze_where(table, statement.where, context.statement, context.limits)
    keys = _modification_keys(table, restrictions, what="UPDATE")
    columns = [table.column(a.column) for a in statement.assignments]
    for column in columns:
        if column.is_primary_key:
            raise InvalidRequest(f"PRIMARY KEY part {column.name} found in SET part")
    static_only = bool(table.clustering_columns) and all(
        c.kind is ColumnKind.STATIC for c in columns
    )
    clusterings = _row_clusterings(table, restrictions, static_only, "UPDATE")
    mutations = []
    for key in keys:
        writes = _PartitionWrites(table, key)
        for clustering in clusterings:
            for assignment, column in zip(statement.assignments, columns, strict=True):
                row = (
                    writes.static_row()
                    if column.kind is ColumnKind.STATIC
                    else writes.row(clustering)
                )
                target = _Target(table, key, clustering)
                data = _assign(assignment, column, target, params, context)
                if data is not None:
                    row.put(column, data)
        mutation = writes.mutation()
        if any(row.cells for row in mutation.rows) or mutation.static_row is not None:
            mutations.append(mutation)
    return mutations


def _row_clusterings(
    table: Table, restrictions: Restrictions, static_only: bool, what: str
) -> tuple[Key, ...]:
    if not table.clustering_columns:
        return ((),)
    if static_only and not restrictions.clustering_restricted:
        return ((),)
    full = restrictions.full_clusterings(table)
    if full is None:
        if restrictions.slice_columns:
            raise InvalidRequest(
                f"Slice restrictions are not supported on the clustering columns in {what} "
                "statements"
            )
        restricted = max((len(p) for p in restrictions.clustering_prefixes), default=0)
        missing = [c.name for c in table.clustering_columns[restricted:]]
        raise InvalidRequest(f"Some clustering keys are missing: {', '.join(missing)}")
    return full


def _assign(
    assignment: Assignment,
    column: Column,
    target: _Target,
    params: WriteParameters,
    context: WriteContext,
) -> ColumnData | None:
    if isinstance(assignment, SetValue):
        return _set_value(column, assignment.value, params, context)
    if isinstance(assignment, SetElement):
        return _set_element(assignment, column, target, params, context)
    if isinstance(assignment, SetField):
        return _set_field(assignment, column, params, context)
    if not column.type.is_multicell:
        sign = "-" if isinstance(assignment, RemoveFrom) else "+"
        raise InvalidRequest(
            f"Invalid operation ({column.name} = {column.name} {sign} ?) for non counter column "
            f"{column.name}"
        )
    if isinstance(assignment, AddTo):
        return _add_to(assignment.value, column, params, context, append=True)
    if isinstance(assignment, Prepend):
        if not isinstance(column.type, ListType):
            raise InvalidRequest(f"Invalid operation (prepend) for non list column {column.name}")
        return _add_to(assignment.value, column, params, context, append=False)
    return _remove_from(assignment.value, column, target, params, context)


def _add_to(
    term: Term, column: Column, params: WriteParameters, context: WriteContext, *, append: bool
) -> ColumnData | None:
    if isinstance(column.type, UserType):
        raise InvalidRequest(f"Invalid operation (+) for user type column {column.name}")
    value = term_bytes(term, column.type, column.name, context.statement)
    if value is None or value is UNSET:
        return None
    assert isinstance(value, bytes)
    cells = _element_cells(column, value, params, context, append=append)
    return ComplexColumn(cells) if cells else None


def _remove_from(
    term: Term, column: Column, target: _Target, params: WriteParameters, context: WriteContext
) -> ColumnData | None:
    cql_type = column.type
    removed_type: CqlType = (
        SetType(cql_type.key, True) if isinstance(cql_type, MapType) else cql_type
    )
    if isinstance(cql_type, UserType):
        raise InvalidRequest(f"Invalid operation (-) for user type column {column.name}")
    value = term_bytes(term, removed_type, column.name, context.statement)
    if value is None or value is UNSET:
        return None
    assert isinstance(value, bytes)
    if isinstance(cql_type, ListType):
        doomed = set(list_values(cql_type, value, column.name))
        current = context.read_list(target.table, target.key, target.clustering, column.name)
        cells = tuple(params.cell(None, c.path) for c in current if c.value in doomed)
    else:
        pairs = cells_from_collection_value(removed_type, value, column.name)
        cells = tuple(params.cell(None, path) for path, _ in pairs)
    return ComplexColumn(cells) if cells else None


def _set_element(
    assignment: SetElement,
    column: Column,
    target: _Target,
    params: WriteParameters,
    context: WriteContext,
) -> ColumnData | None:
    cql_type = column.type
    statement = context.statement
    if isinstance(cql_type, MapType) and cql_type.is_multicell:
        key = required_bytes(assignment.key, cql_type.key, column.name, statement)
        value = term_bytes(assignment.value, cql_type.value, column.name, statement)
        if value is UNSET:
            return None
        assert value is None or isinstance(value, bytes)
        return ComplexColumn((params.cell(value, key),))
    if isinstance(cql_type, ListType) and cql_type.is_multicell:
        value = term_bytes(assignment.value, cql_type.element, column.name, statement)
        if value is UNSET:
            return None
        assert value is None or isinstance(value, bytes)
        path = _list_index_path(assignment.key, column, target, context)
        return ComplexColumn((params.cell(value, path),))
    raise InvalidRequest(
        f"Invalid operation ({column.name}[?] = ?) for non list/map column {column.name} of type "
        f"{cql_type.cql_name()}"
    )


def _list_index_path(key: Term, column: Column, target: _Target, context: WriteContext) -> bytes:
    index = term_value(key, INT, f"idx({column.name})", context.statement)
    if index is None or index is UNSET:
        raise InvalidRequest(f"Invalid null value for list index of {column.name}")
    assert isinstance(index, int)
    current = context.read_list(target.table, target.key, target.clustering, column.name)
    if not 0 <= index < len(current):
        raise InvalidRequest(f"List index {index} out of bound, list has size {len(current)}")
    path = current[index].path
    assert path is not None
    return path


def _field_path(column: Column, field_name: str) -> tuple[bytes, CqlType]:
    cql_type = column.type
    if not isinstance(cql_type, UserType):
        raise InvalidRequest(f"Invalid field access on non-UDT column {column.name}")
    if not cql_type.is_multicell:
        raise InvalidRequest(
            f"Invalid operation ({column.name}.{field_name}) for frozen UDT column {column.name}"
        )
    if field_name not in cql_type.field_names:
        raise InvalidRequest(f"UDT column {column.name} does not have a field named {field_name}")
    index = cql_type.field_names.index(field_name)
    return _FIELD_INDEX.pack(index), cql_type.field_types[index]


def _set_field(
    assignment: SetField, column: Column, params: WriteParameters, context: WriteContext
) -> ColumnData | None:
    path, field_type = _field_path(column, assignment.field)
    value = term_bytes(
        assignment.value, field_type, f"{column.name}.{assignment.field}", context.statement
    )
    if value is UNSET:
        return None
    assert value is None or isinstance(value, bytes)
    return ComplexColumn((params.cell(value, path),))


# --- DELETE --------------------------------------------------------------------------------------


def delete_mutations(
    statement: DeleteStatement, table: Table, context: WriteContext
) -> list[Mutation]:
    if statement.if_exists or statement.conditions:
        raise InvalidRequest("Conditional deletions (IF ...) are not supported by ringflow")
    if statement.using.ttl is not None:
        raise InvalidRequest("TTL attribute is not allowed for deletes")
    params = write_parameters(statement.using, table, context)
    restrictions = analyze_where(table, statement.where, context.statement, context.limits)
    keys = _modification_keys(table, restrictions, what="DELETE")
    mutations = []
    for key in keys:
        writes = _PartitionWrites(table, key)
        if statement.targets:
            _delete_columns(statement.targets, table, restrictions, writes, params, context)
        else:
            _delete_rows(table, restrictions, writes, params)
        mutations.append(writes.mutation())
    return mutations


def _delete_rows(
    table: Table, restrictions: Restrictions, writes: _PartitionWrites, params: WriteParameters
) -> None:
    if not table.clustering_columns or not restrictions.clustering_restricted:
        writes.deletion = params.deletion()
        return
    full = restrictions.full_clusterings(table)
    if full is not None:
        for clustering in full:
            writes.row(clustering).deletion = params.deletion()
        return
    for piece in restrictions.slices(table):
        writes.ranges.append(RangeTombstone(piece.start, piece.end, params.deletion()))


def _delete_columns(
    targets: Sequence[DeleteTarget],
    table: Table,
    restrictions: Restrictions,
    writes: _PartitionWrites,
    params: WriteParameters,
    context: WriteContext,
) -> None:
    columns = [table.column(target.column) for target in targets]
    for column in columns:
        if column.is_primary_key:
            raise InvalidRequest(
                f"Invalid identifier {column.name} for deletion (should not be a PRIMARY KEY part)"
            )
    static_only = bool(table.clustering_columns) and all(
        c.kind is ColumnKind.STATIC for c in columns
    )
    clusterings = _row_clusterings(table, restrictions, static_only, "DELETE")
    for clustering in clusterings:
        target_row = _Target(table, writes.key, clustering)
        for target, column in zip(targets, columns, strict=True):
            row = (
                writes.static_row() if column.kind is ColumnKind.STATIC else writes.row(clustering)
            )
            row.put(column, _delete_target(target, column, target_row, params, context))


def _delete_target(
    target: DeleteTarget,
    column: Column,
    row: _Target,
    params: WriteParameters,
    context: WriteContext,
) -> ColumnData:
    cql_type = column.type
    if isinstance(target, DeleteColumn):
        if cql_type.is_multicell:
            return ComplexColumn((), params.deletion())
        return params.cell(None)
    if isinstance(target, DeleteField):
        path, _ = _field_path(column, target.field)
        return ComplexColumn((params.cell(None, path),))
    assert isinstance(target, DeleteElement)
    # Cassandra's Operation.ElementDeletion: by index for a list, by element for a set, by key
    # for a map; refused for other columns with its messages.
    if not isinstance(cql_type, ListType | SetType | MapType):
        raise InvalidRequest(f"Invalid deletion operation for non collection column {column.name}")
    if not cql_type.is_multicell:
        raise InvalidRequest(
            f"Invalid deletion operation for frozen collection column {column.name}"
        )
    if isinstance(cql_type, ListType):
        path = _list_index_path(target.key, column, row, context)
    else:
        element = cql_type.key if isinstance(cql_type, MapType) else cql_type.element
        path = required_bytes(target.key, element, column.name, context.statement)
    return ComplexColumn((params.cell(None, path),))


# --- read-before-write ---------------------------------------------------------------------------


def live_list_cells(
    mutation: Mutation | None, table: Table, clustering: Key, column: str, now_s: int
) -> list[Cell]:
    """The live elements of list ``column`` of one row in the stored partition ``mutation``."""
    if mutation is None:
        return []
    is_static = table.column(column).kind is ColumnKind.STATIC
    if is_static:
        row = mutation.static_row
    else:
        row = next((r for r in mutation.rows if r.clustering == clustering), None)
    if row is None:
        return []
    deletions = [] if mutation.partition_deletion is None else [mutation.partition_deletion]
    if not is_static and mutation.range_tombstones:
        types = tuple((c.type, c.order) for c in table.clustering_columns)

        def compare(left: tuple[bytes, ...], right: tuple[bytes, ...]) -> int:
            a, b = encode_clustering(types, left), encode_clustering(types, right)
            return (a > b) - (a < b)

        deletions += covering_deletions(clustering, mutation.range_tombstones, compare)
    data = shadow_row(row, deletions).cells.get(column)
    if not isinstance(data, ComplexColumn):
        return []
    return [cell for cell in data.cells if cell.is_live(now_s)]
