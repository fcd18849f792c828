"""Two data centers under NetworkTopologyStrategy (issue 6 §5): LOCAL_QUORUM vs EACH_QUORUM.

A 5-node cluster of real processes, dc1 (3 nodes) and dc2 (2 nodes), keyspace
``{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 2}`` (every node is a replica of every
key), used through the Scylla driver with ``DCAwareRoundRobinPolicy(local_dc='dc1')``.
Proves, in order (the module shares one cluster; faults come last): every level works with both
DCs up; with dc2 down LOCAL_QUORUM, LOCAL_ONE and QUORUM (3 of sum RF 5) keep working while
EACH_QUORUM and ALL are refused with ``Unavailable`` and cassandra-core.md §5 figures; with one
more dc1 node down QUORUM is refused (required 3, alive 2) and LOCAL_QUORUM still works; with
only the coordinator left LOCAL_QUORUM is refused (required 2, alive 1) and LOCAL_ONE works.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from cassandra import ConsistencyLevel, Unavailable
from cassandra.cluster import Session
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.query import SimpleStatement

from tests.integration.cluster.conftest import (
    LocalCluster,
    started_cluster,
    wait_seen,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)
CL = ConsistencyLevel
DC1, DC2 = "dc1", "dc2"
NODES = 5


class TwoDcCluster(LocalCluster):
    def dc_session(self, *, timeout_s: float = 15.0) -> Session:
        """Token-aware over dc1 only (``DCAwareRoundRobinPolicy(local_dc='dc1')``)."""
        policy = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=DC1))
        return self.connect(self.addresses[0], policy, timeout_s=timeout_s)


@pytest.fixture(scope="module")
def two_dcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoDcCluster]:
    data = tmp_path_factory.mktemp("two-dcs")
    dcs = f"{DC1}:3,{DC2}:2"
    with started_cluster(data, "--dcs", dcs, nodes=NODES, kind=TwoDcCluster) as cluster:
        session = cluster.dc_session()
        session.execute(
            "CREATE KEYSPACE mdc WITH replication = "
            "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 2}"
        )
        session.execute("CREATE TABLE mdc.kv (k int PRIMARY KEY, v text)")
        assert session.wait_for_schema_agreement(wait_time=20)
        yield cluster


def _write(session: Session, key: int, value: str, level: int) -> None:
    statement = SimpleStatement(
        f"INSERT INTO mdc.kv (k, v) VALUES ({key}, '{value}')", consistency_level=level
    )
    session.execute(statement)


def _read(session: Session, key: int, level: int) -> str | None:
    statement = SimpleStatement(f"SELECT v FROM mdc.kv WHERE k = {key}", consistency_level=level)
    row = session.execute(statement).one()
    return None if row is None else str(row.v)


def _unavailable(action: Callable[[], object]) -> Unavailable:
    with pytest.raises(Unavailable) as caught:
        action()
    return caught.value


def test_driver_sees_both_dcs(two_dcs: TwoDcCluster) -> None:
    """The driver discovers 3 dc1 hosts and 2 dc2 hosts with their racks from system.peers."""
    session = two_dcs.dc_session()
    hosts = {host.address: host.datacenter for host in session.cluster.metadata.all_hosts()}
    assert hosts == dict(zip(two_dcs.addresses, [DC1] * 3 + [DC2] * 2, strict=True))


def test_every_level_works_with_both_dcs_up(two_dcs: TwoDcCluster) -> None:
    """With every node UP, writes and reads succeed at each level, EACH_QUORUM and ALL included,
    and a value written at one level is read back at every other."""
    session = two_dcs.dc_session()
    levels = [CL.ONE, CL.LOCAL_ONE, CL.QUORUM, CL.LOCAL_QUORUM, CL.EACH_QUORUM, CL.ALL]
    for key, level in enumerate(levels):
        _write(session, key, f"up{key}", level)
    for key in range(len(levels)):
        for level in levels:
            assert _read(session, key, level) == f"up{key}", (key, level)


def test_dc2_down_local_quorum_works_and_each_quorum_is_unavailable(
    two_dcs: TwoDcCluster,
) -> None:
    """dc2 SIGKILLed: LOCAL_QUORUM/LOCAL_ONE/QUORUM writes and reads succeed (QUORUM needs 3 of
    sum RF 5: dc1's 3 suffice); EACH_QUORUM writes and reads raise Unavailable(EACH_QUORUM,
    required 2, alive 0) naming DC dc2; ALL raises Unavailable(ALL, required 5, alive 3)."""
    dc1, dc2 = two_dcs.addresses[:3], two_dcs.addresses[3:]
    for address in dc2:
        two_dcs.kill(address)
    wait_seen(two_dcs, dc1, dict.fromkeys(dc2, "DN"))
    session = two_dcs.dc_session()

    for key, level in enumerate([CL.LOCAL_QUORUM, CL.LOCAL_ONE, CL.QUORUM, CL.ONE]):
        _write(session, 100 + key, f"dc2down{key}", level)
    for key in range(4):
        for level in (CL.LOCAL_QUORUM, CL.LOCAL_ONE, CL.QUORUM, CL.ONE):
            assert _read(session, 100 + key, level) == f"dc2down{key}", (key, level)

    for action in (
        lambda: _write(session, 110, "x", CL.EACH_QUORUM),
        lambda: _read(session, 100, CL.EACH_QUORUM),
    ):
        error = _unavailable(action)
        assert (error.consistency, error.required_replicas, error.alive_replicas) == (
            CL.EACH_QUORUM,
            2,
            0,
        )
        assert "Cannot achieve consistency level EACH_QUORUM in DC dc2" in str(error)
    error = _unavailable(lambda: _write(session, 111, "x", CL.ALL))
    assert (error.consistency, error.required_replicas, error.alive_replicas) == (CL.ALL, 5, 3)
    assert _read(session, 110, CL.LOCAL_QUORUM) is None  # the refused write was never sent


def test_dc2_and_one_dc1_node_down_quorum_is_unavailable(two_dcs: TwoDcCluster) -> None:
    """dc2 and one dc1 node down: QUORUM raises Unavailable(QUORUM, required 3, alive 2) (sum
    the RFs first, then the quorum) while LOCAL_QUORUM (2 of dc1's 3) still writes and reads."""
    first, second, third = two_dcs.addresses[:3]
    two_dcs.kill(third)
    wait_seen(two_dcs, [first, second], {third: "DN"})
    session = two_dcs.session(only=first)
    error = _unavailable(lambda: _write(session, 200, "x", CL.QUORUM))
    assert (error.consistency, error.required_replicas, error.alive_replicas) == (CL.QUORUM, 3, 2)
    error = _unavailable(lambda: _read(session, 100, CL.QUORUM))
    assert (error.consistency, error.required_replicas, error.alive_replicas) == (CL.QUORUM, 3, 2)
    _write(session, 201, "lq", CL.LOCAL_QUORUM)
    assert _read(session, 201, CL.LOCAL_QUORUM) == "lq"


def test_only_the_coordinator_left_local_quorum_is_unavailable(two_dcs: TwoDcCluster) -> None:
    """Only the coordinator is UP: LOCAL_QUORUM raises Unavailable(LOCAL_QUORUM, required 2,
    alive 1) for writes and reads; LOCAL_ONE writes and reads on the coordinator alone. Then
    the whole cluster is restarted and EACH_QUORUM works again."""
    first, second = two_dcs.addresses[:2]
    two_dcs.kill(second)
    wait_seen(two_dcs, [first], {second: "DN"})
    session = two_dcs.session(only=first)
    for action in (
        lambda: _write(session, 300, "x", CL.LOCAL_QUORUM),
        lambda: _read(session, 201, CL.LOCAL_QUORUM),
    ):
        error = _unavailable(action)
        assert (error.consistency, error.required_replicas, error.alive_replicas) == (
            CL.LOCAL_QUORUM,
            2,
            1,
        )
    _write(session, 301, "alone", CL.LOCAL_ONE)
    assert _read(session, 301, CL.LOCAL_ONE) == "alone"

    for address in two_dcs.addresses[1:]:
        two_dcs.restart(address)
    two_dcs.wait_ready()
    healed = two_dcs.session(only=first)

    def each_quorum_works() -> bool:
        _write(healed, 302, "healed", CL.EACH_QUORUM)
        return _read(healed, 302, CL.EACH_QUORUM) == "healed"

    wait_until(each_quorum_works, 30, "EACH_QUORUM writes and reads after every node restarted")
