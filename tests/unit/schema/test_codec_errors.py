"""Every refusal of the codec: wrong Python types, out-of-range values and malformed bytes.

Proves: each is an ``InvalidValue`` (CQL 0x2200) whose message names the column, the CQL type and
the offending value (or bytes, in hex) and says which rule broke; ``validate``, ``deserialize``
and ``normalize`` agree on what is malformed; misuse of the cell helpers is refused.
"""

from __future__ import annotations

import datetime
import decimal
import struct
import uuid
from typing import Any

import pytest
from cassandra import util as driver_util

from ringflow.errors import ErrorCode, InternalError
from ringflow.schema import (
    ASCII,
    BIGINT,
    BLOB,
    BOOLEAN,
    DATE,
    DECIMAL,
    DOUBLE,
    DURATION,
    FLOAT,
    INET,
    INT,
    SMALLINT,
    TEXT,
    TIME,
    TIMESTAMP,
    TIMEUUID,
    TINYINT,
    UUID,
    VARINT,
    CqlType,
    Duration,
    InvalidValue,
    ListType,
    MapType,
    SchemaError,
    SetType,
    TupleType,
    UserType,
    cells_from_collection_value,
    compare,
    deserialize,
    list_cells,
    normalize,
    serialize,
    serialized_collection_from_cells,
    validate,
)

LIST_INT = ListType(INT)
SET_INT = SetType(INT)
MAP_TEXT_INT = MapType(TEXT, INT)
PAIR = TupleType((INT, TEXT))
PERSON = UserType("ks", "person", ("name", "age"), (TEXT, INT))


class NoFields:
    colour = "red"


BAD_VALUES: list[tuple[CqlType, Any, str]] = [
    (INT, 3000000000, "3000000000 is out of range -2147483648..2147483647"),
    (INT, -(2**31) - 1, "-2147483649 is out of range"),
    (TINYINT, 128, "128 is out of range -128..127"),
    (SMALLINT, -32769, "-32769 is out of range -32768..32767"),
    (BIGINT, 2**63, f"{2**63} is out of range"),
    (INT, "5", "'5' is a str, expected int"),
    (INT, True, "True is a bool, expected int"),
    (INT, 1.5, "1.5 is a float, expected int"),
    (VARINT, 1.0, "1.0 is a float, expected int"),
    (ASCII, "héllo", "'héllo' has non-ASCII character 'é' at index 1"),
    (ASCII, b"hello", "b'hello' is a bytes, expected str"),
    (TEXT, "\ud800", "is not encodable as UTF-8"),
    (BLOB, "abc", "'abc' is a str, expected bytes"),
    (BOOLEAN, 1, "1 is a int, expected bool"),
    (DECIMAL, decimal.Decimal("NaN"), "Decimal('NaN') is not a finite number"),
    (DECIMAL, float("inf"), "inf is not a finite number"),
    (DECIMAL, "1.5", "'1.5' is a str, expected decimal.Decimal or int"),
    (DECIMAL, decimal.Decimal("1E-3000000000"), "scale 3000000000, outside the 32-bit range"),
    (FLOAT, 1e39, "1e+39 is out of range for a float"),
    (FLOAT, "1", "'1' is a str, expected float"),
    (DOUBLE, 10**400, "out of range for a double"),
    (DOUBLE, None, "None is a NoneType, expected float"),
    (TIMESTAMP, 2**63, "out of range"),
    (TIMESTAMP, "2020-01-01", "'2020-01-01' is a str, expected datetime.datetime or int ms"),
    (DATE, datetime.datetime(2020, 1, 1), "expected datetime.date (not datetime)"),
    (DATE, 2**31, "2147483648 is out of range -2147483648..2147483647"),
    (TIME, 86_400 * 10**9, "86400000000000 is out of range 0..86399999999999"),
    (TIME, -1, "-1 is out of range 0..86399999999999"),
    (TIME, datetime.time(1, tzinfo=datetime.UTC), "has a time zone"),
    (UUID, "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "is a str, expected uuid.UUID"),
    (TIMEUUID, uuid.UUID("12345678-1234-4234-8234-123456789abc"), "is a version 4 UUID"),
    (INET, "not-an-ip", "'not-an-ip' is not an IPv4 or IPv6 address"),
    (INET, 1234, "1234 is a int, expected ipaddress"),
    (DURATION, 5, "5 is a int, expected Duration"),
    (DURATION, driver_util.Duration(1, -1, 0), "must have the same sign"),
    (DURATION, driver_util.Duration(2**31, 0, 0), "must fit in 32 bits"),
    (LIST_INT, [1, None], "element 1: null is not allowed inside a collection"),
    (LIST_INT, [1, "x"], "element 1: 'x' is a str, expected int"),
    (LIST_INT, "12", "'12' is a str, expected list or tuple"),
    (LIST_INT, {1, 2}, "is a set, expected list or tuple"),
    (SET_INT, "abc", "'abc' is a str, expected set"),
    (SET_INT, {1: 2}, "{1: 2} is a dict, expected set"),
    (SET_INT, [1, 2**40], f"element 1: {2**40} is out of range"),
    (MAP_TEXT_INT, {"a": None}, "entry 0: null is not allowed inside a collection"),
    (MAP_TEXT_INT, {"a": 1, "b": "x"}, "entry 1: 'x' is a str, expected int"),
    (MAP_TEXT_INT, [1, 2], "[1, 2] is a list, expected dict"),
    (PAIR, (1, "a", 2), "(1, 'a', 2) has 3 components, the type has 2"),
    (PAIR, (1, 2), "component 1: 2 is a int, expected str"),
    (PAIR, "ab", "'ab' is a str, expected tuple"),
    (PERSON, {"name": "x", "nope": 1}, "has unknown field(s) nope"),
    (PERSON, {"name": "x", "age": "old"}, "field age: 'old' is a str, expected int"),
    (PERSON, 5, "5 is a int, expected dict of fields"),
    (PERSON, NoFields(), "expected dict of fields or an object with the fields as attributes"),
]


@pytest.mark.parametrize(
    ("cql_type", "value", "reason"),
    BAD_VALUES,
    ids=[f"{t.cql_name()}-{reason[:30]}" for t, _, reason in BAD_VALUES],
)
def test_bad_values_are_refused_naming_column_type_and_value(
    cql_type: CqlType, value: Any, reason: str
) -> None:
    with pytest.raises(InvalidValue) as raised:
        serialize(cql_type, value, "age")
    message = str(raised.value)
    assert message.startswith(f"Invalid value for column 'age' of type {cql_type.cql_name()}: ")
    assert reason in message
    assert raised.value.code is ErrorCode.INVALID


def test_the_example_message_of_the_brief() -> None:
    with pytest.raises(InvalidValue) as raised:
        serialize(INT, 3000000000, "age")
    assert str(raised.value) == (
        "Invalid value for column 'age' of type int: 3000000000 is out of range "
        "-2147483648..2147483647"
    )


def _frame(*lengths_and_bytes: Any) -> bytes:
    out = b""
    for part in lengths_and_bytes:
        out += struct.pack(">i", part) if isinstance(part, int) else part
    return out


BAD_BYTES: list[tuple[CqlType, bytes, str]] = [
    (INT, b"\x00\x00\x01", "expected 4 bytes, got 0x000001 (3 bytes)"),
    (INT, b"", "expected 4 bytes, got 0x (0 bytes)"),
    (BIGINT, b"\x00" * 7, "expected 8 bytes"),
    (TINYINT, b"\x00\x00", "expected 1 bytes"),
    (TIMESTAMP, b"\x00" * 9, "expected 8 bytes"),
    (TIME, struct.pack(">q", -1), "-1 is out of range 0..86399999999999"),
    (TIME, struct.pack(">q", 86_400 * 10**9), "is out of range 0..86399999999999"),
    (DATE, b"\x80\x00\x00", "expected 4 bytes"),
    (UUID, b"\x00" * 15, "expected 16 bytes"),
    (TIMEUUID, uuid.UUID("12345678-1234-4234-8234-123456789abc").bytes, "is a version 4 UUID"),
    (BOOLEAN, b"\x00\x01", "expected 1 bytes"),
    (FLOAT, b"\x00\x00\x00", "expected 4 bytes"),
    (DOUBLE, b"\x00" * 9, "expected 8 bytes"),
    (INET, b"\x01\x02\x03\x04\x05", "an inet is 4 or 16 bytes, got 0x0102030405 (5 bytes)"),
    (VARINT, b"", "a varint needs at least 1 byte, got 0"),
    (DECIMAL, b"\x00\x00\x00\x01", "a decimal needs a 4-byte scale and a varint"),
    (ASCII, b"ab\x80", "byte 0x80 at index 2 is not 7-bit ASCII"),
    (TEXT, b"\xff", "is not valid UTF-8 at index 0"),
    (TEXT, b"ok\xc3", "is not valid UTF-8 at index 2"),
    (TEXT, b"\xc0\x80", "is not valid UTF-8"),  # overlong NUL
    (TEXT, b"\xed\xa0\x80", "is not valid UTF-8"),  # a surrogate
    (DURATION, b"\x02\x04", "truncated vint"),
    (DURATION, b"\x80", "truncated vint"),
    (DURATION, b"\x02\x04\x06\x00", "1 bytes after the duration"),
    (DURATION, b"\x02\x03\x06", "must have the same sign"),
    (DURATION, b"\x00\x00\xff" + b"\x00" * 8 + b"\x01", "1 bytes after the duration"),
    (DURATION, b"\xf1\x00\x00\x00\x00\x00\x00", "must fit in 32 bits"),  # months 2**31
    (LIST_INT, b"\x00\x00", "truncated collection"),
    (LIST_INT, _frame(-1), "negative element count -1"),
    (LIST_INT, _frame(2, 4, b"\x00\x00\x00\x01"), "truncated collection at element 1"),
    (LIST_INT, _frame(1, 8, b"\x00\x00\x00\x01"), "truncated collection at element 0"),
    (LIST_INT, _frame(1, -1), "null element 0: collections cannot hold null"),
    (LIST_INT, _frame(1, 4, b"\x00\x00\x00\x01", b"\x00"), "1 bytes after the last element"),
    (LIST_INT, _frame(1, 3, b"\x00\x00\x01"), "element 0: expected 4 bytes"),
    (SET_INT, _frame(1, 3, b"\x00\x00\x01"), "element 0: expected 4 bytes"),
    (MAP_TEXT_INT, _frame(1, 1, b"a"), "truncated collection at element 0"),
    (MAP_TEXT_INT, _frame(1, 1, b"\xff", 4, b"\x00" * 4), "key 0: 0xff (1 bytes) is not valid"),
    (MAP_TEXT_INT, _frame(1, 1, b"a", 2, b"\x00\x00"), "value 0: expected 4 bytes"),
    (PAIR, _frame(4, b"\x00\x00\x00\x01", 1, b"a", -1), "more than 2 components"),
    (PAIR, _frame(4, b"\x00\x00\x00\x01", 5, b"a"), "truncated component 1"),
    (PAIR, b"\x00\x00", "truncated component 0"),
    (PAIR, _frame(-2), "component 0 has length -2"),
    (PAIR, _frame(2, b"\x00\x01"), "component 0: expected 4 bytes"),
    (PERSON, _frame(-1, 1, b"\x00"), "field 1: expected 4 bytes"),
]


@pytest.mark.parametrize(
    ("cql_type", "data", "reason"),
    BAD_BYTES,
    ids=[f"{t.cql_name()}-{reason[:30]}" for t, _, reason in BAD_BYTES],
)
def test_malformed_bytes_are_refused_by_validate_deserialize_and_normalize(
    cql_type: CqlType, data: bytes, reason: str
) -> None:
    for operation in (validate, deserialize, normalize):
        with pytest.raises(InvalidValue) as raised:
            operation(cql_type, data, "col")
        message = str(raised.value)
        assert message.startswith(f"Invalid value for column 'col' of type {cql_type.cql_name()}: ")
        assert reason in message, (operation.__name__, message)


def test_comparing_bytes_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(InvalidValue, match="expected 4 bytes"):
        compare(INT, b"\x00", b"\x00\x00\x00\x00")


def test_duration_values_refuse_mixed_signs_and_non_ints() -> None:
    with pytest.raises(InvalidValue, match="same sign"):
        Duration(1, -1, 0)
    with pytest.raises(InvalidValue, match="must be int"):
        Duration(1.5, 0, 0)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="64 bits"):
        Duration(0, 0, 2**63)


def test_cell_helpers_refuse_misuse() -> None:
    with pytest.raises(SchemaError, match="list_cells"):
        cells_from_collection_value(LIST_INT, serialize(LIST_INT, [1]))
    with pytest.raises(SchemaError, match="not a collection"):
        serialized_collection_from_cells(INT, [])
    with pytest.raises(InvalidValue, match="no field 7"):
        serialized_collection_from_cells(PERSON, [(struct.pack(">H", 7), b"x")])
    with pytest.raises(InvalidValue, match="not a 2-byte field index"):
        serialized_collection_from_cells(PERSON, [(b"\x00", b"x")])
    with pytest.raises(InternalError, match="2 list values for 1 paths"):
        list_cells([b"a", b"b"], [uuid.uuid1().bytes])
    with pytest.raises(InvalidValue, match="column 'tags'"):
        cells_from_collection_value(SET_INT, b"\x00", "tags")
