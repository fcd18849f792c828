"""Parsing of role, user and permission statements (Cassandra's ``Parser.g``, re-expressed).

Grammar (CQL.textile "Database Roles", "Database Users", "Data Control"):

* ``CREATE ROLE [IF NOT EXISTS] r [WITH opt = v AND ..]``, options ``PASSWORD = 'p'``,
  ``HASHED PASSWORD = '$2a$..'`` (Cassandra 4.1), ``LOGIN = bool``, ``SUPERUSER = bool``,
  ``OPTIONS = {..}``; ``ALTER ROLE r WITH ..``;
  ``DROP ROLE [IF EXISTS] r``;
* the legacy user forms cqlsh still sends: ``CREATE USER [IF NOT EXISTS] u [WITH [HASHED]
  PASSWORD 'p'] [SUPERUSER | NOSUPERUSER]``, ``ALTER USER u [WITH [HASHED] PASSWORD 'p']
  [SUPERUSER | NOSUPERUSER]``,
  ``DROP USER [IF EXISTS] u``, ``LIST USERS``;
* ``GRANT r TO r2``, ``REVOKE r FROM r2``; ``GRANT perm | ALL [PERMISSIONS] ON resource TO r``,
  ``REVOKE .. ON resource FROM r``; ``LIST ROLES [OF r] [NORECURSIVE]``;
  ``LIST perm | ALL [PERMISSIONS] [ON resource] [OF r] [NORECURSIVE]``;
* a resource is ``ALL KEYSPACES``, ``KEYSPACE ks``, ``[TABLE] [ks.]t``, ``ALL ROLES`` or
  ``ROLE r``; a role name is an identifier (lower-cased), a quoted name or a string (kept as
  written). ``GRANT select TO r`` grants a *role* named select only if no ``ON`` follows a
  permission word, which is how Cassandra's grammar resolves it too (permissions are keywords).
"""

from __future__ import annotations

from ringflow.cql._ast_auth import (
    AlterRoleStatement,
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
from ringflow.cql._auth_model import Permission
from ringflow.cql._lexer import TokenKind
from ringflow.cql._parse_core import Cursor, parse_identifier, parse_if_exists, parse_if_not_exists

_PERMISSION_WORDS = frozenset(permission.value.lower() for permission in Permission) | {"all"}
ROLE_WORDS = ("role", "user")


def parse_role_name(cursor: Cursor) -> str:
    token = cursor.peek()
    if token.kind in (TokenKind.STRING, TokenKind.QUOTED_NAME):
        cursor.advance()
        return token.value
    return parse_identifier(cursor, "a role name")


def _parse_bool(cursor: Cursor, option: str) -> bool:
    token = cursor.peek()
    if token.kind is not TokenKind.BOOLEAN:
        raise cursor.fail(f"expected true or false for {option.upper()}")
    cursor.advance()
    return token.value == "true"


def _parse_role_options(cursor: Cursor) -> RoleOptions:
    values: dict[str, object] = {}
    while True:
        token = cursor.peek()
        word = token.value if token.kind is TokenKind.IDENT else ""
        if word not in ("password", "hashed", "login", "superuser", "options"):
            raise cursor.fail("expected PASSWORD, HASHED PASSWORD, LOGIN, SUPERUSER or OPTIONS")
        cursor.advance()
        if word == "hashed":
            cursor.expect_word("password")
            word = "hashed password"
        if word in values:
            raise cursor.fail(f"expected each role option once, but {word.upper()} is repeated")
        cursor.expect_symbol("=")
        if word == "password":
            values[word] = _parse_string(cursor, "a password string")
        elif word == "hashed password":
            values[word] = _parse_string(cursor, "a bcrypt hash string")
        elif word == "options":
            _skip_map(cursor)
            values[word] = True
        else:
            values[word] = _parse_bool(cursor, word)
        if not cursor.accept_word("and"):
            break
    return RoleOptions(
        password=values.get("password"),  # type: ignore[arg-type]
        login=values.get("login"),  # type: ignore[arg-type]
        superuser=values.get("superuser"),  # type: ignore[arg-type]
        options_given="options" in values,
        hashed_password=values.get("hashed password"),  # type: ignore[arg-type]
    )


def _parse_string(cursor: Cursor, what: str) -> str:
    token = cursor.peek()
    if token.kind is not TokenKind.STRING:
        raise cursor.fail(f"expected {what}")
    cursor.advance()
    return token.value


def _skip_map(cursor: Cursor) -> None:
    cursor.expect_symbol("{")
    while not cursor.at_symbol("}"):
        if cursor.at_end():
            raise cursor.fail("expected '}'")
        cursor.advance()
    cursor.expect_symbol("}")


def _parse_user_options(cursor: Cursor) -> RoleOptions:
    """``[WITH [HASHED] PASSWORD 'p'] [SUPERUSER | NOSUPERUSER]`` of the legacy user
    statements."""
    password = hashed = None
    if cursor.accept_word("with"):
        if cursor.accept_word("hashed"):
            cursor.expect_word("password")
            hashed = _parse_string(cursor, "a bcrypt hash string")
        else:
            cursor.expect_word("password")
            password = _parse_string(cursor, "a password string")
    superuser = None
    if cursor.accept_word("superuser"):
        superuser = True
    elif cursor.accept_word("nosuperuser"):
        superuser = False
    return RoleOptions(password=password, superuser=superuser, hashed_password=hashed)


def parse_create_role(cursor: Cursor, word: str) -> CreateRoleStatement:
    """After ``CREATE ROLE`` or ``CREATE USER`` (``word``)."""
    if_not_exists = parse_if_not_exists(cursor)
    role = parse_role_name(cursor)
    if word == "user":
        return CreateRoleStatement(role, _parse_user_options(cursor), if_not_exists, True)
    options = _parse_role_options(cursor) if cursor.accept_word("with") else RoleOptions()
    return CreateRoleStatement(role, options, if_not_exists)


def parse_alter_role(cursor: Cursor, word: str) -> AlterRoleStatement:
    role = parse_role_name(cursor)
    if word == "user":
        return AlterRoleStatement(role, _parse_user_options(cursor), True)
    cursor.expect_word("with")
    return AlterRoleStatement(role, _parse_role_options(cursor))


def parse_drop_role(cursor: Cursor, word: str) -> DropRoleStatement:
    if_exists = parse_if_exists(cursor)
    return DropRoleStatement(parse_role_name(cursor), if_exists, word == "user")


def _at_permissions(cursor: Cursor) -> bool:
    """A permission list starts here (a permission word then ON/PERMISSION(S)/OF/end)."""
    if not cursor.at_word(*_PERMISSION_WORDS):
        return False
    return cursor.at_word("on", "permission", "permissions", "of", "norecursive", ahead=1) or (
        cursor.peek(1).kind is TokenKind.EOF or cursor.at_symbol(";", ahead=1)
    )


def _parse_permissions(cursor: Cursor) -> frozenset[Permission] | None:
    if cursor.accept_word("all"):
        cursor.accept_word("permissions")
        return None
    token = cursor.advance()
    try:
        permission = Permission(token.value.upper())
    except ValueError:
        raise cursor.fail("expected a permission", token) from None
    if not cursor.accept_word("permission"):
        cursor.accept_word("permissions")
    return frozenset({permission})


def _parse_resource(cursor: Cursor) -> ResourceName:
    if cursor.accept_word("all"):
        if cursor.accept_word("keyspaces"):
            return ResourceName("all_keyspaces")
        if cursor.accept_word("roles"):
            return ResourceName("all_roles")
        raise cursor.fail("expected KEYSPACES or ROLES after ALL (functions and MBeans are not "
                          "supported)")  # fmt: skip
    if cursor.accept_word("keyspace"):
        return ResourceName("keyspace", name=parse_identifier(cursor, "a keyspace name"))
    if cursor.accept_word("role"):
        return ResourceName("role", name=parse_role_name(cursor))
    cursor.accept_word("table")
    first = parse_identifier(cursor, "a table name")
    if cursor.accept_symbol("."):
        return ResourceName("table", first, parse_identifier(cursor, "a table name"))
    return ResourceName("table", None, first)


def parse_grant(cursor: Cursor) -> GrantRoleStatement | GrantPermissionsStatement:
    cursor.expect_word("grant")
    if _at_permissions(cursor):
        permissions = _parse_permissions(cursor)
        cursor.expect_word("on")
        resource = _parse_resource(cursor)
        cursor.expect_word("to")
        return GrantPermissionsStatement(permissions, resource, parse_role_name(cursor))
    role = parse_role_name(cursor)
    cursor.expect_word("to")
    return GrantRoleStatement(role, parse_role_name(cursor))


def parse_revoke(cursor: Cursor) -> RevokeRoleStatement | RevokePermissionsStatement:
    cursor.expect_word("revoke")
    if _at_permissions(cursor):
        permissions = _parse_permissions(cursor)
        cursor.expect_word("on")
        resource = _parse_resource(cursor)
        cursor.expect_word("from")
        return RevokePermissionsStatement(permissions, resource, parse_role_name(cursor))
    role = parse_role_name(cursor)
    cursor.expect_word("from")
    return RevokeRoleStatement(role, parse_role_name(cursor))


def parse_list(cursor: Cursor) -> ListRolesStatement | ListPermissionsStatement:
    cursor.expect_word("list")
    if cursor.accept_word("users"):
        return ListRolesStatement(users=True)
    if cursor.accept_word("roles"):
        of = parse_role_name(cursor) if cursor.accept_word("of") else None
        return ListRolesStatement(of, not cursor.accept_word("norecursive"))
    if not cursor.at_word(*_PERMISSION_WORDS):
        raise cursor.fail("expected ROLES, USERS, ALL or a permission after LIST")
    permissions = _parse_permissions(cursor)
    resource = _parse_resource(cursor) if cursor.accept_word("on") else None
    of = parse_role_name(cursor) if cursor.accept_word("of") else None
    recursive = not cursor.accept_word("norecursive")
    return ListPermissionsStatement(permissions, resource, of, recursive)
