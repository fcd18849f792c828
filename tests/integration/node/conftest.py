"""Fixtures for end-to-end tests: a real node process per test module, and a Scylla driver.

Every wait is bounded; every node is SIGKILLed in teardown (after the tests of its module).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import RoundRobinPolicy, TokenAwarePolicy
from cassandra.query import dict_factory

from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address

REQUEST_TIMEOUT_S = 30.0
DICT_ROWS = "dict_rows"
"""Execution profile whose rows are dicts (CDC columns such as ``cdc$time`` are not
identifiers, so the default named tuples rename them)."""


def make_cluster(node: NodeProcess) -> Cluster:
    """A driver cluster for ``node`` with token-aware routing, protocol v4, bounded timeouts."""
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(RoundRobinPolicy()),
        request_timeout=REQUEST_TIMEOUT_S,
    )
    rows_as_dicts = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(RoundRobinPolicy()),
        request_timeout=REQUEST_TIMEOUT_S,
        row_factory=dict_factory,
    )
    return Cluster(
        [node.address],
        port=node.port,
        protocol_version=4,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile, DICT_ROWS: rows_as_dicts},
        connect_timeout=10,
        control_connection_timeout=10,
        max_schema_agreement_wait=10,
    )


def saved_tokens(node: NodeProcess) -> list[int]:
    record = json.loads((node.data_dir / "node.json").read_text())
    return [int(token) for token in record["tokens"]]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    base: Path = tmp_path_factory.mktemp("node")
    with NodeProcess(base / "data", random_loopback_address()) as process:
        yield process


@pytest.fixture(scope="module")
def cluster(node: NodeProcess) -> Iterator[Cluster]:
    cluster = make_cluster(node)
    try:
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module")
def session(cluster: Cluster) -> Session:
    return cluster.connect()
