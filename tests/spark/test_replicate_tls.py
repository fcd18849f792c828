"""``ringflow replicate`` over TLS (issue 18): an edge node and a hub node that require TLS on
their native ports, and a PostgreSQL 15 server that accepts TLS connections only (``ssl = on``,
``hostssl`` in ``pg_hba.conf``), every certificate made by ``ringflow.runtime``'s CA functions.

Proves: ``--ssl-ca`` reaches the edge, ``ringflow://...?ssl=true`` the hub (with the job's CA),
``postgresql://...?sslmode=verify-full&sslrootcert=CA`` PostgreSQL; ``--once`` leaves the hub
and PostgreSQL equal to the edge table; a plaintext PostgreSQL client is refused (so the sink did
use TLS); the password given in the PostgreSQL URL appears nowhere in the job's output. Without
``--ssl-ca`` the source is refused before Spark starts.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cassandra.cluster import Cluster
from cassandra.query import dict_factory

from ringflow.cli import main
from ringflow.cli._demo import DDL, KEYSPACE, TABLE, Workload, compare, live_rows, read_cql_table
from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address
from ringflow.cli._demo_postgres import PostgresServer, PostgresUnavailable, postgres_binary
from ringflow.pipeline._postgres import read_postgres_live
from ringflow.pipeline._replicate import cdc_options, source_table
from ringflow.runtime import client_context, issue_certificate, make_ca, write_pair

CONFIDENCE_MS = 1000
SECRET = "hunter2-not-for-logs"


def _tls_node(base: Path, name: str, ca: Any) -> NodeProcess:
    address = random_loopback_address()
    certificate, key = write_pair(base, name, issue_certificate(ca, name, ip_addresses=[address]))
    tls = f"enabled=true,certificate={certificate},keyfile={key}"
    return NodeProcess(
        base / name, address, "--num-tokens", "4", "--client-encryption-options", tls
    )


@pytest.fixture(scope="module")
def setup() -> Iterator[dict[str, Any]]:
    try:
        postgres_binary("initdb")
    except PostgresUnavailable as error:
        pytest.skip(str(error))
    base = Path(tempfile.mkdtemp(prefix="ringflow-replicate-tls-"))
    ca = make_ca("test CA")
    ca_file, _ = write_pair(base, "ca", ca)
    pg_pair = write_pair(base, "pg", issue_certificate(ca, "pg", ip_addresses=["127.0.0.1"]))
    edge, hub = _tls_node(base, "edge", ca), _tls_node(base, "hub", ca)
    clusters: list[Any] = []
    with PostgresServer(tls=pg_pair) as postgres:
        try:
            found: dict[str, Any] = {"edge": edge.start(), "hub": hub.start(), "base": base}
            for name, node, cdc in (
                ("edge", edge, " WITH cdc = {'enabled': true}"),
                ("hub", hub, ""),
            ):
                cluster = Cluster(
                    [node.address], port=node.port, protocol_version=4, connect_timeout=10,
                    ssl_context=client_context(ca_file),
                )  # fmt: skip
                clusters.append(cluster)
                session = cluster.connect()
                session.row_factory = dict_factory
                session.execute(
                    f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}"
                )
                session.execute(DDL.format(ks=KEYSPACE, t=TABLE, cdc=cdc))
                found[name + "_session"] = session
            port = postgres.port
            found["ca"] = ca_file
            found["pg_url"] = (
                f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/postgres"
                f"?sslmode=verify-full&sslrootcert={ca_file}"
            )
            found["pg_plain"] = f"postgresql://postgres@127.0.0.1:{port}/postgres?sslmode=disable"
            yield found
        finally:
            for cluster in clusters:
                cluster.shutdown()
            edge.kill()
            hub.kill()


def test_replicate_to_a_tls_hub_and_a_tls_postgres(
    spark: Any, setup: dict[str, Any], capsys: Any
) -> None:
    edge, hub = setup["edge"], setup["hub"]
    workload = Workload(setup["edge_session"], 120, 7)
    for _ in range(120):
        _, statement, values = workload.next_operation()
        setup["edge_session"].execute(statement, values)
    time.sleep(CONFIDENCE_MS / 1000 + 1.6)
    source = f"{edge.address}:{edge.port}"
    arguments = [
        "replicate",
        *("--source", source, "--table", f"{KEYSPACE}.{TABLE}"),
        *("--to", f"ringflow://{hub.address}:{hub.port}?consistency=ONE&ssl=true"),
        *("--to", setup["pg_url"]),
        *("--checkpoint", str(setup["base"] / "checkpoints")),
        *("--confidence-window-ms", str(CONFIDENCE_MS), "--query-window-ms", "5000"),
    ]
    assert main([*arguments, "--ssl-ca", str(setup["ca"]), "--once"]) == 0
    output = capsys.readouterr()
    assert SECRET not in output.out + output.err
    options = cdc_options(source, f"{KEYSPACE}.{TABLE}")
    options["ssl_ca"] = str(setup["ca"])
    table = source_table(options)
    rows = read_cql_table(setup["edge_session"], table)
    assert len(rows) > 20
    now_s = int(time.time())
    for name, found in (
        ("hub", read_cql_table(setup["hub_session"], table)),
        ("postgres", live_rows(read_postgres_live(setup["pg_url"], "shop_orders", table, now_s))),
    ):
        _, problems = compare(rows, found)
        assert problems == [], f"{name}: {problems[:3]}"
    with pytest.raises(psycopg.OperationalError, match=r"no encryption|reject"):
        psycopg.connect(setup["pg_plain"], connect_timeout=5).close()
    assert main([*arguments, "--once"]) != 0  # plaintext to a TLS-only edge: refused early
    refused = capsys.readouterr()
    assert "requires TLS" in refused.out + refused.err
