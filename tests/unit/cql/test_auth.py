"""The pure parts of authentication and authorization (issue 18 part 1): SASL PLAIN decoding,
bcrypt hashes, resources and their permission chains, role resolution through grants, the
expiring cache, role/permission statement parsing, and the processor running role statements
and permission checks over a local store (``AuthService`` on ``LocalDataPlane``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.cql import (
    AuthenticationFailed,
    AuthSettings,
    ExpiringCache,
    Permission,
    Resource,
    RoleRecord,
    decode_plain_token,
    encode_plain_token,
)
from ringflow.cql._ast_auth import (
    GrantPermissionsStatement,
    GrantRoleStatement,
    ListPermissionsStatement,
    ResourceName,
)
from ringflow.cql._auth_model import (
    AuthorizedUser,
    check_password,
    granted_roles,
    hash_password,
)
from ringflow.cql._parser import parse_statement
from ringflow.errors import ErrorCode, SyntaxProblem
from tests.unit.cql._exec_harness import ExecNode


def test_plain_tokens_decode_as_cassandra_reads_them() -> None:
    assert decode_plain_token(encode_plain_token("alice", "pw")) == ("alice", "pw")
    assert decode_plain_token(b"authz\x00alice\x00pw") == ("alice", "pw")
    for token, message in [
        (None, "Password must not be null"),
        (b"", "Password must not be null"),
        (b"no nul", "Password must not be null"),
        (b"\x00alice\x00", "Password must not be null"),
        (b"\x00\x00pw", "Authentication ID must not be null"),
        (b"a\x00b\x00c\x00d", "Credential format error"),
        (b"\x00\xff\x00pw", "not valid UTF-8"),
    ]:
        with pytest.raises(AuthenticationFailed, match=message) as refused:
            decode_plain_token(token)
        assert refused.value.code == ErrorCode.AUTHENTICATION_ERROR


def test_bcrypt_hashes_are_salted_and_checked() -> None:
    first, second = hash_password("secret", rounds=4), hash_password("secret", rounds=4)
    assert first != second and first.startswith("$2b$04$")
    assert check_password("secret", first) and check_password("secret", second)
    assert not check_password("Secret", first)
    assert not check_password("secret", None) and not check_password("secret", "garbage")
    long = "x" * 100  # bcrypt reads 72 bytes, as jBCrypt does
    assert check_password("x" * 72 + "y", hash_password(long, rounds=4))


def test_resources_print_and_chain_as_cassandra() -> None:
    table = Resource.table("ks", "t")
    assert str(table) == "<table ks.t>" and table.name == "data/ks/t"
    assert [str(r) for r in table.chain()] == ["<table ks.t>", "<keyspace ks>", "<all keyspaces>"]
    assert Resource.from_name("data/ks/t") == table
    assert str(Resource.role("r")) == "<role r>" and str(Resource.all_roles()) == "<all roles>"
    assert Permission.CREATE not in table.applicable_permissions()
    assert Permission.CREATE in Resource.keyspace("ks").applicable_permissions()
    assert Permission.DESCRIBE in Resource.all_roles().applicable_permissions()


ROLES = {
    "alice": RoleRecord("alice", can_login=True, member_of=frozenset({"readers"})),
    "readers": RoleRecord("readers", member_of=frozenset({"base", "ghost"})),
    "base": RoleRecord("base"),
    "root": RoleRecord("root", is_superuser=True),
    "boss": RoleRecord("boss", member_of=frozenset({"root"})),
}
PERMISSIONS = {
    "base": {Resource.keyspace("ks"): frozenset({Permission.SELECT})},
    "readers": {Resource.table("ks", "t"): frozenset({Permission.MODIFY})},
}


def _user(name: str) -> AuthorizedUser:
    return AuthorizedUser(name, ROLES.get, lambda role: PERMISSIONS.get(role, {}))


def test_permissions_are_inherited_through_granted_roles_and_parents() -> None:
    assert [r.name for r in granted_roles("alice", ROLES.get)] == ["alice", "readers", "base"]
    assert [r.name for r in granted_roles("alice", ROLES.get, recursive=False)] == [
        "alice",
        "readers",
    ]
    alice = _user("alice")
    assert alice.has_permission(Permission.SELECT, Resource.table("ks", "t"))  # keyspace level
    assert alice.has_permission(Permission.MODIFY, Resource.table("ks", "t"))
    assert not alice.has_permission(Permission.MODIFY, Resource.table("ks", "u"))
    with pytest.raises(Exception, match=r"User alice has no DROP permission on <table ks\.t>"):
        alice.require(Permission.DROP, Resource.table("ks", "t"))
    assert _user("boss").is_superuser()  # through a granted role
    assert _user("boss").has_permission(Permission.DROP, Resource.all_keyspaces())


def test_a_cyclic_grant_graph_terminates() -> None:
    cyclic = {
        "a": RoleRecord("a", member_of=frozenset({"b"})),
        "b": RoleRecord("b", member_of=frozenset({"a"})),
    }
    assert {r.name for r in granted_roles("a", cyclic.get)} == {"a", "b"}


def test_the_cache_expires_after_its_validity_and_is_bounded() -> None:
    now = [0.0]
    loads: list[str] = []

    def load(key: str) -> str | None:
        loads.append(key)
        return None if key == "missing" else key.upper()

    cache: ExpiringCache[str, str] = ExpiringCache(lambda: now[0], validity_ms=2000, max_entries=2)
    assert cache.get("a", load) == "A" and cache.get("a", load) == "A"
    assert loads == ["a"]
    now[0] = 1999
    cache.get("a", load)
    now[0] = 2000
    cache.get("a", load)
    assert loads == ["a", "a"]
    assert cache.get("missing", load) is None and cache.get("missing", load) is None
    assert loads.count("missing") == 2  # a missing role is never cached
    cache.get("b", load)
    cache.get("c", load)
    assert len(cache) == 2
    cache.validate()
    cache.invalidate_all()
    cache.get("c", load)
    assert loads[-1] == "c"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GRANT ALL PERMISSIONS ON KEYSPACE ks TO r",
         GrantPermissionsStatement(None, ResourceName("keyspace", name="ks"), "r")),
        ("GRANT select ON t TO 'R'",
         GrantPermissionsStatement(
             frozenset({Permission.SELECT}), ResourceName("table", None, "t"), "R")),
        ("GRANT \"Readers\" TO alice", GrantRoleStatement("Readers", "alice")),
        ("LIST MODIFY PERMISSION ON ALL KEYSPACES OF r NORECURSIVE",
         ListPermissionsStatement(
             frozenset({Permission.MODIFY}), ResourceName("all_keyspaces"), "r", False)),
    ],
)  # fmt: skip
def test_statements_parse(text: str, expected: object) -> None:
    assert parse_statement(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "CREATE ROLE r WITH LOGIN = 1",
        "CREATE ROLE r WITH PASSWORD = 'a' AND PASSWORD = 'b'",
        "CREATE ROLE r WITH HASHED = 'a'",
        "CREATE ROLE r WITH HASHED PASSWORD = 'a' AND HASHED PASSWORD = 'b'",
        "GRANT SELECT ON ALL FUNCTIONS TO r",
        "LIST FOO",
        "REVOKE r TO x",
    ],
)
def test_bad_statements_are_syntax_errors(text: str) -> None:
    with pytest.raises(SyntaxProblem):
        parse_statement(text)


# --- the processor with auth on a local store ---------------------------------------------------


@pytest.fixture()
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = ExecNode(tmp_path)
    auth = node.processor.enable_auth(
        AuthSettings(authenticate=True, authorize=True, validity_ms=0), lambda: 0.0
    )
    assert auth.setup_default_superuser()
    assert not auth.setup_default_superuser()  # once
    node.session.user = auth.authenticate(encode_plain_token("cassandra", "cassandra"))
    assert auth.default_password_warnings == 1  # logged while the default password is in use
    node.ok("CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', "
            "'replication_factor': 1}")  # fmt: skip
    node.ok("CREATE TABLE ks.t (k int PRIMARY KEY, v int)")
    yield node
    assert node.processor.internal_errors == 0
    node.close()


def _as(node: ExecNode, user: str) -> ExecNode:
    node.session.user = user
    return node


def test_role_statements_and_checks_as_cassandra(node: ExecNode) -> None:
    auth = node.processor.auth
    assert auth is not None
    node.ok("CREATE ROLE alice WITH PASSWORD = 'pw' AND LOGIN = true")
    assert node.error("CREATE ROLE alice").message == "Role alice already exists"
    node.ok("CREATE ROLE IF NOT EXISTS alice")
    assert node.ok("LIST ROLES") == [
        ("alice", False, True, {}),
        ("cassandra", True, True, {}),
    ]
    with pytest.raises(AuthenticationFailed, match="Provided username alice and/or password"):
        auth.authenticate(encode_plain_token("alice", "nope"))
    assert auth.authenticate(encode_plain_token("alice", "pw")) == "alice"
    node.ok("CREATE ROLE readers")
    with pytest.raises(AuthenticationFailed, match="readers is not permitted to log in"):
        node.ok("ALTER ROLE readers WITH PASSWORD = 'x'")
        auth.authenticate(encode_plain_token("readers", "x"))
    node.ok("GRANT SELECT ON KEYSPACE ks TO readers")
    node.ok("GRANT readers TO alice")
    assert node.error("GRANT alice TO readers").message == "alice is a member of readers"
    assert node.ok("LIST ALL PERMISSIONS OF alice") == [
        ("readers", "readers", "<keyspace ks>", "SELECT")
    ]
    assert node.ok("LIST ALL PERMISSIONS OF alice NORECURSIVE") == []
    error = node.error("GRANT CREATE ON TABLE ks.t TO alice")
    assert (
        error.message
        == "Resource type DataResource does not support the requested permissions: CREATE"
    )
    assert node.error("GRANT SELECT ON ks.nope TO alice").message == (
        "Resource <table ks.nope> doesn't exist"
    )

    _as(node, "alice")
    assert node.ok("SELECT * FROM ks.t") == []
    refused = node.error("INSERT INTO ks.t (k, v) VALUES (1, 1)")
    assert refused.code == ErrorCode.UNAUTHORIZED
    assert (
        refused.message
        == "User alice has no MODIFY permission on <table ks.t> or any of its parents"
    )
    assert node.ok("SELECT keyspace_name FROM system_schema.keyspaces")  # driver metadata
    assert node.error("CREATE ROLE eve").code == ErrorCode.UNAUTHORIZED
    assert node.error("CALL NodeOps.repair('ks', [], true)").code == ErrorCode.UNAUTHORIZED
    assert node.error("LIST ROLES OF cassandra").code == ErrorCode.UNAUTHORIZED
    assert [row[0] for row in node.ok("LIST ROLES")] == ["alice", "readers"]
    node.ok("ALTER ROLE alice WITH PASSWORD = 'new'")  # one's own password
    assert node.error("ALTER ROLE alice WITH SUPERUSER = true").code == ErrorCode.UNAUTHORIZED

    _as(node, "cassandra")
    node.ok("REVOKE readers FROM alice")
    assert node.error("REVOKE readers FROM alice").message == "alice is not a member of readers"
    node.ok("GRANT CREATE ON ALL KEYSPACES TO alice")
    _as(node, "alice")
    assert node.error("SELECT * FROM ks.t").code == ErrorCode.UNAUTHORIZED
    node.ok("CREATE KEYSPACE mine WITH replication = {'class': 'SimpleStrategy', "
            "'replication_factor': 1}")  # fmt: skip
    node.ok("CREATE TABLE mine.t (k int PRIMARY KEY) WITH cdc = {'enabled': true}")
    node.ok("INSERT INTO mine.t (k) VALUES (1)")  # the creator got ALL on it
    assert len(node.ok("SELECT * FROM mine.t_scylla_cdc_log")) == 1  # follows its base table

    _as(node, "cassandra")
    node.ok("DROP KEYSPACE mine")  # its grants go with it: a new "mine" starts with none
    assert [row[2] for row in node.ok("LIST ALL PERMISSIONS OF alice")] == ["<all keyspaces>"]
    node.ok("DROP ROLE alice")
    assert node.error("DROP ROLE alice").message == "alice doesn't exist"
    node.ok("DROP ROLE IF EXISTS alice")
    assert node.error("DROP ROLE cassandra").message == "Cannot DROP primary role for current login"


def test_legacy_user_statements(node: ExecNode) -> None:
    node.ok("CREATE USER bob WITH PASSWORD 'pw' NOSUPERUSER")
    assert node.error("CREATE USER bob").message == "User bob already exists"
    node.ok("ALTER USER bob WITH PASSWORD 'pw2' SUPERUSER")
    assert node.ok("LIST USERS") == [("bob", True), ("cassandra", True)]
    node.ok("DROP USER IF EXISTS bob")
    assert node.ok("LIST USERS") == [("cassandra", True)]


def test_hashed_passwords_as_cassandra_4_1(node: ExecNode) -> None:
    """``HASHED PASSWORD`` stores a bcrypt hash as given (jBCrypt's ``$2a$`` or ``$2b$``), so
    the password never crosses the wire; Cassandra's messages for a bad hash and for both
    options; a cost above the limit is refused (each login pays it)."""
    auth = node.processor.auth
    assert auth is not None
    hashed = hash_password("hunter2", rounds=4).replace("$2b$", "$2a$", 1)  # jBCrypt's form
    bad = node.error("CREATE ROLE h WITH LOGIN = true AND HASHED PASSWORD = 'not_a_hash'")
    assert bad.code == ErrorCode.INVALID
    assert bad.message == "Invalid hashed password value. Please use jBcrypt."
    both = f"CREATE ROLE h WITH LOGIN = true AND PASSWORD = 'x' AND HASHED PASSWORD = '{hashed}'"
    assert node.error(both).message == (
        "Options 'password' and 'hashed password' are mutually exclusive"
    )
    costly = "$2b$17$" + hashed[7:]
    refused = node.error(f"CREATE ROLE h WITH LOGIN = true AND HASHED PASSWORD = '{costly}'")
    assert refused.code == ErrorCode.INVALID and "its cost 17 is above 16" in refused.message
    node.ok(f"CREATE ROLE h WITH LOGIN = true AND HASHED PASSWORD = '{hashed}'")
    assert auth.authenticate(encode_plain_token("h", "hunter2")) == "h"
    node.ok(f"ALTER ROLE h WITH HASHED PASSWORD = '{hash_password('other', rounds=4)}'")
    with pytest.raises(AuthenticationFailed):
        auth.authenticate(encode_plain_token("h", "hunter2"))
    assert auth.authenticate(encode_plain_token("h", "other")) == "h"
    node.ok(f"CREATE USER u WITH HASHED PASSWORD '{hashed}' NOSUPERUSER")
    assert auth.authenticate(encode_plain_token("u", "hunter2")) == "u"
    assert node.error(f"ALTER USER u WITH HASHED PASSWORD '{costly}'").code == ErrorCode.INVALID


def test_without_auth_role_statements_are_invalid(tmp_path: Path) -> None:
    node = ExecNode(tmp_path)
    error = node.error("GRANT SELECT ON ks.t TO r")
    assert error.code == ErrorCode.INVALID and "PasswordAuthenticator" in error.message
    node.close()
