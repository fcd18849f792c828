"""Replication from an edge cluster with auth and TLS (issue 18, the remaining paths).

The edge is this module's own: two real node processes started by ``ringflow cluster start
--tls --auth`` (TLS required on the native port, internode TLS, PasswordAuthenticator +
CassandraAuthorizer), slicing 1 s x 2. The pipeline reaches it as a role that may read the
replicated keyspace and read and write ``system_replication`` (``--username`` with the
password in ``RINGFLOW_PASSWORD``, ``--ssl-ca`` the cluster's CA). PostgreSQL and Spark are the
session's.

Proves:

- log mode (``ringflow replicate``): a row PostgreSQL refuses (a text value with U+0000)
  becomes a dead letter written back to the edge over TLS with the source's login (before,
  the sink reached the edge without TLS, the batch failed and the run exited 1); every other
  row is at PostgreSQL; ``ringflow replication dead-letters list`` with the same options
  shows it;
- replica mode (``ringflow replicate --capture replica``): channels created with
  ``ringflow replication channel create`` through the same options; the job's reads of each
  node's sealed slices (``system_replication.captured_rows`` on every node) go over TLS with
  the login: the lake holds every row of the edge table, and the PostgreSQL channel's refused
  row is a dead letter too; ``ringflow replication status`` reads the edge the same way;
- the password appears in no output.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cassandra.auth import PlainTextAuthProvider
from cassandra.policies import RoundRobinPolicy
from cassandra.query import SimpleStatement
from pyspark.sql import SparkSession

from ringflow.cli import main
from ringflow.cli._demo import (
    DDL,
    TABLE,
    Workload,
    compare,
    driver_cluster,
    live_rows,
    read_cql_table,
)
from ringflow.pipeline import materialize, read_lake_changes, read_postgres_live
from ringflow.pipeline._replicate import cdc_options, source_table
from ringflow.runtime import client_context
from tests.integration.cluster.conftest import LocalCluster, started_cluster
from tests.spark._replication import wait_for, write

pytestmark = pytest.mark.timeout(600)
PASSWORD = "replicator-secret-4711"
SLICING = ("--slice-width-s", "1", "--slice-count", "2")
WINDOW_MS = 3000  # a written slice is sealed once its 2 slices of 1 s have passed (and 1 more)


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("secure-edge")
    options = ("--tls", "--auth", *SLICING, "--num-tokens", "2")
    with started_cluster(data, *options, nodes=2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def stage(edge: LocalCluster, monkeypatch_module: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    ca = edge.data / "tls" / "ca.crt"
    superuser = PlainTextAuthProvider("cassandra", "cassandra")
    driver = driver_cluster(
        edge.addresses, 9042, RoundRobinPolicy(), "QUORUM",
        ssl_context=client_context(ca), auth_provider=superuser,
    )  # fmt: skip
    try:
        session = driver.connect()
        session.execute(f"CREATE ROLE replicator WITH PASSWORD = '{PASSWORD}' AND LOGIN = true")
        for grant in (
            "SELECT ON KEYSPACE system_replication",
            "MODIFY ON KEYSPACE system_replication",
        ):
            session.execute(f"GRANT {grant} TO replicator")
        monkeypatch_module.setenv("RINGFLOW_PASSWORD", PASSWORD)
        source = ",".join(edge.addresses)
        access = ["--username", "replicator", "--ssl-ca", str(ca)]
        yield {"session": session, "source": source, "access": access, "ca": str(ca)}
    finally:
        driver.shutdown()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _keyspace(stage: dict[str, Any], keyspace: str, ddl: str) -> None:
    session = stage["session"]
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 2}"
    )
    session.execute(ddl)
    session.execute(f"GRANT SELECT ON KEYSPACE {keyspace} TO replicator")


def _dead_letters(stage: dict[str, Any], channel: str, capsys: Any) -> str:
    arguments = ["replication", "dead-letters", "list", "--source", stage["source"]]
    assert main([*arguments, *stage["access"], "--channel", channel]) == 0
    output = capsys.readouterr().out
    assert PASSWORD not in output
    return output


def test_log_mode_dead_letters_go_back_to_a_tls_and_auth_edge(
    spark: SparkSession, stage: dict[str, Any], postgres_url: str, tmp_path: Path, capsys: Any
) -> None:
    keyspace = "secure_log"
    ddl = (
        f"CREATE TABLE {keyspace}.notes (id int PRIMARY KEY, note text) "
        "WITH cdc = {'enabled': true}"
    )
    _keyspace(stage, keyspace, ddl)
    insert = stage["session"].prepare(f"INSERT INTO {keyspace}.notes (id, note) VALUES (?, ?)")
    for key in range(12):
        stage["session"].execute(insert, (key, f"note\x00{key}" if key == 5 else f"note {key}"))
    time.sleep(2.0)
    code = main(
        [
            "replicate",
            *("--source", stage["source"], "--table", f"{keyspace}.notes", *stage["access"]),
            *("--to", postgres_url, "--checkpoint", str(tmp_path / "checkpoints")),
            *("--once", "--confidence-window-ms", "1000", "--consistency", "ONE"),
        ]
    )
    output = capsys.readouterr()
    assert code == 0, output.out[-2000:]
    assert PASSWORD not in output.out + output.err

    options = cdc_options(stage["source"], f"{keyspace}.notes")
    options.update(ssl_ca=stage["ca"], username="replicator", password=PASSWORD)
    table = source_table(options)
    live = read_postgres_live(postgres_url, f"{keyspace}_notes", table)
    assert {key[0]: row.values["note"] for key, row in live.items()} == {
        key: f"note {key}" for key in range(12) if key != 5
    }
    assert "postgres: 1 dead letter(s)" in _dead_letters(stage, "postgres", capsys)


def _sealed_through(stage: dict[str, Any], keyspace: str) -> list[int]:
    statement = SimpleStatement(
        "SELECT sealed_through_ms FROM system_replication.seal_watermarks "
        "WHERE keyspace_name = %s AND table_name = %s"
    )
    return [r["sealed_through_ms"] for r in stage["session"].execute(statement, (keyspace, TABLE))]


def test_replica_mode_reads_every_node_over_tls_with_a_login(
    spark: SparkSession, stage: dict[str, Any], postgres_url: str, tmp_path: Path, capsys: Any
) -> None:
    keyspace = "secure_replica"
    _keyspace(
        stage, keyspace, DDL.format(ks=keyspace, t=TABLE, cdc=" WITH cdc = {'enabled': true}")
    )
    lake = tmp_path / "lake"
    for name, url in (("lake", f"parquet:{lake}"), ("pg", postgres_url)):
        create = ["replication", "channel", "create", name, "--source", stage["source"]]
        create += [*stage["access"], *SLICING, "--table", f"{keyspace}.{TABLE}", "--to", url]
        assert main(create) == 0
    workload = Workload(stage["session"], 200, seed=5, keyspace=keyspace)
    write(workload, 120, pause_s=0)
    stage["session"].execute(
        f"UPDATE {keyspace}.{TABLE} SET status = 'bad\x00' WHERE customer = 0 AND order_id = 999"
    )
    written_ms = time.time_ns() // 1_000_000
    wait_for(
        lambda: (
            len(marks := _sealed_through(stage, keyspace)) == 2
            and min(marks) >= written_ms + WINDOW_MS
        ),
        "both nodes sealed and published the written slices",
        timeout_s=60,
    )
    code = main(
        [
            "replicate", "--capture", "replica", "--source", stage["source"], *stage["access"],
            "--channel", "lake", "--channel", "pg", "--once",
            "--checkpoint", str(tmp_path / "checkpoints"),
        ]
    )  # fmt: skip
    output = capsys.readouterr()
    assert code == 0, output.out[-3000:]
    assert PASSWORD not in output.out + output.err

    options = cdc_options(stage["source"], f"{keyspace}.{TABLE}")
    options.update(ssl_ca=stage["ca"], username="replicator", password=PASSWORD)
    table = source_table(options)
    edge_rows = read_cql_table(stage["session"], table, "ALL")
    now_s = int(time.time())
    lake_rows = live_rows(materialize(table, read_lake_changes(lake, f"{keyspace}.{TABLE}"), now_s))
    compared, problems = compare(edge_rows, lake_rows)
    assert compared > 50 and problems == [], output.out[-3000:]
    postgres = live_rows(read_postgres_live(postgres_url, f"{keyspace}_{TABLE}", table, now_s))
    _, problems = compare(edge_rows, postgres)
    assert len(problems) == 1 and problems[0].startswith("(0, 999)")  # the row it refused
    assert "pg: 1 dead letter(s)" in _dead_letters(stage, "pg", capsys)
    status = ["replication", "status", "--source", stage["source"], *stage["access"], "--json"]
    assert main(status) == 0
    assert '"lake"' in capsys.readouterr().out
