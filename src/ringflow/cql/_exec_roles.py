"""The role and permission statements, with Cassandra's checks, messages and result columns.

Sources (re-expressed): ``CreateRoleStatement``, ``AlterRoleStatement``, ``DropRoleStatement``,
``GrantRoleStatement``/``RevokeRoleStatement`` and ``CassandraRoleManager.grantRole`` (cycles
refused: "x is a member of y"), ``GrantPermissionsStatement``/``RevokePermissionsStatement``
(the grantor must hold what it grants), ``ListRolesStatement`` (columns ``role``, ``super``,
``login``, ``options``; ``LIST USERS``: ``name``, ``super``) and ``ListPermissionsStatement``
(columns ``role``, ``username``, ``resource``, ``permission``, sorted by role, resource,
permission). Every statement runs outside the processor's lock (its reads and writes go
through the cluster), as ``AuthService`` methods over ``AuthRows``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ringflow.cql._ast_auth import (
    AlterRoleStatement,
    AuthStatement,
    CreateRoleStatement,
    DropRoleStatement,
    GrantPermissionsStatement,
    GrantRoleStatement,
    ListPermissionsStatement,
    ListRolesStatement,
    ResourceName,
    RevokePermissionsStatement,
    RevokeRoleStatement,
    RoleOptions,
)
from ringflow.cql._auth_model import (
    AuthorizedUser,
    Permission,
    Resource,
    RoleRecord,
    checked_hashed_password,
    granted_roles,
    hash_password,
    sorted_permissions,
)
from ringflow.cql._auth_tables import (
    ROLE_MEMBERS,
    ROLE_PERMISSIONS,
    ROLES,
    SYSTEM_AUTH_KEYSPACE,
    column_value,
    member_of_mutation,
    partition_deletion,
    permission_rows,
    permissions_mutation,
    role_member_mutation,
    role_mutation,
)
from ringflow.cql._exec_auth import AuthService
from ringflow.cql._exec_common import Unauthorized
from ringflow.cql._exec_system import keyspace_exists, lookup_table
from ringflow.cql._responses import Response
from ringflow.cql._results import ColumnSpec, RowsMetadata, RowsResult, VoidResult
from ringflow.errors import Consistency, InvalidRequest
from ringflow.schema import BOOLEAN, TEXT, CqlType, MapType, Mutation, SchemaState, serialize

_OPTIONS_TYPE = MapType(TEXT, TEXT)


class RoleStatements:
    """Runs ``AuthStatement``s for ``user`` (None: an internal call, everything allowed)."""

    def __init__(self, service: AuthService, schema: SchemaState) -> None:
        self.service = service
        self.schema = schema

    def execute(self, statement: AuthStatement, user: str | None, keyspace: str | None) -> Response:
        caller = None if user is None else self.service.user(user)
        if isinstance(statement, CreateRoleStatement):
            return self._create(statement, caller)
        if isinstance(statement, AlterRoleStatement):
            return self._alter(statement, caller)
        if isinstance(statement, DropRoleStatement):
            return self._drop(statement, caller)
        if isinstance(statement, GrantRoleStatement | RevokeRoleStatement):
            return self._grant_role(statement, caller)
        if isinstance(statement, ListRolesStatement):
            return self._list_roles(statement, caller)
        self._require_authorizer(statement)
        if isinstance(statement, GrantPermissionsStatement | RevokePermissionsStatement):
            return self._grant_permissions(statement, caller, keyspace)
        return self._list_permissions(statement, caller, keyspace)

    # --- helpers -------------------------------------------------------------------------------

    def _write(self, mutations: Sequence[Mutation]) -> None:
        self.service.rows.write(mutations, Consistency.QUORUM)
        self.service.invalidate()

    def _existing(self, name: str) -> RoleRecord:
        record = self.service.load_role(name)
        if record is None:
            raise InvalidRequest(f"{name} doesn't exist")
        return record

    def _require_authorizer(self, statement: AuthStatement) -> None:
        if not self.service.settings.authorize:
            verb = type(statement).__name__.removesuffix("PermissionsStatement").upper()
            raise InvalidRequest(
                f"{verb} PERMISSIONS operation is not supported by AllowAllAuthorizer"
            )

    @staticmethod
    def _check(caller: AuthorizedUser | None, permission: Permission, resource: Resource) -> None:
        if caller is not None:
            caller.require(permission, resource)

    @staticmethod
    def _is_super(caller: AuthorizedUser | None) -> bool:
        return caller is None or caller.is_superuser()

    # --- roles ---------------------------------------------------------------------------------

    def _create(self, statement: CreateRoleStatement, caller: AuthorizedUser | None) -> Response:
        options = statement.options
        self._check(caller, Permission.CREATE, Resource.all_roles())
        if options.superuser and not self._is_super(caller):
            raise Unauthorized("Only superusers can create a role with superuser status")
        if options.options_given:
            raise InvalidRequest("CassandraRoleManager does not support custom role OPTIONS")
        if self.service.load_role(statement.role) is not None:
            if statement.if_not_exists:
                return VoidResult()
            kind = "User" if statement.user_form else "Role"
            raise InvalidRequest(f"{kind} {statement.role} already exists")
        salted_hash = _salted_hash(options)
        timestamp = self.service.next_timestamp_us()
        login = options.login if options.login is not None else statement.user_form
        mutation = role_mutation(
            self.service.rows.table(ROLES),
            statement.role,
            timestamp,
            superuser=bool(options.superuser),
            login=login,
            salted_hash=salted_hash,
        )
        self._write([mutation])
        if caller is not None:
            self.service.grant_to_creator(caller.name, Resource.role(statement.role))
        return VoidResult()

    def _alter(self, statement: AlterRoleStatement, caller: AuthorizedUser | None) -> Response:
        options = statement.options
        if options.options_given:
            raise InvalidRequest("CassandraRoleManager does not support custom role OPTIONS")
        self._existing(statement.role)
        if options.empty:
            return VoidResult()
        if caller is not None and not caller.is_superuser():
            if options.superuser is not None:
                raise Unauthorized("Only superusers are allowed to alter superuser status")
            own = statement.role == caller.name
            if not own or options.login is not None:
                caller.require(Permission.ALTER, Resource.role(statement.role))
        if caller is not None and options.superuser is not None:
            mine = {record.name for record in granted_roles(caller.name, self.service.role)}
            if statement.role in mine:
                raise Unauthorized(
                    "You aren't allowed to alter your own superuser status or that of a role "
                    "granted to you"
                )
        mutation = role_mutation(
            self.service.rows.table(ROLES),
            statement.role,
            self.service.next_timestamp_us(),
            superuser=options.superuser,
            login=options.login,
            salted_hash=_salted_hash(options),
        )
        self._write([mutation])
        return VoidResult()

    def _drop(self, statement: DropRoleStatement, caller: AuthorizedUser | None) -> Response:
        record = self.service.load_role(statement.role)
        if caller is not None:
            caller.require(Permission.DROP, Resource.role(statement.role))
            if statement.role == caller.name:
                raise InvalidRequest("Cannot DROP primary role for current login")
            if record is not None and record.is_superuser and not caller.is_superuser():
                raise Unauthorized("Only superusers can drop a role with superuser status")
        if record is None:
            if statement.if_exists:
                return VoidResult()
            raise InvalidRequest(f"{statement.role} doesn't exist")
        rows = self.service.rows
        roles, members = rows.table(ROLES), rows.table(ROLE_MEMBERS)
        timestamp = self.service.next_timestamp_us()
        mutations = [
            partition_deletion(roles, statement.role, timestamp),
            partition_deletion(members, statement.role, timestamp),
            partition_deletion(rows.table(ROLE_PERMISSIONS), statement.role, timestamp),
        ]
        for granted in record.member_of:  # it is no longer a member of what it was granted
            mutations.append(
                role_member_mutation(members, granted, statement.role, timestamp, add=False)
            )
        for row in rows.read(members, statement.role, Consistency.QUORUM):
            member = column_value(members, row, "member")
            if isinstance(member, str):  # roles it was granted to no longer hold it
                mutations.append(
                    member_of_mutation(roles, member, statement.role, timestamp, add=False)
                )
        self._write(mutations)
        if self.service.settings.authorize:
            self.service.revoke_all_on([Resource.role(statement.role)])
        return VoidResult()

    def _grant_role(
        self, statement: GrantRoleStatement | RevokeRoleStatement, caller: AuthorizedUser | None
    ) -> Response:
        role = statement.role
        other = (
            statement.grantee if isinstance(statement, GrantRoleStatement) else statement.revokee
        )
        self._check(caller, Permission.AUTHORIZE, Resource.role(role))
        self._existing(role)
        target = self._existing(other)
        lookup = self.service.load_role
        if isinstance(statement, GrantRoleStatement):
            if any(record.name == role for record in granted_roles(other, lookup)):
                raise InvalidRequest(f"{other} is a member of {role}")
            if any(record.name == other for record in granted_roles(role, lookup)):
                raise InvalidRequest(f"{role} is a member of {other}")
            add = True
        else:
            if role not in target.member_of:
                raise InvalidRequest(f"{other} is not a member of {role}")
            add = False
        rows = self.service.rows
        timestamp = self.service.next_timestamp_us()
        self._write(
            [
                member_of_mutation(rows.table(ROLES), other, role, timestamp, add=add),
                role_member_mutation(rows.table(ROLE_MEMBERS), role, other, timestamp, add=add),
            ]
        )
        return VoidResult()

    def _list_roles(self, statement: ListRolesStatement, caller: AuthorizedUser | None) -> Response:
        may_describe = caller is None or caller.has_permission(
            Permission.DESCRIBE, Resource.all_roles()
        )
        if statement.users:
            records = [r for r in self.service.all_roles() if r.can_login]
            if not may_describe and caller is not None:
                mine = {r.name for r in granted_roles(caller.name, self.service.load_role)}
                records = [r for r in records if r.name in mine]
            specs = _specs("users", ("name", TEXT), ("super", BOOLEAN))
            return _rows(specs, [(r.name, r.is_superuser) for r in records])
        of = statement.of
        if of is None and not may_describe and caller is not None:
            of = caller.name
        if of is not None:
            self._existing(of)
            if not may_describe and caller is not None:
                mine = {r.name for r in granted_roles(caller.name, self.service.load_role)}
                if of not in mine:
                    raise Unauthorized(f"You are not authorized to view roles granted to {of}")
            found = granted_roles(of, self.service.load_role, recursive=statement.recursive)
            records = sorted(found, key=lambda record: record.name)
        else:
            records = self.service.all_roles()
        specs = _specs(
            "roles",
            ("role", TEXT),
            ("super", BOOLEAN),
            ("login", BOOLEAN),
            ("options", _OPTIONS_TYPE),
        )
        return _rows(specs, [(r.name, r.is_superuser, r.can_login, {}) for r in records])

    # --- permissions ---------------------------------------------------------------------------

    def _resource(self, name: ResourceName, keyspace: str | None) -> Resource:
        resource = name.resolve(keyspace)
        parts = resource.parts
        if resource.root == "data":
            known = len(parts) == 0 or (
                keyspace_exists(self.schema, parts[0])
                and (len(parts) == 1 or _table_exists(self.schema, parts[0], parts[1]))
            )
        else:
            known = not parts or self.service.load_role(parts[0]) is not None
        if not known:
            raise InvalidRequest(f"Resource {resource} doesn't exist")
        return resource

    def _grant_permissions(
        self,
        statement: GrantPermissionsStatement | RevokePermissionsStatement,
        caller: AuthorizedUser | None,
        keyspace: str | None,
    ) -> Response:
        resource = self._resource(statement.resource, keyspace)
        grantee = (
            statement.grantee
            if isinstance(statement, GrantPermissionsStatement)
            else statement.revokee
        )
        applicable = resource.applicable_permissions()
        wanted = applicable if statement.permissions is None else statement.permissions
        unsupported = wanted - applicable
        if unsupported:
            kind = "DataResource" if resource.root == "data" else "RoleResource"
            names = ", ".join(p.value for p in sorted_permissions(unsupported))
            raise InvalidRequest(
                f"Resource type {kind} does not support the requested permissions: {names}"
            )
        if caller is not None:
            caller.require(Permission.AUTHORIZE, resource)
            for permission in sorted_permissions(wanted):
                caller.require(permission, resource)
        self._existing_grantee(grantee)
        mutation = permissions_mutation(
            self.service.rows.table(ROLE_PERMISSIONS),
            grantee,
            resource,
            wanted,
            self.service.next_timestamp_us(),
            add=isinstance(statement, GrantPermissionsStatement),
        )
        self._write([mutation])
        return VoidResult()

    def _existing_grantee(self, name: str) -> None:
        if self.service.load_role(name) is None:
            raise InvalidRequest(f"Role {name} doesn't exist")

    def _list_permissions(
        self,
        statement: ListPermissionsStatement,
        caller: AuthorizedUser | None,
        keyspace: str | None,
    ) -> Response:
        resource = (
            None if statement.resource is None else self._resource(statement.resource, keyspace)
        )
        of = statement.of
        if of is not None:
            self._existing(of)
        if caller is not None and not caller.is_superuser():
            mine = {r.name for r in granted_roles(caller.name, self.service.load_role)}
            may_describe = caller.has_permission(Permission.DESCRIBE, Resource.all_roles())
            if (of is None or of not in mine) and not may_describe:
                who = of if of is not None else "everyone"
                raise Unauthorized(f"You are not authorized to view {who}'s permissions")
        if of is None:
            roles = [record.name for record in self.service.all_roles()]
        elif statement.recursive:
            roles = [record.name for record in granted_roles(of, self.service.load_role)]
        else:
            roles = [of]  # NORECURSIVE: the role's own grants on the resource itself
        wanted = set(Permission) if statement.permissions is None else set(statement.permissions)
        levels = _levels(resource, statement.recursive)
        details: list[tuple[str, str, int, Resource, Permission]] = []
        table = self.service.rows.table(ROLE_PERMISSIONS)
        for role in roles:
            granted = permission_rows(
                table, self.service.rows.read(table, role, Consistency.LOCAL_ONE)
            )
            for granted_resource, permissions in granted.items():
                if levels is not None and granted_resource not in levels:
                    continue
                for permission in permissions & wanted:
                    order = list(Permission).index(permission)
                    details.append(
                        (role, granted_resource.name, order, granted_resource, permission)
                    )
        details.sort(key=lambda detail: detail[:3])
        specs = _specs(
            "permissions",
            ("role", TEXT),
            ("username", TEXT),
            ("resource", TEXT),
            ("permission", TEXT),
        )
        return _rows(
            specs, [(role, role, str(res), perm.value) for role, _, _, res, perm in details]
        )


def _salted_hash(options: RoleOptions) -> str | None:
    """The hash to store: of ``PASSWORD``, or ``HASHED PASSWORD`` checked; None: neither."""
    if options.password is not None and options.hashed_password is not None:
        raise InvalidRequest("Options 'password' and 'hashed password' are mutually exclusive")
    if options.hashed_password is not None:
        return checked_hashed_password(options.hashed_password)
    if options.password is not None and not options.password:
        raise InvalidRequest("Password must not be empty")
    return None if options.password is None else hash_password(options.password)


def _table_exists(schema: SchemaState, keyspace: str, table: str) -> bool:
    try:
        lookup_table(schema, keyspace, table)
    except InvalidRequest:
        return False
    return True


def _levels(resource: Resource | None, recursive: bool) -> set[Resource] | None:
    if resource is None:
        return None
    return set(resource.chain()) if recursive else {resource}


def _specs(table: str, *columns: tuple[str, CqlType]) -> tuple[ColumnSpec, ...]:
    return tuple(ColumnSpec(SYSTEM_AUTH_KEYSPACE, table, name, kind) for name, kind in columns)


def _rows(specs: tuple[ColumnSpec, ...], rows: Iterable[tuple[object, ...]]) -> RowsResult:
    encoded = tuple(
        tuple(
            serialize(spec.type, value, spec.name) for spec, value in zip(specs, row, strict=True)
        )
        for row in rows
    )
    return RowsResult(RowsMetadata.describing(specs), encoded)
