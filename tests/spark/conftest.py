"""Session-scoped fixtures of the Spark tests: one local SparkSession, one PostgreSQL server, one
3-node RF 3 edge cluster and one hub node, all started by the package's own launchers.

The SparkSession costs ~10 s to start on the 2-core machines, so every test shares one
(pipelines-spark.md §10). The PostgreSQL server is ``ringflow demo``'s throwaway cluster
(``ringflow.cli._demo_postgres.PostgresServer``: initdb into a temp directory, 127.0.0.1 only,
trust authentication, stopped and deleted at the end). The edge cluster is
``ringflow.cli._demo_cluster.LocalCluster`` (the code of ``ringflow cluster start``) on a random
free loopback block, started on first use and stopped at the end of the session. The hub is one
``ringflow node start`` process (``ringflow.cli._demo_cluster.NodeProcess``) on a random loopback
address, the ``ringflow://`` destination of the replicate tests; each test module creates its own
keyspace on it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")
psycopg = pytest.importorskip("psycopg")

from cassandra.policies import RoundRobinPolicy  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from ringflow.cli._demo import driver_cluster  # noqa: E402
from ringflow.cli._demo_cluster import (  # noqa: E402
    LocalCluster,
    NodeProcess,
    free_loopback_block,
    random_loopback_address,
)
from ringflow.cli._demo_postgres import (  # noqa: E402
    PostgresServer,
    PostgresUnavailable,
    postgres_binary,
)
from ringflow.pipeline import local_spark_session  # noqa: E402

EDGE_NODES = 3


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_spark_session("ringflow-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server for the session; its URL (database ``postgres``)."""
    try:
        postgres_binary("initdb")
    except PostgresUnavailable as error:
        pytest.skip(str(error))
    with PostgresServer() as server:
        yield server.url


@pytest.fixture(scope="session")
def edge_cluster() -> Iterator[LocalCluster]:
    """3 real node processes (RF 3 keyspaces go on all of them), gossiping every 200 ms so a
    killed node is convicted within seconds; stopped (SIGTERM, then SIGKILL) at the end."""
    data = Path(tempfile.mkdtemp(prefix="ringflow-edge-"))
    first = free_loopback_block(EDGE_NODES)
    # 2 vnodes a node: the CDC source runs one Spark task per vnode, a cost per micro-batch
    cluster = LocalCluster(
        data, EDGE_NODES, first_address=first, num_tokens=2, gossip_interval_ms=200
    )
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        for address in cluster.addresses:
            print(f"--- {address}", cluster.log(address, 600), sep="\n")


@pytest.fixture(scope="session")
def hub_node() -> Iterator[NodeProcess]:
    """One node process (4 vnodes, RF 1 keyspaces) on a random loopback address: the hub cluster
    ``ringflow replicate --to ringflow://<endpoint>`` writes to; SIGKILLed at the end."""
    base = Path(tempfile.mkdtemp(prefix="ringflow-hub-"))
    node = NodeProcess(base / "hub", random_loopback_address(), "--num-tokens", "4")
    try:
        yield node.start()
    finally:
        node.kill()
        print(f"--- hub {node.address}", node.log(600), sep="\n")


@pytest.fixture(scope="session")
def hub(hub_node: NodeProcess) -> Iterator[Any]:
    """A driver session on the hub node (consistency ONE)."""
    driver = driver_cluster([hub_node.address], hub_node.port, RoundRobinPolicy(), "ONE")
    driver.scheduler.name = "Task Scheduler (session fixture)"  # outlives its first file
    try:
        yield driver.connect()
    finally:
        driver.shutdown()
