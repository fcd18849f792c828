"""Every request the Scylla Python driver can encode is decoded by ringflow into its fields.

The driver (``cassandra.protocol``) is the oracle: its bytes are what real clients send.
Two flags the driver never sets (SKIP_METADATA on QUERY, names for values) are checked
against bodies laid out by hand from spec §4.1.4.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

import pytest
from cassandra import ConsistencyLevel
from cassandra.protocol import (
    AuthResponseMessage,
    BatchMessage,
    ExecuteMessage,
    OptionsMessage,
    PrepareMessage,
    QueryMessage,
    RegisterMessage,
    StartupMessage,
)
from cassandra.query import UNSET_VALUE
from cassandra.query import BatchType as DriverBatchType

from ringflow.cql import (
    UNSET,
    AuthResponse,
    Batch,
    BatchStatement,
    BatchType,
    Compression,
    Consistency,
    DecodedMessage,
    EventType,
    Execute,
    FrameDecoder,
    Options,
    Prepare,
    Query,
    QueryParameters,
    Register,
    Startup,
    decode_message,
    encode_message,
)
from ringflow.errors import ProtocolViolation

from ._protocol_oracle import driver_frame


def decode(frame: bytes, compression: Compression | None = None) -> DecodedMessage:
    decoder = FrameDecoder()
    decoder.feed(frame)
    parsed = decoder.next_frame()
    assert parsed is not None
    assert decoder.next_frame() is None
    return decode_message(parsed, compression=compression)


def test_startup_options_and_compression_are_read() -> None:
    frame = driver_frame(StartupMessage("3.4.5", {"COMPRESSION": "lz4", "DRIVER_NAME": "d"}), 3)
    decoded = decode(frame)
    assert decoded.stream_id == 3
    assert decoded.message == Startup(
        {"COMPRESSION": "lz4", "DRIVER_NAME": "d", "CQL_VERSION": "3.4.5"}
    )
    assert isinstance(decoded.message, Startup)
    assert decoded.message.cql_version == "3.4.5"
    assert decoded.message.compression == "lz4"


def test_options_has_an_empty_body() -> None:
    assert decode(driver_frame(OptionsMessage(), 7)).message == Options()


def test_prepare_and_auth_response() -> None:
    assert decode(driver_frame(PrepareMessage("SELECT * FROM t WHERE k = ?"))).message == (
        Prepare("SELECT * FROM t WHERE k = ?")
    )
    assert decode(driver_frame(AuthResponseMessage(b"\x00user\x00pw"))).message == (
        AuthResponse(b"\x00user\x00pw")
    )


def test_register_reads_every_event_type() -> None:
    names = ["TOPOLOGY_CHANGE", "STATUS_CHANGE", "SCHEMA_CHANGE"]
    decoded = decode(driver_frame(RegisterMessage(names)))
    assert decoded.message == Register(tuple(EventType(name) for name in names))


def test_register_refuses_an_unknown_event_type() -> None:
    with pytest.raises(ProtocolViolation, match="invalid event type 'NOPE'"):
        decode(driver_frame(RegisterMessage(["SCHEMA_CHANGE", "NOPE"])))


_VALUES: list[list[Any] | None] = [None, [b"\x00\x00\x00\x01", None, UNSET_VALUE, b""]]
_COMBINATIONS = list(
    itertools.product(_VALUES, [None, 5000], [None, b"\x01page"], [None, 9], [None, 1_000_000])
)


def _expected_parameters(
    consistency: int,
    values: list[Any] | None,
    page_size: int | None,
    paging_state: bytes | None,
    serial: int | None,
    timestamp: int | None,
) -> QueryParameters:
    mapped = tuple(UNSET if value is UNSET_VALUE else value for value in values or ())
    return QueryParameters(
        consistency=Consistency(consistency),
        values=mapped,
        page_size=page_size,
        paging_state=paging_state,
        serial_consistency=None if serial is None else Consistency(serial),
        default_timestamp=timestamp,
    )


@pytest.mark.parametrize(
    ("values", "page_size", "paging_state", "serial", "timestamp"), _COMBINATIONS
)
def test_query_with_every_driver_flag_combination(
    values: list[Any] | None,
    page_size: int | None,
    paging_state: bytes | None,
    serial: int | None,
    timestamp: int | None,
) -> None:
    message = QueryMessage(
        "SELECT v FROM ks.t WHERE k = ?",
        ConsistencyLevel.LOCAL_QUORUM,
        serial_consistency_level=serial,
        fetch_size=page_size,
        paging_state=paging_state,
        timestamp=timestamp,
        query_params=values,
    )
    decoded = decode(driver_frame(message, 12))
    expected = _expected_parameters(
        ConsistencyLevel.LOCAL_QUORUM, values, page_size, paging_state, serial, timestamp
    )
    assert decoded.message == Query("SELECT v FROM ks.t WHERE k = ?", expected)
    assert decoded.stream_id == 12


@pytest.mark.parametrize(
    ("values", "page_size", "paging_state", "serial", "timestamp"), _COMBINATIONS
)
def test_execute_with_every_driver_flag_combination(
    values: list[Any] | None,
    page_size: int | None,
    paging_state: bytes | None,
    serial: int | None,
    timestamp: int | None,
) -> None:
    message = ExecuteMessage(
        b"\xca\xfe\xba\xbe" * 4,
        values,
        ConsistencyLevel.ONE,
        serial_consistency_level=serial,
        fetch_size=page_size,
        paging_state=paging_state,
        timestamp=timestamp,
    )
    decoded = decode(driver_frame(message, 300))
    expected = _expected_parameters(
        ConsistencyLevel.ONE, values, page_size, paging_state, serial, timestamp
    )
    assert decoded.message == Execute(b"\xca\xfe\xba\xbe" * 4, expected)


def test_every_consistency_level_is_read() -> None:
    for level in Consistency:
        decoded = decode(driver_frame(QueryMessage("SELECT 1", int(level))))
        assert isinstance(decoded.message, Query)
        assert decoded.message.parameters.consistency is level


def test_tracing_and_custom_payload_flags_on_a_request() -> None:
    message = QueryMessage("SELECT 1", ConsistencyLevel.ONE)
    message.tracing = True
    message.custom_payload = {"proxy": b"\x01\x02", "empty": b""}
    decoded = decode(driver_frame(message, 4))
    assert decoded.tracing is True
    assert decoded.tracing_id is None
    assert decoded.custom_payload == {"proxy": b"\x01\x02", "empty": b""}
    assert decoded.message == Query("SELECT 1", QueryParameters(Consistency.ONE))


def test_batch_of_every_type_with_query_and_prepared_statements() -> None:
    for driver_type, batch_type in zip(
        (DriverBatchType.LOGGED, DriverBatchType.UNLOGGED, DriverBatchType.COUNTER),
        BatchType,
        strict=True,
    ):
        queries = [
            (False, "INSERT INTO t (k, v) VALUES (?, ?)", [b"\x01", None]),
            (True, b"\x10\x20", [UNSET_VALUE]),
            (False, "DELETE FROM t WHERE k = 1", []),
        ]
        message = BatchMessage(driver_type, queries, ConsistencyLevel.QUORUM, 9, 1234567)
        decoded = decode(driver_frame(message, 2))
        assert decoded.message == Batch(
            batch_type,
            (
                BatchStatement("INSERT INTO t (k, v) VALUES (?, ?)", (b"\x01", None)),
                BatchStatement(b"\x10\x20", (UNSET,)),
                BatchStatement("DELETE FROM t WHERE k = 1"),
            ),
            Consistency.QUORUM,
            Consistency.LOCAL_SERIAL,
            1234567,
        )


def test_batch_without_optional_flags() -> None:
    message = BatchMessage(DriverBatchType.UNLOGGED, [(True, b"id", [])], ConsistencyLevel.ALL)
    decoded = decode(driver_frame(message))
    assert decoded.message == Batch(BatchType.UNLOGGED, (BatchStatement(b"id"),), Consistency.ALL)


def test_compressed_requests_from_the_driver() -> None:
    message = QueryMessage("SELECT * FROM ks.t" + " " * 500, 1, query_params=[b"x" * 300])
    frame = driver_frame(message, 9, compress=True)
    assert frame[1] & 0x01, "the driver compressed the body"
    decoded = decode(frame, Compression.LZ4)
    assert decoded.message == Query(
        "SELECT * FROM ks.t" + " " * 500,
        QueryParameters(Consistency.ONE, values=(b"x" * 300,)),
    )


def test_compressed_request_without_negotiated_compression_is_refused() -> None:
    frame = driver_frame(QueryMessage("SELECT 1", 1), compress=True)
    with pytest.raises(ProtocolViolation, match="no compression was negotiated"):
        decode(frame)


def _hand_made_query(flags: int, tail: bytes) -> bytes:
    """A QUERY frame laid out from spec §4.1.4, independent of ringflow's writer."""
    query = b"SELECT ?"
    body = struct.pack(">i", len(query)) + query + struct.pack(">HB", 0x0001, flags) + tail
    return struct.pack(">BBhBi", 0x04, 0, 5, 0x07, len(body)) + body


def test_names_for_values_and_skip_metadata_from_a_hand_made_body() -> None:
    values = struct.pack(">H", 2)
    values += struct.pack(">H", 1) + b"a" + struct.pack(">i", 1) + b"\x07"
    values += struct.pack(">H", 1) + b"b" + struct.pack(">i", -2)
    frame = _hand_made_query(0x01 | 0x02 | 0x40, values)
    decoded = decode(frame)
    expected = QueryParameters(
        Consistency.ONE, values=(b"\x07", UNSET), names=("a", "b"), skip_metadata=True
    )
    assert decoded.message == Query("SELECT ?", expected)
    assert encode_message(decoded.message, 5) == frame


def test_unknown_query_flags_are_refused() -> None:
    with pytest.raises(ProtocolViolation, match="unknown query flags 0x80"):
        decode(_hand_made_query(0x80, b"\x00\x02ks"))


def test_value_length_below_minus_two_is_refused() -> None:
    frame = _hand_made_query(0x01, struct.pack(">Hi", 1, -3))
    with pytest.raises(ProtocolViolation, match="invalid \\[value\\] length -3"):
        decode(frame)


def test_batch_statement_kind_ff_is_refused() -> None:
    """Scylla's test_protocol_exceptions sends a BATCH whose statement kind is 0xFF."""
    body = struct.pack(">BHB", 0, 1, 0xFF) + b"\x00" * 8
    frame = struct.pack(">BBhBi", 0x04, 0, 1, 0x0D, len(body)) + body
    with pytest.raises(ProtocolViolation, match="invalid BATCH statement kind 255"):
        decode(frame)


def test_batch_names_for_values_flag_is_refused() -> None:
    good = encode_message(Batch(BatchType.LOGGED, (), Consistency.ONE), 1)
    frame = good[:-1] + b"\x40"
    with pytest.raises(ProtocolViolation, match="BATCH flags 0x40"):
        decode(frame)
