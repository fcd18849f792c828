"""Read repair and read-response digests (cassandra-core.md §7.2, §6; Cassandra's
``BlockingReadRepairTest`` and ``DigestResolverTest``).

Proves: the repair of a replica is exactly what it lacks (applying it yields the reconciled
partition, for random versions); an in-sync replica gets nothing; the client waits for the write
quorum only (``onlyBlockOnQuorum``), in-sync participants reduce the wait, and with LOCAL_QUORUM a
remote repair is sent but never awaited (``remoteDCTest``). Digests: 16-byte MD5, equal for
replicas that applied the same writes in any order, equal for "nothing" and "empty", different
when any reconcile-relevant field differs, blind to a deletion's local time (as Cassandra).
"""

from __future__ import annotations

import hashlib
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cluster import ConsistencyLevel
from ringflow.cluster._digest import (
    EMPTY_PARTITION_DIGEST,
    canonical_partition,
    partition_digest,
)
from ringflow.cluster._read_repair import (
    BlockingRepair,
    SendRepair,
    reconcile_versions,
    repair_mutation,
    repair_mutations,
)
from ringflow.errors import InvalidRequest
from ringflow.ring import Host, NetworkTopologyStrategy, ReplicationFactor, SimpleStrategy
from ringflow.schema import (
    Cell,
    ClusteringBound,
    DeletionTime,
    LivenessInfo,
    Mutation,
    RangeTombstone,
    Row,
    merge_mutations,
)

CL = ConsistencyLevel
_NAMESPACE = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def host(dc: str, index: int) -> Host:
    endpoint = f"10.{int(dc[2:])}.0.{index}"
    return Host(uuid.uuid5(_NAMESPACE, endpoint), endpoint, dc, f"r{index % 3}")


def partition(*rows: Row, deletion: DeletionTime | None = None) -> Mutation:
    return Mutation("ks", "t", (b"k",), partition_deletion=deletion, rows=rows)


def row(clustering: bytes, **cells: Cell) -> Row:
    return Row((clustering,), cells=cells)


# -- random versions -------------------------------------------------------------------------

cells = st.builds(
    lambda ts, value, dead: Cell.tombstone(ts, 100) if dead else Cell.live(ts, value),
    st.integers(1, 6),
    st.sampled_from([b"a", b"b", b""]),
    st.booleans(),
)
rows = st.builds(
    lambda key, data, marker, deleted: Row(
        (key,),
        LivenessInfo(marker) if marker else None,
        DeletionTime(deleted, 100) if deleted else None,
        data,
    ),
    st.sampled_from([b"1", b"2", b"3"]),
    st.dictionaries(st.sampled_from(["x", "y"]), cells, max_size=2),
    st.integers(0, 6),
    st.integers(0, 3),
)
range_tombstones = st.builds(
    lambda low, ts: RangeTombstone(
        ClusteringBound((low,)), ClusteringBound((b"3",)), DeletionTime(ts, 100)
    ),
    st.sampled_from([b"1", b"2"]),
    st.integers(1, 6),
)
versions = st.builds(
    lambda rs, deleted, tombstones: Mutation(
        "ks",
        "t",
        (b"k",),
        DeletionTime(deleted, 100) if deleted else None,
        None,
        tuple({r.clustering: r for r in rs}.values()),
        tuple(tombstones),
    ),
    st.lists(rows, max_size=3),
    st.integers(0, 4),
    st.lists(range_tombstones, max_size=2),
)
maybe_versions = st.none() | versions


@settings(max_examples=150, deadline=None)
@given(st.lists(maybe_versions, min_size=1, max_size=4))
def test_a_repair_gives_each_replica_exactly_the_reconciled_partition(
    replica_versions: list[Mutation | None],
) -> None:
    merged = reconcile_versions(replica_versions)
    for held in replica_versions:
        repair = repair_mutation(merged, held)
        if repair is None:
            assert canonical_partition(held) == merged
            continue
        repaired = repair if held is None else merge_mutations(held, repair)
        assert canonical_partition(repaired) == merged
        assert partition_digest(repaired) == partition_digest(merged)


@settings(max_examples=150, deadline=None)
@given(versions, versions)
def test_replicas_that_applied_the_same_writes_in_any_order_digest_alike(
    first: Mutation, second: Mutation
) -> None:
    digest = partition_digest(merge_mutations(first, second))
    assert digest == partition_digest(merge_mutations(second, first))
    assert len(digest) == 16
    assert partition_digest(first) == partition_digest(canonical_partition(first))


def test_digests_of_nothing_and_of_differences() -> None:
    assert partition_digest(None) == EMPTY_PARTITION_DIGEST == hashlib.md5(b"").digest()
    assert partition_digest(Mutation("ks", "t", (b"k",))) == EMPTY_PARTITION_DIGEST
    base = partition(row(b"1", v=Cell.live(5, b"a")))
    variants = [
        partition(row(b"1", v=Cell.live(6, b"a"))),
        partition(row(b"1", v=Cell.live(5, b"b"))),
        partition(row(b"1", v=Cell(5, b"a", 10, 200))),
        partition(row(b"1", w=Cell.live(5, b"a"))),
        partition(row(b"2", v=Cell.live(5, b"a"))),
        partition(row(b"1", v=Cell.live(5, b"a")), deletion=DeletionTime(1, 100)),
        Mutation("ks", "t", (b"j",), rows=base.rows),
    ]
    digests = {partition_digest(m) for m in [base, *variants]}
    assert len(digests) == len(variants) + 1


def test_a_deletions_local_time_stays_out_of_the_digest() -> None:
    one = partition(row(b"1", v=Cell.live(5, b"a")), deletion=DeletionTime(1, 100))
    other = partition(row(b"1", v=Cell.live(5, b"a")), deletion=DeletionTime(1, 999))
    assert partition_digest(one) == partition_digest(other)


def test_repairs_are_row_granular_and_skip_replicas_in_sync() -> None:
    shared = row(b"1", v=Cell.live(5, b"a"))
    stale = partition(shared, row(b"2", v=Cell.live(1, b"old")))
    fresh = partition(shared, row(b"2", v=Cell.live(9, b"new")))
    merged = reconcile_versions([stale, fresh])
    assert merged == canonical_partition(fresh)
    fixes = repair_mutations(merged, {host("dc1", 1): stale, host("dc1", 2): fresh})
    assert list(fixes) == [host("dc1", 1)]
    assert fixes[host("dc1", 1)].rows == (row(b"2", v=Cell.live(9, b"new")),)
    assert repair_mutation(None, stale) is None


# -- how many repair acks the answer waits for ----------------------------------------------


def test_only_block_on_quorum() -> None:
    replicas = [host("dc1", i) for i in (1, 2, 3)]
    fixes = {h: partition(row(b"1", v=Cell.live(i, b"x"))) for i, h in enumerate(replicas)}
    repair = BlockingRepair(
        5, CL.QUORUM, SimpleStrategy(ReplicationFactor(3)), "dc1", replicas, fixes
    )
    sent = repair.start()
    assert [s.replica for s in sent] == replicas and all(isinstance(s, SendRepair) for s in sent)
    assert repair.block_for == 2
    assert repair.on_ack(replicas[0]) and not repair.is_complete
    assert not repair.on_ack(replicas[0])  # a duplicate ack counts once
    assert repair.on_ack(replicas[1]) and repair.is_complete  # the third is not awaited
    repair.validate()


def test_in_sync_participants_reduce_the_wait() -> None:
    replicas = [host("dc1", i) for i in (1, 2, 3)]
    fixes = {replicas[2]: partition(row(b"1", v=Cell.live(1, b"x")))}
    repair = BlockingRepair(5, CL.ALL, SimpleStrategy(ReplicationFactor(3)), "dc1", replicas, fixes)
    assert repair.block_for == 1
    assert repair.on_failure(replicas[2]) and not repair.on_ack(replicas[2])
    assert not repair.is_complete
    repair.validate()


def test_remote_dc_repairs_are_sent_but_not_awaited_at_local_quorum() -> None:
    local_1, local_2, remote = host("dc1", 1), host("dc1", 2), host("dc2", 1)
    fixes = {h: partition(row(b"1", v=Cell.live(1, b"x"))) for h in (local_1, remote)}
    strategy = NetworkTopologyStrategy.of({"dc1": 3, "dc2": 3})
    repair = BlockingRepair(5, CL.LOCAL_QUORUM, strategy, "dc1", [local_1, local_2, remote], fixes)
    assert [s.replica for s in repair.start()] == [local_1, remote]
    assert repair.block_for == 1  # local quorum 2, local_2 already in sync
    assert repair.on_ack(remote) and not repair.is_complete
    assert repair.on_ack(local_1) and repair.is_complete
    repair.validate()


def test_repairs_only_for_participants() -> None:
    with pytest.raises(InvalidRequest):
        BlockingRepair(
            5,
            CL.QUORUM,
            SimpleStrategy(ReplicationFactor(3)),
            "dc1",
            [host("dc1", 1)],
            {host("dc1", 2): partition()},
        )
