"""Who sends (seed 002 "Transmission of mutations", REPLICATION.md decisions 4, 5, 9): equal
copies are sent once by the active node, mismatches send the union (each digest once, by its
highest-ranked live holder), a key waits for every live ranked node to seal or pass it, a dead
node's range fails over, synch-delete marks matching copies done, out-of-sequence copies are sent
by every holder (identical ones once), and a node drops data only when every collecting
channel has it. Seed 002's
"Node 2 restarts" story is played through. Generated rounds check the rules against a
literal oracle, and that planning, sending and recording converges with each distinct live
digest of a key sent exactly once per channel."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.replication import (
    Channel,
    PlannedSend,
    ReplicationArgumentError,
    SealedSlice,
    SealWatermark,
    SentIndex,
    SentRecord,
    SliceKey,
    SliceSettings,
    droppable,
    may_drop,
    plan_sends,
    seal_due_ms,
)
from ringflow.ring import TokenRange

N1, N2, N3, N4 = (uuid.UUID(int=i) for i in (1, 2, 3, 4))
SETTINGS = SliceSettings(60, 2)  # window 120 s: a slice starting at s seals at s + 120 s
HUB = Channel("hub", "ks", "t", "ringflow://hub", priority=90, slice_settings=SETTINGS)
LAKE = Channel("lake", "ks", "t", "parquet:/lake", priority=10, slice_settings=SETTINGS)
R = TokenRange(0, 100)
REPLICAS = {R: (N2, N1, N3)}  # seed 002's failure story: node 1 is node 2's secondary


def key(start_s: int, *, oos: bool = False, token_range: TokenRange = R) -> SliceKey:
    return SliceKey("ks", "t", token_range.left, token_range.right, start_s * 1000, oos)


def digest(n: int) -> bytes:
    return bytes([n]) * 16


def copy(node: uuid.UUID, start_s: int, d: int = 0, *, oos: bool = False) -> SealedSlice:
    return SealedSlice(key(start_s, oos=oos), node, digest(d), 10 + d, start_s * 1000 + 120_000)


def marks(through_s: int, nodes: Sequence[uuid.UUID] = (N1, N2, N3)) -> list[SealWatermark]:
    return [SealWatermark(node, "ks", "t", through_s * 1000) for node in nodes]


def plan(
    sealed: Sequence[SealedSlice],
    *,
    live: Sequence[uuid.UUID] = (N1, N2, N3),
    watermarks: Sequence[SealWatermark] = (),
    sent: Sequence[SentRecord] = (),
    in_flight: Sequence[PlannedSend] = (),
    channels: Sequence[Channel] = (HUB,),
) -> list[tuple[str, int, uuid.UUID, int]]:
    """(channel, slice start s, node, digest byte) of each planned send."""
    result = plan_sends(
        channels,
        sealed,
        watermarks,
        sent,
        replicas_of=REPLICAS.__getitem__,
        live=live,
        in_flight=in_flight,
    )
    return [(s.channel, s.key.slice_start_ms // 1000, s.node, s.digest[0]) for s in result.sends]


def sent(node: uuid.UUID, start_s: int, d: int = 0, channel: str = "hub") -> SentRecord:
    return SentRecord(channel, key(start_s), node, digest(d), 1)


def test_equal_copies_are_sent_once_by_the_active_node_per_channel() -> None:
    sealed = [copy(n, 0) for n in (N1, N2, N3)]
    assert plan(sealed, channels=(HUB, LAKE)) == [("hub", 0, N2, 0), ("lake", 0, N2, 0)]


def test_mismatching_copies_send_the_union_each_digest_by_its_highest_live_holder() -> None:
    sealed = [copy(N2, 0, 1), copy(N1, 0, 2), copy(N3, 0, 1)]
    assert plan(sealed) == [("hub", 0, N1, 2), ("hub", 0, N2, 1)]
    sealed = [copy(N2, 0, 1), copy(N1, 0, 1), copy(N3, 0, 3)]
    assert plan(sealed) == [("hub", 0, N2, 1), ("hub", 0, N3, 3)]


def test_a_key_waits_for_every_live_ranked_node_to_seal_or_pass_it() -> None:
    sealed = [copy(N2, 0), copy(N1, 0)]
    result = plan_sends(
        [HUB], sealed, marks(100), [], replicas_of=REPLICAS.__getitem__, live=[N1, N2, N3]
    )
    assert result.sends == ()
    assert [(w.key, w.nodes) for w in result.waiting] == [(key(0), {N3})]
    assert seal_due_ms(key(0), SETTINGS) == 120_000
    assert plan(sealed, watermarks=marks(119)) == []  # N3 not past 0 + 120 s yet
    assert plan(sealed, watermarks=marks(120)) == [("hub", 0, N2, 0)]  # N3 holds no copy
    assert plan(sealed, live=(N1, N2)) == [("hub", 0, N2, 0)]  # a dead node is not waited for


def test_a_dead_active_node_fails_over_to_the_next_live_rank() -> None:
    sealed = [copy(n, 0) for n in (N1, N2, N3)]
    assert plan(sealed, live=(N1, N3)) == [("hub", 0, N1, 0)]
    assert plan(sealed, live=(N3,)) == [("hub", 0, N3, 0)]
    assert plan(sealed, live=()) == []


def test_an_unranked_holder_ranks_last_and_sends_a_copy_nobody_above_matches() -> None:
    sealed = [copy(N2, 0, 1), copy(N1, 0, 1), copy(N3, 0, 1), copy(N4, 0, 1)]
    live = (N1, N2, N3, N4)
    assert plan(sealed, live=live) == [("hub", 0, N2, 1)]
    sealed[-1] = copy(N4, 0, 4)
    assert plan(sealed, live=live) == [("hub", 0, N2, 1), ("hub", 0, N4, 4)]
    assert plan(sealed[-1:], live=(N4,)) == [("hub", 0, N4, 4)]  # the ranked ones are dead


def test_out_of_sequence_copies_are_sent_by_every_live_holder_without_waiting() -> None:
    sealed = [copy(N1, 0, 1, oos=True), copy(N2, 0, 2, oos=True), copy(N3, 0, 3, oos=True)]
    assert plan(sealed, live=(N1, N3)) == [("hub", 0, N1, 1), ("hub", 0, N3, 3)]
    assert plan(sealed[1:], live=(N3,)) == [("hub", 0, N3, 3)]  # nobody is waited for


def test_identical_out_of_sequence_copies_go_once() -> None:
    sealed = [copy(N1, 0, 1, oos=True), copy(N2, 0, 2, oos=True), copy(N3, 0, 2, oos=True)]
    assert plan(sealed) == [("hub", 0, N1, 1), ("hub", 0, N2, 2)]
    assert plan(sealed, live=(N1, N3)) == [("hub", 0, N1, 1), ("hub", 0, N3, 2)]
    done = [SentRecord("hub", key(0, oos=True), N2, digest(2), 5)]
    assert plan(sealed, sent=done) == [("hub", 0, N1, 1)]  # N3's equal copy: synch-delete


def test_a_copy_is_done_when_its_digest_or_its_node_was_sent() -> None:
    sealed = [copy(N2, 0, 1), copy(N1, 0, 1), copy(N3, 0, 3)]
    assert plan(sealed, sent=[sent(N1, 0, 1)]) == [("hub", 0, N3, 3)]
    assert plan(sealed, sent=[sent(N3, 0, 3)]) == [("hub", 0, N2, 1)]
    assert plan(sealed, sent=[sent(N2, 0, 1), sent(N3, 0, 3)]) == []
    assert plan(sealed, sent=[sent(N2, 0, 1, channel="lake")], channels=(HUB, LAKE)) == [
        ("hub", 0, N2, 1),
        ("hub", 0, N3, 3),
        ("lake", 0, N3, 3),
    ]


def test_a_transmission_in_flight_is_not_doubled() -> None:
    sealed = [copy(N2, 0), copy(N1, 0)]
    flying = PlannedSend.of("hub", copy(N1, 0))  # N1 sent it while N2 was away
    passed = marks(500)
    assert plan(sealed, watermarks=passed) == [("hub", 0, N2, 0)]
    assert plan(sealed, in_flight=[flying], watermarks=passed) == []
    other_channel = PlannedSend.of("lake", copy(N1, 0))
    assert plan(sealed, in_flight=[other_channel], watermarks=passed) == [("hub", 0, N2, 0)]


def test_channels_without_collection_plan_nothing_and_do_not_hold_data() -> None:
    off = LAKE.updated(collection_enabled=False)
    paused = LAKE.updated(transmission_enabled=False)
    sealed = [copy(N2, 0)]
    assert plan(sealed, channels=(HUB, off), live=(N2,)) == [("hub", 0, N2, 0)]
    assert plan(sealed, channels=(paused,), live=(N2,)) == [("lake", 0, N2, 0)]
    index = SentIndex.of([sent(N2, 0)])
    assert may_drop(sealed[0], [HUB, off], index)
    assert not may_drop(sealed[0], [HUB, paused], index)  # paused transmission keeps the data
    assert may_drop(sealed[0], [], index)  # nothing collects this table
    other = Channel("o", "ks", "other", "parquet:/o")
    assert may_drop(sealed[0], [other], SentIndex.of([]))


def test_node_2_fails_and_restarts_as_in_seed_002() -> None:
    """Seed 002 "Handling the Node Failure Case" with node 1 node 2's secondary: node 1 sends
    node 2's slices while it is away; node 2 restarts and its matching slices are done
    (synch-delete); the slice node 1 is still sending is not doubled; node 2 is active again
    for the next one, and for the unfinished one once node 1's transmission fails."""
    starts = range(0, 420, 60)
    sealed = [copy(node, s) for s in starts for node in (N1, N2, N3)]
    done: list[SentRecord] = [sent(N2, 0), sent(N2, 60)]
    everyone = (N1, N2, N3)
    watermarks = marks(540)
    # before: node 2 sends its primary slices; it dies while sending 120-180
    assert plan(sealed[:6], sent=done, watermarks=watermarks) == []
    # node 2 dead: node 1 becomes active and resends 120-180 from its own copy
    away = plan(sealed[:15], live=(N1, N3), sent=done, watermarks=watermarks)
    assert away == [("hub", 120, N1, 0), ("hub", 180, N1, 0), ("hub", 240, N1, 0)]
    done += [sent(N1, 120), sent(N1, 180), sent(N1, 240)]
    flying = PlannedSend.of("hub", copy(N1, 300))  # node 1 is sending 300-360
    # node 2 restarts: its 120-300 copies are done, 300-360 is not doubled, 360-420 is its own
    back = plan(sealed, live=everyone, sent=done, in_flight=[flying], watermarks=watermarks)
    assert back == [("hub", 360, N2, 0)]
    index = SentIndex.of(done)
    assert droppable(N2, sealed, [HUB], index) == tuple(key(s) for s in range(0, 300, 60))
    assert droppable(N1, sealed, [HUB], index) == tuple(key(s) for s in range(0, 300, 60))
    # node 1's 300-360 fails: the primary sends it
    assert plan(sealed, live=everyone, sent=done, watermarks=watermarks) == [
        ("hub", 300, N2, 0),
        ("hub", 360, N2, 0),
    ]


def test_bad_inputs_are_refused_with_the_value() -> None:
    with pytest.raises(ReplicationArgumentError, match="two different copies"):
        plan([copy(N1, 0, 1), copy(N1, 0, 2)])
    with pytest.raises(ReplicationArgumentError, match="host id"):
        plan([copy(N1, 0)], live=["n1"])  # type: ignore[list-item]
    with pytest.raises(ReplicationArgumentError, match="16 bytes"):
        SentRecord("hub", key(0), N1, b"short", 0)
    with pytest.raises(ReplicationArgumentError, match="sealed_through_ms"):
        SealWatermark(N1, "ks", "t", -1)
    with pytest.raises(ReplicationArgumentError, match="slice it differently"):
        plan([], channels=(HUB, LAKE.updated(slice_settings=SliceSettings(60, 3))))
    with pytest.raises(ReplicationArgumentError, match="SealedSlice"):
        plan([key(0)])  # type: ignore[list-item]


# --- generated rounds --------------------------------------------------------------------------

NODES = (N1, N2, N3, N4, uuid.UUID(int=5))
R2 = TokenRange(100, 200)


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, object]:
    """Two ranges with 1-3 replicas of five nodes, a few keys, copies with digests from a small
    pool (so matches happen), live nodes, watermarks, sent records and flights."""
    replicas = {r: tuple(draw(st.permutations(NODES))[: draw(st.integers(1, 3))]) for r in (R, R2)}
    keys = draw(
        st.lists(
            st.builds(key, st.sampled_from([0, 60, 120]), oos=st.booleans(), token_range=st.just(R))
            | st.builds(key, st.sampled_from([0, 60]), token_range=st.just(R2)),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    sealed = [
        SealedSlice(k, node, digest(draw(st.integers(0, 2))), 3, 1)
        for k in keys
        for node in draw(st.sets(st.sampled_from(NODES), max_size=4))
    ]
    channel_names = st.sampled_from(["hub", "lake"])
    records = draw(
        st.lists(
            st.builds(
                SentRecord,
                channel_names,
                st.sampled_from(keys),
                st.sampled_from(NODES),
                st.integers(0, 2).map(digest),
                st.just(1),
            ),
            max_size=3,
        )
    )
    flights = draw(st.lists(st.sampled_from(sealed), max_size=2)) if sealed else []
    return {
        "replicas": replicas,
        "sealed": sealed,
        "live": draw(st.sets(st.sampled_from(NODES))),
        "watermarks": [
            SealWatermark(node, "ks", "t", draw(st.sampled_from([0, 150_000, 500_000])))
            for node in draw(st.sets(st.sampled_from(NODES)))
        ],
        "sent": records,
        "in_flight": [PlannedSend.of(draw(channel_names), c) for c in flights],
    }


def run(world: dict[str, object], sent_records: Sequence[SentRecord]) -> list[PlannedSend]:
    replicas: dict[TokenRange, tuple[uuid.UUID, ...]] = world["replicas"]  # type: ignore[assignment]
    return list(
        plan_sends(
            (HUB, LAKE),
            world["sealed"],  # type: ignore[arg-type]
            world["watermarks"],  # type: ignore[arg-type]
            sent_records,
            replicas_of=replicas.__getitem__,
            live=world["live"],  # type: ignore[arg-type]
            in_flight=world["in_flight"],  # type: ignore[arg-type]
        ).sends
    )


def oracle(world: dict[str, object]) -> set[PlannedSend]:
    """The rules as the docstring words them, copy by copy."""
    replicas: dict[TokenRange, tuple[uuid.UUID, ...]] = world["replicas"]  # type: ignore[assignment]
    sealed: list[SealedSlice] = world["sealed"]  # type: ignore[assignment]
    live: set[uuid.UUID] = world["live"]  # type: ignore[assignment]
    marks = {m.node: m.sealed_through_ms for m in world["watermarks"]}  # type: ignore[attr-defined]
    records: list[SentRecord] = world["sent"]  # type: ignore[assignment]
    flying: list[PlannedSend] = world["in_flight"]  # type: ignore[assignment]
    expected: set[PlannedSend] = set()
    for c in sealed:
        ranked = replicas[TokenRange(c.key.range_start, c.key.range_end)]
        holders = {h.node: h for h in sealed if h.key == c.key}

        def rank(node: uuid.UUID, ranked: tuple[uuid.UUID, ...] = ranked) -> tuple[int, int]:
            return (ranked.index(node), 0) if node in ranked else (len(ranked), node.int)

        if c.node not in live:
            continue
        if c.key.out_of_sequence:
            above = [h for h in holders.values() if h.node in live and h.node < c.node]
        else:
            due = c.key.slice_start_ms + SETTINGS.window_ms
            if any(n in live and n not in holders and marks.get(n, -1) < due for n in ranked):
                continue
            above = [h for h in holders.values() if h.node in live and rank(h.node) < rank(c.node)]
        if any(h.digest == c.digest for h in above):
            continue
        for channel in ("hub", "lake"):
            if any(
                c.digest == r.digest or c.node == r.node
                for r in records
                if r.channel == channel and r.key == c.key
            ):
                continue
            if any(
                f.channel == channel
                and f.key == c.key
                and (f.digest == c.digest or f.node == c.node)
                for f in flying
            ):
                continue
            expected.add(PlannedSend.of(channel, c))
    return expected


@given(worlds())
def test_a_round_plans_exactly_what_the_rules_say(world: dict[str, object]) -> None:
    sends = run(world, world["sent"])  # type: ignore[arg-type]
    assert set(sends) == oracle(world)
    assert len(sends) == len(set(sends))


@given(worlds())
def test_rounds_converge_with_each_live_digest_sent_once_per_channel(
    world: dict[str, object],
) -> None:
    """No flights, nothing sent: plan, record every send, plan again. The second round plans
    nothing; every decided key's live digests are each sent exactly once per channel (so equal
    copies are sent once); no dead node sends."""
    world = {**world, "in_flight": [], "sent": []}
    first = run(world, [])
    second = run(world, [s.sent(2) for s in first])
    assert second == []
    live: set[uuid.UUID] = world["live"]  # type: ignore[assignment]
    sealed: list[SealedSlice] = world["sealed"]  # type: ignore[assignment]
    assert all(s.node in live for s in first)
    decided = {s.key for s in first}
    for k in decided:
        live_digests = {c.digest for c in sealed if c.key == k and c.node in live}
        for channel in ("hub", "lake"):
            sent_digests = [s.digest for s in first if s.key == k and s.channel == channel]
            assert sorted(sent_digests) == sorted(live_digests)
