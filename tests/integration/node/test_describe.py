"""Issue 20 §3 remainder B against one real node, through the Scylla Python driver and cqlsh.

Proves: server-side DESCRIBE answers the driver (paged by its fetch size, Cassandra's columns),
its statements recreate the schema (round trip), and cqlsh's ``DESCRIBE KEYSPACE`` is answered
by the server (its output carries the CDC log's ``ALTER TABLE ... WITH``, which only the server
writes; cqlsh's own fallback would not); GROUP BY pages by groups through the driver's
paging; ``ALTER TABLE <log> WITH`` and a user table called ``<x>_scylla_cdc_log`` behave as
Scylla's. Each failed before this change (DESCRIBE was a syntax error, GROUP BY one page, the
log DDL refused).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cassandra import InvalidRequest
from cassandra.cluster import Session
from cassandra.query import SimpleStatement

from ringflow.cli._demo_cluster import NodeProcess
from tests.integration.node.conftest import DICT_ROWS
from tests.integration.node.test_cqlsh import cqlsh

SCHEMA = [
    "CREATE KEYSPACE descks WITH replication = {'class': 'SimpleStrategy', "
    "'replication_factor': 1}",
    "CREATE TYPE descks.addr (street text, zip int)",
    "CREATE TABLE descks.orders (id int, item text, qty int, home frozen<addr>, "
    "PRIMARY KEY (id, item)) WITH cdc = {'enabled': true, 'preimage': true} "
    "AND comment = 'orders'",
    "CREATE TABLE descks.other (k int PRIMARY KEY, v text)",
    "ALTER TABLE descks.orders_scylla_cdc_log WITH comment = 'log of orders'",
]


@pytest.fixture(scope="module")
def described(session: Session) -> Session:
    for statement in SCHEMA:
        session.execute(statement)
    return session


def describe(session: Session, text: str, fetch_size: int | None = None) -> list[dict[str, str]]:
    statement = SimpleStatement(text, fetch_size=fetch_size)
    return list(session.execute(statement, execution_profile=DICT_ROWS))


def test_describe_through_the_driver_pages_and_round_trips(described: Session) -> None:
    rows = describe(described, "DESCRIBE KEYSPACE descks")
    assert list(rows[0]) == ["keyspace_name", "type", "name", "create_statement"]
    assert [(r["type"], r["name"]) for r in rows] == [
        ("keyspace", "descks"),
        ("type", "addr"),
        ("table", "orders"),
        ("table", "orders_scylla_cdc_log"),
        ("table", "other"),
    ]
    assert "cdc = {'delta': 'full', 'enabled': 'true'" in rows[2]["create_statement"]
    assert "comment = 'log of orders'" in rows[3]["create_statement"]
    assert describe(described, "DESCRIBE KEYSPACE descks", fetch_size=2) == rows  # 3 pages
    statements = [r["create_statement"] for r in rows]
    described.execute("DROP KEYSPACE descks")
    for statement in statements:
        described.execute(statement)
    assert describe(described, "DESCRIBE KEYSPACE descks") == rows
    tables = describe(described, "DESC TABLES")
    assert {("descks", "orders"), ("descks", "other")} <= {
        (r["keyspace_name"], r["name"]) for r in tables
    }
    assert ("descks", "orders_scylla_cdc_log") not in {
        (r["keyspace_name"], r["name"]) for r in tables
    }
    with pytest.raises(InvalidRequest, match="Table 'nope' not found in keyspace 'descks'"):
        described.execute("DESCRIBE TABLE descks.nope")
    (cluster,) = describe(described, "DESCRIBE CLUSTER")
    assert cluster["partitioner"] == "org.apache.cassandra.dht.Murmur3Partitioner"


def test_cqlsh_describe_is_answered_by_the_server(
    described: Session, node: NodeProcess, tmp_path: Path
) -> None:
    output = cqlsh(node, tmp_path, "-e", "DESCRIBE KEYSPACE descks")
    assert "CREATE TABLE descks.orders (" in output
    assert "AND cdc = {'delta': 'full', 'enabled': 'true', 'postimage': 'false'" in output
    # Only the server writes the log's properties as an ALTER (cqlsh's fallback cannot).
    assert "ALTER TABLE descks.orders_scylla_cdc_log WITH bloom_filter_fp_chance" in output
    assert "CREATE TYPE descks.addr (" in output


def test_group_by_pages_through_the_driver(described: Session) -> None:
    described.execute("CREATE TABLE descks.g (a int, b int, c int, PRIMARY KEY (a, b, c))")
    insert = described.prepare("INSERT INTO descks.g (a, b, c) VALUES (?, ?, ?)")
    for a in range(3):
        for b in range(4):
            for c in range(2):
                described.execute(insert, (a, b, c))
    query = "SELECT a, b, count(*) AS n FROM descks.g GROUP BY a, b"
    whole = list(described.execute(SimpleStatement(query)))
    result = described.execute(SimpleStatement(query, fetch_size=5))
    assert len(result.current_rows) == 5 and result.has_more_pages
    assert list(result) == whole and len(whole) == 12 and {row.n for row in whole} == {2}


def test_cdc_log_ddl_as_scylla(described: Session) -> None:
    described.execute("CREATE TABLE descks.x_scylla_cdc_log (k int PRIMARY KEY, v text)")
    described.execute("INSERT INTO descks.x_scylla_cdc_log (k, v) VALUES (1, 'one')")
    assert [tuple(r) for r in described.execute("SELECT k, v FROM descks.x_scylla_cdc_log")] == [
        (1, "one")
    ]
    with pytest.raises(InvalidRequest, match=r"because a table of name descks\.x_scylla_cdc_log"):
        described.execute("CREATE TABLE descks.x (k int PRIMARY KEY) WITH cdc = {'enabled': true}")
    with pytest.raises(InvalidRequest, match="Modify the base table instead"):
        described.execute("ALTER TABLE descks.orders_scylla_cdc_log ADD z int")
    described.execute("ALTER TABLE descks.orders_scylla_cdc_log WITH gc_grace_seconds = 99")
    (row,) = described.execute(
        "SELECT gc_grace_seconds FROM system_schema.tables WHERE keyspace_name = 'descks' "
        "AND table_name = 'orders_scylla_cdc_log'"
    )
    assert row.gc_grace_seconds == 99
