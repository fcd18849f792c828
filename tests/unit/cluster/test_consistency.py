"""Consistency levels (cassandra-core.md §5.1, §5.2).

Proves: protocol codes; the §5.1 examples; dtest's ``_required_nodes`` table over a CL × RF
matrix; pending replicas in write counts (local DC only for LOCAL_*, per DC for EACH_QUORUM);
Unavailable's code, figures and EACH_QUORUM message; read/write validation messages; the
timeout errors' codes and fields; the ResponseTracker counts per group, ignores duplicates and
strangers, fails as soon as the level is out of reach, and agrees with the live-replica check.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cluster import (
    ConsistencyLevel,
    ReadTimeout,
    ResponseTracker,
    Unavailable,
    WriteTimeout,
    WriteType,
    assure_sufficient_live_replicas,
    block_for,
    block_for_write,
    each_quorum_block_for,
    local_quorum_for,
)
from ringflow.errors import ErrorCode, InvalidRequest, PeerError
from ringflow.ring import Host, NetworkTopologyStrategy, ReplicationFactor, SimpleStrategy

CL = ConsistencyLevel
_NAMESPACE = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def host(dc: str, index: int) -> Host:
    endpoint = f"10.{int(dc[2:])}.0.{index}"
    return Host(uuid.uuid5(_NAMESPACE, endpoint), endpoint, dc, f"r{index % 3}")


def hosts_for(factors: dict[str, int]) -> list[Host]:
    return [host(dc, i) for dc, rf in factors.items() for i in range(1, rf + 1)]


def test_protocol_codes() -> None:
    assert [(level.name, level.value) for level in CL] == [
        ("ANY", 0),
        ("ONE", 1),
        ("TWO", 2),
        ("THREE", 3),
        ("QUORUM", 4),
        ("ALL", 5),
        ("LOCAL_QUORUM", 6),
        ("EACH_QUORUM", 7),
        ("SERIAL", 8),
        ("LOCAL_SERIAL", 9),
        ("LOCAL_ONE", 10),
    ]


def test_section_5_1_examples() -> None:
    even = {"dc1": 3, "dc2": 3}
    assert block_for(CL.QUORUM, even, "dc1") == 4
    assert block_for(CL.LOCAL_QUORUM, even, "dc1") == 2
    assert each_quorum_block_for(even) == {"dc1": 2, "dc2": 2}
    assert block_for(CL.EACH_QUORUM, even, "dc1") == 4
    assert block_for(CL.ALL, even, "dc1") == 6
    uneven = {"dc1": 3, "dc2": 2}
    assert block_for(CL.QUORUM, uneven, "dc1") == 3  # 5 // 2 + 1, not 2 + 2
    assert block_for(CL.EACH_QUORUM, uneven, "dc1") == 4
    assert block_for(CL.LOCAL_QUORUM, uneven, "dc2") == 2


def _required_nodes(cl: ConsistencyLevel, factors: dict[str, int], dc: str) -> int:
    """cassandra-dtest ``consistency_test.py::_required_nodes``, EACH_QUORUM summed over DCs."""
    if cl in (CL.ONE, CL.LOCAL_ONE, CL.ANY):
        return 1
    if cl is CL.TWO:
        return 2
    if cl is CL.THREE:
        return 3
    if cl in (CL.QUORUM, CL.SERIAL):
        return sum(factors.values()) // 2 + 1
    if cl is CL.ALL:
        return sum(factors.values())
    if cl in (CL.LOCAL_QUORUM, CL.LOCAL_SERIAL):
        return factors[dc] // 2 + 1
    return sum(rf // 2 + 1 for rf in factors.values())


@pytest.mark.parametrize(
    "factors",
    [
        {"dc1": 1},
        {"dc1": 3},
        {"dc1": 5},
        {"dc1": 3, "dc2": 3},
        {"dc1": 3, "dc2": 2},
        {"dc1": 2, "dc2": 2, "dc3": 1},
        {"dc1": 4, "dc2": 1},
    ],
    ids=str,
)
@pytest.mark.parametrize("level", list(CL), ids=lambda level: level.name)
def test_required_nodes_matrix(level: ConsistencyLevel, factors: dict[str, int]) -> None:
    for dc in factors:
        assert block_for(level, factors, dc) == _required_nodes(level, factors, dc)
        strategy = NetworkTopologyStrategy.of(factors)
        assert block_for(level, strategy, dc) == _required_nodes(level, factors, dc)


def test_non_topology_strategy_uses_quorum_for_local_and_each_quorum() -> None:
    simple = SimpleStrategy(ReplicationFactor(5))
    assert block_for(CL.LOCAL_QUORUM, simple, "dc1") == 3
    assert block_for(CL.EACH_QUORUM, simple, "anything") == 3
    assert block_for(CL.ALL, simple, "dc1") == 5
    assert each_quorum_block_for(simple) == {}


def test_transient_replicas_count_in_all_replicas_and_unlisted_dc_has_quorum_one() -> None:
    strategy = NetworkTopologyStrategy.of({"dc1": "3/1", "dc2": 2})
    assert block_for(CL.QUORUM, strategy, "dc1") == 3
    assert block_for(CL.ALL, strategy, "dc1") == 5
    assert local_quorum_for(strategy, "dc9") == 1


def test_pending_replicas_in_write_counts() -> None:
    factors = {"dc1": 3, "dc2": 3}
    pending = [host("dc1", 9), host("dc2", 9)]
    assert block_for_write(CL.QUORUM, factors, "dc1", pending) == 6
    assert block_for_write(CL.ALL, factors, "dc1", pending) == 8
    assert block_for_write(CL.ONE, factors, "dc1", pending) == 3
    assert block_for_write(CL.LOCAL_QUORUM, factors, "dc1", pending) == 3
    assert block_for_write(CL.LOCAL_ONE, factors, "dc1", pending[1:]) == 1
    assert block_for_write(CL.ANY, factors, "dc1", pending) == 1
    assert block_for_write(CL.EACH_QUORUM, factors, "dc1", pending) == 6
    assert each_quorum_block_for(factors, pending[:1]) == {"dc1": 3, "dc2": 2}


def test_validation_messages() -> None:
    replicas = hosts_for({"dc1": 3})
    with pytest.raises(
        InvalidRequest, match=r"^ANY ConsistencyLevel is only supported for writes$"
    ):
        assure_sufficient_live_replicas(
            CL.ANY, {"dc1": 3}, replicas, lambda h: True, local_dc="dc1", for_write=False
        )
    for serial in (CL.SERIAL, CL.LOCAL_SERIAL):
        with pytest.raises(InvalidRequest, match="conditional updates"):
            assure_sufficient_live_replicas(
                serial, {"dc1": 3}, replicas, lambda h: True, local_dc="dc1", for_write=True
            )
    # Serial reads are Paxos reads at (LOCAL_)QUORUM.
    assert (
        len(
            assure_sufficient_live_replicas(
                CL.SERIAL, {"dc1": 3}, replicas, lambda h: True, local_dc="dc1", for_write=False
            )
        )
        == 3
    )
    with pytest.raises(InvalidRequest, match="consistency level"):
        block_for(4, {"dc1": 3}, "dc1")  # type: ignore[arg-type]


def _unavailable(
    level: ConsistencyLevel,
    factors: dict[str, int],
    dead: set[str],
    *,
    for_write: bool = True,
    local_dc: str = "dc1",
    pending: Sequence[Host] = (),
) -> Unavailable:
    replicas = hosts_for(factors)
    with pytest.raises(Unavailable) as caught:
        assure_sufficient_live_replicas(
            level,
            factors,
            replicas,
            lambda h: h.endpoint not in dead,
            local_dc=local_dc,
            for_write=for_write,
            pending=pending,
        )
    return caught.value


def test_unavailable_figures() -> None:
    error = _unavailable(CL.QUORUM, {"dc1": 3}, {"10.1.0.1", "10.1.0.2"})
    assert isinstance(error, PeerError) and error.code == ErrorCode.UNAVAILABLE == 0x1000
    assert (error.consistency, error.required, error.alive) == (CL.QUORUM, 2, 1)
    assert str(error) == "Cannot achieve consistency level QUORUM"
    error = _unavailable(CL.LOCAL_QUORUM, {"dc1": 3, "dc2": 3}, {"10.1.0.1", "10.1.0.2"})
    assert (error.required, error.alive) == (2, 1)
    error = _unavailable(CL.LOCAL_ONE, {"dc1": 1, "dc2": 3}, {"10.1.0.1"})
    assert (error.required, error.alive) == (1, 0)
    error = _unavailable(CL.ALL, {"dc1": 3, "dc2": 3}, {"10.2.0.3"}, for_write=False)
    assert (error.required, error.alive) == (6, 5)


def test_each_quorum_names_the_failing_datacenter() -> None:
    error = _unavailable(CL.EACH_QUORUM, {"dc1": 3, "dc2": 3}, {"10.2.0.1", "10.2.0.2"})
    assert str(error) == "Cannot achieve consistency level EACH_QUORUM in DC dc2"
    assert (error.required, error.alive, error.datacenter) == (2, 1, "dc2")
    # Four replicas are alive (≥ 2 + 2), but not two in each DC.


def test_any_never_unavailable_and_local_levels_ignore_remote_replicas() -> None:
    factors = {"dc1": 3, "dc2": 3}
    assert (
        assure_sufficient_live_replicas(
            CL.ANY, factors, hosts_for(factors), lambda h: False, local_dc="dc1", for_write=True
        )
        == []
    )
    live = assure_sufficient_live_replicas(
        CL.LOCAL_QUORUM,
        factors,
        hosts_for(factors),
        lambda h: h.dc == "dc1",
        local_dc="dc1",
        for_write=True,
    )
    assert [h.dc for h in live] == ["dc1"] * 3


def test_pending_replicas_raise_the_bar_for_writes_only() -> None:
    factors = {"dc1": 3}
    dead_pending = [host("dc1", 9)]
    # blockFor = 2 + 1 pending (dead): three natural replicas alive are enough...
    assure_sufficient_live_replicas(
        CL.QUORUM,
        factors,
        hosts_for(factors),
        lambda h: h.endpoint != "10.1.0.9",
        local_dc="dc1",
        for_write=True,
        pending=dead_pending,
    )
    # ...two are not,
    error = _unavailable(CL.QUORUM, factors, {"10.1.0.1", "10.1.0.9"}, pending=dead_pending)
    assert (error.required, error.alive) == (3, 2)
    # while a read ignores pending replicas altogether.
    assure_sufficient_live_replicas(
        CL.QUORUM,
        factors,
        hosts_for(factors)[1:],
        lambda h: True,
        local_dc="dc1",
        for_write=False,
        pending=dead_pending,
    )
    with pytest.raises(InvalidRequest, match="twice"):
        assure_sufficient_live_replicas(
            CL.ONE,
            factors,
            hosts_for(factors),
            lambda h: True,
            local_dc="dc1",
            for_write=True,
            pending=hosts_for(factors)[:1],
        )


def test_timeout_errors_carry_codes_and_fields() -> None:
    write = WriteTimeout(CL.QUORUM, 1, 2, WriteType.BATCH)
    assert write.code == ErrorCode.WRITE_TIMEOUT == 0x1100
    assert (write.received, write.block_for, write.write_type) == (1, 2, WriteType.BATCH)
    assert str(write) == "Operation timed out - received only 1 responses."
    read = ReadTimeout(CL.LOCAL_QUORUM, 2, 2, False)
    assert read.code == ErrorCode.READ_TIMEOUT == 0x1200
    assert (read.received, read.block_for, read.data_present) == (2, 2, False)
    assert [t.name for t in WriteType] == [
        "SIMPLE",
        "BATCH",
        "UNLOGGED_BATCH",
        "COUNTER",
        "BATCH_LOG",
        "CAS",
        "VIEW",
        "CDC",
    ]


def test_tracker_quorum_counts_each_host_once() -> None:
    replicas = hosts_for({"dc1": 3})
    tracker = ResponseTracker(CL.QUORUM, {"dc1": 3}, replicas, local_dc="dc1", for_write=True)
    assert tracker.block_for == 2
    assert tracker.on_response(replicas[0])
    assert not tracker.on_response(replicas[0])
    assert not tracker.on_response(host("dc1", 7))  # not in the plan
    tracker.validate()
    assert not tracker.is_satisfied and not tracker.is_failed
    assert tracker.on_response(replicas[2])
    assert tracker.is_satisfied and not tracker.is_failed
    tracker.validate()


def test_tracker_fails_as_soon_as_the_level_is_out_of_reach() -> None:
    replicas = hosts_for({"dc1": 3})
    tracker = ResponseTracker(CL.QUORUM, {"dc1": 3}, replicas, local_dc="dc1", for_write=False)
    assert tracker.on_failure(replicas[0])
    assert not tracker.is_failed
    assert tracker.on_response(replicas[1])
    assert not tracker.on_failure(replicas[1])  # already answered
    assert tracker.on_failure(replicas[2])
    assert tracker.is_failed and not tracker.is_satisfied
    error = tracker.read_timeout(data_present=True)
    assert (error.received, error.block_for, error.data_present) == (1, 2, True)
    tracker.validate()


def test_tracker_local_quorum_ignores_remote_answers() -> None:
    factors = {"dc1": 3, "dc2": 3}
    replicas = hosts_for(factors)
    tracker = ResponseTracker(CL.LOCAL_QUORUM, factors, replicas, local_dc="dc2", for_write=True)
    assert tracker.required_by_group() == {"dc2": 2}
    for remote in replicas[:3]:
        assert not tracker.on_response(remote)
    assert not tracker.is_satisfied
    tracker.on_response(replicas[3])
    tracker.on_response(replicas[4])
    assert tracker.is_satisfied
    tracker.validate()


def test_tracker_each_quorum_needs_every_datacenter() -> None:
    factors = {"dc1": 3, "dc2": 3}
    replicas = hosts_for(factors)
    pending = [host("dc2", 9)]
    tracker = ResponseTracker(
        CL.EACH_QUORUM, factors, replicas, local_dc="dc1", for_write=True, pending=pending
    )
    assert tracker.required_by_group() == {"dc1": 2, "dc2": 3}
    for replica in replicas[:3]:
        tracker.on_response(replica)
    tracker.on_response(replicas[3])
    assert tracker.received == 4 and not tracker.is_satisfied  # 4 ≥ 2+2, but dc2 has 1
    tracker.on_failure(replicas[4])
    assert not tracker.is_failed
    tracker.on_failure(pending[0])
    assert tracker.is_failed
    error = tracker.write_timeout(WriteType.SIMPLE)
    assert (error.received, error.block_for) == (4, 5)
    tracker.validate()


def test_tracker_any_is_satisfied_by_a_hint() -> None:
    replicas = hosts_for({"dc1": 3})
    tracker = ResponseTracker(CL.ANY, {"dc1": 3}, replicas, local_dc="dc1", for_write=True)
    for replica in replicas:
        tracker.on_failure(replica)
    assert not tracker.is_failed and not tracker.is_satisfied
    tracker.on_hint_stored()
    assert tracker.is_satisfied and tracker.received == 1
    with pytest.raises(InvalidRequest):
        ResponseTracker(CL.ANY, {"dc1": 3}, replicas, local_dc="dc1", for_write=False)


_LEVELS = [level for level in CL if level is not CL.ANY]


@settings(max_examples=150, deadline=None)
@given(
    level=st.sampled_from(_LEVELS),
    factors=st.dictionaries(
        st.sampled_from(["dc1", "dc2", "dc3"]), st.integers(1, 4), min_size=1, max_size=3
    ),
    dead_mask=st.integers(0, 2**12 - 1),
    for_write=st.booleans(),
)
def test_live_check_agrees_with_the_tracker(
    level: ConsistencyLevel, factors: dict[str, int], dead_mask: int, for_write: bool
) -> None:
    """Unavailable iff even every live replica answering cannot satisfy the tracker."""
    if for_write and level in (CL.SERIAL, CL.LOCAL_SERIAL):
        return
    local_dc = sorted(factors)[0]
    replicas = hosts_for(factors)
    dead = {h for i, h in enumerate(replicas) if dead_mask >> i & 1}
    try:
        assure_sufficient_live_replicas(
            level,
            factors,
            replicas,
            lambda h: h not in dead,
            local_dc=local_dc,
            for_write=for_write,
        )
        available = True
    except Unavailable:
        available = False
    tracker = ResponseTracker(level, factors, replicas, local_dc=local_dc, for_write=for_write)
    for replica in replicas:
        if replica in dead:
            tracker.on_failure(replica)
        else:
            tracker.on_response(replica)
        tracker.validate()
    assert tracker.is_satisfied == available
    assert tracker.is_failed == (not available)
