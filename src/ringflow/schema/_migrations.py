"""Versioned schema migrations: a chain of TimeUUID-versioned DDL changes and the state they build.

Seed 004 (live schema updates) and cassandra-core.md §9 ("Old 0.7 design"): every DDL change is a
:class:`Migration` carrying its own version (a TimeUUID) and the version it follows. A
:class:`SchemaState` applies a migration only if it is not applied already and follows the
current version ("Previous version mismatch. cannot apply."), then checks the change's own rules
(keyspace exists, table does not, column exists, key columns cannot be dropped, a user type in
use by a table or another type cannot be dropped, ...). A node's chain version is the last
applied migration's version; the content digest that 4.x nodes gossip is
:func:`ringflow.schema.schema_digest`. Rectification (announce / push) compares chains:
:func:`missing_migrations`, :func:`answer_announce`, :func:`receive_push`.

Dropped columns are remembered with the migration's time (the TimeUUID's µs), or the time the
drop names (``DROP c USING TIMESTAMP t``), so that reads can ignore cells written before the drop,
and a column can only be re-added with the type it had (user types compared as the tuples they
expand to, as Cassandra's ``isSerializationCompatibleWith``: ``system_schema.dropped_columns``
keeps the expanded type).
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

from ringflow.errors import AlreadyExists, invariant
from ringflow.schema._errors import SchemaError
from ringflow.schema._table import Column, ColumnKind, Keyspace, Table, TableOptions
from ringflow.schema._timeuuid import timeuuid_from_micros, timeuuid_to_micros
from ringflow.schema._types import (
    CqlType,
    ListType,
    MapType,
    SetType,
    TupleType,
    UserType,
    expand_user_types,
)

GENESIS_VERSION = uuid.UUID("00000000-0000-1000-0000-000000000000")
"""The version the first migration follows: an all-zero UUID with the time-based version nibble,
below every real TimeUUID, so it can never be a migration's own version."""


# --- errors -----------------------------------------------------------------------------------


class MigrationChainError(SchemaError):
    """A migration that does not fit the chain: applied already, or out of order."""

    def __init__(self, message: str, version: uuid.UUID) -> None:
        super().__init__(message)
        self.version = version


class MigrationAlreadyApplied(MigrationChainError):
    """The migration's version is in the chain already (seed 004: never applied twice)."""


class MigrationOutOfOrder(MigrationChainError):
    """The migration follows another version than the current one (seed 004: out of sync)."""

    def __init__(
        self, version: uuid.UUID, previous_version: uuid.UUID, current_version: uuid.UUID
    ) -> None:
        super().__init__(
            f"Previous version mismatch. cannot apply migration {version}: it follows "
            f"{previous_version}, but the schema is at {current_version}",
            version,
        )
        self.previous_version = previous_version
        self.current_version = current_version


class SchemaAlreadyExists(AlreadyExists):
    """A keyspace or table that exists already; carries the names the CQL 0x2400 body needs."""

    def __init__(self, keyspace: str, table: str = "") -> None:
        what = f"table {keyspace}.{table}" if table else f"keyspace {keyspace}"
        super().__init__(f"cannot create {what}: it already exists")
        self.keyspace = keyspace
        self.table = table


class UserTypeAlreadyExists(SchemaAlreadyExists):
    """CREATE TYPE of a type the keyspace has already (the type's name rides in ``table``)."""

    def __init__(self, keyspace: str, name: str) -> None:
        super().__init__(keyspace, name)
        self.args = (f"cannot create type {keyspace}.{name}: it already exists",)


class UserTypeInUse(SchemaError):
    """DROP TYPE of a type a table's column or another user type still uses."""

    def __init__(self, keyspace: str, name: str, user: str) -> None:
        super().__init__(f"cannot drop type {keyspace}.{name}: it is still used by {user}")
        self.keyspace = keyspace
        self.name = name
        self.user = user


# --- the changes ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateKeyspace:
    keyspace: Keyspace


@dataclass(frozen=True, slots=True)
class DropKeyspace:
    name: str


@dataclass(frozen=True, slots=True)
class CreateTable:
    table: Table


@dataclass(frozen=True, slots=True)
class DropTable:
    keyspace: str
    name: str


@dataclass(frozen=True, slots=True)
class AddColumn:
    """``ALTER TABLE ... ADD``: a regular or static column."""

    keyspace: str
    table: str
    column: Column


@dataclass(frozen=True, slots=True)
class DropColumn:
    """``ALTER TABLE ... DROP [USING TIMESTAMP t]``: any column outside the primary key;
    ``dropped_at_us`` is ``t`` (Cassandra's ``recordColumnDrop``), None for the migration's
    time."""

    keyspace: str
    table: str
    name: str
    dropped_at_us: int | None = None


@dataclass(frozen=True, slots=True)
class RenameColumn:
    """``ALTER TABLE ... RENAME a TO b``: a primary key column gets a name no column has (its
    values live in the key, so no stored cell changes)."""

    keyspace: str
    table: str
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class AlterTableOptions:
    """``ALTER TABLE ... WITH``: the table's complete new options."""

    keyspace: str
    table: str
    options: TableOptions


@dataclass(frozen=True, slots=True)
class AlterKeyspace:
    """``ALTER KEYSPACE ... WITH``: the keyspace's complete new replication map and
    durable_writes (its user types stay)."""

    name: str
    replication: Mapping[str, str]
    durable_writes: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "replication", MappingProxyType(dict(self.replication)))

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.replication.items())), self.durable_writes))


@dataclass(frozen=True, slots=True)
class CreateType:
    """``CREATE TYPE``: a user type of ``user_type.keyspace``."""

    user_type: UserType


@dataclass(frozen=True, slots=True)
class AlterType:
    """``ALTER TYPE ... ADD`` / ``RENAME``: the type's complete new definition (its fields keep
    their positions; one may be added at the end). Every table and type using it follows."""

    user_type: UserType


@dataclass(frozen=True, slots=True)
class DropType:
    """``DROP TYPE``: a user type no table or other type uses."""

    keyspace: str
    name: str


SchemaChange = (
    CreateKeyspace
    | AlterKeyspace
    | DropKeyspace
    | CreateType
    | AlterType
    | DropType
    | CreateTable
    | DropTable
    | AddColumn
    | DropColumn
    | RenameColumn
    | AlterTableOptions
)


@dataclass(frozen=True, slots=True)
class Migration:
    """One DDL change with its version (a TimeUUID) and the version it follows."""

    version: uuid.UUID
    previous_version: uuid.UUID
    change: SchemaChange

    def __post_init__(self) -> None:
        if self.version.variant != uuid.RFC_4122 or self.version.version != 1:
            raise SchemaError(f"migration version {self.version} is not a TimeUUID (version 1)")
        if self.version == self.previous_version:
            raise SchemaError(f"migration {self.version} cannot follow itself")

    @property
    def timestamp_us(self) -> int:
        """The migration's time, from its TimeUUID."""
        return timeuuid_to_micros(self.version)


@dataclass(frozen=True, slots=True)
class DroppedColumn:
    """A column dropped at ``dropped_at_us``: its cells written at or before then are gone."""

    name: str
    type: CqlType
    dropped_at_us: int


TableKey = tuple[str, str]
ChangeT = TypeVar("ChangeT")
DroppedKey = tuple[str, str, str]


# --- the state --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchemaState:
    """Keyspaces, tables and dropped columns, and the chain of migrations that built them.

    Immutable: :meth:`apply` returns a new state. Build the empty one with ``SchemaState()``.
    """

    keyspaces: Mapping[str, Keyspace] = field(default_factory=dict)
    tables: Mapping[TableKey, Table] = field(default_factory=dict)
    dropped_columns: Mapping[DroppedKey, DroppedColumn] = field(default_factory=dict)
    migrations: tuple[Migration, ...] = ()
    _versions: frozenset[uuid.UUID] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("keyspaces", "tables", "dropped_columns"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        versions = frozenset(migration.version for migration in self.migrations)
        object.__setattr__(self, "_versions", versions)

    @property
    def version(self) -> uuid.UUID:
        """The chain version: the last applied migration's, or :data:`GENESIS_VERSION`."""
        return self.migrations[-1].version if self.migrations else GENESIS_VERSION

    @property
    def chain(self) -> tuple[uuid.UUID, ...]:
        """The versions of the applied migrations, oldest first."""
        return tuple(migration.version for migration in self.migrations)

    def keyspace(self, name: str) -> Keyspace:
        found = self.keyspaces.get(name)
        if found is None:
            raise SchemaError(f"keyspace {name!r} does not exist")
        return found

    def table(self, keyspace: str, name: str) -> Table:
        self.keyspace(keyspace)
        found = self.tables.get((keyspace, name))
        if found is None:
            raise SchemaError(f"table {keyspace}.{name} does not exist")
        return found

    def tables_of(self, keyspace: str) -> tuple[Table, ...]:
        """The keyspace's tables, by name."""
        return tuple(self.tables[key] for key in sorted(self.tables) if key[0] == keyspace)

    def dropped_columns_of(self, keyspace: str, table: str) -> tuple[DroppedColumn, ...]:
        """The table's dropped columns, by name."""
        keys = sorted(key for key in self.dropped_columns if key[:2] == (keyspace, table))
        return tuple(self.dropped_columns[key] for key in keys)

    def next_migration(self, change: SchemaChange, timestamp_us: int, low_bits: int) -> Migration:
        """A migration of ``change`` following this state, versioned at ``timestamp_us``."""
        return Migration(timeuuid_from_micros(timestamp_us, low_bits), self.version, change)

    def apply(self, migration: Migration) -> SchemaState:
        """The state after ``migration``; raises and leaves this state as it was if it does not
        fit the chain (:class:`MigrationAlreadyApplied`, :class:`MigrationOutOfOrder`) or breaks
        a DDL rule (:class:`SchemaError`, :class:`SchemaAlreadyExists`)."""
        if migration.version in self._versions:
            raise MigrationAlreadyApplied(
                f"migration {migration.version} is already applied", migration.version
            )
        if migration.previous_version != self.version:
            raise MigrationOutOfOrder(migration.version, migration.previous_version, self.version)
        handler = _HANDLERS.get(type(migration.change))
        if handler is None:
            raise SchemaError(f"migration {migration.version}: unknown change {migration.change!r}")
        changed = handler(self, migration)
        applied = dataclasses.replace(changed, migrations=(*self.migrations, migration))
        applied.validate()
        return applied

    def migrations_after(self, version: uuid.UUID) -> tuple[Migration, ...]:
        """The migrations applied after ``version`` (all of them after the genesis version)."""
        if version == GENESIS_VERSION:
            return self.migrations
        for index, migration in enumerate(self.migrations):
            if migration.version == version:
                return self.migrations[index + 1 :]
        raise MigrationChainError(f"version {version} is not in this schema's chain", version)

    def validate(self) -> None:
        """Raise SchemaError if the state contradicts itself (run after every change)."""
        if len(self._versions) != len(self.migrations):
            raise SchemaError("a migration version appears twice in the chain")
        for previous, migration in zip(
            (GENESIS_VERSION, *self.chain), self.migrations, strict=False
        ):
            if migration.previous_version != previous:
                raise SchemaError(f"migration {migration.version} does not follow {previous}")
        for name, keyspace in self.keyspaces.items():
            if keyspace.name != name:
                raise SchemaError(f"keyspace {keyspace.name!r} stored as {name!r}")
        ids: set[uuid.UUID] = set()
        for key, table in self.tables.items():
            if (table.keyspace, table.name) != key or key[0] not in self.keyspaces:
                raise SchemaError(f"table {table.keyspace}.{table.name} misplaced or orphaned")
            if table.id in ids:
                raise SchemaError(f"table id {table.id} is used twice")
            ids.add(table.id)
            table.validate()
        for dropped_key, dropped in self.dropped_columns.items():
            if dropped_key[:2] not in self.tables or dropped_key[2] != dropped.name:
                raise SchemaError(f"dropped column {'.'.join(dropped_key)} has no table")


# --- the DDL rules ----------------------------------------------------------------------------


def _create_keyspace(state: SchemaState, migration: Migration) -> SchemaState:
    change = _change(migration, CreateKeyspace)
    name = change.keyspace.name
    if name in state.keyspaces:
        raise SchemaAlreadyExists(name)
    return dataclasses.replace(state, keyspaces={**state.keyspaces, name: change.keyspace})


def _drop_keyspace(state: SchemaState, migration: Migration) -> SchemaState:
    change = _change(migration, DropKeyspace)
    if change.name not in state.keyspaces:
        raise SchemaError(f"cannot drop keyspace {change.name!r}: it does not exist")
    return dataclasses.replace(
        state,
        keyspaces={k: v for k, v in state.keyspaces.items() if k != change.name},
        tables={k: v for k, v in state.tables.items() if k[0] != change.name},
        dropped_columns={k: v for k, v in state.dropped_columns.items() if k[0] != change.name},
    )


def _create_table(state: SchemaState, migration: Migration) -> SchemaState:
    table = _change(migration, CreateTable).table
    keyspace = state.keyspace(table.keyspace)
    if (table.keyspace, table.name) in state.tables:
        raise SchemaAlreadyExists(table.keyspace, table.name)
    if any(existing.id == table.id for existing in state.tables.values()):
        raise SchemaError(
            f"cannot create table {table.keyspace}.{table.name}: id {table.id} in use"
        )
    table.validate()
    for column in table.columns:
        _check_user_types(keyspace, table, column.name, column.type)
    return dataclasses.replace(state, tables={**state.tables, (table.keyspace, table.name): table})


def _drop_table(state: SchemaState, migration: Migration) -> SchemaState:
    change = _change(migration, DropTable)
    key = (change.keyspace, change.name)
    state.table(*key)
    return dataclasses.replace(
        state,
        tables={k: v for k, v in state.tables.items() if k != key},
        dropped_columns={k: v for k, v in state.dropped_columns.items() if k[:2] != key},
    )


def _add_column(state: SchemaState, migration: Migration) -> SchemaState:
    change = _change(migration, AddColumn)
    table, column = state.table(change.keyspace, change.table), change.column
    where = f"table {table.keyspace}.{table.name}"
    if table.has_column(column.name):
        raise SchemaError(f"{where}: cannot add column {column.name!r}: it exists already")
    if column.kind not in (ColumnKind.REGULAR, ColumnKind.STATIC) or column.position != 0:
        raise SchemaError(
            f"{where}: cannot add {column.kind.value} column {column.name!r}: "
            "only regular and static columns can be added"
        )
    dropped = state.dropped_columns.get((table.keyspace, table.name, column.name))
    if dropped is not None and expand_user_types(dropped.type) != expand_user_types(column.type):
        raise SchemaError(
            f"{where}: cannot re-add dropped column {column.name!r} as "
            f"{column.type.cql_name()}: it was {dropped.type.cql_name()}"
        )
    _check_user_types(state.keyspace(table.keyspace), table, column.name, column.type)
    return _with_table(state, dataclasses.replace(table, columns=(*table.columns, column)))


def _drop_column(state: SchemaState, migration: Migration) -> SchemaState:
    change = _change(migration, DropColumn)
    table = state.table(change.keyspace, change.table)
    column = table.column(change.name)
    if column.is_primary_key:
        raise SchemaError(
            f"table {table.keyspace}.{table.name}: cannot drop primary key column {column.name!r}"
        )
    columns = tuple(c for c in table.columns if c.name != column.name)
    at_us = migration.timestamp_us if change.dropped_at_us is None else change.dropped_at_us
    dropped = DroppedColumn(column.name, column.type, at_us)
    without = dataclasses.replace(table, columns=columns)
    changed = _with_table(state, without.with_dropped_column(column.name, dropped.dropped_at_us))
    key = (table.keyspace, table.name, column.name)
    return dataclasses.replace(changed, dropped_columns={**state.dropped_columns, key: dropped})


def _rename_column(state: SchemaState, migration: Migration) -> SchemaState:
    change = _change(migration, RenameColumn)
    table = state.table(change.keyspace, change.table)
    column = table.column(change.old)
    where = f"table {table.keyspace}.{table.name}"
    if not column.is_primary_key:
        raise SchemaError(f"{where}: cannot rename {change.old!r}: not a primary key column")
    if table.has_column(change.new):
        raise SchemaError(f"{where}: cannot rename {change.old!r} to {change.new!r}: it exists")
    columns = tuple(
        dataclasses.replace(c, name=change.new) if c.name == change.old else c
        for c in table.columns
    )
    return _with_table(state, dataclasses.replace(table, columns=columns))


def _alter_table_options(state: SchemaState, migration: Migration) -> SchemaState:
    change = _change(migration, AlterTableOptions)
    table = state.table(change.keyspace, change.table)
    return _with_table(state, dataclasses.replace(table, options=change.options))


def _alter_keyspace(state: SchemaState, migration: Migration) -> SchemaState:
    change = _change(migration, AlterKeyspace)
    keyspace = state.keyspace(change.name)
    altered = Keyspace(
        keyspace.name, dict(change.replication), change.durable_writes, keyspace.user_types
    )
    return dataclasses.replace(state, keyspaces={**state.keyspaces, keyspace.name: altered})


def _create_type(state: SchemaState, migration: Migration) -> SchemaState:
    user_type = _change(migration, CreateType).user_type
    keyspace = state.keyspace(user_type.keyspace)
    if user_type.name in keyspace.user_types:
        raise UserTypeAlreadyExists(keyspace.name, user_type.name)
    for field_name, field_type in zip(user_type.field_names, user_type.field_types, strict=True):
        for used in _user_types_in(field_type):
            known = keyspace.user_types.get(used.name)
            if used.keyspace != keyspace.name or known is None:
                raise SchemaError(
                    f"type {keyspace.name}.{user_type.name}: field {field_name!r} uses type "
                    f"{used.keyspace}.{used.name}, unknown in keyspace {keyspace.name}"
                )
    user_types = {**keyspace.user_types, user_type.name: user_type}
    altered = dataclasses.replace(keyspace, user_types=user_types)
    return dataclasses.replace(state, keyspaces={**state.keyspaces, keyspace.name: altered})


def _drop_type(state: SchemaState, migration: Migration) -> SchemaState:
    change = _change(migration, DropType)
    keyspace = state.keyspace(change.keyspace)
    if change.name not in keyspace.user_types:
        raise SchemaError(f"cannot drop type {keyspace.name}.{change.name}: it does not exist")
    for table in state.tables_of(keyspace.name):
        for column in table.columns:
            if _uses_user_type(column.type, keyspace.name, change.name):
                raise UserTypeInUse(keyspace.name, change.name, f"table {table.name}")
    for other in keyspace.user_types.values():
        if other.name != change.name and any(
            _uses_user_type(t, keyspace.name, change.name) for t in other.field_types
        ):
            raise UserTypeInUse(keyspace.name, change.name, f"type {other.name}")
    user_types = {k: v for k, v in keyspace.user_types.items() if k != change.name}
    altered = dataclasses.replace(keyspace, user_types=user_types)
    return dataclasses.replace(state, keyspaces={**state.keyspaces, keyspace.name: altered})


def _alter_type(state: SchemaState, migration: Migration) -> SchemaState:
    altered = _change(migration, AlterType).user_type
    keyspace = state.keyspace(altered.keyspace)
    current = keyspace.user_types.get(altered.name)
    if current is None:
        raise SchemaError(f"cannot alter type {keyspace.name}.{altered.name}: it does not exist")
    kept = len(current.field_types)
    if (
        altered.frozen
        or altered.field_types[:kept] != current.field_types
        or not (kept <= len(altered.field_types) <= kept + 1)
    ):
        raise SchemaError(
            f"cannot alter type {keyspace.name}.{altered.name}: fields keep their types and "
            "positions, and at most one is added at the end"
        )
    user_types: dict[str, UserType] = {}
    for name, other in {**keyspace.user_types, altered.name: altered}.items():
        followed = other if name == altered.name else _with_user_type(other, altered)
        invariant(isinstance(followed, UserType), f"type {name} stays a user type")
        assert isinstance(followed, UserType)
        user_types[name] = followed
    tables = dict(state.tables)
    for key, table in state.tables.items():
        if key[0] != keyspace.name:
            continue
        columns = tuple(
            dataclasses.replace(c, type=_with_user_type(c.type, altered)) for c in table.columns
        )
        if columns != table.columns:
            tables[key] = dataclasses.replace(table, columns=columns)
            tables[key].validate()
    altered_keyspace = dataclasses.replace(keyspace, user_types=user_types)
    return dataclasses.replace(
        state, keyspaces={**state.keyspaces, keyspace.name: altered_keyspace}, tables=tables
    )


def _with_user_type(cql_type: CqlType, altered: UserType) -> CqlType:
    """``cql_type`` with every use of ``altered``'s type replaced by it (frozen-ness kept)."""
    if isinstance(cql_type, UserType):
        if (cql_type.keyspace, cql_type.name) == (altered.keyspace, altered.name):
            return altered.frozen_form() if cql_type.frozen else altered
        fields = tuple(_with_user_type(t, altered) for t in cql_type.field_types)
        return dataclasses.replace(cql_type, field_types=fields)
    if isinstance(cql_type, ListType | SetType):
        return dataclasses.replace(cql_type, element=_with_user_type(cql_type.element, altered))
    if isinstance(cql_type, MapType):
        key, value = (
            _with_user_type(cql_type.key, altered),
            _with_user_type(cql_type.value, altered),
        )
        return dataclasses.replace(cql_type, key=key, value=value)
    if isinstance(cql_type, TupleType):
        return TupleType(tuple(_with_user_type(t, altered) for t in cql_type.elements))
    return cql_type


def _uses_user_type(cql_type: CqlType, keyspace: str, name: str) -> bool:
    return any((t.keyspace, t.name) == (keyspace, name) for t in _user_types_in(cql_type))


_HANDLERS: Mapping[type, Callable[[SchemaState, Migration], SchemaState]] = {
    CreateKeyspace: _create_keyspace,
    AlterKeyspace: _alter_keyspace,
    CreateType: _create_type,
    AlterType: _alter_type,
    DropType: _drop_type,
    DropKeyspace: _drop_keyspace,
    CreateTable: _create_table,
    DropTable: _drop_table,
    AddColumn: _add_column,
    DropColumn: _drop_column,
    RenameColumn: _rename_column,
    AlterTableOptions: _alter_table_options,
}


def _change(migration: Migration, kind: type[ChangeT]) -> ChangeT:
    change = migration.change
    if not isinstance(change, kind):
        raise SchemaError(f"migration {migration.version}: expected {kind.__name__}")
    return change


def _with_table(state: SchemaState, table: Table) -> SchemaState:
    table.validate()
    return dataclasses.replace(state, tables={**state.tables, (table.keyspace, table.name): table})


def _user_types_in(cql_type: CqlType) -> Iterator[UserType]:
    if isinstance(cql_type, UserType):
        yield cql_type
        for field_type in cql_type.field_types:
            yield from _user_types_in(field_type)
    elif isinstance(cql_type, ListType | SetType):
        yield from _user_types_in(cql_type.element)
    elif isinstance(cql_type, MapType):
        yield from _user_types_in(cql_type.key)
        yield from _user_types_in(cql_type.value)
    elif isinstance(cql_type, TupleType):
        for element in cql_type.elements:
            yield from _user_types_in(element)


def _check_user_types(keyspace: Keyspace, table: Table, column: str, cql_type: CqlType) -> None:
    """A column may only use user types defined in its own keyspace (CQL's rule)."""
    for user_type in _user_types_in(cql_type):
        if user_type.keyspace != keyspace.name or user_type.name not in keyspace.user_types:
            raise SchemaError(
                f"table {table.keyspace}.{table.name}: column {column!r} uses type "
                f"{user_type.keyspace}.{user_type.name}, unknown in keyspace {keyspace.name}"
            )


# --- rectification (seed 004: announce, push) -------------------------------------------------


class RectifyAction(enum.Enum):
    NOTHING = "nothing"  # same version
    PUSH = "push"  # the remote lacks our newer migrations: send them
    PULL = "pull"  # we lack the remote's newer migrations: announce ours, so it pushes
    DIVERGED = "diverged"  # concurrent DDL forked the chains: neither can replay the other's


@dataclass(frozen=True, slots=True)
class Rectification:
    """What to do about two chains, and the versions after their last shared one."""

    action: RectifyAction
    common_version: uuid.UUID
    push: tuple[uuid.UUID, ...] = ()  # ours, missing remotely, oldest first
    pull: tuple[uuid.UUID, ...] = ()  # theirs, missing locally, oldest first


def _check_chain(chain: Sequence[uuid.UUID], whose: str) -> None:
    if len(set(chain)) != len(chain) or GENESIS_VERSION in chain:
        raise SchemaError(f"{whose} migration chain repeats a version or contains the genesis")


def missing_migrations(
    local_chain: Sequence[uuid.UUID], remote_chain: Sequence[uuid.UUID]
) -> Rectification:
    """Compare two chains (oldest first): which side must push or pull which versions."""
    _check_chain(local_chain, "local")
    _check_chain(remote_chain, "remote")
    shared = 0
    while (
        shared < min(len(local_chain), len(remote_chain))
        and local_chain[shared] == remote_chain[shared]
    ):
        shared += 1
    common = local_chain[shared - 1] if shared else GENESIS_VERSION
    push, pull = tuple(local_chain[shared:]), tuple(remote_chain[shared:])
    if push and pull:
        action = RectifyAction.DIVERGED
    elif push:
        action = RectifyAction.PUSH
    elif pull:
        action = RectifyAction.PULL
    else:
        action = RectifyAction.NOTHING
    return Rectification(action, common, push, pull)


def answer_announce(local_chain: Sequence[uuid.UUID], remote_version: uuid.UUID) -> Rectification:
    """Seed 004's reply to a peer announcing ``remote_version``: ignore it if equal to ours, push
    what follows it if our chain holds it, else announce back (PULL) so that the peer, holding
    the longer chain, pushes to us. ``common_version`` is the version the push starts after."""
    _check_chain(local_chain, "local")
    local_version = local_chain[-1] if local_chain else GENESIS_VERSION
    if remote_version == local_version:
        return Rectification(RectifyAction.NOTHING, local_version)
    if remote_version == GENESIS_VERSION:
        return Rectification(RectifyAction.PUSH, remote_version, tuple(local_chain))
    if remote_version in local_chain:
        after = tuple(local_chain[list(local_chain).index(remote_version) + 1 :])
        return Rectification(RectifyAction.PUSH, remote_version, after)
    return Rectification(RectifyAction.PULL, local_version)


@dataclass(frozen=True, slots=True)
class PushOutcome:
    state: SchemaState
    applied: tuple[Migration, ...]
    discarded: tuple[Migration, ...]


def receive_push(state: SchemaState, migrations: Sequence[Migration]) -> PushOutcome:
    """Apply pushed migrations in order; those applied already or out of order are discarded
    (seed 004 "Concurrency"). A DDL rule a fitting migration breaks still raises."""
    applied: list[Migration] = []
    discarded: list[Migration] = []
    for migration in migrations:
        try:
            state = state.apply(migration)
        except MigrationChainError:
            discarded.append(migration)
            continue
        applied.append(migration)
    return PushOutcome(state, tuple(applied), tuple(discarded))
