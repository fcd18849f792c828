"""Hypothesis strategies and value models shared by the codec tests (this module holds no tests).

``cql_types`` draws type trees (native types, frozen lists/sets/maps, tuples, UDTs, nested);
``values(t)`` draws Python values of a type in the form ``deserialize`` returns them (so a round
trip can be checked with ``same``), plus ``expected`` for the normalisation a set, map, tuple or
UDT undergoes. ``model_compare`` is an independent model of Cassandra's order on Python values.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import math
import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import strategies as st

from ringflow.schema import (
    NATIVE_TYPE_NAMES,
    CqlType,
    Duration,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    codec_for,
    compare,
    serialize,
)

EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
TIME_NS_MAX = 86_399_999_999_999
EPOCH = datetime.datetime(1970, 1, 1)
EPOCH_DATE = datetime.date(1970, 1, 1)

ORDERABLE_NATIVE_NAMES = sorted(NATIVE_TYPE_NAMES - {"duration"})
NATIVE_TYPES = [NativeType(name) for name in sorted(NATIVE_TYPE_NAMES)]
ORDERABLE_NATIVE_TYPES = [NativeType(name) for name in ORDERABLE_NATIVE_NAMES]


# --- types ------------------------------------------------------------------------------------


def cql_types(depth: int = 2, orderable: bool = False) -> st.SearchStrategy[CqlType]:
    """Type trees up to ``depth`` levels of nesting; ``orderable`` excludes duration."""
    leaf = st.sampled_from(ORDERABLE_NATIVE_TYPES if orderable else NATIVE_TYPES)
    if depth == 0:
        return leaf
    inner = cql_types(depth - 1, orderable)
    ordered = cql_types(depth - 1, True)
    composite = st.one_of(
        inner.map(lambda element: ListType(element, frozen=True)),
        ordered.map(lambda element: SetType(element, frozen=True)),
        st.tuples(ordered, inner).map(lambda kv: MapType(kv[0], kv[1], frozen=True)),
        st.lists(inner, min_size=1, max_size=3).map(lambda parts: TupleType(tuple(parts))),
        st.lists(inner, min_size=1, max_size=3).map(_user_type),
    )
    return st.one_of(leaf, leaf, composite)


def _user_type(field_types: list[CqlType]) -> UserType:
    names = tuple(f"f{index}" for index in range(len(field_types)))
    return UserType("ks", "udt", names, tuple(field_types), frozen=True)


# --- values ------------------------------------------------------------------------------------


def _decimals() -> st.SearchStrategy[decimal.Decimal]:
    unscaled = st.one_of(st.integers(-1000, 1000), st.integers(-(2**200), 2**200))
    scale = st.one_of(st.integers(-5, 5), st.integers(*INT32))
    return st.builds(lambda u, s: decimal.Decimal(u).scaleb(-s, EXACT), unscaled, scale)


def _timestamps() -> st.SearchStrategy[object]:
    in_range = st.datetimes().map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))
    far = st.one_of(
        st.integers(
            INT64[0], (datetime.datetime.min - EPOCH) // datetime.timedelta(0, 0, 0, 1) - 1
        ),
        st.integers(
            (datetime.datetime.max - EPOCH) // datetime.timedelta(0, 0, 0, 1) + 1, INT64[1]
        ),
    )
    return st.one_of(in_range, in_range, far)


def _dates() -> st.SearchStrategy[object]:
    far = st.one_of(
        st.integers(INT32[0], (datetime.date.min - EPOCH_DATE).days - 1),
        st.integers((datetime.date.max - EPOCH_DATE).days + 1, INT32[1]),
    )
    return st.one_of(st.dates(), st.dates(), far)


def _times() -> st.SearchStrategy[object]:
    sub_micro = st.integers(0, TIME_NS_MAX).filter(lambda ns: ns % 1000 != 0)
    return st.one_of(st.times(), st.times(), sub_micro)


def _durations() -> st.SearchStrategy[Duration]:
    positive = st.builds(
        Duration, st.integers(0, INT32[1]), st.integers(0, INT32[1]), st.integers(0, INT64[1])
    )
    negative = st.builds(
        Duration, st.integers(INT32[0], 0), st.integers(INT32[0], 0), st.integers(INT64[0], 0)
    )
    small = st.builds(Duration, st.integers(0, 3), st.integers(0, 40), st.integers(0, 10**12))
    return st.one_of(positive, negative, small)


def _timeuuids() -> st.SearchStrategy[uuid.UUID]:
    # Any 60-bit time and any low 64 bits (the variant is not checked: Cassandra does not).
    return st.builds(
        lambda time, low: uuid.UUID(
            int=((time & 0xFFFF_FFFF) << 96)
            | (((time >> 32) & 0xFFFF) << 80)
            | ((0x1000 | (time >> 48)) << 64)
            | low
        ),
        st.one_of(st.integers(0, 2**60 - 1), st.integers(2**59, 2**59 + 3)),
        st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 2**63, 2**63 - 1, 2**64 - 1])),
    )


def _uuids() -> st.SearchStrategy[uuid.UUID]:
    raw = st.integers(0, 2**128 - 1).map(lambda n: uuid.UUID(int=n))
    return st.one_of(raw, st.uuids(version=4), _timeuuids())


NATIVE_VALUES: dict[str, Callable[[bool], st.SearchStrategy[Any]]] = {
    "ascii": lambda key: st.text(st.characters(max_codepoint=127)),
    "text": lambda key: st.text(),
    "blob": lambda key: st.binary(max_size=40),
    "boolean": lambda key: st.booleans(),
    "tinyint": lambda key: st.integers(-128, 127),
    "smallint": lambda key: st.integers(-(2**15), 2**15 - 1),
    "int": lambda key: st.integers(*INT32),
    "bigint": lambda key: st.integers(*INT64),
    "varint": lambda key: st.one_of(st.integers(-300, 300), st.integers(-(2**300), 2**300)),
    "decimal": lambda key: _decimals(),
    # NaN never equals itself, so it stays out of set elements and map keys.
    "float": lambda key: st.floats(width=32, allow_nan=not key),
    "double": lambda key: st.floats(allow_nan=not key),
    "timestamp": lambda key: _timestamps(),
    "date": lambda key: _dates(),
    "time": lambda key: _times(),
    "uuid": lambda key: _uuids(),
    "timeuuid": lambda key: _timeuuids(),
    "inet": lambda key: st.ip_addresses(),
    "duration": lambda key: _durations(),
}


def values(cql_type: CqlType, key: bool = False) -> st.SearchStrategy[Any]:
    """Values of ``cql_type``; ``key`` for set elements and map keys (no NaN)."""
    if isinstance(cql_type, NativeType):
        return NATIVE_VALUES[cql_type.name](key)
    if isinstance(cql_type, ListType):
        return st.lists(values(cql_type.element, key), max_size=4)
    if isinstance(cql_type, SetType):
        elements = values(cql_type.element, True)
        if codec_for(cql_type.element).hashable:
            return st.frozensets(elements, max_size=4)
        return st.lists(elements, max_size=4)
    if isinstance(cql_type, MapType):
        pairs = st.tuples(values(cql_type.key, True), values(cql_type.value, key))
        if codec_for(cql_type.key).hashable:
            return st.dictionaries(
                values(cql_type.key, True), values(cql_type.value, key), max_size=4
            )
        return st.lists(pairs, max_size=4)
    if isinstance(cql_type, TupleType):
        return _components(cql_type.elements, key).map(tuple)
    if isinstance(cql_type, UserType):
        return _components(cql_type.field_types, key).map(
            lambda parts: dict(zip(cql_type.field_names, parts, strict=False))
        )
    raise AssertionError(cql_type)


def _components(types: tuple[CqlType, ...], key: bool) -> st.SearchStrategy[list[Any]]:
    @st.composite
    def draw_components(draw: st.DrawFn) -> list[Any]:
        present = draw(st.integers(0, len(types)))  # trailing components may be missing
        return [
            draw(st.one_of(st.none(), values(part, key))) if index < present else None
            for index, part in enumerate(types)
        ][: present if draw(st.booleans()) else len(types)]

    return draw_components()


def typed_values(
    depth: int = 2, orderable: bool = False, count: int = 1
) -> st.SearchStrategy[tuple[CqlType, list[Any]]]:
    """A type and ``count`` values of it."""

    @st.composite
    def draw_typed(draw: st.DrawFn) -> tuple[CqlType, list[Any]]:
        cql_type = draw(cql_types(depth, orderable))
        return cql_type, [draw(values(cql_type)) for _ in range(count)]

    return draw_typed()


# --- expected round-trip results ---------------------------------------------------------------


def expected(cql_type: CqlType, value: Any) -> Any:
    """What ``deserialize(serialize(value))`` returns: sets and maps deduplicated (in element
    order when unhashable), tuples padded with None, UDTs as a dict of every field."""
    if isinstance(cql_type, NativeType):
        return value
    if isinstance(cql_type, ListType):
        return [expected(cql_type.element, item) for item in value]
    if isinstance(cql_type, SetType):
        items = [expected(cql_type.element, item) for item in value]
        if codec_for(cql_type.element).hashable:
            return frozenset(items)
        return _sorted_unique(cql_type.element, items)
    if isinstance(cql_type, MapType):
        pairs = list(value.items()) if isinstance(value, Mapping) else list(value)
        pairs = [(expected(cql_type.key, k), expected(cql_type.value, v)) for k, v in pairs]
        if codec_for(cql_type.key).hashable:
            return dict(pairs)
        return _sorted_unique_pairs(cql_type.key, pairs)
    if isinstance(cql_type, TupleType):
        padded = list(value) + [None] * (len(cql_type.elements) - len(value))
        return tuple(
            None if item is None else expected(part, item)
            for part, item in zip(cql_type.elements, padded, strict=True)
        )
    if isinstance(cql_type, UserType):
        return {
            name: None if value.get(name) is None else expected(part, value[name])
            for name, part in zip(cql_type.field_names, cql_type.field_types, strict=True)
        }
    raise AssertionError(cql_type)


def _sorted_unique(element: CqlType, items: list[Any]) -> list[Any]:
    """Sorted, and of equal items the one with the smallest serialized bytes (the codec's rule)."""
    ordered = sorted(items, key=functools.cmp_to_key(lambda a, b: model_compare(element, a, b)))
    unique: list[Any] = []
    for item in ordered:
        if unique and model_compare(element, unique[-1], item) == 0:
            if serialize(element, item) < serialize(element, unique[-1]):
                unique[-1] = item
            continue
        unique.append(item)
    return unique


def _sorted_unique_pairs(key: CqlType, pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Sorted by key; of equal keys the smallest key bytes with the last value."""
    kept: list[tuple[Any, Any]] = []
    for pair in pairs:
        equal = [
            index for index, old in enumerate(kept) if model_compare(key, old[0], pair[0]) == 0
        ]
        if not equal:
            kept.append(pair)
            continue
        old_key = kept[equal[0]][0]
        smaller = min(old_key, pair[0], key=lambda k: serialize(key, k))
        kept[equal[0]] = (smaller, pair[1])
    return sorted(kept, key=functools.cmp_to_key(lambda a, b: model_compare(key, a[0], b[0])))


def same(left: Any, right: Any) -> bool:
    """Equality that tells NaN, -0.0, a decimal's exponent and the Python type apart."""
    if isinstance(left, float) and isinstance(right, float):
        if math.isnan(left) or math.isnan(right):
            return math.isnan(left) and math.isnan(right)
        return left == right and math.copysign(1, left) == math.copysign(1, right)
    if type(left) is not type(right):
        return False
    if isinstance(left, decimal.Decimal):
        return left == right and left.as_tuple().exponent == right.as_tuple().exponent
    if isinstance(left, list | tuple):
        return len(left) == len(right) and all(map(same, left, right))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, frozenset):
        return left == right
    return bool(left == right)


# --- an independent model of Cassandra's order -------------------------------------------------


def _sign(number: int | float) -> int:
    return (number > 0) - (number < 0)


def _natural(left: Any, right: Any) -> int:
    return _sign((left > right) - (left < right))


def _java_float_compare(left: float, right: float) -> int:
    if math.isnan(left) or math.isnan(right):
        return int(math.isnan(left)) - int(math.isnan(right))
    if left != right:
        return _natural(left, right)
    return _natural(math.copysign(1, left), math.copysign(1, right))  # -0.0 < 0.0


def _uuid_version(value: uuid.UUID) -> int:
    return (value.int >> 76) & 0xF


def _uuid_model(left: uuid.UUID, right: uuid.UUID) -> int:
    """Cassandra UUIDType: version; v1 timestamp or the high 64 bits unsigned; low 64 unsigned."""
    if _uuid_version(left) != _uuid_version(right):
        return _natural(_uuid_version(left), _uuid_version(right))
    if _uuid_version(left) == 1 and left.time != right.time:
        return _natural(left.time, right.time)
    return _natural(left.int, right.int)  # high bits then low bits, unsigned: the 128-bit int


def _timeuuid_model(left: uuid.UUID, right: uuid.UUID) -> int:
    """TimeUUIDType: the timestamp, then the low 8 bytes one by one as signed Java bytes."""
    if left.time != right.time:
        return _natural(left.time, right.time)
    signed_left = list(struct.unpack(">8b", left.bytes[8:]))
    signed_right = list(struct.unpack(">8b", right.bytes[8:]))
    return _natural(signed_left, signed_right)


def _as_ms(value: datetime.datetime | int) -> int:
    if isinstance(value, int):
        return value
    return (value - EPOCH) // datetime.timedelta(milliseconds=1)


def _as_days(value: datetime.date | int) -> int:
    return value if isinstance(value, int) else (value - EPOCH_DATE).days


def _as_ns(value: datetime.time | int) -> int:
    if isinstance(value, int):
        return value
    seconds = value.hour * 3600 + value.minute * 60 + value.second
    return seconds * 10**9 + value.microsecond * 1000


NATIVE_MODELS: dict[str, Callable[[Any, Any], int]] = {
    "ascii": _natural,
    "text": _natural,  # code point order is UTF-8 byte order
    "blob": _natural,
    "boolean": _natural,
    "tinyint": _natural,
    "smallint": _natural,
    "int": _natural,
    "bigint": _natural,
    "varint": _natural,
    "decimal": _natural,  # numeric: 1.0 == 1.00
    "float": _java_float_compare,
    "double": _java_float_compare,
    "timestamp": lambda a, b: _natural(_as_ms(a), _as_ms(b)),
    "date": lambda a, b: _natural(_as_days(a), _as_days(b)),
    "time": lambda a, b: _natural(_as_ns(a), _as_ns(b)),
    "uuid": _uuid_model,
    "timeuuid": _timeuuid_model,
    "inet": lambda a, b: _natural(a.packed, b.packed),
}


def model_compare(cql_type: CqlType, left: Any, right: Any) -> int:
    """Cassandra's order on Python values, written independently of the codec."""
    if isinstance(cql_type, NativeType):
        return NATIVE_MODELS[cql_type.name](left, right)
    if isinstance(cql_type, ListType):
        return _lexicographic([cql_type.element] * max(len(left), len(right)), left, right)
    if isinstance(cql_type, SetType):
        element = cql_type.element
        return _lexicographic(
            [element] * max(len(left), len(right)),
            _sorted_unique(element, list(left)),
            _sorted_unique(element, list(right)),
        )
    if isinstance(cql_type, MapType):
        return _map_model(cql_type, left, right)
    if isinstance(cql_type, TupleType):
        return _components_model(cql_type.elements, list(left), list(right))
    if isinstance(cql_type, UserType):
        names = cql_type.field_names
        return _components_model(
            cql_type.field_types, [left.get(n) for n in names], [right.get(n) for n in names]
        )
    raise AssertionError(cql_type)


def _lexicographic(types: list[CqlType], left: list[Any], right: list[Any]) -> int:
    for part, a, b in zip(types, left, right, strict=False):
        result = model_compare(part, a, b)
        if result:
            return result
    return _natural(len(left), len(right))


def _map_model(cql_type: MapType, left: Any, right: Any) -> int:
    def entries(value: Any) -> list[tuple[Any, Any]]:
        pairs = list(value.items()) if isinstance(value, Mapping) else list(value)
        return _sorted_unique_pairs(cql_type.key, pairs)

    left_entries, right_entries = entries(left), entries(right)
    for (key_a, value_a), (key_b, value_b) in zip(left_entries, right_entries, strict=False):
        result = model_compare(cql_type.key, key_a, key_b) or model_compare(
            cql_type.value, value_a, value_b
        )
        if result:
            return result
    return _natural(len(left_entries), len(right_entries))


def _components_model(types: tuple[CqlType, ...], left: list[Any], right: list[Any]) -> int:
    left = left + [None] * (len(types) - len(left))
    right = right + [None] * (len(types) - len(right))
    for part, a, b in zip(types, left, right, strict=True):
        if a is None or b is None:
            result = _natural(a is not None, b is not None)  # null first
        else:
            result = model_compare(part, a, b)
        if result:
            return result
    return 0


def serialized_compare(cql_type: CqlType, left: Any, right: Any) -> int:
    """The codec's order of two Python values (serialize, then compare)."""
    return compare(cql_type, serialize(cql_type, left), serialize(cql_type, right))
