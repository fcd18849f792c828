"""The CQL value codec: serialize, deserialize, validate, compare and order-preserving bytes.

Owns the public face of ringflow's value handling for every CQL type; the per-type work lives in
``_codec_native`` (native types), ``_codec_collections`` (collections, tuples, UDTs) and
``_comparable`` (byte-comparable layouts). Serialized forms are native protocol v4 §6-7
(``doc/native_protocol_v4.spec``; collections always in the v3+ form with int32 counts and
lengths; ``duration`` as in protocol v5). Comparison order is Cassandra's (``db/marshal``), with
the timeuuid rule of scylla-cdc.md §5.

Each type compiles once into a :class:`Codec` (:func:`codec_for`, cached); hot paths should hold
the codec, or the callable from :func:`clustering_encoder`, instead of calling the module
functions with a type each time.

Python values accepted by :func:`serialize` → returned by :func:`deserialize`:

=============  ====================================================  ============================
type           accepted                                              returned
=============  ====================================================  ============================
ascii          ``str`` of 7-bit characters                           ``str``
text/varchar   ``str``                                               ``str``
blob           ``bytes``, ``bytearray``, ``memoryview``              ``bytes``
boolean        ``bool``                                              ``bool``
tinyint..      ``int`` (or ``__index__``; not ``bool``), range       ``int``
bigint         checked
varint         ``int``                                               ``int``
decimal        ``decimal.Decimal`` (finite), ``int``, ``float``      ``decimal.Decimal`` (same
               (exact binary value, as the Python driver)            digits and exponent)
float/double   ``float`` or ``int``; float32 range checked           ``float``
timestamp      ``datetime.datetime`` (naive = UTC; aware converted;  naive UTC ``datetime`` when
               sub-ms floored), ``datetime.date`` (midnight UTC),    in datetime's range, else
               ``int`` ms since epoch                                ``int`` ms
date           ``datetime.date`` (not ``datetime``), ``int`` days    ``datetime.date`` when in
               since epoch (signed: NOT the driver's raw uint32),    range, else ``int`` days
               driver ``util.Date``                                  since epoch
time           ``datetime.time`` (naive), ``int`` ns since           ``datetime.time`` when a
               midnight (0..86399999999999), driver ``util.Time``    whole µs, else ``int`` ns
uuid           ``uuid.UUID`` (any version)                           ``uuid.UUID``
timeuuid       ``uuid.UUID`` of version 1                            ``uuid.UUID``
inet           ``ipaddress.IPv4Address``/``IPv6Address`` or ``str``  ``IPv4Address``/
                                                                     ``IPv6Address``
duration       :class:`Duration` or any object with ``months``,      :class:`Duration`
               ``days``, ``nanoseconds`` (driver ``util.Duration``)
list           ``list`` or ``tuple``                                 ``list``
set            any collection (``set``, ``frozenset``, ``list``...); ``frozenset``; a sorted
               stored sorted in element order, duplicates dropped    ``list`` if elements are
                                                                     unhashable (lists, dicts)
map            ``Mapping`` or a list of (key, value) pairs; stored   ``dict``; a list of pairs if
               sorted by key, last value of equal keys kept          keys are unhashable
tuple          ``tuple``/``list``, may be shorter (written padded    ``tuple`` of every component
               with nulls); ``None`` = null                          (``None`` = null)
UDT            ``Mapping`` field→value (unknown names refused),      ``dict`` of every field
               tuple (positional) or object with the fields as       (``None`` = null)
               attributes (a missing field is null)
=============  ====================================================  ============================

``None`` is never a value here: a null column is absent, a null tuple/UDT component is ``None``;
collections cannot hold null. Every refusal is ``InvalidValue`` (CQL 0x2200) naming the column,
the type and the offending value; comparing ``duration`` (or anything holding one) or putting it
in a set, a map key or a clustering key is a ``SchemaError``.

Clustering keys (:func:`encode_clustering`): each component is ``0x40`` followed by its
comparable bytes, bit-inverted for DESC columns (inversion keeps the order reversed because each
component's encoding is prefix-free); an empty value (:func:`tolerant_codec_for`) is ``0x3f``
alone (before every value), ``0x41`` in a DESC column (after every value), as Cassandra orders
it. :func:`prefix_upper_bound` appends ``0x60``. For a prefix
``P`` (``E = encode_clustering(P)``) the slice bounds are: ``ck >= P`` from ``E`` inclusive,
``ck > P`` from ``prefix_upper_bound(E)`` inclusive, ``ck < P`` up to ``E`` exclusive,
``ck <= P`` up to ``prefix_upper_bound(E)`` exclusive. The empty prefix encodes as ``b""``.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable, Sequence

from ringflow.errors import invariant
from ringflow.schema import _comparable
from ringflow.schema._codec_base import LOWEST, Codec, Rejection
from ringflow.schema._codec_collections import (
    join_collection,
    join_components,
    list_codec,
    map_codec,
    set_codec,
    split_collection,
    split_components,
    tuple_codec,
    user_type_codec,
)
from ringflow.schema._codec_native import NATIVE_CODECS, Duration
from ringflow.schema._errors import InvalidValue, SchemaError
from ringflow.schema._table import ClusteringOrder
from ringflow.schema._types import (
    CqlType,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
)

__all__ = [
    "EMPTY_VALUE_TYPES",
    "Codec",
    "Duration",
    "cells_from_collection_value",
    "clustering_encoder",
    "codec_for",
    "comparable_bytes",
    "compare",
    "deserialize",
    "encode_clustering",
    "list_cells",
    "list_values",
    "normalize",
    "normalize_tolerant",
    "prefix_upper_bound",
    "serialize",
    "serialized_collection_from_cells",
    "tolerant_codec_for",
    "validate",
]

ClusteringTypes = Sequence[tuple[CqlType, ClusteringOrder]]
_FIELD_INDEX = struct.Struct(">H")
_IDENTITY_CACHE_LIMIT = 4096
_by_identity: dict[int, tuple[CqlType, Codec]] = {}
_encoders_by_identity: dict[int, tuple[object, Callable[[Sequence[bytes]], bytes]]] = {}


def codec_for(cql_type: CqlType) -> Codec:
    """The compiled codec of a type; cached by identity first (no hashing), then by equality."""
    entry = _by_identity.get(id(cql_type))
    if entry is not None and entry[0] is cql_type:
        return entry[1]
    codec = _compile(cql_type)
    if len(_by_identity) >= _IDENTITY_CACHE_LIMIT:
        _by_identity.clear()
    _by_identity[id(cql_type)] = (cql_type, codec)
    return codec


@functools.lru_cache(maxsize=1024)
def _compile(cql_type: CqlType) -> Codec:
    builder = _BUILDERS.get(type(cql_type))
    if builder is None:
        raise SchemaError(f"no codec for {cql_type!r}")
    return builder(cql_type)


def _native(cql_type: NativeType) -> Codec:
    return NATIVE_CODECS[cql_type.name]


def _list(cql_type: ListType) -> Codec:
    return list_codec(cql_type, codec_for(cql_type.element))


def _set(cql_type: SetType) -> Codec:
    return set_codec(cql_type, codec_for(cql_type.element))


def _map(cql_type: MapType) -> Codec:
    return map_codec(cql_type, codec_for(cql_type.key), codec_for(cql_type.value))


def _tuple(cql_type: TupleType) -> Codec:
    return tuple_codec(cql_type, [codec_for(element) for element in cql_type.elements])


def _user_type(cql_type: UserType) -> Codec:
    return user_type_codec(cql_type, [codec_for(field) for field in cql_type.field_types])


# --- empty values -------------------------------------------------------------------------------

EMPTY_VALUE_TYPES = frozenset(
    {"int", "bigint", "varint", "decimal", "float", "double", "boolean", "timestamp", "uuid",
     "timeuuid", "inet"}
)  # fmt: skip
"""Native types whose Cassandra serializer also accepts a zero-byte *empty* value, which no
value of theirs serializes to (``text``, ``ascii`` and ``blob`` have ``''`` among their values;
``tinyint``, ``smallint``, ``date``, ``time`` and ``duration`` refuse it)."""


def tolerant_codec_for(cql_type: CqlType) -> Codec:
    """:func:`codec_for` with empty values accepted wherever Cassandra accepts them: a value of
    an ``EMPTY_VALUE_TYPES`` type, alone or at any depth of a collection, tuple or UDT, may be
    ``b""``. It checks and normalizes as valid, sorts before every other value of its type
    (``LOWEST``) and encodes comparably as ``b""`` (``_comparable``'s ``EMPTY_COMPONENT`` where
    it has a place; a map holding one cannot be ordered). It has no Python value: ``decode``
    still refuses it. Clustering keys, collection values and comparisons use these codecs."""
    entry = _tolerant_by_identity.get(id(cql_type))
    if entry is not None and entry[0] is cql_type:
        return entry[1]
    codec = _compile_tolerant(cql_type)
    if len(_tolerant_by_identity) >= _IDENTITY_CACHE_LIMIT:
        _tolerant_by_identity.clear()
    _tolerant_by_identity[id(cql_type)] = (cql_type, codec)
    return codec


_tolerant_by_identity: dict[int, tuple[CqlType, Codec]] = {}


@functools.lru_cache(maxsize=1024)
def _compile_tolerant(cql_type: CqlType) -> Codec:
    if isinstance(cql_type, NativeType):
        strict = NATIVE_CODECS[cql_type.name]
        return _tolerant_native(strict) if cql_type.name in EMPTY_VALUE_TYPES else strict
    if isinstance(cql_type, ListType):
        return list_codec(cql_type, tolerant_codec_for(cql_type.element))
    if isinstance(cql_type, SetType):
        return set_codec(cql_type, tolerant_codec_for(cql_type.element))
    if isinstance(cql_type, MapType):
        return map_codec(
            cql_type, tolerant_codec_for(cql_type.key), tolerant_codec_for(cql_type.value)
        )
    if isinstance(cql_type, TupleType):
        return tuple_codec(cql_type, [tolerant_codec_for(e) for e in cql_type.elements])
    if isinstance(cql_type, UserType):
        return user_type_codec(cql_type, [tolerant_codec_for(f) for f in cql_type.field_types])
    raise SchemaError(f"no codec for {cql_type!r}")


def _tolerant_native(strict: Codec) -> Codec:
    check, canonical, sort_key, comparable = (
        strict.check,
        strict.canonical,
        strict.sort_key,
        strict.comparable,
    )

    def tolerant_check(data: bytes) -> None:
        if data:
            check(data)

    def tolerant_canonical(data: bytes) -> bytes:
        return canonical(data) if data else data

    def tolerant_sort_key(data: bytes) -> object:
        return sort_key(data) if data else LOWEST

    def tolerant_comparable(data: bytes) -> bytes:
        return comparable(data) if data else b""

    return dataclasses.replace(
        strict,
        check=tolerant_check,
        canonical=tolerant_canonical,
        sort_key=tolerant_sort_key,
        comparable=tolerant_comparable,
    )


_BUILDERS: dict[type, Callable[[CqlType], Codec]] = {
    NativeType: _native,  # type: ignore[dict-item]
    ListType: _list,  # type: ignore[dict-item]
    SetType: _set,  # type: ignore[dict-item]
    MapType: _map,  # type: ignore[dict-item]
    TupleType: _tuple,  # type: ignore[dict-item]
    UserType: _user_type,  # type: ignore[dict-item]
}


# --- values -------------------------------------------------------------------------------------


def serialize(cql_type: CqlType, value: object, column: str = "?") -> bytes:
    """The native-protocol serialization of a Python value (see the table above)."""
    return codec_for(cql_type).serialize(value, column)


def deserialize(cql_type: CqlType, data: bytes, column: str = "?") -> object:
    """The Python value of serialized bytes; malformed bytes raise ``InvalidValue``."""
    return codec_for(cql_type).deserialize(data, column)


def validate(cql_type: CqlType, data: bytes, column: str = "?") -> None:
    """Check serialized bytes (e.g. bound by a driver) without building Python values.

    Set elements and map entries may come in any order and repeated (the Python driver writes a
    set in iteration order): valid, but store :func:`normalize`'s result, not the bytes as sent.
    """
    codec_for(cql_type).validate(data, column)


def normalize_tolerant(cql_type: CqlType, data: bytes, column: str = "?") -> bytes:
    """:func:`normalize` with empty values accepted where Cassandra accepts them
    (:func:`tolerant_codec_for`)."""
    return tolerant_codec_for(cql_type).normalize(data, column)


def normalize(cql_type: CqlType, data: bytes, column: str = "?") -> bytes:
    """Validate, and return the canonical bytes: sets and maps (at any depth) sorted in their
    element order without duplicates, as Cassandra stores a bound frozen collection. Returns
    ``data`` itself when the type holds no set or map."""
    return codec_for(cql_type).normalize(data, column)


def compare(cql_type: CqlType, left: bytes, right: bytes) -> int:
    """Cassandra's order of two serialized values: -1, 0 or 1 (an empty value first)."""
    return tolerant_codec_for(cql_type).compare(left, right)


def comparable_bytes(cql_type: CqlType, data: bytes) -> bytes:
    """A prefix-free encoding whose unsigned byte order is :func:`compare`'s order."""
    return codec_for(cql_type).comparable_bytes(data)


# --- clustering keys -------------------------------------------------------------------------


def clustering_encoder(types: ClusteringTypes) -> Callable[[Sequence[bytes]], bytes]:
    """A compiled :func:`encode_clustering` for one table's clustering columns."""
    # A native column's empty value is caught before its (strict, so no wrapper call on the hot
    # path) codec; a collection's, tuple's or UDT's codec is the tolerant one, for those inside.
    codecs = [
        codec_for(cql_type) if isinstance(cql_type, NativeType) else tolerant_codec_for(cql_type)
        for cql_type, _ in types
    ]
    components: list[tuple[Callable[[bytes], bytes], bool, bool]] = []
    for index, (codec, (cql_type, order)) in enumerate(zip(codecs, types, strict=True)):
        if not codec.orderable:
            raise SchemaError(f"clustering column {index} of type {codec.type_name} has no order")
        empty_ok = isinstance(cql_type, NativeType) and cql_type.name in EMPTY_VALUE_TYPES
        components.append((codec.comparable, order is ClusteringOrder.DESC, empty_ok))
    size = len(components)
    next_component, invert = _comparable.NEXT_COMPONENT, _comparable.INVERT
    empty = {False: _comparable.EMPTY_COMPONENT, True: _comparable.EMPTY_COMPONENT_DESC}

    def encode(prefix: Sequence[bytes]) -> bytes:
        if len(prefix) > size:
            raise InvalidValue(f"clustering prefix has {len(prefix)} values for {size} columns")
        parts = []
        for index, value in enumerate(prefix):
            comparable, descending, empty_ok = components[index]
            if empty_ok and not value:  # an empty value: first, last in a DESC column
                parts.append(empty[descending])
                continue
            try:
                encoded = comparable(value)
            except Rejection as rejection:
                raise codecs[index].invalid(f"clustering[{index}]", rejection) from None
            parts.append(next_component)
            parts.append(encoded.translate(invert) if descending else encoded)
        return b"".join(parts)

    return encode


@functools.lru_cache(maxsize=1024)
def _cached_clustering_encoder(
    types: tuple[tuple[CqlType, ClusteringOrder], ...],
) -> Callable[[Sequence[bytes]], bytes]:
    return clustering_encoder(types)


def encode_clustering(types: ClusteringTypes, prefix: Sequence[bytes]) -> bytes:
    """Order-preserving bytes of a clustering key or prefix (layout in the module docstring).

    Full keys sort in clustering order (DESC columns reversed); the encoding of a prefix sorts
    at or before every key extending it and :func:`prefix_upper_bound` of it after them all.
    Hot paths should keep the callable of :func:`clustering_encoder` (or pass a tuple, which is
    cached by identity).
    """
    if type(types) is tuple:  # immutable: safe to remember by identity
        entry = _encoders_by_identity.get(id(types))
        if entry is not None and entry[0] is types:
            return entry[1](prefix)
        encoder = _cached_clustering_encoder(types)
        if len(_encoders_by_identity) >= _IDENTITY_CACHE_LIMIT:
            _encoders_by_identity.clear()
        _encoders_by_identity[id(types)] = (types, encoder)
        return encoder(prefix)
    return _cached_clustering_encoder(tuple(types))(prefix)


def prefix_upper_bound(encoded: bytes) -> bytes:
    """The smallest key above every key extending an :func:`encode_clustering` prefix."""
    return encoded + _comparable.AFTER_PREFIX


# --- non-frozen collections as cells -------------------------------------------------------------


def serialized_collection_from_cells(
    cql_type: CqlType, cells: Sequence[tuple[bytes, bytes]]
) -> bytes:
    """The single-value (frozen) serialization of a non-frozen collection or UDT.

    ``cells`` are the live element cells ``(path, value)`` in path order, as storage holds them:
    list → values in path (timeuuid) order; set → the paths are the elements; map → path = key;
    UDT → path = 2-byte big-endian field index (absent fields are null). No cells gives the empty
    collection; CQL shows a non-frozen collection without cells as null, which is the caller's
    call.
    """
    if isinstance(cql_type, ListType):
        return join_collection([value for _, value in cells], len(cells))
    if isinstance(cql_type, SetType):
        return join_collection([path for path, _ in cells], len(cells))
    if isinstance(cql_type, MapType):
        return join_collection([part for cell in cells for part in cell], len(cells))
    if isinstance(cql_type, UserType):
        fields: list[bytes | None] = [None] * len(cql_type.field_names)
        for path, value in cells:
            fields[_field_index(cql_type, path)] = value
        return join_components(fields)
    raise SchemaError(f"{cql_type.cql_name()} is not a collection or user type")


def cells_from_collection_value(
    cql_type: CqlType, data: bytes, column: str = "?"
) -> list[tuple[bytes, bytes]]:
    """The element cells ``(path, value)`` of a whole set, map or UDT value, in path order.

    ``data`` is validated and normalized first (a driver may send a set unsorted). A set's cells
    have empty values; a UDT's null fields give no cell. Lists have no path in their value: the
    caller mints one timeuuid per element and pairs them with :func:`list_cells`.
    """
    canonical = tolerant_codec_for(cql_type).normalize(data, column)
    if isinstance(cql_type, SetType):
        return [(element, b"") for element in split_collection(canonical, 1)]
    if isinstance(cql_type, MapType):
        flat = split_collection(canonical, 2)
        return list(zip(flat[0::2], flat[1::2], strict=True))
    if isinstance(cql_type, UserType):
        components = split_components(canonical, len(cql_type.field_names))
        return [
            (_FIELD_INDEX.pack(index), value)
            for index, value in enumerate(components)
            if value is not None
        ]
    if isinstance(cql_type, ListType):
        raise SchemaError("list cells are keyed by caller-minted timeuuids: use list_cells")
    raise SchemaError(f"{cql_type.cql_name()} is not a collection or user type")


def list_values(cql_type: ListType, data: bytes, column: str = "?") -> list[bytes]:
    """The validated element bytes of a whole list value, in order."""
    canonical = tolerant_codec_for(cql_type).normalize(data, column)
    return split_collection(canonical, 1)


def list_cells(values: Sequence[bytes], paths: Sequence[bytes]) -> list[tuple[bytes, bytes]]:
    """Pair list element values with the timeuuid paths (16 bytes each, ascending) minted for
    them, e.g. ``list_cells(list_values(t, data), paths)``."""
    invariant(len(values) == len(paths), f"{len(values)} list values for {len(paths)} paths")
    invariant(all(len(path) == 16 for path in paths), "list cell paths must be 16-byte timeuuids")
    return list(zip(paths, values, strict=True))


def _field_index(cql_type: UserType, path: bytes) -> int:
    if len(path) != 2:
        raise InvalidValue(f"UDT {cql_type.name}: cell path {path!r} is not a 2-byte field index")
    (index,) = _FIELD_INDEX.unpack(path)
    if index >= len(cql_type.field_names):
        raise InvalidValue(f"UDT {cql_type.name} has no field {index}")
    return int(index)
