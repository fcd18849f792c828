"""The [option] encoding of column types in result and prepared metadata.

Owns ``doc/native_protocol_v4.spec`` §4.2.5.2 (the option ids 0x0000-0x0031) and maps them to
and from the schema layer's descriptors (``ringflow.schema``: NativeType, ListType, SetType,
MapType, TupleType, UserType).

Rules:

* v4 has no id for ``duration``: like Cassandra we send it as Custom 0x0000 with the class name
  ``org.apache.cassandra.db.marshal.DurationType``, and accept v5's 0x0015 when reading.
* ``text`` is sent as 0x000D (varchar); 0x000A (text, pre-v3) is accepted when reading.
* The wire does not say whether a collection or UDT is frozen. Decoding yields the top-level
  type non-frozen and everything nested frozen (the only legal choice inside a collection,
  tuple or UDT). Counter (0x0005) and unknown custom classes are refused: ringflow's schema
  cannot describe them.
* Nesting is limited to ``MAX_TYPE_NESTING`` levels so that a body of repeated ``list`` ids
  cannot exhaust the Python stack.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ringflow.cql._wire import LocalProtocolError, Reader, Writer
from ringflow.errors import ProtocolViolation, invariant
from ringflow.schema import (
    CqlType,
    ListType,
    MapType,
    NativeType,
    SchemaError,
    SetType,
    TupleType,
    UserType,
)

MAX_TYPE_NESTING = 32

_CUSTOM = 0x0000
_COUNTER = 0x0005
_LEGACY_TEXT = 0x000A
_V5_DURATION = 0x0015
_LIST = 0x0020
_MAP = 0x0021
_SET = 0x0022
_UDT = 0x0030
_TUPLE = 0x0031

_MARSHAL_PREFIX = "org.apache.cassandra.db.marshal."
_DURATION_CLASS = _MARSHAL_PREFIX + "DurationType"

_NATIVE_IDS: dict[str, int] = {
    "ascii": 0x0001,
    "bigint": 0x0002,
    "blob": 0x0003,
    "boolean": 0x0004,
    "decimal": 0x0006,
    "double": 0x0007,
    "float": 0x0008,
    "int": 0x0009,
    "timestamp": 0x000B,
    "uuid": 0x000C,
    "text": 0x000D,
    "varint": 0x000E,
    "timeuuid": 0x000F,
    "inet": 0x0010,
    "date": 0x0011,
    "time": 0x0012,
    "smallint": 0x0013,
    "tinyint": 0x0014,
}
_NATIVE_BY_ID: dict[int, NativeType] = {
    **{option_id: NativeType(name) for name, option_id in _NATIVE_IDS.items()},
    _LEGACY_TEXT: NativeType("text"),
    _V5_DURATION: NativeType("duration"),
}
_NATIVE_BY_CLASS: dict[str, NativeType] = {
    _MARSHAL_PREFIX + class_name: NativeType(name)
    for class_name, name in {
        "AsciiType": "ascii",
        "LongType": "bigint",
        "BytesType": "blob",
        "BooleanType": "boolean",
        "DecimalType": "decimal",
        "DoubleType": "double",
        "FloatType": "float",
        "Int32Type": "int",
        "TimestampType": "timestamp",
        "UUIDType": "uuid",
        "UTF8Type": "text",
        "IntegerType": "varint",
        "TimeUUIDType": "timeuuid",
        "InetAddressType": "inet",
        "SimpleDateType": "date",
        "TimeType": "time",
        "ShortType": "smallint",
        "ByteType": "tinyint",
        "DurationType": "duration",
    }.items()
}


@functools.singledispatch
def write_option_type(cql_type: CqlType, out: Writer) -> None:
    """Append ``cql_type`` to ``out`` as an [option] (dispatch on the descriptor's class)."""
    raise LocalProtocolError(f"no [option] encoding for type {cql_type!r}")


@write_option_type.register
def _write_native(cql_type: NativeType, out: Writer) -> None:
    option_id = _NATIVE_IDS.get(cql_type.name)
    if option_id is None:
        invariant(cql_type.name == "duration", f"no option id for {cql_type.name}")
        out.write_short(_CUSTOM)
        out.write_string(_DURATION_CLASS)
        return
    out.write_short(option_id)


@write_option_type.register
def _write_list(cql_type: ListType, out: Writer) -> None:
    out.write_short(_LIST)
    write_option_type(cql_type.element, out)


@write_option_type.register
def _write_set(cql_type: SetType, out: Writer) -> None:
    out.write_short(_SET)
    write_option_type(cql_type.element, out)


@write_option_type.register
def _write_map(cql_type: MapType, out: Writer) -> None:
    out.write_short(_MAP)
    write_option_type(cql_type.key, out)
    write_option_type(cql_type.value, out)


@write_option_type.register
def _write_tuple(cql_type: TupleType, out: Writer) -> None:
    out.write_short(_TUPLE)
    out.write_short(len(cql_type.elements))
    for element in cql_type.elements:
        write_option_type(element, out)


@write_option_type.register
def _write_udt(cql_type: UserType, out: Writer) -> None:
    out.write_short(_UDT)
    out.write_string(cql_type.keyspace)
    out.write_string(cql_type.name)
    out.write_short(len(cql_type.field_names))
    for name, field_type in zip(cql_type.field_names, cql_type.field_types, strict=True):
        out.write_string(name)
        write_option_type(field_type, out)


def read_option_type(reader: Reader) -> CqlType:
    """Read one [option] type: the top level non-frozen, nested types frozen."""
    return _read(reader, 0)


def _read(reader: Reader, depth: int) -> CqlType:
    if depth > MAX_TYPE_NESTING:
        raise ProtocolViolation(f"type nested deeper than {MAX_TYPE_NESTING} levels")
    option_id = reader.read_short()
    native = _NATIVE_BY_ID.get(option_id)
    if native is not None:
        return native
    decoder = _DECODERS.get(option_id)
    if decoder is None:
        raise ProtocolViolation(f"unknown or unsupported type option id 0x{option_id:04x}")
    decoded = decoder(reader, depth + 1)
    return decoded.frozen_form() if depth > 0 else decoded


def _read_custom(reader: Reader, depth: int) -> CqlType:
    class_name = reader.read_string()
    native = _NATIVE_BY_CLASS.get(class_name)
    if native is None:
        raise ProtocolViolation(f"unsupported custom type {class_name!r}")
    return native


def _read_counter(reader: Reader, depth: int) -> CqlType:
    raise ProtocolViolation("counter columns are not supported by ringflow")


def _read_list(reader: Reader, depth: int) -> CqlType:
    return ListType(_read(reader, depth))


def _read_set(reader: Reader, depth: int) -> CqlType:
    return SetType(_read(reader, depth))


def _read_map(reader: Reader, depth: int) -> CqlType:
    key = _read(reader, depth)
    return MapType(key, _read(reader, depth))


def _read_tuple(reader: Reader, depth: int) -> CqlType:
    return TupleType(tuple(_read(reader, depth) for _ in range(reader.read_short())))


def _read_udt(reader: Reader, depth: int) -> CqlType:
    keyspace = reader.read_string()
    name = reader.read_string()
    names: list[str] = []
    types: list[CqlType] = []
    for _ in range(reader.read_short()):
        names.append(reader.read_string())
        types.append(_read(reader, depth))
    try:
        return UserType(keyspace, name, tuple(names), tuple(types))
    except SchemaError as error:
        raise ProtocolViolation(f"invalid user type {keyspace}.{name}: {error}") from None


_DECODERS: dict[int, Callable[[Reader, int], CqlType]] = {
    _CUSTOM: _read_custom,
    _COUNTER: _read_counter,
    _LIST: _read_list,
    _SET: _read_set,
    _MAP: _read_map,
    _TUPLE: _read_tuple,
    _UDT: _read_udt,
}
