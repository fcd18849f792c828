"""A 3-node RF=3 cluster of real processes used through the Scylla driver (issue 6).

Proves, in order (the module shares one cluster; the fault tests come last and heal it):
driver discovery of every host and token; QUORUM writes/reads through every coordinator; DDL on
one node visible on all with schema agreement; DESCRIBE CLUSTER's range ownership is the whole
ring's, with the replicas the driver computes; a key column renamed on one node is read by its
new name through every node; Unavailable (with its figures) before sending when
2 of 3 replicas are down; QUORUM writes through a SIGKILLed replica, its hints replayed after
restart, seen by a CL=ONE read pinned to it, with CDC log rows on every replica.
"""

from __future__ import annotations

import pytest
from cassandra import ConsistencyLevel, Unavailable
from cassandra.query import SimpleStatement

from tests.integration.cluster.conftest import NODES, LocalCluster, wait_until

pytestmark = pytest.mark.timeout(240)
QUORUM = ConsistencyLevel.QUORUM
ONE = ConsistencyLevel.ONE


def _statement(text: str, level: int) -> SimpleStatement:
    return SimpleStatement(text, consistency_level=level)


@pytest.fixture(scope="module")
def keyspace(local_cluster: LocalCluster) -> str:
    session = local_cluster.session()
    session.execute(
        "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.execute("CREATE TABLE ks.kv (k int PRIMARY KEY, v text)")
    session.execute(
        "CREATE TABLE ks.events (k int, c int, v text, PRIMARY KEY (k, c)) "
        "WITH cdc = {'enabled': true}"
    )
    assert session.wait_for_schema_agreement(wait_time=20)
    return "ks"


def test_driver_discovers_every_host_and_token(local_cluster: LocalCluster) -> None:
    session = local_cluster.session()
    metadata = session.cluster.metadata
    assert sorted(host.address for host in metadata.all_hosts()) == local_cluster.addresses
    token_map = metadata.token_map
    assert token_map is not None
    assert len(token_map.ring) == NODES * 8  # every node's tokens, from system.local + peers
    assert {host.address for host in token_map.token_to_host_owner.values()} == set(
        local_cluster.addresses
    )


def test_quorum_writes_and_reads_through_every_coordinator(
    local_cluster: LocalCluster, keyspace: str
) -> None:
    for index, address in enumerate(local_cluster.addresses):
        writer = local_cluster.session(only=address)
        for key in range(index * 10, index * 10 + 10):
            writer.execute(_statement(f"INSERT INTO ks.kv (k, v) VALUES ({key}, 'v{key}')", QUORUM))
    for address in local_cluster.addresses:
        reader = local_cluster.session(only=address)
        for key in range(NODES * 10):
            row = reader.execute(_statement(f"SELECT v FROM ks.kv WHERE k = {key}", QUORUM)).one()
            assert row is not None and row.v == f"v{key}", (address, key)


def test_ddl_on_one_node_reaches_every_node(local_cluster: LocalCluster, keyspace: str) -> None:
    second = local_cluster.session(only=local_cluster.addresses[1])
    second.execute("CREATE TABLE ks.created_on_two (k int PRIMARY KEY, v int)")
    assert second.wait_for_schema_agreement(wait_time=20)
    versions = set()
    for address in local_cluster.addresses:
        session = local_cluster.session(only=address)
        rows = session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = 'ks'"
        )
        assert "created_on_two" in {row.table_name for row in rows}, address
        versions.add(session.execute("SELECT schema_version FROM system.local").one()[0])
        session.execute(_statement("INSERT INTO ks.created_on_two (k, v) VALUES (1, 1)", QUORUM))
    assert len(versions) == 1


def test_describe_cluster_lists_the_whole_rings_ranges_and_replicas(
    local_cluster: LocalCluster, keyspace: str
) -> None:
    session = local_cluster.session(only=local_cluster.addresses[1])
    session.execute(
        "CREATE KEYSPACE IF NOT EXISTS one WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    token_map = session.cluster.metadata.token_map
    assert token_map is not None
    ring = [token.value for token in token_map.ring]
    for name, factor in (("ks", 3), ("one", 1)):
        session.set_keyspace(name)
        ownership = dict(session.execute("DESCRIBE CLUSTER").one().range_ownership)
        assert sorted(ownership, key=int) == [str(token) for token in ring]
        for token in token_map.ring:  # the driver's SimpleStrategy walk is the oracle
            expected = [f"/{host.address}:7000" for host in token_map.get_replicas(name, token)]
            assert list(ownership[str(token.value)]) == expected, (name, token)
            assert len(expected) == factor
        owners = {endpoint for endpoints in ownership.values() for endpoint in endpoints}
        assert owners == {f"/{address}:7000" for address in local_cluster.addresses}


def test_a_key_column_rename_reaches_every_node(local_cluster: LocalCluster, keyspace: str) -> None:
    first = local_cluster.session(only=local_cluster.addresses[0])
    first.execute("CREATE TABLE ks.renamed (k int, c int, v int, PRIMARY KEY (k, c))")
    first.execute(_statement("INSERT INTO ks.renamed (k, c, v) VALUES (1, 2, 3)", QUORUM))
    first.execute("ALTER TABLE ks.renamed RENAME c TO ck")
    assert first.wait_for_schema_agreement(wait_time=20)
    for address in local_cluster.addresses:
        session = local_cluster.session(only=address)
        query = _statement("SELECT ck, v FROM ks.renamed WHERE k = 1 AND ck = 2", QUORUM)
        assert tuple(session.execute(query).one()) == (2, 3), address


def test_unavailable_before_sending_when_two_replicas_are_down(
    local_cluster: LocalCluster, keyspace: str
) -> None:
    first, second, third = local_cluster.addresses
    session = local_cluster.session(only=first)
    local_cluster.kill(second)
    local_cluster.kill(third)
    try:
        caught: list[Unavailable] = []

        def refused() -> bool:
            try:
                session.execute(_statement("INSERT INTO ks.kv (k, v) VALUES (1, 'u')", QUORUM))
            except Unavailable as error:
                caught.append(error)
                return True
            return False

        wait_until(refused, 40, "QUORUM refused with Unavailable once 2 of 3 are convicted")
        error = caught[-1]
        assert (error.consistency, error.required_replicas, error.alive_replicas) == (
            QUORUM,
            2,
            1,
        )
        session.execute(_statement("INSERT INTO ks.kv (k, v) VALUES (2, 'one')", ONE))
    finally:
        local_cluster.restart(second)
        local_cluster.restart(third)
        local_cluster.wait_ready()


def test_hints_replay_to_a_killed_replica_with_cdc_rows(
    local_cluster: LocalCluster, keyspace: str
) -> None:
    third = local_cluster.addresses[2]
    session = local_cluster.session()
    local_cluster.kill(third)
    keys = range(100, 130)
    try:
        for key in keys:
            session.execute(
                _statement(f"INSERT INTO ks.events (k, c, v) VALUES ({key}, 1, 'h{key}')", QUORUM)
            )
    finally:
        local_cluster.restart(third)
    local_cluster.wait_ready()

    def replayed() -> bool:
        pinned = local_cluster.session(only=third)
        for key in keys:
            row = pinned.execute(_statement(f"SELECT v FROM ks.events WHERE k = {key}", ONE)).one()
            if row is None or row.v != f"h{key}":
                return False
        return True

    wait_until(replayed, 40, "every hinted write readable at ONE on the restarted node alone")
    for address in local_cluster.addresses:
        pinned = local_cluster.session(only=address)
        log = pinned.execute(_statement("SELECT k FROM ks.events_scylla_cdc_log", ONE))
        assert set(keys) <= {row.k for row in log}, f"CDC log rows missing on {address}"
