"""Internode messages: verbs, the envelope, and the length-prefixed msgpack frame codec.

Owns the wire between ringflow nodes (not Cassandra's: no real peer speaks it, so the format is
ours) and the encoding of the gossip messages of ``shared/reference/cassandra-core.md`` §8.1.
Sans-IO (reliability-and-style.md §B1, §B7): ``encode_envelope`` returns bytes, and
``EnvelopeDecoder.feed`` / ``next_envelope`` take bytes in whatever chunks the socket gives.

Rules:

* A frame is a 4-byte big-endian unsigned body length, then a msgpack body
  ``[MESSAGING_VERSION, verb, request_id, from_endpoint, expires_at_ms, payload]``. The verb
  fixes the payload's shape: gossip verbs carry their message, every other verb opaque bytes
  (mutations are encoded by the storage layer).
* Frames are limited to ``max_frame_size`` body bytes, a constructor argument. Encoding a larger
  message is ``MessageTooLarge`` (an ``InvalidRequest``: Cassandra refuses oversized mutations
  the same way). The decoder checks every length prefix as soon as its 4 bytes arrive and
  raises ``FrameTooLarge`` before buffering any of that body; the decoder is then unusable
  (frames not yet drained are dropped with it), because a peer that lies about lengths cannot
  be trusted to resynchronise.
* The decoder keeps at most one incomplete frame (at most ``4 + max_frame_size`` bytes) beyond
  the complete frames the caller fed and has not drained yet.
* Each network message carries exactly one frame (``encode_envelope``'s bytes), and a receiving
  node decodes each message on its own with ``decode_frame``: no decoder state outlives a
  message, so nothing one connection sends can change how another's bytes are read (issue 16:
  a shared per-source decoder let a forged half frame swallow a real peer's traffic).
  ``EnvelopeDecoder`` remains for byte streams (tests, tools).
* A body that is not valid msgpack, has the wrong shape, an unknown verb or application state,
  or values that break a message's own rules, is ``InternodeProtocolError`` (a ``PeerError``)
  and nothing else. The frame boundary is intact, so the decoder may go on, but the shell
  should close the connection.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, final

import msgpack

from ringflow.cluster._gossip_state import (
    ApplicationState,
    EchoRequest,
    EchoResponse,
    EndpointState,
    GossipDigest,
    GossipDigestAck,
    GossipDigestAck2,
    GossipDigestSyn,
    GossipMessage,
    HeartBeatState,
    VersionedValue,
)
from ringflow.errors import InvalidRequest, PeerError, RingflowError, invariant

MESSAGING_VERSION: Final = 1
DEFAULT_MAX_FRAME_SIZE: Final = 32 * 1024 * 1024
"""32 MiB: above Cassandra's largest mutation (half a 32 MiB commit log segment)."""
FRAME_LENGTH_SIZE: Final = 4
_LENGTH: Final = struct.Struct(">I")
_UINT32_MAX: Final = 2**32 - 1
_INT64_MAX: Final = 2**63 - 1
_COMPACT_AFTER_BYTES: Final = 64 * 1024


class InternodeProtocolError(PeerError):
    """A peer sent bytes that are not a valid internode message."""


class FrameTooLarge(InternodeProtocolError):
    """A peer announced a frame longer than our limit."""

    def __init__(self, length: int, max_frame_size: int) -> None:
        super().__init__(
            f"internode frame of {length} bytes exceeds the limit of {max_frame_size} bytes"
        )
        self.length = length
        self.max_frame_size = max_frame_size


class MessageTooLarge(InvalidRequest):
    """We were asked to send a message longer than the frame limit."""

    def __init__(self, length: int, max_frame_size: int) -> None:
        super().__init__(
            f"message of {length} bytes exceeds the internode frame limit of {max_frame_size} bytes"
        )
        self.length = length
        self.max_frame_size = max_frame_size


class Verb(IntEnum):
    """What a message asks for; the value travels on the wire and never changes."""

    GOSSIP_DIGEST_SYN = 1
    GOSSIP_DIGEST_ACK = 2
    GOSSIP_DIGEST_ACK2 = 3
    ECHO_REQ = 4
    ECHO_RSP = 5
    MUTATION_REQ = 10
    MUTATION_RSP = 11
    READ_REQ = 12
    READ_RSP = 13
    HINT_REQ = 14
    HINT_RSP = 15
    SCHEMA_PUSH_REQ = 20
    SCHEMA_PUSH_RSP = 21
    SCHEMA_PULL_REQ = 22
    SCHEMA_PULL_RSP = 23
    SCHEMA_VERSION_REQ = 24
    SCHEMA_VERSION_RSP = 25
    STREAM_REQ = 30
    STREAM_RSP = 31
    RANGE_READ = 32
    """A token-range read: the request and the replica's answer (tagged in the payload)."""
    REPAIR_REQ = 33
    """Anti-entropy repair: validate (build a Merkle tree), sync, pull a page, run a repair."""
    REPAIR_RSP = 34
    FAILURE_RSP = 99
    """A replica's answer that the request failed (reason in the payload)."""


Payload = GossipMessage | bytes

GOSSIP_VERBS: Final[Mapping[type, Verb]] = {
    GossipDigestSyn: Verb.GOSSIP_DIGEST_SYN,
    GossipDigestAck: Verb.GOSSIP_DIGEST_ACK,
    GossipDigestAck2: Verb.GOSSIP_DIGEST_ACK2,
    EchoRequest: Verb.ECHO_REQ,
    EchoResponse: Verb.ECHO_RSP,
}
"""The verb of each gossip message class; every other verb carries bytes."""
_PAYLOAD_TYPE_OF_VERB: Final[Mapping[Verb, type]] = {v: t for t, v in GOSSIP_VERBS.items()}


def verb_of(message: GossipMessage) -> Verb:
    verb = GOSSIP_VERBS.get(type(message))
    if verb is None:
        raise InvalidRequest(f"not a gossip message: {message!r}")
    return verb


def _check_uint(name: str, value: object, maximum: int = _INT64_MAX) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= maximum:
        raise InvalidRequest(f"envelope {name} must be an int in [0, {maximum}], got {value!r}")


@dataclass(frozen=True, slots=True)
class Envelope:
    """One internode message: what (verb, payload), from whom, its id and its deadline."""

    verb: Verb
    request_id: int
    from_endpoint: str
    payload: Payload
    expires_at_ms: int

    def __post_init__(self) -> None:
        if not isinstance(self.verb, Verb):
            raise InvalidRequest(f"envelope verb must be a Verb, got {self.verb!r}")
        _check_uint("request_id", self.request_id)
        _check_uint("expires_at_ms", self.expires_at_ms)
        if not isinstance(self.from_endpoint, str) or not self.from_endpoint:
            raise InvalidRequest(f"envelope from_endpoint must be a non-empty str: {self!r}")
        expected = _PAYLOAD_TYPE_OF_VERB.get(self.verb, bytes)
        if type(self.payload) is not expected:
            raise InvalidRequest(
                f"{self.verb.name} carries {expected.__name__}, got {type(self.payload).__name__}"
            )

    @classmethod
    def of_gossip(
        cls, message: GossipMessage, request_id: int, from_endpoint: str, expires_at_ms: int
    ) -> Envelope:
        return cls(verb_of(message), request_id, from_endpoint, message, expires_at_ms)


# -- encoding ------------------------------------------------------------------------------


def _state_to_wire(state: EndpointState) -> list[object]:
    return [
        [state.heartbeat.generation, state.heartbeat.version],
        [[int(key), value.value, value.version] for key, value in state.application_states.items()],
    ]


def _states_to_wire(states: Mapping[str, EndpointState]) -> list[object]:
    return [[endpoint, _state_to_wire(state)] for endpoint, state in states.items()]


def _digests_to_wire(digests: tuple[GossipDigest, ...]) -> list[object]:
    return [[d.endpoint, d.generation, d.max_version] for d in digests]


def _payload_to_wire(payload: Payload) -> object:
    match payload:
        case bytes():
            return payload
        case GossipDigestSyn():
            return [payload.cluster_name, payload.partitioner, _digests_to_wire(payload.digests)]
        case GossipDigestAck():
            return [_digests_to_wire(payload.requests), _states_to_wire(payload.states)]
        case GossipDigestAck2():
            return [_states_to_wire(payload.states)]
        case EchoRequest() | EchoResponse():
            return [payload.echo_id]
    raise InvalidRequest(f"cannot encode payload {payload!r}")


def encode_envelope(envelope: Envelope, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> bytes:
    """One frame: the 4-byte length, then the msgpack body."""
    body: bytes = msgpack.packb(
        [
            MESSAGING_VERSION,
            int(envelope.verb),
            envelope.request_id,
            envelope.from_endpoint,
            envelope.expires_at_ms,
            _payload_to_wire(envelope.payload),
        ],
        use_bin_type=True,
    )
    if len(body) > max_frame_size:
        raise MessageTooLarge(len(body), max_frame_size)
    return _LENGTH.pack(len(body)) + body


# -- decoding ------------------------------------------------------------------------------


def _list(value: object, length: int | None, what: str) -> list[object]:
    if not isinstance(value, list) or (length is not None and len(value) != length):
        size = "a list" if length is None else f"a list of {length}"
        raise InternodeProtocolError(f"{what} must be {size}, got {value!r:.80}")
    return value


def _int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InternodeProtocolError(f"{what} must be an int, got {value!r:.80}")
    return value


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InternodeProtocolError(f"{what} must be a str, got {value!r:.80}")
    return value


def _state_from_wire(value: object) -> EndpointState:
    heartbeat_wire, states_wire = _list(value, 2, "endpoint state")
    generation, version = _list(heartbeat_wire, 2, "heartbeat")
    states: dict[ApplicationState, VersionedValue] = {}
    for entry in _list(states_wire, None, "application states"):
        ordinal, text, state_version = _list(entry, 3, "application state")
        try:
            key = ApplicationState(_int(ordinal, "application state ordinal"))
        except ValueError:
            raise InternodeProtocolError(f"unknown application state {ordinal!r}") from None
        if key in states:
            raise InternodeProtocolError(f"application state {key.name} listed twice")
        states[key] = VersionedValue(
            _str(text, "state value"), _int(state_version, "state version")
        )
    heartbeat = HeartBeatState(_int(generation, "generation"), _int(version, "heartbeat version"))
    return EndpointState(heartbeat, states)


def _states_from_wire(value: object) -> dict[str, EndpointState]:
    states: dict[str, EndpointState] = {}
    for entry in _list(value, None, "endpoint states"):
        endpoint, state = _list(entry, 2, "endpoint state entry")
        name = _str(endpoint, "endpoint")
        if name in states:
            raise InternodeProtocolError(f"endpoint {name} listed twice")
        states[name] = _state_from_wire(state)
    return states


def _digests_from_wire(value: object) -> tuple[GossipDigest, ...]:
    digests = []
    for entry in _list(value, None, "digests"):
        endpoint, generation, max_version = _list(entry, 3, "digest")
        digests.append(
            GossipDigest(
                _str(endpoint, "digest endpoint"),
                _int(generation, "digest generation"),
                _int(max_version, "digest max version"),
            )
        )
    return tuple(digests)


def _syn_from_wire(value: object) -> GossipMessage:
    cluster_name, partitioner, digests = _list(value, 3, "SYN")
    return GossipDigestSyn(
        _str(cluster_name, "cluster name"),
        _str(partitioner, "partitioner"),
        _digests_from_wire(digests),
    )


def _ack_from_wire(value: object) -> GossipMessage:
    requests, states = _list(value, 2, "ACK")
    return GossipDigestAck(_digests_from_wire(requests), _states_from_wire(states))


def _ack2_from_wire(value: object) -> GossipMessage:
    (states,) = _list(value, 1, "ACK2")
    return GossipDigestAck2(_states_from_wire(states))


def _echo_request_from_wire(value: object) -> GossipMessage:
    (echo_id,) = _list(value, 1, "ECHO_REQ")
    return EchoRequest(_int(echo_id, "echo id"))


def _echo_response_from_wire(value: object) -> GossipMessage:
    (echo_id,) = _list(value, 1, "ECHO_RSP")
    return EchoResponse(_int(echo_id, "echo id"))


_GOSSIP_DECODERS: Final[Mapping[Verb, Callable[[object], GossipMessage]]] = {
    Verb.GOSSIP_DIGEST_SYN: _syn_from_wire,
    Verb.GOSSIP_DIGEST_ACK: _ack_from_wire,
    Verb.GOSSIP_DIGEST_ACK2: _ack2_from_wire,
    Verb.ECHO_REQ: _echo_request_from_wire,
    Verb.ECHO_RSP: _echo_response_from_wire,
}


def _envelope_from_wire(value: object) -> Envelope:
    fields = _list(value, 6, "envelope")
    version, verb_code, request_id, from_endpoint, expires_at_ms, payload_wire = fields
    if version != MESSAGING_VERSION:
        raise InternodeProtocolError(
            f"messaging version {version!r} is not ours ({MESSAGING_VERSION})"
        )
    try:
        verb = Verb(_int(verb_code, "verb"))
    except ValueError:
        raise InternodeProtocolError(f"unknown verb {verb_code!r}") from None
    decoder = _GOSSIP_DECODERS.get(verb)
    payload: Payload
    if decoder is not None:
        payload = decoder(payload_wire)
    elif isinstance(payload_wire, bytes):
        payload = payload_wire
    else:
        raise InternodeProtocolError(f"{verb.name} must carry bytes, got {payload_wire!r:.80}")
    return Envelope(
        verb,
        _int(request_id, "request id"),
        _str(from_endpoint, "from endpoint"),
        payload,
        _int(expires_at_ms, "expires_at_ms"),
    )


def decode_body(body: bytes) -> Envelope:
    """The envelope in one frame body (without its length prefix)."""
    try:
        value = msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise InternodeProtocolError(f"frame body is not msgpack: {error}") from None
    try:
        return _envelope_from_wire(value)
    except InternodeProtocolError:
        raise
    except RingflowError as error:
        # A value object refused what the peer sent (negative version, empty endpoint...).
        raise InternodeProtocolError(f"invalid message from peer: {error}") from None


def decode_frame(frame: bytes, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> Envelope:
    """The envelope of one whole frame, as ``encode_envelope`` made it: its length prefix must
    announce exactly the bytes that follow (no more, no fewer, at most ``max_frame_size``),
    else ``InternodeProtocolError``."""
    if len(frame) < FRAME_LENGTH_SIZE:
        raise InternodeProtocolError(f"a frame of {len(frame)} bytes has no length prefix")
    (length,) = _LENGTH.unpack_from(frame, 0)
    if length > max_frame_size:
        raise FrameTooLarge(length, max_frame_size)
    if length != len(frame) - FRAME_LENGTH_SIZE:
        raise InternodeProtocolError(
            f"frame announces {length} bytes and carries {len(frame) - FRAME_LENGTH_SIZE}"
        )
    return decode_body(frame[FRAME_LENGTH_SIZE:])


@final
class EnvelopeDecoder:
    """Turns a byte stream into envelopes, one complete frame at a time."""

    __slots__ = ("_broken", "_buffer", "_read_offset", "_scan_offset", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if (
            not isinstance(max_frame_size, int)
            or isinstance(max_frame_size, bool)
            or not 1 <= max_frame_size <= _UINT32_MAX
        ):
            raise InvalidRequest(f"max_frame_size must be in [1, 2^32), got {max_frame_size!r}")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._read_offset = 0
        self._scan_offset = 0
        self._broken = False

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) - self._read_offset

    def feed(self, data: bytes) -> None:
        """Append bytes from the peer; checks every length prefix they complete."""
        if self._broken:
            raise InternodeProtocolError("the decoder failed earlier; close the connection")
        self._buffer += data
        while len(self._buffer) - self._scan_offset >= FRAME_LENGTH_SIZE:
            (length,) = _LENGTH.unpack_from(self._buffer, self._scan_offset)
            if length > self.max_frame_size:
                self._broken = True
                self._buffer.clear()
                self._read_offset = self._scan_offset = 0
                raise FrameTooLarge(length, self.max_frame_size)
            self._scan_offset += FRAME_LENGTH_SIZE + length

    def next_envelope(self) -> Envelope | None:
        """The next complete envelope, or None until more bytes arrive."""
        if self._broken:
            raise InternodeProtocolError("the decoder failed earlier; close the connection")
        start = self._read_offset
        if len(self._buffer) - start < FRAME_LENGTH_SIZE:
            return None
        (length,) = _LENGTH.unpack_from(self._buffer, start)
        end = start + FRAME_LENGTH_SIZE + length
        if len(self._buffer) < end:
            return None
        body = bytes(self._buffer[start + FRAME_LENGTH_SIZE : end])
        self._read_offset = end
        if self._read_offset >= _COMPACT_AFTER_BYTES or self._read_offset == len(self._buffer):
            del self._buffer[: self._read_offset]
            self._scan_offset -= self._read_offset
            self._read_offset = 0
        return decode_body(body)

    def validate(self) -> None:
        invariant(0 <= self._read_offset <= len(self._buffer), "read offset outside the buffer")
        offset = self._read_offset
        while len(self._buffer) - offset >= FRAME_LENGTH_SIZE:
            (length,) = _LENGTH.unpack_from(self._buffer, offset)
            invariant(length <= self.max_frame_size, f"buffered a frame of {length} bytes")
            offset += FRAME_LENGTH_SIZE + length
        invariant(offset == self._scan_offset, f"scan offset {self._scan_offset} != {offset}")
