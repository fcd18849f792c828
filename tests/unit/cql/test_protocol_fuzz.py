"""Fuzz: whatever bytes a client sends, ServerConnection yields only its own typed events.

The invariant is h11's AFL harness (reliability-and-style.md §A5.3): parse or refuse, never
another exception; the same input is fed once whole and once in small chunks and must give
the same events; every refusal can be answered with ``send``; buffered bytes stay within one
header plus ``max_frame_size``. Inputs: random bytes, and valid driver-like sessions with
bytes flipped, deleted, inserted or truncated. Response decoding is fuzzed the same way.
"""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringflow.cql import (
    HEADER_SIZE,
    NEED_DATA,
    Compression,
    ConnectionClosed,
    ConnectionEvent,
    ErrorResponse,
    Frame,
    FrameHeader,
    Options,
    ProtocolErrorEvent,
    RequestEvent,
    ServerConnection,
    Startup,
    decode_message,
    encode_message,
)
from ringflow.errors import ErrorCode, ProtocolViolation

from ._protocol_strategies import requests, responses

MAX_FRAME_SIZE = 2048
_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(data: bytes, chunk_size: int) -> list[ConnectionEvent]:
    """Feed ``data`` in chunks, drain events, answer each one; return the events."""
    connection = ServerConnection(max_frame_size=MAX_FRAME_SIZE, max_in_flight=4)
    events: list[ConnectionEvent] = []
    for start in range(0, len(data), chunk_size):
        connection.receive_data(data[start : start + chunk_size])
        while (event := connection.next_event()) is not NEED_DATA:
            events.append(event)
            if isinstance(event, ConnectionClosed):
                return events  # a fatal refusal closed it; a shell would drop the socket
            answer(connection, event)
        assert connection._decoder.buffered_size <= HEADER_SIZE + MAX_FRAME_SIZE + chunk_size
        connection.validate()
    connection.receive_data(b"")
    events.append(connection.next_event())
    assert isinstance(events[-1], ConnectionClosed)
    return events


def answer(connection: ServerConnection, event: ConnectionEvent) -> None:
    if isinstance(event, ProtocolErrorEvent):
        assert event.error.code in (ErrorCode.PROTOCOL_ERROR, ErrorCode.OVERLOADED)
        frame = connection.send(event.error, event.stream_id)
        assert frame[0] & 0x80
    else:
        assert isinstance(event, RequestEvent), event
        # Leave one stream in flight now and then so that the Overloaded path is exercised.
        if event.stream_id % 3:
            connection.send(ErrorResponse(ErrorCode.INVALID, "fuzz"), event.stream_id)


def check(data: bytes, chunk_size: int) -> None:
    whole = run(data, max(1, len(data)))
    chunked = run(data, chunk_size)
    assert whole == chunked


@_SETTINGS
@given(st.binary(max_size=600), st.integers(1, 16))
def test_random_bytes(data: bytes, chunk_size: int) -> None:
    check(data, chunk_size)


@_SETTINGS
@given(st.binary(max_size=400), st.integers(1, 16))
def test_random_bodies_behind_a_valid_v4_header(body: bytes, chunk_size: int) -> None:
    handshake = encode_message(Startup({"CQL_VERSION": "3.4.5"}), 0)
    opcode = body[0] % 0x12 if body else 0x07
    header = FrameHeader(4, body[1] if len(body) > 1 else 0, 1, opcode, len(body))
    check(handshake + header.encode() + body, chunk_size)


@st.composite
def mutated_sessions(draw: st.DrawFn) -> bytes:
    compression = draw(st.none() | st.just(Compression.LZ4))
    options = {"CQL_VERSION": "3.4.5"}
    if compression is not None:
        options["COMPRESSION"] = "lz4"
    frames = [encode_message(Options(), 0), encode_message(Startup(options), 1)]
    for stream_id, message in enumerate(draw(st.lists(requests, max_size=4)), start=2):
        frames.append(encode_message(message, stream_id, compression=compression))
    data = bytearray(b"".join(frames))
    for _ in range(draw(st.integers(1, 6))):
        if not data:
            break
        position = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "delete", "insert", "truncate"]))
        if action == "flip":
            data[position] ^= draw(st.integers(1, 255))
        elif action == "delete":
            del data[position]
        elif action == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[position:]
    return bytes(data)


@_SETTINGS
@given(mutated_sessions(), st.integers(1, 32))
def test_mutated_valid_sessions(data: bytes, chunk_size: int) -> None:
    check(data, chunk_size)


@_SETTINGS
@given(responses, st.data())
def test_mutated_responses_decode_or_raise_protocol_violation(
    message: object, data: st.DataObject
) -> None:
    """The reading half of the codec (for a future client or proxy) obeys the same rule."""
    encoded = bytearray(encode_message(message, 1))  # type: ignore[arg-type]
    body = encoded[HEADER_SIZE:]
    for _ in range(data.draw(st.integers(1, 4))):
        if body:
            position = data.draw(st.integers(0, len(body) - 1))
            body[position] ^= data.draw(st.integers(1, 255))
    header = FrameHeader(4, encoded[1], 1, encoded[4], len(body), is_response=True)
    with contextlib.suppress(ProtocolViolation):
        decode_message(Frame(header, bytes(body)), compression=Compression.LZ4)
