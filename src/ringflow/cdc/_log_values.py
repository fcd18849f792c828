"""Serialized values the CDC log builder writes and reads, on top of the schema codec.

Owns the byte forms of ``shared/reference/scylla-cdc.md`` §5 "Columns": the meta values
(``cdc$operation tinyint``, ``cdc$batch_seq_no int``, ``cdc$ttl bigint``, ``cdc$deleted_X`` and
``cdc$end_of_batch`` ``boolean``) and the frozen values standing for non-frozen columns
(``cdc-advanced-types.rst``): a set, map or UDT in its frozen form, a list as
``map<timeuuid, T>`` keyed by its cells' paths, removed keys as a frozen set. Scylla builds those
from cell bytes (``serialize_partially_deserialized_form``, ``build_value``); so do we, with
``ringflow.schema._codec.serialized_collection_from_cells``. Key order is the codec's typed order.

Also owns :class:`BasePlan`, what the builder derives from a base table definition (column
names, kinds, order, clustering encoder, CDC options), computed once per ``Table`` object and
kept in a bounded identity-keyed cache, so that no call re-derives it.
"""

from __future__ import annotations

import functools
import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ringflow.cdc._log_schema import log_value_type
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    BIGINT,
    BOOLEAN,
    INT,
    SMALLINT,
    TIMEUUID,
    TINYINT,
    CqlType,
    DeltaMode,
    ListType,
    MapType,
    PreimageMode,
    SchemaError,
    SetType,
    Table,
    UserType,
    cells_from_collection_value,
    clustering_encoder,
    compare,
    serialize,
    serialized_collection_from_cells,
    timeuuid_from_micros,
)

Clustering = tuple[bytes, ...]
ClusteringKey = Callable[[Sequence[bytes]], bytes]
"""Order-preserving bytes of a clustering key or prefix (``_codec.encode_clustering``)."""

TRUE = serialize(BOOLEAN, True)

# The meta values are fixed-size integers: packed with precompiled structs (the codec's own
# encoders, minus its per-call type dispatch); out of range falls back to the codec's error.
_TINYINT = struct.Struct(">b").pack
_INT32 = struct.Struct(">i").pack
_INT64 = struct.Struct(">q").pack


def tinyint(value: int) -> bytes:
    try:
        return _TINYINT(value)
    except struct.error:
        return serialize(TINYINT, value)


def int32(value: int) -> bytes:
    try:
        return _INT32(value)
    except struct.error:
        return serialize(INT, value)


def bigint(value: int) -> bytes:
    try:
        return _INT64(value)
    except struct.error:
        return serialize(BIGINT, value)


_UUID_EPOCH_OFFSET_100NS = 0x01B21DD213814000
_LOW_BITS = 0x3FFF_FFFF_FFFF_FFFF  # the low 64 bits but the variant's two
_VARIANT_BITS = 0x8000_0000_0000_0000


def timeuuid_bytes(timestamp_us: int, low_bits: int) -> bytes:
    """``timeuuid_from_micros(timestamp_us, low_bits).bytes`` without building a ``UUID``."""
    ticks = timestamp_us * 10 + _UUID_EPOCH_OFFSET_100NS
    if not 0 <= ticks < 2**60:
        return timeuuid_from_micros(timestamp_us, low_bits).bytes  # raises its ValueError
    high = (ticks & 0xFFFF_FFFF) << 32 | ((ticks >> 32) & 0xFFFF) << 16 | (ticks >> 48) | 0x1000
    return (high << 64 | (low_bits & _LOW_BITS) | _VARIANT_BITS).to_bytes(16, "big")


def path_type(column_type: CqlType) -> CqlType:
    """The type of a complex column's cell paths: element, key, timeuuid or field index."""
    if isinstance(column_type, SetType):
        return column_type.element
    if isinstance(column_type, MapType):
        return column_type.key
    if isinstance(column_type, ListType):
        return TIMEUUID
    if isinstance(column_type, UserType):
        return SMALLINT
    raise InvalidRequest(f"type {column_type.cql_name()} has no cell paths")


def sorted_by_type(cql_type: CqlType, items: Iterable[bytes]) -> list[bytes]:
    """``items`` in the CQL order of ``cql_type`` (the order Scylla keeps collection keys in)."""

    def order(left: bytes, right: bytes) -> int:
        return compare(cql_type, left, right)

    return sorted(items, key=functools.cmp_to_key(order))


def frozen_value(column_type: CqlType, cells: Sequence[tuple[bytes, bytes]]) -> bytes:
    """The log value of a non-frozen column from its ``(path, value)`` cells in path order."""
    return serialized_collection_from_cells(log_value_type(column_type), cells)


def frozen_cells(column_type: CqlType, data: bytes) -> list[tuple[bytes, bytes]]:
    """The ``(path, value)`` cells of a log value of a non-frozen column (inverse of above)."""
    return cells_from_collection_value(log_value_type(column_type), data)


def key_set(key_type: CqlType, keys: Sequence[bytes]) -> bytes:
    """A ``frozen<set<key_type>>`` of keys already in the type's order."""
    return serialized_collection_from_cells(SetType(key_type, True), [(k, b"") for k in keys])


def clustering_key(base: Table) -> ClusteringKey:
    """The order-preserving encoder of ``base``'s clustering keys and prefixes; SchemaError if
    a clustering column's type has no order."""
    key = base_plan(base).clustering_key
    return key if key is not None else _clustering_key(base)  # raises the codec's SchemaError


def _clustering_key(base: Table) -> ClusteringKey:
    columns = base.clustering_columns
    return clustering_encoder([(column.type, column.order) for column in columns])


# --- per-table plans ------------------------------------------------------------------------

_Key = TypeVar("_Key")
_Value = TypeVar("_Value")


class IdentityCache(Generic[_Key, _Value]):
    """Values derived from objects (table definitions), keyed by the object's identity.

    A hit needs no hashing of the (large) key object. Each entry keeps its key alive, so an id
    cannot be reused by another object while cached; an altered table is a new ``Table`` object,
    hence a miss, never a stale value. At most ``limit`` entries; the oldest goes first.
    """

    def __init__(self, build: Callable[[_Key], _Value], limit: int) -> None:
        self._build = build
        self._limit = limit
        self._entries: dict[int, tuple[_Key, _Value]] = {}
        self._lock = threading.Lock()

    def __call__(self, key: _Key) -> _Value:
        entry = self._entries.get(id(key))
        if entry is not None and entry[0] is key:
            return entry[1]
        value = self._build(key)
        with self._lock:
            while len(self._entries) >= self._limit:
                del self._entries[next(iter(self._entries))]
            self._entries[id(key)] = (key, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True, slots=True, eq=False)
class BasePlan:
    """What the log builder needs of a base table on every call, derived once per ``Table``."""

    table: Table
    clustering_key: ClusteringKey | None
    """None if a clustering column's type has no order (see :func:`clustering_key`)."""
    partition_key_names: tuple[str, ...]
    clustering_names: tuple[str, ...]
    static_names: tuple[str, ...]
    """Static columns in table order (the static row's image columns)."""
    regular_names: tuple[str, ...]
    """Regular columns in table order (a clustered row's image columns)."""
    atomic_regular: frozenset[str]
    """Regular columns that are not non-frozen collections or UDTs."""
    column_rank: Mapping[str, int]
    """Static and regular columns in Scylla's column-id order (by the UTF-8 bytes of names)."""
    delta_full: bool
    preimage: PreimageMode
    postimage: bool
    ttl_s: int

    @property
    def images(self) -> bool:
        return self.preimage is not PreimageMode.OFF or self.postimage


def _base_plan(base: Table) -> BasePlan:
    static = tuple(column.name for column in base.static_columns)
    regular = tuple(column.name for column in base.regular_columns)
    ranked = sorted(static + regular, key=lambda name: name.encode("utf-8"))
    options = base.options.cdc
    try:
        key: ClusteringKey | None = _clustering_key(base)
    except SchemaError:
        key = None
    return BasePlan(
        table=base,
        clustering_key=key,
        partition_key_names=tuple(column.name for column in base.partition_key_columns),
        clustering_names=tuple(column.name for column in base.clustering_columns),
        static_names=static,
        regular_names=regular,
        atomic_regular=frozenset(c.name for c in base.regular_columns if not c.type.is_multicell),
        column_rank={name: rank for rank, name in enumerate(ranked)},
        delta_full=options.delta is DeltaMode.FULL,
        preimage=options.preimage,
        postimage=options.postimage,
        ttl_s=options.ttl_s,
    )


base_plan: IdentityCache[Table, BasePlan] = IdentityCache(_base_plan, limit=256)
"""The :class:`BasePlan` of a base table (cached per ``Table`` object)."""
