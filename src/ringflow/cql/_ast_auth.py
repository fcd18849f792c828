"""The statements of roles, users and permissions (Cassandra's ``cql3/statements/*Role*``,
``GrantPermissionsStatement``, ``ListRolesStatement``, ``ListPermissionsStatement``).

Value objects only; ``_parse_auth`` builds them and ``_exec_auth`` runs them. None takes bind
markers (Cassandra's grammar has none in these statements), hence ``bind_markers = ()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringflow.cql._auth_model import Permission, Resource
from ringflow.cql._exec_common import require_keyspace


@dataclass(frozen=True, slots=True)
class RoleOptions:
    """``WITH PASSWORD = '..' AND LOGIN = b AND SUPERUSER = b`` (None: not given);
    ``HASHED PASSWORD = '$2a$..'`` (Cassandra 4.1) gives the bcrypt hash itself."""

    password: str | None = None
    login: bool | None = None
    superuser: bool | None = None
    options_given: bool = False
    """``OPTIONS = {..}`` was given: CassandraRoleManager supports none."""
    hashed_password: str | None = None

    @property
    def empty(self) -> bool:
        given = (self.password, self.login, self.superuser, self.hashed_password)
        return all(value is None for value in given) and not self.options_given


@dataclass(frozen=True, slots=True)
class ResourceName:
    """A resource as written: a table name may lack its keyspace (then ``USE``'s applies)."""

    kind: str
    """``all_keyspaces``, ``keyspace``, ``table``, ``all_roles`` or ``role``."""
    keyspace: str | None = None
    name: str | None = None

    def resolve(self, current_keyspace: str | None) -> Resource:
        if self.kind == "all_keyspaces":
            return Resource.all_keyspaces()
        if self.kind == "keyspace":
            assert self.name is not None
            return Resource.keyspace(self.name)
        if self.kind == "table":
            assert self.name is not None
            return Resource.table(require_keyspace(self.keyspace, current_keyspace), self.name)
        if self.kind == "all_roles":
            return Resource.all_roles()
        assert self.name is not None
        return Resource.role(self.name)


@dataclass(frozen=True, slots=True)
class CreateRoleStatement:
    role: str
    options: RoleOptions
    if_not_exists: bool = False
    user_form: bool = False
    """``CREATE USER`` (its legacy defaults: LOGIN true)."""
    bind_markers: tuple[()] = ()


@dataclass(frozen=True, slots=True)
class AlterRoleStatement:
    role: str
    options: RoleOptions
    user_form: bool = False
    bind_markers: tuple[()] = ()


@dataclass(frozen=True, slots=True)
class DropRoleStatement:
    role: str
    if_exists: bool = False
    user_form: bool = False
    bind_markers: tuple[()] = ()


@dataclass(frozen=True, slots=True)
class GrantRoleStatement:
    role: str
    grantee: str
    bind_markers: tuple[()] = ()


@dataclass(frozen=True, slots=True)
class RevokeRoleStatement:
    role: str
    revokee: str
    bind_markers: tuple[()] = ()


@dataclass(frozen=True, slots=True)
class GrantPermissionsStatement:
    permissions: frozenset[Permission] | None
    """None: ``ALL [PERMISSIONS]`` (every permission the resource applies)."""
    resource: ResourceName
    grantee: str
    bind_markers: tuple[()] = ()


@dataclass(frozen=True, slots=True)
class RevokePermissionsStatement:
    permissions: frozenset[Permission] | None
    resource: ResourceName
    revokee: str
    bind_markers: tuple[()] = ()


@dataclass(frozen=True, slots=True)
class ListRolesStatement:
    of: str | None = None
    recursive: bool = True
    users: bool = False
    """``LIST USERS`` (columns name, super)."""
    bind_markers: tuple[()] = ()


@dataclass(frozen=True, slots=True)
class ListPermissionsStatement:
    permissions: frozenset[Permission] | None
    resource: ResourceName | None = None
    of: str | None = None
    recursive: bool = True
    bind_markers: tuple[()] = ()


AuthStatement = (
    CreateRoleStatement
    | AlterRoleStatement
    | DropRoleStatement
    | GrantRoleStatement
    | RevokeRoleStatement
    | GrantPermissionsStatement
    | RevokePermissionsStatement
    | ListRolesStatement
    | ListPermissionsStatement
)
AUTH_STATEMENT_TYPES = (
    CreateRoleStatement,
    AlterRoleStatement,
    DropRoleStatement,
    GrantRoleStatement,
    RevokeRoleStatement,
    GrantPermissionsStatement,
    RevokePermissionsStatement,
    ListRolesStatement,
    ListPermissionsStatement,
)
