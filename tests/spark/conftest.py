"""Session-scoped fixtures of the Spark tests: one local SparkSession, one PostgreSQL server and
one 3-node RF 3 edge cluster, all started by the package's own launchers.

The SparkSession costs ~10 s to start on the 2-core machines, so every test shares one
(pipelines-spark.md §10). The PostgreSQL server is ``ringflow demo``'s throwaway cluster
(``ringflow.cli._demo_postgres.PostgresServer``: initdb into a temp directory, 127.0.0.1 only,
trust authentication, stopped and deleted at the end). The edge cluster is
``ringflow.cli._demo_cluster.LocalCluster`` (the code of ``ringflow cluster start``) on a random
free loopback block, started on first use and stopped at the end of the session.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")
psycopg = pytest.importorskip("psycopg")

from pyspark.sql import SparkSession  # noqa: E402

from ringflow.cli._demo_cluster import LocalCluster, free_loopback_block  # noqa: E402
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
