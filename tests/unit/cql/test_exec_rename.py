"""``ALTER TABLE ... RENAME`` of primary key columns through the executor.

Proves, against Cassandra 4's ``AlterTableStatement.RenameColumns``: partition and clustering key
columns are renamed (several in one statement), the rows written before read back under the new
names, ``system_schema.columns`` shows them (kind and position kept), prepared statements are
invalidated so a driver re-prepares to the new result metadata, and the rename survives a
restart; other columns, unknown columns and taken names are Invalid with Cassandra's messages;
on a CDC-enabled table the log follows as Scylla's does (the old name's log column dropped,
the new one added, new changes logged under it). Each failed before: RENAME was refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.cql._results import SchemaChangeResult
from ringflow.errors import ErrorCode
from tests.unit.cql._exec_harness import ExecNode, node_with_keyspace


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path)
    node.ok(
        "CREATE TABLE t (p1 int, p2 text, c1 int, c2 text, v int, s int STATIC, "
        "PRIMARY KEY ((p1, p2), c1, c2)) WITH CLUSTERING ORDER BY (c1 DESC, c2 ASC)"
    )
    node.ok("INSERT INTO t (p1, p2, c1, c2, v, s) VALUES (1, 'a', 2, 'x', 10, 7)")
    node.ok("INSERT INTO t (p1, p2, c1, c2, v) VALUES (1, 'a', 3, 'y', 11)")
    yield node
    assert node.processor.internal_errors == 0
    node.close()


def columns(node: ExecNode, table: str = "t") -> list[tuple[str, str, int]]:
    return node.ok(
        "SELECT column_name, kind, position FROM system_schema.columns "
        f"WHERE keyspace_name = 'ks' AND table_name = '{table}'"
    )


def test_key_columns_are_renamed_and_rows_keep_their_values(node: ExecNode) -> None:
    response = node.q("ALTER TABLE t RENAME p2 TO part AND c1 TO ck")
    assert isinstance(response, SchemaChangeResult)
    assert columns(node) == [
        ("c2", "clustering", 1),
        ("ck", "clustering", 0),
        ("p1", "partition_key", 0),
        ("part", "partition_key", 1),
        ("s", "static", -1),
        ("v", "regular", -1),
    ]
    rows = node.ok("SELECT p1, part, ck, c2, v, s FROM t WHERE p1 = 1 AND part = 'a'")
    assert rows == [(1, "a", 3, "y", 11, 7), (1, "a", 2, "x", 10, 7)]  # ck DESC kept
    assert node.ok("SELECT v FROM t WHERE p1 = 1 AND part = 'a' AND ck = 2 AND c2 = 'x'") == [(10,)]
    node.ok("UPDATE t SET v = 12 WHERE p1 = 1 AND part = 'a' AND ck = 3 AND c2 = 'y'")
    assert node.ok("SELECT max(v) FROM t WHERE p1 = 1 AND part = 'a'") == [(12,)]
    error = node.error("SELECT c1 FROM t")
    assert error.code == ErrorCode.INVALID and "c1" in error.message
    node.restart()
    node.ok("USE ks")
    assert node.ok("SELECT part, ck FROM t WHERE p1 = 1 AND part = 'a'") == [("a", 3), ("a", 2)]


def test_prepared_statements_of_the_table_are_invalidated(node: ExecNode) -> None:
    select = node.prepare("SELECT * FROM t WHERE p1 = ? AND p2 = ?")
    assert [c.name for c in select.result_metadata.columns or ()][:4] == ["p1", "p2", "c1", "c2"]
    node.ok("ALTER TABLE t RENAME c1 TO ck")
    assert node.execute(select.statement_id).code == ErrorCode.UNPREPARED
    again = node.prepare("SELECT * FROM t WHERE p1 = ? AND p2 = ?")
    assert [c.name for c in again.result_metadata.columns or ()][:4] == ["p1", "p2", "ck", "c2"]


RENAME_ERRORS = [
    ("ALTER TABLE t RENAME v TO w", "Cannot rename non PRIMARY KEY column v"),
    ("ALTER TABLE t RENAME s TO w", "Cannot rename non PRIMARY KEY column s"),
    ("ALTER TABLE t RENAME nope TO w", "Undefined column name nope in table ks.t"),
    ("ALTER TABLE t RENAME c1 TO v",
     "Cannot rename column c1 to v in table 'ks.t'; another column with that name already exists"),
    ("ALTER TABLE t RENAME c1 TO x AND c2 TO x",
     "Cannot rename column c2 to x in table 'ks.t'; another column with that name already exists"),
    ("ALTER TABLE t RENAME c1 TO c2 AND c2 TO c1",  # checked against the table before
     "Cannot rename column c1 to c2 in table 'ks.t'; another column with that name already "
     "exists"),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "message"), RENAME_ERRORS)
def test_refusals_carry_cassandras_messages(node: ExecNode, statement: str, message: str) -> None:
    error = node.error(statement)
    assert (error.code, error.message) == (ErrorCode.INVALID, message)
    assert columns(node)[0][0] == "c1"  # nothing renamed


def test_if_exists_skips_an_unknown_column(node: ExecNode) -> None:
    node.ok("ALTER TABLE t RENAME IF EXISTS nope TO w AND c1 TO ck")
    assert [name for name, _, _ in columns(node)][:2] == ["c2", "ck"]


def test_the_cdc_log_follows_a_renamed_base_as_scyllas(node: ExecNode) -> None:
    node.ok(
        "CREATE TABLE e (k int, c int, v text, PRIMARY KEY (k, c)) WITH cdc = {'enabled': true}"
    )
    node.ok("INSERT INTO e (k, c, v) VALUES (1, 2, 'before')")
    node.clock.advance(1)
    node.ok("ALTER TABLE e RENAME c TO c2")
    node.ok("INSERT INTO e (k, c2, v) VALUES (1, 3, 'after')")
    log = [name for name, _, _ in columns(node, "e_scylla_cdc_log")]
    assert "c2" in log and "c" not in log and "k" in log
    dropped = node.ok(
        "SELECT column_name FROM system_schema.dropped_columns WHERE keyspace_name = 'ks' "
        "AND table_name = 'e_scylla_cdc_log'"
    )
    assert dropped == [("c",)]
    rows = node.ok('SELECT "cdc$operation", k, c2, v FROM e_scylla_cdc_log')
    assert sorted(rows, key=lambda row: row[3]) == [(2, 1, 3, "after"), (2, 1, None, "before")]
    error = node.error("ALTER TABLE e_scylla_cdc_log RENAME k TO kk")
    assert error.message == "Cannot rename a column of a CDC log table."
