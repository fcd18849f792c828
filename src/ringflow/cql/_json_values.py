"""CQL values as JSON text, as Cassandra's ``toJson()`` and ``SELECT JSON`` write them
(``AbstractType.toJSONString`` of each type). Pure.

Rules: numbers and booleans bare; text, ascii, uuid, timeuuid, inet, date, time, duration as
JSON strings; timestamps ``"yyyy-mm-dd hh:mm:ss.fffZ"`` (UTC); blobs ``"0x..."``; lists, sets
and tuples as arrays; maps and UDTs as objects, a map key that is not text written as the JSON
text of the key (``{"1": "a"}``), a field name as it is; null as ``null``. ``SELECT JSON``
answers one text column ``[json]`` holding an object of the selected columns by name (a name
that is not a lowercase identifier in quotes, as CQL would need it).
"""

from __future__ import annotations

import datetime
import decimal
import json
import re
from collections.abc import Sequence

from ringflow.schema import (
    CqlType,
    Duration,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    cells_from_collection_value,
    deserialize,
    list_values,
    serialize,
)

_UNQUOTED = re.compile(r"[a-z][a-z0-9_]*")
_STRING_TYPES = frozenset({"text", "ascii", "varchar", "uuid", "timeuuid", "inet"})
_EMPTY_AS_IS = frozenset({"text", "ascii", "varchar", "blob"})
_DURATION_UNITS = (
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
)


def to_json(cql_type: CqlType, data: bytes | None) -> str:
    """The JSON text of one serialized value (``null`` for none); collections in their CQL
    order (a set by its element type's order, a map by its key's)."""
    if data is None:
        return "null"
    if not data and isinstance(cql_type, NativeType) and cql_type.name not in _EMPTY_AS_IS:
        return '""'  # an empty value: Int32Type.toJSONString's Objects.toString(null, "\"\"")
    if isinstance(cql_type, ListType):
        return "[" + ", ".join(to_json(cql_type.element, item) for item in list_values(
            cql_type, data)) + "]"  # fmt: skip
    if isinstance(cql_type, SetType):
        elements = cells_from_collection_value(cql_type, data)
        return "[" + ", ".join(to_json(cql_type.element, item) for item, _ in elements) + "]"
    if isinstance(cql_type, MapType):
        entries = cells_from_collection_value(cql_type, data)
        parts = [f"{_map_key(cql_type.key, k)}: {to_json(cql_type.value, v)}" for k, v in entries]
        return "{" + ", ".join(parts) + "}"
    value = deserialize(cql_type, data)
    if isinstance(cql_type, TupleType):
        assert isinstance(value, tuple | list)
        items = zip(cql_type.elements, value, strict=True)
        return "[" + ", ".join(_value_json(t, v) for t, v in items) + "]"
    if isinstance(cql_type, UserType):
        assert isinstance(value, dict)
        fields = [
            f"{json.dumps(_key_name(name))}: {_value_json(field_type, value.get(name))}"
            for name, field_type in zip(cql_type.field_names, cql_type.field_types, strict=True)
        ]
        return "{" + ", ".join(fields) + "}"
    assert isinstance(cql_type, NativeType)
    return _native(cql_type.name, value)


def _value_json(cql_type: CqlType, value: object) -> str:
    return "null" if value is None else to_json(cql_type, serialize(cql_type, value))


def json_object(names: Sequence[str], types: Sequence[CqlType], row: Sequence[bytes | None]) -> str:
    """``SELECT JSON``'s object for one row of the selection."""
    parts = [
        f"{json.dumps(_key_name(name))}: {to_json(cql_type, data)}"
        for name, cql_type, data in zip(names, types, row, strict=True)
    ]
    return "{" + ", ".join(parts) + "}"


def _key_name(name: str) -> str:
    return name if _UNQUOTED.fullmatch(name) else '"' + name.replace('"', '""') + '"'


def _map_key(key_type: CqlType, key: bytes) -> str:
    if isinstance(key_type, NativeType) and key_type.name in ("text", "ascii", "varchar"):
        return json.dumps(deserialize(key_type, key))
    text = to_json(key_type, key)  # MapType.toJSONString: a key already a JSON string stays as is
    return text if text.startswith('"') else json.dumps(text)


def _native(name: str, value: object) -> str:
    if name in _STRING_TYPES:
        return json.dumps(str(value))
    if name == "boolean":
        return "true" if value else "false"
    if name == "blob":
        assert isinstance(value, bytes | bytearray)
        return json.dumps("0x" + bytes(value).hex())
    if name == "timestamp":
        assert isinstance(value, datetime.datetime)
        return json.dumps(
            value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
        )
    if name == "date":
        return json.dumps(value.isoformat() if isinstance(value, datetime.date) else str(value))
    if name == "time":
        if isinstance(value, int):  # nanoseconds since midnight
            seconds, nanos = divmod(value, 1_000_000_000)
            minutes, second = divmod(seconds, 60)
            return json.dumps(f"{minutes // 60:02d}:{minutes % 60:02d}:{second:02d}.{nanos:09d}")
        return json.dumps(str(value))
    if name == "duration":
        assert isinstance(value, Duration)
        return json.dumps(_duration_text(value))
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return json.dumps(str(value).replace("inf", "Infinity").replace("nan", "NaN"))
    if isinstance(value, decimal.Decimal):
        return str(value)
    return json.dumps(value)


def _duration_text(value: Duration) -> str:
    """Cassandra's ``Duration.toString``: ``-1y2mo3d4h5m6s7ms8us9ns``, zero parts left out."""
    months, days, nanos = value.months, value.days, value.nanoseconds
    negative = months < 0 or days < 0 or nanos < 0
    months, days, nanos = abs(months), abs(days), abs(nanos)
    text = "-" if negative else ""
    if months // 12:
        text += f"{months // 12}y"
    if months % 12:
        text += f"{months % 12}mo"
    if days:
        text += f"{days}d"
    for unit, size in _DURATION_UNITS:
        if nanos >= size:
            text += f"{nanos // size}{unit}"
            nanos %= size
    return text or "0s"
