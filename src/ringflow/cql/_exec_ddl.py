"""Schema statements: CREATE/ALTER/DROP KEYSPACE, TABLE and TYPE, TRUNCATE, as schema changes.

Each statement becomes a :class:`DdlOutcome`: the new ``SchemaState``, the tables the store must
register or drop, the keyspaces whose ``system_schema`` rows must be rewritten and the protocol
schema change(s) to announce. The processor applies it; nothing here touches the store.

Rules (Cassandra ``cql3/statements/schema/*``, Scylla ``cdc/log.cc`` for the log table,
re-expressed):

* Every keyspace, type and table change is a :class:`ringflow.schema.Migration` (TimeUUID
  versions from the coordinator's timestamps) applied to the state; the outcome carries the
  migrations so that the processor stores them with the ``system_schema`` rows.
* Keyspace and table options (``WITH ...``) are read and checked by ``_ddl_options``; the
  storage-engine properties are kept with the table and shown in ``system_schema.tables``,
  though the SQLite store has nothing they tune.
* ``cdc = {'enabled': true, ...}`` on CREATE or ALTER creates ``<table>_scylla_cdc_log``
  (``ringflow.cdc`` schema) in the same statement; later ADD/DROP/WITH on the base keep the log's
  columns in step while CDC is on (its properties stay as they are, as Scylla keeps them);
  disabling CDC keeps the log table (as Scylla); DROP TABLE drops the log too; a log table
  cannot be dropped directly while its base uses it; what ALTER may do to a log, and the
  tables that merely have a log's name, follow Scylla (``_cdc_log_rules``).
* ``ALTER TABLE ... RENAME a TO b [AND ...]`` renames primary key columns only, with Cassandra 4's
  messages ("Undefined column name a in table k.t", "Cannot rename non PRIMARY KEY column v",
  "Cannot rename column a to b in table 'k.t'; another column with that name already exists");
  on a CDC-enabled base the log follows as Scylla's ``create_log_schema`` makes it: the log's
  column of the old name is dropped (recorded in ``dropped_columns``, so log rows written before
  show null there) and one of the new name added.
* IF [NOT] EXISTS turns "already there"/"not there" into a Void result; system keyspaces are not
  user-modifiable (0x2100).
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ringflow.cdc import cdc_log_table
from ringflow.cql._ast import (
    AddColumns,
    AlterKeyspaceStatement,
    AlterTableProperties,
    AlterTableStatement,
    AlterTypeStatement,
    ColumnDefinition,
    CreateKeyspaceStatement,
    CreateTableStatement,
    CreateTypeStatement,
    DropColumns,
    DropKeyspaceStatement,
    DropTableStatement,
    DropTypeStatement,
    Properties,
    QualifiedName,
    RenameColumns,
    Statement,
    TruncateStatement,
    UnsupportedStatement,
    resolve_type,
)
from ringflow.cql._cdc_log_rules import cdc_log_base, check_log_alter, check_log_name_free
from ringflow.cql._ddl_options import keyspace_options, option_text, table_options
from ringflow.cql._exec_alter_type import altered_user_type, check_column_type, check_field_type
from ringflow.cql._exec_common import (
    RESERVED_KEYSPACES,
    TimestampSource,
    TypeAlreadyExists,
    refuse_local_writes,
    refuse_reserved_keyspace,
    require_keyspace,
)
from ringflow.cql._results import (
    Result,
    SchemaChange,
    SchemaChangeResult,
    SchemaChangeTarget,
    SchemaChangeType,
    VoidResult,
)
from ringflow.errors import ConfigurationError, InvalidRequest
from ringflow.schema import (
    NATIVE_TYPE_NAMES,
    AddColumn,
    AlterKeyspace,
    AlterTableOptions,
    AlterType,
    ClusteringOrder,
    Column,
    ColumnKind,
    CqlType,
    CreateKeyspace,
    CreateTable,
    CreateType,
    DropColumn,
    DropKeyspace,
    DropTable,
    DropType,
    Keyspace,
    ListType,
    MapType,
    Migration,
    RenameColumn,
    SchemaAlreadyExists,
    SchemaState,
    SetType,
    Table,
    TableOptions,
    TupleType,
    UserType,
)
from ringflow.schema import SchemaChange as Change


@dataclass(frozen=True, slots=True)
class DdlOutcome:
    """What a schema statement changed, for the processor to apply."""

    state: SchemaState
    response: Result
    changes: tuple[SchemaChange, ...] = ()
    register: tuple[Table, ...] = ()
    drop: tuple[tuple[str, str], ...] = ()
    keyspaces: frozenset[str] = frozenset()
    dropped_keyspaces: frozenset[str] = frozenset()
    truncate: tuple[Table, ...] = ()
    migrations: tuple[Migration, ...] = ()


@dataclass(slots=True)
class DdlContext:
    state: SchemaState
    session_keyspace: str | None
    timestamps: TimestampSource
    rng: random.Random
    datacenters: tuple[str, ...]
    migrated: list[Change] = field(default_factory=list)
    migrations: list[Migration] = field(default_factory=list)

    def migrate(self, change: Change) -> None:
        timestamp = self.timestamps.next()
        if isinstance(change, DropColumn):
            # system_schema.dropped_columns keeps milliseconds: a whole millisecond survives a
            # restart exactly, so the schema digest does too.
            timestamp = _whole_ms(timestamp)
            self.timestamps.last_us = timestamp
            if change.dropped_at_us is not None:
                change = dataclasses.replace(change, dropped_at_us=_whole_ms(change.dropped_at_us))
        migration = self.state.next_migration(change, timestamp, self.rng.getrandbits(64))
        self.state = self.state.apply(migration)
        self.migrated.append(change)
        self.migrations.append(migration)

    def new_id(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)


def _whole_ms(timestamp_us: int) -> int:
    """``timestamp_us`` rounded up to a whole millisecond."""
    return -(-timestamp_us // 1000) * 1000


def _void(context: DdlContext) -> DdlOutcome:
    return DdlOutcome(context.state, VoidResult())


def _changed(
    context: DdlContext,
    change: SchemaChange,
    *,
    extra: Sequence[SchemaChange] = (),
    register: Sequence[Table] = (),
    drop: Sequence[tuple[str, str]] = (),
    dropped_keyspaces: Iterable[str] = (),
) -> DdlOutcome:
    dropped = frozenset(dropped_keyspaces)
    return DdlOutcome(
        context.state,
        SchemaChangeResult(change),
        (change, *extra),
        tuple(register),
        tuple(drop),
        frozenset({change.keyspace}) - dropped,
        dropped,
    )


def _table_change(kind: SchemaChangeType, keyspace: str, name: str) -> SchemaChange:
    return SchemaChange(kind, SchemaChangeTarget.TABLE, keyspace, name)


# --- keyspaces -----------------------------------------------------------------------------------


def _create_keyspace(statement: Statement, context: DdlContext) -> DdlOutcome:
    assert isinstance(statement, CreateKeyspaceStatement)
    name = statement.keyspace
    exists = name in context.state.keyspaces or name in RESERVED_KEYSPACES
    if exists and statement.if_not_exists:
        return _void(context)
    if exists:
        raise SchemaAlreadyExists(name)
    keyspace = keyspace_options(name, statement.properties, context.datacenters, None)
    context.migrate(CreateKeyspace(keyspace))
    return _changed(
        context, SchemaChange(SchemaChangeType.CREATED, SchemaChangeTarget.KEYSPACE, name)
    )


def _alter_keyspace(statement: Statement, context: DdlContext) -> DdlOutcome:
    assert isinstance(statement, AlterKeyspaceStatement)
    name = statement.keyspace
    refuse_reserved_keyspace(name)
    base = context.state.keyspaces.get(name)
    if base is None:
        if statement.if_exists:
            return _void(context)
        raise InvalidRequest(f"Keyspace '{name}' does not exist")
    keyspace = keyspace_options(name, statement.properties, context.datacenters, base)
    context.migrate(AlterKeyspace(name, keyspace.replication, keyspace.durable_writes))
    return _changed(
        context, SchemaChange(SchemaChangeType.UPDATED, SchemaChangeTarget.KEYSPACE, name)
    )


def _drop_keyspace(statement: Statement, context: DdlContext) -> DdlOutcome:
    assert isinstance(statement, DropKeyspaceStatement)
    name = statement.keyspace
    refuse_reserved_keyspace(name)
    if name not in context.state.keyspaces:
        if statement.if_exists:
            return _void(context)
        raise InvalidRequest(f"Cannot drop non existing keyspace '{name}'.")
    tables = [(t.keyspace, t.name) for t in context.state.tables_of(name)]
    context.migrate(DropKeyspace(name))
    change = SchemaChange(SchemaChangeType.DROPPED, SchemaChangeTarget.KEYSPACE, name)
    return _changed(context, change, drop=tables, dropped_keyspaces=[name])


# --- tables --------------------------------------------------------------------------------------


def _keyspace(context: DdlContext, name: QualifiedName) -> Keyspace:
    keyspace_name = require_keyspace(name.keyspace, context.session_keyspace)
    refuse_reserved_keyspace(keyspace_name)
    found = context.state.keyspaces.get(keyspace_name)
    if found is None:
        raise InvalidRequest(f"Keyspace '{keyspace_name}' does not exist")
    return found


def _resolve(definition: ColumnDefinition, keyspace: Keyspace) -> CqlType:
    return resolve_type(definition.type, keyspace.user_types, keyspace.name)


def _has_duration(cql_type: CqlType) -> bool:
    if cql_type.cql_name() == "duration":
        return True
    return any(_has_duration(inner) for inner in _inner_types(cql_type))


def _inner_types(cql_type: CqlType) -> tuple[CqlType, ...]:
    if isinstance(cql_type, ListType | SetType):
        return (cql_type.element,)
    if isinstance(cql_type, MapType):
        return (cql_type.key, cql_type.value)
    if isinstance(cql_type, TupleType):
        return cql_type.elements
    if isinstance(cql_type, UserType):
        return cql_type.field_types
    return ()


def build_table(statement: CreateTableStatement, keyspace: Keyspace, table_id: uuid.UUID) -> Table:
    """The table a CREATE TABLE statement defines (validated)."""
    if statement.compact_storage:
        raise InvalidRequest("COMPACT STORAGE is not supported by ringflow")
    types = {d.name: _resolve(d, keyspace) for d in statement.columns}
    for column_type in types.values():
        check_column_type(column_type)
    static = {d.name for d in statement.columns if d.static}
    for name in (*statement.partition_key, *statement.clustering_columns):
        if name not in types:
            raise InvalidRequest(f"Unknown definition {name} referenced in PRIMARY KEY")
        if name in static:
            raise InvalidRequest(f"Static column {name} cannot be part of the PRIMARY KEY")
        if _has_duration(types[name]):
            raise InvalidRequest(f"duration type is not supported for PRIMARY KEY column '{name}'")
    orders = _clustering_orders(statement)
    keyed = set(statement.partition_key) | set(statement.clustering_columns)
    given_id = statement.properties.get("id")
    if given_id is not None:
        try:
            table_id = uuid.UUID(option_text(given_id))
        except ValueError:
            raise ConfigurationError(f"Invalid table id {option_text(given_id)!r}") from None
    properties = Properties(tuple(p for p in statement.properties.items if p.name != "id"))
    return Table.create(
        keyspace.name,
        statement.table.name,
        partition_key=[(name, types[name]) for name in statement.partition_key],
        clustering=[
            (n, types[n], orders.get(n, ClusteringOrder.ASC)) for n in statement.clustering_columns
        ],
        static=[(d.name, types[d.name]) for d in statement.columns if d.static],
        regular=[
            (d.name, types[d.name])
            for d in statement.columns
            if d.name not in keyed and not d.static
        ],
        options=table_options(properties, TableOptions()),
        table_id=table_id,
    )


def _clustering_orders(statement: CreateTableStatement) -> dict[str, ClusteringOrder]:
    orders: dict[str, ClusteringOrder] = {}
    for position, item in enumerate(statement.clustering_order):
        if item.column not in statement.clustering_columns:
            raise InvalidRequest(
                f"Only clustering key columns can be defined in CLUSTERING ORDER directive, "
                f"got {item.column}"
            )
        if statement.clustering_columns.index(item.column) != position:
            raise InvalidRequest(
                "The order of columns in the CLUSTERING ORDER directive must be the one of the "
                "clustering key"
            )
        orders[item.column] = ClusteringOrder.DESC if item.descending else ClusteringOrder.ASC
    return orders


def _create_table(statement: Statement, context: DdlContext) -> DdlOutcome:
    assert isinstance(statement, CreateTableStatement)
    keyspace = _keyspace(context, statement.table)
    name = statement.table.name
    if (keyspace.name, name) in context.state.tables:
        if statement.if_not_exists:
            return _void(context)
        raise SchemaAlreadyExists(keyspace.name, name)
    table = build_table(statement, keyspace, context.new_id())
    context.migrate(CreateTable(table))
    created = [table]
    extra = []
    if table.options.cdc.enabled:
        check_log_name_free(context.state, table)
        log = cdc_log_table(table)
        context.migrate(CreateTable(log))
        created.append(log)
        extra.append(_table_change(SchemaChangeType.CREATED, keyspace.name, log.name))
    change = _table_change(SchemaChangeType.CREATED, keyspace.name, name)
    return _changed(context, change, extra=extra, register=created)


def _existing_table(
    context: DdlContext, name: QualifiedName, if_exists: bool
) -> tuple[Keyspace, Table | None]:
    keyspace = _keyspace(context, name)
    table = context.state.tables.get((keyspace.name, name.name))
    if table is None and not if_exists:
        raise InvalidRequest(f"unconfigured table {name.name}")
    return keyspace, table


def _alter_table(statement: Statement, context: DdlContext) -> DdlOutcome:
    assert isinstance(statement, AlterTableStatement)
    keyspace, table = _existing_table(context, statement.table, statement.if_exists)
    if table is None:
        return _void(context)
    before = len(context.migrated)
    action = statement.action
    log_of = cdc_log_base(context.state, table)
    if log_of is not None:
        check_log_alter(log_of, table, action)
    if isinstance(action, AddColumns):
        _add_columns(context, keyspace, table, action)
    elif isinstance(action, DropColumns):
        _drop_columns(context, table, action)
    elif isinstance(action, RenameColumns):
        _rename_columns(context, table, action)
    else:
        assert isinstance(action, AlterTableProperties)
        shown_as = table.name if log_of is not None else ""
        options = table_options(action.properties, table.options, shown_as)
        if log_of is None and options.cdc.enabled and not table.options.cdc.enabled:
            check_log_name_free(context.state, table)
        context.migrate(AlterTableOptions(table.keyspace, table.name, options))
    if len(context.migrated) == before:
        return _void(context)
    altered = context.state.tables[(table.keyspace, table.name)]
    register, extra = _sync_log(context, altered)
    change = _table_change(SchemaChangeType.UPDATED, table.keyspace, table.name)
    return _changed(context, change, extra=extra, register=[altered, *register])


def _add_columns(context: DdlContext, keyspace: Keyspace, table: Table, action: AddColumns) -> None:
    for definition in action.columns:
        if table.has_column(definition.name):
            if action.if_not_exists:
                continue
            raise InvalidRequest(
                f"Invalid column name {definition.name} because it conflicts with an existing "
                "column"
            )
        kind = ColumnKind.STATIC if definition.static else ColumnKind.REGULAR
        column_type = _resolve(definition, keyspace)
        check_column_type(column_type)
        column = Column(definition.name, column_type, kind)
        context.migrate(AddColumn(table.keyspace, table.name, column))


def _drop_columns(context: DdlContext, table: Table, action: DropColumns) -> None:
    for name in action.columns:
        if not table.has_column(name):
            if action.if_exists:
                continue
            raise InvalidRequest(f"Column {name} was not found in table {table.name}")
        if table.column(name).is_primary_key:
            raise InvalidRequest(f"Cannot drop PRIMARY KEY part {name}")
        context.migrate(DropColumn(table.keyspace, table.name, name, action.timestamp))


def _rename_columns(context: DdlContext, table: Table, action: RenameColumns) -> None:
    """Cassandra 4's ``AlterTableStatement.RenameColumns``: only primary key columns, each
    checked against the table as it was before the statement, to a name no column has."""
    where = f"{table.keyspace}.{table.name}"
    taken: set[str] = set()
    for old, new in action.renames:
        if not table.has_column(old):
            if action.if_exists:
                continue
            raise InvalidRequest(f"Undefined column name {old} in table {where}")
        if not table.column(old).is_primary_key:
            raise InvalidRequest(f"Cannot rename non PRIMARY KEY column {old}")
        if table.has_column(new) or new in taken:
            raise InvalidRequest(
                f"Cannot rename column {old} to {new} in table '{where}'; another column with "
                "that name already exists"
            )
        taken.add(new)
        context.migrate(RenameColumn(table.keyspace, table.name, old, new))


def _sync_log(context: DdlContext, base: Table) -> tuple[list[Table], list[SchemaChange]]:
    """Create or update ``base``'s log table while CDC is enabled on it."""
    if not base.options.cdc.enabled:
        return [], []
    existing = context.state.tables.get((base.keyspace, base.cdc_log_name))
    if existing is None:
        log = cdc_log_table(base)
        context.migrate(CreateTable(log))
        return [log], [_table_change(SchemaChangeType.CREATED, base.keyspace, log.name)]
    # Scylla keeps a log's properties when its base changes or it is reattached: a user may
    # have altered them (``_cdc_log_rules``).
    wanted = dataclasses.replace(cdc_log_table(base, existing.id), options=existing.options)
    changed = False
    for column in existing.columns:
        if not wanted.has_column(column.name):
            context.migrate(DropColumn(existing.keyspace, existing.name, column.name))
            changed = True
    for column in wanted.columns:
        if not existing.has_column(column.name):
            context.migrate(AddColumn(existing.keyspace, existing.name, column))
            changed = True
    if wanted.options != existing.options:
        context.migrate(AlterTableOptions(existing.keyspace, existing.name, wanted.options))
        changed = True
    if not changed:
        return [], []
    log = context.state.tables[(existing.keyspace, existing.name)]
    return [log], [_table_change(SchemaChangeType.UPDATED, base.keyspace, log.name)]


def _drop_table(statement: Statement, context: DdlContext) -> DdlOutcome:
    assert isinstance(statement, DropTableStatement)
    _, table = _existing_table(context, statement.table, statement.if_exists)
    if table is None:
        return _void(context)
    base = cdc_log_base(context.state, table)
    if base is not None and base.options.cdc.enabled:
        raise InvalidRequest(
            f"Cannot drop CDC log table {table.name}: CDC is enabled on {base.name}; disable it "
            "first"
        )
    log = context.state.tables.get((table.keyspace, table.cdc_log_name))
    if log is not None and cdc_log_base(context.state, log) is None:
        log = None  # a table of that name that is not this table's log stays
    context.migrate(DropTable(table.keyspace, table.name))
    dropped = [(table.keyspace, table.name)]
    extra = []
    if log is not None:
        context.migrate(DropTable(log.keyspace, log.name))
        dropped.append((log.keyspace, log.name))
        extra.append(_table_change(SchemaChangeType.DROPPED, log.keyspace, log.name))
    change = _table_change(SchemaChangeType.DROPPED, table.keyspace, table.name)
    return _changed(context, change, extra=extra, drop=dropped)


def _truncate(statement: Statement, context: DdlContext) -> DdlOutcome:
    assert isinstance(statement, TruncateStatement)
    keyspace_name = require_keyspace(statement.table.keyspace, context.session_keyspace)
    refuse_local_writes(keyspace_name)
    table = context.state.tables.get((keyspace_name, statement.table.name))
    if table is None:
        if keyspace_name not in context.state.keyspaces:
            raise InvalidRequest(f"Keyspace '{keyspace_name}' does not exist")
        raise InvalidRequest(f"unconfigured table {statement.table.name}")
    return DdlOutcome(context.state, VoidResult(), truncate=(table,))


# --- user types ----------------------------------------------------------------------------------


def _create_type(statement: Statement, context: DdlContext) -> DdlOutcome:
    assert isinstance(statement, CreateTypeStatement)
    keyspace = _keyspace(context, statement.type_name)
    name = statement.type_name.name
    if name in keyspace.user_types:
        if statement.if_not_exists:
            return _void(context)
        raise TypeAlreadyExists(keyspace.name, name)
    if name in NATIVE_TYPE_NAMES or name in ("counter", "varchar"):
        raise InvalidRequest(f"{name} is a reserved type name")
    names, types = [], []
    for definition in statement.fields:
        field_type = resolve_type(definition.type, keyspace.user_types, keyspace.name)
        check_field_type(field_type)
        names.append(definition.name)
        types.append(field_type)
    context.migrate(CreateType(UserType(keyspace.name, name, tuple(names), tuple(types))))
    change = SchemaChange(SchemaChangeType.CREATED, SchemaChangeTarget.TYPE, keyspace.name, name)
    return _changed(context, change)


def _alter_type(statement: Statement, context: DdlContext) -> DdlOutcome:
    assert isinstance(statement, AlterTypeStatement)
    keyspace = _keyspace(context, statement.type_name)
    tables = context.state.tables_of(keyspace.name)
    altered = altered_user_type(statement, keyspace, tables)
    if altered is None:
        return _void(context)
    context.migrate(AlterType(altered))
    after = context.state.tables_of(keyspace.name)
    register = [table for table in after if table not in tables]
    change = SchemaChange(
        SchemaChangeType.UPDATED, SchemaChangeTarget.TYPE, keyspace.name, altered.name
    )
    return _changed(context, change, register=register)


def _uses_type(cql_type: CqlType, keyspace: str, name: str) -> bool:
    if isinstance(cql_type, UserType) and (cql_type.keyspace, cql_type.name) == (keyspace, name):
        return True
    return any(_uses_type(inner, keyspace, name) for inner in _inner_types(cql_type))


def _drop_type(statement: Statement, context: DdlContext) -> DdlOutcome:
    assert isinstance(statement, DropTypeStatement)
    keyspace = _keyspace(context, statement.type_name)
    name = statement.type_name.name
    if name not in keyspace.user_types:
        if statement.if_exists:
            return _void(context)
        raise InvalidRequest(f"No user type named {name} exists.")
    for table in context.state.tables_of(keyspace.name):
        if any(_uses_type(c.type, keyspace.name, name) for c in table.columns):
            raise InvalidRequest(
                f"Cannot drop user type {keyspace.name}.{name} as it is still used by table "
                f"{keyspace.name}.{table.name}"
            )
    for other in keyspace.user_types.values():
        if other.name != name and any(
            _uses_type(t, keyspace.name, name) for t in other.field_types
        ):
            raise InvalidRequest(
                f"Cannot drop user type {keyspace.name}.{name} as it is still used by user type "
                f"{other.name}"
            )
    context.migrate(DropType(keyspace.name, name))
    change = SchemaChange(SchemaChangeType.DROPPED, SchemaChangeTarget.TYPE, keyspace.name, name)
    return _changed(context, change)


def _unsupported(statement: Statement, context: DdlContext) -> DdlOutcome:
    assert isinstance(statement, UnsupportedStatement)
    raise InvalidRequest(statement.feature)


DDL_HANDLERS: Mapping[type, Callable[[Statement, DdlContext], DdlOutcome]] = {
    CreateKeyspaceStatement: _create_keyspace,
    AlterKeyspaceStatement: _alter_keyspace,
    DropKeyspaceStatement: _drop_keyspace,
    CreateTableStatement: _create_table,
    AlterTableStatement: _alter_table,
    DropTableStatement: _drop_table,
    CreateTypeStatement: _create_type,
    AlterTypeStatement: _alter_type,
    DropTypeStatement: _drop_type,
    TruncateStatement: _truncate,
    UnsupportedStatement: _unsupported,
}


def execute_ddl(statement: Statement, context: DdlContext) -> DdlOutcome:
    handler = DDL_HANDLERS.get(type(statement))
    if handler is None:
        raise InvalidRequest(f"not a schema statement: {type(statement).__name__}")
    outcome = handler(statement, context)
    return dataclasses.replace(outcome, migrations=tuple(context.migrations))
