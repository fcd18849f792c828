"""System tables through the executor: what drivers, cqlsh and CDC clients read at connect time.

Proves: ``ensure_system_tables`` registers every system and CDC description table (idempotent);
the rows the node shell writes (``system.local``/``peers``) and the ``system_schema`` rows the
executor writes answer the Python driver's own queries (every query its control connection and
schema parsers send: rows for the tables Scylla has, Invalid "unconfigured table" for the rest,
never a ServerError); ``system.peers_v2`` fails the way the driver's fallback expects.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.cql._exec_system import DISTRIBUTED_TABLES, ensure_system_tables
from ringflow.cql._results import RowsResult, SetKeyspaceResult
from ringflow.errors import ErrorCode
from ringflow.schema import TEXT
from ringflow.schema._system_rows import NodeRow, local_row, peer_row
from ringflow.schema._system_tables import SYSTEM_TABLES
from tests.unit.cql._exec_harness import START_US, ExecNode, node_with_keyspace, value
from tests.unit.cql.test_parser_clients import DRIVER_QUERIES

HOST = uuid.UUID("2f1a1c4e-0000-4000-8000-000000000001")
PEER = uuid.UUID("2f1a1c4e-0000-4000-8000-000000000002")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path_factory.mktemp("system"))
    node.ok("CREATE TYPE address (street text, zip int)")
    node.ok("CREATE TABLE tbl (k int, c int, v frozen<address>, PRIMARY KEY (k, c))")
    me = NodeRow(
        HOST, "127.0.0.1", "127.0.0.1", "dc1", "r1", (-5, 7), node.processor.schema_version
    )
    other = NodeRow(PEER, "127.0.0.2", "127.0.0.2", "dc1", "r1", (100,), me.schema_version)
    node.store.apply(
        [
            local_row(me, cluster_name="test", timestamp_us=START_US),
            peer_row(other, timestamp_us=START_US),
        ],
        now_s=START_US // 1_000_000,
    )
    yield node
    assert node.processor.internal_errors == 0
    node.close()


def test_every_system_table_is_registered_once(tmp_path: Path) -> None:
    node = ExecNode(tmp_path)
    names = {(t.keyspace, t.name) for t in node.store.tables()}
    assert set(SYSTEM_TABLES) | set(DISTRIBUTED_TABLES) <= names
    ensure_system_tables(node.store)
    assert len(node.store.tables()) == len(names)
    timestamps = DISTRIBUTED_TABLES[("system_distributed", "cdc_generation_timestamps")]
    assert [c.order.value for c in timestamps.clustering_columns] == ["desc"]
    node.close()


def test_system_local_and_peers(node: ExecNode) -> None:
    rows = node.ok(
        "SELECT key, cluster_name, host_id, data_center, rack, tokens, release_version, "
        "partitioner, schema_version FROM system.local WHERE key='local'"
    )
    assert rows == [
        (
            "local",
            "test",
            HOST,
            "dc1",
            "r1",
            frozenset({"-5", "7"}),
            "3.0.8",
            "org.apache.cassandra.dht.Murmur3Partitioner",
            node.processor.schema_version,
        )
    ]
    peers = node.ok("SELECT peer, host_id, rpc_address, tokens FROM system.peers")
    assert peers == [
        (
            ipaddress.IPv4Address("127.0.0.2"),
            PEER,
            ipaddress.IPv4Address("127.0.0.2"),
            frozenset({"100"}),
        )
    ]
    error = node.error("SELECT * FROM system.peers_v2")
    assert (error.code, error.message) == (ErrorCode.INVALID, "unconfigured table peers_v2")


def test_system_schema_describes_the_user_schema(node: ExecNode) -> None:
    select = node.prepare(
        "SELECT * FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?"
    )
    response = node.execute(select.statement_id, [value(TEXT, "ks"), value(TEXT, "tbl")])
    assert isinstance(response, RowsResult)
    assert response.metadata.columns is not None
    names = [c.name for c in response.metadata.columns]
    index = names.index("column_name"), names.index("type"), names.index("kind")
    rows = [tuple(row[i] for i in index) for row in response.rows]
    assert rows == [
        (b"c", b"int", b"clustering"),
        (b"k", b"int", b"partition_key"),
        (b"v", b"frozen<address>", b"regular"),
    ]
    types = node.ok("SELECT type_name FROM system_schema.types WHERE keyspace_name = 'ks'")
    assert types == [("address",)]
    keyspaces = {row[0] for row in node.ok("SELECT keyspace_name FROM system_schema.keyspaces")}
    assert keyspaces >= {"ks", "system", "system_schema", "system_distributed",
                         "system_distributed_everywhere"}  # fmt: skip


DEFINED = {f"{keyspace}.{table}" for keyspace, table in SYSTEM_TABLES}


@pytest.mark.parametrize("text", DRIVER_QUERIES)
def test_driver_queries_are_answered(node: ExecNode, text: str) -> None:
    response = node.raw(text, [None] * text.count("?"))
    if isinstance(response, SetKeyspaceResult) or text.startswith("USE "):
        assert isinstance(response, SetKeyspaceResult) or response.code == ErrorCode.INVALID
        node.ok("USE ks")
        return
    target = re.split(r"\s+from\s+", text, maxsplit=1, flags=re.IGNORECASE)[1].split()[0].lower()
    if target in DEFINED and "native_address" in text:
        # asked only of peers_v2-era servers: Scylla's system.peers has no such column
        assert response.code == ErrorCode.INVALID and "native_address" in response.message
    elif target in DEFINED:
        assert isinstance(response, RowsResult), (text, response)
    else:
        assert response.code == ErrorCode.INVALID, (text, response)
        assert "unconfigured table" in response.message or "does not exist" in response.message
