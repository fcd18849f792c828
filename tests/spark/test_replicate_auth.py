"""``ringflow replicate`` from an auth-enabled edge to an auth-enabled hub, then ``ringflow
diff`` of the two through their logins (issue 18 part 1).

Two single-node processes started with ``--authenticator PasswordAuthenticator --authorizer
CassandraAuthorizer`` (small: one node each; the auth cluster itself is tested in
``tests/integration/cluster/test_auth.py``). The edge's source logs in as a role that may only
read the keyspace (``--username``, password from ``RINGFLOW_PASSWORD``), the hub sink as the
hub's superuser named in its URL (``ringflow://cassandra@host/ks.t``, password from a file).
Afterwards the hub table equals the edge table, and the password appears in no output.
Without credentials the source is refused before any job starts.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster
from pyspark.sql import SparkSession

from ringflow.cli import main
from ringflow.cli._demo import DDL, TABLE, Workload
from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address
from ringflow.pipeline import CDC_FORMAT
from ringflow.pipeline._destinations import cdc_options
from tests.spark._replication import write

AUTH = ("--authenticator", "PasswordAuthenticator", "--authorizer", "CassandraAuthorizer")
KEYSPACE = "auth_shop"
EDGE_PASSWORD = "edge-secret-4711"


def _session(node: NodeProcess, user: str, password: str) -> object:
    cluster = Cluster(
        [node.address],
        port=node.port,
        protocol_version=4,
        auth_provider=PlainTextAuthProvider(user, password),
    )
    return cluster


@pytest.fixture(scope="module")
def nodes() -> Iterator[tuple[NodeProcess, NodeProcess]]:
    base = Path(tempfile.mkdtemp(prefix="ringflow-auth-"))
    edge = NodeProcess(base / "edge", random_loopback_address(), *AUTH, "--num-tokens", "2")
    hub = NodeProcess(base / "hub", random_loopback_address(), *AUTH, "--num-tokens", "2")
    try:
        yield edge.start(), hub.start()
    finally:
        edge.kill()
        hub.kill()


def test_replicate_between_auth_enabled_clusters(
    spark: SparkSession,
    nodes: tuple[NodeProcess, NodeProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    edge_node, hub_node = nodes
    edge_cluster = _session(edge_node, "cassandra", "cassandra")
    hub_cluster = _session(hub_node, "cassandra", "cassandra")
    try:
        edge = edge_cluster.connect()  # type: ignore[attr-defined]
        hub = hub_cluster.connect()  # type: ignore[attr-defined]
        for session, cdc in ((edge, " WITH cdc = {'enabled': true}"), (hub, "")):
            session.execute(
                f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
                "{'class': 'SimpleStrategy', 'replication_factor': 1}"
            )
            session.execute(DDL.format(ks=KEYSPACE, t=TABLE, cdc=cdc))
        edge.execute(f"CREATE ROLE reader WITH PASSWORD = '{EDGE_PASSWORD}' AND LOGIN = true")
        edge.execute(f"GRANT SELECT ON KEYSPACE {KEYSPACE} TO reader")
        edge.execute("GRANT MODIFY ON KEYSPACE system_replication TO reader")
        edge.execute("GRANT SELECT ON KEYSPACE system_replication TO reader")
        write(Workload(edge, 50, seed=3, keyspace=KEYSPACE), 120, pause_s=0)

        secret = tmp_path / "hub-password"
        secret.write_text("cassandra\n")
        arguments = [
            "replicate",
            *("--source", edge_node.endpoint, "--table", f"{KEYSPACE}.{TABLE}"),
            *("--consistency", "ONE", "--confidence-window-ms", "500"),
            *("--username", "reader"),
            "--to",
            f"ringflow://cassandra@{hub_node.endpoint}/{KEYSPACE}.{TABLE}"
            f"?consistency=ONE&password_file={secret}",
            *("--checkpoint", str(tmp_path / "checkpoints"), "--timeout", "240"),
        ]
        monkeypatch.delenv("RINGFLOW_PASSWORD", raising=False)
        assert main(arguments) != 0  # no password for the source: refused up front
        monkeypatch.setenv("RINGFLOW_PASSWORD", EDGE_PASSWORD)
        assert main(arguments) == 0
        output = capsys.readouterr()
        assert EDGE_PASSWORD not in output.out + output.err

        query = f"SELECT * FROM {KEYSPACE}.{TABLE}"
        edge_rows = sorted(map(tuple, edge.execute(query)))
        hub_rows = sorted(map(tuple, hub.execute(query)))
        assert edge_rows and hub_rows == edge_rows
        diff = [
            "diff",
            *("--source", edge_node.endpoint, "--target", hub_node.endpoint),
            *("--table", f"{KEYSPACE}.{TABLE}", "--splits", "4", "--username", "reader"),
            *("--target-username", "cassandra", "--target-password-file", str(secret)),
        ]
        assert main(diff) == 0  # equal, read through both logins
        output = capsys.readouterr()
        assert EDGE_PASSWORD not in output.out + output.err

        # the changes written above are seconds old: the default 30 s confidence window would
        # leave a fast run an empty read
        options = cdc_options(
            edge_node.endpoint, f"{KEYSPACE}.{TABLE}", consistency="ONE", confidence_window_ms=500
        )
        frame = (
            spark.read.format(CDC_FORMAT)
            .options(**options, username="reader", password=EDGE_PASSWORD)
            .load()
        )
        plan = frame._jdf.queryExecution().toString()
        assert frame.count() > 0 and EDGE_PASSWORD not in plan  # Spark redacts the option
    finally:
        edge_cluster.shutdown()  # type: ignore[attr-defined]
        hub_cluster.shutdown()  # type: ignore[attr-defined]
