"""Terms to values: literals, bind markers, collections and function calls, typed by a receiver.

A term only has a type once it meets its *receiver* (the column it is assigned to or compared
with, a function parameter, ``LIMIT`` ...). :func:`term_bytes` gives the serialized value the
receiver stores; :func:`term_value` the Python value (for collection elements and function
arguments). Both return ``None`` for null and ``UNSET`` for an unset bound value (-2), which the
caller decides about (an assignment is skipped, a WHERE value is refused).

Rules (Cassandra ``cql3/Constants.java``, ``Lists``/``Sets``/``Maps``/``Tuples``/``UserTypes``,
re-expressed):

* a constant must suit the receiver: strings for text, ascii, timestamp, date, time, inet, uuid
  and duration; integers for the integer types, ``varint``, ``decimal``, floating types and
  ``timestamp``; floats for ``float``, ``double`` and ``decimal``; else Invalid naming the
  column (``Invalid INTEGER constant (1) for "v" of type text``);
* timestamps as strings: ``yyyy-mm-dd[( |T)HH:MM[:SS[.fff]]][Z|+HHMM|+HH:MM]``, naive = UTC, or
  milliseconds since epoch; durations: ``1h30m``-style units (``y mo w d h m s ms us µs ns``) or
  ISO 8601 ``P..`` forms;
* bound bytes are validated and normalized by the codec (sets and maps sorted), so a value
  reaching the store is canonical; collection literals may not hold null or unset elements;
* ``token(a, b)`` as a term takes the partition key columns' types and gives a ``bigint``.
"""

from __future__ import annotations

import decimal
from collections.abc import Mapping
from typing import Any

from ringflow.cql._ast import (
    BindMarker,
    BlobLiteral,
    BooleanLiteral,
    DurationLiteral,
    EmptyBraces,
    FloatLiteral,
    FunctionCall,
    IntegerLiteral,
    ListLiteral,
    MapLiteral,
    NullLiteral,
    SetLiteral,
    StringLiteral,
    Term,
    TupleLiteral,
    TypeCast,
    UdtLiteral,
    UuidLiteral,
    resolve_type,
)
from ringflow.cql._exec_common import StatementContext
from ringflow.cql._exec_functions import (
    SCALAR_FUNCTIONS,
    function_argument_name,
    resolve_function,
)
from ringflow.cql._json_input import JsonValueError, from_json
from ringflow.cql._literal_text import STRING_CONVERTERS, parse_duration
from ringflow.cql._wire import UNSET, CqlValue, Unset
from ringflow.errors import FunctionFailure, InternalError, InvalidRequest
from ringflow.ring import RingError
from ringflow.schema import (
    BIGINT,
    TEXT,
    CqlType,
    InvalidValue,
    ListType,
    MapType,
    NativeType,
    SetType,
    Table,
    TupleType,
    UserType,
    deserialize,
    normalize_tolerant,
    serialize,
    serialized_collection_from_cells,
)
from ringflow.schema import partition_token as schema_partition_token

Value = object
_STRING_TYPES = frozenset(
    {"ascii", "text", "timestamp", "date", "time", "inet", "uuid", "timeuuid", "duration"}
)
_INTEGER_TYPES = frozenset(
    {
        "tinyint", "smallint", "int", "bigint", "varint", "decimal", "float", "double",
        "timestamp", "date", "time",
    }
)  # fmt: skip
"""Cassandra's ``Constants.Literal``: an integer is weakly assignable to these (a date as its
unsigned day number, epoch at 2^31; a time as nanoseconds since midnight)."""
_FLOAT_TYPES = frozenset({"float", "double", "decimal"})
_CONSTANT_KINDS: Mapping[type, tuple[str, frozenset[str]]] = {
    StringLiteral: ("STRING", _STRING_TYPES),
    IntegerLiteral: ("INTEGER", _INTEGER_TYPES),
    FloatLiteral: ("FLOAT", _FLOAT_TYPES),
    BooleanLiteral: ("BOOLEAN", frozenset({"boolean"})),
    UuidLiteral: ("UUID", frozenset({"uuid", "timeuuid"})),
    BlobLiteral: ("HEX", frozenset({"blob"})),
    DurationLiteral: ("DURATION", frozenset({"duration"})),
}


# --- public entry points -------------------------------------------------------------------------


def term_bytes(
    term: Term,
    cql_type: CqlType,
    column: str,
    context: StatementContext,
    table: Table | None = None,
) -> bytes | Unset | None:
    """The serialized value of ``term`` for a receiver of ``cql_type`` named ``column``."""
    if isinstance(term, BindMarker):
        return _bound_bytes(term, cql_type, column, context)
    if isinstance(term, FunctionCall) and _is_from_json(term):
        return _from_json_bytes(term, cql_type, column, context, table)  # keeps empty values
    if isinstance(term, FunctionCall) and _is_from_blob(term):
        return _from_blob_bytes(term, cql_type, column, context, table)  # keeps empty values
    if isinstance(term, ListLiteral | SetLiteral | MapLiteral):
        return _collection_bytes(term, cql_type, column, context, table)  # keeps empty values
    value = term_value(term, cql_type, column, context, table)
    if value is None or value is UNSET:
        return value
    return serialize(cql_type, value, column)


def term_value(
    term: Term,
    cql_type: CqlType,
    column: str,
    context: StatementContext,
    table: Table | None = None,
) -> Value | Unset | None:
    """The Python value of ``term`` for a receiver of ``cql_type`` (codec forms)."""
    if isinstance(term, BindMarker):
        data = _bound_bytes(term, cql_type, column, context)
        if data is None or data is UNSET:
            return data
        return deserialize(cql_type, data, column)
    if isinstance(term, NullLiteral):
        return None
    if isinstance(term, FunctionCall):
        return _call(term, cql_type, column, context, table)
    if isinstance(term, TypeCast):
        return _cast(term, cql_type, column, context, table)
    converter = _COMPOSITES.get(type(term))
    if converter is not None:
        return converter(term, cql_type, column, context, table)
    return constant_value(term, cql_type, column)


def required_bytes(
    term: Term,
    cql_type: CqlType,
    column: str,
    context: StatementContext,
    table: Table | None = None,
) -> bytes:
    """A value that must be present: null and unset are Invalid (keys, WHERE values)."""
    value = term_bytes(term, cql_type, column, context, table)
    if value is None:
        raise InvalidRequest(f"Invalid null value in condition for column {column}")
    if value is UNSET:
        raise InvalidRequest(f"Invalid unset value for column {column}")
    assert isinstance(value, bytes)
    return value


def bound_value(term: BindMarker, context: StatementContext) -> CqlValue:
    try:
        return context.values[term.index]
    except KeyError:
        raise InternalError(f"bind marker {term.index} has no value") from None


def _bound_bytes(
    term: BindMarker, cql_type: CqlType, column: str, context: StatementContext
) -> bytes | Unset | None:
    value = bound_value(term, context)
    if value is None or value is UNSET:
        return value
    assert isinstance(value, bytes)
    if not value and allows_empty(cql_type):
        return value
    if not value and isinstance(cql_type, NativeType) and cql_type.name in _NO_EMPTY_VALUE:
        raise InvalidRequest(_NO_EMPTY_VALUE[cql_type.name])
    return normalize_tolerant(cql_type, value, column)  # empty values inside collections too


_NO_EMPTY_VALUE = {
    "tinyint": "Expected 1 byte for a tinyint (0)",
    "smallint": "Expected 2 bytes for a smallint (0)",
    "date": "Expected 4 byte long for date (0)",
    "time": "Expected 8 byte long for time (0)",
    "duration": "Expected at least 3 bytes for a duration (0)",
}
"""Cassandra's serializers' refusal of a zero-byte value (``ByteSerializer.validate``, ...)."""


EMPTY_VALUE_TYPES = frozenset(
    {"int", "bigint", "varint", "decimal", "float", "double", "boolean", "timestamp", "uuid",
     "timeuuid", "inet", "text", "ascii", "blob"}
)  # fmt: skip
"""Types whose Cassandra serializer accepts a zero-byte value (``AbstractType.allowsEmpty``):
drivers can bind one (``b''``); ``tinyint``, ``smallint``, ``date``, ``time``, ``duration`` and
collections cannot hold it."""


def allows_empty(cql_type: CqlType) -> bool:
    return isinstance(cql_type, NativeType) and cql_type.name in EMPTY_VALUE_TYPES


def partition_token(table: Table, key: tuple[bytes, ...]) -> int:
    """The token of a partition key of ``table`` (Murmur3, or the CDC partitioner for a log
    table); Invalid for a key it cannot hash."""
    try:
        return schema_partition_token(table.name, key)
    except RingError as error:
        raise InvalidRequest(f"table {table.keyspace}.{table.name}: {error}") from None


# --- constants -----------------------------------------------------------------------------------


def _constant_text(term: Term) -> str:
    if isinstance(term, StringLiteral):
        return term.value
    if isinstance(term, FloatLiteral | DurationLiteral):
        return term.text
    if isinstance(term, BlobLiteral):
        return "0x" + term.value.hex()
    if isinstance(term, BooleanLiteral):
        return "true" if term.value else "false"
    return str(getattr(term, "value", term))


def constant_value(term: Term, cql_type: CqlType, column: str) -> Value:
    """A literal constant converted for ``cql_type``; Invalid if the kinds do not match."""
    kind_and_types = _CONSTANT_KINDS.get(type(term))
    if kind_and_types is None:
        raise InvalidRequest(f"Invalid value {term!r} for column {column!r}")
    kind, accepted = kind_and_types
    name = cql_type.name if isinstance(cql_type, NativeType) else None
    if name not in accepted:
        raise InvalidRequest(
            f'Invalid {kind} constant ({_constant_text(term)}) for "{column}" of type '
            f"{cql_type.cql_name()}"
        )
    assert name is not None
    try:
        return _convert_constant(term, name)
    except (ValueError, ArithmeticError) as error:
        raise InvalidRequest(
            f'Invalid {kind} constant ({_constant_text(term)}) for "{column}" of type {name}: '
            f"{error}"
        ) from None


def _convert_constant(term: Term, type_name: str) -> Value:
    if isinstance(term, StringLiteral):
        return STRING_CONVERTERS.get(type_name, _identity)(term.value)
    if isinstance(term, IntegerLiteral):
        if type_name in ("float", "double"):
            return float(term.value)
        if type_name in ("date", "time"):
            return STRING_CONVERTERS[type_name](str(term.value))
        return term.value
    if isinstance(term, FloatLiteral):
        return decimal.Decimal(term.text) if type_name == "decimal" else term.value
    if isinstance(term, DurationLiteral):
        return parse_duration(term.text)
    if isinstance(term, BooleanLiteral | UuidLiteral | BlobLiteral):
        return term.value
    raise InternalError(f"unhandled constant {term!r}")


def _identity(text: str) -> Value:
    return text


# --- empty values: terms built as bytes -----------------------------------------------------------


def _is_from_blob(term: FunctionCall) -> bool:
    return (
        term.keyspace in (None, "system")
        and term.name.startswith("blobas")
        and len(term.args) == 1
        and term.name in SCALAR_FUNCTIONS
    )


def _from_blob_bytes(
    term: FunctionCall,
    cql_type: CqlType,
    column: str,
    context: StatementContext,
    table: Table | None,
) -> bytes | None:
    """``blobAsX(b)`` as Cassandra's ``BytesConversionFcts``: ``b`` itself once ``X`` accepts
    it, so ``blobAsInt(0x)`` is the empty int; Invalid with Cassandra's message otherwise."""
    function = resolve_function(term.name, term.keyspace, [None])
    if not compatible_result(function.return_type, cql_type):
        raise InvalidRequest(
            f"Type error: cannot assign result of function system.{term.name} (type "
            f"{function.return_type.cql_name()}) to {column} (type {cql_type.cql_name()})"
        )
    name = function_argument_name(0, term.name)
    data = term_bytes(term.args[0], function.argument_types[0], name, context, table)
    if data is UNSET:
        raise InvalidRequest(f"Invalid unset value for argument 0 of {term.name}")
    if data is None:
        return None
    assert isinstance(data, bytes)
    try:
        return normalize_tolerant(function.return_type, data)
    except InvalidValue:
        raise InvalidRequest(
            f"In call to function system.{term.name}, value 0x{data.hex()} is not a valid "
            f"binary representation for type {function.return_type.cql_name()}"
        ) from None


def _collection_bytes(
    term: ListLiteral | SetLiteral | MapLiteral,
    cql_type: CqlType,
    column: str,
    context: StatementContext,
    table: Table | None,
) -> bytes | None:
    """A list, set or map literal built from its elements' bytes, so that an empty element
    (bound ``b''``, ``blobAsInt(0x)``) is kept as Cassandra keeps it."""
    if isinstance(term, ListLiteral) and isinstance(cql_type, ListType):
        values = [
            _element_bytes(e, cql_type.element, column, context, table) for e in term.elements
        ]
        cells = [(b"", value) for value in values]
    elif isinstance(term, SetLiteral) and isinstance(cql_type, SetType):
        elements = [
            _element_bytes(e, cql_type.element, column, context, table) for e in term.elements
        ]
        cells = [(element, b"") for element in elements]
    elif isinstance(term, MapLiteral) and isinstance(cql_type, MapType):
        cells = [
            (
                _element_bytes(key, cql_type.key, column, context, table),
                _element_bytes(value, cql_type.value, column, context, table),
            )
            for key, value in term.entries
        ]
    else:
        value = term_value(term, cql_type, column, context, table)  # its usual refusal
        return None if value is None or value is UNSET else serialize(cql_type, value, column)
    data = serialized_collection_from_cells(cql_type, cells)
    return normalize_tolerant(cql_type, data, column)


def _element_bytes(
    term: Term, cql_type: CqlType, column: str, context: StatementContext, table: Table | None
) -> bytes:
    value = _inside_collection(term_bytes(term, cql_type, column, context, table), column)
    assert isinstance(value, bytes)
    return value


# --- collections, tuples, user types -------------------------------------------------------------


def _element(
    term: Term, cql_type: CqlType, column: str, context: StatementContext, table: Table | None
) -> Value:
    return _inside_collection(term_value(term, cql_type, column, context, table), column)


def _inside_collection(value: Any, column: str) -> Any:
    """``value`` as an element of a collection: InvalidRequest for null or unset."""
    if value is None:
        raise InvalidRequest(f"null is not supported inside collections (column {column})")
    if value is UNSET:
        raise InvalidRequest(f"unset value is not supported inside collections (column {column})")
    return value


def _wrong_literal(what: str, cql_type: CqlType, column: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid {what} literal for {column} of type {cql_type.cql_name()}")


def _list(
    term: Term, cql_type: CqlType, column: str, context: StatementContext, table: Table | None
) -> Value:
    assert isinstance(term, ListLiteral)
    if not isinstance(cql_type, ListType):
        raise _wrong_literal("list", cql_type, column)
    return [_element(e, cql_type.element, column, context, table) for e in term.elements]


def _set(
    term: Term, cql_type: CqlType, column: str, context: StatementContext, table: Table | None
) -> Value:
    assert isinstance(term, SetLiteral)
    if not isinstance(cql_type, SetType):
        raise _wrong_literal("set", cql_type, column)
    return [_element(e, cql_type.element, column, context, table) for e in term.elements]


def _map(
    term: Term, cql_type: CqlType, column: str, context: StatementContext, table: Table | None
) -> Value:
    assert isinstance(term, MapLiteral)
    if not isinstance(cql_type, MapType):
        raise _wrong_literal("map", cql_type, column)
    return [
        (
            _element(key, cql_type.key, column, context, table),
            _element(value, cql_type.value, column, context, table),
        )
        for key, value in term.entries
    ]


def _empty_braces(
    term: Term, cql_type: CqlType, column: str, context: StatementContext, table: Table | None
) -> Value:
    if isinstance(cql_type, SetType | MapType):
        return []
    raise _wrong_literal("set or map", cql_type, column)


def _tuple(
    term: Term, cql_type: CqlType, column: str, context: StatementContext, table: Table | None
) -> Value:
    assert isinstance(term, TupleLiteral)
    if not isinstance(cql_type, TupleType) or len(term.elements) > len(cql_type.elements):
        raise _wrong_literal("tuple", cql_type, column)
    values = []
    for element, element_type in zip(term.elements, cql_type.elements, strict=False):
        value = term_value(element, element_type, column, context, table)
        if value is UNSET:
            raise InvalidRequest(f"Invalid unset value in a tuple for column {column}")
        values.append(value)
    return tuple(values)


def _udt(
    term: Term, cql_type: CqlType, column: str, context: StatementContext, table: Table | None
) -> Value:
    assert isinstance(term, UdtLiteral)
    if not isinstance(cql_type, UserType):
        raise _wrong_literal("user type", cql_type, column)
    fields: dict[str, Value] = {}
    for name, value_term in term.fields:
        if name not in cql_type.field_names:
            raise InvalidRequest(
                f"Unknown field '{name}' in value of user defined type {cql_type.name}"
            )
        field_type = cql_type.field_types[cql_type.field_names.index(name)]
        value = term_value(value_term, field_type, f"{column}.{name}", context, table)
        if value is UNSET:
            raise InvalidRequest(f"Invalid unset value for field {name} of {column}")
        fields[name] = value
    return fields


_COMPOSITES = {
    ListLiteral: _list,
    SetLiteral: _set,
    MapLiteral: _map,
    EmptyBraces: _empty_braces,
    TupleLiteral: _tuple,
    UdtLiteral: _udt,
}


# --- functions and casts -------------------------------------------------------------------------


def compatible_result(result: CqlType, receiver: CqlType) -> bool:
    if result == receiver:
        return True
    text_like = {NativeType("text"), NativeType("ascii")}
    if result in text_like and receiver in text_like:
        return True
    return result == NativeType("timeuuid") and receiver == NativeType("uuid")


def _call(
    term: FunctionCall,
    cql_type: CqlType,
    column: str,
    context: StatementContext,
    table: Table | None,
) -> Value | Unset | None:
    if term.name == "token" and term.keyspace in (None, "system"):
        return _token_term(term, cql_type, column, context, table)
    if _is_from_json(term):
        data = _from_json_bytes(term, cql_type, column, context, table)
        return None if data is None else deserialize(cql_type, data, column)
    function = resolve_function(term.name, term.keyspace, [None] * len(term.args))
    if not compatible_result(function.return_type, cql_type):
        raise InvalidRequest(
            f"Type error: cannot assign result of function system.{term.name} (type "
            f"{function.return_type.cql_name()}) to {column} (type {cql_type.cql_name()})"
        )
    arguments: list[object | None] = []
    for position, (argument, argument_type) in enumerate(
        zip(term.args, function.argument_types, strict=True)
    ):
        name = function_argument_name(position, term.name)
        value = term_value(argument, argument_type, name, context, table)
        if value is UNSET:
            raise InvalidRequest(f"Invalid unset value for argument {position} of {term.name}")
        arguments.append(value)
    result = function.call(context, arguments)
    if result is None or function.return_type == cql_type:
        return result
    return deserialize(cql_type, serialize(function.return_type, result, column), column)


def _is_from_json(term: FunctionCall) -> bool:
    return term.name == "fromjson" and term.keyspace in (None, "system")


def _from_json_bytes(
    term: FunctionCall,
    cql_type: CqlType,
    column: str,
    context: StatementContext,
    table: Table | None,
) -> bytes | None:
    """``fromJson(text)``, typed by its receiver (Cassandra's ``FromJsonFct``): null for a null
    argument or JSON ``null``; a value that does not fit is a function failure (0x1400)."""
    if len(term.args) != 1:
        raise InvalidRequest(
            f"Invalid number of arguments in call to function system.fromjson: 1 required but "
            f"{len(term.args)} provided"
        )
    text = term_value(term.args[0], TEXT, function_argument_name(0, "fromjson"), context, table)
    if text is UNSET:
        raise InvalidRequest("Invalid unset value for argument 0 of fromjson")
    if text is None:
        return None
    assert isinstance(text, str)
    try:
        data = from_json(text, cql_type, column)
    except JsonValueError as error:
        raise FunctionFailure(
            f"execution of 'system.fromjson[text]' failed: {error}",
            "system",
            "fromjson",
            ("text",),
        ) from None
    return data


def _token_term(
    term: FunctionCall,
    cql_type: CqlType,
    column: str,
    context: StatementContext,
    table: Table | None,
) -> Value:
    if table is None:
        raise InvalidRequest("token() can only be used in the WHERE clause of a table's query")
    key_columns = table.partition_key_columns
    if len(term.args) != len(key_columns):
        raise InvalidRequest(
            f"Invalid number of arguments in call to function token: {len(key_columns)} "
            f"required but {len(term.args)} provided"
        )
    if cql_type != BIGINT:
        raise InvalidRequest(f"Type error: token() is a bigint, not {cql_type.cql_name()}")
    parts = tuple(
        required_bytes(argument, key.type, key.name, context, table)
        for argument, key in zip(term.args, key_columns, strict=True)
    )
    return partition_token(table, parts)


def _cast(
    term: TypeCast, cql_type: CqlType, column: str, context: StatementContext, table: Table | None
) -> Value | Unset | None:
    hinted = resolve_type(term.type, {})
    if not compatible_result(hinted, cql_type):
        raise InvalidRequest(
            f"Type error: ({hinted.cql_name()}) value cannot be used for {column} of type "
            f"{cql_type.cql_name()}"
        )
    return term_value(term.term, cql_type, column, context, table)
