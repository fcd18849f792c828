"""A node advertising several shards: the Scylla driver's shard awareness, and the CDC streams.

Proves: with ``--shards 3`` the node tells each connection a shard id (round-robin) and no
shard-aware port, so the driver's pool ends with one connection per shard; routing and queries
work through them; and the first CDC generation has 3 streams per vnode (one per shard), each
carrying a token of its shard as Scylla's sharder computes it (the driver's own
``ShardingInfo.shard_id_from_token`` is the oracle).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cassandra.cluster import Cluster, Session

from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address
from tests.integration.node.conftest import make_cluster

SHARDS = 3


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    base: Path = tmp_path_factory.mktemp("sharded")
    with NodeProcess(base / "data", random_loopback_address(), "--shards", str(SHARDS)) as node:
        yield node


@pytest.fixture(scope="module")
def cluster(node: NodeProcess) -> Iterator[Cluster]:
    cluster = make_cluster(node)
    try:
        yield cluster
    finally:
        cluster.shutdown()


def test_driver_opens_one_connection_per_shard(cluster: Cluster, node: NodeProcess) -> None:
    session = cluster.connect()
    host = cluster.metadata.all_hosts()[0]
    assert host.sharding_info.shards_count == SHARDS
    assert host.sharding_info.shard_aware_port is None
    pool = session._pools[host]
    deadline = time.monotonic() + 10
    while len(pool._connections) < SHARDS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(pool._connections) == list(range(SHARDS))
    for _ in range(10):
        assert session.execute("SELECT key FROM system.local").one().key == "local"


def test_cdc_streams_are_one_per_shard_with_tokens_of_their_shard(
    cluster: Cluster, node: NodeProcess
) -> None:
    session: Session = cluster.connect()
    host = cluster.metadata.all_hosts()[0]
    sharding = host.sharding_info
    rows = list(
        session.execute(
            "SELECT range_end, streams FROM system_distributed.cdc_streams_descriptions_v2"
        )
    )
    assert len(rows) == 16
    for row in rows:
        assert len(row.streams) == SHARDS
        shards = set()
        for stream in row.streams:
            token = int.from_bytes(stream[:8], "big", signed=True)
            shards.add(sharding.shard_id_from_token(token))
        # A vnode too small to hold a token of some shard gives that shard the range end.
        assert len(shards) == SHARDS or any(
            int.from_bytes(stream[:8], "big", signed=True) == row.range_end
            for stream in row.streams
        )
