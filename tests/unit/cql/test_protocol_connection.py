"""ServerConnection: the handshake, per-stream refusals, limits, fatal errors, compression.

Frames come from the Scylla Python driver wherever it can make them; replies are read back
with the driver. Every test ends with ``validate()`` on the connection.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from cassandra import ConsistencyLevel
from cassandra.protocol import (
    ErrorMessage,
    OptionsMessage,
    OverloadedErrorMessage,
    PrepareMessage,
    ProtocolException,
    QueryMessage,
    ReadyMessage,
    RegisterMessage,
    ResultMessage,
    StartupMessage,
    SupportedMessage,
)

from ringflow.cql import (
    NEED_DATA,
    ColumnSpec,
    Compression,
    ConnectionClosed,
    ConnectionEvent,
    ConnectionState,
    Consistency,
    EventType,
    LocalProtocolError,
    Options,
    ProtocolErrorEvent,
    Query,
    QueryParameters,
    Ready,
    Register,
    RequestEvent,
    RowsMetadata,
    RowsResult,
    ServerConnection,
    Startup,
    StatusChangeEvent,
    StatusChangeType,
    Supported,
    VoidResult,
    encode_message,
)
from ringflow.cql import Inet as CqlInet
from ringflow.errors import ErrorCode
from ringflow.schema import TEXT

from ._protocol_oracle import driver_decode, driver_frame, ready_connection


@pytest.fixture
def connection() -> Iterator[ServerConnection]:
    created = ServerConnection()
    yield created
    created.validate()


def feed(connection: ServerConnection, data: bytes) -> ConnectionEvent:
    connection.receive_data(data)
    event = connection.next_event()
    connection.validate()
    return event


def refusal(event: ConnectionEvent) -> ProtocolErrorEvent:
    assert isinstance(event, ProtocolErrorEvent), event
    return event


def test_driver_handshake_options_then_startup(connection: ServerConnection) -> None:
    options = feed(connection, driver_frame(OptionsMessage(), 0))
    assert options == RequestEvent(0, Options())
    supported = driver_decode(connection.send(Supported.for_node(), 0))
    assert isinstance(supported, SupportedMessage)
    startup = feed(connection, driver_frame(StartupMessage("3.4.5", {"DRIVER_NAME": "x"}), 1))
    assert isinstance(startup, RequestEvent)
    assert isinstance(startup.request, Startup)
    assert connection.state is ConnectionState.READY
    assert isinstance(driver_decode(connection.send(Ready(), 1)), ReadyMessage)
    assert connection.in_flight == frozenset()
    assert feed(connection, b"") == ConnectionClosed()
    assert connection.state is ConnectionState.CLOSED


@pytest.mark.parametrize(
    "message",
    [
        QueryMessage("SELECT 1", ConsistencyLevel.ONE),
        PrepareMessage("SELECT 1"),
        RegisterMessage(["SCHEMA_CHANGE"]),
    ],
)
def test_requests_before_startup_are_refused_per_stream(
    connection: ServerConnection, message: object
) -> None:
    event = refusal(feed(connection, driver_frame(message, 17)))
    name = type(message).__name__.removesuffix("Message").upper()
    assert event.stream_id == 17
    assert not event.fatal
    assert event.error.code == ErrorCode.PROTOCOL_ERROR
    assert event.error.message == f"Unexpected message {name}, expecting STARTUP or OPTIONS"
    reply = driver_decode(connection.send(event.error, event.stream_id))
    assert isinstance(reply, ProtocolException)
    assert reply.stream_id == 17
    assert connection.state is ConnectionState.EXPECTING_STARTUP
    assert isinstance(feed(connection, driver_frame(OptionsMessage(), 18)), RequestEvent)


def test_startup_without_cql_version_is_refused(connection: ServerConnection) -> None:
    event = refusal(feed(connection, encode_message(Startup({}), 0)))
    assert event.error.message == "Missing value CQL_VERSION in STARTUP message"
    assert connection.state is ConnectionState.EXPECTING_STARTUP


def test_startup_with_cql_2_is_refused(connection: ServerConnection) -> None:
    event = refusal(feed(connection, driver_frame(StartupMessage("2.0.0", {}), 0)))
    assert "Invalid value '2.0.0' for CQL_VERSION" in event.error.message


def test_startup_with_snappy_is_refused_and_lz4_is_accepted(connection: ServerConnection) -> None:
    startup = StartupMessage("3.4.5", {"COMPRESSION": "snappy"})
    event = refusal(feed(connection, driver_frame(startup, 0)))
    assert event.error.message == "Unknown compression algorithm: snappy (supported: lz4)"
    assert connection.compression is None
    accepted = feed(connection, driver_frame(StartupMessage("3.4.5", {"COMPRESSION": "lz4"}), 1))
    assert isinstance(accepted, RequestEvent)
    assert connection.compression is Compression.LZ4


def test_second_startup_is_refused() -> None:
    connection = ready_connection()
    event = refusal(feed(connection, driver_frame(StartupMessage("3.4.5", {}), 4)))
    assert (
        event.error.message == "Unexpected message STARTUP, the connection is already initialized"
    )
    connection.validate()


def test_lz4_is_used_both_ways_after_startup() -> None:
    connection = ready_connection(compression=Compression.LZ4)
    event = feed(connection, driver_frame(QueryMessage("SELECT v FROM t", 1), 3, compress=True))
    assert isinstance(event, RequestEvent)
    assert event.request == Query("SELECT v FROM t", QueryParameters(Consistency.ONE))
    rows = RowsResult(RowsMetadata.describing([ColumnSpec("ks", "t", "v", TEXT)]), ((b"abc",),))
    frame = connection.send(rows, 3)
    assert frame[1] & 0x01, "response body compressed"
    decoded = driver_decode(frame, decompress=True)
    assert isinstance(decoded, ResultMessage)
    assert decoded.parsed_rows == [("abc",)]
    assert feed(connection, driver_frame(OptionsMessage(), 4)) == RequestEvent(4, Options())
    connection.validate()


def test_stream_ids_are_echoed_and_pipelined_requests_all_surface() -> None:
    connection = ready_connection()
    data = b"".join(
        driver_frame(QueryMessage(f"SELECT {i}", 1), stream_id)
        for i, stream_id in enumerate((5, 32767, 0, 1000))
    )
    connection.receive_data(data)
    events = [connection.next_event() for _ in range(4)]
    assert [e.stream_id for e in events if isinstance(e, RequestEvent)] == [5, 32767, 0, 1000]
    assert connection.next_event() is NEED_DATA
    assert connection.in_flight == {5, 32767, 0, 1000}
    for stream_id in (1000, 5):
        assert driver_decode(connection.send(VoidResult(), stream_id)).stream_id == stream_id
    assert connection.in_flight == {32767, 0}
    connection.validate()


def test_too_many_requests_in_flight_gives_overloaded_for_that_stream() -> None:
    connection = ready_connection(max_in_flight=2)
    for stream_id in (1, 2):
        assert isinstance(feed(connection, driver_frame(OptionsMessage(), stream_id)), RequestEvent)
    event = refusal(feed(connection, driver_frame(OptionsMessage(), 3)))
    assert (event.stream_id, event.error.code, event.fatal) == (3, ErrorCode.OVERLOADED, False)
    assert isinstance(driver_decode(connection.send(event.error, 3)), OverloadedErrorMessage)
    connection.send(Supported.for_node(), 1)
    assert isinstance(feed(connection, driver_frame(OptionsMessage(), 3)), RequestEvent)
    connection.validate()


def test_a_stream_id_already_in_flight_is_refused() -> None:
    connection = ready_connection()
    assert isinstance(feed(connection, driver_frame(OptionsMessage(), 9)), RequestEvent)
    event = refusal(feed(connection, driver_frame(OptionsMessage(), 9)))
    assert event.error.message == "Stream id 9 is already in use"


def test_malformed_body_is_refused_and_the_connection_goes_on() -> None:
    connection = ready_connection()
    good = driver_frame(QueryMessage("SELECT 1", 1), 6)
    bad_body = good[9:-3]  # cut the consistency and flags short
    bad = struct.pack(">BBhBi", 0x04, 0, 6, 0x07, len(bad_body)) + bad_body
    event = refusal(feed(connection, bad + good))
    assert event.stream_id == 6
    assert not event.fatal
    assert event.error.message.startswith("Invalid QUERY message: truncated body")
    assert isinstance(connection.next_event(), RequestEvent)
    connection.validate()


def test_unknown_opcode_and_response_opcodes_are_refused() -> None:
    connection = ready_connection()
    unknown = struct.pack(">BBhBi", 0x04, 0, 2, 0x42, 0)
    assert refusal(feed(connection, unknown)).error.message == "Unknown opcode 0x42"
    result = struct.pack(">BBhBi", 0x04, 0, 3, 0x08, 4) + b"\x00\x00\x00\x01"
    assert refusal(feed(connection, result)).error.message == (
        "Unexpected message RESULT: it is not a request"
    )
    response_frame = encode_message(VoidResult(), 4)
    assert "response frame" in refusal(feed(connection, response_frame)).error.message
    assert connection.state is ConnectionState.READY


def test_negative_stream_id_is_refused() -> None:
    connection = ready_connection()
    event = refusal(feed(connection, driver_frame(OptionsMessage(), -5)))
    assert event.stream_id == -5
    assert "negative ids are reserved" in event.error.message


def test_garbage_header_is_fatal_and_closes() -> None:
    connection = ready_connection()
    garbage = struct.pack(">BBhBi", 0x04, 0, 8, 0x07, -1)
    event = refusal(feed(connection, garbage + b"more bytes"))
    assert event.fatal
    assert event.stream_id == 8
    assert event.error.code == ErrorCode.PROTOCOL_ERROR
    assert connection.state is ConnectionState.CLOSED
    assert isinstance(driver_decode(connection.send(event.error, 8)), ProtocolException)
    connection.receive_data(driver_frame(OptionsMessage(), 9))
    assert connection.next_event() == ConnectionClosed()
    connection.validate()


def test_frame_too_large_is_refused_without_buffering_and_the_connection_closes() -> None:
    """Issue 16: a frame over the limit is answered with a protocol error and the connection
    closed; neither its body nor anything after it is buffered."""
    connection = ready_connection(max_frame_size=1024)
    big = driver_frame(QueryMessage("x" * 5000, 1), 21)
    following = driver_frame(OptionsMessage(), 22)
    events: list[ConnectionEvent] = []
    for byte in big + following:
        connection.receive_data(bytes([byte]))
        event = connection.next_event()
        if event is not NEED_DATA and not isinstance(event, ConnectionClosed):
            events.append(event)
        assert connection._decoder.buffered_size <= 9 + 1024
        assert connection.held_bytes <= 9 + 1024
    assert len(events) == 1
    first = refusal(events[0])
    assert first.stream_id == 21
    assert first.fatal
    assert first.error.message == (
        f"Request is too big: length {len(big) - 9} exceeds maximum allowed length 1024"
    )
    assert connection.state is ConnectionState.CLOSED
    assert isinstance(connection.next_event(), ConnectionClosed)
    connection.validate()


def test_held_bytes_count_an_announced_frame_and_requests_until_answered() -> None:
    connection = ready_connection()
    frame = driver_frame(QueryMessage("SELECT 1", ConsistencyLevel.ONE), 5)
    connection.receive_data(frame[:12])
    assert connection.next_event() is NEED_DATA
    assert connection.held_bytes == len(frame), "the whole announced frame, from its header on"
    assert connection.frame_in_progress
    connection.receive_data(frame[12:])
    assert isinstance(connection.next_event(), RequestEvent)
    assert connection.held_bytes == len(frame), "held while the request is in flight"
    assert not connection.frame_in_progress
    connection.send(VoidResult(), 5)
    assert connection.held_bytes == 0
    connection.validate()


def test_lz4_body_announcing_more_than_the_frame_limit_is_refused() -> None:
    connection = ready_connection(compression=Compression.LZ4, max_frame_size=4096)
    body = struct.pack(">i", 10_000) + b"\x00" * 64
    frame = struct.pack(">BBhBi", 0x04, 0x01, 3, 0x05, len(body)) + body
    event = refusal(feed(connection, frame))
    assert "uncompressed bytes (limit 4096)" in event.error.message
    assert not event.fatal


def test_request_tracing_and_custom_payload_reach_the_event() -> None:
    connection = ready_connection()
    message = QueryMessage("SELECT 1", ConsistencyLevel.ONE)
    message.tracing = True
    message.custom_payload = {"k": b"v"}
    event = feed(connection, driver_frame(message, 2))
    assert isinstance(event, RequestEvent)
    assert event.tracing
    assert event.custom_payload == {"k": b"v"}


def test_register_then_push_an_event_on_stream_minus_one() -> None:
    connection = ready_connection()
    event = feed(connection, driver_frame(RegisterMessage(["STATUS_CHANGE"]), 1))
    assert isinstance(event, RequestEvent)
    assert event.request == Register((EventType.STATUS_CHANGE,))
    assert isinstance(driver_decode(connection.send(Ready(), 1)), ReadyMessage)
    from ipaddress import ip_address

    push = StatusChangeEvent(StatusChangeType.UP, CqlInet(ip_address("10.0.0.1"), 9042))
    pushed = driver_decode(connection.send(push, -1))
    assert (pushed.stream_id, pushed.event_args["change_type"]) == (-1, "UP")
    with pytest.raises(LocalProtocolError, match="must be -1"):
        connection.send(push, 1)


def test_sending_a_request_is_a_local_error() -> None:
    connection = ready_connection()
    with pytest.raises(LocalProtocolError, match="cannot send request"):
        connection.send(Options(), 0)  # type: ignore[arg-type]


def test_receive_after_eof_is_a_local_error(connection: ServerConnection) -> None:
    connection.receive_data(b"")
    with pytest.raises(LocalProtocolError, match="after EOF"):
        connection.receive_data(b"x")


def test_eof_with_a_partial_frame_closes(connection: ServerConnection) -> None:
    connection.receive_data(driver_frame(OptionsMessage(), 0)[:5])
    assert connection.next_event() is NEED_DATA
    connection.receive_data(b"")
    assert connection.next_event() == ConnectionClosed()


def test_story_records_transitions_and_refusals() -> None:
    connection = ServerConnection()
    feed(connection, driver_frame(QueryMessage("SELECT 1", 1), 1))
    feed(connection, driver_frame(StartupMessage("3.4.5", {}), 2))
    story = connection.story()
    assert story[0].startswith("EXPECTING_STARTUP: refused stream 1")
    assert story[1] == "EXPECTING_STARTUP -> READY on STARTUP"


# --- protocol version negotiation, as the driver does it -------------------------------------


def _driver_would_downgrade(reply: object) -> bool:
    """The test in cassandra/connection.py ``process_msg`` that marks a connection as
    ``is_unsupported_proto_version`` (which makes ``Connection.factory`` raise
    ``ProtocolVersionUnsupported`` and ``Cluster.protocol_downgrade`` pick v4)."""
    return isinstance(reply, ProtocolException) and (
        "unsupported protocol version" in reply.message
    )


@pytest.mark.parametrize("version", [5, 3])
def test_driver_v5_or_v3_options_gets_an_error_in_its_own_version(version: int) -> None:
    connection = ServerConnection()
    event = refusal(feed(connection, driver_frame(OptionsMessage(), 3, version=version)))
    assert event.fatal
    assert event.stream_id == 3
    assert event.error.message == (
        f"Invalid or unsupported protocol version ({version}); supported versions are (4/v4)"
    )
    frame = connection.send(event.error, event.stream_id)
    assert frame[0] == 0x80 | version, "framed in the client's version"
    reply = driver_decode(frame)
    assert reply.stream_id == 3
    assert _driver_would_downgrade(reply)
    assert connection.next_event() == ConnectionClosed()
    connection.validate()


def test_v5_with_the_beta_flag_is_refused_the_same_way() -> None:
    connection = ServerConnection()
    frame = driver_frame(StartupMessage("3.4.5", {}), 0, version=5, beta=True)
    assert frame[1] & 0x10
    event = refusal(feed(connection, frame))
    reply = driver_decode(connection.send(event.error, 0))
    assert _driver_would_downgrade(reply)


def test_v4_with_the_beta_flag_is_accepted() -> None:
    connection = ServerConnection()
    frame = driver_frame(OptionsMessage(), 0, beta=True)
    assert feed(connection, frame) == RequestEvent(0, Options())


@pytest.mark.parametrize("version", [1, 2])
def test_legacy_v1_v2_header_is_answered_in_the_8_byte_layout(version: int) -> None:
    connection = ServerConnection()
    legacy_options = struct.pack(">BBbBi", version, 0, 7, 0x05, 0)
    event = refusal(feed(connection, legacy_options))
    assert event.stream_id == 7
    frame = connection.send(event.error, 7)
    assert frame[:4] == bytes([0x80 | version, 0, 7, 0x00])
    (length,) = struct.unpack(">i", frame[4:8])
    assert length == len(frame) - 8


def test_version_42_is_refused_with_its_stream() -> None:
    """Scylla's test_protocol_exceptions sends protocol version 42."""
    connection = ServerConnection()
    event = refusal(feed(connection, struct.pack(">BBhBi", 42, 0, 1, 0x05, 0)))
    assert event.fatal
    assert "(42)" in event.error.message
    assert connection.send(event.error, 1)[0] == 0x80 | 42


def test_mid_connection_version_change_is_fatal() -> None:
    connection = ready_connection()
    event = refusal(feed(connection, driver_frame(OptionsMessage(), 5, version=5)))
    assert event.fatal
    assert connection.send(event.error, 5)[0] == 0x85
    assert isinstance(driver_decode(connection.send(VoidResult(), 6)), ResultMessage)


def test_every_error_reply_is_a_driver_error_message() -> None:
    connection = ServerConnection()
    event = refusal(feed(connection, driver_frame(QueryMessage("SELECT 1", 1), 1)))
    assert isinstance(driver_decode(connection.send(event.error, 1)), ErrorMessage)
