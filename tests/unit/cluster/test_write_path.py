"""The write path's core (cassandra-core.md §5.2, §7.1; seed 003; seed 000 base + log together).

Proves, scenario by scenario in the style of Cassandra's ``WriteResponseHandlerTest`` and
``AssureSufficientLiveNodesTest``: RF 3 QUORUM with 1/2/3 live (Unavailable before anything is
sent, writes to every live replica whatever the level); LOCAL_QUORUM vs EACH_QUORUM across two
DCs; pending replicas raise blockFor; CL ANY with every replica down is hinted and acknowledged by
the stored hint; failed and timed-out replicas are hinted, even after success, never twice, never
for counters or transient replicas; the hint window (through ``HintManager.should_hint``); the
timeout and failure errors carry the level's figures; one unit (base + CDC capture) per replica;
invalid transitions raise with the story. Property: for random liveness and random answer
orders, the outcome agrees with the blockFor arithmetic counted independently per DC, and
``validate()`` holds after every step.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cdc import CdcCapture
from ringflow.cluster import ConsistencyLevel, Unavailable, WriteTimeout, WriteType
from ringflow.cluster._hints import MAX_HINT_WINDOW_MS, HintManager
from ringflow.cluster._write_path import (
    Complete,
    InvalidTransition,
    SendMutation,
    StoreHint,
    TokenReplicas,
    WriteAction,
    WriteFailure,
    WriteHandler,
    WriteState,
    WriteUnit,
)
from ringflow.errors import ErrorCode, InvalidRequest
from ringflow.ring import (
    Host,
    NetworkTopologyStrategy,
    ReplicationFactor,
    ReplicationStrategy,
    SimpleStrategy,
)
from ringflow.schema import Cell, Mutation, Row

CL = ConsistencyLevel
_NAMESPACE = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
BASE = Mutation("ks", "t", (b"k",), rows=(Row((b"c",), cells={"v": Cell.live(10, b"x")}),))
UNIT = WriteUnit.of([BASE], {0: CdcCapture(bytes(range(16)), 7)})


def host(dc: str, index: int) -> Host:
    endpoint = f"10.{int(dc[2:])}.0.{index}"
    return Host(uuid.uuid5(_NAMESPACE, endpoint), endpoint, dc, f"r{index % 3}")


def hosts_for(factors: dict[str, int]) -> list[Host]:
    return [host(dc, i) for dc, rf in factors.items() for i in range(1, rf + 1)]


def simple(rf: int) -> SimpleStrategy:
    return SimpleStrategy(ReplicationFactor(rf))


def plan(
    strategy: ReplicationStrategy,
    natural: Sequence[Host],
    local_dc: str = "dc1",
    pending: Sequence[Host] = (),
    transient: frozenset[Host] = frozenset(),
) -> TokenReplicas:
    return TokenReplicas(0, tuple(natural), strategy, local_dc, tuple(pending), transient)


def handler(
    replicas: TokenReplicas,
    level: ConsistencyLevel,
    live: Sequence[Host],
    **kwargs: object,
) -> WriteHandler:
    alive = set(live)
    return WriteHandler(1, UNIT, replicas, level, lambda h: h in alive, **kwargs)  # type: ignore[arg-type]


def sends(actions: Sequence[WriteAction]) -> list[Host]:
    return [a.replica for a in actions if isinstance(a, SendMutation)]


def hints(actions: Sequence[WriteAction]) -> list[Host]:
    return [a.target for a in actions if isinstance(a, StoreHint)]


def answers(actions: Sequence[WriteAction]) -> list[Complete]:
    return [a for a in actions if isinstance(a, Complete)]


# -- RF 3 QUORUM with 1, 2, 3 live -------------------------------------------------------------


@pytest.mark.parametrize(
    ("live_count", "sent", "hinted"),
    [(2, 2, 1), (3, 3, 0)],
)
def test_rf3_quorum_sends_to_every_live_replica(live_count: int, sent: int, hinted: int) -> None:
    replicas = hosts_for({"dc1": 3})
    write = handler(plan(simple(3), replicas), CL.QUORUM, replicas[:live_count])
    actions = write.start()
    write.validate()
    assert sends(actions) == replicas[:live_count]
    assert hints(actions) == replicas[live_count:]
    assert (len(sends(actions)), len(hints(actions))) == (sent, hinted)
    assert write.block_for == 2
    assert not answers(write.on_ack(replicas[0]))
    [done] = answers(write.on_ack(replicas[1]))
    assert done.success and done.request_id == 1
    write.validate()


def test_rf3_quorum_with_one_live_is_unavailable_before_sending() -> None:
    replicas = hosts_for({"dc1": 3})
    with pytest.raises(Unavailable) as raised:
        handler(plan(simple(3), replicas), CL.QUORUM, replicas[:1])
    assert (raised.value.required, raised.value.alive, raised.value.code) == (
        2,
        1,
        ErrorCode.UNAVAILABLE,
    )


def test_every_level_sends_to_every_live_replica() -> None:
    replicas = hosts_for({"dc1": 3})
    for level in (CL.ONE, CL.TWO, CL.QUORUM, CL.ALL, CL.ANY, CL.LOCAL_ONE):
        actions = handler(plan(simple(3), replicas), level, replicas).start()
        assert sends(actions) == replicas, level


# -- two DCs -------------------------------------------------------------------------------


TWO_DCS = {"dc1": 3, "dc2": 3}


def test_local_quorum_counts_only_local_acks() -> None:
    replicas = hosts_for(TWO_DCS)
    local, remote = replicas[:3], replicas[3:]
    write = handler(plan(NetworkTopologyStrategy.of(TWO_DCS), replicas), CL.LOCAL_QUORUM, replicas)
    assert sends(write.start()) == replicas
    assert write.block_for == 2
    for host_ in remote:
        assert not answers(write.on_ack(host_))
    assert not answers(write.on_ack(local[0]))
    [done] = answers(write.on_ack(local[2]))
    assert done.success
    write.validate()


def test_each_quorum_needs_a_quorum_in_every_dc() -> None:
    replicas = hosts_for(TWO_DCS)
    local, remote = replicas[:3], replicas[3:]
    write = handler(plan(NetworkTopologyStrategy.of(TWO_DCS), replicas), CL.EACH_QUORUM, replicas)
    write.start()
    assert write.block_for == 4
    for host_ in local:
        assert not answers(write.on_ack(host_))
    assert not answers(write.on_ack(remote[0]))
    [done] = answers(write.on_ack(remote[1]))
    assert done.success


@pytest.mark.parametrize(
    ("level", "remote_live", "outcome"),
    [
        (CL.LOCAL_QUORUM, 0, "sent"),
        (CL.EACH_QUORUM, 0, "unavailable in dc2"),
        (CL.EACH_QUORUM, 1, "unavailable in dc2"),
        (CL.EACH_QUORUM, 2, "sent"),
        (CL.QUORUM, 0, "unavailable"),
        (CL.QUORUM, 1, "sent"),
    ],
)
def test_remote_dc_down(level: ConsistencyLevel, remote_live: int, outcome: str) -> None:
    replicas = hosts_for(TWO_DCS)
    live = replicas[:3] + replicas[3 : 3 + remote_live]
    replica_plan = plan(NetworkTopologyStrategy.of(TWO_DCS), replicas)
    if outcome.startswith("unavailable"):
        with pytest.raises(Unavailable) as raised:
            handler(replica_plan, level, live)
        expected_dc = "dc2" if outcome.endswith("dc2") else None
        assert raised.value.datacenter == expected_dc
    else:
        write = handler(replica_plan, level, live)
        actions = write.start()
        assert sends(actions) == live
        assert hints(actions) == [h for h in replicas if h not in live]


def test_pending_replicas_raise_block_for_and_receive_the_write() -> None:
    replicas = hosts_for({"dc1": 3})
    joining = host("dc1", 9)
    write = handler(plan(simple(3), replicas, pending=[joining]), CL.QUORUM, [*replicas, joining])
    assert write.block_for == 3
    assert sends(write.start()) == [*replicas, joining]
    assert not answers(write.on_ack(replicas[0]))
    assert not answers(write.on_ack(replicas[1]))
    [done] = answers(write.on_ack(joining))
    assert done.success


def test_pending_replica_down_can_make_the_write_unavailable() -> None:
    replicas = hosts_for({"dc1": 3})
    joining = host("dc1", 9)
    with pytest.raises(Unavailable) as raised:
        handler(plan(simple(3), replicas, pending=[joining]), CL.QUORUM, replicas[:2])
    assert (raised.value.required, raised.value.alive) == (3, 2)


# -- ANY and hints -----------------------------------------------------------------------------


def test_any_with_every_replica_down_is_hinted_and_the_hint_is_the_ack() -> None:
    replicas = hosts_for({"dc1": 3})
    write = handler(plan(simple(3), replicas), CL.ANY, [])
    actions = write.start()
    assert sends(actions) == [] and hints(actions) == replicas
    assert all(isinstance(a, StoreHint) and a.unit is UNIT for a in actions)
    assert not answers(actions)
    [done] = answers(write.on_hint_stored(replicas[1]))
    assert done.success
    assert write.on_hint_stored(replicas[0]) == []
    write.validate()
    assert write.state is WriteState.FINISHED  # nothing was sent: nothing left to wait for
    assert write.on_timeout() == []


def test_any_without_a_hintable_replica_times_out() -> None:
    replicas = hosts_for({"dc1": 3})
    write = handler(plan(simple(3), replicas), CL.ANY, [], should_hint=lambda h: False)
    assert write.start() == []
    [done] = answers(write.on_timeout())
    assert isinstance(done.error, WriteTimeout)
    assert (done.error.received, done.error.block_for) == (0, 1)


def test_a_stored_hint_is_no_ack_below_any() -> None:
    replicas = hosts_for({"dc1": 3})
    write = handler(plan(simple(3), replicas), CL.ONE, replicas[:1])
    write.start()
    assert write.on_hint_stored(replicas[1]) == []
    with pytest.raises(InvalidRequest):
        write.on_hint_stored(replicas[0])  # never asked to hint a live replica


def test_a_timed_out_replica_gets_a_hint_after_the_client_has_its_answer() -> None:
    replicas = hosts_for({"dc1": 3})
    write = handler(plan(simple(3), replicas), CL.QUORUM, replicas)
    write.start()
    write.on_ack(replicas[0])
    [done] = answers(write.on_ack(replicas[2]))
    assert done.success and write.state is WriteState.ANSWERED
    actions = write.on_timeout()
    assert hints(actions) == [replicas[1]] and not answers(actions)
    assert write.state is WriteState.FINISHED
    assert write.on_ack(replicas[1]) == []  # too late: already hinted
    write.validate()


def test_a_write_settles_without_hints_when_every_replica_acks() -> None:
    replicas = hosts_for({"dc1": 3})
    write = handler(plan(simple(3), replicas), CL.ONE, replicas)
    write.start()
    assert answers(write.on_ack(replicas[0]))[0].success
    write.on_ack(replicas[1])
    assert write.state is WriteState.ANSWERED
    assert write.on_ack(replicas[2]) == []
    assert write.state is WriteState.FINISHED and write.hinted == frozenset()


def test_timeout_error_carries_the_level_figures() -> None:
    replicas = hosts_for({"dc1": 3})
    write = handler(plan(simple(3), replicas), CL.QUORUM, replicas, write_type=WriteType.BATCH)
    write.start()
    write.on_ack(replicas[0])
    actions = write.on_timeout()
    [done] = answers(actions)
    assert isinstance(done.error, WriteTimeout) and not done.success
    error = done.error
    assert (error.consistency, error.received, error.block_for, error.write_type) == (
        CL.QUORUM,
        1,
        2,
        WriteType.BATCH,
    )
    assert error.code == ErrorCode.WRITE_TIMEOUT
    assert hints(actions) == replicas[1:]


def test_failures_that_put_the_level_out_of_reach_fail_the_write_and_are_hinted() -> None:
    replicas = hosts_for({"dc1": 3})
    write = handler(plan(simple(3), replicas), CL.ALL, replicas)
    write.start()
    write.on_ack(replicas[0])
    actions = write.on_failure(replicas[1])
    assert hints(actions) == [replicas[1]]
    [done] = answers(actions)
    assert isinstance(done.error, WriteFailure)
    assert (done.error.received, done.error.block_for, done.error.failure_count) == (1, 3, 1)
    assert done.error.code == ErrorCode.WRITE_FAILURE
    assert hints(write.on_timeout()) == [replicas[2]]
    write.validate()


def test_counter_writes_are_not_hinted_after_failure_or_timeout() -> None:
    replicas = hosts_for({"dc1": 3})
    write = handler(plan(simple(3), replicas), CL.ONE, replicas, write_type=WriteType.COUNTER)
    write.start()
    assert hints(write.on_failure(replicas[0])) == []
    assert hints(write.on_timeout()) == []


def test_transient_replicas_are_never_hinted() -> None:
    replicas = hosts_for({"dc1": 3})
    replica_plan = plan(
        SimpleStrategy(ReplicationFactor(3, 1)), replicas, transient=frozenset(replicas[2:])
    )
    write = handler(replica_plan, CL.ONE, replicas[:1])
    assert hints(write.start()) == [replicas[1]]


@pytest.mark.parametrize(
    ("down_for_ms", "hinted"), [(MAX_HINT_WINDOW_MS, True), (MAX_HINT_WINDOW_MS + 1, False)]
)
def test_no_hint_for_a_replica_down_longer_than_the_window(down_for_ms: int, hinted: bool) -> None:
    replicas = hosts_for({"dc1": 3})
    manager = HintManager()
    manager.on_node_down(replicas[2].host_id, 1_000)
    now_ms = 1_000 + down_for_ms
    write = handler(
        plan(simple(3), replicas),
        CL.ONE,
        replicas[:2],
        should_hint=lambda h: manager.should_hint(h, now_ms),
    )
    assert hints(write.start()) == ([replicas[2]] if hinted else [])


# -- the unit, validation, transitions ----------------------------------------------------------


def test_each_replica_receives_base_and_cdc_capture_in_one_message() -> None:
    replicas = hosts_for({"dc1": 3})
    actions = handler(plan(simple(3), replicas), CL.ONE, replicas).start()
    messages = [a for a in actions if isinstance(a, SendMutation)]
    assert len(messages) == 3
    for message in messages:
        assert message.unit.mutations == (BASE,)
        assert message.unit.captures == {0: CdcCapture(bytes(range(16)), 7)}
        assert message.verb.name == "MUTATION_REQ"


def test_write_unit_and_replica_plan_validation() -> None:
    with pytest.raises(InvalidRequest):
        WriteUnit(())
    with pytest.raises(InvalidRequest):
        WriteUnit.of([BASE], {1: CdcCapture(bytes(16), 0)})
    replicas = hosts_for({"dc1": 3})
    with pytest.raises(InvalidRequest):
        plan(simple(3), replicas, pending=replicas[:1])
    with pytest.raises(InvalidRequest):
        plan(simple(3), [])
    with pytest.raises(InvalidRequest):
        WriteHandler(-1, UNIT, plan(simple(3), replicas), CL.ONE, lambda h: True)


def test_invalid_transitions_raise_with_the_story() -> None:
    replicas = hosts_for({"dc1": 3})
    write = handler(plan(simple(3), replicas), CL.ONE, replicas)
    with pytest.raises(InvalidTransition):
        write.on_ack(replicas[0])
    write.start()
    with pytest.raises(InvalidTransition) as raised:
        write.start()
    assert raised.value.story and "start" in raised.value.story[-1]
    assert write.on_ack(host("dc1", 8)) == []  # a stranger's ack is ignored
    assert "ignored" in write.story()[-1]


# -- property: the outcome agrees with the blockFor arithmetic ----------------------------------


def _required_by_group(
    level: ConsistencyLevel, factors: dict[str, int], pending: Sequence[Host]
) -> dict[str, int]:
    """The per-group counts, computed from the §5.1 table independently of the tracker."""
    total = sum(factors.values())
    if level is CL.EACH_QUORUM:
        return {
            dc: rf // 2 + 1 + sum(1 for h in pending if h.dc == dc) for dc, rf in factors.items()
        }
    if level in (CL.LOCAL_QUORUM, CL.LOCAL_ONE):
        base = 1 if level is CL.LOCAL_ONE else factors["dc1"] // 2 + 1
        return {"dc1": base + sum(1 for h in pending if h.dc == "dc1")}
    base = {CL.ONE: 1, CL.TWO: 2, CL.THREE: 3, CL.QUORUM: total // 2 + 1, CL.ALL: total}[level]
    return {"*": base + len(pending)}


def _met(required: dict[str, int], hosts_: set[Host]) -> bool:
    return all(
        sum(1 for h in hosts_ if group in ("*", h.dc)) >= need for group, need in required.items()
    )


@st.composite
def write_scenarios(draw: st.DrawFn) -> tuple[object, ...]:
    factors = draw(
        st.sampled_from([{"dc1": 3}, {"dc1": 5}, {"dc1": 3, "dc2": 3}, {"dc1": 2, "dc2": 1}])
    )
    level = draw(
        st.sampled_from(
            [CL.ONE, CL.TWO, CL.QUORUM, CL.ALL, CL.LOCAL_QUORUM, CL.EACH_QUORUM, CL.LOCAL_ONE]
        )
    )
    replicas = hosts_for(factors)
    pending = draw(st.sampled_from([[], [host("dc1", 9)]]))
    everyone = [*replicas, *pending]
    dead_max = draw(st.sampled_from([0, 1, 2, len(everyone)]))
    dead = draw(st.lists(st.sampled_from(everyone), unique=True, max_size=dead_max))
    live = [h for h in everyone if h not in dead]
    answered = draw(st.permutations(everyone))
    kinds = draw(
        st.lists(
            st.sampled_from(["ack", "ack", "fail", "silent"]),
            min_size=len(everyone),
            max_size=len(everyone),
        )
    )
    return factors, level, replicas, pending, live, list(zip(answered, kinds, strict=True))


@settings(max_examples=120, deadline=None)
@given(write_scenarios())
def test_outcome_agrees_with_block_for_arithmetic(scenario: tuple[object, ...]) -> None:
    factors, level, replicas, pending, live, events = scenario
    assert isinstance(factors, dict) and isinstance(level, CL)
    assert isinstance(replicas, list) and isinstance(pending, list) and isinstance(live, list)
    assert isinstance(events, list)
    required = _required_by_group(level, factors, pending)
    live_set = set(live)
    replica_plan = plan(NetworkTopologyStrategy.of(factors), replicas, pending=pending)
    # The live check uses the same counts, except that EACH_QUORUM checks bare DC quorums.
    check = {dc: rf // 2 + 1 for dc, rf in factors.items()} if level is CL.EACH_QUORUM else required
    if not _met(check, live_set):
        with pytest.raises(Unavailable):
            handler(replica_plan, level, live)
        return
    write = handler(replica_plan, level, live)
    actions = list(write.start())
    write.validate()
    acked: set[Host] = set()
    failed: set[Host] = set()
    for replica, kind in events:
        if replica not in live_set or kind == "silent":
            continue
        if kind == "ack":
            acked.add(replica)
            actions += write.on_ack(replica)
        else:
            failed.add(replica)
            actions += write.on_failure(replica)
        write.validate()
    actions += write.on_timeout()
    write.validate()
    [done] = answers(actions)
    members = {g: [h for h in [*replicas, *pending] if g in ("*", h.dc)] for g in required}
    unreachable = any(len(set(members[g]) - failed) < need for g, need in required.items())
    if _met(required, acked):
        assert done.success
    elif unreachable:
        assert isinstance(done.error, WriteFailure)
    else:
        assert isinstance(done.error, WriteTimeout)
        counted = sum(1 for h in acked if any(h in members[g] for g in required))
        assert done.error.received == counted
        assert done.error.block_for == sum(required.values())
    assert sends(actions) == [h for h in [*replicas, *pending] if h in live_set]
    assert set(hints(actions)) == {h for h in [*replicas, *pending] if h not in acked}
    assert len(hints(actions)) == len(set(hints(actions)))
    assert write.state is WriteState.FINISHED
