"""Comparison order, the byte-comparable encoding and clustering keys.

Proves: ``compare`` agrees with an independent Python model of Cassandra's order on random values
of every orderable type, nested ones included, and with hand-checked vectors (the signed-byte
timeuuid rule, UUIDType's version-first rule, Float.compare, numeric decimals); unsigned byte
order of ``comparable_bytes`` is ``compare``'s order and the encoding is prefix-free; for
clustering keys with ASC and DESC components ``encode_clustering`` order is clustering order, and a
prefix's encoding and ``prefix_upper_bound`` bracket exactly the keys that extend it; empty values
sort first (last in DESC columns), in keys and inside frozen collections.
"""

from __future__ import annotations

import decimal
import ipaddress
import itertools
import math
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.schema import (
    BLOB,
    BOOLEAN,
    DATE,
    DECIMAL,
    DOUBLE,
    DURATION,
    FLOAT,
    INET,
    INT,
    TEXT,
    TIMEUUID,
    UUID,
    VARINT,
    ClusteringOrder,
    CqlType,
    Duration,
    InvalidValue,
    ListType,
    MapType,
    SchemaError,
    SetType,
    TupleType,
    clustering_encoder,
    codec_for,
    comparable_bytes,
    compare,
    encode_clustering,
    max_timeuuid,
    min_timeuuid,
    prefix_upper_bound,
    serialize,
    timeuuid_from_micros,
    timeuuid_to_micros,
)
from ringflow.schema._timeuuid import UUID_EPOCH_OFFSET_100NS
from tests.unit.schema.test_codec_strategies import (
    ORDERABLE_NATIVE_TYPES,
    cql_types,
    model_compare,
    typed_values,
    values,
)

SETTINGS = settings(max_examples=200, deadline=None)


def sign(number: int) -> int:
    return (number > 0) - (number < 0)


def memcmp(left: bytes, right: bytes) -> int:
    return (left > right) - (left < right)


def assert_order_agrees(cql_type: CqlType, left: Any, right: Any) -> None:
    a, b = serialize(cql_type, left), serialize(cql_type, right)
    expected = model_compare(cql_type, left, right)
    assert compare(cql_type, a, b) == expected, (left, right)
    assert compare(cql_type, b, a) == -expected
    assert compare(cql_type, a, a) == 0
    key_a, key_b = comparable_bytes(cql_type, a), comparable_bytes(cql_type, b)
    assert memcmp(key_a, key_b) == expected, (left, right, key_a.hex(), key_b.hex())
    if expected:  # prefix-free: two different values differ inside both encodings
        assert not key_a.startswith(key_b) and not key_b.startswith(key_a)


# --- random values against the model ------------------------------------------------------------


@pytest.mark.parametrize("cql_type", ORDERABLE_NATIVE_TYPES, ids=lambda t: t.name)
@SETTINGS
@given(data=st.data())
def test_native_order_matches_the_model(cql_type: CqlType, data: st.DataObject) -> None:
    left = data.draw(values(cql_type))
    right = data.draw(st.one_of(values(cql_type), st.just(left)))
    assert_order_agrees(cql_type, left, right)


@SETTINGS
@given(typed_values(depth=2, orderable=True, count=2))
def test_nested_order_matches_the_model(typed: tuple[CqlType, list[Any]]) -> None:
    cql_type, (left, right) = typed
    assert_order_agrees(cql_type, left, right)


@SETTINGS
@given(st.data())
def test_close_collections_order_matches_the_model(data: st.DataObject) -> None:
    """Small element domains make equal prefixes, equal elements and length ties common."""
    element = st.integers(-2, 2)
    kind = data.draw(st.sampled_from(["list", "set", "map", "tuple"]))
    cql_type: CqlType
    if kind == "list":
        cql_type, draw = ListType(INT, frozen=True), st.lists(element, max_size=4)
    elif kind == "set":
        cql_type, draw = SetType(INT, frozen=True), st.frozensets(element, max_size=4)
    elif kind == "map":
        cql_type, draw = MapType(INT, INT, frozen=True), st.dictionaries(element, element)
    else:
        cql_type = TupleType((INT, INT, INT))
        draw = st.lists(st.one_of(st.none(), element), max_size=3).map(tuple)
    assert_order_agrees(cql_type, data.draw(draw), data.draw(draw))


# --- hand-checked vectors -------------------------------------------------------------------------


def _uuid(hex_text: str) -> uuid.UUID:
    return uuid.UUID(hex_text)


def test_timeuuid_low_bytes_compare_as_signed_bytes_but_uuid_compares_them_unsigned() -> None:
    # Same timestamp; low bytes 0x80... (-128 signed) versus 0x7f... (+127 signed).
    high_byte_set = _uuid("00000000-0000-1000-8000-000000000000")
    high_byte_clear = _uuid("00000000-0000-1000-7fff-ffffffffffff")
    low, high = high_byte_set.bytes, high_byte_clear.bytes
    assert compare(TIMEUUID, low, high) == -1  # Scylla timeuuid_tri_compare, TimeUUIDType
    assert compare(UUID, low, high) == 1  # UUIDType: unsigned (CASSANDRA-8730)
    # Byte 9 decides when byte 8 ties: 0xff (-1) < 0x01.
    minus_one = _uuid("00000000-0000-1000-80ff-000000000000")
    plus_one = _uuid("00000000-0000-1000-8001-000000000000")
    assert compare(TIMEUUID, minus_one.bytes, plus_one.bytes) == -1
    assert compare(UUID, minus_one.bytes, plus_one.bytes) == 1


def test_timeuuid_orders_by_timestamp_fields_not_raw_bytes() -> None:
    earlier = _uuid("ffffffff-0000-1000-8000-000000000000")  # time_low = 2**32 - 1
    later = _uuid("00000000-0001-1000-8000-000000000000")  # time_mid = 1: time 2**32
    for cql_type in (TIMEUUID, UUID):
        assert compare(cql_type, earlier.bytes, later.bytes) == -1
    latest = _uuid("00000000-0000-1001-8000-000000000000")  # time_hi = 1: time 2**48
    assert compare(TIMEUUID, later.bytes, latest.bytes) == -1


def test_uuid_orders_by_version_first_then_unsigned_bits() -> None:
    version_1 = _uuid("ffffffff-ffff-1fff-bfff-ffffffffffff")
    version_4 = _uuid("00000000-0000-4000-8000-000000000000")
    version_4_high = _uuid("f0000000-0000-4000-8000-000000000000")
    assert compare(UUID, version_1.bytes, version_4.bytes) == -1
    assert compare(UUID, version_4.bytes, version_4_high.bytes) == -1
    nil = uuid.UUID(int=0)
    assert compare(UUID, nil.bytes, version_1.bytes) == -1  # version 0 first


@given(st.integers(0, 2**40), st.integers(0, 9999), st.integers(0, 2**64 - 1))
def test_min_and_max_timeuuid_bracket_every_timeuuid_of_their_millisecond(
    timestamp_ms: int, micros_in_ms: int, low_bits: int
) -> None:
    inside = timeuuid_from_micros(timestamp_ms * 1000 + micros_in_ms // 10, low_bits)
    assert compare(TIMEUUID, min_timeuuid(timestamp_ms).bytes, inside.bytes) <= 0
    assert compare(TIMEUUID, inside.bytes, max_timeuuid(timestamp_ms).bytes) <= 0
    assert comparable_bytes(TIMEUUID, min_timeuuid(timestamp_ms).bytes) <= comparable_bytes(
        TIMEUUID, inside.bytes
    )


def test_floats_follow_java_float_compare() -> None:
    for cql_type, fmt in ((FLOAT, ">f"), (DOUBLE, ">d")):
        ordered = [-math.inf, -1.0, -0.0, 0.0, 1e-30, 1.0, math.inf, math.nan]
        encoded = [serialize(cql_type, value) for value in ordered]
        for smaller, larger in itertools.pairwise(encoded):
            assert compare(cql_type, smaller, larger) == -1
            assert comparable_bytes(cql_type, smaller) < comparable_bytes(cql_type, larger)
        other_nan = b"\xff\xff\xff\xff" if fmt == ">f" else b"\xff" * 8  # negative NaN payload
        assert compare(cql_type, other_nan, encoded[-1]) == 0
        assert comparable_bytes(cql_type, other_nan) == comparable_bytes(cql_type, encoded[-1])


def test_decimals_compare_numerically_ignoring_trailing_zeros() -> None:
    one, one_point_zero = (
        serialize(DECIMAL, decimal.Decimal("1")),
        serialize(DECIMAL, decimal.Decimal("1.00")),
    )
    assert one != one_point_zero
    assert compare(DECIMAL, one, one_point_zero) == 0
    assert comparable_bytes(DECIMAL, one) == comparable_bytes(DECIMAL, one_point_zero)
    ascending = ["-1E+10", "-1", "-0.5", "-1E-10", "0", "0.000", "1E-10", "0.5", "1", "9.99", "10"]
    keys = [comparable_bytes(DECIMAL, serialize(DECIMAL, decimal.Decimal(t))) for t in ascending]
    assert keys == sorted(keys)
    assert keys[4] == keys[5]


def test_non_canonical_varints_and_booleans_compare_equal_to_canonical_ones() -> None:
    assert compare(VARINT, b"\x00\x01", b"\x01") == 0
    assert comparable_bytes(VARINT, b"\xff\xff") == comparable_bytes(VARINT, b"\xff")
    assert compare(BOOLEAN, b"\x02", b"\x01") == 0
    assert compare(BOOLEAN, b"\x00", b"\x01") == -1


def test_strings_blobs_inet_and_dates_order() -> None:
    texts = ["", "a", "a\x00", "a\x00\x00", "a\x01", "aa", "b", "é", "\U0001f600"]
    keys = [comparable_bytes(TEXT, serialize(TEXT, t)) for t in texts]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    blobs = [b"", b"\x00", b"\x00\x00", b"\x00\xff", b"\x01", b"\xff", b"\xff\x00"]
    assert [comparable_bytes(BLOB, b) for b in blobs] == sorted(
        comparable_bytes(BLOB, b) for b in blobs
    )
    v4, v6 = ipaddress.ip_address("1.2.3.4"), ipaddress.ip_address("102:304::")
    assert compare(INET, serialize(INET, v4), serialize(INET, v6)) == -1  # shorter prefix first
    assert compare(INET, serialize(INET, "255.0.0.0"), serialize(INET, "::1")) == 1
    assert compare(DATE, serialize(DATE, -1), serialize(DATE, 0)) == -1  # unsigned, epoch 2**31


def test_tuples_put_null_first_and_treat_missing_components_as_null() -> None:
    pair = TupleType((INT, INT))
    null_first = serialize(pair, (None, 0))
    zero = serialize(pair, (0, None))
    assert compare(pair, null_first, zero) == -1
    short = struct.pack(">i", 4) + struct.pack(">i", 1)  # (1) as a driver may send it
    assert compare(pair, short, serialize(pair, (1, None))) == 0
    assert comparable_bytes(pair, short) == comparable_bytes(pair, serialize(pair, (1, None)))


def test_durations_have_no_order() -> None:
    data = serialize(DURATION, Duration(1, 0, 0))
    with pytest.raises(SchemaError):
        compare(DURATION, data, data)
    with pytest.raises(SchemaError):
        comparable_bytes(ListType(DURATION, frozen=True), serialize(ListType(DURATION), []))
    with pytest.raises(SchemaError):
        codec_for(SetType(TupleType((DURATION,)), frozen=True))
    with pytest.raises(SchemaError):
        codec_for(MapType(DURATION, INT))
    with pytest.raises(SchemaError):
        clustering_encoder([(DURATION, ClusteringOrder.ASC)])
    # Where it has no order to keep, duration is a fine value.
    assert serialize(MapType(INT, DURATION), {1: Duration(0, 1, 0)})


# --- clustering keys --------------------------------------------------------------------------


@st.composite
def clustering_layouts(draw: st.DrawFn) -> list[tuple[CqlType, ClusteringOrder]]:
    types = draw(st.lists(cql_types(depth=1, orderable=True), min_size=1, max_size=3))
    return [(t, draw(st.sampled_from(ClusteringOrder))) for t in types]


def full_key(draw: st.DrawFn, layout: list[tuple[CqlType, ClusteringOrder]]) -> list[bytes]:
    return [serialize(t, draw(values(t))) for t, _ in layout]


def clustering_compare(
    layout: list[tuple[CqlType, ClusteringOrder]], left: list[bytes], right: list[bytes]
) -> int:
    """Clustering order as Cassandra's ClusteringComparator: component-wise, DESC reversed."""
    for (cql_type, order), a, b in zip(layout, left, right, strict=False):
        result = compare(cql_type, a, b)
        if result:
            return -result if order is ClusteringOrder.DESC else result
    return 0


@SETTINGS
@given(st.data())
def test_encoded_full_keys_sort_in_clustering_order(data: st.DataObject) -> None:
    layout = data.draw(clustering_layouts())
    left = full_key(data.draw, layout)
    right = data.draw(st.one_of(st.just(left), st.builds(lambda: full_key(data.draw, layout))))
    if data.draw(st.booleans()):  # share a leading component to reach the later ones
        right = left[:1] + right[1:]
    encoded_left, encoded_right = encode_clustering(layout, left), encode_clustering(layout, right)
    assert memcmp(encoded_left, encoded_right) == clustering_compare(layout, left, right)


@SETTINGS
@given(st.data())
def test_prefix_bounds_bracket_exactly_the_keys_extending_the_prefix(data: st.DataObject) -> None:
    layout = data.draw(clustering_layouts())
    base = full_key(data.draw, layout)
    prefix = base[: data.draw(st.integers(0, len(layout)))]
    low = encode_clustering(layout, prefix)
    high = prefix_upper_bound(low)
    extension = prefix + full_key(data.draw, layout)[len(prefix) :]
    shared = data.draw(st.integers(0, len(prefix)))  # leading components shared with the prefix
    other = prefix[:shared] + full_key(data.draw, layout)[shared:]
    for key in (base, extension, other):
        encoded = encode_clustering(layout, key)
        position = clustering_compare(layout[: len(prefix)], key[: len(prefix)], prefix)
        if position == 0:
            assert low <= encoded < high
        elif position < 0:
            assert encoded < low
        else:
            assert encoded >= high


def test_clustering_encoder_rejects_long_prefixes_and_bad_values() -> None:
    encoder = clustering_encoder([(INT, ClusteringOrder.DESC)])
    assert encoder([]) == b""
    with pytest.raises(InvalidValue, match="2 values for 1 columns"):
        encoder([b"\x00\x00\x00\x01", b"\x00\x00\x00\x01"])
    with pytest.raises(InvalidValue, match=r"clustering\[0\].*type int.*expected 4 bytes"):
        encoder([b"\x01"])


def test_desc_components_reverse_only_their_own_order() -> None:
    layout = [(INT, ClusteringOrder.ASC), (TEXT, ClusteringOrder.DESC)]
    keys = [
        [serialize(INT, 1), serialize(TEXT, "b")],
        [serialize(INT, 1), serialize(TEXT, "a")],
        [serialize(INT, 1), serialize(TEXT, "")],
        [serialize(INT, 2), serialize(TEXT, "z")],
    ]
    encoded = [encode_clustering(layout, key) for key in keys]
    assert encoded == sorted(encoded)
    prefix = encode_clustering(layout, keys[0][:1])
    assert all(prefix <= key < prefix_upper_bound(prefix) for key in encoded[:3])
    assert encoded[3] >= prefix_upper_bound(prefix)


_INT_OR_EMPTY = st.one_of(
    st.just(b""), st.integers(-(2**31), 2**31 - 1).map(lambda n: serialize(INT, n))
)


@given(
    st.lists(_INT_OR_EMPTY, min_size=1, max_size=8), st.lists(_INT_OR_EMPTY, min_size=1, max_size=8)
)
def test_empty_values_sort_first_and_last_in_desc_columns(
    firsts: list[bytes], seconds: list[bytes]
) -> None:
    """Cassandra's comparators put an empty value before every other (``ReversedType``: after, in
    a DESC column); the encoding of a key with empty components keeps clustering order, bounds
    included, and so does a frozen set holding an empty element."""
    layout = [(INT, ClusteringOrder.ASC), (INT, ClusteringOrder.DESC)]
    keys = [[a, b] for a in firsts for b in seconds]

    def model(key: list[bytes]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        first = (0,) if not key[0] else (1, struct.unpack(">i", key[0])[0])
        second = (1,) if not key[1] else (0, -struct.unpack(">i", key[1])[0])  # DESC
        return first, second

    encoded = sorted(keys, key=lambda key: encode_clustering(layout, key))
    assert [model(k) for k in encoded] == sorted(model(k) for k in keys)
    for key in keys:
        prefix = encode_clustering(layout, key[:1])
        assert prefix <= encode_clustering(layout, key) < prefix_upper_bound(prefix)
    assert compare(INT, b"", serialize(INT, -(2**31))) == -1
    assert compare(SetType(INT, frozen=True), _set(b""), _set(serialize(INT, -9))) == -1
    frozen = [(SetType(INT, frozen=True), ClusteringOrder.ASC)]
    with_empty = encode_clustering(frozen, [_set(b"", serialize(INT, 5))])
    assert with_empty < encode_clustering(frozen, [_set(serialize(INT, -(2**31)))])
    assert encode_clustering(frozen, [_set()]) < with_empty


def _set(*elements: bytes) -> bytes:
    return len(elements).to_bytes(4, "big") + b"".join(
        len(e).to_bytes(4, "big") + e for e in elements
    )


@given(st.integers(0, 2**128 - 1), st.sampled_from(["random", "version 1", "uuid1"]))
def test_timeuuid_to_micros_reads_the_uuid_time_field_of_version_1_uuids_only(
    bits: int, shape: str
) -> None:
    """Read from the 128 bits directly, it agrees with ``uuid.UUID``'s own ``version`` (None
    unless the IETF variant) and ``time`` fields on every UUID."""
    if shape == "version 1":
        bits = bits & ~(0xF << 76) | 1 << 76
    value = uuid.UUID(int=bits)
    if shape == "uuid1":
        value = uuid.uuid1(node=bits >> 80, clock_seq=bits & 0x3FFF)
    if value.version == 1:
        assert timeuuid_to_micros(value) == (value.time - UUID_EPOCH_OFFSET_100NS) // 10
    else:
        with pytest.raises(ValueError, match="not a time-based"):
            timeuuid_to_micros(value)
