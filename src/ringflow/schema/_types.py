"""CQL type descriptors and the parser of their CQL spelling.

A descriptor says what a column holds; it carries no values. Serialization, comparison order and
validation of values live in the codec module. Names follow CQL (``doc/cql3/CQL.textile``, native
protocol v4 §6): native types, ``list``/``set``/``map`` (frozen or not), ``tuple`` (always
frozen), and user-defined types. ``counter`` is known by name only so that it can be refused with
a clear message (ringflow does not support counters).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from ringflow.schema._errors import SchemaError

NATIVE_TYPE_NAMES: frozenset[str] = frozenset(
    {
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
        "timestamp",
        "date",
        "time",
        "uuid",
        "timeuuid",
        "inet",
        "duration",
    }
)
_ALIASES = {"varchar": "text"}


class CqlType:
    """Base of every type descriptor."""

    __slots__ = ()

    @property
    def is_multicell(self) -> bool:
        """True for non-frozen collections and UDTs: stored as one cell per element."""
        return False

    @property
    def is_collection(self) -> bool:
        return False

    def frozen_form(self) -> CqlType:
        """The same type, frozen (identity for types that are always single-cell)."""
        return self

    def cql_name(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class NativeType(CqlType):
    name: str

    def __post_init__(self) -> None:
        if self.name not in NATIVE_TYPE_NAMES:
            raise SchemaError(f"unknown native type {self.name!r}")

    def cql_name(self) -> str:
        return self.name


class _Collection(CqlType):
    """What list, set and map share: multi-cell unless frozen."""

    __slots__ = ()
    frozen: bool

    @property
    def is_multicell(self) -> bool:
        return not self.frozen

    @property
    def is_collection(self) -> bool:
        return True

    def frozen_form(self) -> CqlType:
        return dataclasses.replace(self, frozen=True)  # type: ignore[type-var]


@dataclass(frozen=True, slots=True)
class ListType(_Collection):
    element: CqlType
    frozen: bool = False

    def cql_name(self) -> str:
        return _frozen(f"list<{self.element.cql_name()}>", self.frozen)


@dataclass(frozen=True, slots=True)
class SetType(_Collection):
    element: CqlType
    frozen: bool = False

    def cql_name(self) -> str:
        return _frozen(f"set<{self.element.cql_name()}>", self.frozen)


@dataclass(frozen=True, slots=True)
class MapType(_Collection):
    key: CqlType
    value: CqlType
    frozen: bool = False

    def cql_name(self) -> str:
        return _frozen(f"map<{self.key.cql_name()}, {self.value.cql_name()}>", self.frozen)


@dataclass(frozen=True, slots=True)
class TupleType(CqlType):
    elements: tuple[CqlType, ...]

    def cql_name(self) -> str:
        inner = ", ".join(element.cql_name() for element in self.elements)
        return f"frozen<tuple<{inner}>>"


@dataclass(frozen=True, slots=True)
class UserType(CqlType):
    keyspace: str
    name: str
    field_names: tuple[str, ...]
    field_types: tuple[CqlType, ...]
    frozen: bool = False

    def __post_init__(self) -> None:
        if len(self.field_names) != len(self.field_types):
            raise SchemaError(
                f"type {self.name}: {len(self.field_names)} names for "
                f"{len(self.field_types)} field types"
            )
        if len(set(self.field_names)) != len(self.field_names):
            raise SchemaError(f"type {self.name}: duplicate field name")

    @property
    def is_multicell(self) -> bool:
        return not self.frozen

    def frozen_form(self) -> CqlType:
        """Frozen, its fields too: a frozen UDT is one value, a non-frozen collection field of
        its type included (Cassandra's ``freezeNestedMulticellTypes``)."""
        fields = tuple(field_type.frozen_form() for field_type in self.field_types)
        return UserType(self.keyspace, self.name, self.field_names, fields, True)

    def cql_name(self) -> str:
        return _frozen(self.name, self.frozen)


def expand_user_types(cql_type: CqlType) -> CqlType:
    """``cql_type`` with every UDT replaced by the tuple of its fields (Cassandra's
    ``expandUserTypes``), so a dropped column's type outlives its UDT."""
    if isinstance(cql_type, UserType):
        return TupleType(tuple(expand_user_types(field) for field in cql_type.field_types))
    if isinstance(cql_type, TupleType):
        return TupleType(tuple(expand_user_types(element) for element in cql_type.elements))
    if isinstance(cql_type, ListType):
        return ListType(expand_user_types(cql_type.element), cql_type.frozen)
    if isinstance(cql_type, SetType):
        return SetType(expand_user_types(cql_type.element), cql_type.frozen)
    if isinstance(cql_type, MapType):
        key, value = expand_user_types(cql_type.key), expand_user_types(cql_type.value)
        return MapType(key, value, cql_type.frozen)
    return cql_type


def _frozen(name: str, frozen: bool) -> str:
    return f"frozen<{name}>" if frozen else name


# Convenience singletons for the native types.
ASCII = NativeType("ascii")
TEXT = NativeType("text")
BLOB = NativeType("blob")
BOOLEAN = NativeType("boolean")
TINYINT = NativeType("tinyint")
SMALLINT = NativeType("smallint")
INT = NativeType("int")
BIGINT = NativeType("bigint")
VARINT = NativeType("varint")
DECIMAL = NativeType("decimal")
FLOAT = NativeType("float")
DOUBLE = NativeType("double")
TIMESTAMP = NativeType("timestamp")
DATE = NativeType("date")
TIME = NativeType("time")
UUID = NativeType("uuid")
TIMEUUID = NativeType("timeuuid")
INET = NativeType("inet")
DURATION = NativeType("duration")


def parse_type(text: str, user_types: Mapping[str, UserType] | None = None) -> CqlType:
    """Parse a CQL type spelling such as ``frozen<map<text, list<int>>>``.

    Names are case-insensitive except quoted UDT names. Raises SchemaError with the position of
    the problem on anything else. A UDT named in ``text`` must be in ``user_types``.
    """
    parser = _TypeParser(text, user_types or {})
    parsed = parser.parse_type(frozen=False)
    parser.expect_end()
    return parsed


class _TypeParser:
    def __init__(self, text: str, user_types: Mapping[str, UserType]) -> None:
        self.text = text
        self.position = 0
        self.user_types = user_types

    def fail(self, message: str) -> SchemaError:
        return SchemaError(f"bad type {self.text!r} at character {self.position}: {message}")

    def skip_space(self) -> None:
        while self.position < len(self.text) and self.text[self.position].isspace():
            self.position += 1

    def expect_end(self) -> None:
        self.skip_space()
        if self.position != len(self.text):
            raise self.fail("unexpected trailing text")

    def expect(self, char: str) -> None:
        self.skip_space()
        if self.position >= len(self.text) or self.text[self.position] != char:
            raise self.fail(f"expected {char!r}")
        self.position += 1

    def peek(self, char: str) -> bool:
        self.skip_space()
        return self.position < len(self.text) and self.text[self.position] == char

    def identifier(self) -> tuple[str, bool]:
        self.skip_space()
        if self.peek('"'):
            end = self.text.find('"', self.position + 1)
            if end < 0:
                raise self.fail("unterminated quoted name")
            name = self.text[self.position + 1 : end]
            self.position = end + 1
            return name, True
        start = self.position
        while self.position < len(self.text) and (
            self.text[self.position].isalnum() or self.text[self.position] in "_."
        ):
            self.position += 1
        if start == self.position:
            raise self.fail("expected a type name")
        return self.text[start : self.position], False

    def parse_type(self, frozen: bool) -> CqlType:
        name, quoted = self.identifier()
        lowered = name if quoted else name.lower()
        if not quoted and lowered == "frozen":
            self.expect("<")
            inner = self.parse_type(frozen=True)
            self.expect(">")
            return inner.frozen_form()
        if not quoted and lowered in ("list", "set", "map", "tuple"):
            return self.parse_parametrised(lowered, frozen)
        if not quoted and lowered in _ALIASES:
            return NativeType(_ALIASES[lowered])
        if not quoted and lowered in NATIVE_TYPE_NAMES:
            return NativeType(lowered)
        if not quoted and lowered == "counter":
            raise self.fail("counter columns are not supported by ringflow")
        user_type = self.user_types.get(lowered)
        if user_type is None:
            raise self.fail(f"unknown type {name!r}")
        return user_type.frozen_form() if frozen else user_type

    def parse_parametrised(self, kind: str, frozen: bool) -> CqlType:
        self.expect("<")
        params = [self.parse_parameter(kind, frozen)]
        while self.peek(","):
            self.expect(",")
            params.append(self.parse_parameter(kind, frozen))
        self.expect(">")
        if kind == "tuple":
            return TupleType(tuple(params))
        expected = 2 if kind == "map" else 1
        if len(params) != expected:
            raise self.fail(f"{kind} takes {expected} type parameter(s), got {len(params)}")
        if kind == "list":
            return ListType(params[0], frozen)
        if kind == "set":
            return SetType(params[0], frozen)
        return MapType(params[0], params[1], frozen)

    def parse_parameter(self, kind: str, frozen: bool) -> CqlType:
        """A type parameter; inside a collection or tuple, collections and UDTs must be frozen."""
        start = self.position
        parameter = self.parse_type(frozen)
        if parameter.is_multicell:
            self.position = start
            noun = "collections" if parameter.is_collection else "UDTs"
            raise self.fail(f"non-frozen {noun} are not allowed inside a {kind}")
        return parameter
