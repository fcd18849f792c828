"""Internode envelope codec: frames, limits, round trips, hostile bytes.

Proves: a frame is a 4-byte big-endian length then a msgpack body; every gossip message and
every opaque-bytes verb round-trips, however the stream is chunked; a frame over the limit is
refused on encode (MessageTooLarge) and on decode as soon as its length prefix arrives
(FrameTooLarge), without buffering its body; a broken decoder stays broken; garbage bodies
raise InternodeProtocolError and nothing else.
"""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cluster import (
    FRAME_LENGTH_SIZE,
    MESSAGING_VERSION,
    ApplicationState,
    EchoRequest,
    EndpointState,
    Envelope,
    EnvelopeDecoder,
    FrameTooLarge,
    GossipDigest,
    GossipDigestAck,
    GossipMessage,
    HeartBeatState,
    InternodeProtocolError,
    MessageTooLarge,
    Verb,
    VersionedValue,
    decode_body,
    encode_envelope,
    verb_of,
)
from ringflow.errors import InvalidRequest, PeerError

from ._strategies import envelopes, gossip_messages


def _ack() -> GossipDigestAck:
    state = EndpointState(
        HeartBeatState(1_700_000_000, 7),
        {ApplicationState.STATUS: VersionedValue("NORMAL,42", 3)},
    )
    return GossipDigestAck((GossipDigest("10.0.0.3", 1_700_000_001, 0),), {"10.0.0.2": state})


def test_frame_is_length_prefixed_msgpack() -> None:
    envelope = Envelope(Verb.MUTATION_REQ, 17, "10.0.0.1", b"\x00mutation", 5_000)
    frame = encode_envelope(envelope)
    (length,) = struct.unpack(">I", frame[:FRAME_LENGTH_SIZE])
    assert length == len(frame) - FRAME_LENGTH_SIZE
    assert msgpack.unpackb(frame[FRAME_LENGTH_SIZE:]) == [
        MESSAGING_VERSION,
        Verb.MUTATION_REQ.value,
        17,
        "10.0.0.1",
        5_000,
        b"\x00mutation",
    ]
    assert decode_body(frame[FRAME_LENGTH_SIZE:]) == envelope


def test_gossip_payload_shapes_follow_the_verb() -> None:
    envelope = Envelope.of_gossip(_ack(), 1, "10.0.0.1", 99)
    assert envelope.verb is Verb.GOSSIP_DIGEST_ACK
    assert verb_of(EchoRequest(3)) is Verb.ECHO_REQ
    assert decode_body(encode_envelope(envelope)[FRAME_LENGTH_SIZE:]) == envelope
    with pytest.raises(InvalidRequest, match="GOSSIP_DIGEST_SYN carries GossipDigestSyn"):
        Envelope(Verb.GOSSIP_DIGEST_SYN, 1, "a", b"raw", 0)
    with pytest.raises(InvalidRequest, match="MUTATION_REQ carries bytes"):
        Envelope(Verb.MUTATION_REQ, 1, "a", EchoRequest(1), 0)
    with pytest.raises(InvalidRequest):
        Envelope(Verb.MUTATION_REQ, -1, "a", b"", 0)


@settings(max_examples=80, deadline=None)
@given(
    batch=st.lists(envelopes, min_size=1, max_size=5),
    cuts=st.lists(st.integers(1, 64), min_size=1, max_size=30),
)
def test_round_trip_through_any_chunking(batch: list[Envelope], cuts: list[int]) -> None:
    stream = b"".join(encode_envelope(envelope) for envelope in batch)
    decoder = EnvelopeDecoder()
    received: list[Envelope] = []
    position = 0
    cut_index = 0
    while position < len(stream):
        size = cuts[cut_index % len(cuts)]
        cut_index += 1
        decoder.feed(stream[position : position + size])
        position += size
        decoder.validate()
        while (envelope := decoder.next_envelope()) is not None:
            received.append(envelope)
            decoder.validate()
    assert received == batch
    assert decoder.buffered_bytes == 0


@settings(max_examples=80, deadline=None)
@given(message=gossip_messages)
def test_every_gossip_message_round_trips(message: GossipMessage) -> None:
    envelope = Envelope.of_gossip(message, 5, "10.0.0.1", 1)
    assert decode_body(encode_envelope(envelope)[FRAME_LENGTH_SIZE:]).payload == message


def test_encoding_beyond_the_limit_is_message_too_large() -> None:
    envelope = Envelope(Verb.HINT_REQ, 1, "10.0.0.1", b"x" * 1000, 0)
    with pytest.raises(MessageTooLarge) as caught:
        encode_envelope(envelope, max_frame_size=500)
    assert isinstance(caught.value, InvalidRequest)
    assert caught.value.max_frame_size == 500 and caught.value.length > 1000


def test_decoder_refuses_an_oversized_frame_from_its_length_prefix_alone() -> None:
    decoder = EnvelopeDecoder(max_frame_size=1024)
    small = encode_envelope(Envelope(Verb.READ_REQ, 1, "a", b"ok", 0))
    decoder.feed(small)
    decoder.validate()
    with pytest.raises(FrameTooLarge) as caught:
        decoder.feed(struct.pack(">I", 1025))
    assert isinstance(caught.value, PeerError)
    assert (caught.value.length, caught.value.max_frame_size) == (1025, 1024)
    assert decoder.buffered_bytes == 0
    with pytest.raises(InternodeProtocolError, match="failed earlier"):
        decoder.feed(b"\x00")
    with pytest.raises(InternodeProtocolError, match="failed earlier"):
        decoder.next_envelope()


def test_decoder_holds_at_most_one_incomplete_frame_within_the_limit() -> None:
    limit = 300
    decoder = EnvelopeDecoder(max_frame_size=limit)
    frame = encode_envelope(Envelope(Verb.STREAM_REQ, 9, "a", b"y" * 250, 0), max_frame_size=limit)
    for index in range(len(frame) - 1):
        decoder.feed(frame[index : index + 1])
        assert decoder.next_envelope() is None
        assert decoder.buffered_bytes <= FRAME_LENGTH_SIZE + limit
        decoder.validate()
    decoder.feed(frame[-1:])
    envelope = decoder.next_envelope()
    assert envelope is not None and envelope.payload == b"y" * 250


def test_decoder_limit_is_validated() -> None:
    for bad in (0, -1, 2**32, True):
        with pytest.raises(InvalidRequest):
            EnvelopeDecoder(max_frame_size=bad)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\xc1",  # never used in msgpack
        msgpack.packb([MESSAGING_VERSION + 1, 1, 0, "a", 0, []]),
        msgpack.packb([MESSAGING_VERSION, 250, 0, "a", 0, b""]),
        msgpack.packb([MESSAGING_VERSION, Verb.MUTATION_REQ, 0, "a", 0, "text, not bytes"]),
        msgpack.packb([MESSAGING_VERSION, Verb.ECHO_REQ, 0, "a", 0, [-1]]),
        msgpack.packb([MESSAGING_VERSION, Verb.ECHO_REQ, 0, "", 0, [1]]),
        msgpack.packb([MESSAGING_VERSION, Verb.ECHO_REQ, True, "a", 0, [1]]),
        msgpack.packb([MESSAGING_VERSION, Verb.GOSSIP_DIGEST_ACK2, 0, "a", 0, [[["e", 5]]]]),
        msgpack.packb(
            [
                MESSAGING_VERSION,
                Verb.GOSSIP_DIGEST_ACK2,
                0,
                "a",
                0,
                [[["e", [[1, 1], [[99, "x", 1]]]]]],
            ]
        ),
        msgpack.packb({"verb": 1}),
        msgpack.packb([MESSAGING_VERSION, 1, 0, "a", 0, []]) + b"extra",
    ],
)
def test_malformed_bodies_are_protocol_errors(body: bytes) -> None:
    with pytest.raises(InternodeProtocolError):
        decode_body(body)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=64))
def test_random_bodies_parse_or_raise_protocol_error(body: bytes) -> None:
    try:
        envelope = decode_body(body)
    except InternodeProtocolError:
        return
    assert isinstance(envelope, Envelope)


@settings(max_examples=100, deadline=None)
@given(envelope=envelopes, data=st.data())
def test_mutated_frames_parse_or_raise_protocol_error(
    envelope: Envelope, data: st.DataObject
) -> None:
    body = bytearray(encode_envelope(envelope)[FRAME_LENGTH_SIZE:])
    index = data.draw(st.integers(0, len(body) - 1))
    body[index] = data.draw(st.integers(0, 255))
    try:
        decoded = decode_body(bytes(body))
    except InternodeProtocolError:
        return
    assert isinstance(decoded, Envelope)
