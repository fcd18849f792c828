"""CQL types as Spark and Arrow types, and CQL values as Spark/Arrow values and back.

The mapping is lossless: every CQL value survives CQL → Spark/Arrow → CQL with the same
serialized bytes (sets and maps are kept in CQL order). Where Spark has no exact type the value
travels as text with a documented canonical form:

=============  =========================  =====================================================
CQL            Spark (Arrow)              Python value on the Spark side
=============  =========================  =====================================================
ascii, text    string (string)            ``str``
blob           binary (binary)            ``bytes``
boolean        boolean (bool)             ``bool``
tinyint        byte (int8)                ``int``
smallint       short (int16)              ``int``
int            integer (int32)            ``int``
bigint         long (int64)               ``int``
varint         string (string)            decimal digits, e.g. ``"-12345678901234567890123"``:
                                          Spark's decimal stops at 38 digits, varint does not
decimal        string (string)            ``str(decimal.Decimal)``, e.g. ``"1.50"``, ``"1E+3"``:
                                          keeps CQL's scale, which a fixed Spark decimal cannot
float          float (float32)            ``float``
double         double (float64)           ``float``
timestamp      timestamp (us, tz=UTC)     aware UTC ``datetime`` (ms precision, as CQL)
date           date (date32)              ``datetime.date``
time           long (int64)               nanoseconds since midnight
uuid,timeuuid  string (string)            canonical lowercase UUID text
inet           string (string)            ``str(ipaddress)``
duration       string (string)            ``[-]<months>mo<days>d<nanoseconds>ns``, e.g.
                                          ``"1mo2d3ns"`` (sign applies to all three)
list, set      array (list)               ``list``; a set in CQL element order
map            map (map)                  ``dict`` in CQL key order (a frozen-collection key
                                          becomes a ``tuple``)
tuple          struct ``_1.._n`` (struct)  ``tuple`` (null components are ``None``)
UDT            struct of its fields        ``tuple`` in field order
=============  =========================  =====================================================

CQL timestamps and dates outside Python's ``datetime`` range (years 1-9999) have no Spark value
and raise :class:`InvalidChange`. Values read back (:func:`from_spark_value`) may come from a
Spark ``Row`` (naive timestamps are local time, as PySpark makes them) or from Arrow's
``to_pylist`` (aware timestamps, maps as lists of pairs); both are accepted.
"""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import types as st

from ringflow.pipeline._errors import InvalidChange
from ringflow.schema import (
    CqlType,
    Duration,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    comparable_bytes,
    serialize,
)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_NS_PER_SECOND = 1_000_000_000

_SPARK_NATIVE: dict[str, st.DataType] = {
    "ascii": st.StringType(),
    "text": st.StringType(),
    "blob": st.BinaryType(),
    "boolean": st.BooleanType(),
    "tinyint": st.ByteType(),
    "smallint": st.ShortType(),
    "int": st.IntegerType(),
    "bigint": st.LongType(),
    "varint": st.StringType(),
    "decimal": st.StringType(),
    "float": st.FloatType(),
    "double": st.DoubleType(),
    "timestamp": st.TimestampType(),
    "date": st.DateType(),
    "time": st.LongType(),
    "uuid": st.StringType(),
    "timeuuid": st.StringType(),
    "inet": st.StringType(),
    "duration": st.StringType(),
}

_ARROW_NATIVE: dict[str, Any] = {
    "ascii": pa.string(),
    "text": pa.string(),
    "blob": pa.binary(),
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "varint": pa.string(),
    "decimal": pa.string(),
    "float": pa.float32(),
    "double": pa.float64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
    "time": pa.int64(),
    "uuid": pa.string(),
    "timeuuid": pa.string(),
    "inet": pa.string(),
    "duration": pa.string(),
}


def tuple_field_names(size: int) -> list[str]:
    """Struct field names of a CQL tuple: ``_1`` .. ``_n`` (Python's and Scala's convention)."""
    return [f"_{index + 1}" for index in range(size)]


def spark_type(cql_type: CqlType) -> st.DataType:
    """The Spark type of a CQL type (table in the module docstring)."""
    if isinstance(cql_type, NativeType):
        return _SPARK_NATIVE[cql_type.name]
    if isinstance(cql_type, ListType | SetType):
        return st.ArrayType(spark_type(cql_type.element), containsNull=False)
    if isinstance(cql_type, MapType):
        return st.MapType(spark_type(cql_type.key), spark_type(cql_type.value), False)
    if isinstance(cql_type, TupleType):
        names = tuple_field_names(len(cql_type.elements))
        return st.StructType(
            [
                st.StructField(n, spark_type(t))
                for n, t in zip(names, cql_type.elements, strict=True)
            ]
        )
    if isinstance(cql_type, UserType):
        pairs = zip(cql_type.field_names, cql_type.field_types, strict=True)
        return st.StructType([st.StructField(n, spark_type(t)) for n, t in pairs])
    raise InvalidChange(f"no Spark type for CQL type {cql_type.cql_name()}")


def arrow_type(cql_type: CqlType) -> Any:
    """The Arrow type Spark uses for :func:`spark_type` of ``cql_type`` (timestamps in UTC)."""
    if isinstance(cql_type, NativeType):
        return _ARROW_NATIVE[cql_type.name]
    if isinstance(cql_type, ListType | SetType):
        return pa.list_(pa.field("element", arrow_type(cql_type.element), nullable=False))
    if isinstance(cql_type, MapType):
        value = pa.field("value", arrow_type(cql_type.value), nullable=False)
        return pa.map_(arrow_type(cql_type.key), value)
    if isinstance(cql_type, TupleType):
        names = tuple_field_names(len(cql_type.elements))
        pairs = zip(names, cql_type.elements, strict=True)
        return pa.struct([pa.field(n, arrow_type(t)) for n, t in pairs])
    if isinstance(cql_type, UserType):
        pairs = zip(cql_type.field_names, cql_type.field_types, strict=True)
        return pa.struct([pa.field(n, arrow_type(t)) for n, t in pairs])
    raise InvalidChange(f"no Arrow type for CQL type {cql_type.cql_name()}")


# --- CQL value -> Spark value ------------------------------------------------------------------


def cql_sort_key(cql_type: CqlType, value: object) -> bytes:
    """Bytes whose order is CQL's order of ``value`` (for sets and map keys)."""
    return comparable_bytes(cql_type, serialize(cql_type, value))


def _sorted_cql(cql_type: CqlType, values: Iterable[Any]) -> list[Any]:
    return sorted(values, key=lambda value: cql_sort_key(cql_type, value))


def to_spark_value(cql_type: CqlType, value: object) -> object:
    """A CQL Python value (as the codec returns it) as a Spark/Arrow Python value."""
    if value is None:
        return None
    if isinstance(cql_type, NativeType):
        return _native_to_spark(cql_type.name, value)
    if isinstance(cql_type, ListType):
        return [to_spark_value(cql_type.element, item) for item in _iterable(cql_type, value)]
    if isinstance(cql_type, SetType):
        items = _sorted_cql(cql_type.element, _iterable(cql_type, value))
        return [to_spark_value(cql_type.element, item) for item in items]
    if isinstance(cql_type, MapType):
        pairs = _pairs(cql_type, value)
        ordered = sorted(pairs, key=lambda pair: cql_sort_key(cql_type.key, pair[0]))
        return {
            _hashable(to_spark_value(cql_type.key, k)): to_spark_value(cql_type.value, v)
            for k, v in ordered
        }
    if isinstance(cql_type, TupleType):
        items = list(_iterable(cql_type, value))
        items += [None] * (len(cql_type.elements) - len(items))
        return tuple(to_spark_value(t, v) for t, v in zip(cql_type.elements, items, strict=True))
    if isinstance(cql_type, UserType):
        fields = _udt_fields(cql_type, value)
        return tuple(
            to_spark_value(t, fields.get(n))
            for n, t in zip(cql_type.field_names, cql_type.field_types, strict=True)
        )
    raise InvalidChange(f"no Spark value for CQL type {cql_type.cql_name()}")


def _hashable(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def _iterable(cql_type: CqlType, value: object) -> Iterable[Any]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidChange(f"{cql_type.cql_name()} value must be a collection, got {value!r}")
    return value


def _pairs(cql_type: MapType, value: object) -> list[tuple[Any, Any]]:
    if isinstance(value, Mapping):
        return list(value.items())
    return [(pair[0], pair[1]) for pair in _iterable(cql_type, value)]


def _udt_fields(cql_type: UserType, value: object) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    if hasattr(value, "asDict"):
        return dict(value.asDict())
    items = list(_iterable(cql_type, value))
    return dict(zip(cql_type.field_names, items, strict=False))


def _native_to_spark(name: str, value: object) -> object:
    if name in ("varint", "decimal", "inet"):
        return str(value)
    if name in ("uuid", "timeuuid"):
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
    if name == "timestamp":
        return _timestamp_to_spark(value)
    if name == "date":
        return _date_to_spark(value)
    if name == "time":
        return _time_to_ns(value)
    if name == "duration":
        return format_duration(value)
    if name == "blob" and isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def _timestamp_to_spark(value: object) -> datetime.datetime:
    if isinstance(value, datetime.datetime):
        return value.replace(tzinfo=datetime.UTC) if value.tzinfo is None else value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return _EPOCH + datetime.timedelta(milliseconds=value)
        except OverflowError:
            raise InvalidChange(
                f"timestamp {value} ms is outside the years 1-9999 Spark can hold"
            ) from None
    raise InvalidChange(f"timestamp value must be a datetime or int ms, got {value!r}")


def _date_to_spark(value: object) -> datetime.date:
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return datetime.date(1970, 1, 1) + datetime.timedelta(days=value)
        except OverflowError:
            raise InvalidChange(f"date {value} days is outside the years 1-9999") from None
    raise InvalidChange(f"date value must be a date or int days, got {value!r}")


def _time_to_ns(value: object) -> int:
    if isinstance(value, datetime.time):
        seconds = value.hour * 3600 + value.minute * 60 + value.second
        return seconds * _NS_PER_SECOND + value.microsecond * 1000
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InvalidChange(f"time value must be a datetime.time or int ns, got {value!r}")


_DURATION_TEXT = re.compile(r"^(-?)(\d+)mo(\d+)d(\d+)ns$")


def format_duration(value: object) -> str:
    """``[-]<months>mo<days>d<nanoseconds>ns`` of a CQL duration (all parts share one sign)."""
    months = int(getattr(value, "months", 0))
    days = int(getattr(value, "days", 0))
    nanoseconds = int(getattr(value, "nanoseconds", 0))
    sign = "-" if min(months, days, nanoseconds) < 0 else ""
    return f"{sign}{abs(months)}mo{abs(days)}d{abs(nanoseconds)}ns"


def parse_duration(text: str) -> Duration:
    """The inverse of :func:`format_duration`; InvalidChange on any other text."""
    match = _DURATION_TEXT.match(text)
    if match is None:
        raise InvalidChange(f"duration text {text!r} is not of the form [-]<n>mo<n>d<n>ns")
    sign = -1 if match.group(1) else 1
    months, days, nanoseconds = (sign * int(match.group(i)) for i in (2, 3, 4))
    return Duration(months, days, nanoseconds)


# --- Spark value -> CQL value ------------------------------------------------------------------


def from_spark_value(cql_type: CqlType, value: object) -> object:
    """The CQL Python value (codec form) of a Spark ``Row`` value or an Arrow ``to_pylist`` one."""
    if value is None:
        return None
    if isinstance(cql_type, NativeType):
        return _native_from_spark(cql_type.name, value)
    if isinstance(cql_type, ListType):
        return [from_spark_value(cql_type.element, item) for item in _iterable(cql_type, value)]
    if isinstance(cql_type, SetType):
        return frozenset(
            _hashable_cql(from_spark_value(cql_type.element, item))
            for item in _iterable(cql_type, value)
        )
    if isinstance(cql_type, MapType):
        return {
            _hashable_cql(from_spark_value(cql_type.key, k)): from_spark_value(cql_type.value, v)
            for k, v in _pairs(cql_type, value)
        }
    if isinstance(cql_type, TupleType):
        items = _struct_items(value, tuple_field_names(len(cql_type.elements)))
        return tuple(from_spark_value(t, v) for t, v in zip(cql_type.elements, items, strict=True))
    if isinstance(cql_type, UserType):
        items = _struct_items(value, list(cql_type.field_names))
        pairs = zip(cql_type.field_names, cql_type.field_types, items, strict=True)
        return {name: from_spark_value(field_type, item) for name, field_type, item in pairs}
    raise InvalidChange(f"no CQL value for CQL type {cql_type.cql_name()}")


def _hashable_cql(value: object) -> object:
    """Collections used as set elements or map keys must be hashable in Python."""
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, dict):
        return tuple(value.items())
    return value


def _struct_items(value: object, names: list[str]) -> list[Any]:
    if isinstance(value, Mapping):
        return [value.get(name) for name in names]
    if hasattr(value, "asDict"):
        as_dict = value.asDict()
        return [as_dict.get(name) for name in names]
    items = list(value) if isinstance(value, Iterable) else []
    if len(items) != len(names):
        raise InvalidChange(f"struct value {value!r} does not have the fields {names}")
    return items


def _native_from_spark(name: str, value: object) -> object:
    try:
        return _NATIVE_FROM_SPARK.get(name, _identity)(value)
    except (ValueError, TypeError, ArithmeticError) as error:
        raise InvalidChange(f"{name} value {value!r} cannot be read: {error}") from None


def _identity(value: object) -> object:
    return value


def _timestamp_from_spark(value: object) -> datetime.datetime:
    if not isinstance(value, datetime.datetime):
        raise TypeError("expected a datetime")
    # PySpark's Row gives naive local time; Arrow gives aware datetimes.
    aware = value.astimezone(datetime.UTC)
    return aware.replace(tzinfo=None)


def _time_from_spark(value: Any) -> object:
    nanoseconds = int(value)
    if nanoseconds % 1000:
        return nanoseconds
    micros = nanoseconds // 1000
    seconds, micro = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return datetime.time(hour, minute, second, micro)


def _blob_from_spark(value: Any) -> bytes:
    return bytes(value)


_NATIVE_FROM_SPARK: dict[str, Any] = {
    "varint": int,
    "decimal": lambda value: decimal.Decimal(str(value)),
    "uuid": lambda value: uuid.UUID(str(value)),
    "timeuuid": lambda value: uuid.UUID(str(value)),
    "inet": lambda value: ipaddress.ip_address(str(value)),
    "timestamp": _timestamp_from_spark,
    "time": _time_from_spark,
    "duration": lambda value: parse_duration(str(value)),
    "blob": _blob_from_spark,
    "float": float,
    "double": float,
}
