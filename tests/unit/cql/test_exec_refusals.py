"""Invalid input refused as Cassandra 4 refuses it, with its error class and message (issue 20
§2): replication maps, key sizes, reserved timestamps, durations, table properties, DISTINCT
with PER PARTITION LIMIT, batch size thresholds. Each case was accepted (or answered with
another class or message) before."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ringflow.cql._batch_size import mutation_data_size
from ringflow.errors import ErrorCode
from ringflow.schema import Cell, LivenessInfo, Mutation, Row
from tests.unit.cql._exec_harness import ExecNode, node_with_keyspace


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path_factory.mktemp("refusals"))
    node.ok("CREATE TABLE t (k int, c int, v text, d duration, PRIMARY KEY (k, c))")
    node.ok("CREATE TABLE b (k blob, c blob, v int, PRIMARY KEY (k, c))")
    yield node
    assert node.processor.internal_errors == 0
    node.close()


REFUSALS = [
    ("CREATE KEYSPACE r1 WITH replication = {'class': 'NetworkTopologyStrategy', 'nodc': 3}",
     ErrorCode.CONFIG_ERROR,
     "Unrecognized strategy option {nodc} passed to NetworkTopologyStrategy for keyspace r1"),
    ("CREATE KEYSPACE r1 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1, "
     "'datacenter1': 1}", ErrorCode.CONFIG_ERROR,
     "Unrecognized strategy option {datacenter1} passed to SimpleStrategy for keyspace r1"),
    ("CREATE KEYSPACE r1 WITH replication = {'replication_factor': 1}", ErrorCode.CONFIG_ERROR,
     "Missing replication strategy class"),
    ("CREATE KEYSPACE r1 WITH durable_writes = true", ErrorCode.INVALID,
     "Missing mandatory option 'replication'"),
    ("CREATE TABLE x (k int PRIMARY KEY) WITH flavour = 1", ErrorCode.SYNTAX_ERROR,
     "Unknown property 'flavour'"),
    (f"INSERT INTO b (k, c, v) VALUES (0x01, 0x{'ab' * 70_000}, 1)", ErrorCode.INVALID,
     "Key length of 70000 is longer than maximum of 65535"),
    (f"UPDATE b SET v = 1 WHERE k = 0x01 AND c = 0x{'ab' * 65_536}", ErrorCode.INVALID,
     "Key length of 65536 is longer than maximum of 65535"),
    ("INSERT INTO t (k, c, v) VALUES (1, 1, 'a') USING TIMESTAMP -9223372036854775808",
     ErrorCode.INVALID, "Invalid timestamp value: -9223372036854775808"),
    ("INSERT INTO t (k, c, d) VALUES (1, 1, 1h1h)", ErrorCode.INVALID,
     "Invalid duration. The hours are specified multiple times"),
    ("INSERT INTO t (k, c, d) VALUES (1, 1, 30m2h)", ErrorCode.INVALID,
     "Invalid duration. The minutes should be after hours"),
    ("INSERT INTO t (k, c, d) VALUES (1, 1, '1h30x')", ErrorCode.INVALID,
     "Unable to convert '1h30x' to a duration"),
    ("INSERT INTO t (k, c, d) VALUES (1, 1, 'P1Y2W')", ErrorCode.INVALID,
     "Unable to convert 'P1Y2W' to a duration"),
    ("SELECT DISTINCT k FROM t PER PARTITION LIMIT 1", ErrorCode.INVALID,
     "PER PARTITION LIMIT is not allowed with SELECT DISTINCT queries"),
    ("SELECT * FROM t WHERE k = 1 AND (c) > (1) AND c < 3", ErrorCode.INVALID,
     "Mixing single column relations and multi column relations on clustering columns is not "
     "allowed"),
    ("SELECT * FROM t WHERE k = null", ErrorCode.INVALID,
     "Invalid null value in condition for column k"),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "code", "message"), REFUSALS)
def test_refused_as_cassandra_refuses(
    node: ExecNode, statement: str, code: ErrorCode, message: str
) -> None:
    error = node.error(statement)
    assert error.code == code and message in error.message, error
    assert node.ok("SELECT * FROM t WHERE k = 1") == []  # nothing half-applied


def test_replication_without_a_factor_gets_the_default(node: ExecNode) -> None:
    """Cassandra 4.1+: ``default_keyspace_rf`` (1) fills a missing factor; NetworkTopology's
    shorthand and its default expand to every known data center; an ALTER from SimpleStrategy
    to NetworkTopologyStrategy keeps the factor."""
    node.ok("CREATE KEYSPACE s1 WITH replication = {'class': 'SimpleStrategy'}")
    node.ok("CREATE KEYSPACE n1 WITH replication = {'class': 'NetworkTopologyStrategy'}")
    node.ok(
        "CREATE KEYSPACE n2 WITH replication = "
        "{'class': 'NetworkTopologyStrategy', 'replication_factor': 2}"
    )
    node.ok(
        "CREATE KEYSPACE s2 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    node.ok("ALTER KEYSPACE s2 WITH replication = {'class': 'NetworkTopologyStrategy'}")
    rows = dict(node.ok("SELECT keyspace_name, replication FROM system_schema.keyspaces"))
    prefix = "org.apache.cassandra.locator."
    assert rows["s1"] == {"class": prefix + "SimpleStrategy", "replication_factor": "1"}
    assert rows["n1"] == {"class": prefix + "NetworkTopologyStrategy", "datacenter1": "1"}
    assert rows["n2"] == {"class": prefix + "NetworkTopologyStrategy", "datacenter1": "2"}
    assert rows["s2"] == {"class": prefix + "NetworkTopologyStrategy", "datacenter1": "3"}


def test_durations_in_every_form_cassandra_reads(node: ExecNode) -> None:
    forms = ["1y2mo3w4d5h6m7s8ms9us10ns", "'P1Y2M3DT4H5M6S'", "'P2W'", "'P0001-02-03T04:05:06'",
             "-1h30m", "'PT'"]  # fmt: skip
    for c, form in enumerate(forms):
        node.ok(f"INSERT INTO t (k, c, d) VALUES (9, {c}, {form})")
    assert len(node.ok("SELECT d FROM t WHERE k = 9")) == len(forms)


def _batch(partitions: int, value_bytes: int) -> str:
    inserts = " ".join(
        f"INSERT INTO t (k, c, v) VALUES ({100 + i % partitions}, {i}, '{'x' * value_bytes}');"
        for i in range(10)
    )
    return f"BEGIN UNLOGGED BATCH {inserts} APPLY BATCH"


def test_batch_size_thresholds(node: ExecNode) -> None:
    """A batch over several partitions above 5 KiB gets Cassandra's warning, above 50 KiB it is
    refused whole; a single-partition batch is not measured."""
    node.ok(_batch(1, 6_000))
    assert node.processor.take_warnings() == ()
    node.ok(_batch(2, 100))
    assert node.processor.take_warnings() == ()
    node.ok(_batch(2, 600))
    (warning,) = node.processor.take_warnings()
    assert warning.startswith("Batch for [ks.t] is of size 6.")
    assert "exceeding specified threshold of 5.000KiB" in warning
    before = node.ok("SELECT count(*) FROM t WHERE k IN (100, 101)")
    error = node.error(_batch(2, 6_000))
    assert error.code == ErrorCode.INVALID and error.message == "Batch too large"
    assert node.ok("SELECT count(*) FROM t WHERE k IN (100, 101)") == before


def test_mutation_data_size_counts_as_cassandra() -> None:
    row = Row((b"\x00\x00\x00\x01",), LivenessInfo(1), None, {"v": Cell(1, b"abc")})
    mutation = Mutation("ks", "t", (b"k",), rows=(row,))
    assert mutation_data_size(mutation) == 4 + 8 + 16 + 3


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE INDEX ON t (v)",
        "CREATE MATERIALIZED VIEW mv AS SELECT * FROM t WHERE v IS NOT NULL PRIMARY KEY (v, k, c)",
        "CREATE FUNCTION f (a int) CALLED ON NULL INPUT RETURNS int LANGUAGE java AS 'return a;'",
    ],
)
def test_unsupported_statements_are_invalid_requests(node: ExecNode, statement: str) -> None:
    """Executed or prepared: InvalidRequest saying ringflow does not support it (issue 20 §4:
    never a syntax error for a statement Cassandra accepts)."""
    error = node.error(statement)
    assert error.code == ErrorCode.INVALID and error.message.endswith("not supported by ringflow")
    with pytest.raises(AssertionError, match="not supported by ringflow"):
        node.prepare(statement)
