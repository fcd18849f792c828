"""Issue 16, the pure pieces: one envelope per message (``decode_frame``), the dispatcher's
checks (claimed sender, standing per verb, protocol errors raised as ``ProtocolViolation``),
FAILURE_RSP decoding, gossip values that cannot break the ring, and a valid sample of every
verb for fuzzers."""

from __future__ import annotations

import uuid

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cluster import (
    ApplicationState,
    Envelope,
    FrameTooLarge,
    InternodeProtocolError,
    Verb,
    decode_frame,
    encode_envelope,
)
from ringflow.cluster.service import (
    MEMBER_VERBS,
    OPEN_VERBS,
    VERB_STANDING,
    Standing,
    decode_failure,
    encode_failure,
    sample_envelopes,
)
from ringflow.cluster.service._dispatch import Holding, MessageDispatcher
from ringflow.cluster.service._membership import local_endpoint_state, ring_members
from ringflow.runtime import ProtocolViolation
from ringflow.schema import Cell, Mutation, Row

SOURCE = "127.0.0.2:7000"
MUTATION = Mutation(
    "ks", "t", (b"\x00\x00\x00\x01",), rows=(Row((), None, None, {"v": Cell.live(1, b"x")}),)
)


def _samples(source: str = SOURCE) -> list[Envelope]:
    found = sample_envelopes(source, MUTATION, cluster_name="c", now_ms=1_700_000_000_000)
    return [e for envelopes in found.values() for e in envelopes]


def test_every_verb_has_a_sample_that_round_trips_through_one_frame() -> None:
    samples = _samples()
    assert {e.verb for e in samples} == set(Verb)
    for envelope in samples:
        assert decode_frame(encode_envelope(envelope)) == envelope


def test_a_frame_must_carry_exactly_what_its_length_announces() -> None:
    frame = encode_envelope(_samples()[0])
    for bad in (frame[:-1], frame + b"\x00", frame + frame, frame[:3], b""):
        with pytest.raises(InternodeProtocolError):
            decode_frame(bad)
    with pytest.raises(FrameTooLarge):
        decode_frame((16_000_000).to_bytes(4, "big"), max_frame_size=1024)


@settings(max_examples=300)
@given(data=st.binary(max_size=200))
def test_any_bytes_decode_or_raise_a_protocol_error(data: bytes) -> None:
    try:
        envelope = decode_frame(data)
    except InternodeProtocolError:
        return
    assert decode_frame(encode_envelope(envelope)) == envelope


class _Node:
    """What the dispatcher needs of a node: standings, handlers, a failure sender."""

    def __init__(self, standings: dict[str, Standing]) -> None:
        self.standings = standings
        self.handled: list[tuple[Verb, str]] = []
        self.failed: list[tuple[str, Verb]] = []
        self.gossip: list[str] = []

    def handler(self, verb: Verb) -> object:
        def handle(source: str, request_id: int, payload: bytes) -> None:
            if verb is Verb.FAILURE_RSP:
                decode_failure(payload)
            self.handled.append((verb, source))

        return handle

    def dispatcher(self) -> MessageDispatcher:
        return MessageDispatcher(
            lambda source, message: self.gossip.append(source),
            {verb: self.handler(verb) for verb in Verb},  # type: ignore[misc]
            standing_of=lambda e: self.standings.get(e, Standing.STRANGER),
            fail=lambda to, request_id, verb, reason: self.failed.append((to, verb)),
        )


@pytest.mark.parametrize("standing", list(Standing))
def test_each_verb_needs_its_standing(standing: Standing) -> None:
    node = _Node({SOURCE: standing})
    dispatcher = node.dispatcher()
    for envelope in _samples():
        dispatcher.on_message(SOURCE, encode_envelope(envelope))
    admitted = {verb for verb in Verb if VERB_STANDING[verb] <= standing}
    assert {verb for verb, _ in node.handled} == admitted - OPEN_VERBS
    assert len(node.gossip) == len(OPEN_VERBS)  # gossip is open to anyone
    refused = [e for e in _samples() if VERB_STANDING[e.verb] > standing]
    assert dispatcher.refused_messages == len(refused)
    assert dispatcher.protocol_errors == 0
    if standing is Standing.STRANGER:
        assert node.failed == []  # we open no link to whoever asks
    if standing is Standing.MEMBER:
        assert {verb for verb, _ in node.handled} >= MEMBER_VERBS


def test_a_message_claiming_another_sender_or_malformed_is_a_protocol_violation() -> None:
    node = _Node({SOURCE: Standing.MEMBER, "127.0.0.3:7000": Standing.MEMBER})
    dispatcher = node.dispatcher()
    other = next(e for e in _samples("127.0.0.3:7000") if e.verb is Verb.MUTATION_REQ)
    bad_failure = Envelope(Verb.FAILURE_RSP, 1, SOURCE, msgpack.packb([12345, "x"]), 0)
    for payload in (encode_envelope(other), b"\x00\x00\x00\x01\xc1", encode_envelope(bad_failure)):
        with pytest.raises(ProtocolViolation):
            dispatcher.on_message(SOURCE, payload)
    assert dispatcher.protocol_errors == 3 and node.handled == []
    good = next(e for e in _samples() if e.verb is Verb.MUTATION_RSP)
    dispatcher.on_message(SOURCE, encode_envelope(good))  # the next message is served
    assert node.handled == [(Verb.MUTATION_RSP, SOURCE)]


@pytest.mark.parametrize(
    "payload",
    [b"\xc1", msgpack.packb([1]), msgpack.packb([12345, "x"]), msgpack.packb([12, 5]),
     msgpack.packb([True, "x"]), msgpack.packb([12, "x" * 501])],
)  # fmt: skip
def test_a_failure_payload_of_the_wrong_shape_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(InternodeProtocolError):
        decode_failure(payload)


def test_a_failure_round_trips_with_its_reason_cut_to_the_limit() -> None:
    assert decode_failure(encode_failure(Verb.READ_REQ, "why")) == (Verb.READ_REQ, "why")
    assert decode_failure(encode_failure(Verb.HINT_REQ, "y" * 900)) == (Verb.HINT_REQ, "y" * 500)


def _normal(host_id: str, tokens: str) -> object:
    values = {
        ApplicationState.STATUS: "NORMAL," + tokens.split(",")[0],
        ApplicationState.TOKENS: tokens,
        ApplicationState.HOST_ID: host_id,
        ApplicationState.DC: "dc1",
        ApplicationState.RACK: "r1",
    }
    return local_endpoint_state(1, values)


def test_gossip_values_that_do_not_parse_or_collide_leave_the_members_alone() -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    states = {
        "10.0.0.1:7000": _normal(a, "-100,300"),
        "10.0.0.2:7000": _normal(b, "0,400"),
        "10.0.0.3:7000": _normal("not-a-uuid", "5"),
        "10.0.0.4:7000": _normal(str(uuid.uuid4()), "5,x"),
        "10.0.0.5:7000": _normal(str(uuid.uuid4()), str(2**63)),
        "0.0.0.9:7000": _normal(str(uuid.uuid4()), "300"),  # a member's token, sorted first
        "0.0.0.8:7000": _normal(a, "7"),  # a member's host id
    }
    members = ring_members(states, prefer=("10.0.0.1:7000", "10.0.0.2:7000"))  # type: ignore[arg-type]
    assert sorted(members) == ["10.0.0.1:7000", "10.0.0.2:7000"]


def test_a_sender_not_known_yet_is_held_then_served_once_gossip_knows_it() -> None:
    """Knowledge is not symmetric: a member may write to us before gossip told us of it."""
    node = _Node({})
    timers: list[object] = []
    learned: list[str] = []
    dispatcher = MessageDispatcher(
        lambda source, message: node.standings.update({source: Standing.MEMBER}),
        {verb: node.handler(verb) for verb in Verb},  # type: ignore[misc]
        standing_of=lambda e: node.standings.get(e, Standing.STRANGER),
        fail=lambda to, request_id, verb, reason: node.failed.append((to, verb)),
        holding=Holding(lambda delay_ms, callback: timers.append(callback), learned.append),
    )
    samples = {e.verb: e for e in _samples()}
    for verb in (Verb.MUTATION_REQ, Verb.READ_REQ):
        dispatcher.on_message(SOURCE, encode_envelope(samples[verb]))
    assert node.handled == [] and learned == [SOURCE] and dispatcher.held_messages == 2
    dispatcher.on_message(SOURCE, encode_envelope(samples[Verb.GOSSIP_DIGEST_ACK2]))
    assert node.handled == [(Verb.MUTATION_REQ, SOURCE), (Verb.READ_REQ, SOURCE)]
    assert dispatcher.refused_messages == 0 and dispatcher.held_messages == 0
    # A stranger that stays one: refused when the hold expires, never answered.
    stranger = "127.0.0.9:7000"
    envelope = next(e for e in _samples(stranger) if e.verb is Verb.MUTATION_REQ)
    dispatcher.on_message(stranger, encode_envelope(envelope))
    for callback in timers:
        callback()  # type: ignore[operator]
    assert dispatcher.refused_messages == 1 and node.failed == []
    assert (Verb.MUTATION_REQ, stranger) not in node.handled
