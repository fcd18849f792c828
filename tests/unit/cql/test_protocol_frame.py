"""Frames and primitives: header layout, the incremental decoder's limits, LZ4, [notation].

Proves: headers are the spec's 9 bytes (8 for refused v1/v2); the decoder hands out exactly
the frames fed, however the bytes are chunked; oversized bodies are skipped, not buffered;
untrustworthy headers are fatal; LZ4 bodies match the driver's and bombs are refused; every
primitive reader fails with ProtocolViolation only.
"""

from __future__ import annotations

import struct
from ipaddress import ip_address
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cql import (
    UNSET,
    Consistency,
    FrameDecoder,
    FrameError,
    FrameHeader,
    FrameTooLarge,
    Inet,
    LocalProtocolError,
    Reader,
    UnsupportedProtocolVersion,
    Writer,
    compress_lz4,
    decompress_lz4,
)
from ringflow.errors import ProtocolViolation

from ._protocol_oracle import DRIVER_LZ4_COMPRESS, DRIVER_LZ4_DECOMPRESS


def test_header_layout_matches_spec_section_2() -> None:
    header = FrameHeader(4, 0x0A, -1, 0x0C, 258, is_response=True)
    assert header.encode() == bytes([0x84, 0x0A, 0xFF, 0xFF, 0x0C, 0, 0, 1, 2])
    assert FrameHeader(4, 0, 300, 0x07, 0).encode() == bytes(
        [0x04, 0, 0x01, 0x2C, 0x07, 0, 0, 0, 0]
    )


def test_header_refuses_values_it_cannot_carry() -> None:
    with pytest.raises(LocalProtocolError):
        FrameHeader(4, 0, 40000, 0x07, 0)
    with pytest.raises(LocalProtocolError):
        FrameHeader(4, 0, 0, 0x07, -1)
    with pytest.raises(LocalProtocolError):
        FrameHeader(2, 0, 200, 0x00, 0)


def test_decoder_returns_header_and_body() -> None:
    decoder = FrameDecoder()
    decoder.feed(FrameHeader(4, 0x02, 7, 0x07, 3).encode() + b"abc" + b"\x04")
    frame = decoder.next_frame()
    assert frame is not None
    assert (frame.header.stream_id, frame.header.flags, frame.header.opcode) == (7, 0x02, 0x07)
    assert frame.body == b"abc"
    assert not frame.header.is_response
    assert decoder.next_frame() is None
    assert decoder.buffered_size == 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=5), st.data())
def test_decoder_is_independent_of_chunking(bodies: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(
        FrameHeader(4, 0, index, 0x05, len(body)).encode() + body
        for index, body in enumerate(bodies)
    )
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = FrameDecoder()
    received: list[bytes] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        decoder.feed(stream[start:end])
        while (frame := decoder.next_frame()) is not None:
            received.append(frame.body)
    assert received == bodies


def test_too_large_frame_is_skipped_and_never_buffered() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(FrameHeader(4, 0, 3, 0x07, 1000).encode() + b"x" * 10)
    with pytest.raises(FrameTooLarge) as refused:
        decoder.next_frame()
    assert (refused.value.stream_id, refused.value.fatal, refused.value.version) == (3, False, 4)
    assert decoder.buffered_size == 0
    for _ in range(99):
        decoder.feed(b"x" * 10)
        assert decoder.next_frame() is None
        assert decoder.buffered_size == 0
    decoder.feed(FrameHeader(4, 0, 4, 0x05, 0).encode())
    frame = decoder.next_frame()
    assert frame is not None
    assert frame.header.stream_id == 4


def test_negative_length_is_fatal_for_good() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">BBhBi", 4, 0, 9, 7, -5))
    with pytest.raises(FrameError) as refused:
        decoder.next_frame()
    assert refused.value.fatal
    assert refused.value.stream_id == 9
    decoder.feed(FrameHeader(4, 0, 1, 0x05, 0).encode())
    with pytest.raises(FrameError):
        decoder.next_frame()


def test_other_versions_are_refused_unless_any_version_is_expected() -> None:
    v5 = struct.pack(">BBhBi", 0x05, 0x10, 12, 0x05, 0)
    decoder = FrameDecoder()
    decoder.feed(v5)
    with pytest.raises(UnsupportedProtocolVersion) as refused:
        decoder.next_frame()
    assert (refused.value.version, refused.value.stream_id, refused.value.fatal) == (5, 12, True)
    lenient = FrameDecoder(expected_version=None)
    lenient.feed(v5)
    frame = lenient.next_frame()
    assert frame is not None
    assert frame.header.version == 5


def test_decoder_limit_must_be_positive() -> None:
    with pytest.raises(LocalProtocolError):
        FrameDecoder(max_frame_size=0)


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=3000))
def test_lz4_matches_the_driver_both_ways(body: bytes) -> None:
    if body:  # the driver never compresses an empty body
        assert DRIVER_LZ4_DECOMPRESS(compress_lz4(body)) == body
        assert decompress_lz4(DRIVER_LZ4_COMPRESS(body), 2**20) == body
    assert decompress_lz4(compress_lz4(body), 2**20) == body


def test_lz4_bombs_and_corruption_are_protocol_violations() -> None:
    with pytest.raises(ProtocolViolation, match="limit 1000"):
        decompress_lz4(compress_lz4(b"\x00" * 2000), 1000)
    with pytest.raises(ProtocolViolation, match="from a 1-byte block"):
        decompress_lz4(struct.pack(">i", 100_000) + b"\x00", 2**20)
    with pytest.raises(ProtocolViolation, match="corrupt LZ4 body"):
        decompress_lz4(struct.pack(">i", 20) + b"\xff\xff\xff\xff", 2**20)
    with pytest.raises(ProtocolViolation, match="inflated to 5 bytes, announced 9"):
        decompress_lz4(struct.pack(">i", 9) + compress_lz4(b"hello")[4:], 2**20)
    with pytest.raises(ProtocolViolation, match="no length prefix"):
        decompress_lz4(b"\x00\x01", 2**20)


def test_every_primitive_writes_what_it_reads() -> None:
    out = Writer()
    out.write_byte(255)
    out.write_short(65535)
    out.write_int(-(2**31))
    out.write_long(2**63 - 1)
    out.write_string("ünï")
    out.write_long_string("long")
    out.write_uuid(UUID(int=7))
    out.write_string_list(["a", "b"])
    out.write_bytes(None)
    out.write_value(UNSET)
    out.write_value(b"v")
    out.write_short_bytes(b"id")
    out.write_inet(Inet(ip_address("::1"), 9042))
    out.write_consistency(Consistency.EACH_QUORUM)
    out.write_string_map({"k": "v"})
    out.write_string_multimap({"k": ["v1", "v2"]})
    out.write_bytes_map({"k": None, "j": b""})
    reader = Reader(out.getvalue())
    assert reader.read_byte() == 255
    assert reader.read_short() == 65535
    assert reader.read_int() == -(2**31)
    assert reader.read_long() == 2**63 - 1
    assert reader.read_string() == "ünï"
    assert reader.read_long_string() == "long"
    assert reader.read_uuid() == UUID(int=7)
    assert reader.read_string_list() == ("a", "b")
    assert reader.read_bytes() is None
    assert reader.read_value() is UNSET
    assert reader.read_value() == b"v"
    assert reader.read_short_bytes() == b"id"
    assert reader.read_inet() == Inet(ip_address("::1"), 9042)
    assert reader.read_consistency() is Consistency.EACH_QUORUM
    assert reader.read_string_map() == {"k": "v"}
    assert reader.read_string_multimap() == {"k": ("v1", "v2")}
    assert reader.read_bytes_map() == {"k": None, "j": b""}
    assert reader.remaining == 0


@pytest.mark.parametrize(
    ("data", "read", "message"),
    [
        (b"\x00", Reader.read_short, "truncated body"),
        (b"\x00\x03ab", Reader.read_string, "truncated body"),
        (b"\x00\x02\xff\xfe", Reader.read_string, "not valid UTF-8"),
        (b"\xff\xff\xff\xff", Reader.read_long_string, "negative \\[long string\\]"),
        (b"\xff\xff\xff\xfd", Reader.read_value, "invalid \\[value\\] length -3"),
        (b"\x05\x01\x02\x03\x04\x05\x00\x00\x00\x01", Reader.read_inet, "address size 5"),
        (b"\x00\x0b", Reader.read_consistency, "unknown consistency level 0x000b"),
        (b"\x7f\xff\xff\xff", Reader.read_bytes, "truncated body"),
    ],
)
def test_reader_failures_are_protocol_violations(data: bytes, read: object, message: str) -> None:
    with pytest.raises(ProtocolViolation, match=message):
        read(Reader(data))  # type: ignore[operator]


def test_writer_refuses_what_the_notation_cannot_carry() -> None:
    with pytest.raises(LocalProtocolError, match="\\[short\\] value 70000"):
        Writer().write_string("x" * 70000)
    with pytest.raises(LocalProtocolError, match="\\[int\\]"):
        Writer().write_int(2**31)
    with pytest.raises(LocalProtocolError, match="\\[byte\\]"):
        Writer().write_byte(-1)


def test_count_refuses_more_items_than_the_body_can_hold() -> None:
    with pytest.raises(ProtocolViolation, match="count 1000"):
        Reader(struct.pack(">i", 1000) + b"\x00" * 10).read_count("row", 4)


def test_a_large_body_is_gathered_apart_and_handed_out_whole_in_order() -> None:
    """Issue 16: a body of a MiB or more is never copied whole; the frames around it keep
    their order, and the decoder announces the large frame's size from its header on."""
    large_body = bytes(range(256)) * 8192  # 2 MiB
    small = FrameHeader(4, 0, 2, 0x05, 3).encode() + b"abc"
    stream = FrameHeader(4, 0, 1, 0x07, len(large_body)).encode() + large_body + small
    decoder = FrameDecoder()
    frames = []
    for offset in range(0, len(stream), 70_001):
        decoder.feed(stream[offset : offset + 70_001])
        if offset == 0:
            assert decoder.wanted_size == 9 + len(large_body)
            assert decoder.frame_in_progress
        while (frame := decoder.next_frame()) is not None:
            frames.append(frame)
        assert decoder.buffered_size <= len(large_body) + 9 + 70_001
    assert [frame.header.stream_id for frame in frames] == [1, 2]
    assert bytes(frames[0].body) == large_body and isinstance(frames[0].body, bytearray)
    assert frames[1].body == b"abc"
    assert decoder.buffered_size == 0 and decoder.wanted_size == 0
    assert not decoder.frame_in_progress
    reader = Reader(frames[0].body)
    taken = reader.read_raw(4, "test")
    assert taken == large_body[:4] and type(taken) is bytes
