"""The read path's core (cassandra-core.md §5.2, §7.2; seed 003 "Tunable Consistency").

Proves: ONE and LOCAL_ONE read a single (local) replica and never compare or repair; QUORUM
sends one data and blockFor-1 digest requests and answers on matching digests only once the
data is in; a stale replica causes a digest mismatch, full data reads, a reconciled answer and
a repair that the answer waits for; ``read_repair = NONE`` reconciles without writing back;
LOCAL_QUORUM contacts only the local DC and EACH_QUORUM a quorum of each DC; the proximity
order picks the data replica; Unavailable before sending and ANY refused; timeouts and failures
carry the phase's figures. Model-based property: with an in-memory replica store, a read at a
level overlapping the write level (R + W > RF) sees the latest successful write, whatever the
liveness and the order of answers, and ``validate()`` holds after every step.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cluster import ConsistencyLevel, ReadTimeout, Unavailable
from ringflow.cluster._digest import partition_digest
from ringflow.cluster._read_path import (
    ReadAction,
    ReadFailure,
    ReadHandler,
    ReadKind,
    ReadState,
    Respond,
    SendRead,
)
from ringflow.cluster._read_repair import ReadRepairMode, SendRepair
from ringflow.cluster._write_path import (
    Complete,
    SendMutation,
    TokenReplicas,
    WriteHandler,
    WriteUnit,
)
from ringflow.errors import ErrorCode, InvalidRequest
from ringflow.ring import Host, NetworkTopologyStrategy, ReplicationFactor, SimpleStrategy
from ringflow.schema import Cell, Mutation, Row, merge_mutations

CL = ConsistencyLevel
_NAMESPACE = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
TWO_DCS = {"dc1": 3, "dc2": 3}


def host(dc: str, index: int) -> Host:
    endpoint = f"10.{int(dc[2:])}.0.{index}"
    return Host(uuid.uuid5(_NAMESPACE, endpoint), endpoint, dc, f"r{index % 3}")


def hosts_for(factors: dict[str, int]) -> list[Host]:
    return [host(dc, i) for dc, rf in factors.items() for i in range(1, rf + 1)]


def version(timestamp_us: int, value: bytes, column: str = "v") -> Mutation:
    cells = {column: Cell.live(timestamp_us, value)}
    return Mutation("ks", "t", (b"k",), rows=(Row((b"c",), cells=cells),))


OLD = version(10, b"old")
NEW = version(20, b"new")


def simple_plan(rf: int, local_dc: str = "dc1") -> TokenReplicas:
    replicas = tuple(hosts_for({"dc1": rf}))
    return TokenReplicas(0, replicas, SimpleStrategy(ReplicationFactor(rf)), local_dc)


def nts_plan(local_dc: str = "dc1") -> TokenReplicas:
    replicas = tuple(hosts_for(TWO_DCS))
    return TokenReplicas(0, replicas, NetworkTopologyStrategy.of(TWO_DCS), local_dc)


def reader(
    replicas: TokenReplicas,
    level: ConsistencyLevel,
    live: Sequence[Host] | None = None,
    *,
    proximity: Sequence[Host] | None = None,
    read_repair: ReadRepairMode = ReadRepairMode.BLOCKING,
) -> ReadHandler[Mutation | None]:
    alive = set(replicas.natural if live is None else live)
    return ReadHandler(
        7,
        replicas,
        level,
        lambda h: h in alive,
        lambda partition: partition,
        proximity=proximity,
        read_repair=read_repair,
    )


def reads(actions: Sequence[ReadAction[Mutation | None]]) -> list[tuple[Host, ReadKind]]:
    return [(a.replica, a.kind) for a in actions if isinstance(a, SendRead)]


def repairs(actions: Sequence[ReadAction[Mutation | None]]) -> dict[Host, Mutation]:
    return {a.replica: a.mutation for a in actions if isinstance(a, SendRepair)}


def responds(actions: Sequence[ReadAction[Mutation | None]]) -> list[Respond[Mutation | None]]:
    return [a for a in actions if isinstance(a, Respond)]


# -- one replica ---------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [CL.ONE, CL.LOCAL_ONE])
def test_one_reads_a_single_local_replica_and_never_repairs(level: ConsistencyLevel) -> None:
    replicas = nts_plan(local_dc="dc2")
    read = reader(replicas, level)
    [(target, kind)] = reads(read.start())
    assert (target.dc, kind) == ("dc2", ReadKind.DATA)
    [answer] = responds(read.on_data(target, OLD))  # stale, but nothing to compare it with
    assert answer.success and answer.result == OLD
    assert read.repair is None and read.state is ReadState.DONE
    read.validate()


# -- digests -------------------------------------------------------------------------------------


def test_quorum_answers_when_the_digest_matches_and_the_data_is_in() -> None:
    replicas = simple_plan(3)
    read = reader(replicas, CL.QUORUM)
    first, second = replicas.natural[:2]
    assert reads(read.start()) == [(first, ReadKind.DATA), (second, ReadKind.DIGEST)]
    assert read.on_digest(second, partition_digest(NEW)) == []  # no data yet
    [answer] = responds(read.on_data(first, NEW))
    assert answer.success and answer.result == NEW and answer.request_id == 7
    read.validate()


def test_a_stale_replica_is_repaired_before_the_answer() -> None:
    replicas = simple_plan(3)
    read = reader(replicas, CL.QUORUM)
    first, second = replicas.natural[:2]
    read.start()
    assert read.on_data(first, NEW) == []
    actions = read.on_digest(second, partition_digest(OLD))
    assert reads(actions) == [(second, ReadKind.DATA)] and read.state is ReadState.DATA
    actions = read.on_data(second, OLD)
    assert repairs(actions) == {second: NEW} and not responds(actions)
    assert read.state is ReadState.REPAIRING and read.repair is not None
    assert read.repair.block_for == 1
    read.validate()
    assert read.on_repair_ack(first) == []  # was not repaired: no ack expected
    [answer] = responds(read.on_repair_ack(second))
    assert answer.success and answer.result == NEW
    read.validate()


def test_the_answer_is_the_reconciliation_of_both_versions() -> None:
    replicas = simple_plan(3)
    read = reader(replicas, CL.QUORUM)
    first, second = replicas.natural[:2]
    mine, theirs = version(30, b"a", "x"), version(20, b"b", "y")
    read.start()
    read.on_data(first, mine)
    read.on_digest(second, partition_digest(theirs))
    actions = read.on_data(second, theirs)
    merged = merge_mutations(mine, theirs)
    fixes = repairs(actions)
    assert set(fixes) == {first, second}
    assert merge_mutations(mine, fixes[first]) == merged
    assert merge_mutations(theirs, fixes[second]) == merged
    assert read.repair is not None and read.repair.block_for == 2
    assert not responds(read.on_repair_ack(first))
    [answer] = responds(read.on_repair_ack(second))
    assert answer.result == merged


def test_read_repair_none_reconciles_without_writing_back() -> None:
    replicas = simple_plan(3)
    read = reader(replicas, CL.QUORUM, read_repair=ReadRepairMode.NONE)
    first, second = replicas.natural[:2]
    read.start()
    read.on_data(first, OLD)
    read.on_digest(second, partition_digest(NEW))
    actions = read.on_data(second, NEW)
    assert repairs(actions) == {}
    [answer] = responds(actions)
    assert answer.result == NEW


def test_a_missing_partition_is_repaired_from_the_other_replica() -> None:
    replicas = simple_plan(3)
    read = reader(replicas, CL.QUORUM)
    first, second = replicas.natural[:2]
    read.start()
    read.on_data(first, None)
    read.on_digest(second, partition_digest(NEW))
    assert repairs(read.on_data(second, NEW)) == {first: NEW}


def test_monotonic_quorum_reads_after_a_write_that_reached_one_replica() -> None:
    """A failed write seen by one quorum read is repaired onto that quorum before the answer,
    so the next quorum read, through the other two replicas, still sees it (dtest
    ``test_monotonic_reads``)."""
    replicas = simple_plan(3)
    first, second, third = replicas.natural
    store: dict[Host, Mutation | None] = {first: NEW, second: OLD, third: OLD}
    read = reader(replicas, CL.QUORUM, proximity=[first, second])
    read.start()
    read.on_data(first, store[first])
    read.on_digest(second, partition_digest(store[second]))
    actions = read.on_data(second, store[second])
    assert not responds(actions)
    for replica, mutation in repairs(actions).items():
        held = store[replica]
        store[replica] = mutation if held is None else merge_mutations(held, mutation)
        actions = read.on_repair_ack(replica)
    [answer] = responds(actions)
    assert answer.result == NEW
    again = reader(replicas, CL.QUORUM, proximity=[third, second])
    again.start()
    again.on_data(third, store[third])
    again.on_digest(second, partition_digest(store[second]))
    actions = again.on_data(second, store[second])
    for replica in repairs(actions):
        actions = again.on_repair_ack(replica)
    [answer] = responds(actions)
    assert answer.result == NEW


# -- contacts ------------------------------------------------------------------------------------


def test_local_quorum_contacts_only_the_local_dc() -> None:
    replicas = nts_plan(local_dc="dc2")
    actions = reader(replicas, CL.LOCAL_QUORUM).start()
    assert [(h.dc, kind) for h, kind in reads(actions)] == [
        ("dc2", ReadKind.DATA),
        ("dc2", ReadKind.DIGEST),
    ]


def test_each_quorum_contacts_a_quorum_of_each_dc() -> None:
    replicas = nts_plan()
    read = reader(replicas, CL.EACH_QUORUM)
    targets = reads(read.start())
    assert [h.dc for h, _ in targets] == ["dc1", "dc1", "dc2", "dc2"]
    assert [kind for _, kind in targets] == [ReadKind.DATA] + [ReadKind.DIGEST] * 3
    assert read.block_for == 4


def test_the_proximity_order_picks_the_data_replica() -> None:
    replicas = simple_plan(3)
    closest = replicas.natural[2]
    targets = reads(reader(replicas, CL.QUORUM, proximity=[closest]).start())
    assert targets[0] == (closest, ReadKind.DATA)


def test_dead_replicas_are_not_contacted() -> None:
    replicas = simple_plan(3)
    live = replicas.natural[1:]
    targets = reads(reader(replicas, CL.QUORUM, live).start())
    assert [h for h, _ in targets] == list(live)


def test_unavailable_before_sending_and_any_is_refused() -> None:
    replicas = simple_plan(3)
    with pytest.raises(Unavailable) as raised:
        reader(replicas, CL.QUORUM, replicas.natural[:1])
    assert (raised.value.required, raised.value.alive) == (2, 1)
    with pytest.raises(InvalidRequest):
        reader(replicas, CL.ANY)


# -- timeouts and failures -------------------------------------------------------------------


def test_timeout_with_only_a_digest_reports_no_data() -> None:
    replicas = simple_plan(3)
    read = reader(replicas, CL.QUORUM)
    read.start()
    read.on_digest(replicas.natural[1], partition_digest(NEW))
    [answer] = responds(read.on_timeout())
    assert isinstance(answer.error, ReadTimeout) and answer.result is None
    error = answer.error
    assert (error.received, error.block_for, error.data_present) == (1, 2, False)
    assert error.code == ErrorCode.READ_TIMEOUT
    assert read.on_timeout() == [] and read.on_data(replicas.natural[0], NEW) == []
    read.validate()


def test_timeout_while_repairing_reports_the_repair_figures() -> None:
    replicas = simple_plan(3)
    read = reader(replicas, CL.QUORUM)
    first, second = replicas.natural[:2]
    read.start()
    read.on_data(first, NEW)
    read.on_digest(second, partition_digest(OLD))
    read.on_data(second, OLD)
    assert read.on_repair_failure(second) == []
    [answer] = responds(read.on_timeout())
    assert isinstance(answer.error, ReadTimeout)
    assert (answer.error.received, answer.error.block_for, answer.error.data_present) == (
        0,
        1,
        True,
    )


def test_failures_that_put_the_level_out_of_reach_fail_the_read() -> None:
    replicas = simple_plan(3)
    read = reader(replicas, CL.QUORUM)
    read.start()
    [answer] = responds(read.on_failure(replicas.natural[1]))
    assert isinstance(answer.error, ReadFailure)
    assert (answer.error.failure_count, answer.error.data_present) == (1, False)
    assert answer.error.code == ErrorCode.READ_FAILURE


def test_unexpected_answers_are_ignored_and_bad_ones_refused() -> None:
    replicas = simple_plan(3)
    read = reader(replicas, CL.QUORUM)
    read.start()
    first, second, third = replicas.natural
    assert read.on_data(second, NEW) == []  # asked for a digest
    assert read.on_digest(third, partition_digest(NEW)) == []  # not contacted
    assert read.on_digest(first, partition_digest(NEW)) == []  # the data replica
    with pytest.raises(InvalidRequest):
        read.on_digest(second, b"short")
    read.validate()


# -- model: a read that overlaps a successful write sees it ------------------------------------


_BLOCK_FOR: dict[CL, Callable[[int], int]] = {
    CL.ONE: lambda rf: 1,
    CL.TWO: lambda rf: 2,
    CL.THREE: lambda rf: 3,
    CL.QUORUM: lambda rf: rf // 2 + 1,
    CL.ALL: lambda rf: rf,
}


Store = dict[Host, Mutation | None]
_DELIVERIES = [(1, 1), (1, 1), (1, 0), (0, 0)]
"""(applied, acknowledged): mostly both; sometimes the ack is lost, or the write too."""


def _apply(store: Store, replica: Host, mutation: Mutation) -> None:
    held = store[replica]
    store[replica] = mutation if held is None else merge_mutations(held, mutation)


def _live(data: st.DataObject, replicas: TokenReplicas, level: CL, what: str) -> set[Host]:
    """Mostly enough live replicas for ``level``, sometimes one too few (Unavailable)."""
    rf = len(replicas.natural)
    dead_max = min(rf, rf - _BLOCK_FOR[level](rf) + data.draw(st.integers(0, 1)))
    dead_count = data.draw(st.integers(0, dead_max), label=f"{what} dead")
    dead = data.draw(st.permutations(replicas.natural), label=f"{what} order")[:dead_count]
    return set(replicas.natural) - set(dead)


def _write(data: st.DataObject, store: Store, replicas: TokenReplicas, level: CL, ts: int) -> bool:
    """One write; returns whether the client was told it succeeded."""
    live = _live(data, replicas, level, "write")
    try:
        write = WriteHandler(
            ts, WriteUnit.of([version(ts, b"%d" % ts)]), replicas, level, live.__contains__
        )
    except Unavailable:
        return False
    outcome: list[Complete] = []
    for action in write.start():
        if isinstance(action, SendMutation):
            applied, acked = data.draw(st.sampled_from(_DELIVERIES), label="delivery")
            if applied:
                _apply(store, action.replica, action.unit.mutations[0])
            if acked:
                outcome += [a for a in write.on_ack(action.replica) if isinstance(a, Complete)]
            write.validate()
    outcome += [a for a in write.on_timeout() if isinstance(a, Complete)]
    return outcome[0].success


def _read(data: st.DataObject, store: Store, replicas: TokenReplicas, level: CL) -> Mutation | None:
    live = _live(data, replicas, level, "read")
    proximity = data.draw(st.permutations(sorted(live, key=str)), label="proximity")
    try:
        read = reader(replicas, level, proximity, proximity=proximity)
    except Unavailable:
        return None
    pending: list[ReadAction[Mutation | None]] = list(read.start())
    while read.answer is None:
        if not pending:
            read.on_timeout()
            break
        action = pending.pop(data.draw(st.integers(0, len(pending) - 1), label="next answer"))
        if isinstance(action, SendRead) and action.kind is ReadKind.DATA:
            pending += read.on_data(action.replica, store[action.replica])
        elif isinstance(action, SendRead):
            pending += read.on_digest(action.replica, partition_digest(store[action.replica]))
        elif isinstance(action, SendRepair):
            _apply(store, action.replica, action.mutation)
            pending += read.on_repair_ack(action.replica)
        read.validate()
    answer = read.answer
    assert answer is not None and answer.success
    return answer.result


def _timestamp(partition: Mutation | None) -> int:
    assert partition is not None
    cell = partition.rows[0].cells["v"]
    assert isinstance(cell, Cell)
    return cell.timestamp_us


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(
        [
            (3, CL.QUORUM, CL.QUORUM),
            (3, CL.ONE, CL.ALL),
            (3, CL.ALL, CL.ONE),
            (3, CL.TWO, CL.TWO),
            (5, CL.QUORUM, CL.QUORUM),
            (5, CL.THREE, CL.THREE),
        ]
    ),
    st.data(),
)
def test_a_read_overlapping_a_successful_write_sees_it(
    case: tuple[int, CL, CL], data: st.DataObject
) -> None:
    rf, write_level, read_level = case
    replicas = simple_plan(rf)
    store: Store = dict.fromkeys(replicas.natural)
    latest_success = 0
    for step in range(1, data.draw(st.integers(1, 4), label="writes") + 1):
        if _write(data, store, replicas, write_level, 10 * step):
            latest_success = 10 * step
        seen = _read(data, store, replicas, read_level)
        if seen is not None and latest_success:
            # Never older than the last acknowledged write (a failed later write may show).
            assert _timestamp(seen) >= latest_success
            again = _read(data, store, replicas, read_level)
            if again is not None and 2 * _BLOCK_FOR[read_level](rf) > rf:
                # Monotonic quorum reads: blocking repair wrote ``seen`` to a read quorum.
                assert _timestamp(again) >= _timestamp(seen)
