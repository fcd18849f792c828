"""Codecs of lists, sets, maps, tuples and user-defined types, built from their parts' codecs.

Serialized forms (native protocol v4 §6.11-6.13, §6.20, §7): a collection is an int32 count
followed by that many (a map: twice that many) ``[bytes]`` elements, each an int32 length and the
element's serialization; null elements are refused, as Cassandra does. A tuple or UDT is a
sequence of ``[bytes]`` components where length -1 is null; it may stop early (missing trailing
components are null: a UDT grown by ``ALTER TYPE ... ADD``).

Order (Cassandra ``CollectionType``/``ListType.compareListOrSet``, ``MapType.compareMaps``,
``TupleType.compareCustom``): collections compare element by element (map entries key then value)
and then by size; tuples and UDTs component by component, null first, missing = null.

Canonical form: set elements and map entries sorted in that order without duplicates, and every
tuple/UDT component present (trailing nulls written as -1). ``encode`` always produces it,
``canonical`` rebuilds it from bytes a driver sent in any order or short, and
``sort_key``/``comparable`` never depend on it (they sort and pad for themselves). Writing the
trailing nulls also keeps a tuple whose components are all null from being the empty value,
which drivers read as null.

Python values: see ``_codec``'s docstring.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import TypeVar

from ringflow.schema import _comparable
from ringflow.schema._codec_base import (
    Codec,
    Rejection,
    SortKey,
    show,
    show_bytes,
    unorderable,
    wrong_type,
)
from ringflow.schema._errors import SchemaError
from ringflow.schema._types import ListType, MapType, SetType, TupleType, UserType

_INT32 = struct.Struct(">i")
_NULL_LENGTH = _INT32.pack(-1)
_NEXT, _NULL, _END, _EMPTY = (
    _comparable.NEXT_COMPONENT,
    _comparable.NULL_COMPONENT,
    _comparable.END_OF_SEQUENCE,
    _comparable.EMPTY_COMPONENT,
)
_SCALARS = str | bytes | bytearray | memoryview
T = TypeVar("T")


# --- reading and writing the framing ------------------------------------------------------------


def split_collection(data: bytes, per_entry: int) -> list[bytes]:
    """The element bytes of a serialized collection, flattened (a map gives key, value, ...)."""
    size = len(data)
    if size < 4:
        raise Rejection(f"truncated collection: {show_bytes(data)}")
    (count,) = _INT32.unpack_from(data, 0)
    if count < 0:
        raise Rejection(f"negative element count {count}")
    elements = []
    position = 4
    for index in range(count * per_entry):
        if position + 4 > size:
            raise Rejection(f"truncated collection at element {index // per_entry}")
        (length,) = _INT32.unpack_from(data, position)
        position += 4
        if length < 0:
            raise Rejection(f"null element {index // per_entry}: collections cannot hold null")
        end = position + length
        if end > size:
            raise Rejection(f"truncated collection at element {index // per_entry}")
        elements.append(data[position:end])
        position = end
    if position != size:
        raise Rejection(f"{size - position} bytes after the last element")
    return elements


def split_components(data: bytes, arity: int) -> list[bytes | None]:
    """The components of a serialized tuple or UDT, padded with None (null) to ``arity``."""
    size = len(data)
    components: list[bytes | None] = []
    position = 0
    while position < size:
        if len(components) == arity:
            raise Rejection(f"more than {arity} components")
        if position + 4 > size:
            raise Rejection(f"truncated component {len(components)}")
        (length,) = _INT32.unpack_from(data, position)
        position += 4
        if length < 0:
            if length != -1:
                raise Rejection(f"component {len(components)} has length {length}")
            components.append(None)
            continue
        end = position + length
        if end > size:
            raise Rejection(f"truncated component {len(components)}")
        components.append(data[position:end])
        position = end
    components.extend([None] * (arity - len(components)))
    return components


def join_collection(elements: Sequence[bytes], count: int) -> bytes:
    """Frame ``count`` entries whose element bytes (keys and values flattened) are given."""
    pack = _INT32.pack
    return pack(count) + b"".join([pack(len(element)) + element for element in elements])


def join_components(components: Iterable[bytes | None]) -> bytes:
    parts = []
    for component in components:
        if component is None:
            parts.append(_NULL_LENGTH)
        else:
            parts.append(_INT32.pack(len(component)))
            parts.append(component)
    return b"".join(parts)


def _sequence_comparable(encodings: Iterable[bytes]) -> bytes:
    parts = []
    for encoding in encodings:
        parts.append(_NEXT if encoding else _EMPTY)  # b"": an empty value (``_comparable``)
        parts.append(encoding)
    parts.append(_END)
    return b"".join(parts)


def sorted_unique(elements: list[bytes], sort_key: Callable[[bytes], SortKey]) -> list[bytes]:
    """Set elements in comparator order without duplicates.

    Of elements that compare equal but differ in bytes (decimals ``1.0``/``1.00``, a tuple with
    or without its trailing null) the smallest bytes are kept, so the result does not depend on
    the order a driver sent them in (Java's ``TreeSet`` would keep the first).
    """
    keyed = sorted((sort_key(element), element) for element in elements)
    unique = keyed[:1]
    for entry in keyed[1:]:
        if entry[0] != unique[-1][0]:
            unique.append(entry)
    return [element for _, element in unique]


def sorted_entries(flat: list[bytes], key_codec: Codec) -> list[bytes]:
    """Map entries (flattened) in key order: of equal keys the last value (``TreeMap.put``) under
    the smallest key bytes."""
    pairs = list(zip(flat[0::2], flat[1::2], strict=True))
    keyed = sorted(
        ((key_codec.sort_key(k), k, index) for index, (k, _) in enumerate(pairs)),
        key=itemgetter(0, 1),
    )
    unique: list[tuple[bytes, int]] = []  # (smallest key bytes, index of the last value)
    previous_key: SortKey = None
    for sort_key, key_bytes, index in keyed:
        if unique and sort_key == previous_key:
            unique[-1] = (unique[-1][0], max(unique[-1][1], index))
        else:
            unique.append((key_bytes, index))
        previous_key = sort_key
    return [part for key_bytes, index in unique for part in (key_bytes, pairs[index][1])]


def _encode_elements(codec: Codec, items: Iterable[object], noun: str) -> list[bytes]:
    encoded = []
    for index, item in enumerate(items):
        try:
            if item is None:
                raise Rejection("null is not allowed inside a collection")
            encoded.append(codec.encode(item))
        except Rejection as rejection:
            raise rejection.within(f"{noun} {index}") from None
    return encoded


def _each(function: Callable[[bytes], T], elements: list[bytes], noun: str) -> list[T]:
    results = []
    for index, element in enumerate(elements):
        try:
            results.append(function(element))
        except Rejection as rejection:
            raise rejection.within(f"{noun} {index}") from None
    return results


def _require_order(codec: Codec, role: str) -> None:
    """Set elements and map keys are kept sorted, so their type needs an order (Cassandra
    refuses durations there the same way)."""
    if not codec.orderable:
        raise SchemaError(f"{codec.type_name} values have no order, so cannot be {role}")


# --- list -----------------------------------------------------------------------------------------


def list_codec(cql_type: ListType, element: Codec) -> Codec:
    def encode(value: object) -> bytes:
        if not isinstance(value, list | tuple):
            raise wrong_type(value, "list or tuple")
        return join_collection(_encode_elements(element, value, "element"), len(value))

    def decode(data: bytes) -> list[object]:
        return _each(element.decode, split_collection(data, 1), "element")

    def check(data: bytes) -> None:
        _each(element.check, split_collection(data, 1), "element")

    def canonical(data: bytes) -> bytes:
        elements = split_collection(data, 1)
        return join_collection(_each(element.canonical, elements, "element"), len(elements))

    def sort_key(data: bytes) -> SortKey:
        return tuple([element.sort_key(item) for item in split_collection(data, 1)])

    def comparable(data: bytes) -> bytes:
        return _sequence_comparable(map(element.comparable, split_collection(data, 1)))

    return _composite(cql_type, [element], encode, decode, check, canonical, sort_key, comparable)


# --- set ------------------------------------------------------------------------------------------


def set_codec(cql_type: SetType, element: Codec) -> Codec:
    _require_order(element, "set elements")

    def encode(value: object) -> bytes:
        if isinstance(value, _SCALARS | Mapping) or not isinstance(value, Collection):
            raise wrong_type(value, "set, frozenset or list")
        unique = sorted_unique(_encode_elements(element, value, "element"), element.sort_key)
        return join_collection(unique, len(unique))

    def decode(data: bytes) -> object:
        elements = split_collection(data, 1)
        if element.hashable:
            return frozenset(_each(element.decode, elements, "element"))
        _each(element.check, elements, "element")  # before sorting, to locate a bad element
        return _each(element.decode, sorted_unique(elements, element.sort_key), "element")

    def check(data: bytes) -> None:
        _each(element.check, split_collection(data, 1), "element")

    def canonical(data: bytes) -> bytes:
        elements = _each(element.canonical, split_collection(data, 1), "element")
        unique = sorted_unique(elements, element.sort_key)
        return join_collection(unique, len(unique))

    def sort_key(data: bytes) -> SortKey:
        # Sort keys are tuples of ints, floats, bytes and Decimals: hashable, equal when equal.
        return tuple(sorted({element.sort_key(item) for item in split_collection(data, 1)}))

    def comparable(data: bytes) -> bytes:
        encodings = sorted(set(map(element.comparable, split_collection(data, 1))))
        return _sequence_comparable(encodings)

    return _composite(cql_type, [element], encode, decode, check, canonical, sort_key, comparable)


# --- map ------------------------------------------------------------------------------------------


def map_codec(cql_type: MapType, key: Codec, value: Codec) -> Codec:
    _require_order(key, "map keys")

    def encode(mapping: object) -> bytes:
        pairs = _map_pairs(mapping)
        flat = []
        for index, (item_key, item_value) in enumerate(pairs):
            try:
                if item_key is None or item_value is None:
                    raise Rejection("null is not allowed inside a collection")
                flat.append(key.encode(item_key))
                flat.append(value.encode(item_value))
            except Rejection as rejection:
                raise rejection.within(f"entry {index}") from None
        entries = sorted_entries(flat, key)
        return join_collection(entries, len(entries) // 2)

    def decode(data: bytes) -> object:
        flat = split_collection(data, 2)
        if not key.hashable:  # a list of pairs: sort and deduplicate as a dict would
            _each(key.check, flat[0::2], "key")  # before sorting, to locate a bad key
            flat = sorted_entries(flat, key)
        keys = _each(key.decode, flat[0::2], "key")
        values = _each(value.decode, flat[1::2], "value")
        if key.hashable:
            return dict(zip(keys, values, strict=True))
        return list(zip(keys, values, strict=True))

    def check(data: bytes) -> None:
        flat = split_collection(data, 2)
        _each(key.check, flat[0::2], "key")
        _each(value.check, flat[1::2], "value")

    def canonical(data: bytes) -> bytes:
        check(data)
        flat = split_collection(data, 2)
        codecs = (key, value)
        rebuilt = [codecs[index % 2].canonical(part) for index, part in enumerate(flat)]
        entries = sorted_entries(rebuilt, key)
        return join_collection(entries, len(entries) // 2)

    def sort_key(data: bytes) -> SortKey:
        entries = sorted_entries(split_collection(data, 2), key)
        pairs = zip(entries[0::2], entries[1::2], strict=True)
        return tuple([(key.sort_key(k), value.sort_key(v)) for k, v in pairs])

    def comparable(data: bytes) -> bytes:
        flat = split_collection(data, 2)
        by_key = {key.comparable(k): v for k, v in zip(flat[0::2], flat[1::2], strict=True)}
        keys = sorted(by_key)
        values = [value.comparable(by_key[k]) for k in keys]
        if b"" in by_key or b"" in values:  # entries have no marker an empty one could take
            raise Rejection("a map with an empty key or value cannot be ordered by ringflow")
        return _sequence_comparable([k + v for k, v in zip(keys, values, strict=True)])

    return _composite(
        cql_type, [key, value], encode, decode, check, canonical, sort_key, comparable
    )


def _map_pairs(mapping: object) -> list[tuple[object, object]]:
    if isinstance(mapping, Mapping):
        return list(mapping.items())
    if isinstance(mapping, list | tuple) and all(
        isinstance(pair, tuple | list) and len(pair) == 2 for pair in mapping
    ):
        return [(pair[0], pair[1]) for pair in mapping]
    raise wrong_type(mapping, "dict (or a list of key, value pairs)")


# --- tuple and user-defined type ----------------------------------------------------------------


def tuple_codec(cql_type: TupleType, components: list[Codec]) -> Codec:
    arity = len(components)

    def encode(value: object) -> bytes:
        if not isinstance(value, tuple | list):
            raise wrong_type(value, "tuple")
        if len(value) > arity:
            raise Rejection(f"{show(value)} has {len(value)} components, the type has {arity}")
        return _encode_components(components, value, "component", [str(i) for i in range(arity)])

    def decode(data: bytes) -> tuple[object, ...]:
        return tuple(_decode_components(components, data, "component"))

    return _components_codec(cql_type, components, encode, decode, "component")


def user_type_codec(cql_type: UserType, fields: list[Codec]) -> Codec:
    names = cql_type.field_names

    def encode(value: object) -> bytes:
        return _encode_components(fields, _field_values(value, names), "field", names)

    def decode(data: bytes) -> dict[str, object]:
        return dict(zip(names, _decode_components(fields, data, "field"), strict=True))

    return _components_codec(cql_type, fields, encode, decode, "field")


def _field_values(value: object, names: tuple[str, ...]) -> list[object]:
    if isinstance(value, Mapping):
        unknown = [name for name in value if name not in names]
        if unknown:
            raise Rejection(f"{show(value)} has unknown field(s) {', '.join(map(str, unknown))}")
        return [value.get(name) for name in names]
    if isinstance(value, tuple | list):
        if len(value) > len(names):
            raise Rejection(f"{show(value)} has more values than the type's {len(names)} fields")
        return list(value)
    if isinstance(value, _SCALARS | int | float) or not any(hasattr(value, n) for n in names):
        raise wrong_type(value, "dict of fields or an object with the fields as attributes")
    return [getattr(value, name, None) for name in names]


def _encode_components(
    codecs: list[Codec], values: Sequence[object], noun: str, labels: Sequence[str]
) -> bytes:
    encoded: list[bytes | None] = []
    for index, item in enumerate(values):
        try:
            encoded.append(None if item is None else codecs[index].encode(item))
        except Rejection as rejection:
            raise rejection.within(f"{noun} {labels[index]}") from None
    encoded.extend([None] * (len(codecs) - len(encoded)))  # canonical: every component present
    return join_components(encoded)


def _decode_components(codecs: list[Codec], data: bytes, noun: str) -> list[object]:
    parts = split_components(data, len(codecs))
    values: list[object] = []
    for index, part in enumerate(parts):
        try:
            values.append(None if part is None else codecs[index].decode(part))
        except Rejection as rejection:
            raise rejection.within(f"{noun} {index}") from None
    return values


def _components_codec(
    cql_type: TupleType | UserType,
    codecs: list[Codec],
    encode: Callable[[object], bytes],
    decode: Callable[[bytes], object],
    noun: str,
) -> Codec:
    arity = len(codecs)

    def check(data: bytes) -> None:
        for index, part in enumerate(split_components(data, arity)):
            try:
                if part is not None:
                    codecs[index].check(part)
            except Rejection as rejection:
                raise rejection.within(f"{noun} {index}") from None

    def canonical(data: bytes) -> bytes:
        check(data)
        parts = split_components(data, arity)  # a short value gets its trailing nulls
        return join_components(
            None if part is None else codec.canonical(part)
            for codec, part in zip(codecs, parts, strict=True)
        )

    def sort_key(data: bytes) -> SortKey:
        parts = split_components(data, arity)
        return tuple(
            [
                (0,) if part is None else (1, codec.sort_key(part))
                for codec, part in zip(codecs, parts, strict=True)
            ]
        )

    def comparable(data: bytes) -> bytes:
        parts = split_components(data, arity)
        encoded = []
        for codec, part in zip(codecs, parts, strict=True):
            if part is None:
                encoded.append(_NULL)
            else:
                encoding = codec.comparable(part)
                encoded.append(_NEXT + encoding if encoding else _EMPTY)
        return b"".join(encoded)

    return _composite(cql_type, codecs, encode, decode, check, canonical, sort_key, comparable)


# --- assembly -----------------------------------------------------------------------------------


def _composite(
    cql_type: ListType | SetType | MapType | TupleType | UserType,
    parts: list[Codec],
    encode: Callable[[object], bytes],
    decode: Callable[[bytes], object],
    check: Callable[[bytes], None],
    canonical: Callable[[bytes], bytes],
    sort_key: Callable[[bytes], SortKey],
    comparable: Callable[[bytes], bytes],
) -> Codec:
    name = cql_type.cql_name()
    orderable = all(part.orderable for part in parts)
    # Sets and maps may come unsorted, tuples and UDTs short: only lists can be left as sent.
    identity = isinstance(cql_type, ListType) and parts[0].canonical_is_identity
    if identity:

        def canonical(data: bytes) -> bytes:
            check(data)
            return data

    return Codec(
        cql_type,
        name,
        encode,
        decode,
        check,
        canonical,
        sort_key if orderable else unorderable(name),
        comparable if orderable else unorderable(name),
        hashable=_decodes_hashable(cql_type, parts),
        canonical_is_identity=identity,
        orderable=orderable,
    )


def _decodes_hashable(cql_type: object, parts: list[Codec]) -> bool:
    """Sets decode to frozensets and tuples to tuples; lists, maps and UDTs to lists and dicts."""
    if isinstance(cql_type, SetType | TupleType):
        return all(part.hashable for part in parts)
    return False
