"""SELECT through the executor: restrictions, ordering, limits, functions, metadata and paging.

Proves: each SELECT form returns exactly the rows (decoded values) CQL defines on a small fixed
data set; result column names and types are Cassandra's; paging over more than a thousand rows
with small pages returns every row exactly once whatever the read plan (scan, IN, filtering,
per-partition limit, LIMIT); filtering needs ALLOW FILTERING; bad paging states are refused.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.cql._results import RowsResult
from ringflow.cql._wire import Consistency
from ringflow.errors import ErrorCode
from ringflow.ring import murmur3_token
from ringflow.schema import (
    BIGINT,
    INT,
    TEXT,
    TIMESTAMP,
    ListType,
    max_timeuuid,
    min_timeuuid,
    serialize,
)
from tests.unit.cql._exec_harness import (
    START_US,
    ExecNode,
    column_names,
    decode_rows,
    node_with_keyspace,
    value,
)

FILTERING = "Cannot execute this query as it might involve data filtering"


def token_of(key: int) -> int:
    return murmur3_token(serialize(INT, key))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecNode]:
    """t: 3 partitions (k = 1..3) x clustering (a in 1..2, b in 1..3), v = 10a + b, s static."""
    node = node_with_keyspace(tmp_path_factory.mktemp("select"))
    node.ok(
        "CREATE TABLE t (k int, a int, b int, v int, w text, s int static, m map<text, int>, "
        "PRIMARY KEY (k, a, b))"
    )
    for k in (1, 2, 3):
        node.ok(f"UPDATE t SET s = {k * 100} WHERE k = {k}")
        for a in (1, 2):
            for b in (1, 2, 3):
                node.ok(
                    f"INSERT INTO t (k, a, b, v, w, m) VALUES ({k}, {a}, {b}, {10 * a + b}, "
                    f"'{'x' if b == 1 else 'y'}', {{'b': {b}}})"
                )
    node.ok("UPDATE t SET s = 400 WHERE k = 4")  # a partition with only its static row
    node.ok(
        "CREATE TABLE d (k int, c int, v int, PRIMARY KEY (k, c)) WITH CLUSTERING ORDER BY (c DESC)"
    )
    for c in range(5):
        node.ok(f"INSERT INTO d (k, c, v) VALUES (0, {c}, {c})")
    node.ok("CREATE TABLE u (k uuid PRIMARY KEY, t timeuuid, ts timestamp, d date)")
    yield node
    assert node.processor.internal_errors == 0
    node.close()


RING_ORDER = sorted((1, 2, 3, 4), key=token_of)
KEYED_ORDER = [k for k in RING_ORDER if k != 4]
ONE_AND_THREE = [(1, 11), (3, 11)]
"""``k IN (3, 1)``: partitions in the order of the key values (Cassandra), not the ring's."""

SELECT_CASES = [
    ("SELECT a, b, v FROM t WHERE k = 1",
     [(1, 1, 11), (1, 2, 12), (1, 3, 13), (2, 1, 21), (2, 2, 22), (2, 3, 23)]),
    ("SELECT v FROM t WHERE k = 1 AND a = 2", [(21,), (22,), (23,)]),
    ("SELECT v FROM t WHERE k = 1 AND a = 2 AND b = 2", [(22,)]),
    ("SELECT v FROM t WHERE k = 1 AND a = 1 AND b > 1", [(12,), (13,)]),
    ("SELECT v FROM t WHERE k = 1 AND a = 1 AND b >= 2 AND b < 3", [(12,)]),
    ("SELECT v FROM t WHERE k = 1 AND a > 1", [(21,), (22,), (23,)]),
    ("SELECT v FROM t WHERE k = 1 AND a IN (2, 1) AND b = 3", [(13,), (23,)]),
    ("SELECT v FROM t WHERE k = 1 AND a = 1 AND b IN (3, 1)", [(11,), (13,)]),
    ("SELECT v FROM t WHERE k = 1 AND (a, b) > (1, 2)", [(13,), (21,), (22,), (23,)]),
    ("SELECT v FROM t WHERE k = 1 AND (a, b) >= (1, 3) AND (a, b) < (2, 2)", [(13,), (21,)]),
    ("SELECT v FROM t WHERE k = 1 AND (a, b) = (2, 1)", [(21,)]),
    ("SELECT v FROM t WHERE k = 1 AND (a, b) IN ((2, 3), (1, 1))", [(11,), (23,)]),
    ("SELECT v FROM t WHERE k = 1 ORDER BY a DESC", [(23,), (22,), (21,), (13,), (12,), (11,)]),
    ("SELECT v FROM t WHERE k = 1 ORDER BY a DESC, b DESC LIMIT 2", [(23,), (22,)]),
    ("SELECT v FROM t WHERE k = 1 AND a = 1 ORDER BY a ASC, b ASC", [(11,), (12,), (13,)]),
    ("SELECT v FROM t WHERE k = 1 LIMIT 2", [(11,), (12,)]),
    ("SELECT k, v FROM t WHERE k IN (3, 1) AND a = 1 AND b = 1", ONE_AND_THREE),
    ("SELECT k, v FROM t WHERE k IN (3, 1) AND a = 1 AND b = 1 ORDER BY a DESC", ONE_AND_THREE),
    ("SELECT v FROM t WHERE k = 1 AND a = 1 AND b IN (3, 1) ORDER BY a DESC, b DESC",
     [(13,), (11,)]),
    ("SELECT k FROM t PER PARTITION LIMIT 1", [(k,) for k in RING_ORDER]),
    ("SELECT k, v FROM t WHERE k = 2 PER PARTITION LIMIT 2", [(2, 11), (2, 12)]),
    ("SELECT DISTINCT k FROM t", [(k,) for k in RING_ORDER]),
    ("SELECT DISTINCT k, s FROM t", [(k, k * 100) for k in RING_ORDER]),
    ("SELECT k, a, s FROM t WHERE k = 4", [(4, None, 400)]),
    ("SELECT count(*) FROM t", [(19,)]),
    ("SELECT count(*) FROM t WHERE k = 1 AND a = 1", [(3,)]),
    ("SELECT COUNT(1) AS n FROM t WHERE k IN (1, 2)", [(12,)]),
    ("SELECT count(v), min(v), max(v), sum(v), avg(v) FROM t WHERE k = 1", [(6, 11, 23, 102, 17)]),
    ("SELECT max(w) FROM t WHERE k = 1", [("y",)]),
    ("SELECT v FROM t WHERE k = 1 AND v > 21 ALLOW FILTERING", [(22,), (23,)]),
    ("SELECT k, v FROM t WHERE v = 13 ALLOW FILTERING", [(k, 13) for k in KEYED_ORDER]),
    ("SELECT v FROM t WHERE k = 1 AND b = 2 ALLOW FILTERING", [(12,), (22,)]),
    ("SELECT v FROM t WHERE k = 1 AND w IN ('x') ALLOW FILTERING", [(11,), (21,)]),
    ("SELECT v FROM t WHERE k = 1 AND m CONTAINS 3 ALLOW FILTERING", [(13,), (23,)]),
    ("SELECT v FROM t WHERE k = 1 AND m CONTAINS KEY 'b' AND a = 2 AND b = 1 ALLOW FILTERING",
     [(21,)]),
    ("SELECT v FROM t WHERE k = 1 AND m['b'] = 2 ALLOW FILTERING", [(12,), (22,)]),
    ("SELECT k FROM t WHERE s = 300 ALLOW FILTERING", [(3,)] * 6),
    ("SELECT count(*) FROM t WHERE a = 2 ALLOW FILTERING", [(9,)]),
    ("SELECT v FROM d WHERE k = 0", [(4,), (3,), (2,), (1,), (0,)]),
    ("SELECT v FROM d WHERE k = 0 AND c > 2", [(4,), (3,)]),
    ("SELECT v FROM d WHERE k = 0 AND c >= 1 AND c < 3", [(2,), (1,)]),
    ("SELECT v FROM d WHERE k = 0 ORDER BY c ASC LIMIT 2", [(0,), (1,)]),
    ("SELECT v FROM d WHERE k = 0 ORDER BY c DESC LIMIT 1", [(4,)]),
    ("SELECT k FROM t WHERE k = 99", []),
    ("SELECT k FROM t WHERE k IN ()", []),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "expected"), SELECT_CASES)
def test_select_forms(node: ExecNode, statement: str, expected: list[tuple[object, ...]]) -> None:
    assert node.ok(statement) == expected


def test_full_scan_is_in_token_order_with_static_values(node: ExecNode) -> None:
    rows = node.ok("SELECT k, a, b, s FROM t")
    assert [r[0] for r in rows] == [k for k in RING_ORDER for _ in range(1 if k == 4 else 6)]
    assert all(r[3] == r[0] * 100 for r in rows)
    assert (4, None, None, 400) in rows


def test_token_restrictions_select_ring_ranges(node: ExecNode) -> None:
    first, second = RING_ORDER[0], RING_ORDER[1]
    rows = node.ok(
        "SELECT DISTINCT k, token(k) FROM t WHERE token(k) > ? AND token(k) <= ?",
        value(BIGINT, token_of(first)),
        value(BIGINT, token_of(RING_ORDER[2])),
    )
    assert rows == [(k, token_of(k)) for k in RING_ORDER[1:3]]
    rows = node.ok(f"SELECT DISTINCT k FROM t WHERE token(k) >= {token_of(second)}")
    assert rows == [(k,) for k in RING_ORDER[1:]]
    rows = node.ok(f"SELECT DISTINCT k FROM t WHERE token(k) < {token_of(second)}")
    assert rows == [(first,)]
    assert node.ok(f"SELECT DISTINCT k FROM t WHERE token(k) = token({second})") == [(second,)]
    assert node.ok("SELECT k FROM t WHERE token(k) > 5 AND token(k) <= 5") == []
    keyed = node.ok(
        f"SELECT DISTINCT k FROM t WHERE k = {second} AND token(k) > {token_of(second)}"
    )
    assert keyed == []


def test_result_metadata_names_and_types(node: ExecNode) -> None:
    response = node.raw(
        "SELECT k, v AS value, writetime(v), ttl(v), token(k), count(*), toTimestamp(now()) "
        "FROM t WHERE k = 1"
    )
    assert isinstance(response, RowsResult)
    assert column_names(response) == [
        "k", "value", "writetime(v)", "ttl(v)", "system.token(k)", "count",
        "system.totimestamp(system.now())",
    ]  # fmt: skip
    assert response.metadata.columns is not None
    assert {c.keyspace for c in response.metadata.columns} == {"ks"}
    star = node.raw("SELECT * FROM t WHERE k = 1 LIMIT 1")
    assert column_names(star) == ["k", "a", "b", "s", "m", "v", "w"]


def test_time_functions(node: ExecNode) -> None:
    key = uuid.uuid4()
    node.ok(
        "INSERT INTO u (k, t, ts, d) VALUES (?, now(), '2024-01-02 03:04:05+0000', '2024-01-02')",
        value(node.processor.schema.tables[("ks", "u")].column("k").type, key),
    )
    rows = node.ok(
        "SELECT toUnixTimestamp(t), toTimestamp(t), toUnixTimestamp(ts), toDate(ts), "
        "toTimestamp(d), writetime(ts) FROM u"
    )
    ((unix_t, _, unix_ts, date, midnight, written),) = rows
    assert unix_t == START_US // 1000
    assert unix_ts == 1_704_164_645_000
    assert str(date) == "2024-01-02"
    assert midnight.isoformat() == "2024-01-02T00:00:00"
    assert written >= START_US
    low, high = min_timeuuid(START_US // 1000), max_timeuuid(START_US // 1000)
    rows = node.ok(
        "SELECT k FROM u WHERE t >= minTimeuuid(?) AND t <= maxTimeuuid(?) ALLOW FILTERING",
        value(TIMESTAMP, START_US // 1000),
        value(TIMESTAMP, START_US // 1000),
    )
    assert rows == [(key,)]
    assert low < high


def test_in_marker_binds_a_list(node: ExecNode) -> None:
    rows = node.ok("SELECT DISTINCT k FROM t WHERE k IN ?", value(ListType(INT, True), [2, 3, 2]))
    assert sorted(rows) == [(2,), (3,)]


def test_in_on_the_partition_key_answers_in_key_order(node: ExecNode) -> None:
    """Cassandra sorts and de-duplicates ``IN`` partition keys by value: the ring's order of
    1, 2, 4, 3 must not show through (it did before)."""
    assert sorted(RING_ORDER) != RING_ORDER
    rows = node.ok("SELECT DISTINCT k FROM t WHERE k IN (4, 3, 1, 3, 2)")
    assert rows == [(1,), (2,), (3,), (4,)]
    bound = value(ListType(INT, True), [4, 3, 1, 3])
    assert node.ok("SELECT DISTINCT k FROM t WHERE k IN ?", bound) == [(1,), (3,), (4,)]
    paged, pages = node.all_pages(
        "SELECT k, a, b FROM t WHERE k IN (4, 3, 1) AND a = 1", page_size=2
    )
    assert [r[0] for r in paged] == [1, 1, 1, 3, 3, 3] and pages >= 3


def test_in_on_a_compound_partition_key_sorts_by_each_component(tmp_path: Path) -> None:
    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TABLE c (a text, b int, v int, PRIMARY KEY ((a, b)))")
    for a in ("x", "y", "ab"):
        for b in (-5, 2, 10):
            node.ok(f"INSERT INTO c (a, b, v) VALUES ('{a}', {b}, 0)")
    rows = node.ok("SELECT a, b FROM c WHERE a IN ('y', 'ab', 'x') AND b IN (10, -5, 2)")
    assert rows == [(a, b) for a in ("ab", "x", "y") for b in (-5, 2, 10)]
    node.close()


MULTI_SLICES = [
    ("(v1, v2) > (0, 1)", "(v1, v2, v3) <= (1, 1, 0)"),
    ("(v1, v2, v3) > (0, 1, 1)", "(v1, v2) <= (1, 0)"),
    ("(v1) >= (1)", "(v1, v2, v3) < (2, 0, 1)"),
    ("(v1, v2, v3) >= (0, 2, 2)", "(v1) < (2)"),
    ("(v1, v2) >= (1, 1)", "(v1, v2) <= (2, 0)"),
]


@pytest.mark.parametrize(("lower", "upper"), MULTI_SLICES)
def test_multi_column_slices_with_bounds_of_different_arity(
    tmp_path_factory: pytest.TempPathFactory, lower: str, upper: str
) -> None:
    """Each bound limits the rows by its own prefix of the clustering (Cassandra merges the
    two into one slice); before, the bound of the shorter tuple was the only one applied."""
    node = node_with_keyspace(tmp_path_factory.mktemp("multi"))
    node.ok("CREATE TABLE m (k int, v1 int, v2 int, v3 int, PRIMARY KEY (k, v1, v2, v3))")
    every = list(itertools.product(range(3), repeat=3))
    for v1, v2, v3 in every:
        node.ok(f"INSERT INTO m (k, v1, v2, v3) VALUES (0, {v1}, {v2}, {v3})")

    def holds(bound: str, row: tuple[int, ...]) -> bool:
        columns, rest = bound.split(") ", 1)
        operator, values = rest.split(" ", 1)
        width = columns.count(",") + 1
        limit = tuple(int(v) for v in values.strip("()").split(","))
        return {">": row[:width] > limit, ">=": row[:width] >= limit,
                "<": row[:width] < limit, "<=": row[:width] <= limit}[operator]  # fmt: skip

    expected = [row for row in every if holds(lower, row) and holds(upper, row)]
    assert expected and len(expected) < len(every)
    for first, second in ((lower, upper), (upper, lower)):
        query = f"SELECT v1, v2, v3 FROM m WHERE k = 0 AND {first} AND {second}"
        assert node.ok(query) == expected
    node.close()


SELECT_ERRORS = [
    ("SELECT * FROM t WHERE k = 1 AND (a, b) > (1, 1) AND a < 2", "Mixing single column"),
    ("SELECT * FROM t WHERE k = 1 AND (b, a) > (1, 1)", "PRIMARY KEY order"),
    ("SELECT * FROM t WHERE k = 1 AND (k, a) = (1, 1)", "clustering columns"),
    ("SELECT * FROM t WHERE v = 1", FILTERING),
    ("SELECT * FROM t WHERE b = 1", FILTERING),
    ("SELECT * FROM t WHERE k = 1 AND b = 1", FILTERING),
    ("SELECT * FROM t WHERE a = 1", FILTERING),
    ("SELECT * FROM t WHERE nope = 1", "undefined column name 'nope'"),
    ("SELECT nope FROM t", "undefined column name 'nope'"),
    ("SELECT * FROM nope", "unconfigured table nope"),
    ("SELECT * FROM nope.t", "Keyspace nope does not exist"),
    ("SELECT * FROM t WHERE k = 'x'", 'Invalid STRING constant (x) for "k" of type int'),
    ("SELECT * FROM t WHERE k = 1 AND k = 2", "cannot be restricted by more than one relation"),
    ("SELECT * FROM t WHERE k != 1", 'Unsupported "!=" relation'),
    ("SELECT * FROM t ORDER BY a DESC", "ORDER BY is only supported when the partition key"),
    ("SELECT * FROM t WHERE k = 1 ORDER BY b DESC", "following their declared order"),
    ("SELECT * FROM t WHERE k = 1 ORDER BY v DESC", "clustered columns"),
    ("SELECT * FROM t WHERE k = 1 ORDER BY a DESC, b ASC", "Unsupported order by relation"),
    ("SELECT * FROM t LIMIT 0", "LIMIT must be strictly positive"),
    ("SELECT writetime(k) FROM t", "PRIMARY KEY part k"),
    ("SELECT writetime(m) FROM t", "non-frozen m"),
    ("SELECT DISTINCT v FROM t", "SELECT DISTINCT queries must only request"),
    ("SELECT DISTINCT s FROM t", "must request all the partition key columns"),
    ("SELECT token(a) FROM t", "partition key columns"),
    ("SELECT * FROM t WHERE token(a) > 0", "token() function must be applied"),
    ("SELECT nofunction(k) FROM t", "Unknown function"),
    ("SELECT * FROM t WHERE m = {'a': 1} ALLOW FILTERING", "cannot be restricted"),
]


@pytest.mark.parametrize(("statement", "message"), SELECT_ERRORS)
def test_select_errors(node: ExecNode, statement: str, message: str) -> None:
    error = node.error(statement)
    assert error.code == ErrorCode.INVALID, error
    assert message in error.message


def test_any_consistency_is_refused_for_reads(node: ExecNode) -> None:
    error = node.error("SELECT * FROM t", consistency=Consistency.ANY)
    assert error.message == "ANY ConsistencyLevel is only supported for writes"


def test_order_by_across_partitions_cannot_be_paged(node: ExecNode) -> None:
    error = node.error("SELECT v FROM t WHERE k IN (1, 2) ORDER BY a DESC", page_size=10)
    assert "Cannot page queries with both ORDER BY and a IN restriction" in error.message
    rows = node.ok("SELECT k, a, b FROM t WHERE k IN (1, 2) ORDER BY a DESC, b DESC LIMIT 3")
    assert [r[1:] for r in rows] == [(2, 3), (2, 3), (2, 2)]


# --- paging --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecNode]:
    """1,200 rows: 40 partitions of 30 clustering rows (v = 100k + c), plus 3 static-only."""
    node = node_with_keyspace(tmp_path_factory.mktemp("paging"))
    node.ok("CREATE TABLE p (k int, c int, v int, s int static, PRIMARY KEY (k, c))")
    prepared = node.prepare("INSERT INTO p (k, c, v) VALUES (?, ?, ?)")
    for k in range(40):
        for c in range(30):
            node.execute(
                prepared.statement_id, [value(INT, k), value(INT, c), value(INT, 100 * k + c)]
            )
    for k in (100, 101, 102):
        node.ok(f"UPDATE p SET s = {k} WHERE k = {k}")
    yield node
    assert node.processor.internal_errors == 0
    node.close()


KEYS_IN = "(" + ", ".join(str(k) for k in range(40)) + ")"
PAGING_CASES = [
    # (statement, expected (k, c) pairs as a set, expected count)
    ("SELECT k, c FROM p", 1203),
    (f"SELECT k, c FROM p WHERE k IN {KEYS_IN}", 1200),
    (f"SELECT k, c FROM p WHERE k IN {KEYS_IN} AND c >= 10", 800),
    (f"SELECT k, c FROM p WHERE k IN {KEYS_IN} ORDER BY c DESC", None),
    ("SELECT k, c FROM p WHERE v > 1000 ALLOW FILTERING", 1200 - 301),
    ("SELECT k, c FROM p PER PARTITION LIMIT 7", 40 * 7 + 3),
    (f"SELECT k, c FROM p WHERE k IN {KEYS_IN} PER PARTITION LIMIT 4", 160),
    ("SELECT k, c FROM p LIMIT 1001", 1001),
    (f"SELECT k, c FROM p WHERE k IN {KEYS_IN} LIMIT 1001", 1001),
    ("SELECT DISTINCT k FROM p", 43),
    ("SELECT k, c FROM p WHERE k = 5 ORDER BY c DESC", 30),
    (f"SELECT k, c FROM p WHERE k IN {KEYS_IN} AND c IN (29, 0, 14)", 120),
    ("SELECT k, c FROM p WHERE k IN (3, 4) AND c IN (29, 0, 14) ORDER BY c DESC", None),
    ("SELECT k, c FROM p WHERE k = 4 AND c IN (29, 0, 14) ORDER BY c DESC", 3),
    ("SELECT k, c FROM p WHERE token(k) > 0", -1),
]


@pytest.mark.parametrize(("statement", "count"), PAGING_CASES)
@pytest.mark.parametrize("page_size", [1, 7, 100, 5000])
def test_paging_returns_each_row_once(
    big: ExecNode, statement: str, count: int | None, page_size: int
) -> None:
    if page_size == 1 and count is not None and count > 400:
        page_size = 3  # keep the test quick on two cores; 1 is covered by the small cases
    if count == -1:
        count = sum(1 for row in big.ok("SELECT k FROM p") if token_of(row[0]) > 0)
    if count is None:
        error = big.error(statement, page_size=page_size)
        assert "Cannot page" in error.message
        return
    rows, pages = big.all_pages(statement, page_size=page_size)
    assert len(rows) == len(set(rows)) == count
    unpaged = big.ok(statement)
    assert rows == unpaged
    assert pages >= count // page_size


def test_paging_state_belongs_to_its_query(big: ExecNode) -> None:
    first = big.raw("SELECT k, c FROM p", page_size=10)
    state = first.metadata.paging_state
    assert state is not None
    error = big.error(
        "SELECT k, c FROM p WHERE v > 1 ALLOW FILTERING", page_size=10, paging_state=state
    )
    assert error.code == ErrorCode.INVALID
    for garbage in (b"", b"\x01", b"\x02abc", state[:-3]):
        assert (
            big.error("SELECT k, c FROM p", page_size=10, paging_state=garbage).code
            == ErrorCode.INVALID
        )


def test_count_ignores_paging(big: ExecNode) -> None:
    response = big.raw("SELECT count(*) FROM p", page_size=10)
    assert response.metadata.paging_state is None
    assert big.ok("SELECT count(*) FROM p", page_size=10) == [(1203,)]  # static-only rows count


def test_unpaged_results_are_bounded(tmp_path: Path) -> None:
    from ringflow.cql._exec_common import ExecutorLimits

    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TABLE p (k int, c int, PRIMARY KEY (k, c))")
    for c in range(12):
        node.ok(f"INSERT INTO p (k, c) VALUES (1, {c})")
    node.processor.limits = ExecutorLimits(max_unpaged_rows=10, max_page_size_rows=5)
    assert "page the query" in node.error("SELECT * FROM p").message
    rows, pages = node.all_pages("SELECT * FROM p", page_size=100)
    assert len(rows) == 12 and pages == 3
    node.close()


def test_collection_element_and_slice_selection(tmp_path: Path) -> None:
    """Cassandra 4's ``m['k']``, ``s[e]``, ``m['a'..'c']``, ``s[2..]`` on non-frozen and frozen
    sets and maps (a missing element and an empty slice are null); lists and other types are
    refused with Cassandra's messages; bind markers are ``key(m)`` / ``value(s)``. Before, the
    selection did not parse."""
    node = node_with_keyspace(tmp_path)
    node.ok(
        "CREATE TABLE c (k int PRIMARY KEY, m map<text, int>, s set<int>, l list<int>, "
        "f frozen<map<int, text>>, v int)"
    )
    node.ok(
        "INSERT INTO c (k, m, s, l, f, v) VALUES (1, {'a': 1, 'b': 2, 'c': 3, 'd': 4}, "
        "{1, 2, 3, 5}, [1], {1: 'x', 2: 'y'}, 7)"
    )
    node.ok("INSERT INTO c (k) VALUES (2)")
    assert node.ok("SELECT m['a'], m['z'], s[2], s[4], f[2] FROM c WHERE k = 1") == [
        (1, None, 2, None, "y")
    ]
    assert node.ok("SELECT m['b'..'c'], m[..'b'], m['c'..], s[2..4], s[6..] FROM c") == [
        ({"b": 2, "c": 3}, {"a": 1, "b": 2}, {"c": 3, "d": 4}, {2, 3}, None),
        (None, None, None, None, None),
    ]
    assert node.ok("SELECT s[1..3] FROM c WHERE k = 1") == [({1, 2, 3},)]  # 1..3 lexes as a range
    for statement, message in (
        (
            "SELECT l[0] FROM c",
            "Element selection is only allowed on sets and maps, but l is a list",
        ),
        ("SELECT v[0] FROM c", "Invalid element selection: v is of type int is not a collection"),
        ("SELECT m[1] FROM c", 'Invalid INTEGER constant (1) for "key(m)" of type text'),
    ):
        error = node.error(statement)
        assert error.code == ErrorCode.INVALID and message in error.message, error
    prepared = node.prepare("SELECT m[?], s[?..?] FROM c WHERE k = 1")
    assert [(c.name, c.type) for c in prepared.bind_metadata.columns] == [
        ("key(m)", TEXT), ("value(s)", INT), ("value(s)", INT)
    ]  # fmt: skip
    assert [c.name for c in prepared.result_metadata.columns] == ["m[?]", "s[?..?]"]
    rows = node.execute(prepared.statement_id, [value(TEXT, "b"), value(INT, 2), value(INT, 3)])
    assert decode_rows(rows) == [(2, {2, 3})]
    node.close()


def test_literal_forms_cassandra_accepts(tmp_path: Path) -> None:
    """Timestamps with a zone name, dates as their unsigned day number and times as
    nanoseconds given as integers (Cassandra's ``Constants.Literal``); before, refused."""
    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TABLE lit (k int PRIMARY KEY, ts timestamp, d date, tm time)")
    node.ok("INSERT INTO lit (k, ts) VALUES (1, '2011-02-03 UTC')")
    node.ok("INSERT INTO lit (k, ts) VALUES (2, '2011-02-03 04:05 GMT')")
    node.ok(
        "INSERT INTO lit (k, ts, d, tm) "
        "VALUES (3, '2011-02-03 04:05+0000', 2147483648, 3600000000000)"
    )
    rows = dict((k, (ts, d, tm)) for k, ts, d, tm in node.ok("SELECT k, ts, d, tm FROM lit"))
    assert rows[1][0] == datetime.datetime(2011, 2, 3)
    assert rows[2][0] == rows[3][0] == datetime.datetime(2011, 2, 3, 4, 5)
    assert rows[3][1:] == (datetime.date(1970, 1, 1), datetime.time(1, 0))
    error = node.error("INSERT INTO lit (k, d) VALUES (4, 4294967296)")
    assert "Input date 4294967296 is out of range" in error.message
    node.close()


def test_group_by_primary_key_prefixes(tmp_path: Path) -> None:
    """Cassandra 4's GROUP BY: one row per group of the key prefix named (a column restricted
    by = may be left out), aggregates over the group, other selectors from its first row; LIMIT
    and PER PARTITION LIMIT count groups; Cassandra's errors for other columns. Before, refused."""
    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TABLE g (a int, b int, c int, v int, PRIMARY KEY (a, b, c))")
    for a, b, c in itertools.product(range(3), range(2), range(3)):
        node.ok(f"INSERT INTO g (a, b, c, v) VALUES ({a}, {b}, {c}, {a * 100 + b * 10 + c})")
    ring = [a for a, _ in node.ok("SELECT DISTINCT a, token(a) FROM g")]
    by_a = node.ok("SELECT a, count(*), sum(v), max(v), c FROM g GROUP BY a")
    assert by_a == [(a, 6, 6 * 100 * a + 36, 100 * a + 12, 0) for a in ring]
    by_ab = node.ok("SELECT a, b, count(*), min(v) FROM g GROUP BY a, b")
    assert by_ab == [(a, b, 3, 100 * a + 10 * b) for a in ring for b in (0, 1)]
    assert node.ok("SELECT a, b FROM g GROUP BY a, b LIMIT 3") == [r[:2] for r in by_ab[:3]]
    assert node.ok("SELECT a, b FROM g GROUP BY a, b PER PARTITION LIMIT 1") == [
        (a, 0) for a in ring
    ]
    assert node.ok("SELECT b, count(*) FROM g WHERE a = 1 GROUP BY b") == [(0, 3), (1, 3)]
    paged, pages = node.all_pages("SELECT a, b, count(*) FROM g GROUP BY a, b", page_size=2)
    assert paged == [r[:3] for r in by_ab] and pages == 3  # pages of groups (see below)
    for statement, message in (
        ("SELECT count(*) FROM g GROUP BY b", "following their declared order in the PRIMARY KEY"),
        ("SELECT count(*) FROM g GROUP BY a, c", "following their declared order"),
        ("SELECT count(*) FROM g GROUP BY v", "only supported on the columns of the PRIMARY KEY"),
        ("SELECT DISTINCT a FROM g GROUP BY a, b", "not allowed for SELECT DISTINCT queries"),
    ):
        error = node.error(statement)
        assert error.code == ErrorCode.INVALID and message in error.message, error
    node.close()


def test_select_json_and_to_json(tmp_path: Path) -> None:
    """Cassandra 4's SELECT JSON (one ``[json]`` text column: an object of the selected
    columns, case-sensitive names quoted) and toJson(): numbers and booleans bare, timestamps
    in UTC with milliseconds, blobs as 0x..., sets and maps in their CQL order, map keys that
    are not text as the key's JSON text, UDTs as objects. Before, refused."""
    node = node_with_keyspace(tmp_path)
    node.ok('CREATE TYPE pair (x int, "Y" text)')
    node.ok(
        "CREATE TABLE j (k int PRIMARY KEY, t text, ts timestamp, b blob, m map<int, text>, "
        "s set<int>, l list<double>, u pair, tu frozen<tuple<int, text>>, d duration, dt date, "
        'tm time, "Cap" int, dec decimal, ok boolean)'
    )
    node.ok(
        'INSERT INTO j (k, t, ts, b, m, s, l, u, tu, d, dt, tm, "Cap", dec, ok) VALUES (1, '
        "'a\"b', '2011-02-03 04:05:06.789+0000', 0xcafe, {10: 'x', 2: 'y'}, {10, 2, 33}, "
        "[1.5, 2.0], {x: 1, \"Y\": 'z'}, (3, 'w'), 1h30m, '2011-02-03', '04:05:06.123456789', "
        "7, 1.25, true)"
    )
    (row,) = node.ok("SELECT JSON * FROM j WHERE k = 1")
    assert row[0] == (
        '{"k": 1, "\\"Cap\\"": 7, "b": "0xcafe", "d": "1h30m", "dec": 1.25, "dt": "2011-02-03", '
        '"l": [1.5, 2.0], "m": {"2": "y", "10": "x"}, "ok": true, "s": [2, 10, 33], '
        '"t": "a\\"b", "tm": "04:05:06.123456789", "ts": "2011-02-03 04:05:06.789Z", '
        '"tu": [3, "w"], "u": {"x": 1, "\\"Y\\"": "z"}}'
    )
    assert json.loads(row[0])["m"] == {"2": "y", "10": "x"}
    assert node.ok("SELECT JSON k, count(*) FROM j") == [('{"k": 1, "count": 1}',)]
    assert node.ok("SELECT toJson(m), toJson(ts) FROM j WHERE k = 1") == [
        ('{"2": "y", "10": "x"}', '"2011-02-03 04:05:06.789Z"')
    ]
    prepared = node.prepare("SELECT JSON * FROM j WHERE k = ?")
    assert [(c.name, c.type) for c in prepared.result_metadata.columns] == [("[json]", TEXT)]
    node.close()


@pytest.mark.parametrize("batch_rows", [4, 5, 10_000])
def test_group_by_pages_count_groups_and_resume_at_the_next_group(
    tmp_path: Path, batch_rows: int
) -> None:
    """GROUP BY with a page size answers pages of whole groups (Cassandra's
    GroupByPagingState), the state resuming at the next group, also when the store's batch
    (``max_page_size_rows``) ends inside a group or crosses a group boundary; LIMIT and
    PER PARTITION LIMIT count groups across pages; aggregates are the unpaged ones. Before,
    every GROUP BY answered one page."""
    node = node_with_keyspace(tmp_path)
    node.processor.limits = dataclasses.replace(
        node.processor.limits, max_page_size_rows=batch_rows
    )
    node.ok("CREATE TABLE g (a int, b int, c int, v int, PRIMARY KEY (a, b, c))")
    for a, b, c in itertools.product(range(4), range(3), range(3)):
        if (a, b) != (2, 1):  # a partition with a gap
            node.ok(f"INSERT INTO g (a, b, c, v) VALUES ({a}, {b}, {c}, {a * 100 + b * 10 + c})")
    queries = [
        "SELECT a, b, count(*), sum(v), min(c) FROM g GROUP BY a, b",
        "SELECT a, count(*), max(v) FROM g GROUP BY a",
        "SELECT a, b, count(*) FROM g GROUP BY a, b LIMIT 5",
        "SELECT a, b, sum(v) FROM g GROUP BY a, b PER PARTITION LIMIT 2",
        "SELECT a, b, count(*) FROM g WHERE a IN (3, 1, 2) GROUP BY a, b",
        "SELECT b, count(*) FROM g WHERE a = 1 GROUP BY b",
        "SELECT a, b, count(*) FROM g WHERE c > 0 GROUP BY a, b ALLOW FILTERING",
    ]
    for query in queries:
        whole = node.ok(query)
        assert whole, query
        for page_size in (1, 2, 3, 100):
            paged, pages = node.all_pages(query, page_size=page_size)
            assert paged == whole, (query, page_size)
            per_page = min(page_size, batch_rows)  # max_page_size_rows caps pages too
            assert len(whole) // per_page <= pages <= len(whole) // per_page + 1
    first = node.raw(queries[0], page_size=2)
    assert len(first.rows) == 2 and first.metadata.paging_state is not None
    other = node.error(queries[1], page_size=2, paging_state=first.metadata.paging_state)
    assert other.code == ErrorCode.INVALID
