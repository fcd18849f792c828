"""The Python driver (``cassandra.cqltypes``, the peer real clients use) as the oracle.

Proves, for every type and random values including nested collections, tuples and UDTs: our
``serialize`` produces byte for byte what the driver's ``serialize(value, 4)`` produces, and our
``deserialize`` of the driver's bytes equals the driver's own ``deserialize`` (mapped to our
documented Python types). The driver writes sets and maps in the order it is handed them, so it
gets them sorted: by Python's own ordering wherever that is Cassandra's (numbers, strings, bytes,
dates, timestamps, times, booleans), which makes set/map order an independent check; by our
order otherwise (uuids, inet, nested values), where only framing and element bytes are checked.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import math
import uuid
from typing import Any

import pytest
from cassandra import cqltypes
from cassandra import util as driver_util
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ringflow.schema import (
    CqlType,
    Duration,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    deserialize,
    serialize,
)
from tests.unit.schema.test_codec_strategies import (
    NATIVE_TYPES,
    expected,
    same,
    serialized_compare,
    typed_values,
    values,
)

SETTINGS = settings(max_examples=150, deadline=None)

DRIVER_CLASS_NAMES = {
    "ascii": "AsciiType",
    "text": "UTF8Type",
    "blob": "BytesType",
    "boolean": "BooleanType",
    "tinyint": "ByteType",
    "smallint": "ShortType",
    "int": "Int32Type",
    "bigint": "LongType",
    "varint": "IntegerType",
    "decimal": "DecimalType",
    "float": "FloatType",
    "double": "DoubleType",
    "timestamp": "TimestampType",
    "date": "SimpleDateType",
    "time": "TimeType",
    "uuid": "UUIDType",
    "timeuuid": "TimeUUIDType",
    "inet": "InetAddressType",
    "duration": "DurationType",
}
# Element types whose Python order is Cassandra's order (NaN and -0.0 aside: never set elements
# or map keys in these tests).
PYTHON_ORDERED = {
    "ascii",
    "text",
    "blob",
    "boolean",
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "varint",
    "decimal",
    "float",
    "double",
    "date",
    "time",
}


def driver_type(cql_type: CqlType) -> Any:
    if isinstance(cql_type, NativeType):
        return cqltypes.lookup_casstype(DRIVER_CLASS_NAMES[cql_type.name])
    if isinstance(cql_type, ListType):
        return cqltypes.ListType.apply_parameters([driver_type(cql_type.element)])
    if isinstance(cql_type, SetType):
        return cqltypes.SetType.apply_parameters([driver_type(cql_type.element)])
    if isinstance(cql_type, MapType):
        return cqltypes.MapType.apply_parameters(
            [driver_type(cql_type.key), driver_type(cql_type.value)]
        )
    if isinstance(cql_type, TupleType):
        return cqltypes.TupleType.apply_parameters([driver_type(e) for e in cql_type.elements])
    if isinstance(cql_type, UserType):
        return cqltypes.UserType.make_udt_class(
            cql_type.keyspace,
            cql_type.name,
            cql_type.field_names,
            tuple(driver_type(field) for field in cql_type.field_types),
        )
    raise AssertionError(cql_type)


# --- our values -> the driver's ----------------------------------------------------------------


def _native_to_driver(name: str, value: Any) -> Any:
    if name == "date":
        return driver_util.Date(value) if isinstance(value, int) else value
    if name == "time":
        return driver_util.Time(value)
    if name == "duration":
        return driver_util.Duration(value.months, value.days, value.nanoseconds)
    if name == "inet":
        return str(value)
    return value


def _ordered(element: CqlType, items: list[Any]) -> list[Any]:
    """Set elements / map keys in the order the driver should write them."""
    if isinstance(element, NativeType) and element.name in PYTHON_ORDERED:
        return sorted(items, key=_python_key(element.name))
    return sorted(items, key=functools.cmp_to_key(lambda a, b: serialized_compare(element, a, b)))


def _python_key(name: str) -> Any:
    if name == "date":  # dates and out-of-range int days mixed: order by days
        return lambda value: value if isinstance(value, int) else value.toordinal() - 719163
    if name == "time":
        return lambda value: value if isinstance(value, int) else _time_ns(value)
    return lambda value: value


def _time_ns(value: datetime.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 10**9 + value.microsecond * 1000


def to_driver(cql_type: CqlType, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(cql_type, NativeType):
        return _native_to_driver(cql_type.name, value)
    if isinstance(cql_type, ListType):
        return [to_driver(cql_type.element, item) for item in value]
    if isinstance(cql_type, SetType):
        unique = expected(cql_type, value)
        return [to_driver(cql_type.element, item) for item in _ordered(cql_type.element, unique)]
    if isinstance(cql_type, MapType):
        entries = expected(cql_type, value)
        pairs = list(entries.items()) if isinstance(entries, dict) else entries
        by_key = {id(k): v for k, v in pairs}
        keys = _ordered(cql_type.key, [k for k, _ in pairs])
        return driver_util.OrderedMap(
            (to_driver(cql_type.key, k), to_driver(cql_type.value, by_key[id(k)])) for k in keys
        )
    if isinstance(cql_type, TupleType):  # we write every component; the driver what it gets
        padded = list(value) + [None] * (len(cql_type.elements) - len(value))
        return tuple(to_driver(t, v) for t, v in zip(cql_type.elements, padded, strict=True))
    if isinstance(cql_type, UserType):
        return tuple(
            to_driver(t, value.get(n))
            for n, t in zip(cql_type.field_names, cql_type.field_types, strict=True)
        )
    raise AssertionError(cql_type)


# --- the driver's values -> ours ---------------------------------------------------------------


def _native_from_driver(name: str, value: Any) -> Any:
    if name == "date":
        days = value.days_from_epoch
        try:
            return value.date()
        except ValueError:
            return days
    if name == "time":
        nanoseconds = value.nanosecond_time
        if nanoseconds % 1000:
            return nanoseconds
        return datetime.time(*_split_ns(nanoseconds))
    if name == "duration":
        return Duration(value.months, value.days, value.nanoseconds)
    if name == "inet":
        return ipaddress.ip_address(value)
    return value


def _split_ns(nanoseconds: int) -> tuple[int, int, int, int]:
    seconds, microsecond = divmod(nanoseconds // 1000, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return hour, minute, second, microsecond


def from_driver(cql_type: CqlType, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(cql_type, NativeType):
        return _native_from_driver(cql_type.name, value)
    if isinstance(cql_type, ListType):
        return [from_driver(cql_type.element, item) for item in value]
    if isinstance(cql_type, SetType):
        items = [from_driver(cql_type.element, item) for item in value]
        return expected(cql_type, items)
    if isinstance(cql_type, MapType):
        pairs = [
            (from_driver(cql_type.key, k), from_driver(cql_type.value, v)) for k, v in value.items()
        ]
        return expected(cql_type, pairs)
    if isinstance(cql_type, TupleType):
        return tuple(from_driver(t, v) for t, v in zip(cql_type.elements, value, strict=True))
    if isinstance(cql_type, UserType):
        return {
            n: from_driver(t, v)
            for n, t, v in zip(cql_type.field_names, cql_type.field_types, value, strict=True)
        }
    raise AssertionError(cql_type)


def _driver_safe(cql_type: CqlType, value: Any) -> bool:
    """The driver cannot turn timestamps beyond datetime's range back into datetimes, nor
    decode a map keyed by a type holding a set or map whose elements Python orders otherwise
    than Cassandra (its OrderedMapSerializedKey looks a key up by bytes it re-serializes from
    a SortedSet: a set of uuids, or one mixing IPv4 and IPv6 addresses, comes back in another
    order than it was written, KeyError in cassandra/util.py)."""
    if isinstance(cql_type, NativeType):
        return not (cql_type.name == "timestamp" and isinstance(value, int))
    if isinstance(cql_type, SetType) and _python_equal_twins(cql_type.element, list(value)):
        return False
    if isinstance(cql_type, ListType | SetType):
        return all(_driver_safe(cql_type.element, item) for item in value)
    if isinstance(cql_type, MapType):
        if _sorted_by_the_driver_otherwise(cql_type.key, inside_set=False):
            return False
        pairs = value.items() if isinstance(value, dict) else value
        return all(
            _driver_safe(cql_type.key, k) and _driver_safe(cql_type.value, v) for k, v in pairs
        )
    parts = value if isinstance(cql_type, TupleType) else list(value.values())
    types = cql_type.elements if isinstance(cql_type, TupleType) else cql_type.field_types
    return all(v is None or _driver_safe(t, v) for t, v in zip(types, parts, strict=False))


def _sorted_by_the_driver_otherwise(cql_type: CqlType, *, inside_set: bool) -> bool:
    if isinstance(cql_type, NativeType):
        return inside_set and cql_type.name not in PYTHON_ORDERED
    if isinstance(cql_type, SetType):
        return _sorted_by_the_driver_otherwise(cql_type.element, inside_set=True)
    if isinstance(cql_type, MapType):
        return _sorted_by_the_driver_otherwise(
            cql_type.key, inside_set=True
        ) or _sorted_by_the_driver_otherwise(cql_type.value, inside_set=inside_set)
    if isinstance(cql_type, ListType):
        return _sorted_by_the_driver_otherwise(cql_type.element, inside_set=inside_set)
    parts = cql_type.elements if isinstance(cql_type, TupleType) else cql_type.field_types
    return any(_sorted_by_the_driver_otherwise(t, inside_set=inside_set) for t in parts)


def _python_equal_twins(element: CqlType, items: list[Any]) -> bool:
    """Two elements equal in Python but not in their bytes (``{0.0: ''}`` and ``{-0.0: ''}``):
    the driver's ``sortedset`` keeps one of them, Cassandra (and we) both."""
    for index, item in enumerate(items):
        for other in items[index + 1 :]:
            if item == other and serialize(element, item) != serialize(element, other):
                return True
    return False


def assert_agrees_with_driver(cql_type: CqlType, value: Any) -> None:
    peer = driver_type(cql_type)
    ours = serialize(cql_type, value)
    theirs = peer.serialize(to_driver(cql_type, value), 4)
    assert ours == theirs, (cql_type, value, ours.hex(), theirs.hex())
    if _driver_safe(cql_type, value):
        decoded = from_driver(cql_type, peer.deserialize(theirs, 4))
        assert same(deserialize(cql_type, theirs), decoded)


@pytest.mark.parametrize("cql_type", NATIVE_TYPES, ids=lambda t: t.name)
@SETTINGS
@given(data=st.data())
def test_native_values_serialize_like_the_driver(cql_type: NativeType, data: st.DataObject) -> None:
    assert_agrees_with_driver(cql_type, data.draw(values(cql_type)))


@SETTINGS
@given(typed_values(depth=2))
@example(  # a map keyed by a set of uuids: the bytes still agree; the driver cannot decode it
    (
        MapType(SetType(NativeType("uuid"), frozen=True), NativeType("ascii"), frozen=True),
        [{frozenset({uuid.UUID(int=1 << 96 | 1 << 76), uuid.UUID(int=1 << 80 | 1 << 76)}): ""}],
    )
)
def test_nested_values_serialize_like_the_driver(typed: tuple[CqlType, list[Any]]) -> None:
    cql_type, (value,) = typed
    assert_agrees_with_driver(cql_type, value)


@pytest.mark.parametrize("name", sorted(PYTHON_ORDERED), ids=str)
@SETTINGS
@given(data=st.data())
def test_sets_and_maps_are_written_in_the_order_the_driver_sorts_them(
    name: str, data: st.DataObject
) -> None:
    """Independent of our comparator: Python orders these element types as Cassandra does."""
    element = NativeType(name)
    items = data.draw(st.lists(values(element, key=True), min_size=2, max_size=6))
    # One representative of Python-equal items (0.0/-0.0, 1.0/1.00): Python dedupes them before
    # the driver sees them, and which one a set keeps is ours to choose.
    items = list(dict.fromkeys(items))
    assert_agrees_with_driver(SetType(element, frozen=True), items)
    mapping = {item: index for index, item in enumerate(items)}
    assert_agrees_with_driver(MapType(element, NativeType("int"), frozen=True), mapping)


def test_float_special_values_match_the_driver() -> None:
    for cql_type in (NativeType("float"), NativeType("double")):
        for value in (math.inf, -math.inf, -0.0, 0.0, 1e-45, 3.4028234663852886e38):
            assert serialize(cql_type, value) == driver_type(cql_type).serialize(value, 4)
