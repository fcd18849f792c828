"""Roles, resources and permissions: the pure part of authentication and authorization.

Implements Cassandra's model (``auth/Permission.java``, ``DataResource``, ``RoleResource``,
``CassandraRoleManager``, ``CassandraAuthorizer``, ``PasswordAuthenticator``), re-expressed:

* A **resource** is ``data`` (all keyspaces), ``data/ks`` or ``data/ks/table``, or ``roles``
  (all roles) or ``roles/r``; it prints as Cassandra does (``<table ks.t>``, ``<keyspace ks>``,
  ``<all keyspaces>``, ``<all roles>``, ``<role r>``) and each level applies a fixed set of
  permissions (``applicable_permissions``).
* A **role** holds its options and the roles granted to it (``member_of``). What a role may do
  is the union of its own permissions and those of every role granted to it, transitively
  (``granted_roles``); a superuser anywhere in that closure may do everything.
* A check on a resource succeeds if the permission is granted on the resource *or any of its
  parents* (``Unauthorized`` otherwise, in Cassandra's words).
* The SASL PLAIN token (RFC 4616: ``authzid NUL authcid NUL password``) is decoded as
  ``PasswordAuthenticator.decodeCredentials`` does, from the end; ``AuthenticationFailed``
  (0x0100) for every malformed token.
* Password hashes are bcrypt, salted, from the ``bcrypt`` library (never hand-rolled), at
  Cassandra's default cost (``auth_bcrypt_gensalt_log2_rounds`` = 10). bcrypt reads at most
  72 bytes of a password (jBCrypt, which Cassandra uses, ignores the rest too); the library
  refuses longer ones, so they are cut to 72 bytes here, the same for hashing and checking.
* A hash given as it is (``HASHED PASSWORD``, Cassandra 4.1: the password never crosses the
  wire) must be a bcrypt hash (``$2a$``, ``$2b$`` or ``$2y$``, what jBCrypt and ``bcrypt``
  make), at most ``MAX_HASHED_PASSWORD_ROUNDS`` of cost: every login as that role checks it,
  and a cost of 31 would hold a login worker for days.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import bcrypt

from ringflow.cql._exec_common import Unauthorized
from ringflow.errors import ClientError, ErrorCode, InvalidRequest

BCRYPT_ROUNDS = 10
"""Cassandra's ``auth_bcrypt_gensalt_log2_rounds`` default."""
BCRYPT_MAX_PASSWORD_BYTES = 72
MAX_HASHED_PASSWORD_ROUNDS = 16
"""A ``HASHED PASSWORD``'s bcrypt cost at most this (2**16 rounds, ~64 times the default's)."""
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
DEFAULT_SUPERUSER = "cassandra"
"""The role Cassandra creates on first start of an auth-enabled cluster (password the same)."""
PASSWORD_AUTHENTICATOR = "org.apache.cassandra.auth.PasswordAuthenticator"
MAX_ROLE_DEPTH = 64
"""Roles followed through ``member_of`` at most this deep (a bound on a corrupt graph)."""


class AuthenticationFailed(ClientError):
    """Bad credentials or a malformed SASL token (0x0100 AuthenticationException)."""

    code = ErrorCode.AUTHENTICATION_ERROR


class Permission(enum.Enum):
    """Cassandra's ``Permission`` enum, in its declaration order (LIST PERMISSIONS sorts so)."""

    CREATE = "CREATE"
    ALTER = "ALTER"
    DROP = "DROP"
    SELECT = "SELECT"
    MODIFY = "MODIFY"
    AUTHORIZE = "AUTHORIZE"
    DESCRIBE = "DESCRIBE"
    EXECUTE = "EXECUTE"


_ORDER = {permission: index for index, permission in enumerate(Permission)}
_KEYSPACE_LEVEL = frozenset(
    {
        Permission.CREATE,
        Permission.ALTER,
        Permission.DROP,
        Permission.SELECT,
        Permission.MODIFY,
        Permission.AUTHORIZE,
    }
)
_TABLE_LEVEL = _KEYSPACE_LEVEL - {Permission.CREATE}
_ALL_ROLES_LEVEL = frozenset(
    {
        Permission.CREATE,
        Permission.ALTER,
        Permission.DROP,
        Permission.AUTHORIZE,
        Permission.DESCRIBE,
    }
)
_ROLE_LEVEL = frozenset({Permission.ALTER, Permission.DROP, Permission.AUTHORIZE})


def sorted_permissions(permissions: Iterable[Permission]) -> list[Permission]:
    return sorted(permissions, key=_ORDER.__getitem__)


@dataclass(frozen=True, slots=True, order=True)
class Resource:
    """``data[/ks[/table]]`` or ``roles[/role]`` (``parts`` after the root word)."""

    root: str
    parts: tuple[str, ...] = ()

    @classmethod
    def all_keyspaces(cls) -> Resource:
        return cls("data")

    @classmethod
    def keyspace(cls, keyspace: str) -> Resource:
        return cls("data", (keyspace,))

    @classmethod
    def table(cls, keyspace: str, table: str) -> Resource:
        return cls("data", (keyspace, table))

    @classmethod
    def all_roles(cls) -> Resource:
        return cls("roles")

    @classmethod
    def role(cls, role: str) -> Resource:
        return cls("roles", (role,))

    @classmethod
    def from_name(cls, name: str) -> Resource:
        """The resource a ``role_permissions.resource`` value names."""
        root, *parts = name.split("/")
        return cls(root, tuple(parts))

    @property
    def name(self) -> str:
        """The stored form (``role_permissions.resource``): ``data/ks/t``."""
        return "/".join((self.root, *self.parts))

    @property
    def parent(self) -> Resource | None:
        return None if not self.parts else Resource(self.root, self.parts[:-1])

    def chain(self) -> list[Resource]:
        """This resource, then each parent up to the root."""
        found: list[Resource] = []
        resource: Resource | None = self
        while resource is not None:
            found.append(resource)
            resource = resource.parent
        return found

    def applicable_permissions(self) -> frozenset[Permission]:
        if self.root == "data":
            return _TABLE_LEVEL if len(self.parts) == 2 else _KEYSPACE_LEVEL
        return _ROLE_LEVEL if self.parts else _ALL_ROLES_LEVEL

    def __str__(self) -> str:
        if self.root == "data":
            if not self.parts:
                return "<all keyspaces>"
            if len(self.parts) == 1:
                return f"<keyspace {self.parts[0]}>"
            return f"<table {self.parts[0]}.{self.parts[1]}>"
        return f"<role {self.parts[0]}>" if self.parts else "<all roles>"


@dataclass(frozen=True, slots=True)
class RoleRecord:
    """One ``system_auth.roles`` row."""

    name: str
    is_superuser: bool = False
    can_login: bool = False
    member_of: frozenset[str] = frozenset()
    salted_hash: str | None = None


RoleLookup = Callable[[str], RoleRecord | None]
PermissionLookup = Callable[[str], Mapping[Resource, frozenset[Permission]]]


def granted_roles(role: str, lookup: RoleLookup, *, recursive: bool = True) -> list[RoleRecord]:
    """``role`` and every role granted to it (transitively unless not ``recursive``), each
    once, breadth first; roles that no longer exist are skipped (a dangling grant)."""
    root = lookup(role)
    if root is None:
        return []
    found: dict[str, RoleRecord] = {role: root}
    frontier = sorted(root.member_of)
    for _depth in range(MAX_ROLE_DEPTH if recursive else 1):
        following: list[str] = []
        for name in frontier:
            if name in found or (record := lookup(name)) is None:
                continue
            found[name] = record
            following.extend(sorted(record.member_of))
        if not following:
            break
        frontier = following
    return list(found.values())


def is_superuser(role: str, lookup: RoleLookup) -> bool:
    return any(record.is_superuser for record in granted_roles(role, lookup))


@dataclass(frozen=True, slots=True)
class AuthorizedUser:
    """The logged-in role of a connection and how to look up roles and permissions."""

    name: str
    roles: RoleLookup = field(repr=False, compare=False)
    permissions: PermissionLookup = field(repr=False, compare=False)

    def is_superuser(self) -> bool:
        return is_superuser(self.name, self.roles)

    def has_permission(self, permission: Permission, resource: Resource) -> bool:
        """Granted on ``resource`` or a parent, to this role or one granted to it."""
        chain = resource.chain()
        for record in granted_roles(self.name, self.roles):
            if record.is_superuser:
                return True
            granted = self.permissions(record.name)
            if any(permission in granted.get(level, frozenset()) for level in chain):
                return True
        return False

    def require(self, permission: Permission, resource: Resource) -> None:
        if not self.has_permission(permission, resource):
            raise Unauthorized(
                f"User {self.name} has no {permission.value} permission on {resource} "
                "or any of its parents"
            )


# --- SASL PLAIN and passwords --------------------------------------------------------------------


def decode_plain_token(token: bytes | None) -> tuple[str, str]:
    """``(username, password)`` from a SASL PLAIN token, as ``PasswordAuthenticator`` reads it
    (from the end: the last NUL ends the user, the one before it the authzid)."""
    if token is None:
        raise AuthenticationFailed("Password must not be null")
    password: bytes | None = None
    user: bytes | None = None
    end = len(token)
    index = token.rfind(b"\x00", 0, end)
    while index >= 0:
        if password is None:
            password = token[index + 1 : end]
        elif user is None:
            user = token[index + 1 : end]
        else:
            raise AuthenticationFailed(
                "Credential format error: username or password is empty or contains "
                "NUL(\\0) character"
            )
        end = index
        index = token.rfind(b"\x00", 0, end)
    if not password:
        raise AuthenticationFailed("Password must not be null")
    if not user:
        raise AuthenticationFailed("Authentication ID must not be null")
    try:
        return user.decode("utf-8"), password.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed("Credentials are not valid UTF-8") from None


def encode_plain_token(username: str, password: str) -> bytes:
    """The token a client sends (the Python driver's ``PlainTextAuthenticator``)."""
    return b"\x00" + username.encode() + b"\x00" + password.encode()


def _password_bytes(password: str) -> bytes:
    return password.encode("utf-8")[:BCRYPT_MAX_PASSWORD_BYTES]


def hash_password(password: str, *, rounds: int = BCRYPT_ROUNDS) -> str:
    """A salted bcrypt hash (``$2b$10$...``) as stored in ``roles.salted_hash``."""
    return bcrypt.hashpw(_password_bytes(password), bcrypt.gensalt(rounds)).decode("ascii")


def check_password(password: str, salted_hash: str | None) -> bool:
    """Whether ``password`` matches; a missing or malformed hash never matches (Cassandra)."""
    if not salted_hash:
        return False
    try:
        return bcrypt.checkpw(_password_bytes(password), salted_hash.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        return False


def checked_hashed_password(
    salted_hash: str, *, max_rounds: int = MAX_HASHED_PASSWORD_ROUNDS
) -> str:
    """``salted_hash`` if it is a bcrypt hash of an acceptable cost (module docstring); else
    InvalidRequest in Cassandra's words."""
    match = _BCRYPT_HASH.fullmatch(salted_hash)
    if match is None or not 4 <= int(match.group(1)) <= 31:
        raise InvalidRequest("Invalid hashed password value. Please use jBcrypt.")
    if int(match.group(1)) > max_rounds:
        raise InvalidRequest(
            f"Invalid hashed password value: its cost {int(match.group(1))} is above "
            f"{max_rounds} (every login checks it)"
        )
    return salted_hash


def incorrect_credentials(username: str) -> AuthenticationFailed:
    return AuthenticationFailed(f"Provided username {username} and/or password are incorrect")
