"""INSERT, UPDATE, DELETE and BATCH through the executor, read back with SELECT.

Proves: every write form stores what CQL says (collections, statics, UDT fields, row and range
deletions), Cassandra's last-write-wins, tombstone and TTL rules hold end to end (ties, delete
at equal timestamp, expiry with an injected clock, default TTL), timestamps come from USING,
then the protocol, then the monotonic clock, and a batch is applied all or nothing.
"""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.cql._requests import Batch, BatchStatement, BatchType
from ringflow.cql._results import VoidResult
from ringflow.cql._wire import UNSET, Consistency
from ringflow.errors import ErrorCode
from ringflow.schema import INT, TEXT, Duration, min_timeuuid
from tests.unit.cql._exec_harness import START_US, ExecNode, node_with_keyspace, value

TABLE = (
    "CREATE TABLE t (k int, c int, v text, n bigint, l list<int>, s set<text>, "
    "m map<text, int>, u addr, st int static, PRIMARY KEY (k, c))"
)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TYPE addr (street text, zip int)")
    node.ok(TABLE)
    yield node
    assert node.processor.internal_errors == 0
    node.close()


def row(
    node: ExecNode, columns: str = "v, n, l, s, m, u, st", where: str = "k = 1 AND c = 1"
) -> object:
    rows = node.ok(f"SELECT {columns} FROM t WHERE {where}")
    return rows[0] if len(rows) == 1 else rows


WRITE_CASES = [
    # (setup statements, the statement under test, selected columns, expected row)
    ([], "INSERT INTO t (k, c, v, n) VALUES (1, 1, 'a', 5)", "v, n", ("a", 5)),
    ([], "INSERT INTO t (k, c, l, s, m) VALUES (1, 1, [3, 1], {'b', 'a'}, {'x': 1})",
     "l, s, m", ([3, 1], frozenset({"a", "b"}), {"x": 1})),
    ([], "INSERT INTO t (k, c, u) VALUES (1, 1, {street: 'main', zip: 7})",
     "u", ({"street": "main", "zip": 7},)),
    (["INSERT INTO t (k, c, l) VALUES (1, 1, [1])"],
     "UPDATE t SET l = l + [2, 3] WHERE k = 1 AND c = 1",
     "l", ([1, 2, 3],)),
    (["INSERT INTO t (k, c, l) VALUES (1, 1, [1])"],
     "UPDATE t SET l = [7, 8] + l WHERE k = 1 AND c = 1",
     "l", ([7, 8, 1],)),
    (["INSERT INTO t (k, c, l) VALUES (1, 1, [1, 2, 1, 3])"],
     "UPDATE t SET l = l - [1] WHERE k = 1 AND c = 1", "l", ([2, 3],)),
    (["INSERT INTO t (k, c, l) VALUES (1, 1, [1, 2, 3])"],
     "UPDATE t SET l[1] = 9 WHERE k = 1 AND c = 1",
     "l", ([1, 9, 3],)),
    (["INSERT INTO t (k, c, l) VALUES (1, 1, [1, 2, 3])"],
     "DELETE l[0] FROM t WHERE k = 1 AND c = 1",
     "l", ([2, 3],)),
    (["INSERT INTO t (k, c, l) VALUES (1, 1, [1, 2])"],
     "UPDATE t SET l = [5] WHERE k = 1 AND c = 1",
     "l", ([5],)),
    (["INSERT INTO t (k, c, s) VALUES (1, 1, {'a', 'b'})"],
     "UPDATE t SET s = s + {'c'}, s = s - {'a'} WHERE k = 1 AND c = 1", "s",
     (frozenset({"b", "c"}),)),
    (["INSERT INTO t (k, c, m) VALUES (1, 1, {'a': 1, 'b': 2})"],
     "UPDATE t SET m['c'] = 3, m = m - {'a'} WHERE k = 1 AND c = 1", "m", ({"b": 2, "c": 3},)),
    (["INSERT INTO t (k, c, m) VALUES (1, 1, {'a': 1})"],
     "UPDATE t SET m = m + {'z': 26} WHERE k = 1 AND c = 1", "m", ({"a": 1, "z": 26},)),
    (["INSERT INTO t (k, c, m) VALUES (1, 1, {'a': 1, 'b': 2})"],
     "DELETE m['a'] FROM t WHERE k = 1 AND c = 1", "m", ({"b": 2},)),
    (["INSERT INTO t (k, c, s) VALUES (1, 1, {'a', 'b'})"],
     "DELETE s['a'] FROM t WHERE k = 1 AND c = 1", "s", (frozenset({"b"}),)),
    (["INSERT INTO t (k, c, m) VALUES (1, 1, {'a': 1})"],
     "UPDATE t SET m = {} WHERE k = 1 AND c = 1",
     "m", (None,)),
    (["INSERT INTO t (k, c, u) VALUES (1, 1, {street: 'a', zip: 1})"],
     "UPDATE t SET u.zip = 2 WHERE k = 1 AND c = 1", "u", ({"street": "a", "zip": 2},)),
    (["INSERT INTO t (k, c, u) VALUES (1, 1, {street: 'a', zip: 1})"],
     "DELETE u.street FROM t WHERE k = 1 AND c = 1", "u", ({"street": None, "zip": 1},)),
    (["INSERT INTO t (k, c, v, n) VALUES (1, 1, 'a', 1)"],
     "UPDATE t SET v = null WHERE k = 1 AND c = 1",
     "v, n", (None, 1)),
    (["INSERT INTO t (k, c, v, n) VALUES (1, 1, 'a', 1)"], "DELETE v FROM t WHERE k = 1 AND c = 1",
     "v, n", (None, 1)),
    (["INSERT INTO t (k, c, v) VALUES (1, 1, 'a')", "INSERT INTO t (k, c, v) VALUES (1, 2, 'b')"],
     "UPDATE t SET st = 5 WHERE k = 1", "c, st", [(1, 5), (2, 5)]),
    ([], "INSERT INTO t (k, st) VALUES (1, 4)", "k, c, st", (1, None, 4)),
    ([], "UPDATE t SET v = 'x' WHERE k IN (1, 2) AND c IN (1, 2)", "k, c, v",
     [(1, 1, "x"), (1, 2, "x"), (2, 1, "x"), (2, 2, "x")]),
]  # fmt: skip


@pytest.mark.parametrize(("setup", "statement", "columns", "expected"), WRITE_CASES)
def test_write_forms(
    node: ExecNode, setup: list[str], statement: str, columns: str, expected: object
) -> None:
    for text in setup:
        node.ok(text)
    assert isinstance(node.q(statement), VoidResult)
    where = "k = 1 AND c = 1" if "IN (1, 2)" not in statement else "k IN (1, 2)"
    if "st = 5" in statement or "(k, st)" in statement:
        where = "k = 1"
    assert row(node, columns, where) == expected


DELETE_CASES = [
    ("DELETE FROM t WHERE k = 1", []),
    ("DELETE FROM t WHERE k = 1 AND c = 2", [1, 3, 4]),
    ("DELETE FROM t WHERE k = 1 AND c IN (1, 4)", [2, 3]),
    ("DELETE FROM t WHERE k = 1 AND c > 2", [1, 2]),
    ("DELETE FROM t WHERE k = 1 AND c >= 2 AND c < 4", [1, 4]),
    ("DELETE FROM t WHERE k = 1 AND c <= 1", [2, 3, 4]),
]


@pytest.mark.parametrize(("statement", "remaining"), DELETE_CASES)
def test_row_range_and_partition_deletions(
    node: ExecNode, statement: str, remaining: list[int]
) -> None:
    for clustering in (1, 2, 3, 4):
        node.ok(f"INSERT INTO t (k, c, v) VALUES (1, {clustering}, 'x')")
    node.ok("INSERT INTO t (k, c, v) VALUES (2, 1, 'other partition')")
    node.ok(statement)
    assert [r[0] for r in node.ok("SELECT c FROM t WHERE k = 1")] == remaining
    assert node.ok("SELECT v FROM t WHERE k = 2") == [("other partition",)]


def test_range_deletion_over_a_clustering_prefix(node: ExecNode) -> None:
    node.ok("CREATE TABLE r (k int, a int, b int, v int, PRIMARY KEY (k, a, b))")
    for a in (1, 2):
        for b in (1, 2):
            node.ok(f"INSERT INTO r (k, a, b, v) VALUES (0, {a}, {b}, 0)")
    node.ok("DELETE FROM r WHERE k = 0 AND a = 1")
    assert node.ok("SELECT a, b FROM r WHERE k = 0") == [(2, 1), (2, 2)]
    node.ok("DELETE FROM r WHERE k = 0 AND a = 2 AND b > 1")
    assert node.ok("SELECT a, b FROM r WHERE k = 0") == [(2, 1)]


# --- last write wins, tombstones, TTL ------------------------------------------------------------


def test_later_timestamp_wins_regardless_of_arrival_order(node: ExecNode) -> None:
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 1, 'new') USING TIMESTAMP 20")
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 1, 'old') USING TIMESTAMP 10")
    assert node.ok("SELECT v, writetime(v) FROM t WHERE k = 1") == [("new", 20)]


def test_equal_timestamps_greater_value_wins(node: ExecNode) -> None:
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 1, 'b') USING TIMESTAMP 10")
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 1, 'a') USING TIMESTAMP 10")
    assert node.ok("SELECT v FROM t WHERE k = 1") == [("b",)]


def test_delete_shadows_an_insert_at_the_same_timestamp(node: ExecNode) -> None:
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 1, 'a') USING TIMESTAMP 10")
    node.ok("DELETE FROM t USING TIMESTAMP 10 WHERE k = 1 AND c = 1")
    assert node.ok("SELECT * FROM t WHERE k = 1") == []
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 1, 'b') USING TIMESTAMP 11")
    assert node.ok("SELECT v FROM t WHERE k = 1") == [("b",)]
    node.ok("DELETE FROM t USING TIMESTAMP 10 WHERE k = 1")
    assert node.ok("SELECT v FROM t WHERE k = 1") == [("b",)]


def test_update_writes_no_row_marker(node: ExecNode) -> None:
    node.ok("UPDATE t SET v = 'a' WHERE k = 1 AND c = 1")
    node.ok("DELETE v FROM t WHERE k = 1 AND c = 1")
    assert node.ok("SELECT * FROM t WHERE k = 1") == []
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 2, 'a')")
    node.ok("DELETE v FROM t WHERE k = 1 AND c = 2")
    assert node.ok("SELECT c, v FROM t WHERE k = 1") == [(2, None)]


def test_ttl_expires_with_the_clock(node: ExecNode) -> None:
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 1, 'a') USING TTL 10")
    node.ok("UPDATE t USING TTL 100 SET n = 7 WHERE k = 1 AND c = 1")
    assert node.ok("SELECT v, ttl(v), n, ttl(n) FROM t WHERE k = 1") == [("a", 10, 7, 100)]
    node.clock.advance(4)
    assert node.ok("SELECT ttl(v) FROM t WHERE k = 1") == [(6,)]
    node.clock.advance(6)
    assert node.ok("SELECT c, v, n FROM t WHERE k = 1") == [(1, None, 7)]
    node.clock.advance(90)
    assert node.ok("SELECT * FROM t WHERE k = 1") == []


def test_default_time_to_live_and_ttl_zero(node: ExecNode) -> None:
    node.ok("CREATE TABLE e (k int PRIMARY KEY, v int) WITH default_time_to_live = 5")
    node.ok("INSERT INTO e (k, v) VALUES (1, 1)")
    node.ok("INSERT INTO e (k, v) VALUES (2, 2) USING TTL 0")
    assert sorted(node.ok("SELECT k, ttl(v) FROM e")) == [(1, 5), (2, None)]
    node.clock.advance(5)
    assert node.ok("SELECT k FROM e") == [(2,)]


def test_timestamp_sources(node: ExecNode) -> None:
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 1, 'a')")
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 2, 'a')")
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 3, 'a')", timestamp=42)
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 4, 'a') USING TIMESTAMP 7", timestamp=42)
    times = [r[0] for r in node.ok("SELECT writetime(v) FROM t WHERE k = 1")]
    assert times[0] >= START_US and times[1] == times[0] + 1  # monotonic server clock
    assert times[2:] == [42, 7]


def test_unset_values_leave_columns_untouched(node: ExecNode) -> None:
    node.ok("INSERT INTO t (k, c, v, n) VALUES (1, 1, 'a', 1)")
    node.ok(
        "INSERT INTO t (k, c, v, n) VALUES (?, ?, ?, ?)", value(INT, 1), value(INT, 1), UNSET, None
    )
    node.ok("UPDATE t USING TTL ? SET v = ? WHERE k = 1 AND c = 1", UNSET, UNSET)
    assert node.ok("SELECT v, n, ttl(v) FROM t WHERE k = 1") == [("a", None, None)]


WRITE_ERRORS = [
    ("INSERT INTO t (k, v) VALUES (1, 'a')", "Some clustering keys are missing: c"),
    ("INSERT INTO t (c, v) VALUES (1, 'a')", "Some partition key parts are missing: k"),
    (
        "INSERT INTO t (k, c, v) VALUES (1, 1, 2)",
        'Invalid INTEGER constant (2) for "v" of type text',
    ),
    ("INSERT INTO t (k, c, nope) VALUES (1, 1, 2)", "undefined column name 'nope'"),
    (
        "INSERT INTO t (k, c, v, v) VALUES (1, 1, 'a', 'b')",
        "Multiple definitions found for column v",
    ),
    ("INSERT INTO t (k, c) VALUES (null, 1)", "Invalid null value for partition key part k"),
    ("INSERT INTO t (k, c) VALUES (1, 1) USING TTL -1", "A TTL must be greater or equal to 0"),
    ("INSERT INTO t (k, c) VALUES (1, 1) USING TTL 999999999", "ttl is too large"),
    ("INSERT INTO t (k, c) VALUES (1, 1) IF NOT EXISTS", "not supported"),
    ("INSERT INTO t JSON '{}'", "Invalid null value for partition key part k"),
    ("UPDATE t SET v = 'a' WHERE k = 1", "Some clustering keys are missing: c"),
    ("UPDATE t SET v = 'a' WHERE c = 1", "Some partition key parts are missing: k"),
    ("UPDATE t SET k = 2 WHERE k = 1 AND c = 1", "PRIMARY KEY part k found in SET part"),
    ("UPDATE t SET v = 'a' WHERE k = 1 AND c = 1 AND v = 'b'", "Non PRIMARY KEY columns found"),
    ("UPDATE t SET v = 'a' WHERE k = 1 AND c > 1", "Slice restrictions are not supported"),
    ("UPDATE t SET n = n + 1 WHERE k = 1 AND c = 1", "for non counter column n"),
    ("UPDATE t SET l[5] = 1 WHERE k = 1 AND c = 1", "List index 5 out of bound, list has size 0"),
    ("UPDATE t SET v = 'a' WHERE token(k) > 0", "token function cannot be used"),
    ("UPDATE t SET v = 'a' WHERE k = 1 AND c = 1 IF EXISTS", "not supported"),
    ("DELETE k FROM t WHERE k = 1 AND c = 1", "should not be a PRIMARY KEY part"),
    (
        "DELETE v['a'] FROM t WHERE k = 1 AND c = 1",
        "deletion operation for non collection column v",
    ),
    ("DELETE v FROM t WHERE k = 1", "Some clustering keys are missing: c"),
    ("DELETE FROM t WHERE k > 1", "Only EQ and IN relation are supported on the partition key"),
    ("INSERT INTO system.local (key) VALUES ('x')", "system keyspace is not user-modifiable"),
    ("INSERT INTO nope (k) VALUES (1)", "unconfigured table nope"),
]


@pytest.mark.parametrize(("statement", "message"), WRITE_ERRORS)
def test_write_errors(node: ExecNode, statement: str, message: str) -> None:
    error = node.error(statement)
    assert error.code in (ErrorCode.INVALID, ErrorCode.UNAUTHORIZED), error
    assert message in error.message
    assert node.ok("SELECT * FROM t") == []


def test_serial_consistency_is_refused_for_writes(node: ExecNode) -> None:
    error = node.error("INSERT INTO t (k, c) VALUES (1, 1)", consistency=Consistency.SERIAL)
    assert error.code == ErrorCode.INVALID and "serializable" in error.message


# --- batches -------------------------------------------------------------------------------------


def test_text_batch_applies_every_statement_with_one_timestamp(node: ExecNode) -> None:
    node.ok(
        "BEGIN BATCH INSERT INTO t (k, c, v) VALUES (1, 1, 'a'); "
        "UPDATE t SET n = 2 WHERE k = 1 AND c = 1; "
        "INSERT INTO t (k, c, v) VALUES (2, 1, 'b') USING TIMESTAMP 5; APPLY BATCH"
    )
    rows = sorted(node.ok("SELECT k, v, n, writetime(v), writetime(n) FROM t"))
    assert [r[:3] for r in rows] == [(1, "a", 2), (2, "b", None)]
    assert rows[0][3] == rows[0][4] >= START_US
    assert rows[1][3:] == (5, None)


def test_batch_is_all_or_nothing(node: ExecNode) -> None:
    error = node.error(
        "BEGIN BATCH INSERT INTO t (k, c, v) VALUES (1, 1, 'a'); "
        "INSERT INTO t (k, c, v) VALUES (2, 1, 3); APPLY BATCH"
    )
    assert error.code == ErrorCode.INVALID and '"v"' in error.message
    prepared = node.prepare("INSERT INTO t (k, c, v) VALUES (?, ?, ?)")
    good = BatchStatement(prepared.statement_id, (value(INT, 3), value(INT, 1), value(TEXT, "x")))
    bad = BatchStatement(prepared.statement_id, (value(INT, 4), value(INT, 1), b"\xff\xfe"))
    response = node.processor.batch(
        Batch(BatchType.LOGGED, (good, bad), Consistency.ONE), node.session
    )
    assert response.code == ErrorCode.INVALID
    assert node.ok("SELECT * FROM t") == []


def test_batch_message_mixes_text_and_prepared_statements(node: ExecNode) -> None:
    prepared = node.prepare("UPDATE t SET v = ? WHERE k = ? AND c = ?")
    statements = (
        BatchStatement("INSERT INTO t (k, c, n) VALUES (1, 1, 9)"),
        BatchStatement(prepared.statement_id, (value(TEXT, "p"), value(INT, 1), value(INT, 1))),
    )
    batch = Batch(BatchType.UNLOGGED, statements, Consistency.QUORUM, default_timestamp=77)
    assert isinstance(node.processor.batch(batch, node.session), VoidResult)
    assert node.ok("SELECT v, n, writetime(v) FROM t WHERE k = 1") == [("p", 9, 77)]
    unknown = Batch(BatchType.LOGGED, (BatchStatement(b"\x01" * 16),), Consistency.ONE)
    assert node.processor.batch(unknown, node.session).code == ErrorCode.UNPREPARED
    select = Batch(BatchType.LOGGED, (BatchStatement("SELECT * FROM t"),), Consistency.ONE)
    assert node.processor.batch(select, node.session).code == ErrorCode.INVALID


BATCH_ERRORS = [
    "BEGIN COUNTER BATCH UPDATE t SET v = 'a' WHERE k = 1 AND c = 1; APPLY BATCH",
    "BEGIN BATCH USING TIMESTAMP 5 INSERT INTO t (k, c) VALUES (1, 1) USING TIMESTAMP 6; "
    "APPLY BATCH",
]


@pytest.mark.parametrize("statement", BATCH_ERRORS)
def test_batch_errors(node: ExecNode, statement: str) -> None:
    assert node.error(statement).code == ErrorCode.INVALID


# --- literals of every type ----------------------------------------------------------------------

SOME_UUID = uuid.UUID("123e4567-e89b-12d3-a456-426614174000")
LITERAL_CASES = [
    # (column type, CQL literal, the value read back)
    ("ascii", "'abc'", "abc"),
    ("text", "'it''s'", "it's"),
    ("blob", "0xcafe", b"\xca\xfe"),
    ("boolean", "false", False),
    ("tinyint", "-128", -128),
    ("smallint", "300", 300),
    ("int", "-2147483648", -(2**31)),
    ("bigint", "9223372036854775807", 2**63 - 1),
    ("varint", "123456789012345678901234567890", 123456789012345678901234567890),
    ("decimal", "-1.25e-3", decimal.Decimal("-0.00125")),
    ("decimal", "12", decimal.Decimal(12)),
    ("float", "1.5", 1.5),
    ("double", "-Infinity", float("-inf")),
    ("double", "7", 7.0),
    ("timestamp", "'2024-01-02 03:04:05+0000'", datetime.datetime(2024, 1, 2, 3, 4, 5)),
    ("timestamp", "'2024-01-02T03:04:05.123Z'", datetime.datetime(2024, 1, 2, 3, 4, 5, 123000)),
    ("timestamp", "'2024-01-02 03:04:05+0100'", datetime.datetime(2024, 1, 2, 2, 4, 5)),
    ("timestamp", "'2024-01-02'", datetime.datetime(2024, 1, 2)),
    ("timestamp", "1704164645000", datetime.datetime(2024, 1, 2, 3, 4, 5)),
    ("date", "'2024-02-29'", datetime.date(2024, 2, 29)),
    ("time", "'08:12:54.123456789'", 29_574_123_456_789),
    ("time", "'08:12'", datetime.time(8, 12)),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000", SOME_UUID),
    ("inet", "'::1'", ipaddress.IPv6Address("::1")),
    ("duration", "1y2mo3w4d5h6m7s8ms9us10ns",
     Duration(14, 25, ((5 * 60 + 6) * 60 + 7) * 10**9 + 8 * 10**6 + 9 * 1000 + 10)),
    ("duration", "-P1DT2H", Duration(0, -1, -2 * 3600 * 10**9)),
    ("frozen<list<int>>", "[1, 2]", [1, 2]),
    ("frozen<set<int>>", "{3, 1}", frozenset({1, 3})),
    ("frozen<map<int, text>>", "{2: 'b', 1: 'a'}", {1: "a", 2: "b"}),
    ("frozen<map<int, text>>", "{}", {}),
    ("tuple<int, text>", "(1, 'a')", (1, "a")),
    ("tuple<int, text>", "(1, null)", (1, None)),
    ("frozen<addr>", "{zip: 5}", {"street": None, "zip": 5}),
    ("int", "(int) 5", 5),
    ("timeuuid", "minTimeuuid('2024-01-01')", min_timeuuid(1_704_067_200_000)),
    ("blob", "intAsBlob(1)", b"\x00\x00\x00\x01"),
    ("timestamp", "toTimestamp(minTimeuuid(1000))", datetime.datetime(1970, 1, 1, 0, 0, 1)),
]  # fmt: skip


@pytest.mark.parametrize(("cql_type", "literal", "expected"), LITERAL_CASES)
def test_literals(node: ExecNode, cql_type: str, literal: str, expected: object) -> None:
    node.ok(f"CREATE TABLE IF NOT EXISTS lit (k int PRIMARY KEY, x {cql_type})")
    node.ok(f"INSERT INTO lit (k, x) VALUES (1, {literal})")
    assert node.ok("SELECT x FROM lit WHERE k = 1") == [(expected,)]


LITERAL_ERRORS = [
    ("int", "'1'"),
    ("int", "1.5"),
    ("int", "2147483648"),
    ("text", "0x00"),
    ("timestamp", "'yesterday'"),
    ("date", "'2024-02-30'"),
    ("time", "'25:00'"),
    ("duration", "'1 hour'"),
    ("uuid", "'not-a-uuid'"),
    ("timeuuid", "123e4567-e89b-42d3-a456-426614174000"),
    ("frozen<list<int>>", "[1, null]"),
    ("frozen<list<int>>", "{1}"),
    ("frozen<addr>", "{nope: 1}"),
    ("tuple<int, text>", "(1, 'a', 2)"),
    ("int", "now()"),
    ("boolean", "nosuchfunction()"),
]


@pytest.mark.parametrize(("cql_type", "literal"), LITERAL_ERRORS)
def test_bad_literals_are_invalid(node: ExecNode, cql_type: str, literal: str) -> None:
    node.ok(f"CREATE TABLE IF NOT EXISTS lit (k int PRIMARY KEY, x {cql_type})")
    error = node.error(f"INSERT INTO lit (k, x) VALUES (1, {literal})")
    assert error.code == ErrorCode.INVALID, error


def test_two_operations_on_one_collection_element_reconcile_as_cassandra_does(
    tmp_path: Path,
) -> None:
    """One statement writes both cells with one timestamp: the tombstone wins, else the greater
    value, in whatever order the statement names them (Cassandra ``Cells.reconcile``). Before,
    the last operation named won."""
    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TYPE pair (a int, b int)")
    node.ok("CREATE TABLE e (k int PRIMARY KEY, m map<int, int>, l list<int>, s set<int>, u pair)")
    node.ok("UPDATE e SET m[2] = 9, m[2] = 6 WHERE k = 1")
    node.ok("UPDATE e SET m[3] = 6, m[3] = 9 WHERE k = 1")
    node.ok("UPDATE e SET m = m + {4: 1}, m[4] = 0 WHERE k = 1")
    node.ok("UPDATE e SET m[5] = 1, m = m - {5} WHERE k = 1")
    node.ok("UPDATE e SET l = [1, 2, 3], u = {a: 0, b: 0} WHERE k = 1")
    node.ok("UPDATE e SET l[0] = 5, l[0] = 7, u.a = 4, u.a = 3 WHERE k = 1")
    node.ok("UPDATE e SET s = s + {1}, s = s - {1}, s = s + {2} WHERE k = 1")
    assert node.ok("SELECT m, l, s, u FROM e WHERE k = 1") == [
        ({2: 9, 3: 9, 4: 1}, [7, 2, 3], {2}, {"a": 4, "b": 0})
    ]
    node.close()


def test_a_set_element_deleted_by_bind_marker_binds_the_element_type(node: ExecNode) -> None:
    """``DELETE s[?]`` binds ``value(s)`` of the set's element type (Cassandra's
    ``Sets.valueSpecOf``); it was prepared as an int and refused at execution."""
    node.ok("INSERT INTO t (k, c, s, l) VALUES (1, 1, {'a', 'b'}, [4, 5])")
    prepared = node.prepare("DELETE s[?], l[?] FROM t WHERE k = 1 AND c = 1")
    specs = [(c.name, c.type) for c in prepared.bind_metadata.columns]
    assert specs == [("value(s)", TEXT), ("idx(l)", INT)]
    node.execute(prepared.statement_id, [value(TEXT, "a"), value(INT, 1)])
    assert node.ok("SELECT s, l FROM t WHERE k = 1 AND c = 1") == [(frozenset({"b"}), [4])]
