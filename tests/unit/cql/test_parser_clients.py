"""Every query a real client sends on connect, on metadata refresh and while consuming CDC parses.

Oracle 1: the installed Python driver itself. Its control-connection and schema-parser queries are
collected from the driver's classes (``ControlConnection._SELECT_*``, ``SchemaParser*._SELECT_*``)
and by running its schema parsers against a connection that records what they would send (so
the ``WHERE keyspace_name = 'ks' ...`` forms and the Scylla ``USING TIMEOUT 2000ms`` suffix are
the driver's own text, not a copy).

Oracle 2: cqlsh (scylladb/scylla-cqlsh ``bin/cqlsh.py``, not installed here): on connect it reads
``system.local`` and ``system.versions``; ``DESCRIBE`` goes to the server first and cqlsh falls
back to its client-side describe when the server answers with a syntax error; ringflow answers
DESCRIBE itself (``cql/_describe.py``), so cqlsh's forms must parse as DESCRIBE statements.

Oracle 3: the scylla-cdc consumers' queries (``shared/reference/scylla-cdc.md`` §7), as the
libraries format them: scylla-cdc-go ``change.go``/``progress.go``/``topology.go``/``utils.go``,
scylla-cdc-rust ``stream_reader.rs``/``stream_generations.rs``/``checkpoints.rs``, and the Java
library's QueryBuilder output (``Driver3MasterCQL.java``, ``Driver3WorkerCQL.java``).
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import inspect
import types
import uuid
from typing import Any

import pytest
from cassandra import cluster, metadata, query
from cassandra.encoder import Encoder
from cassandra.metadata import protect_name
from cassandra.query import bind_params
from cassandra.util import Duration, maybe_add_timeout_to_query

from ringflow.cql._ast import (
    BindMarker,
    BlobLiteral,
    BooleanLiteral,
    ColumnRelation,
    DescribeKind,
    DescribeStatement,
    DurationLiteral,
    EmptyBraces,
    FloatLiteral,
    InsertStatement,
    IntegerLiteral,
    ListLiteral,
    MapLiteral,
    NullLiteral,
    Operator,
    QualifiedName,
    SelectStatement,
    SetLiteral,
    SetValue,
    Statement,
    StringLiteral,
    Term,
    UpdateStatement,
    UseStatement,
    UuidLiteral,
)
from ringflow.cql._parser import parse_statement, parse_statements

_TIMEOUT = datetime.timedelta(seconds=2)


class _RecordingConnection:
    """Stands in for ``cassandra.connection.Connection``: records queries, answers failure."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def wait_for_responses(self, *messages: Any, **_: Any) -> list[tuple[bool, Exception]]:
        self.queries.extend(message.query for message in messages)
        return [(False, RuntimeError("recorded"))] * len(messages)

    def wait_for_response(self, message: Any, **_: Any) -> tuple[bool, Exception]:
        self.queries.append(message.query)
        return False, RuntimeError("recorded")


def _class_queries() -> set[str]:
    found: set[str] = set()
    owners = [cluster.ControlConnection, query.QueryTrace]
    owners += [cls for _, cls in inspect.getmembers(metadata, inspect.isclass)]
    for owner in owners:
        for name in dir(owner):
            text = getattr(owner, name, None)
            if name.startswith("_SELECT") and isinstance(text, str) and "SELECT" in text:
                found.add(text)
    templates = {text for text in found if "{nt_col_name}" in text}
    for template in templates:
        found.discard(template)
        found.update(template.format(nt_col_name=c) for c in ("rpc_address", "native_address"))
    traces = {text for text in found if "%s" in text}
    found -= traces
    found.update(text % "6ab09bec-e68e-48d9-a5f8-97e6fb4c9b47" for text in traces)
    return found


def _schema_parser_queries() -> set[str]:
    function = types.SimpleNamespace(name="f", argument_types=["int", "text"], signature="f")
    found: set[str] = set()
    for _, parser_class in inspect.getmembers(metadata, inspect.isclass):
        if not parser_class.__name__.startswith("SchemaParser"):
            continue
        for timeout in (None, _TIMEOUT):
            found.update(_record_schema_parser(parser_class, timeout, function))
    return found


def _record_schema_parser(
    parser_class: Any, timeout: datetime.timedelta | None, function: Any
) -> list[str]:
    connection = _RecordingConnection()
    parser = parser_class(connection, 1.0, 100, timeout)
    calls = [
        ("get_all_keyspaces", ()),
        ("get_keyspace", ({}, "ks")),
        ("get_table", ({}, "ks", "tbl")),
        ("get_type", ({}, "ks", "address")),
        ("get_types_map", ({}, "ks")),
        ("get_function", ({}, "ks", function)),
        ("get_aggregate", ({}, "ks", function)),
    ]
    for method, args in calls:
        # The recorded failure answers make the parser give up; the queries are recorded first.
        with contextlib.suppress(Exception):
            getattr(parser, method)(*args)
    return connection.queries


def _other_driver_queries() -> set[str]:
    connection = _RecordingConnection()
    metadata.get_column_from_system_local(connection, "cluster_name", 1.0, _TIMEOUT)
    uses = {f"USE {protect_name(name)}" for name in ("ks", "MyKs", "key", "select")}
    routes = {
        "SELECT connection_id, host_id, address, port, tls_port FROM system.client_routes "
        "WHERE connection_id IN (?, ?)",
        "SELECT connection_id, host_id, address, port, tls_port FROM system.client_routes "
        "WHERE connection_id IN (?) AND host_id IN (?, ?)",
    }
    return set(connection.queries) | uses | routes


def _driver_queries() -> list[str]:
    base = _class_queries() | _schema_parser_queries() | _other_driver_queries()
    with_timeouts = {
        maybe_add_timeout_to_query(text, _TIMEOUT)
        for text in base
        if text.startswith("SELECT") and "USING TIMEOUT" not in text
    }
    return sorted(base | with_timeouts)


DRIVER_QUERIES = _driver_queries()


def test_the_driver_query_collection_is_substantial() -> None:
    joined = "\n".join(DRIVER_QUERIES)
    assert len(DRIVER_QUERIES) > 60
    for expected in (
        "FROM system.local WHERE key='local'",
        "FROM system.peers",
        "FROM system_schema.tables WHERE keyspace_name = 'ks' AND table_name = 'tbl'",
        "FROM system_schema.scylla_keyspaces",
        "argument_types = ['int', 'text']",
        "USING TIMEOUT 2000ms",
        'USE "MyKs"',
    ):
        assert expected in joined


@pytest.mark.parametrize("text", DRIVER_QUERIES)
def test_driver_query_parses(text: str) -> None:
    statement = parse_statement(text)
    if text.startswith("USE "):
        assert isinstance(statement, UseStatement)
        return
    assert isinstance(statement, SelectStatement)
    table = statement.table
    assert table.keyspace is not None
    assert f"{table.keyspace}.{table.name}" in text.lower()
    if "USING TIMEOUT" in text:
        assert statement.timeout == DurationLiteral("2000ms")
    if "key='local'" in text:
        assert statement.where == (ColumnRelation("key", Operator.EQ, StringLiteral("local")),)
    assert len(statement.bind_markers) == text.count("?")


ENCODED_VALUES: list[tuple[object, Term]] = [
    (None, NullLiteral()),
    (True, BooleanLiteral(True)),
    (-5, IntegerLiteral(-5)),
    (2**70, IntegerLiteral(2**70)),
    (1.5, FloatLiteral("1.5")),
    (float("nan"), FloatLiteral("NaN")),
    (float("-inf"), FloatLiteral("-Infinity")),
    (decimal.Decimal("-1.25"), FloatLiteral("-1.25")),
    ("it's", StringLiteral("it's")),
    (b"\x00\xff", BlobLiteral(b"\x00\xff")),
    (uuid.UUID(int=5), UuidLiteral(uuid.UUID(int=5))),
    (datetime.datetime(2024, 1, 2, 3, 4, 5), IntegerLiteral(1704164645000)),
    (datetime.date(2024, 1, 2), StringLiteral("2024-01-02")),
    ([1, "a"], ListLiteral((IntegerLiteral(1), StringLiteral("a")))),
    ({2}, SetLiteral((IntegerLiteral(2),))),
    ({"k": [1]}, MapLiteral(((StringLiteral("k"), ListLiteral((IntegerLiteral(1),))),))),
    ({}, EmptyBraces()),
    (Duration(1, 2, 3), DurationLiteral("1mo2d3ns")),
]


@pytest.mark.parametrize(("value", "expected"), ENCODED_VALUES)
def test_driver_encoded_literals(value: object, expected: Term) -> None:
    """Non-prepared queries carry values as the driver's Encoder formats them."""
    text = bind_params("INSERT INTO t (k, v) VALUES (0, %s)", (value,), Encoder())
    statement = parse_statement(text)
    assert isinstance(statement, InsertStatement)
    assert statement.values[1] == expected


CQLSH_QUERIES = [
    "select * from system.local where key = 'local'",
    "SELECT * FROM system.versions WHERE key = 'local'",
]


@pytest.mark.parametrize("text", CQLSH_QUERIES)
def test_cqlsh_connect_query_parses(text: str) -> None:
    statement = parse_statement(text)
    assert isinstance(statement, SelectStatement) and statement.is_star
    assert statement.where == (ColumnRelation("key", Operator.EQ, StringLiteral("local")),)


@pytest.mark.parametrize(
    ("text", "kind", "name"),
    [
        ("DESCRIBE KEYSPACES", DescribeKind.KEYSPACES, None),
        ("DESC TABLE ks.t;", DescribeKind.TABLE, QualifiedName("ks", "t")),
        ("describe cluster", DescribeKind.CLUSTER, None),
        ("DESCRIBE KEYSPACE ks", DescribeKind.KEYSPACE, QualifiedName(None, "ks")),
        ("DESC FULL SCHEMA", DescribeKind.FULL_SCHEMA, None),
        ('DESC "Ks"."T" WITH INTERNALS', DescribeKind.GENERIC, QualifiedName("Ks", "T")),
    ],
)
def test_cqlsh_describe_forms_parse(text: str, kind: DescribeKind, name: object) -> None:
    statement = parse_statement(text)
    assert statement == DescribeStatement(kind, name, "INTERNALS" in text)


CDC_GO_STREAMS = '"cdc$stream_id" IN (?, ?, ?)'
CDC_CONSUMER_QUERIES = [
    # scylla-cdc-go change.go (one stream uses "= ?"; tuples add writetime() selectors)
    f'SELECT * FROM ks.tbl_scylla_cdc_log WHERE {CDC_GO_STREAMS} AND "cdc$time" > ? '
    'AND "cdc$time" <= ? BYPASS CACHE',
    'SELECT writetime(tup), "cdc$stream_id", "cdc$time", tup, v FROM ks.tbl_scylla_cdc_log '
    'WHERE "cdc$stream_id" = ? AND "cdc$time" > ? AND "cdc$time" <= ? BYPASS CACHE',
    f'SELECT "cdc$stream_id", "cdc$time" FROM ks.tbl_scylla_cdc_log WHERE {CDC_GO_STREAMS} '
    'AND "cdc$time" > ? AND "cdc$time" <= ? PER PARTITION LIMIT 1 BYPASS CACHE',
    # scylla-cdc-go topology.go, utils.go
    "SELECT COUNT(*) FROM system.peers",
    "SELECT streams FROM system_distributed.cdc_streams_descriptions WHERE time = ?",
    "SELECT time FROM system_distributed.cdc_streams_descriptions",
    "SELECT streams_timestamp FROM system.cdc_local WHERE key = 'rewritten'",
    "SELECT streams FROM system_distributed.cdc_streams_descriptions_v2 WHERE time = ?",
    "SELECT time FROM system_distributed.cdc_generation_timestamps WHERE key = 'timestamps'",
    "SELECT * FROM system_schema.scylla_keyspaces WHERE keyspace_name = ?",
    "SELECT timestamp FROM system.cdc_timestamps WHERE keyspace_name = ? AND table_name = ?",
    "SELECT stream_id FROM system.cdc_streams WHERE keyspace_name = ? AND table_name = ? "
    "AND timestamp = ? AND stream_state = ?",
    "SELECT extensions FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?",
    # scylla-cdc-go progress.go
    "CREATE TABLE IF NOT EXISTS cdc_progress (generation timestamp, application_name text, "
    "table_name text, stream_id blob, last_timestamp timeuuid, current_generation timestamp, "
    "PRIMARY KEY ((generation, application_name, table_name, stream_id)))",
    "SELECT current_generation FROM cdc_progress WHERE generation = ? AND application_name = ? "
    "AND table_name = ? AND stream_id = ?",
    "INSERT INTO cdc_progress (generation, application_name, table_name, stream_id, "
    "current_generation) VALUES (?, ?, ?, ?, ?)",
    "INSERT INTO cdc_progress (generation, application_name, table_name, stream_id, "
    "last_timestamp) VALUES (?, ?, ?, ?, ?) USING TTL ?",
    # scylla-cdc-rust stream_reader.rs, stream_generations.rs, checkpoints.rs
    'SELECT * FROM ks.tbl_scylla_cdc_log WHERE "cdc$stream_id" in ? '
    'AND "cdc$time" >= minTimeuuid(?) AND "cdc$time" < minTimeuuid(?)  BYPASS CACHE',
    "\n        SELECT time\n        FROM system_distributed.cdc_generation_timestamps\n"
    "        WHERE key = 'timestamps';",
    "\n        SELECT time\n        FROM system_distributed.cdc_generation_timestamps\n"
    "        WHERE key = 'timestamps'\n        AND time <= ?\n        ORDER BY time DESC\n"
    "        LIMIT 1;",
    "\n        SELECT time\n        FROM system_distributed.cdc_generation_timestamps\n"
    "        WHERE key = 'timestamps'\n        AND time > ?\n        ORDER BY time ASC\n"
    "        LIMIT 1;",
    "\n        SELECT streams\n        FROM system_distributed.cdc_streams_descriptions_v2\n"
    "        WHERE time = ?;",
    "\n        SELECT timestamp\n        FROM system.cdc_timestamps\n"
    "        WHERE keyspace_name = ? AND table_name = ? AND timestamp <= ?\n"
    "        ORDER BY timestamp DESC\n        LIMIT 1;\n        ",
    "\n        SELECT stream_id\n        FROM system.cdc_streams\n        WHERE keyspace_name = ? "
    "AND table_name = ? AND timestamp = ? AND stream_state = ?;\n        ",
    'SELECT DISTINCT "cdc$stream_id" FROM tbl_scylla_cdc_log;',
    "SELECT initial_tablets FROM system_schema.scylla_keyspaces WHERE keyspace_name = ?",
    "CREATE TABLE IF NOT EXISTS ks.checkpoints (\n            stream_id blob PRIMARY KEY,\n"
    "            generation timestamp,\n            time timestamp)",
    "UPDATE ks.checkpoints USING TTL 604800\n                SET generation = ?, time = ?\n"
    "                WHERE stream_id = ?",
    "SELECT generation FROM ks.checkpoints\n                    WHERE stream_id = ?",
    "SELECT time FROM ks.checkpoints\n                    WHERE stream_id = ?\n"
    "                    LIMIT 1",
    # scylla-cdc-java (driver 3 QueryBuilder renders without spaces around operators)
    "SELECT min(time) FROM system_distributed.cdc_generation_timestamps "
    "WHERE key='timestamps' AND time>?;",
    "SELECT min(time) FROM system_distributed.cdc_streams_descriptions WHERE time>? "
    "ALLOW FILTERING;",
    "SELECT min(timestamp) FROM system.cdc_timestamps WHERE keyspace_name=? AND table_name=? "
    "AND timestamp>?;",
    "SELECT stream_id FROM system.cdc_streams WHERE keyspace_name=? AND table_name=? "
    "AND timestamp=? AND stream_kind=0;",
    "SELECT * FROM system.cdc_local WHERE key='rewritten';",
    'SELECT * FROM ks.tbl_scylla_cdc_log WHERE "cdc$stream_id" IN (?,?) AND "cdc$time">? '
    'AND "cdc$time"<=? BYPASS CACHE;',
    # The replicator examples replay changes with the original write time and TTL.
    "INSERT INTO ks.replica (pk, ck, v) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?",
    "UPDATE ks.replica USING TTL ? SET v = ?, s = s + ?, m = m - ? WHERE pk = ? AND ck = ?",
    "DELETE FROM ks.replica USING TIMESTAMP ? WHERE pk = ? AND ck > ? AND ck <= ?",
]


@pytest.mark.parametrize("text", CDC_CONSUMER_QUERIES)
def test_cdc_consumer_query_parses(text: str) -> None:
    statement = parse_statement(text)
    assert len(statement.bind_markers) == text.count("?")
    assert [marker.index for marker in statement.bind_markers] == list(
        range(len(statement.bind_markers))
    )


def test_cdc_log_window_query_tree() -> None:
    statement = parse_statement(CDC_CONSUMER_QUERIES[0])
    assert isinstance(statement, SelectStatement)
    assert statement.bypass_cache and statement.is_star
    stream, low, high = statement.where
    assert isinstance(stream, ColumnRelation) and stream.column == "cdc$stream_id"
    assert stream.operator is Operator.IN
    assert low == ColumnRelation("cdc$time", Operator.GT, BindMarker(3))
    assert high == ColumnRelation("cdc$time", Operator.LTE, BindMarker(4))


def test_checkpoint_statements_tree() -> None:
    (update_text,) = [text for text in CDC_CONSUMER_QUERIES if "UPDATE ks.checkpoints" in text]
    statement = parse_statement(update_text)
    assert isinstance(statement, UpdateStatement)
    assert statement.using.ttl == IntegerLiteral(604800)
    assert [type(op) for op in statement.assignments] == [SetValue, SetValue]
    (insert_text,) = [t for t in CDC_CONSUMER_QUERIES if "last_timestamp) VALUES" in t]
    insert = parse_statement(insert_text)
    assert isinstance(insert, InsertStatement)
    assert insert.using.ttl == BindMarker(5)


def test_all_client_queries_as_one_script() -> None:
    """A cqlsh-like script of every query gives the same trees as one-by-one parsing."""
    texts = DRIVER_QUERIES + CQLSH_QUERIES + CDC_CONSUMER_QUERIES
    script = ";\n".join(texts)
    one_by_one: list[Statement] = [parse_statement(text) for text in texts]
    assert list(parse_statements(script)) == one_by_one
