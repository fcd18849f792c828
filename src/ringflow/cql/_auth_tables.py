"""``system_auth``: Cassandra's role and permission tables, and the mutations that change them.

The tables are Cassandra's ``AuthKeyspace`` ones, same names and columns, so tools that read
them directly work: ``roles(role, can_login, is_superuser, member_of, salted_hash)``,
``role_members(role, member)`` and ``role_permissions(role, resource, permissions)``. The
keyspace is replicated (SimpleStrategy, RF 3 like ``system_distributed``; a cluster node reads
and writes it through its coordinator).

Writes change single elements of ``member_of`` and ``permissions`` (Cassandra's ``UPDATE ..
SET permissions = permissions + {..}``), so two grants made at once through two nodes both
hold. Reads go through ``AuthRows``, which the executor implements over its data plane.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from ringflow.cql._auth_model import Permission, Resource, RoleRecord
from ringflow.errors import Consistency, InternalError
from ringflow.schema import (
    TEXT,
    Cell,
    ComplexColumn,
    DeletionTime,
    LivenessInfo,
    Mutation,
    Row,
    Table,
    deserialize,
    serialize,
)
from ringflow.storage import ResultRow

SYSTEM_AUTH_KEYSPACE = "system_auth"
ROLES = "roles"
ROLE_MEMBERS = "role_members"
ROLE_PERMISSIONS = "role_permissions"

ROLES_CQL = """CREATE TABLE system_auth.roles (
    role text PRIMARY KEY,
    can_login boolean,
    is_superuser boolean,
    member_of set<text>,
    salted_hash text
) WITH comment = 'role definitions'"""
ROLE_MEMBERS_CQL = """CREATE TABLE system_auth.role_members (
    role text,
    member text,
    PRIMARY KEY (role, member)
) WITH comment = 'role memberships lookup table'"""
ROLE_PERMISSIONS_CQL = """CREATE TABLE system_auth.role_permissions (
    role text,
    resource text,
    permissions set<text>,
    PRIMARY KEY (role, resource)
) WITH comment = 'permissions granted to db roles'"""
AUTH_TABLES_CQL = (ROLES_CQL, ROLE_MEMBERS_CQL, ROLE_PERMISSIONS_CQL)


class AuthRows(Protocol):
    """Where ``system_auth`` rows are read and written (the executor's data plane)."""

    def table(self, name: str) -> Table: ...

    def read(self, table: Table, key: str, consistency: Consistency) -> list[ResultRow]: ...

    def scan(self, table: Table, consistency: Consistency) -> list[ResultRow]: ...

    def write(self, mutations: Sequence[Mutation], consistency: Consistency) -> None: ...


def column_value(table: Table, row: ResultRow, name: str) -> object:
    """A deserialized column of ``row`` (key columns included); None when null."""
    column = table.column(name)
    keys = [c.name for c in table.partition_key_columns]
    clustering = [c.name for c in table.clustering_columns]
    if name in keys:
        raw: bytes | None = row.partition_key[keys.index(name)]
    elif name in clustering:
        raw = row.clustering[clustering.index(name)]
    else:
        raw = row.values.get(name)
    return None if raw is None else deserialize(column.type, raw, name)


def role_record(table: Table, row: ResultRow) -> RoleRecord:
    name = column_value(table, row, "role")
    members = column_value(table, row, "member_of") or frozenset()
    salted = column_value(table, row, "salted_hash")
    if not isinstance(name, str) or not isinstance(members, frozenset):
        raise InternalError(f"system_auth.roles: unreadable row {row!r}")
    return RoleRecord(
        name,
        bool(column_value(table, row, "is_superuser")),
        bool(column_value(table, row, "can_login")),
        frozenset(str(member) for member in members),
        salted if isinstance(salted, str) else None,
    )


def permission_rows(
    table: Table, rows: Iterable[ResultRow]
) -> dict[Resource, frozenset[Permission]]:
    """``role_permissions`` rows of one role: resource -> permissions (unknown names skipped)."""
    found: dict[Resource, frozenset[Permission]] = {}
    for row in rows:
        resource = column_value(table, row, "resource")
        names = column_value(table, row, "permissions") or frozenset()
        if not isinstance(resource, str) or not isinstance(names, frozenset):
            raise InternalError(f"system_auth.role_permissions: unreadable row {row!r}")
        known = frozenset(Permission(n) for n in names if n in Permission.__members__)
        if known:
            found[Resource.from_name(resource)] = known
    return found


def _key(value: str) -> bytes:
    return serialize(TEXT, value)


def role_mutation(
    table: Table,
    role: str,
    timestamp_us: int,
    *,
    superuser: bool | None = None,
    login: bool | None = None,
    salted_hash: str | None = None,
) -> Mutation:
    """Insert or update a role's options (only those given) with a row marker."""
    from ringflow.schema import BOOLEAN

    cells: dict[str, Cell | ComplexColumn] = {}
    if superuser is not None:
        cells["is_superuser"] = Cell.live(timestamp_us, serialize(BOOLEAN, superuser))
    if login is not None:
        cells["can_login"] = Cell.live(timestamp_us, serialize(BOOLEAN, login))
    if salted_hash is not None:
        cells["salted_hash"] = Cell.live(timestamp_us, serialize(TEXT, salted_hash))
    row = Row((), LivenessInfo(timestamp_us), None, cells)
    return Mutation(table.keyspace, table.name, (_key(role),), rows=(row,))


def partition_deletion(table: Table, key: str, timestamp_us: int) -> Mutation:
    deletion = DeletionTime(timestamp_us, timestamp_us // 1_000_000)
    return Mutation(table.keyspace, table.name, (_key(key),), partition_deletion=deletion)


def member_of_mutation(
    table: Table, role: str, granted: str, timestamp_us: int, *, add: bool
) -> Mutation:
    """Add ``granted`` to (or remove it from) ``roles.member_of`` of ``role``."""
    path = _key(granted)
    cell = (
        Cell.live(timestamp_us, b"", path)
        if add
        else Cell.tombstone(timestamp_us, timestamp_us // 1_000_000, path)
    )
    row = Row((), None, None, {"member_of": ComplexColumn((cell,))})
    return Mutation(table.keyspace, table.name, (_key(role),), rows=(row,))


def role_member_mutation(
    table: Table, role: str, member: str, timestamp_us: int, *, add: bool
) -> Mutation:
    """The ``role_members`` row (``role``, ``member``), written or deleted."""
    if add:
        row = Row((_key(member),), LivenessInfo(timestamp_us), None, {})
    else:
        row = Row((_key(member),), None, DeletionTime(timestamp_us, timestamp_us // 1_000_000))
    return Mutation(table.keyspace, table.name, (_key(role),), rows=(row,))


def permissions_mutation(
    table: Table,
    role: str,
    resource: Resource,
    permissions: Iterable[Permission],
    timestamp_us: int,
    *,
    add: bool,
) -> Mutation:
    """Add (or remove) elements of ``role_permissions.permissions`` for ``resource``."""
    now_s = timestamp_us // 1_000_000
    cells = tuple(
        Cell.live(timestamp_us, b"", path) if add else Cell.tombstone(timestamp_us, now_s, path)
        for path in sorted(_key(p.value) for p in permissions)
    )
    row = Row((_key(resource.name),), None, None, {"permissions": ComplexColumn(cells)})
    return Mutation(table.keyspace, table.name, (_key(role),), rows=(row,))


def permission_row_deletion(table: Table, role: str, resource: str, timestamp_us: int) -> Mutation:
    """Delete ``role``'s grants on ``resource`` (its whole ``role_permissions`` row)."""
    deletion = DeletionTime(timestamp_us, timestamp_us // 1_000_000)
    row = Row((_key(resource),), None, deletion)
    return Mutation(table.keyspace, table.name, (_key(role),), rows=(row,))
