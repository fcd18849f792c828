"""The compiled per-type ``Codec`` and the plumbing every type's codec shares.

Owns :class:`Codec` (the record of one type's compiled functions and the public methods that
turn a :class:`Rejection` into ``InvalidValue`` naming the column and the type), the error
message helpers, and the small checks native codecs are built from. No type knowledge here:
``_codec_native`` and ``_codec_collections`` fill codecs in.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ringflow.schema._errors import InvalidValue, SchemaError
from ringflow.schema._types import CqlType, NativeType

SortKey = Any
"""A Python object ordered like the type's comparator (ints, bytes, tuples of keys, ...)."""


class _Lowest:
    """A sort key below every other sort key: an empty value's (module ``_codec``)."""

    __slots__ = ()

    def __lt__(self, other: object) -> bool:
        return other is not self

    def __le__(self, other: object) -> bool:
        return True

    def __gt__(self, other: object) -> bool:
        return False

    def __ge__(self, other: object) -> bool:
        return other is self

    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "LOWEST"


LOWEST: SortKey = _Lowest()
"""The sort key of an empty value: before every value of its type, as Cassandra orders it."""


class Rejection(Exception):
    """Why a value or its bytes do not fit a type; ``Codec`` turns it into ``InvalidValue``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def within(self, where: str) -> Rejection:
        """The same rejection, located inside a collection, tuple or UDT."""
        return Rejection(f"{where}: {self.reason}")


def show(value: object) -> str:
    """A value for an error message, cut short."""
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def show_bytes(data: bytes) -> str:
    text = bytes(data[:48]).hex()
    return f"0x{text}{'...' if len(data) > 48 else ''} ({len(data)} bytes)"


def wrong_type(value: object, expected: str) -> Rejection:
    return Rejection(f"{show(value)} is a {type(value).__name__}, expected {expected}")


@dataclass(frozen=True, slots=True, eq=False)
class Codec:
    """Everything ringflow does with the values of one CQL type, compiled once per type.

    The function fields raise :class:`Rejection`; the methods are the public edge and raise
    ``InvalidValue`` naming the column. ``sort_key`` and ``comparable`` assume bytes that passed
    ``check`` (they still reject wrong fixed lengths); they raise ``SchemaError`` for types that
    have no order (``duration`` and anything containing it).
    """

    cql_type: CqlType
    type_name: str
    encode: Callable[[object], bytes]
    decode: Callable[[bytes], object]
    check: Callable[[bytes], None]
    canonical: Callable[[bytes], bytes]
    sort_key: Callable[[bytes], SortKey]
    comparable: Callable[[bytes], bytes]
    hashable: bool
    """Whether ``decode`` returns hashable values (decides set/dict versus list results)."""
    canonical_is_identity: bool
    """True when no serialized value of the type can be non-canonical (no sets or maps inside)."""
    orderable: bool

    def invalid(self, column: str, rejection: Rejection) -> InvalidValue:
        return InvalidValue(
            f"Invalid value for column {column!r} of type {self.type_name}: {rejection.reason}"
        )

    def serialize(self, value: object, column: str = "?") -> bytes:
        try:
            return self.encode(value)
        except Rejection as rejection:
            raise self.invalid(column, rejection) from None

    def deserialize(self, data: bytes, column: str = "?") -> object:
        try:
            return self.decode(data)
        except Rejection as rejection:
            raise self.invalid(column, rejection) from None

    def validate(self, data: bytes, column: str = "?") -> None:
        try:
            self.check(data)
        except Rejection as rejection:
            raise self.invalid(column, rejection) from None

    def normalize(self, data: bytes, column: str = "?") -> bytes:
        try:
            return self.canonical(data)
        except Rejection as rejection:
            raise self.invalid(column, rejection) from None

    def compare(self, left: bytes, right: bytes, column: str = "?") -> int:
        try:
            left_key, right_key = self.sort_key(left), self.sort_key(right)
        except Rejection as rejection:
            raise self.invalid(column, rejection) from None
        return int(left_key > right_key) - int(left_key < right_key)

    def comparable_bytes(self, data: bytes, column: str = "?") -> bytes:
        try:
            return self.comparable(data)
        except Rejection as rejection:
            raise self.invalid(column, rejection) from None


def identity_canonical(check: Callable[[bytes], None]) -> Callable[[bytes], bytes]:
    def canonical(data: bytes) -> bytes:
        check(data)
        return data

    return canonical


def unorderable(type_name: str) -> Callable[[bytes], Any]:
    def refuse(data: bytes) -> Any:
        raise SchemaError(f"values of type {type_name} have no order (not allowed in keys)")

    return refuse


def native_codec(
    name: str,
    encode: Callable[[object], bytes],
    decode: Callable[[bytes], object],
    check: Callable[[bytes], None],
    sort_key: Callable[[bytes], SortKey],
    comparable: Callable[[bytes], bytes],
    orderable: bool = True,
) -> Codec:
    return Codec(
        NativeType(name),
        name,
        encode,
        decode,
        check,
        identity_canonical(check),
        sort_key,
        comparable,
        hashable=True,
        canonical_is_identity=True,
        orderable=orderable,
    )


def wrong_size(size: int, data: bytes) -> Rejection:
    return Rejection(f"expected {size} bytes, got {show_bytes(data)}")


def size_checker(size: int) -> Callable[[bytes], None]:
    def check(data: bytes) -> None:
        if len(data) != size:
            raise wrong_size(size, data)

    return check


def as_int(value: object, expected: str = "int") -> int:
    """An integral value (``int``, numpy integers, anything with ``__index__``) but not ``bool``."""
    if isinstance(value, bool):
        raise wrong_type(value, expected)
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise wrong_type(value, expected) from None


def in_range(value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise Rejection(f"{value} is out of range {low}..{high}")
    return value
