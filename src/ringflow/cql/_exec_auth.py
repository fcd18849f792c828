"""Authentication, authorization and the role/permission statements of one node.

``AuthService`` is Cassandra's ``PasswordAuthenticator`` + ``CassandraRoleManager`` +
``CassandraAuthorizer`` over ``system_auth`` (``_auth_tables``), re-expressed:

* **Login** (``authenticate``): the SASL PLAIN token is decoded (``_auth_model``), the role read
  (cached), its bcrypt hash checked; a missing role, a wrong password and a role without LOGIN
  are all ``AuthenticationFailed`` (0x0100) in Cassandra's words. Tokens over
  ``max_token_bytes`` are refused before anything is decoded.
* **Reads of roles** are at LOCAL_ONE, except the default superuser's, at QUORUM
  (``CassandraRoleManager.consistencyForRole``: it is written at timestamp 0 by whichever node
  sets it up first, so a node that joined later may not hold it yet); writes at QUORUM.
* **Caches** (``ExpiringCache``): roles and permissions, each for ``validity_ms`` (Cassandra's
  ``roles_validity``/``permissions_validity``, 2000 ms); a change made here clears this node's
  caches at once, other nodes see it within the validity.
* **Statement checks** (``authorize``, ``CassandraAuthorizer`` semantics, see
  ``_required_permission``): superusers bypass; ``system`` and ``system_schema`` are readable
  by every logged-in role (driver metadata), so are the CDC description tables (as in Scylla); a
  CDC log table follows its base table's permissions (Scylla).
* **Statements** (``execute``): role and permission statements with Cassandra's checks and
  messages (``_exec_roles``); the creator of a keyspace, table or role gets every applicable
  permission on it (``grant_to_creator``), and dropping one drops every grant on it
  (``revoke_all_on``), so a keyspace created again later starts with no grants.
* **The default superuser** (``setup_default_superuser``): when no role exists, ``cassandra`` /
  ``cassandra`` (superuser, login) is written at timestamp 0 so any later change wins, as
  ``CassandraRoleManager.setupDefaultRole`` does; a warning is logged while its password is the
  default one.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ringflow.cql._ast import (
    AlterKeyspaceStatement,
    AlterTableStatement,
    BeginBatchStatement,
    CallStatement,
    CreateKeyspaceStatement,
    CreateTableStatement,
    CreateTypeStatement,
    DeleteStatement,
    DropKeyspaceStatement,
    DropTableStatement,
    DropTypeStatement,
    InsertStatement,
    SelectStatement,
    Statement,
    TruncateStatement,
    UpdateStatement,
)
from ringflow.cql._auth_cache import DEFAULT_VALIDITY_MS, ExpiringCache
from ringflow.cql._auth_model import (
    DEFAULT_SUPERUSER,
    AuthenticationFailed,
    AuthorizedUser,
    Permission,
    Resource,
    RoleRecord,
    check_password,
    decode_plain_token,
    granted_roles,
    hash_password,
    incorrect_credentials,
)
from ringflow.cql._auth_tables import (
    ROLE_PERMISSIONS,
    ROLES,
    AuthRows,
    column_value,
    permission_row_deletion,
    permission_rows,
    permissions_mutation,
    role_mutation,
    role_record,
)
from ringflow.cql._exec_common import LOCAL_KEYSPACES, Unauthorized, require_keyspace
from ringflow.cql._results import SchemaChange, SchemaChangeTarget, SchemaChangeType
from ringflow.errors import Consistency
from ringflow.schema import CDC_LOG_SUFFIX, SchemaState

_log = logging.getLogger(__name__)

DEFAULT_MAX_TOKEN_BYTES = 64 * 1024
"""A SASL token larger than this is refused unread (Cassandra has only the frame limit; a
PLAIN token is a name and a password, and bcrypt reads 72 bytes of the password)."""
CDC_DESCRIPTION_TABLES = frozenset(
    {
        ("system_distributed", "cdc_generation_timestamps"),
        ("system_distributed", "cdc_streams_descriptions_v2"),
        ("system_distributed", "cdc_streams_descriptions"),
        ("system_distributed", "cdc_generation_descriptions"),
    }
)
"""Readable by every logged-in role, as Scylla's ``client_state`` allows (CDC consumers)."""
READABLE_KEYSPACES = LOCAL_KEYSPACES | {"system_virtual_schema", "system_views"}
DEFAULT_PASSWORD_WARNING_MS = 60_000


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """What the node enables (Cassandra's ``authenticator`` / ``authorizer``) and the limits."""

    authenticate: bool = False
    authorize: bool = False
    validity_ms: int = DEFAULT_VALIDITY_MS
    max_token_bytes: int = DEFAULT_MAX_TOKEN_BYTES

    @property
    def enabled(self) -> bool:
        return self.authenticate or self.authorize


@dataclass(frozen=True, slots=True)
class EffectivePermissions:
    """What one role may do, its grants resolved (through granted roles): cached per role for
    the validity, so a statement's check is a few dictionary lookups."""

    superuser: bool
    granted: Mapping[Resource, frozenset[Permission]]

    def allows(self, permission: Permission, resource: Resource) -> bool:
        if self.superuser:
            return True
        return any(permission in self.granted.get(level, ()) for level in resource.chain())


@dataclass(slots=True)
class _AuthCounts:
    """What a node's ``AuthService`` counts, shared by its views (``over``)."""

    failed_logins: int = 0
    default_password_warnings: int = 0
    default_warned_ms: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def role_consistency(role: str) -> Consistency:
    return Consistency.QUORUM if role == DEFAULT_SUPERUSER else Consistency.LOCAL_ONE


class AuthService:
    """One node's authentication and authorization (see the module docstring)."""

    def __init__(
        self,
        rows: AuthRows,
        settings: AuthSettings,
        *,
        clock_ms: Callable[[], float],
        next_timestamp_us: Callable[[], int],
    ) -> None:
        self.rows = rows
        self.settings = settings
        self._next_timestamp_us = next_timestamp_us
        self._roles: ExpiringCache[str, RoleRecord] = ExpiringCache(
            clock_ms, validity_ms=settings.validity_ms
        )
        self._permissions: ExpiringCache[str, Mapping[Resource, frozenset[Permission]]] = (
            ExpiringCache(clock_ms, validity_ms=settings.validity_ms)
        )
        self._effective: ExpiringCache[str, EffectivePermissions] = ExpiringCache(
            clock_ms, validity_ms=settings.validity_ms
        )
        self._clock_ms = clock_ms
        self._counts = _AuthCounts()

    def over(self, rows: AuthRows) -> AuthService:
        """This service with its reads and writes going to ``rows`` (a run of ``run_auth``):
        the same caches and counts."""
        view = copy.copy(self)
        view.rows = rows
        return view

    @property
    def failed_logins(self) -> int:
        return self._counts.failed_logins

    @property
    def default_password_warnings(self) -> int:
        return self._counts.default_password_warnings

    # --- reads ---------------------------------------------------------------------------------

    def load_role(self, name: str) -> RoleRecord | None:
        table = self.rows.table(ROLES)
        found = self.rows.read(table, name, role_consistency(name))
        return role_record(table, found[0]) if found else None

    def role(self, name: str) -> RoleRecord | None:
        return self._roles.get(name, self.load_role)

    def _load_permissions(self, name: str) -> Mapping[Resource, frozenset[Permission]]:
        table = self.rows.table(ROLE_PERMISSIONS)
        return permission_rows(table, self.rows.read(table, name, Consistency.LOCAL_ONE))

    def permissions(self, name: str) -> Mapping[Resource, frozenset[Permission]]:
        return self._permissions.get(name, self._load_permissions) or {}

    def all_roles(self) -> list[RoleRecord]:
        table = self.rows.table(ROLES)
        records = [role_record(table, row) for row in self.rows.scan(table, Consistency.QUORUM)]
        return sorted(records, key=lambda record: record.name)

    def _resolve(self, name: str) -> EffectivePermissions | None:
        roles = granted_roles(name, self.role)
        if not roles:
            return None
        granted: dict[Resource, frozenset[Permission]] = {}
        for record in roles:
            for resource, permissions in self.permissions(record.name).items():
                granted[resource] = granted.get(resource, frozenset()) | permissions
        return EffectivePermissions(any(r.is_superuser for r in roles), granted)

    def effective(self, name: str) -> EffectivePermissions:
        """``name``'s resolved permissions (none for a role that no longer exists)."""
        return self._effective.get(name, self._resolve) or EffectivePermissions(False, {})

    def user(self, name: str) -> AuthorizedUser:
        return AuthorizedUser(name, self.role, self.permissions)

    def invalidate(self) -> None:
        """After a change made here: this node sees it at once."""
        self._roles.invalidate_all()
        self._permissions.invalidate_all()
        self._effective.invalidate_all()

    def next_timestamp_us(self) -> int:
        return self._next_timestamp_us()

    # --- login ---------------------------------------------------------------------------------

    def authenticate(self, token: bytes | None) -> str:
        """The role a SASL PLAIN token logs in as; AuthenticationFailed otherwise."""
        try:
            return self._authenticate(token)
        except AuthenticationFailed:
            with self._counts.lock:
                self._counts.failed_logins += 1
            raise

    def _authenticate(self, token: bytes | None) -> str:
        if token is not None and len(token) > self.settings.max_token_bytes:
            raise AuthenticationFailed(
                f"SASL token of {len(token)} bytes is over the limit of "
                f"{self.settings.max_token_bytes} bytes"
            )
        username, password = decode_plain_token(token)
        record = self.role(username)
        if record is None or not check_password(password, record.salted_hash):
            raise incorrect_credentials(username)
        if not record.can_login:
            raise AuthenticationFailed(f"{username} is not permitted to log in")
        if username == DEFAULT_SUPERUSER and password == DEFAULT_SUPERUSER:
            self._warn_default_password()
        return username

    def _warn_default_password(self) -> None:
        """At most once a ``DEFAULT_PASSWORD_WARNING_MS`` while the default superuser logs in
        with its default password (so: until it is changed)."""
        now = self._clock_ms()
        counts = self._counts
        with counts.lock:
            last = counts.default_warned_ms
            if last is not None and now - last < DEFAULT_PASSWORD_WARNING_MS:
                return
            counts.default_warned_ms = now
            counts.default_password_warnings += 1
        _log.warning(
            "the default superuser %s still has its default password: change it (ALTER "
            "ROLE %s WITH PASSWORD = '...') or create another superuser and drop it",
            DEFAULT_SUPERUSER,
            DEFAULT_SUPERUSER,
        )

    # --- statements ----------------------------------------------------------------------------

    def authorize(
        self,
        user: str,
        statement: Statement,
        keyspace: str | None,
        schema: SchemaState,
        grants: EffectivePermissions | None = None,
    ) -> None:
        """Unauthorized unless ``user`` may run ``statement`` (a no-op without an authorizer),
        checked against ``grants`` (``user``'s, resolved for this statement; None: resolved
        here, through the cache)."""
        if not self.settings.authorize:
            return
        if isinstance(statement, CallStatement):  # node operations (repair): superusers only
            if not (grants or self.effective(user)).superuser:
                raise Unauthorized(f"User {user} is not a superuser: only superusers may CALL")
            return
        required = required_permission(statement, keyspace, schema)
        if required is None:
            return
        permission, resource = required
        if _readable_anyway(permission, resource):
            return
        effective = grants or self.effective(user)
        if effective.allows(permission, resource):
            return
        base = _cdc_base(resource, schema)
        if base is not None and effective.allows(permission, base):
            return
        raise Unauthorized(
            f"User {user} has no {permission.value} permission on {resource} or any of its parents"
        )

    def authorize_all(
        self,
        user: str,
        statement: Statement,
        keyspace: str | None,
        schema: SchemaState,
        grants: EffectivePermissions | None = None,
    ) -> None:
        """``authorize`` of a statement, or of each statement of a text batch."""
        if isinstance(statement, BeginBatchStatement):
            for child in statement.statements:
                self.authorize(user, child, keyspace, schema, grants)
        else:
            self.authorize(user, statement, keyspace, schema, grants)

    def cached_grants(self, user: str) -> EffectivePermissions | None:
        """``user``'s resolved permissions if cached now (no read), else None."""
        return self._effective.cached(user)

    def grants_needed(self, user: str | None) -> bool:
        """Whether a statement of ``user`` is checked against grants (an authorizer and a
        logged-in user): the shell resolves them first (``effective``, through ``run_auth``)."""
        return self.settings.authorize and user is not None

    def schema_change_work(
        self, user: str | None, change: SchemaChange
    ) -> Callable[[AuthService], None] | None:
        """What a DDL's answer leads to, run after the processor's lock: the creator of a
        keyspace or table gets every permission on it; dropping one drops every grant on it and
        its CDC log (Cassandra's ``grantPermissionsToCreator``, ``AuthSchemaChangeListener``)."""
        if change.target is SchemaChangeTarget.KEYSPACE:
            resources = [Resource.keyspace(change.keyspace)]
        elif change.target is SchemaChangeTarget.TABLE and change.name is not None:
            resources = [
                Resource.table(change.keyspace, change.name),
                Resource.table(change.keyspace, change.name + CDC_LOG_SUFFIX),
            ]
        else:
            return None
        dropped = change.change_type is SchemaChangeType.DROPPED and self.settings.authorize
        created = change.change_type is SchemaChangeType.CREATED and user is not None
        if not dropped and not created:
            return None

        def work(service: AuthService) -> None:
            if dropped:
                service.revoke_all_on(resources)
            else:
                service.grant_to_creator(user, resources[0])

        return work

    def grant_to_creator(self, user: str | None, resource: Resource) -> None:
        """Every permission ``resource`` applies to its creator (Cassandra's
        ``grantPermissionsToCreator``); nothing without a logged-in role or an authorizer."""
        if user is None or not self.settings.authorize:
            return
        table = self.rows.table(ROLE_PERMISSIONS)
        mutation = permissions_mutation(
            table,
            user,
            resource,
            resource.applicable_permissions(),
            self._next_timestamp_us(),
            add=True,
        )
        self.rows.write([mutation], Consistency.QUORUM)
        self.invalidate()

    def revoke_all_on(self, resources: Iterable[Resource]) -> int:
        """Drop every grant on ``resources`` and their children (a dropped keyspace, table or
        role: Cassandra's ``IAuthorizer.revokeAllOn``); the number of grants dropped."""
        names = {resource.name for resource in resources}
        if not names:
            return 0
        prefixes = tuple(f"{name}/" for name in names)
        table = self.rows.table(ROLE_PERMISSIONS)
        timestamp = self._next_timestamp_us()
        doomed = []
        for row in self.rows.scan(table, Consistency.QUORUM):
            role = column_value(table, row, "role")
            name = column_value(table, row, "resource")
            matches = isinstance(name, str) and (name in names or name.startswith(prefixes))
            if matches and isinstance(role, str) and isinstance(name, str):
                doomed.append(permission_row_deletion(table, role, name, timestamp))
        if doomed:
            self.rows.write(doomed, Consistency.QUORUM)
            self.invalidate()
        return len(doomed)

    def setup_default_superuser(self) -> bool:
        """Create ``cassandra``/``cassandra`` if no role exists (True when written)."""
        if self.all_roles():
            return False
        table = self.rows.table(ROLES)
        mutation = role_mutation(
            table,
            DEFAULT_SUPERUSER,
            0,
            superuser=True,
            login=True,
            salted_hash=hash_password(DEFAULT_SUPERUSER),
        )
        self.rows.write([mutation], Consistency.QUORUM)
        self.invalidate()
        _log.warning(
            "created the default superuser %s with the default password: change it",
            DEFAULT_SUPERUSER,
        )
        return True


def _readable_anyway(permission: Permission, resource: Resource) -> bool:
    if permission is not Permission.SELECT or len(resource.parts) != 2:
        return False
    keyspace, table = resource.parts
    return keyspace in READABLE_KEYSPACES or (keyspace, table) in CDC_DESCRIPTION_TABLES


def _cdc_base(resource: Resource, schema: SchemaState) -> Resource | None:
    """The base table of a CDC log table resource (its permissions apply, as in Scylla)."""
    if len(resource.parts) != 2 or not resource.parts[1].endswith(CDC_LOG_SUFFIX):
        return None
    keyspace, log = resource.parts
    base = log[: -len(CDC_LOG_SUFFIX)]
    return Resource.table(keyspace, base) if (keyspace, base) in schema.tables else None


def required_permission(
    statement: Statement, keyspace: str | None, schema: SchemaState
) -> tuple[Permission, Resource] | None:
    """What a data statement needs (Cassandra's ``checkAccess`` of each statement); None for
    those that need nothing (USE) or check themselves (role and permission statements). A
    batch needs MODIFY on each of its tables: ``batch_permissions``."""

    def table(name: object) -> Resource:
        qualified = getattr(name, "keyspace", None), getattr(name, "name", "")
        return Resource.table(require_keyspace(qualified[0], keyspace), str(qualified[1]))

    if isinstance(statement, SelectStatement):
        return Permission.SELECT, table(statement.table)
    if isinstance(statement, InsertStatement | UpdateStatement | DeleteStatement):
        return Permission.MODIFY, table(statement.table)
    if isinstance(statement, TruncateStatement):
        return Permission.MODIFY, table(statement.table)
    if isinstance(statement, CreateKeyspaceStatement):
        return Permission.CREATE, Resource.all_keyspaces()
    if isinstance(statement, AlterKeyspaceStatement):
        return Permission.ALTER, Resource.keyspace(statement.keyspace)
    if isinstance(statement, DropKeyspaceStatement):
        return Permission.DROP, Resource.keyspace(statement.keyspace)
    if isinstance(statement, CreateTableStatement):
        return Permission.CREATE, Resource.keyspace(
            require_keyspace(statement.table.keyspace, keyspace)
        )
    if isinstance(statement, AlterTableStatement):
        return Permission.ALTER, table(statement.table)
    if isinstance(statement, DropTableStatement):
        return Permission.DROP, table(statement.table)
    if isinstance(statement, CreateTypeStatement):
        return Permission.CREATE, Resource.keyspace(
            require_keyspace(statement.type_name.keyspace, keyspace)
        )
    if isinstance(statement, DropTypeStatement):
        return Permission.DROP, Resource.keyspace(
            require_keyspace(statement.type_name.keyspace, keyspace)
        )
    if isinstance(statement, BeginBatchStatement):
        return None  # each child is checked (``authorize`` on each)
    return None
