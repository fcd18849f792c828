"""PREPARE and EXECUTE: ids, bind metadata, partition key indexes, values, the bounded cache.

Proves: prepared ids are Cassandra's (MD5 of keyspace + query); bind markers get Cassandra's
names and types (``[limit]``, ``[ttl]``, ``in(c)``, ``key(m)``/``value(m)``, named markers);
``partition_key_indexes`` let drivers route; positional and named values bind; SKIP_METADATA
omits the result columns; an evicted id answers Unprepared with that id; and the installed
Python driver decodes the PREPARED and ROWS results as it does a real server's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.cql._exec_common import ExecutorLimits
from ringflow.cql._requests import Prepare
from ringflow.cql._results import RowsResult, VoidResult
from ringflow.cql._wire import UNSET
from ringflow.errors import ErrorCode
from ringflow.schema import (
    BIGINT,
    BLOB,
    INT,
    TEXT,
    ListType,
    SetType,
    TupleType,
)
from tests.unit.cql._exec_harness import ExecNode, decode_rows, node_with_keyspace, value
from tests.unit.cql._protocol_oracle import driver_round_trip


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path)
    node.ok(
        "CREATE TABLE t (a int, b text, c int, d int, v int, m map<text, int>, l list<int>, "
        "s set<int>, PRIMARY KEY ((b, a), c, d))"
    )
    yield node
    assert node.processor.internal_errors == 0
    node.close()


def specs(node: ExecNode, query: str) -> list[tuple[str, object]]:
    prepared = node.prepare(query)
    return [(c.name, c.type) for c in prepared.bind_metadata.columns]


BIND_CASES = [
    ("INSERT INTO t (a, b, c, d, v) VALUES (?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?",
     [("a", INT), ("b", TEXT), ("c", INT), ("d", INT), ("v", INT), ("[ttl]", INT),
      ("[timestamp]", BIGINT)], (1, 0)),
    ("SELECT * FROM t WHERE a = ? AND b = ? AND c IN ? LIMIT ?",
     [("a", INT), ("b", TEXT), ("in(c)", ListType(INT, True)), ("[limit]", INT)], (1, 0)),
    ("SELECT * FROM t WHERE b = :bee AND a = :ay AND (c, d) > ? PER PARTITION LIMIT ?",
     [("bee", TEXT), ("ay", INT), ("(c,d)", TupleType((INT, INT))),
      ("[per_partition_limit]", INT)], (0, 1)),
    ("UPDATE t SET m[?] = ?, l = l + ?, s = s - ? WHERE a = ? AND b = ? AND c = ? AND d = ?",
     [("key(m)", TEXT), ("value(m)", INT), ("l", ListType(INT)), ("s", SetType(INT)),
      ("a", INT), ("b", TEXT), ("c", INT), ("d", INT)], (5, 4)),
    ("DELETE s[?], l[?] FROM t WHERE a = 1 AND b = 'x' AND c = 1 AND d = 1",
     [("value(s)", INT), ("idx(l)", INT)], ()),
    ("DELETE m[?] FROM t WHERE a = ? AND b IN ? AND c = ? AND d = ?",
     [("key(m)", TEXT), ("a", INT), ("in(b)", ListType(TEXT, True)), ("c", INT), ("d", INT)], ()),
    ("UPDATE t SET m = m - ? WHERE a = 1 AND b = 'x' AND c = 1 AND d = 1",
     [("m", SetType(TEXT, True))], ()),
    ("SELECT * FROM t WHERE token(b, a) > ? AND token(b, a) <= ?",
     [("partition key token", BIGINT), ("partition key token", BIGINT)], ()),
    ("SELECT toUnixTimestamp(now()) FROM t WHERE b = 'x' AND a = 1 AND c > maxTimeuuid(?) "
     "ALLOW FILTERING", None, ()),
    ("SELECT * FROM t WHERE b = 'x' AND a = 1 AND m CONTAINS ? ALLOW FILTERING",
     [("value(m)", INT)], ()),
    ("INSERT INTO t (a, b, c, d, m) VALUES (1, 'x', 1, 1, {?: ?})",
     [("key(m)", TEXT), ("value(m)", INT)], ()),
    # blobAsX / xAsBlob: a marker is typed by the parameter of the innermost call holding it,
    # named as Cassandra's FunctionResolver.makeArgSpec names it
    ("INSERT INTO t (a, b, c, d, v) VALUES (?, ?, 1, 1, blobAsInt(intAsBlob(?)))",
     [("a", INT), ("b", TEXT), ("arg0(system.intasblob)", INT)], (1, 0)),
    ("SELECT * FROM t WHERE a = blobAsInt(?) AND b = ?",
     [("arg0(system.blobasint)", BLOB), ("b", TEXT)], ()),
    ("UPDATE t SET v = blobAsInt(textAsBlob(?)) WHERE a = ? AND b = ? AND c = 1 AND d = 1",
     [("arg0(system.textasblob)", TEXT), ("a", INT), ("b", TEXT)], (2, 1)),
    ("SELECT blobAsText(textAsBlob(?)), intAsBlob(blobAsInt(?)) FROM t",
     [("arg0(system.textasblob)", TEXT), ("arg0(system.blobasint)", BLOB)], ()),
    ("SELECT * FROM t WHERE b = 'x' AND a = 1 AND c = blobAsInt(bigintAsBlob(?))",
     [("arg0(system.bigintasblob)", BIGINT)], ()),
    ("SELECT * FROM t WHERE b = 'x' AND a = 1 AND c = blobAsText(intAsBlob(?))", None, ()),
]  # fmt: skip


@pytest.mark.parametrize(("query", "expected", "pk_indexes"), BIND_CASES)
def test_bind_metadata(
    node: ExecNode,
    query: str,
    expected: list[tuple[str, object]] | None,
    pk_indexes: tuple[int, ...],
) -> None:
    if expected is None:  # c is an int: maxTimeuuid's (or blobAsText's) result does not fit
        response = node.processor.prepare(Prepare(query), node.session)
        assert getattr(response, "code", None) == ErrorCode.INVALID
        assert "Type error" in response.message
        return
    prepared = node.prepare(query)
    assert [(c.name, c.type) for c in prepared.bind_metadata.columns] == expected
    assert {(c.keyspace, c.table) for c in prepared.bind_metadata.columns} == {("ks", "t")}
    assert prepared.bind_metadata.partition_key_indexes == pk_indexes


def test_nested_blob_conversions_bind_and_answer(node: ExecNode) -> None:
    insert = node.prepare(
        "INSERT INTO t (a, b, c, d, v) VALUES (?, ?, 1, 1, blobAsInt(intAsBlob(?)))"
    )
    node.execute(insert.statement_id, [value(INT, 1), value(TEXT, "x"), value(INT, 7)])
    select = node.prepare(
        "SELECT v, blobAsText(textAsBlob(?)) FROM t WHERE a = blobAsInt(?) AND b = ?"
    )
    rows = node.execute(
        select.statement_id, [value(TEXT, "hi"), value(BLOB, b"\0\0\0\1"), value(TEXT, "x")]
    )
    assert decode_rows(rows) == [(7, "hi")]
    wrong = node.error("SELECT v FROM t WHERE a = blobAsInt(?) AND b = 'x'", value(BLOB, b"\1"))
    assert wrong.code == ErrorCode.INVALID


def test_prepared_id_is_md5_of_keyspace_and_query(node: ExecNode) -> None:
    query = "SELECT * FROM t WHERE a = ? AND b = ?"
    prepared = node.prepare(query)
    assert prepared.statement_id == hashlib.md5(("ks" + query).encode()).digest()
    node.session.keyspace = None
    qualified = "SELECT * FROM ks.t"
    assert node.prepare(qualified).statement_id == hashlib.md5(qualified.encode()).digest()


def test_execute_with_positional_and_named_values(node: ExecNode) -> None:
    insert = node.prepare("INSERT INTO t (a, b, c, d, v) VALUES (:a, :b, :c, :d, :v)")
    values = [value(INT, 1), value(TEXT, "x"), value(INT, 2), value(INT, 3), value(INT, 4)]
    assert isinstance(node.execute(insert.statement_id, values), VoidResult)
    named = dict(zip("vdcba", reversed(values), strict=True))
    response = node.execute(
        insert.statement_id, list(named.values()), names=[n.upper() for n in named]
    )
    assert isinstance(response, VoidResult)
    select = node.prepare("SELECT v FROM t WHERE a = ? AND b = ?")
    response = node.execute(select.statement_id, [value(INT, 1), value(TEXT, "x")])
    assert decode_rows(response) == [(4,)]
    by_name = node.execute(select.statement_id, [value(TEXT, "x"), value(INT, 1)], names=["b", "a"])
    assert decode_rows(by_name) == [(4,)]
    wrong = node.execute(select.statement_id, [value(INT, 1)])
    assert wrong.code == ErrorCode.INVALID and "1 bound variables" in wrong.message
    missing = node.execute(select.statement_id, [value(INT, 1)], names=["a"])
    assert missing.code == ErrorCode.INVALID
    unset_key = node.execute(select.statement_id, [UNSET, value(TEXT, "x")])
    assert unset_key.code == ErrorCode.INVALID and "unset" in unset_key.message


def test_named_values_on_a_plain_query(node: ExecNode) -> None:
    node.ok("INSERT INTO t (a, b, c, d, v) VALUES (1, 'x', 1, 1, 9)")
    rows = node.ok(
        "SELECT v FROM t WHERE a = ? AND b = ?", value(TEXT, "x"), value(INT, 1), names=["b", "a"]
    )
    assert rows == [(9,)]


def test_skip_metadata(node: ExecNode) -> None:
    node.ok("INSERT INTO t (a, b, c, d, v) VALUES (1, 'x', 1, 1, 9)")
    select = node.prepare("SELECT c, v FROM t WHERE a = 1 AND b = 'x'")
    assert [c.name for c in select.result_metadata.columns or ()] == ["c", "v"]
    response = node.execute(select.statement_id, skip_metadata=True)
    assert isinstance(response, RowsResult)
    assert response.metadata.columns is None and response.metadata.column_count == 2
    assert response.rows == ((value(INT, 1), value(INT, 9)),)
    insert = node.prepare("INSERT INTO t (a, b, c, d) VALUES (1, 'x', 1, 1)")
    assert insert.result_metadata.columns is None and insert.result_metadata.column_count == 0


def test_the_cache_is_bounded_and_evicted_ids_are_unprepared(node: ExecNode) -> None:
    node.processor._prepared._limits = ExecutorLimits(max_prepared_statements=3)
    ids = [
        node.prepare(f"SELECT v FROM t WHERE a = {i} AND b = 'x'").statement_id for i in range(4)
    ]
    assert len(node.processor.prepared_statements) == 3
    evicted = node.execute(ids[0])
    assert evicted.code == ErrorCode.UNPREPARED and evicted.statement_id == ids[0]
    assert isinstance(node.execute(ids[3]), RowsResult)
    node.prepare("SELECT v FROM t WHERE a = 0 AND b = 'x'")
    assert isinstance(node.execute(ids[0]), RowsResult)
    unknown = node.execute(b"\x00" * 16)
    assert unknown.code == ErrorCode.UNPREPARED


def test_use_and_ddl_can_be_prepared(node: ExecNode) -> None:
    use = node.prepare("USE system")
    node.execute(use.statement_id)
    assert node.session.keyspace == "system"
    create = node.prepare("CREATE TABLE ks.z (k int PRIMARY KEY)")
    node.execute(create.statement_id)
    assert ("ks", "z") in node.processor.schema.tables


def test_the_python_driver_decodes_prepared_and_rows_results(node: ExecNode) -> None:
    node.ok("INSERT INTO t (a, b, c, d, v, m, l) VALUES (1, 'x', 2, 3, 4, {'k': 5}, [6, 7])")
    prepared = node.prepare("SELECT a, b, v, m, l, writetime(v) FROM t WHERE b = ? AND a = ?")
    decoded = driver_round_trip(prepared)
    assert decoded.query_id == prepared.statement_id
    assert decoded.pk_indexes == [1, 0] or list(decoded.pk_indexes) == [0, 1]
    assert [c[2] for c in decoded.bind_metadata] == ["b", "a"]
    assert [c[2] for c in decoded.column_metadata] == ["a", "b", "v", "m", "l", "writetime(v)"]
    rows = node.execute(prepared.statement_id, [value(TEXT, "x"), value(INT, 1)])
    decoded_rows = driver_round_trip(rows)
    ((a, b, v, m, items, written),) = decoded_rows.parsed_rows
    assert (a, b, v, dict(m), list(items)) == (1, "x", 4, {"k": 5}, [6, 7])
    assert written > 0
