"""StreamId: the 128-bit layout of scylla-cdc.md §1, its golden vectors, versions and ordering."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.cdc import InvalidStreamId, StreamId
from ringflow.errors import ErrorCode

# (hex id, token, version, index, random38): the decode table of §1 (ids from Scylla's docs).
GOLDEN_DECODE = [
    ("7ffe0c687fcce86e0783343730000001", 9222822729861621870, 1, 0, 8066502092),
    ("80000000000000010d9ee5f1f4000001", -9223372036854775807, 1, 0, 14625111165),
    ("800555555555555653e250f2d8000001", -9221870836978985642, 1, 0, 90069810358),
    ("807ae73e07dbd4122e32d36e08000011", -9188777836090239982, 1, 1, 49605303170),
    ("ced00000000000009663c8dc500005a1", -3544332906740580352, 1, 90, 161479800596),
    ("ffffffffffffffff50e84c99d4000001", -1, 1, 0, 86873679477),
    ("7fffffffffffffff55ebbda510000001", 9223372036854775807, 1, 0, 92256823620),
]

# (token, index, random38, hex id): the encode vectors of §1.
GOLDEN_ENCODE = [
    (-5999999999999999999, 0, 0x2A, "acbbb7ca13a8000100000000a8000001"),
    (-1, 5, 2**38 - 1, "fffffffffffffffffffffffffc000051"),
    (2**63 - 1, 2**22 - 1, 0, "7fffffffffffffff0000000003fffff1"),
]

TOKENS = st.integers(-(2**63), 2**63 - 1)
INDICES = st.integers(0, 2**22 - 1)
RANDOMS = st.integers(0, 2**38 - 1)


@pytest.mark.parametrize(("hex_id", "token", "version", "index", "random_bits"), GOLDEN_DECODE)
def test_golden_ids_decode_to_the_published_fields(
    hex_id: str, token: int, version: int, index: int, random_bits: int
) -> None:
    stream = StreamId.from_bytes(bytes.fromhex(hex_id))
    assert (stream.token, stream.version, stream.index, stream.random_bits) == (
        token,
        version,
        index,
        random_bits,
    )
    assert stream.vnode_index == index


@pytest.mark.parametrize(("hex_id", "token", "version", "index", "random_bits"), GOLDEN_DECODE)
def test_golden_fields_encode_to_the_published_ids(
    hex_id: str, token: int, version: int, index: int, random_bits: int
) -> None:
    assert version == 1
    assert StreamId.create(token, index, random_bits).to_bytes().hex() == hex_id


@pytest.mark.parametrize(("token", "index", "random_bits", "hex_id"), GOLDEN_ENCODE)
def test_encode_vectors(token: int, index: int, random_bits: int, hex_id: str) -> None:
    stream = StreamId.create(token, index, random_bits)
    assert stream.to_bytes() == bytes.fromhex(hex_id)
    assert str(stream) == hex_id
    assert repr(stream) == f"StreamId(0x{hex_id})"


@given(TOKENS, INDICES, RANDOMS)
def test_create_then_decode_round_trips(token: int, index: int, random_bits: int) -> None:
    stream = StreamId.create(token, index, random_bits)
    decoded = StreamId.from_bytes(stream.to_bytes())
    assert decoded == stream
    assert hash(decoded) == hash(stream)
    assert (decoded.token, decoded.index, decoded.random_bits, decoded.version) == (
        token,
        index,
        random_bits,
        1,
    )
    assert StreamId.from_parts(decoded.token, decoded.low) == stream


@given(st.binary(min_size=16, max_size=16))
def test_bytes_round_trip_for_any_version(data: bytes) -> None:
    stream = StreamId.from_bytes(data, accept_any_version=True)
    assert stream.to_bytes() == data
    assert stream.version == data[15] & 0xF
    assert stream.token == int.from_bytes(data[:8], "big", signed=True)


@given(st.lists(st.binary(min_size=16, max_size=16), min_size=2, max_size=6))
def test_ordering_is_unsigned_byte_order(blobs: list[bytes]) -> None:
    streams = [StreamId.from_bytes(blob, accept_any_version=True) for blob in blobs]
    assert [stream.to_bytes() for stream in sorted(streams)] == sorted(blobs)


def test_negative_tokens_sort_after_positive_ones_in_blob_order() -> None:
    negative = StreamId.create(-1, 0, 0)
    positive = StreamId.create(1, 0, 0)
    assert positive < negative
    assert negative.token < positive.token


def test_version_above_one_is_rejected_as_scylla_does() -> None:
    # A pre-4.3 id printed in Scylla's docs: its random low nibble (3) reads as version 3.
    legacy = bytes.fromhex("365fd1a9ae34373954529ac8169dfb93")
    with pytest.raises(InvalidStreamId, match="version 3"):
        StreamId.from_bytes(legacy)
    with pytest.raises(InvalidStreamId):
        StreamId(legacy)


def test_legacy_ids_are_readable_when_asked_for() -> None:
    legacy = StreamId.from_bytes(
        bytes.fromhex("365fd1a9ae34373954529ac8169dfb93"), accept_any_version=True
    )
    assert legacy.version == 3
    assert legacy.vnode_index is None
    assert legacy.token == 0x365FD1A9AE343739


def test_version_zero_is_accepted_like_scylla_constructor() -> None:
    stream = StreamId.from_bytes(bytes.fromhex("00000000000000010000000000000010"))
    assert stream.version == 0
    assert stream.index == 1
    assert stream.vnode_index is None


@pytest.mark.parametrize("size", [0, 1, 15, 17, 32])
def test_wrong_length_is_rejected(size: int) -> None:
    with pytest.raises(InvalidStreamId, match="16 bytes"):
        StreamId.from_bytes(b"\x01" * size)


@pytest.mark.parametrize(
    ("token", "index", "random_bits"),
    [(2**63, 0, 0), (-(2**63) - 1, 0, 0), (0, 2**22, 0), (0, -1, 0), (0, 0, 2**38), (0, 0, -1)],
)
def test_create_rejects_out_of_range_fields(token: int, index: int, random_bits: int) -> None:
    with pytest.raises(InvalidStreamId):
        StreamId.create(token, index, random_bits)


def test_stream_ids_are_frozen_and_need_bytes() -> None:
    stream = StreamId.create(0, 0, 0)
    with pytest.raises(AttributeError):
        stream.value = b"\x00" * 16  # type: ignore[misc]
    with pytest.raises(InvalidStreamId):
        StreamId(bytearray(16))  # type: ignore[arg-type]


def test_errors_map_to_cql_invalid() -> None:
    assert InvalidStreamId.code == ErrorCode.INVALID
