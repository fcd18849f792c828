"""Round trips through the codec: every type, nested types, accepted input forms, normalisation
of driver-ordered sets and maps, and the cell view of non-frozen collections.

Proves: ``deserialize(serialize(v))`` is ``v`` up to the documented normalisation (sets and maps
deduplicated and ordered, tuples padded, UDTs completed); re-serializing what was deserialized
gives the same bytes; serialized values validate and are already canonical; a set or map sent in
any order with duplicates normalizes to what ``serialize`` produces; collection cells rebuild
the frozen value.
"""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import itertools
import random
import struct
import uuid
from collections import namedtuple
from typing import Any

import pytest
from cassandra import util as driver_util
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ringflow.schema import (
    BIGINT,
    DATE,
    DECIMAL,
    DOUBLE,
    DURATION,
    INET,
    INT,
    TEXT,
    TIME,
    TIMESTAMP,
    TIMEUUID,
    CqlType,
    Duration,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    cells_from_collection_value,
    comparable_bytes,
    compare,
    deserialize,
    list_cells,
    list_values,
    normalize,
    parse_type,
    serialize,
    serialized_collection_from_cells,
    timeuuid_from_micros,
    validate,
)
from tests.unit.schema.test_codec_strategies import (
    NATIVE_TYPES,
    cql_types,
    expected,
    same,
    typed_values,
    values,
)

SETTINGS = settings(max_examples=150, deadline=None)


def assert_round_trip(cql_type: CqlType, value: Any) -> bytes:
    data = serialize(cql_type, value, "c")
    result = deserialize(cql_type, data, "c")
    assert same(result, expected(cql_type, value)), (result, expected(cql_type, value))
    assert serialize(cql_type, result) == data
    validate(cql_type, data)
    assert normalize(cql_type, data) == data
    return data


@pytest.mark.parametrize("cql_type", NATIVE_TYPES, ids=lambda t: t.name)
@SETTINGS
@given(data=st.data())
def test_every_native_type_round_trips(cql_type: NativeType, data: st.DataObject) -> None:
    assert_round_trip(cql_type, data.draw(values(cql_type)))


@SETTINGS
@given(typed_values(depth=2))
def test_nested_collections_tuples_and_udts_round_trip(typed: tuple[CqlType, list[Any]]) -> None:
    cql_type, (value,) = typed
    assert_round_trip(cql_type, value)


@given(st.sampled_from([-(2**63), 2**63 - 1, 0, -1, 1, 2**62, -(2**62)]))
@example(-(2**63))
def test_duration_extremes_round_trip(nanoseconds: int) -> None:
    sign = -1 if nanoseconds < 0 else 1
    for value in (Duration(sign * (2**31 - 1), sign * 5, nanoseconds), Duration(0, 0, nanoseconds)):
        assert deserialize(DURATION, serialize(DURATION, value)) == value


def test_duration_uses_zigzag_vints() -> None:
    # months 1 -> zigzag 2, days -1 is invalid with positive months, so all negative here:
    assert serialize(DURATION, Duration(0, 0, 0)) == b"\x00\x00\x00"
    assert serialize(DURATION, Duration(1, 2, 3)) == b"\x02\x04\x06"
    assert serialize(DURATION, Duration(-1, -2, -3)) == b"\x01\x03\x05"
    assert serialize(DURATION, Duration(0, 0, 64)) == b"\x00\x00\x80\x80"  # 128: 2-byte vint
    assert serialize(DURATION, Duration(0, 0, -(2**63))) == b"\x00\x00" + b"\xff" * 9


# --- accepted input forms --------------------------------------------------------------------


def test_timestamp_accepts_ms_aware_datetimes_and_dates() -> None:
    moment = datetime.datetime(2024, 5, 6, 7, 8, 9, 123999)
    ms = serialize(TIMESTAMP, moment)
    assert deserialize(TIMESTAMP, ms) == datetime.datetime(2024, 5, 6, 7, 8, 9, 123000)
    assert serialize(TIMESTAMP, 1714979289123) == ms
    aware = moment.replace(tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert deserialize(TIMESTAMP, serialize(TIMESTAMP, aware)) == datetime.datetime(
        2024, 5, 6, 5, 8, 9, 123000
    )
    assert serialize(TIMESTAMP, datetime.date(1970, 1, 2)) == struct.pack(">q", 86_400_000)
    # Sub-millisecond parts are floored, also before the epoch (-1 µs is -1 ms).
    assert serialize(TIMESTAMP, datetime.datetime(1969, 12, 31, 23, 59, 59, 999999)) == (
        struct.pack(">q", -1)
    )
    assert deserialize(TIMESTAMP, struct.pack(">q", 2**62)) == 2**62


def test_date_time_and_duration_accept_ints_and_driver_objects() -> None:
    assert serialize(DATE, 0) == b"\x80\x00\x00\x00"
    assert serialize(DATE, -1) == b"\x7f\xff\xff\xff"
    assert serialize(DATE, driver_util.Date(19000)) == serialize(DATE, 19000)
    assert deserialize(DATE, serialize(DATE, 19000)) == datetime.date(2022, 1, 8)
    assert deserialize(DATE, b"\x00\x00\x00\x00") == -(2**31)
    assert deserialize(TIME, serialize(TIME, 3_600_000_000_000)) == datetime.time(1)
    assert deserialize(TIME, serialize(TIME, 1)) == 1
    assert serialize(TIME, driver_util.Time(12345)) == serialize(TIME, 12345)
    assert serialize(DURATION, driver_util.Duration(1, 2, 3)) == serialize(
        DURATION, Duration(1, 2, 3)
    )


def test_numbers_accept_other_numeric_forms() -> None:
    assert deserialize(DECIMAL, serialize(DECIMAL, 12)) == decimal.Decimal(12)
    assert deserialize(DECIMAL, serialize(DECIMAL, 0.5)) == decimal.Decimal("0.5")
    assert deserialize(DOUBLE, serialize(DOUBLE, 3)) == 3.0
    assert serialize(BIGINT, True.__index__()) == struct.pack(">q", 1)


def test_inet_accepts_strings_and_returns_address_objects() -> None:
    assert deserialize(INET, serialize(INET, "10.0.0.1")) == ipaddress.IPv4Address("10.0.0.1")
    assert deserialize(INET, serialize(INET, "::ffff:1.2.3.4")) == ipaddress.IPv6Address(
        "::ffff:1.2.3.4"
    )


ADDRESS = UserType("ks", "address", ("street", "number", "tags"), (TEXT, INT, parse_type(
    "frozen<set<text>>")), frozen=True)  # fmt: skip


def test_udt_accepts_dicts_tuples_and_objects_with_missing_fields_null() -> None:
    from_dict = serialize(ADDRESS, {"street": "Main", "number": 5})
    Address = namedtuple("Address", ["street", "number", "tags"])
    assert serialize(ADDRESS, ("Main", 5)) == from_dict  # absent or short: written as nulls
    assert serialize(ADDRESS, Address("Main", 5, None)) == serialize(
        ADDRESS, {"street": "Main", "number": 5, "tags": None}
    )
    assert deserialize(ADDRESS, from_dict) == {"street": "Main", "number": 5, "tags": None}

    class Plain:
        street = "Main"

    assert deserialize(ADDRESS, serialize(ADDRESS, Plain())) == {
        "street": "Main",
        "number": None,
        "tags": None,
    }


def test_sets_and_maps_accept_other_collections() -> None:
    set_type = SetType(INT, frozen=True)
    assert serialize(set_type, [3, 1, 3, 2]) == serialize(set_type, {1, 2, 3})
    assert serialize(set_type, (2, 1)) == serialize(set_type, frozenset({1, 2}))
    map_type = MapType(TEXT, INT, frozen=True)
    assert serialize(map_type, [("b", 1), ("a", 2), ("b", 3)]) == serialize(
        map_type, {"a": 2, "b": 3}
    )
    list_type = ListType(INT)
    assert serialize(list_type, (1, 2)) == serialize(list_type, [1, 2])


def test_serialized_forms_match_the_protocol_examples() -> None:
    """native_protocol_v4.spec §6.23 varint examples and the collection framing of §6.11-6.13."""
    varint = NativeType("varint")
    examples = {0: "00", 1: "01", 127: "7f", 128: "0080", 129: "0081", -1: "ff", -128: "80"}
    examples[-129] = "ff7f"
    for number, encoded in examples.items():
        assert serialize(varint, number).hex() == encoded
        assert deserialize(varint, bytes.fromhex(encoded)) == number
    assert serialize(ListType(INT), [7]).hex() == "00000001" + "00000004" + "00000007"
    assert serialize(TupleType((INT, TEXT)), (None, "a")).hex() == "ffffffff" + "0000000161"
    assert serialize(DECIMAL, decimal.Decimal("-1.50")).hex() == "00000002" + "ff6a"


# --- normalisation of driver-ordered sets and maps -----------------------------------------------


def _frame(parts: list[bytes], count: int) -> bytes:
    return struct.pack(">i", count) + b"".join(struct.pack(">i", len(p)) + p for p in parts)


@SETTINGS
@given(st.data())
def test_sets_sent_in_any_order_with_duplicates_normalize_to_the_canonical_form(
    data: st.DataObject,
) -> None:
    element = data.draw(cql_types(depth=1, orderable=True))
    set_type = SetType(element, frozen=True)
    value = data.draw(values(set_type))
    canonical = serialize(set_type, value)
    elements = [serialize(element, item) for item in value]
    shuffled = (
        elements + data.draw(st.lists(st.sampled_from(elements), max_size=3)) if elements else []
    )
    random.Random(data.draw(st.integers())).shuffle(shuffled)
    sent = _frame(shuffled, len(shuffled))
    validate(set_type, sent)
    assert normalize(set_type, sent) == canonical
    assert compare(set_type, sent, canonical) == 0
    assert comparable_bytes(set_type, sent) == comparable_bytes(set_type, canonical)
    assert same(deserialize(set_type, sent), deserialize(set_type, canonical))


@SETTINGS
@given(st.data())
def test_maps_sent_in_any_order_normalize_and_nested_sets_too(data: st.DataObject) -> None:
    key_type = data.draw(cql_types(depth=0, orderable=True))
    map_type = MapType(key_type, SetType(INT, frozen=True), frozen=True)
    value = data.draw(st.dictionaries(values(key_type, True), st.frozensets(st.integers(0, 9))))
    canonical = serialize(map_type, value)
    entries = []
    for key, members in value.items():
        entries.append(serialize(key_type, key))
        scrambled = sorted(members, reverse=True)  # the inner set out of order as well
        entries.append(_frame([struct.pack(">i", m) for m in scrambled], len(scrambled)))
    pairs = list(zip(entries[0::2], entries[1::2], strict=True))
    random.Random(data.draw(st.integers())).shuffle(pairs)
    sent = _frame([part for pair in pairs for part in pair], len(pairs))
    assert normalize(map_type, sent) == canonical
    assert comparable_bytes(map_type, sent) == comparable_bytes(map_type, canonical)


# --- cells of non-frozen collections ---------------------------------------------------------


@SETTINGS
@given(st.data())
def test_set_map_and_udt_cells_rebuild_the_frozen_value(data: st.DataObject) -> None:
    inner = data.draw(cql_types(depth=1, orderable=True))
    cql_type = data.draw(
        st.sampled_from(
            [
                SetType(inner),
                MapType(inner, TEXT),
                UserType("ks", "u", ("a", "b", "c"), (inner, TEXT, inner)),
            ]
        )
    )
    value = data.draw(values(cql_type))
    frozen_bytes = serialize(cql_type, value)
    cells = cells_from_collection_value(cql_type, frozen_bytes)
    paths = [path for path, _ in cells]
    if isinstance(cql_type, UserType):
        present = [i for i, name in enumerate("abc") if value.get(name) is not None]
        assert paths == [struct.pack(">H", i) for i in present]
        rebuilt = serialized_collection_from_cells(cql_type, cells)
        # Compared as canonical bytes, not Python values: a double field may be NaN (NaN != NaN).
        assert normalize(cql_type, rebuilt) == normalize(cql_type, frozen_bytes)
    else:
        key_type = cql_type.element if isinstance(cql_type, SetType) else cql_type.key
        assert all(compare(key_type, a, b) < 0 for a, b in itertools.pairwise(paths))
        assert serialized_collection_from_cells(cql_type, cells) == frozen_bytes


def test_list_cells_pair_values_with_minted_timeuuids() -> None:
    list_type = ListType(TEXT)
    data = serialize(list_type, ["x", "y", "x"])
    paths = [timeuuid_from_micros(1000 + i, 7).bytes for i in range(3)]
    cells = list_cells(list_values(list_type, data), paths)
    assert cells == [(paths[0], b"x"), (paths[1], b"y"), (paths[2], b"x")]
    assert serialized_collection_from_cells(list_type, cells) == data
    assert all(compare(TIMEUUID, a, b) < 0 for a, b in itertools.pairwise(paths))


def test_empty_cells_give_the_empty_collection() -> None:
    assert serialized_collection_from_cells(SetType(INT), []) == b"\x00\x00\x00\x00"
    udt = UserType("ks", "u", ("a",), (INT,))
    assert serialized_collection_from_cells(udt, []) == b"\xff\xff\xff\xff"
    assert deserialize(udt, b"\xff\xff\xff\xff") == {"a": None}


def test_uuid_version_is_not_checked_for_uuid_but_is_for_timeuuid() -> None:
    random_uuid = uuid.UUID(int=0x1234_5678_9ABC_0DEF_0123_4567_89AB_CDEF)  # version 0
    assert deserialize(NativeType("uuid"), serialize(NativeType("uuid"), random_uuid)) == (
        random_uuid
    )
    assert deserialize(TIMEUUID, uuid.uuid1().bytes).version == 1
