"""Errors: every failure is the right protocol error, and nothing but a bug is a ServerError.

Proves: each error class maps to its code with a message naming what is wrong (syntax errors
with line:column, unknown keyspace/table/column, the column of a badly typed value, the missing
key parts, AlreadyExists with keyspace and table, Unprepared with the id, CDC rejections,
bad replication as ConfigurationError, system keyspaces as Unauthorized); an unexpected
exception becomes ServerError 0x0000 and is counted; and a property test: statements built
from a grammar of valid and invalid pieces, run in any order with any bound values, never
produce a ServerError (``internal_errors`` stays 0).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringflow.cql._error_mapping import response_for_error
from ringflow.cql._error_responses import (
    AlreadyExistsResponse,
    ErrorResponse,
    ReadFailureResponse,
    UnpreparedResponse,
)
from ringflow.cql._exec_common import UnpreparedStatement
from ringflow.cql._wire import UNSET, CqlValue
from ringflow.errors import ErrorCode, InternalError
from ringflow.storage import TooManyTombstones
from tests.unit.cql._exec_harness import START_US, ExecNode, node_with_keyspace


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TABLE t (k int, c int, v text, PRIMARY KEY (k, c))")
    yield node
    node.close()


ERROR_CASES = [
    ("SELECT * FRM t", ErrorCode.SYNTAX_ERROR, r"^line 1:9 .*got 'FRM'"),
    ("SELECT *\nFROM t WHERE", ErrorCode.SYNTAX_ERROR, r"^line 2:\d+ "),
    ("SELECT * FROM nope.t", ErrorCode.INVALID, r"Keyspace nope does not exist"),
    ("SELECT * FROM nope", ErrorCode.INVALID, r"^unconfigured table nope$"),
    ("SELECT nope FROM t", ErrorCode.INVALID, r"undefined column name 'nope'"),
    ("INSERT INTO t (k, c, v) VALUES (1, 1, 5)", ErrorCode.INVALID, r'"v" of type text'),
    ("INSERT INTO t (k, c, v) VALUES (1, 99999999999, 'a')", ErrorCode.INVALID, r"'c'"),
    ("INSERT INTO t (k, v) VALUES (1, 'a')", ErrorCode.INVALID, r"clustering keys are missing: c"),
    ("UPDATE t SET v = 'a' WHERE c = 1", ErrorCode.INVALID, r"partition key parts are missing: k"),
    ("CREATE KEYSPACE k2 WITH replication = {'class': 'SimpleStrategy', "
     "'replication_factor': 'x'}", ErrorCode.CONFIG_ERROR, r"replication_factor"),
    ("DROP TABLE system.local", ErrorCode.UNAUTHORIZED, r"not user-modifiable"),
    ("SELECT * FROM system.peers_v2", ErrorCode.INVALID, r"^unconfigured table peers_v2$"),
    (f"INSERT INTO t (k, c) VALUES (1, 1) USING TIMESTAMP {START_US * 2}",
     ErrorCode.INVALID, r'"from the future"'),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "code", "pattern"), ERROR_CASES)
def test_error_codes_and_messages(
    node: ExecNode, statement: str, code: ErrorCode, pattern: str
) -> None:
    if "TIMESTAMP" in statement:
        node.ok("ALTER TABLE t WITH cdc = {'enabled': true}")
    error = node.error(statement)
    assert isinstance(error, ErrorResponse)
    assert error.code == code
    assert re.search(pattern, error.message), error.message
    assert node.processor.internal_errors == 0


def test_already_exists_carries_keyspace_and_table(node: ExecNode) -> None:
    keyspace = node.error(
        "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    assert isinstance(keyspace, AlreadyExistsResponse)
    assert (keyspace.keyspace, keyspace.table) == ("ks", "")
    table = node.error("CREATE TABLE t (k int PRIMARY KEY)")
    assert isinstance(table, AlreadyExistsResponse)
    assert (table.code, table.keyspace, table.table) == (ErrorCode.ALREADY_EXISTS, "ks", "t")


def test_unprepared_carries_the_id(node: ExecNode) -> None:
    response = node.execute(b"\xab" * 16)
    assert isinstance(response, UnpreparedResponse)
    assert response.statement_id == b"\xab" * 16 and "not found" in response.message


def test_unexpected_exceptions_are_server_errors_and_counted(
    node: ExecNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(node.store, "read_partition", broken)
    error = node.error("SELECT * FROM t WHERE k = 1")
    assert (error.code, node.processor.internal_errors) == (ErrorCode.SERVER_ERROR, 1)
    assert "ZeroDivisionError" in error.message
    monkeypatch.setattr(
        node.store, "read_partition", lambda *a, **k: (_ for _ in ()).throw(InternalError("x"))
    )
    assert node.error("SELECT * FROM t WHERE k = 1").code == ErrorCode.SERVER_ERROR
    assert node.processor.internal_errors == 2


def test_error_response_mapping() -> None:
    response, internal = response_for_error(TooManyTombstones("too many"))
    assert isinstance(response, ReadFailureResponse) and not internal
    response, internal = response_for_error(UnpreparedStatement(b"\x01"))
    assert isinstance(response, UnpreparedResponse) and not internal
    response, internal = response_for_error(KeyError("x"))
    assert isinstance(response, ErrorResponse) and response.code == ErrorCode.SERVER_ERROR
    assert internal


# --- the property: no statement is a ServerError -------------------------------------------------

COLUMNS = ["k", "c", "v", "n", "l", "s", "m", "u", "st", "ts", "nope"]
VALUES = [
    "1", "-1", "'a'", "''", "null", "?", "[1, 2]", "{'x'}", "{'a': 1}", "{}", "[]", "(1, 2)",
    "{a: 1, b: 'x'}", "3.5", "1e400", "99999999999999999999", "0x00", "true", "now()", "uuid()",
    "'2024-01-01'", "minTimeuuid('2024-01-01')", "token(1)", "toTimestamp(now())", "1h30m",
    "{'a': null}", "[null]", "(int) 1",
]  # fmt: skip
TABLES = ["t", "f", "f_scylla_cdc_log", "system.local", "system_schema.columns", "nope",
          "system_distributed.cdc_generation_timestamps"]  # fmt: skip
OPERATORS = ["=", "<", ">=", "IN", "!=", "CONTAINS", "CONTAINS KEY"]
SELECTORS = [
    "*",
    "k, c",
    "count(*)",
    "writetime(v), ttl(n)",
    "token(k)",
    "max(n), min(v)",
    "DISTINCT k",
    "u.a",
    "cast(n as text)",
    "sum(n), avg(n)",
    "toDate(ts)",
    "l",
    "now()",
]
TAILS = [
    "",
    " LIMIT 2",
    " LIMIT ?",
    " ALLOW FILTERING",
    " ORDER BY c DESC",
    " PER PARTITION LIMIT 1",
    " BYPASS CACHE",
]
ASSIGNMENTS = [
    "v = {}",
    "l = l + {}",
    "l = {} + l",
    "s = s - {}",
    "m[{}] = {}",
    "l[{}] = {}",
    "u.a = {}",
    "n = n + 1",
    "st = {}",
    "k = {}",
    "m = m + {}",
]
OTHERS = [
    "ALTER TABLE f ADD x int", "ALTER TABLE f DROP x", "ALTER TABLE f WITH cdc = {'enabled': true}",
    "ALTER TABLE f WITH cdc = {'enabled': false}",
    "CREATE TABLE IF NOT EXISTS g (a int PRIMARY KEY)",
    "DROP TABLE IF EXISTS g", "TRUNCATE f", "CREATE TYPE IF NOT EXISTS w (x int)", "DROP TYPE w",
    "USE ks", "USE nope", "ALTER KEYSPACE ks WITH durable_writes = false",
    "BEGIN BATCH INSERT INTO f (k, v) VALUES (1, 2); UPDATE t SET v = 'a' WHERE k = ? AND c = 1; "
    "APPLY BATCH",
]  # fmt: skip

terms = st.sampled_from(VALUES)


@st.composite
def relations(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return f"token(k) {draw(st.sampled_from(OPERATORS[:3]))} {draw(terms)}"
    if kind == 1:
        return f"(c, n) {draw(st.sampled_from(OPERATORS[:4]))} ({draw(terms)}, {draw(terms)})"
    operator = draw(st.sampled_from(OPERATORS))
    value = f"({draw(terms)}, {draw(terms)})" if operator == "IN" and kind < 7 else draw(terms)
    return f"{draw(st.sampled_from(COLUMNS))} {operator} {value}"


@st.composite
def statements(draw: st.DrawFn) -> str:
    table = draw(st.sampled_from(TABLES))
    where = draw(st.lists(relations(), max_size=4))
    where_text = (" WHERE " + " AND ".join(where)) if where else ""
    kind = draw(st.integers(0, 4))
    if kind == 0:
        selection, tail = draw(st.sampled_from(SELECTORS)), draw(st.sampled_from(TAILS))
        return f"SELECT {selection} FROM {table}{where_text}{tail}"
    if kind == 1:
        columns = draw(st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=5))
        values = ", ".join(draw(terms) for _ in columns)
        using = draw(st.sampled_from(["", " USING TTL 5", " USING TTL ?", " USING TIMESTAMP ?"]))
        return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values}){using}"
    if kind == 2:
        template = draw(st.sampled_from(ASSIGNMENTS))
        assignment = template.format(*(draw(terms) for _ in range(template.count("{}"))))
        return f"UPDATE {table} SET {assignment}{where_text or ' WHERE k = 1 AND c = 1'}"
    if kind == 3:
        target = draw(st.sampled_from(["", "v", "l[0]", "m['a']", "u.b", "s[1]", "k", "st"]))
        return f"DELETE {target} FROM {table}{where_text}"
    return draw(st.sampled_from(OTHERS))


bound_values = st.lists(
    st.sampled_from([b"\x00\x00\x00\x01", b"", b"\xff" * 8, b"abc", None, UNSET]), max_size=12
)


@pytest.fixture(scope="module")
def fuzz_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path_factory.mktemp("fuzz"))
    node.ok("CREATE TYPE ut (a int, b text)")
    node.ok(
        "CREATE TABLE f (k int, c int, v text, n bigint, l list<int>, s set<int>, "
        "m map<text, int>, "
        "u ut, st int static, ts timestamp, PRIMARY KEY (k, c)) WITH cdc = {'enabled': true, "
        "'preimage': true, 'postimage': true}"
    )
    node.ok(
        "CREATE TABLE t (k int, c int, v text, n bigint, l frozen<list<int>>, s set<int>, "
        "m map<text, int>, u frozen<ut>, st int static, ts timestamp, PRIMARY KEY (k, c)) "
        "WITH CLUSTERING ORDER BY (c DESC)"
    )
    yield node
    node.close()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(statement=statements(), values=bound_values, page_size=st.sampled_from([None, 1, 5]))
def test_no_statement_is_a_server_error(
    fuzz_node: ExecNode, statement: str, values: list[CqlValue], page_size: int | None
) -> None:
    count = statement.count("?")
    bound = (values * (count // max(len(values), 1) + 1))[:count] if values else [None] * count
    before = fuzz_node.processor.internal_errors
    response = fuzz_node.raw(statement, bound, page_size=page_size)
    assert getattr(response, "code", None) != ErrorCode.SERVER_ERROR, (statement, response)
    assert fuzz_node.processor.internal_errors == before
    if fuzz_node.session.keyspace != "ks":
        fuzz_node.ok("USE ks")
