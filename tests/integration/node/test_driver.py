"""A real node process and the real Scylla Python driver: what a client application sees.

Proves, against ``ringflow node start`` over loopback: the driver connects (protocol v4) and
its metadata refresh reads our system tables (keyspaces, tables, columns, the token map with our
tokens, replicas = our host); DDL (keyspace, CDC table, UDT) shows up in metadata; prepared
statements are routed token-aware; paging over 10,000 rows returns every row once, in order;
batches apply; every CQL type round-trips with the driver's own Python values; and each error
surfaces as the driver exception class an application catches.
"""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import struct
import time
import uuid
from collections import namedtuple
from typing import Any

import pytest
from cassandra import AlreadyExists, InvalidRequest
from cassandra.cluster import Cluster, Session
from cassandra.protocol import SyntaxException
from cassandra.query import BatchStatement, BatchType, SimpleStatement
from cassandra.util import Date, Duration, Time

from ringflow.cli._demo_cluster import NodeProcess
from tests.integration.node.conftest import saved_tokens

KEYSPACE = "e2e"


@pytest.fixture(scope="module")
def keyspace(session: Session, cluster: Cluster) -> str:
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    session.execute(f"USE {KEYSPACE}")
    return KEYSPACE


def test_control_connection_reads_local_node_and_system_keyspaces(
    cluster: Cluster, session: Session, node: NodeProcess
) -> None:
    assert cluster.protocol_version == 4
    hosts = cluster.metadata.all_hosts()
    assert [host.address for host in hosts] == [node.address]
    host = hosts[0]
    assert str(host.host_id) == node.host_id
    assert host.datacenter == "datacenter1" and host.rack == "rack1"
    assert host.release_version == "3.0.8"
    assert host.is_up
    assert {"system", "system_schema"} <= set(cluster.metadata.keyspaces)
    local = session.execute("SELECT cluster_name, release_version FROM system.local").one()
    assert local.cluster_name == "ringflow" and local.release_version == "3.0.8"


def test_token_map_holds_our_tokens_and_replicas_are_our_host(
    cluster: Cluster, keyspace: str, node: NodeProcess
) -> None:
    token_map = cluster.metadata.token_map
    assert token_map is not None
    ring_tokens = sorted(token.value for token in token_map.ring)
    assert ring_tokens == sorted(saved_tokens(node))
    assert len(ring_tokens) == 16
    host = cluster.metadata.all_hosts()[0]
    for key in range(20):
        replicas = cluster.metadata.get_replicas(keyspace, struct.pack(">i", key))
        assert replicas == [host]


def test_ddl_shows_up_in_metadata_and_the_log_table_arrives_by_event(
    cluster: Cluster, session: Session, keyspace: str
) -> None:
    session.execute(
        "CREATE TABLE events (pk int, ck int, v text, n bigint, PRIMARY KEY (pk, ck)) "
        "WITH cdc = {'enabled': true}"
    )
    # The answer names the base table; the log table reaches the driver's metadata only through
    # the SCHEMA_CHANGE event pushed to its control connection (refreshes are debounced).
    deadline = time.monotonic() + 15
    tables = cluster.metadata.keyspaces[keyspace].tables
    while "events_scylla_cdc_log" not in tables and time.monotonic() < deadline:
        time.sleep(0.1)
        tables = cluster.metadata.keyspaces[keyspace].tables
    assert "events_scylla_cdc_log" in tables, "no SCHEMA_CHANGE event for the log table"
    cluster.refresh_schema_metadata(max_schema_agreement_wait=10)
    tables = cluster.metadata.keyspaces[keyspace].tables
    events = tables["events"]
    assert [column.name for column in events.partition_key] == ["pk"]
    assert [column.name for column in events.clustering_key] == ["ck"]
    assert events.columns["v"].cql_type == "text"
    assert events.columns["n"].cql_type == "bigint"
    log = tables["events_scylla_cdc_log"]
    assert {"cdc$stream_id", "cdc$time", "cdc$batch_seq_no", "cdc$operation"} <= set(log.columns)
    assert [column.name for column in log.partition_key] == ["cdc$stream_id"]


def test_prepared_statements_are_routed_token_aware(
    cluster: Cluster, session: Session, keyspace: str
) -> None:
    session.execute("CREATE TABLE IF NOT EXISTS kv (k int PRIMARY KEY, v text)")
    insert = session.prepare("INSERT INTO kv (k, v) VALUES (?, ?)")
    select = session.prepare("SELECT v FROM kv WHERE k = ?")
    assert insert.routing_key_indexes == [0]
    host = cluster.metadata.all_hosts()[0]
    policy = cluster.profile_manager.default.load_balancing_policy
    for key in range(50):
        bound = insert.bind((key, f"value {key}"))
        assert bound.routing_key == struct.pack(">i", key)
        assert next(iter(policy.make_query_plan(keyspace, bound))) == host
        session.execute(bound)
    for key in range(50):
        assert session.execute(select, (key,)).one().v == f"value {key}"
    assert session.execute(select, (999,)).one() is None


def test_paging_over_10000_rows_returns_each_row_once_in_order(
    session: Session, keyspace: str
) -> None:
    session.execute("CREATE TABLE paged (p int, c int, v text, PRIMARY KEY (p, c))")
    insert = session.prepare("INSERT INTO paged (p, c, v) VALUES (?, ?, ?)")
    for partition in range(10):
        for start in range(0, 1000, 250):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for c in range(start, start + 250):
                batch.add(insert, (partition, c, f"{partition}:{c}"))
            session.execute(batch)
    one_partition = SimpleStatement("SELECT c, v FROM paged WHERE p = 3", fetch_size=77)
    result = session.execute(one_partition)
    rows = list(result)
    assert [row.c for row in rows] == list(range(1000))
    everything = SimpleStatement("SELECT p, c, v FROM paged", fetch_size=700)
    seen = [(row.p, row.c, row.v) for row in session.execute(everything)]
    assert len(seen) == 10_000
    assert len(set(seen)) == 10_000
    assert all(v == f"{p}:{c}" for p, c, v in seen)
    count = session.execute("SELECT count(*) FROM paged").one()
    assert count[0] == 10_000


def test_logged_batch_across_partitions_applies_atomically(session: Session, keyspace: str) -> None:
    session.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int)")
    insert = session.prepare("INSERT INTO accounts (id, balance) VALUES (?, ?)")
    batch = BatchStatement(batch_type=BatchType.LOGGED)
    for account in range(5):
        batch.add(insert, (account, 100 * account))
    batch.add(SimpleStatement("UPDATE accounts SET balance = 7 WHERE id = 0"))
    session.execute(batch)
    balances = {row.id: row.balance for row in session.execute("SELECT * FROM accounts")}
    assert balances == {0: 7, 1: 100, 2: 200, 3: 300, 4: 400}
    failing = BatchStatement()
    failing.add(insert, (9, 9))
    failing.add(SimpleStatement("INSERT INTO accounts (id, nope) VALUES (10, 1)"))
    with pytest.raises(InvalidRequest):
        session.execute(failing)
    assert session.execute("SELECT * FROM accounts WHERE id = 9").one() is None


def test_batch_size_warning_reaches_the_driver_and_too_large_is_refused(
    session: Session, keyspace: str
) -> None:
    """Cassandra's batch_size_warn_threshold warning arrives with the answer (the driver's
    ``response_future.warnings``); over batch_size_fail_threshold the batch is refused whole."""
    session.execute("CREATE TABLE sized (k int, c int, v text, PRIMARY KEY (k, c))")
    insert = session.prepare("INSERT INTO sized (k, c, v) VALUES (?, ?, ?)")

    def batch(value_bytes: int) -> BatchStatement:
        statement = BatchStatement(batch_type=BatchType.UNLOGGED)
        for row in range(10):
            statement.add(insert, (row % 2, row, "x" * value_bytes))
        return statement

    quiet = session.execute(batch(100))
    assert not quiet.response_future.warnings
    warned = session.execute(batch(600))
    (warning,) = warned.response_future.warnings
    assert warning.startswith(f"Batch for [{keyspace}.sized] is of size 6.")
    with pytest.raises(InvalidRequest, match="Batch too large"):
        session.execute(batch(6_000))
    assert len(list(session.execute("SELECT v FROM sized"))) == 10
    assert {len(row.v) for row in session.execute("SELECT v FROM sized")} == {600}


ALL_TYPES = {
    "t_text": ("text", "héllo, ωorld"),
    "t_ascii": ("ascii", "plain"),
    "t_int": ("int", -(2**31)),
    "t_bigint": ("bigint", 2**63 - 1),
    "t_varint": ("varint", -(10**40) + 7),
    "t_decimal": ("decimal", decimal.Decimal("-12345678901234567890.000123")),
    "t_double": ("double", 3.141592653589793),
    "t_float": ("float", 1.5),
    "t_boolean": ("boolean", True),
    "t_blob": ("blob", b"\x00\xffbytes"),
    "t_uuid": ("uuid", uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")),
    "t_timeuuid": ("timeuuid", uuid.UUID("e3e70682-c209-11ee-8000-000000000001")),
    "t_timestamp": ("timestamp", datetime.datetime(2024, 2, 29, 23, 59, 58, 123000)),
    "t_date": ("date", Date(datetime.date(1969, 7, 20))),
    "t_time": ("time", Time(datetime.time(13, 14, 15, 161718))),
    "t_inet": ("inet", "10.1.2.3"),
    "t_inet6": ("inet", "2001:db8::1"),
    "t_duration": ("duration", Duration(1, 2, 3_000_000_004)),
    "t_smallint": ("smallint", -32768),
    "t_tinyint": ("tinyint", 127),
    "t_list": ("list<int>", [3, 1, 2, 1]),
    "t_frozen_list": ("frozen<list<text>>", ["b", "a"]),
    "t_set": ("set<text>", {"x", "y", "z"}),
    "t_frozen_set": ("frozen<set<int>>", {5, -1}),
    "t_map": ("map<text, int>", {"one": 1, "two": 2}),
    "t_frozen_map": ("frozen<map<int, boolean>>", {1: True, 2: False}),
    "t_tuple": ("tuple<int, text, double>", (1, "two", 3.0)),
    "t_nested": ("frozen<list<frozen<map<text, frozen<set<int>>>>>>", [{"a": {1, 2}}]),
    "t_udt": ("frozen<address>", None),
    "t_udt_cells": ("address", None),
}
Address = namedtuple("Address", ["street", "zip", "tags"])


def _normalise(value: Any) -> Any:
    """The driver's containers and date/time wrappers as plain comparable Python values."""
    if isinstance(value, Date):
        return value.date()
    if isinstance(value, Time):
        return value.time()
    if isinstance(value, dict) or hasattr(value, "items"):
        return {_normalise(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, set | frozenset) or type(value).__name__ == "SortedSet":
        return frozenset(_normalise(v) for v in value)
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_normalise(v) for v in value)
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    return value


def test_every_type_round_trips_through_prepared_and_simple_statements(
    session: Session, cluster: Cluster, keyspace: str
) -> None:
    session.execute("CREATE TYPE address (street text, zip int, tags frozen<set<text>>)")
    columns = ", ".join(f"{name} {cql}" for name, (cql, _) in ALL_TYPES.items())
    session.execute(f"CREATE TABLE types (k int PRIMARY KEY, {columns})")
    values = {name: value for name, (_, value) in ALL_TYPES.items()}
    values["t_udt"] = Address("Main St", 12345, {"a", "b"})
    values["t_udt_cells"] = Address("Main St", 12345, {"a", "b"})
    names = list(values)
    insert = session.prepare(
        f"INSERT INTO types (k, {', '.join(names)}) VALUES (?, {', '.join('?' * len(names))})"
    )
    session.execute(insert, [1, *values.values()])
    row = session.execute("SELECT * FROM types WHERE k = 1").one()
    for name, expected in values.items():
        got = getattr(row, name)
        if name.startswith("t_udt"):
            assert (got.street, got.zip, set(got.tags)) == ("Main St", 12345, {"a", "b"})
            continue
        assert _normalise(got) == _normalise(expected), name
    session.execute(
        "INSERT INTO types (k, t_text, t_varint, t_list, t_map, t_udt, t_duration, t_date) "
        "VALUES (2, 'lit', 123456789012345678901234567890, [1, 2], {'k': 3}, "
        "{street: 'Side', zip: 1, tags: {'t'}}, 1mo2d3ns, '2020-01-02')"
    )
    row = session.execute("SELECT * FROM types WHERE k = 2").one()
    assert row.t_text == "lit" and row.t_varint == 123456789012345678901234567890
    assert row.t_list == [1, 2] and dict(row.t_map) == {"k": 3}
    assert (row.t_udt.street, row.t_udt.zip) == ("Side", 1)
    assert row.t_duration == Duration(1, 2, 3)
    assert row.t_date.date() == datetime.date(2020, 1, 2)
    assert row.t_int is None
    udt = cluster.metadata.keyspaces[keyspace].user_types["address"]
    assert udt.field_names == ["street", "zip", "tags"]


@pytest.mark.parametrize(
    ("statement", "error", "fragment"),
    [
        ("SELEC * FROM kv", SyntaxException, ""),
        ("SELECT * FROM no_such_table", InvalidRequest, "no_such_table"),
        ("SELECT nope FROM kv", InvalidRequest, "nope"),
        ("INSERT INTO kv (k, v) VALUES ('text', 'v')", InvalidRequest, ""),
        ("INSERT INTO kv (v) VALUES ('v')", InvalidRequest, ""),
        ("SELECT * FROM kv WHERE v = 'x'", InvalidRequest, "ALLOW FILTERING"),
        ("CREATE TABLE kv (k int PRIMARY KEY)", AlreadyExists, ""),
        (
            "CREATE KEYSPACE e2e WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}",
            AlreadyExists,
            "",
        ),
    ],
)
def test_errors_surface_as_the_driver_exception_classes(
    session: Session, keyspace: str, statement: str, error: type[Exception], fragment: str
) -> None:
    session.execute("CREATE TABLE IF NOT EXISTS kv (k int PRIMARY KEY, v text)")
    with pytest.raises(error) as raised:
        session.execute(statement)
    assert fragment in str(raised.value)


def test_cdc_write_from_the_future_is_invalid_and_writes_nothing(
    session: Session, keyspace: str
) -> None:
    session.execute(
        "CREATE TABLE IF NOT EXISTS future (k int PRIMARY KEY, v int) WITH cdc = {'enabled': true}"
    )
    ahead_us = (time.time_ns() // 1000) + 10_000_000
    with pytest.raises(InvalidRequest) as raised:
        session.execute(f"INSERT INTO future (k, v) VALUES (1, 1) USING TIMESTAMP {ahead_us}")
    assert "future" in str(raised.value)
    assert session.execute("SELECT * FROM future WHERE k = 1").one() is None
    session.execute("INSERT INTO future (k, v) VALUES (1, 2)")
    assert session.execute("SELECT v FROM future WHERE k = 1").one().v == 2


def test_a_driver_starting_at_v5_downgrades_to_v4(node: NodeProcess) -> None:
    cluster = Cluster([node.address], port=node.port, connect_timeout=10)
    try:
        session = cluster.connect()
        assert cluster.protocol_version == 4
        assert session.execute("SELECT key FROM system.local").one().key == "local"
    finally:
        cluster.shutdown()
