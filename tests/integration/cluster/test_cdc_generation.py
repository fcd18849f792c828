"""One CDC generation for the whole cluster (issue 6 §4; scylla-cdc.md §2, §6; seed 000).

On a 3-node cluster of real processes: every node ends up with the same generation (its
``system.cdc_local`` and ``ringflow cluster status``), created by one node over the whole ring;
the user-facing tables hold exactly one timestamp row and one streams row per ring token on
every node; CDC writes through every coordinator into an RF=2 keyspace succeed, each log row's
stream token lies in the vnode of its base partition token, and the log rows sit on the base
partition's replicas (each node read alone at CL ONE).
"""

from __future__ import annotations

import bisect
import struct
import uuid

import pytest
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from ringflow.ring import murmur3_token
from tests.integration.cluster.conftest import NODES, LocalCluster, ringflow, wait_until

pytestmark = pytest.mark.timeout(240)
ONE = ConsistencyLevel.ONE
QUORUM = ConsistencyLevel.QUORUM
KEYS_PER_COORDINATOR = 15


def _one(text: str) -> SimpleStatement:
    return SimpleStatement(text, consistency_level=ONE)


def _local_generation(cluster: LocalCluster, address: str) -> tuple[object, uuid.UUID] | None:
    session = cluster.session(only=address)
    row = session.execute(
        _one("SELECT streams_timestamp, uuid FROM system.cdc_local WHERE key = 'cdc_local'")
    ).one()
    return None if row is None else (row.streams_timestamp, row.uuid)


def _ring(cluster: LocalCluster) -> tuple[list[int], dict[int, str]]:
    """Sorted ring tokens and each token's owner address, from the driver's token map."""
    metadata = cluster.session().cluster.metadata
    token_map = metadata.token_map
    assert token_map is not None
    owners = {int(t.value): host.address for t, host in token_map.token_to_host_owner.items()}
    return sorted(owners), owners


@pytest.fixture(scope="module")
def generation(local_cluster: LocalCluster) -> tuple[object, uuid.UUID]:
    found: dict[str, tuple[object, uuid.UUID] | None] = {}

    def agreed() -> bool:
        for address in local_cluster.addresses:
            found[address] = _local_generation(local_cluster, address)
        values = set(found.values())
        return len(values) == 1 and None not in values

    wait_until(agreed, 60, "every node persisted the same CDC generation")
    value = found[local_cluster.addresses[0]]
    assert value is not None
    return value


def test_every_node_reports_the_same_generation(
    local_cluster: LocalCluster, generation: tuple[object, uuid.UUID]
) -> None:
    _, generation_uuid = generation

    def status_agrees() -> bool:
        status = ringflow("cluster", "status", "--data", str(local_cluster.data))
        lines = status.splitlines()[1:]  # the node rows, a capture line per node, and more
        rows = [line for line in lines if line.split(" ", 1)[0] in local_cluster.addresses]
        assert sum(line.startswith("capture ") for line in lines) == NODES
        return len(rows) == NODES and all(line.endswith(str(generation_uuid)) for line in rows)

    wait_until(status_agrees, 30, "ringflow cluster status shows one generation on every node")


def test_description_tables_describe_the_whole_ring_once(
    local_cluster: LocalCluster, generation: tuple[object, uuid.UUID]
) -> None:
    timestamp, generation_uuid = generation
    ring, _ = _ring(local_cluster)
    assert len(ring) == NODES * 8
    for address in local_cluster.addresses:
        session = local_cluster.session(only=address)

        def published(session: object = session) -> bool:
            times = list(
                session.execute(  # type: ignore[attr-defined]
                    _one("SELECT time FROM system_distributed.cdc_generation_timestamps")
                )
            )
            return len(times) == 1

        wait_until(published, 30, f"one generation timestamp row on {address}")
        times = list(
            session.execute(_one("SELECT time FROM system_distributed.cdc_generation_timestamps"))
        )
        assert [row.time for row in times] == [timestamp]
        ranges = list(
            session.execute(
                _one(
                    "SELECT time, range_end, streams "
                    "FROM system_distributed.cdc_streams_descriptions_v2"
                )
            )
        )
        assert {row.time for row in ranges} == {timestamp}
        assert sorted(row.range_end for row in ranges) == ring, f"ranges on {address}"
        internal = list(
            session.execute(
                _one(
                    "SELECT range_end FROM system_distributed_everywhere."
                    f"cdc_generation_descriptions_v2 WHERE id = {generation_uuid}"
                )
            )
        )
        assert sorted(row.range_end for row in internal) == ring, f"internal rows on {address}"


def _vnode(ring: list[int], token: int) -> int:
    """Index of the vnode ``(ring[i-1], ring[i]]`` holding ``token`` (0 = the wrap range)."""
    return bisect.bisect_left(ring, token) % len(ring)


def _replicas(ring: list[int], owners: dict[int, str], token: int, factor: int) -> set[str]:
    """SimpleStrategy: the vnode's owner, then the next distinct owners clockwise."""
    start = _vnode(ring, token)
    found: list[str] = []
    for step in range(len(ring)):
        owner = owners[ring[(start + step) % len(ring)]]
        if owner not in found:
            found.append(owner)
        if len(found) == factor:
            break
    return set(found)


def test_cdc_writes_through_every_coordinator_are_colocated(
    local_cluster: LocalCluster, generation: tuple[object, uuid.UUID]
) -> None:
    session = local_cluster.session()
    session.execute(
        "CREATE KEYSPACE gen WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 2}"
    )
    session.execute(
        "CREATE TABLE gen.t (k int, c int, v text, PRIMARY KEY (k, c)) WITH cdc = {'enabled': true}"
    )
    assert session.wait_for_schema_agreement(wait_time=20)
    keys: list[int] = []
    for index, address in enumerate(local_cluster.addresses):
        writer = local_cluster.session(only=address)
        for key in range(index * 100, index * 100 + KEYS_PER_COORDINATOR):
            writer.execute(
                SimpleStatement(
                    f"INSERT INTO gen.t (k, c, v) VALUES ({key}, 1, 'v{key}')",
                    consistency_level=QUORUM,
                )
            )
            keys.append(key)
    ring, owners = _ring(local_cluster)
    holders: dict[int, set[str]] = {key: set() for key in keys}
    for address in local_cluster.addresses:
        pinned = local_cluster.session(only=address)
        for row in pinned.execute(_one('SELECT "cdc$stream_id", k FROM gen.t_scylla_cdc_log')):
            stream_token = struct.unpack(">q", bytes(row[0])[:8])[0]
            base = murmur3_token(struct.pack(">i", row.k))
            assert _vnode(ring, stream_token) == _vnode(ring, base), (row.k, address)
            holders[row.k].add(address)
    for key in keys:
        expected = _replicas(ring, owners, murmur3_token(struct.pack(">i", key)), 2)
        assert expected <= holders[key], f"key {key}: log on {holders[key]}, replicas {expected}"


def test_a_restarted_node_reloads_the_generation(
    local_cluster: LocalCluster, generation: tuple[object, uuid.UUID]
) -> None:
    third = local_cluster.addresses[2]
    local_cluster.kill(third)
    local_cluster.restart(third)
    local_cluster.wait_ready()
    assert _local_generation(local_cluster, third) == generation
    session = local_cluster.session()
    session.execute(
        "CREATE TABLE IF NOT EXISTS gen.after (k int PRIMARY KEY, v int) "
        "WITH cdc = {'enabled': true}"
    )
    assert session.wait_for_schema_agreement(wait_time=20)
    pinned = local_cluster.session(only=third)

    def writes() -> bool:
        for key in range(10):
            pinned.execute(
                SimpleStatement(
                    f"INSERT INTO gen.after (k, v) VALUES ({key}, {key})", consistency_level=QUORUM
                )
            )
        return True

    wait_until(writes, 30, "CDC writes coordinated by the restarted node")
    times = list(
        pinned.execute(_one("SELECT time FROM system_distributed.cdc_generation_timestamps"))
    )
    assert [row.time for row in times] == [generation[0]]
