"""JSON text to CQL values, as Cassandra's ``INSERT ... JSON`` and ``fromJson()`` read it: the
inverse of ``_json_values``. Pure.

Rules (Cassandra ``cql3/Json.java``, ``FromJsonFct``, each ``AbstractType.fromJSONObject``,
re-expressed):

* ``INSERT JSON`` takes one JSON object; a key is a column name, case-insensitive unless it is
  quoted inside the JSON (``"\\"MixedCase\\""``); an unknown name is Invalid ("JSON values map
  contains unrecognized column: x"); a JSON ``null`` writes null; a missing column is null
  (``DEFAULT NULL``, a tombstone) or left untouched (``DEFAULT UNSET``);
* integers (``tinyint`` .. ``bigint``, ``varint``) as JSON numbers in range or numeric strings;
  ``int`` takes only numbers that fit 32 bits, ``bigint`` 64 bits (Jackson's Integer/Long);
  ``decimal``, ``float``, ``double`` as numbers or strings (``"NaN"``, ``"Infinity"``);
  ``boolean`` as ``true``/``false`` or those strings; ``timestamp`` as a string or milliseconds;
  ``date``, ``time``, ``duration``, ``uuid``, ``timeuuid``, ``inet`` and text as strings only;
  ``blob`` as ``"0x.."``;
* lists and sets as arrays (no null element), maps as objects whose keys are the key type's
  JSON read from a string (``{"1": "a"}`` for an int key), tuples as arrays (missing trailing
  components null), UDTs as objects (field names as columns, missing fields null); any of these
  may also come as a JSON string holding the JSON;
* an empty string is an empty value for the types whose ``fromString`` gives one (``int``,
  ``bigint``, ``varint``, ``decimal``, ``float``, ``double``, ``boolean``, ``timestamp``,
  ``uuid``, ``timeuuid``, ``inet``; text and blobs are empty anyway);
* a value that does not fit is :class:`JsonValueError` with Cassandra's message; the caller
  prefixes it ("Error decoding JSON value for v: ..." for INSERT JSON).
"""

from __future__ import annotations

import decimal
import ipaddress
import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ringflow.cql._literal_text import parse_date, parse_duration, parse_time, parse_timestamp
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    CqlType,
    InvalidValue,
    ListType,
    MapType,
    NativeType,
    SetType,
    Table,
    TupleType,
    UserType,
    serialize,
)

MAX_JSON_DEPTH = 64
"""Nesting deeper than this is refused before Python's recursion limit is near."""
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_EMPTY_FROM_STRING = frozenset(
    {"int", "bigint", "varint", "decimal", "float", "double", "boolean", "timestamp", "uuid",
     "timeuuid", "inet", "text", "ascii", "blob"}
)  # fmt: skip


class JsonValueError(ValueError):
    """A JSON value that does not fit its type (Cassandra's ``MarshalException`` message)."""


@dataclass(frozen=True, slots=True)
class JsonFloat:
    """A JSON number with a fraction or exponent, kept as written (a decimal loses nothing)."""

    text: str


@dataclass(frozen=True, slots=True)
class Missing:
    """A column the JSON object does not name (``DEFAULT NULL`` / ``DEFAULT UNSET`` decide)."""


MISSING = Missing()
JsonObject = object
"""What :func:`decode_json` returns: dict, list, str, int, JsonFloat, bool or None."""


# --- decoding ------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> object:
    raise ValueError(f"Non-standard token '{name}': not allowed in JSON")


def decode_json(text: str) -> JsonObject:
    """Parse JSON text (Jackson's rules: no bare NaN/Infinity); ValueError if malformed."""
    decoded = json.loads(text, parse_float=JsonFloat, parse_constant=_refuse_constant)
    _check_depth(decoded, 0)
    return decoded


def _check_depth(value: JsonObject, depth: int) -> None:
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, dict):
        for item in value.values():
            _check_depth(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_depth(item, depth + 1)


def java_name(value: JsonObject) -> str:
    """The Java class Jackson would have decoded ``value`` to (Cassandra's messages name it)."""
    if isinstance(value, bool):
        return "Boolean"
    if isinstance(value, int):
        if _INT32[0] <= value <= _INT32[1]:
            return "Integer"
        return "Long" if _INT64[0] <= value <= _INT64[1] else "BigInteger"
    names = {JsonFloat: "Double", str: "String", list: "ArrayList", dict: "LinkedHashMap"}
    return names.get(type(value), type(value).__name__)


def java_text(value: JsonObject) -> str:
    """``value`` as Java's ``toString`` writes it (``[1, 2]``, ``{a=1}``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, JsonFloat):
        return value.text
    if isinstance(value, list):
        return "[" + ", ".join(java_text(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={java_text(v)}" for k, v in value.items()) + "}"
    return "null" if value is None else str(value)


def _expected(what: str, value: JsonObject) -> JsonValueError:
    return JsonValueError(f"Expected {what}, but got a {java_name(value)}: {java_text(value)}")


# --- one value -----------------------------------------------------------------------------------


def json_value_bytes(cql_type: CqlType, value: JsonObject, column: str) -> bytes:
    """The serialized value of a decoded, non-null JSON value for a receiver of ``cql_type``."""
    if (
        value == ""
        and isinstance(cql_type, NativeType)
        and cql_type.name in _EMPTY_FROM_STRING
        and not isinstance(value, bool)
    ):
        return b""
    try:
        return serialize(cql_type, json_python_value(cql_type, value), column)
    except InvalidValue as error:
        raise JsonValueError(str(error)) from None


def json_python_value(cql_type: CqlType, value: JsonObject) -> object:
    """The codec's Python form of a decoded JSON value for ``cql_type`` (null is None)."""
    if value is None:
        return None
    if isinstance(cql_type, NativeType):
        return _NATIVE[cql_type.name](value)
    if isinstance(value, str):
        value = _nested_json(value)
    if isinstance(cql_type, ListType | SetType):
        return _sequence(cql_type, value)
    if isinstance(cql_type, MapType):
        return _map(cql_type, value)
    if isinstance(cql_type, TupleType):
        return _tuple(cql_type, value)
    assert isinstance(cql_type, UserType)
    return _user_type(cql_type, value)


def _nested_json(text: str) -> JsonObject:
    try:
        return decode_json(text)
    except ValueError as error:
        raise JsonValueError(f"Error decoding JSON string: {error}") from None


def _sequence(cql_type: ListType | SetType, value: JsonObject) -> list[object]:
    kind = "list" if isinstance(cql_type, ListType) else "set"
    if not isinstance(value, list):
        shown = "a list" if kind == "list" else "a list (representing a set)"
        raise _expected(shown, value)
    elements = []
    for item in value:
        if item is None:
            raise JsonValueError(f"Invalid null element in {kind}")
        elements.append(json_python_value(cql_type.element, item))
    return elements


def _map(cql_type: MapType, value: JsonObject) -> list[tuple[object, object]]:
    if not isinstance(value, dict):
        raise _expected("a map", value)
    entries = []
    for key, item in value.items():
        if item is None:
            raise JsonValueError("Invalid null value in map")
        entries.append(
            (json_python_value(cql_type.key, key), json_python_value(cql_type.value, item))
        )
    return entries


def _tuple(cql_type: TupleType, value: JsonObject) -> tuple[object, ...]:
    if not isinstance(value, list):
        raise _expected("a list representation of a tuple", value)
    if len(value) > len(cql_type.elements):
        raise JsonValueError(
            f"Tuple contains extra items (expected {len(cql_type.elements)}): {java_text(value)}"
        )
    return tuple(
        json_python_value(element_type, item)
        for element_type, item in zip(cql_type.elements, value, strict=False)
    )


def _user_type(cql_type: UserType, value: JsonObject) -> dict[str, object]:
    if not isinstance(value, dict):
        raise _expected("a map", value)
    fields = case_folded(value)
    for name in fields:
        if name not in cql_type.field_names:
            raise JsonValueError(
                f"Unknown field '{name}' in value of user defined type {cql_type.name}"
            )
    return {
        name: json_python_value(field_type, fields.get(name))
        for name, field_type in zip(cql_type.field_names, cql_type.field_types, strict=True)
    }


def case_folded(value: Mapping[str, JsonObject]) -> dict[str, JsonObject]:
    """Keys as CQL names: ``"\\"Name\\""`` keeps its case (quotes dropped), others lowercased."""
    folded: dict[str, JsonObject] = {}
    for key, item in value.items():
        if len(key) >= 2 and key.startswith('"') and key.endswith('"'):
            folded[key[1:-1]] = item
        else:
            folded[key.lower()] = item
    return folded


# --- native types --------------------------------------------------------------------------------


def _integer(type_name: str, java: str, bounds: tuple[int, int] | None) -> Callable[[object], int]:
    """``tinyint``/``smallint`` take any number (Cassandra parses ``String.valueOf`` of it);
    ``int``/``bigint`` only JSON integers within ``bounds``; all take numeric strings."""

    def convert(value: object) -> int:
        if isinstance(value, str):
            return _parse_integer(value, java, type_name)
        if bounds is None and isinstance(value, int | JsonFloat) and not isinstance(value, bool):
            return _parse_integer(java_text(value), java, type_name)
        in_range = bounds is not None and isinstance(value, int) and bounds[0] <= value <= bounds[1]
        if in_range and not isinstance(value, bool):
            assert isinstance(value, int)
            return value
        article = "an" if type_name == "int" else "a"
        raise _expected(f"{article} {type_name} value", value)

    return convert


def _parse_integer(text: str, java: str, type_name: str) -> int:
    limits = {"tinyint": 2**7, "smallint": 2**15, "int": 2**31, "bigint": 2**63}
    if _INTEGER.fullmatch(text) is None:
        raise JsonValueError(f"Unable to make {java} from '{text}'")
    number = int(text, 10)
    limit = limits.get(type_name)
    if limit is not None and not -limit <= number < limit:
        raise JsonValueError(f"Unable to make {java} from '{text}'")
    return number


def _varint(value: object) -> int:
    if isinstance(value, str):
        if _INTEGER.fullmatch(value) is None:
            raise JsonValueError(f"Unable to make varint from '{value}'")
        return int(value, 10)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise JsonValueError(
        f"Value '{java_text(value)}' is not a valid representation of a varint value"
    )


def _decimal(value: object) -> decimal.Decimal:
    text = value if isinstance(value, str) else java_text(value)
    if isinstance(value, bool) or not isinstance(value, str | int | JsonFloat):
        raise JsonValueError(f"Value '{text}' is not a valid representation of a decimal value")
    try:
        number = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        number = None
    if number is None or not number.is_finite():
        raise JsonValueError(f"Value '{text}' is not a valid representation of a decimal value")
    return number


def _floating(type_name: str) -> Callable[[object], float]:
    def convert(value: object) -> float:
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise JsonValueError(f"Unable to make {type_name} from '{value}'") from None
        if isinstance(value, int | JsonFloat) and not isinstance(value, bool):
            return float(java_text(value))
        raise _expected(f"a {type_name} value", value)

    return convert


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise JsonValueError(f"Unable to make boolean from '{value}'")
    raise _expected("a boolean value", value)


def _string(what: str, check: Callable[[str], object] | None = None) -> Callable[[object], object]:
    def convert(value: object) -> object:
        if not isinstance(value, str):
            raise _expected(what, value)
        if check is None:
            return value
        try:
            return check(value)
        except (ValueError, ArithmeticError, InvalidValue) as error:
            raise JsonValueError(str(error)) from None

    return convert


def _ascii(text: str) -> str:
    if not text.isascii():
        raise ValueError(f"Invalid ASCII character in string literal: {text!r}")
    return text


def _uuid(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ValueError(f"Unable to make UUID from '{text}'") from None


def _timeuuid(text: str) -> uuid.UUID:
    value = _uuid(text)
    if value.version != 1:
        raise ValueError(f"Unsupported UUID version for timeuuid: {value.version} ({text})")
    return value


def _inet(text: str) -> object:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"Unable to make inet address from '{text}'") from None


def _timestamp(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise _expected("a long or a datestring representation of a timestamp value", value)
    try:
        return parse_timestamp(value)
    except ValueError:
        raise JsonValueError(f"Unable to parse a date/time from '{value}'") from None


def _blob(text: str) -> bytes:
    if not text.startswith("0x"):
        raise ValueError(f"String representation of blob is missing 0x prefix: {text}")
    try:
        return bytes.fromhex(text[2:])
    except ValueError as error:
        raise ValueError(f"Value '{text}' is not a valid blob representation: {error}") from None


_NATIVE: Mapping[str, Callable[[object], object]] = {
    "tinyint": _integer("tinyint", "tinyint", None),
    "smallint": _integer("smallint", "smallint", None),
    "int": _integer("int", "int", _INT32),
    "bigint": _integer("bigint", "long", _INT64),
    "varint": _varint,
    "decimal": _decimal,
    "float": _floating("float"),
    "double": _floating("double"),
    "boolean": _boolean,
    "text": _string("a UTF-8 string"),
    "ascii": _string("an ascii string", _ascii),
    "uuid": _string("a string representation of a uuid", _uuid),
    "timeuuid": _string("a string representation of a timeuuid", _timeuuid),
    "inet": _string("a string representation of an inet value", _inet),
    "timestamp": _timestamp,
    "date": _string("a string representation of a date value", parse_date),
    "time": _string("a string representation of a time value", parse_time),
    "duration": _string("a string representation of a duration", parse_duration),
    "blob": _string("a string representation of a blob", _blob),
}


# --- INSERT JSON ---------------------------------------------------------------------------------

JsonColumnValue = bytes | None | Missing
"""Per column: the serialized value, None for a JSON null, :data:`MISSING` if not named."""


def insert_json_values(text: str, table: Table) -> dict[str, JsonColumnValue]:
    """Every column of ``table`` mapped to its value in the JSON object ``text``; Invalid with
    Cassandra's messages for malformed JSON, unknown columns and values that do not fit."""
    try:
        decoded = decode_json(text)
    except (ValueError, RecursionError) as error:
        raise InvalidRequest(
            f"Could not decode JSON string as a map: {error}. (String was: {text})"
        ) from None
    if decoded is None:
        raise InvalidRequest("Got null for INSERT JSON values")
    if not isinstance(decoded, dict):
        raise InvalidRequest(
            f"Could not decode JSON string as a map: expected a JSON object, got a "
            f"{java_name(decoded)}. (String was: {text})"
        )
    values = case_folded(decoded)
    columns: dict[str, JsonColumnValue] = {}
    for column in table.columns:
        if column.name not in values:
            columns[column.name] = MISSING
            continue
        item = values.pop(column.name)
        try:
            columns[column.name] = (
                None if item is None else json_value_bytes(column.type, item, column.name)
            )
        except JsonValueError as error:
            raise InvalidRequest(f"Error decoding JSON value for {column.name}: {error}") from None
    if values:
        raise InvalidRequest(f"JSON values map contains unrecognized column: {next(iter(values))}")
    return columns


def from_json(text: str, cql_type: CqlType, function: str = "fromjson") -> bytes | None:
    """``fromJson(text)`` for a receiver of ``cql_type``: the serialized value (None for a JSON
    null); :class:`JsonValueError` with Cassandra's message otherwise."""
    try:
        decoded = decode_json(text)
    except (ValueError, RecursionError) as error:
        raise JsonValueError(f"Could not decode JSON string '{text}': {error}") from None
    if decoded is None:
        return None
    return json_value_bytes(cql_type, decoded, function)
