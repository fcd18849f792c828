"""WriteTimeout and ReadTimeout reach the driver with their fields (issue 6 §3, reference §5.2).

A 3-node RF=3 cluster with 1 s gossip rounds (so a silent node takes well over 10 s to be
convicted, longer than the 2 s write and 5 s read timeouts). Replica B is frozen with SIGSTOP:
it is still UP for the failure detector, so the coordinator sends to it and waits, and the
request times out with the cassandra-core.md §5.2 figures. B always gets SIGCONT in teardown.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import time
from collections.abc import Iterator

import pytest
from cassandra import ConsistencyLevel, ReadTimeout, WriteTimeout
from cassandra.policies import WriteType
from cassandra.query import SimpleStatement

from tests.integration.cluster.conftest import (
    LocalCluster,
    started_cluster,
)

pytestmark = pytest.mark.timeout(240)
ALL = ConsistencyLevel.ALL
QUORUM = ConsistencyLevel.QUORUM


@pytest.fixture(scope="module")
def slow_gossip_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("timeouts")
    with started_cluster(data, gossip_ms=1000) as cluster:
        session = cluster.session()
        session.execute(
            "CREATE KEYSPACE tmo WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 3}"
        )
        session.execute("CREATE TABLE tmo.kv (k int PRIMARY KEY, v text)")
        assert session.wait_for_schema_agreement(wait_time=20)
        yield cluster


def _pid(cluster: LocalCluster, address: str) -> int:
    layout = json.loads((cluster.data / "cluster.json").read_text())
    node = next(n for n in layout["nodes"] if n["address"] == address)
    return int((cluster.data / node["dir"] / "pid").read_text())


@pytest.fixture
def frozen_replica(slow_gossip_cluster: LocalCluster) -> Iterator[str]:
    """The second node, stopped with SIGSTOP for the test and continued afterwards."""
    address = slow_gossip_cluster.addresses[1]
    pid = _pid(slow_gossip_cluster, address)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield address
    finally:
        os.kill(pid, signal.SIGCONT)


def test_all_write_to_a_frozen_replica_times_out_with_its_figures(
    slow_gossip_cluster: LocalCluster, frozen_replica: str
) -> None:
    """A CL ALL write while one replica is frozen (UP but silent) raises WriteTimeout(ALL,
    required 3, received 2, SIMPLE) after the 2 s write timeout; QUORUM writes still succeed."""
    coordinator = slow_gossip_cluster.addresses[0]
    session = slow_gossip_cluster.session(only=coordinator)
    began = time.monotonic()
    with pytest.raises(WriteTimeout) as caught:
        session.execute(
            SimpleStatement("INSERT INTO tmo.kv (k, v) VALUES (1, 'a')", consistency_level=ALL)
        )
    elapsed = time.monotonic() - began
    error = caught.value
    assert (error.consistency, error.required_responses, error.received_responses) == (ALL, 3, 2)
    assert error.write_type == WriteType.SIMPLE
    assert elapsed >= 1.5, elapsed  # it waited for the write timeout (no upper bound: load)
    session.execute(
        SimpleStatement("INSERT INTO tmo.kv (k, v) VALUES (2, 'b')", consistency_level=QUORUM)
    )


def test_all_read_from_a_frozen_replica_times_out_with_its_figures(
    slow_gossip_cluster: LocalCluster, frozen_replica: str
) -> None:
    """A CL ALL read while one replica is frozen raises ReadTimeout(ALL, required 3, received 2)
    after the 5 s read timeout, with data_retrieved telling whether the data replica answered:
    the coordinator reads its own replica first (as Cassandra reads locally), and it is not the
    frozen one, so the data is there and only a digest is missing."""
    coordinator = slow_gossip_cluster.addresses[0]
    session = slow_gossip_cluster.session(only=coordinator)
    metadata = session.cluster.metadata
    key = 2
    replicas = metadata.get_replicas("tmo", struct.pack(">i", key))
    assert {host.address for host in replicas} == set(slow_gossip_cluster.addresses)
    data_replica = coordinator  # a replica itself: it serves the data read
    assert data_replica != frozen_replica
    began = time.monotonic()
    with pytest.raises(ReadTimeout) as caught:
        session.execute(
            SimpleStatement(f"SELECT v FROM tmo.kv WHERE k = {key}", consistency_level=ALL)
        )
    elapsed = time.monotonic() - began
    error = caught.value
    assert (error.consistency, error.required_responses, error.received_responses) == (ALL, 3, 2)
    assert error.data_retrieved == (data_replica != frozen_replica)
    assert elapsed >= 4.5, elapsed  # it waited for the read timeout (no upper bound: load)
