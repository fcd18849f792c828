"""Fixtures of the source tests: a real ringflow node with a driver session, per test module.

Import the fixtures into a test module (``from tests.spark.conftest_sources import ...``); the
SparkSession comes from ``tests/spark/conftest.py``. The node binds a random loopback address
(``ringflow.cli._demo_cluster.NodeProcess``) and is SIGKILLed after the module's tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cassandra.cluster import Cluster, Session

from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address
from ringflow.pipeline._cdc_source import RingflowCdcDataSource
from ringflow.pipeline._cluster_client import ClusterOptions, make_cluster
from ringflow.pipeline._table_source import RingflowTableDataSource


@pytest.fixture(scope="module")
def ringflow_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    base: Path = tmp_path_factory.mktemp("ringflow-node")
    with NodeProcess(base / "data", random_loopback_address()) as process:
        yield process


@pytest.fixture(scope="module")
def driver(ringflow_node: NodeProcess) -> Iterator[tuple[Cluster, Session]]:
    """A driver cluster and session on the node (rows as dicts, CL ONE)."""
    options = ClusterOptions((ringflow_node.address,), "system", "local", consistency="ONE")
    cluster = make_cluster(options)
    try:
        yield cluster, cluster.connect()
    finally:
        cluster.shutdown()


def source_options(node: NodeProcess, keyspace: str, table: str, **extra: object) -> dict[str, str]:
    """Options of the ringflow sources for ``keyspace.table`` on ``node`` (default consistency
    LOCAL_QUORUM: RF 1 keyspaces here; the description tables are read at ONE on one node)."""
    options = {
        "contact_points": node.address,
        "port": str(node.port),
        "keyspace": keyspace,
        "table": table,
    }
    options.update({name: str(value) for name, value in extra.items()})
    return options


def register_sources(spark: object) -> None:
    spark.dataSource.register(RingflowTableDataSource)  # type: ignore[attr-defined]
    spark.dataSource.register(RingflowCdcDataSource)  # type: ignore[attr-defined]
