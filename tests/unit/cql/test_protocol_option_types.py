"""The [option] type encoding (spec §4.2.5.2) against the schema layer's descriptors."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings

from ringflow.cql import MAX_TYPE_NESTING, Reader, Writer, read_option_type, write_option_type
from ringflow.errors import ProtocolViolation
from ringflow.schema import DURATION, INT, TEXT, CqlType, ListType, MapType, UserType

from ._protocol_strategies import column_types


def encoded(cql_type: CqlType) -> bytes:
    out = Writer()
    write_option_type(cql_type, out)
    return out.getvalue()


def decoded(data: bytes) -> CqlType:
    reader = Reader(data)
    result = read_option_type(reader)
    assert reader.remaining == 0
    return result


@settings(max_examples=200, deadline=None)
@given(column_types)
def test_column_types_round_trip(cql_type: CqlType) -> None:
    assert decoded(encoded(cql_type)) == cql_type


def test_spec_ids_for_a_nested_map() -> None:
    cql_type = MapType(TEXT, ListType(INT, frozen=True))
    assert encoded(cql_type) == struct.pack(">HHHH", 0x21, 0x0D, 0x20, 0x09)


def test_frozen_is_not_on_the_wire_top_level_decodes_non_frozen() -> None:
    assert decoded(encoded(ListType(INT, frozen=True))) == ListType(INT)


def test_duration_is_a_custom_type_in_v4_and_0x0015_is_accepted() -> None:
    class_name = b"org.apache.cassandra.db.marshal.DurationType"
    assert encoded(DURATION) == struct.pack(">HH", 0, len(class_name)) + class_name
    assert decoded(struct.pack(">H", 0x15)) == DURATION


def test_legacy_text_id_is_read_as_text() -> None:
    assert decoded(struct.pack(">H", 0x0A)) == TEXT


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">H", 0x05), "counter columns are not supported"),
        (struct.pack(">H", 0x40), "unknown or unsupported type option id 0x0040"),
        (struct.pack(">HH", 0, 3) + b"Foo", "unsupported custom type 'Foo'"),
        (struct.pack(">H", 0x20) * (MAX_TYPE_NESTING + 2) + b"\x00\x09", "nested deeper"),
    ],
)
def test_unsupported_types_are_protocol_violations(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolViolation, match=message):
        decoded(data)


def test_udt_with_duplicate_field_names_is_a_protocol_violation() -> None:
    valid = encoded(UserType("ks", "u", ("a", "b"), (INT, INT)))
    duplicate = valid.replace(b"\x00\x01b", b"\x00\x01a")
    with pytest.raises(ProtocolViolation, match=r"invalid user type ks\.u"):
        decoded(duplicate)
