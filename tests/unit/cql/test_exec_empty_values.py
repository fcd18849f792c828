"""Empty (zero-byte) values in clustering keys and inside collections, as Cassandra 4 has them.

Proves, against Cassandra's serializers (``Int32Serializer.validate`` & co. accept zero bytes,
``ByteSerializer``/``ShortSerializer``/``SimpleDateSerializer``/``TimeSerializer``/
``DurationSerializer`` refuse them with their messages) and comparators (``compareCustom``: an
empty value before every other, ``ReversedType`` after for DESC): ``blobAsInt(0x)`` is the empty
int (and ``blobAsInt(0x01)`` Cassandra's "In call to function" error); an empty clustering value
of each accepting type is stored, ordered first (last in a DESC column), found by ``=`` and
slices and deleted; empty elements of sets, map keys and values and list elements, bound or
built by ``blobAsX``, are kept, sets and maps ordered with the empty one first, and found by
``CONTAINS``; the refusing types answer Cassandra's messages. Each failed before: an empty
clustering value or collection element was refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.errors import ErrorCode
from ringflow.schema import INT
from tests.unit.cql._exec_harness import ExecNode, node_with_keyspace, value

EMPTY_INT = "blobAsInt(0x)"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path)
    yield node
    assert node.processor.internal_errors == 0
    node.close()


def rows(node: ExecNode, query: str, *values: bytes) -> list[tuple[bytes | None, ...]]:
    return [tuple(row) for row in node.raw(query, values).rows]


def i(number: int) -> bytes:
    return value(INT, number)


def test_blob_as_int_of_nothing_is_the_empty_int(node: ExecNode) -> None:
    node.ok("CREATE TABLE t (k int PRIMARY KEY, v int)")
    node.ok(f"INSERT INTO t (k, v) VALUES (1, {EMPTY_INT})")
    assert rows(node, "SELECT v FROM t") == [(b"",)]
    error = node.error("INSERT INTO t (k, v) VALUES (1, blobAsInt(0x01))")
    assert (error.code, error.message) == (
        ErrorCode.INVALID,
        "In call to function system.blobasint, value 0x01 is not a valid binary representation "
        "for type int",
    )


def test_empty_clustering_values_sort_first_and_last_when_descending(node: ExecNode) -> None:
    node.ok(
        "CREATE TABLE t (k int, c int, d bigint, v int, PRIMARY KEY (k, c, d)) "
        "WITH CLUSTERING ORDER BY (c ASC, d DESC)"
    )
    written = [("-5", "2", 1), (EMPTY_INT, "1", 2), ("3", "3", 3), ("3", "blobAsBigint(0x)", 4),
               ("3", "-100", 5), ("-2147483648", "0", 6)]  # fmt: skip
    for c, d, v in written:
        node.ok(f"INSERT INTO t (k, c, d, v) VALUES (1, {c}, {d}, {v})")
    assert [row[0] for row in rows(node, "SELECT v FROM t WHERE k = 1")] == [
        i(2), i(6), i(1), i(3), i(5), i(4)
    ]  # fmt: skip
    assert rows(node, "SELECT c, d FROM t WHERE k = 1 LIMIT 1") == [(b"", value_bigint(1))]
    assert rows(node, f"SELECT v FROM t WHERE k = 1 AND c = {EMPTY_INT}") == [(i(2),)]
    assert len(rows(node, f"SELECT v FROM t WHERE k = 1 AND c > {EMPTY_INT}")) == 5
    assert rows(node, "SELECT v FROM t WHERE k = 1 AND c = 3 AND d < -100") == [(i(4),)]
    assert rows(node, "SELECT v FROM t WHERE k = 1 AND c = ? AND d = 1", b"") == [(i(2),)]
    node.ok(f"DELETE FROM t WHERE k = 1 AND c = {EMPTY_INT}")
    assert len(rows(node, "SELECT v FROM t WHERE k = 1")) == 5
    node.restart()
    node.ok("USE ks")
    assert rows(node, "SELECT d FROM t WHERE k = 1 AND c = 3")[-1] == (b"",)


def value_bigint(number: int) -> bytes:
    return number.to_bytes(8, "big", signed=True)


@pytest.mark.parametrize(
    "cql_type", ["bigint", "varint", "decimal", "float", "double", "boolean", "timestamp",
                 "uuid", "timeuuid", "inet", "text", "blob"]
)  # fmt: skip
def test_every_accepting_type_takes_an_empty_clustering_value(
    node: ExecNode, cql_type: str
) -> None:
    node.ok(f"CREATE TABLE t (k int, c {cql_type}, PRIMARY KEY (k, c))")
    node.ok("INSERT INTO t (k, c) VALUES (1, ?)", b"")
    assert rows(node, "SELECT c FROM t WHERE k = 1") == [(b"",)]


@pytest.mark.parametrize(
    ("cql_type", "message"),
    [
        ("tinyint", "Expected 1 byte for a tinyint (0)"),
        ("smallint", "Expected 2 bytes for a smallint (0)"),
        ("date", "Expected 4 byte long for date (0)"),
        ("time", "Expected 8 byte long for time (0)"),
    ],
)
def test_refusing_types_answer_cassandras_message(
    node: ExecNode, cql_type: str, message: str
) -> None:
    node.ok(f"CREATE TABLE t (k int, c {cql_type}, v {cql_type}, PRIMARY KEY (k, c))")
    for query in ("INSERT INTO t (k, c) VALUES (1, ?)", "UPDATE t SET v = ? WHERE k = 1 AND c = 0"):
        error = node.error(query, b"")
        assert (error.code, error.message) == (ErrorCode.INVALID, message)
    node.ok("CREATE TABLE d (k int PRIMARY KEY, v duration)")
    error = node.error("INSERT INTO d (k, v) VALUES (1, ?)", b"")
    assert error.message == "Expected at least 3 bytes for a duration (0)"


def test_empty_elements_inside_collections(node: ExecNode) -> None:
    node.ok(
        "CREATE TABLE s (k int PRIMARY KEY, st set<int>, m map<int, int>, l list<int>, "
        "fs frozen<set<int>>)"
    )
    node.ok(
        f"INSERT INTO s (k, st, m, l, fs) VALUES (1, {{3, {EMPTY_INT}, -1}}, "
        f"{{2: 2, {EMPTY_INT}: {EMPTY_INT}}}, [4, {EMPTY_INT}], {{7, {EMPTY_INT}}})"
    )
    st, m, items, fs = rows(node, "SELECT st, m, l, fs FROM s WHERE k = 1")[0]
    assert st == _set(b"", i(-1), i(3))  # the empty element first
    assert m == _map((b"", b""), (i(2), i(2)))  # the empty key first
    assert items == _set(i(4), b"")  # a list keeps its order
    assert fs == _set(b"", i(7))
    node.ok(f"UPDATE s SET st = st - {{{EMPTY_INT}}}, m[{EMPTY_INT}] = 5 WHERE k = 1")
    assert rows(node, "SELECT st, m FROM s WHERE k = 1") == [
        (_set(i(-1), i(3)), _map((b"", i(5)), (i(2), i(2))))
    ]
    bound = _set(i(9), b"")  # a driver's set, unsorted, with an empty element
    node.ok("INSERT INTO s (k, st, l) VALUES (2, ?, [?])", bound, b"")
    assert rows(node, "SELECT st, l FROM s WHERE k = 2") == [(_set(b"", i(9)), _set(b""))]
    found = node.ok(f"SELECT k FROM s WHERE st CONTAINS {EMPTY_INT} ALLOW FILTERING")
    assert found == [(2,)]
    assert node.ok(f"SELECT k FROM s WHERE m CONTAINS KEY {EMPTY_INT} ALLOW FILTERING") == [(1,)]


def _framed(count: int, parts: list[bytes]) -> bytes:
    return count.to_bytes(4, "big") + b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def _set(*elements: bytes) -> bytes:
    """A serialized set or list (protocol v4 collection framing)."""
    return _framed(len(elements), list(elements))


def _map(*entries: tuple[bytes, bytes]) -> bytes:
    return _framed(len(entries), [part for entry in entries for part in entry])
