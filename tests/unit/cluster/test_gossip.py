"""The gossiper core, driven by hand: one exchange at a time (cassandra-core.md §8.1).

Proves: the SYN/ACK/ACK2 + ECHO exchange between two nodes, action by action; every row of the
examineGossiper table; cluster-name and partitioner mismatches are dropped; a generation more
than a year ahead is ignored; set_application_state and heartbeats share one version counter;
a shutdown announcement marks the node down; removal quarantines; a stale echo response does
not mark a node up; time may not go backwards.
"""

from __future__ import annotations

import random

import pytest

from ringflow.cluster import (
    MAX_GENERATION_DIFFERENCE_S,
    ApplicationState,
    EchoRequest,
    EchoResponse,
    EndpointState,
    FailureDetector,
    GossipAction,
    GossipDigest,
    GossipDigestAck,
    GossipDigestAck2,
    GossipDigestSyn,
    Gossiper,
    HeartBeatState,
    NodeDown,
    NodeJoined,
    NodeUp,
    Send,
    StateChanged,
    VersionedValue,
)
from ringflow.errors import InvalidRequest

from ._gossip_harness import CLUSTER, START_MS, initial_state

A, B, C = "10.0.0.1", "10.0.0.2", "10.0.0.3"
GEN = START_MS // 1000
PARTITIONER = "org.apache.cassandra.dht.Murmur3Partitioner"


def make(endpoint: str, seeds: tuple[str, ...] = (A,), generation: int = GEN) -> Gossiper:
    return Gossiper(
        endpoint,
        initial_state(endpoint, generation),
        seeds,
        CLUSTER,
        random.Random(endpoint),
        FailureDetector(),
    )


def sends(actions: list[GossipAction]) -> list[Send]:
    return [action for action in actions if isinstance(action, Send)]


def only_send(actions: list[GossipAction]) -> Send:
    (send,) = sends(actions)
    return send


def test_three_way_exchange_and_echo_between_two_nodes() -> None:
    seed, node = make(A), make(B)
    now = START_MS + 1000
    syn = only_send(node.tick(now))  # nothing is live: the seed gets the SYN
    assert syn.to == A and isinstance(syn.message, GossipDigestSyn)
    assert syn.message.digests == (GossipDigest(B, GEN, 3),)  # heartbeat bumped 2 -> 3
    ack = only_send(seed.receive(B, syn.message, now))
    assert ack.message == GossipDigestAck((GossipDigest(B, GEN, 0),), {})
    ack2 = only_send(node.receive(A, ack.message, now))
    assert isinstance(ack2.message, GossipDigestAck2)
    assert ack2.message.states == {B: node.endpoint_state(B)}
    actions = seed.receive(B, ack2.message, now)
    status = initial_state(B, GEN).application_states[ApplicationState.STATUS]
    assert actions[:3] == [  # states in ordinal order: STATUS (0) before DC (3)
        NodeJoined(B, GEN),
        StateChanged(B, ApplicationState.STATUS, status.value, 2),
        StateChanged(B, ApplicationState.DC, "dc1", 1),
    ]
    echo = only_send(actions)
    assert echo.to == B and isinstance(echo.message, EchoRequest)
    assert seed.unreachable_endpoints() == [B] and not seed.is_alive(B)
    reply = only_send(node.receive(A, echo.message, now))
    assert reply.message == EchoResponse(echo.message.echo_id)
    assert seed.receive(B, reply.message, now) == [NodeUp(B)]
    assert seed.live_endpoints() == [B] and seed.is_alive(B)
    for gossiper in (seed, node):
        gossiper.validate()


def _seed_knowing(states: dict[str, EndpointState]) -> Gossiper:
    seed = make(A)
    seed.receive(C, GossipDigestAck2(states), START_MS)
    return seed


def _state(generation: int, heartbeat: int, **values: tuple[str, int]) -> EndpointState:
    return EndpointState(
        HeartBeatState(generation, heartbeat),
        {ApplicationState[k]: VersionedValue(v, ver) for k, (v, ver) in values.items()},
    )


@pytest.mark.parametrize(
    ("remote", "expected_requests", "expected_states"),
    [
        # same generation and version: nothing
        (GossipDigest(B, GEN, 7), (), {}),
        # remote generation higher: request everything
        (GossipDigest(B, GEN + 5, 1), (GossipDigest(B, GEN + 5, 0),), {}),
        # remote generation lower: send everything
        (GossipDigest(B, GEN - 5, 99), (), {B: "all"}),
        # same generation, remote newer: request above our version
        (GossipDigest(B, GEN, 12), (GossipDigest(B, GEN, 7),), {}),
        # same generation, remote older: send what is newer than its version
        (GossipDigest(B, GEN, 5), (), {B: "newer than 5"}),
        # unknown endpoint: request everything
        (GossipDigest("10.9.9.9", GEN, 4), (GossipDigest("10.9.9.9", GEN, 0),), {}),
    ],
    ids=[
        "same",
        "remote-gen-higher",
        "remote-gen-lower",
        "remote-newer",
        "remote-older",
        "unknown",
    ],
)
def test_examine_gossiper_table(
    remote: GossipDigest,
    expected_requests: tuple[GossipDigest, ...],
    expected_states: dict[str, str],
) -> None:
    known = _state(GEN, 7, DC=("dc1", 3), STATUS=("NORMAL,1", 6), LOAD=("12.5", 4))
    seed = _seed_knowing({B: known})
    ack = only_send(seed.receive(C, GossipDigestSyn(CLUSTER, PARTITIONER, (remote,)), START_MS))
    assert isinstance(ack.message, GossipDigestAck)
    assert ack.message.requests == expected_requests
    expected = {
        "all": known,
        "newer than 5": _state(GEN, 7, STATUS=("NORMAL,1", 6)),
    }
    assert ack.message.states == {ep: expected[what] for ep, what in expected_states.items()}
    seed.validate()


def test_ack_requests_are_answered_in_ack2() -> None:
    node = make(B)
    node.set_application_state(ApplicationState.LOAD, "1.0")  # version 3
    ack = GossipDigestAck((GossipDigest(B, GEN, 2), GossipDigest("10.7.7.7", GEN, 0)), {})
    ack2 = only_send(node.receive(A, ack, START_MS))
    assert ack2.message == GossipDigestAck2({B: _state(GEN, 2, LOAD=("1.0", 3))})


@pytest.mark.parametrize(
    "syn",
    [
        GossipDigestSyn("Other Cluster", PARTITIONER, (GossipDigest(B, GEN, 3),)),
        GossipDigestSyn(
            CLUSTER, "org.apache.cassandra.dht.RandomPartitioner", (GossipDigest(B, GEN, 3),)
        ),
    ],
    ids=["cluster-name", "partitioner"],
)
def test_mismatched_cluster_or_partitioner_is_dropped(syn: GossipDigestSyn) -> None:
    seed = make(A)
    before = seed.endpoint_states()
    assert seed.receive(B, syn, START_MS) == []
    assert seed.endpoint_states() == before
    assert "dropped SYN" in seed.story()[-1]


def test_empty_syn_gets_the_whole_state() -> None:
    seed = _seed_knowing({B: _state(GEN, 4, DC=("dc1", 1))})
    (send,) = make(C).shadow_round(START_MS)
    assert send.to == A and send.message == GossipDigestSyn(CLUSTER, PARTITIONER, ())
    ack = only_send(seed.receive(C, send.message, START_MS))
    assert isinstance(ack.message, GossipDigestAck)
    assert ack.message.states == seed.endpoint_states()


def test_generation_more_than_a_year_ahead_is_ignored() -> None:
    seed = _seed_knowing({B: _state(GEN, 4)})
    far = GEN + MAX_GENERATION_DIFFERENCE_S + 10
    assert seed.receive(C, GossipDigestAck2({B: _state(far, 9)}), START_MS) == []
    state = seed.endpoint_state(B)
    assert state is not None and state.generation == GEN
    near = GEN + 3600
    actions = seed.receive(C, GossipDigestAck2({B: _state(near, 1)}), START_MS)
    state = seed.endpoint_state(B)
    assert state is not None and state.generation == near
    assert any(isinstance(a, Send) and isinstance(a.message, EchoRequest) for a in actions)
    seed.validate()


def test_same_generation_merges_per_key_and_never_goes_back() -> None:
    seed = _seed_knowing({B: _state(GEN, 8, DC=("dc1", 1), STATUS=("BOOT,1", 5))})
    # An older heartbeat with a newer STATUS: STATUS moves, the heartbeat does not.
    actions = seed.receive(
        C, GossipDigestAck2({B: _state(GEN, 6, STATUS=("NORMAL,1", 9))}), START_MS
    )
    assert StateChanged(B, ApplicationState.STATUS, "NORMAL,1", 9) in actions
    state = seed.endpoint_state(B)
    assert state is not None
    assert state.heartbeat == HeartBeatState(GEN, 8)
    assert state.application_states == {
        ApplicationState.DC: VersionedValue("dc1", 1),
        ApplicationState.STATUS: VersionedValue("NORMAL,1", 9),
    }
    # A stale copy changes nothing and raises no event.
    assert (
        seed.receive(C, GossipDigestAck2({B: _state(GEN, 7, STATUS=("BOOT,1", 5))}), START_MS) == []
    )
    assert seed.endpoint_state(B) == state
    # An older generation is ignored outright.
    assert seed.receive(C, GossipDigestAck2({B: _state(GEN - 1, 50)}), START_MS) == []
    seed.validate()


def test_one_version_counter_for_heartbeat_and_states() -> None:
    node = make(B)
    assert node.version == 2
    assert node.set_application_state(ApplicationState.SCHEMA, "a1").version == 3
    node.tick(START_MS)
    state = node.endpoint_state(B)
    assert state is not None and state.heartbeat.version == 4
    assert node.set_application_state(ApplicationState.CDC_GENERATION_ID, "g").version == 5
    state = node.endpoint_state(B)
    assert state is not None and state.max_version == 5 == node.version
    with pytest.raises(InvalidRequest):
        node.set_application_state("SCHEMA", "x")  # type: ignore[arg-type]
    node.validate()


def _up(seed: Gossiper, endpoint: str, state: EndpointState, now: int) -> None:
    actions = seed.receive(C, GossipDigestAck2({endpoint: state}), now)
    echo = [a for a in sends(actions) if isinstance(a.message, EchoRequest)]
    assert echo, actions
    assert isinstance(echo[0].message, EchoRequest)
    assert seed.receive(endpoint, EchoResponse(echo[0].message.echo_id), now) == [NodeUp(endpoint)]


def test_shutdown_announcement_marks_the_node_down() -> None:
    seed = make(A)
    _up(seed, B, _state(GEN, 3, STATUS=("NORMAL,1", 2)), START_MS)
    actions = seed.receive(
        C, GossipDigestAck2({B: _state(GEN, 3, STATUS=("shutdown,true", 4))}), START_MS
    )
    assert actions == [StateChanged(B, ApplicationState.STATUS, "shutdown,true", 4), NodeDown(B)]
    assert not seed.failure_detector.is_alive(B)
    # Newer heartbeats of a node that said it is shutting down get no echo.
    later = _state(GEN, 9, STATUS=("shutdown,true", 4))
    assert not sends(seed.receive(C, GossipDigestAck2({B: later}), START_MS + 1000))
    seed.validate()


def test_stale_echo_response_does_not_mark_a_node_up() -> None:
    seed = make(A)
    actions = seed.receive(C, GossipDigestAck2({B: _state(GEN, 3)}), START_MS)
    (echo,) = sends(actions)
    assert isinstance(echo.message, EchoRequest)
    assert seed.receive(B, EchoResponse(echo.message.echo_id + 1), START_MS) == []
    assert seed.receive(C, EchoResponse(echo.message.echo_id), START_MS) == []
    assert not seed.is_alive(B)
    seed.validate()


def test_remove_endpoint_quarantines_its_gossip() -> None:
    seed = make(A)
    _up(seed, B, _state(GEN, 3), START_MS)
    assert seed.remove_endpoint(B, START_MS) == [NodeDown(B)]
    assert seed.endpoint_state(B) is None
    assert seed.receive(C, GossipDigestAck2({B: _state(GEN, 30)}), START_MS + 1000) == []
    seed.validate()
    seed.tick(START_MS + 60_000)  # the status check lifts the quarantine
    actions = seed.receive(C, GossipDigestAck2({B: _state(GEN, 31)}), START_MS + 60_000)
    assert actions[0] == NodeJoined(B, GEN)
    seed.validate()


def test_time_must_not_go_backwards_and_unknown_messages_are_refused() -> None:
    node = make(B)
    node.tick(START_MS)
    with pytest.raises(InvalidRequest, match="backwards"):
        node.tick(START_MS - 1)
    with pytest.raises(InvalidRequest, match="does not handle"):
        node.receive(A, b"raw", START_MS)  # type: ignore[arg-type]


def exchange(sender: Gossiper, receiver: Gossiper, now: int) -> None:
    """One full SYN -> ACK -> ACK2 from ``sender`` to ``receiver``."""
    syn = GossipDigestSyn(CLUSTER, PARTITIONER, sender._make_syn().digests)
    ack = only_send(receiver.receive(sender.local_endpoint, syn, now))
    ack2 = only_send(sender.receive(receiver.local_endpoint, ack.message, now))
    receiver.receive(sender.local_endpoint, ack2.message, now)


def test_seen_by_tracks_the_version_of_our_state_a_peer_showed_it_holds() -> None:
    """Issue 22: a topology change waits until every live member has seen its announcement. A
    peer's ACK asking for what it lacks of us, or its SYN digest of us, says which version of
    our state it holds."""
    a, b = make(A), make(B)
    now = START_MS + 1000
    exchange(b, a, now)  # a learns b (only endpoints it knows can show it anything)
    assert a.seen_by(B) == -1 and b.seen_by(A) == -1
    exchange(a, b, now)  # b knew nothing of a: its ACK asks for all of it (version 0)
    assert a.seen_by(B) == 0
    announced = a.set_application_state(ApplicationState.STATUS, "BOOT,1").version
    exchange(a, b, now + 1)  # b's ACK asks from the version it holds, before the BOOT
    assert 0 < a.seen_by(B) < announced
    exchange(b, a, now + 2)  # the ACK2 brought the BOOT; b's SYN digest of a shows it
    assert a.seen_by(B) == announced
    validate_all(a, b)


def test_seen_by_ignores_digests_of_another_generation_and_resets_on_restart() -> None:
    a, b = make(A), make(B)
    now = START_MS + 1000
    exchange(b, a, now)
    exchange(a, b, now)
    exchange(b, a, now + 1)
    seen = a.seen_by(B)
    assert seen > 0
    stale = GossipDigestSyn(CLUSTER, PARTITIONER, (GossipDigest(A, GEN - 5, 10**6),))
    a.receive(B, stale, now + 2)  # a digest of a previous life of ours says nothing now
    assert a.seen_by(B) == seen
    b_restarted = make(B, generation=GEN + 7)
    exchange(b_restarted, a, now + 3)  # b restarted: it knows nothing of us yet
    assert a.seen_by(B) == -1
    validate_all(a)


def validate_all(*gossipers: Gossiper) -> None:
    for gossiper in gossipers:
        gossiper.validate()
