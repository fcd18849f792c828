"""Server-side ``DESCRIBE`` through the executor (``cql/_describe.py``).

Proves: the forms answer Cassandra 4's result columns and rows; the statements are CQL ringflow
runs again to the same schema (describe, drop, run, describe: identical, also WITH INTERNALS
onto a fresh node, ids kept); a CDC table's log is described as Scylla does (its ALTER after the
base, a comment on its own, out of listings); paging resumes at the next row and refuses a page
after a schema change; errors are Invalid with Scylla's messages. Each test failed before this
change: DESCRIBE was a syntax error.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from ringflow.cql import LocalDataPlane
from ringflow.cql._lexer import CqlSyntaxProblem
from ringflow.cql._parser import parse_statement
from ringflow.cql._results import RowsResult
from ringflow.errors import ErrorCode
from tests.unit.cql._exec_harness import ExecNode, column_names, decode_rows, node_with_keyspace

SCHEMA = [
    "CREATE TYPE ks.addr (street text, zip int)",
    "CREATE TYPE ks.person (name text, home frozen<addr>, tags frozen<set<text>>)",
    "CREATE TYPE ks.aaa (who frozen<person>)",
    "CREATE TABLE ks.orders (id int, item text, qty int, note text STATIC, "
    "owner frozen<person>, history list<int>, attrs map<text, int>, "
    "PRIMARY KEY ((id), item)) WITH CLUSTERING ORDER BY (item DESC) "
    "AND cdc = {'enabled': true, 'preimage': 'full', 'ttl': 3600} AND comment = 'it''s mine' "
    "AND default_time_to_live = 60 AND compaction = {'class': 'LeveledCompactionStrategy', "
    "'sstable_size_in_mb': '160'} AND caching = {'keys': 'NONE', 'rows_per_partition': '10'}",
    'CREATE TABLE ks."Mixed" ("Key" int, "two words" text, v blob, PRIMARY KEY (("Key", v)))',
    "CREATE TABLE ks.plain (k bigint PRIMARY KEY, d duration, t frozen<tuple<int, text>>)",
    "ALTER TABLE ks.orders_scylla_cdc_log WITH comment = 'kept' AND gc_grace_seconds = 5",
]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    (tmp_path / "a").mkdir()
    node = node_with_keyspace(tmp_path / "a")
    for statement in SCHEMA:
        node.ok(statement)
    yield node
    node.close()


def statements(node: ExecNode, text: str) -> list[str]:
    return [row[3] for row in node.ok(text)]


def test_describe_keyspace_rows_in_cassandra_order(node: ExecNode) -> None:
    response = node.raw("DESCRIBE KEYSPACE ks")
    assert isinstance(response, RowsResult)
    assert column_names(response) == ["keyspace_name", "type", "name", "create_statement"]
    assert [column.table for column in response.metadata.columns or ()] == ["describe"] * 4
    rows = decode_rows(response)
    assert [(r[1], r[2]) for r in rows] == [
        ("keyspace", "ks"),
        ("type", "addr"),
        ("type", "person"),  # before aaa, which uses it
        ("type", "aaa"),
        ("table", '"Mixed"'),
        ("table", "orders"),
        ("table", "orders_scylla_cdc_log"),  # the log's ALTER, after its base
        ("table", "plain"),
    ]
    keyspace, orders, log = rows[0][3], rows[5][3], rows[6][3]
    assert keyspace == (
        "CREATE KEYSPACE ks WITH replication = {'class': "
        "'org.apache.cassandra.locator.SimpleStrategy', 'replication_factor': '1'} "
        "AND durable_writes = true;"
    )
    assert orders.startswith(
        "CREATE TABLE ks.orders (\n    id int,\n    item text,\n    note text STATIC,\n"
    )
    assert "    PRIMARY KEY (id, item)\n) WITH CLUSTERING ORDER BY (item DESC)\n" in orders
    for part in (
        "AND comment = 'it''s mine'",
        "AND default_time_to_live = 60",
        "AND compaction = {'class': 'LeveledCompactionStrategy', 'sstable_size_in_mb': '160'}",
        "AND caching = {'keys': 'NONE', 'rows_per_partition': '10'}",
        "AND speculative_retry = '99.0PERCENTILE'",
        "AND cdc = {'delta': 'full', 'enabled': 'true', 'postimage': 'false', "
        "'preimage': 'full', 'ttl': '3600'};",
    ):
        assert part in orders, part
    assert log.startswith("ALTER TABLE ks.orders_scylla_cdc_log WITH bloom_filter_fp_chance")
    assert "AND comment = 'kept'" in log and "AND gc_grace_seconds = 5" in log
    assert "'class': 'TimeWindowCompactionStrategy'" in log and "cdc =" not in log
    assert 'PRIMARY KEY (("Key", v))' in rows[4][3]


def test_round_trip_describe_drop_run_describe(node: ExecNode) -> None:
    before = statements(node, "DESCRIBE SCHEMA")
    assert before == statements(node, "DESCRIBE KEYSPACE ks")  # ks is the only user keyspace
    node.ok("DROP KEYSPACE ks")
    for statement in before:
        node.ok(statement)
    assert statements(node, "DESCRIBE SCHEMA") == before
    node.restart()
    assert statements(node, "DESCRIBE SCHEMA") == before


def test_with_internals_recreates_the_same_ids_on_a_fresh_node(
    node: ExecNode, tmp_path: Path
) -> None:
    described = statements(node, "DESCRIBE SCHEMA WITH INTERNALS")
    assert f"WITH ID = {node.processor.schema.tables[('ks', 'orders')].id}\n" in described[5]
    (tmp_path / "b").mkdir()
    fresh = ExecNode(tmp_path / "b")
    for statement in described:
        fresh.ok(statement)
    assert statements(fresh, "DESCRIBE SCHEMA WITH INTERNALS") == described
    assert fresh.processor.schema.tables == node.processor.schema.tables
    assert fresh.error(
        "ALTER TABLE ks.plain WITH ID = 5d0d3f9c-0000-4000-8000-000000000000"
    ).code == (ErrorCode.CONFIG_ERROR)
    fresh.close()


def run_script(node: ExecNode, element: str) -> None:
    """Run a described element's statements one by one, as cqlsh runs a script."""
    for statement in element.split(";\n"):
        node.ok(statement.removesuffix(";"))


def test_with_internals_shows_dropped_columns_as_cassandra(node: ExecNode, tmp_path: Path) -> None:
    node.ok("CREATE TABLE ks.evolving (k int, c int, v text, d int, x frozen<addr>, "
            "PRIMARY KEY (k, c))")  # fmt: skip
    node.ok("INSERT INTO ks.evolving (k, c, v, d) VALUES (1, 1, 'a', 5)")
    node.clock.advance(1)
    node.ok("ALTER TABLE ks.evolving DROP d")
    node.ok("ALTER TABLE ks.evolving DROP x USING TIMESTAMP 1700000000500123")
    node.clock.advance(1)
    node.ok("ALTER TABLE ks.evolving ADD d int")
    plain = statements(node, "DESCRIBE TABLE ks.evolving")[0]
    assert "DROP" not in plain and "    d int,\n    PRIMARY KEY" in plain
    (described,) = statements(node, "DESCRIBE TABLE ks.evolving WITH INTERNALS")
    dropped_at_us = 1_700_000_001_000_000  # the clock's second, a whole millisecond
    assert described.startswith(
        "CREATE TABLE ks.evolving (\n    k int,\n    c int,\n    v text,\n    d int,\n"
        "    x frozen<tuple<text, int>>,\n    PRIMARY KEY (k, c)\n) WITH ID = "
    )
    assert described.endswith(
        "AND speculative_retry = '99.0PERCENTILE';\n"
        f"ALTER TABLE ks.evolving DROP d USING TIMESTAMP {dropped_at_us};\n"
        "ALTER TABLE ks.evolving ADD d int;\n"
        "ALTER TABLE ks.evolving DROP x USING TIMESTAMP 1700000000501000;"  # whole ms, rounded up
    )
    assert node.ok("SELECT d FROM ks.evolving") == [(None,)]  # the old cell stays dropped
    (tmp_path / "b").mkdir()
    fresh = node_with_keyspace(tmp_path / "b")
    fresh.ok(SCHEMA[0])
    run_script(fresh, described)
    assert statements(fresh, "DESCRIBE TABLE ks.evolving WITH INTERNALS") == [described]
    query = "SELECT * FROM system_schema.dropped_columns WHERE keyspace_name = 'ks'"
    assert fresh.ok(query) == node.ok(query)
    fresh.ok("INSERT INTO ks.evolving (k, c, v, d) VALUES (1, 1, 'a', 5) USING TIMESTAMP 5")
    assert fresh.ok("SELECT d FROM ks.evolving") == [(None,)]  # written before the replayed drop
    fresh.close()


def test_listings_and_the_log_table(node: ExecNode) -> None:
    assert node.ok("DESC TABLES") == [
        ("ks", "table", '"Mixed"'),
        ("ks", "table", "orders"),
        ("ks", "table", "plain"),
    ]
    assert node.ok("DESC TYPES") == [("ks", "type", n) for n in ("aaa", "addr", "person")]
    assert node.ok("DESC FUNCTIONS") == [] and node.ok("DESC AGGREGATES") == []
    keyspaces = [row[2] for row in node.ok("DESCRIBE KEYSPACES")]
    assert keyspaces == sorted(keyspaces) and {"ks", "system", "system_schema"} <= set(keyspaces)
    node.ok("USE system_schema")
    assert ("system_schema", "table", "tables") in node.ok("DESC TABLES")
    assert node.ok("DESC TABLE ks.orders")[1][2] == "orders_scylla_cdc_log"
    (log,) = statements(node, "DESC TABLE ks.orders_scylla_cdc_log")
    assert log.startswith("/* Do NOT execute this statement!")
    assert "CREATE TABLE ks.orders_scylla_cdc_log (\n" in log and log.endswith("\n*/")
    full = [row[0] for row in node.ok("DESCRIBE FULL SCHEMA")]
    assert "system" in full and "system_schema" not in [r[0] for r in node.ok("DESC SCHEMA")]


def test_generic_only_and_type_forms(node: ExecNode) -> None:
    assert [r[2] for r in node.ok("DESC ks")][:2] == ["ks", "addr"]
    assert [r[2] for r in node.ok("DESC ONLY KEYSPACE ks")] == ["ks"]
    assert [r[2] for r in node.ok("DESCRIBE ks.plain")] == ["plain"]
    assert [r[2] for r in node.ok("DESCRIBE plain")] == ["plain"]  # the session keyspace's
    assert node.ok("DESCRIBE KEYSPACE")[0][2] == "ks"
    (addr,) = statements(node, "DESCRIBE TYPE addr")
    assert addr == "CREATE TYPE ks.addr (\n    street text,\n    zip int\n);"


ERRORS = [
    ("DESC KEYSPACE nope", "'nope' not found in keyspaces"),
    ("DESC TABLE nope", "Table 'nope' not found in keyspace 'ks'"),
    ("DESC TABLE other.t", "'other' not found in keyspaces"),
    ("DESC TYPE nope", "Type 'nope' not found in keyspace 'ks'"),
    ("DESC nope", "'nope' not found in keyspace 'ks'"),
    ("DESC INDEX i", "Table for existing index 'i' not found in 'ks'"),
    ("DESC MATERIALIZED VIEW v", "Materialized view 'v' not found in keyspace 'ks'"),
    ("DESC FUNCTION f", "Function 'f' not found in keyspace 'ks'"),
]


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_errors_are_invalid_with_scyllas_messages(node: ExecNode, text: str, message: str) -> None:
    error = node.error(text)
    assert (error.code, error.message) == (ErrorCode.INVALID, message)


def test_no_keyspace(tmp_path: Path) -> None:
    node = ExecNode(tmp_path)
    error = node.error("DESCRIBE TABLE t")
    assert (error.code, error.message) == (
        ErrorCode.INVALID,
        "No keyspace specified and no current keyspace",
    )
    assert node.error("DESCRIBE KEYSPACE").code == ErrorCode.INVALID
    node.close()


@pytest.mark.parametrize("text", ["DESCRIBE", "DESC TABLE", "DESC KEYSPACES x", "DESC FULL t"])
def test_syntax_errors(text: str) -> None:
    with pytest.raises(CqlSyntaxProblem):
        parse_statement(text)


def test_paging_resumes_and_refuses_a_changed_schema(node: ExecNode) -> None:
    whole = node.ok("DESCRIBE SCHEMA")
    rows, pages = node.all_pages("DESCRIBE SCHEMA", page_size=3)
    assert rows == whole and pages == 3
    first = node.raw("DESCRIBE SCHEMA", page_size=3)
    state = first.metadata.paging_state
    assert state is not None
    node.ok("CREATE TABLE ks.later (k int PRIMARY KEY)")
    error = node.error("DESCRIBE SCHEMA", page_size=3, paging_state=state)
    assert error.code == ErrorCode.INVALID and "schema has changed" in error.message
    assert node.error("DESCRIBE SCHEMA", page_size=3, paging_state=b"\x44junk").code == (
        ErrorCode.INVALID
    )
    other = node.raw("DESCRIBE TABLES", page_size=1).metadata.paging_state
    assert node.error("DESCRIBE SCHEMA", page_size=3, paging_state=other).code == (
        ErrorCode.INVALID
    )


class _TwoNodeRing:
    """A cluster's view of the ring (``RingView``), as a cluster node gives its processor."""

    def datacenters(self) -> Sequence[str]:
        return ("datacenter1",)

    def range_ownership(self, keyspace: str) -> Mapping[str, Sequence[str]]:
        return {"10": ["127.0.0.2"], "-5": ["127.0.0.1"]}


def test_cluster(node: ExecNode, tmp_path: Path) -> None:
    response = node.raw("DESCRIBE CLUSTER")
    assert column_names(response) == ["cluster", "partitioner", "snitch", "range_ownership"]
    (row,) = decode_rows(response)
    assert row[:2] == ("ringflow", "org.apache.cassandra.dht.Murmur3Partitioner")
    node.processor.use_data_plane(LocalDataPlane(node.store), ring=_TwoNodeRing())
    assert node.ok("DESCRIBE CLUSTER")[0][3] == {"-5": ["127.0.0.1"], "10": ["127.0.0.2"]}
    (tmp_path / "bare").mkdir()
    bare = ExecNode(tmp_path / "bare")
    assert column_names(bare.raw("DESC CLUSTER")) == ["cluster", "partitioner", "snitch"]
    bare.close()


def test_prepared_describe(node: ExecNode) -> None:
    prepared = node.prepare("DESCRIBE TABLES")
    response = node.execute(prepared.statement_id)
    assert isinstance(response, RowsResult)
    assert [row[2] for row in decode_rows(response)] == ['"Mixed"', "orders", "plain"]
