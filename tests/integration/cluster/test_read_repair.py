"""Blocking read repair on a 3-node RF=3 cluster of real processes (issue 6 §5, reference §7.2).

How a replica is made stale without hints undoing it: B is SIGKILLed, writes go through
coordinator A at QUORUM (A and C take them, A keeps the hints for B), then A is SIGKILLed so its
hints cannot replay, and B is restarted. Reading B alone (C down too, CL ONE through B) proves B
is stale; a QUORUM read through C (contacts B and C: A is down) repairs B before answering; B
alone then returns the new values. A is restarted only at the end.
"""

from __future__ import annotations

import pytest
from cassandra import ConsistencyLevel
from cassandra.cluster import Session
from cassandra.query import SimpleStatement

from tests.integration.cluster.conftest import LocalCluster, wait_seen

pytestmark = pytest.mark.timeout(300)
QUORUM = ConsistencyLevel.QUORUM
ONE = ConsistencyLevel.ONE
ALL = ConsistencyLevel.ALL


def _rows(session: Session, level: int) -> dict[int, str]:
    found = {}
    for key in (1, 2):
        statement = SimpleStatement(f"SELECT v FROM rr.kv WHERE k = {key}", consistency_level=level)
        row = session.execute(statement).one()
        if row is not None:
            found[key] = row.v
    return found


def test_quorum_read_repairs_a_stale_replica(local_cluster: LocalCluster) -> None:
    """A replica that missed a write (key 1 absent, key 2 an older value) is repaired by a QUORUM
    read that contacts it: B alone at ONE answers the stale state before the read and the
    reconciled (last-write-wins) state after it, with no hint replayed in between."""
    a, b, c = local_cluster.addresses
    setup = local_cluster.session(only=a)
    setup.execute(
        "CREATE KEYSPACE rr WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    setup.execute("CREATE TABLE rr.kv (k int PRIMARY KEY, v text)")
    assert setup.wait_for_schema_agreement(wait_time=20)
    setup.execute(
        SimpleStatement("INSERT INTO rr.kv (k, v) VALUES (2, 'old')", consistency_level=ALL)
    )
    try:
        local_cluster.kill(b)
        wait_seen(local_cluster, [a, c], {b: "DN"})
        writer = local_cluster.session(only=a)
        for statement in ("INSERT INTO rr.kv (k, v) VALUES (1, 'new')",
                          "INSERT INTO rr.kv (k, v) VALUES (2, 'new')"):  # fmt: skip
            writer.execute(SimpleStatement(statement, consistency_level=QUORUM))
        local_cluster.kill(a)  # A holds B's hints: they cannot replay while A is down
        local_cluster.restart(b)
        wait_seen(local_cluster, [b], {a: "DN", c: "UN"})
        wait_seen(local_cluster, [c], {a: "DN", b: "UN"})

        local_cluster.kill(c)
        wait_seen(local_cluster, [b], {a: "DN", c: "DN"})
        assert _rows(local_cluster.session(only=b), ONE) == {2: "old"}, "B was not stale"

        local_cluster.restart(c)
        wait_seen(local_cluster, [b], {a: "DN", c: "UN"})
        wait_seen(local_cluster, [c], {a: "DN", b: "UN"})
        assert _rows(local_cluster.session(only=c), QUORUM) == {1: "new", 2: "new"}

        local_cluster.kill(c)
        wait_seen(local_cluster, [b], {a: "DN", c: "DN"})
        assert _rows(local_cluster.session(only=b), ONE) == {1: "new", 2: "new"}, (
            "the QUORUM read did not repair B"
        )
    finally:
        for address in (a, b, c):
            local_cluster.restart(address)  # a no-op for a running node
        local_cluster.wait_ready()
