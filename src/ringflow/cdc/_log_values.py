"""Serialized values the CDC log builder writes and reads, on top of the schema codec.

Owns the byte forms of ``shared/reference/scylla-cdc.md`` §5 "Columns": the meta values
(``cdc$operation tinyint``, ``cdc$batch_seq_no int``, ``cdc$ttl bigint``, ``cdc$deleted_X`` and
``cdc$end_of_batch`` ``boolean``) and the frozen values standing for non-frozen columns
(``cdc-advanced-types.rst``): a set, map or UDT in its frozen form, a list as
``map<timeuuid, T>`` keyed by its cells' paths, removed keys as a frozen set. Scylla builds those
from cell bytes (``serialize_partially_deserialized_form``, ``build_value``); so do we, with
``ringflow.schema._codec.serialized_collection_from_cells``. Key order is the codec's typed order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence

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
    ListType,
    MapType,
    SetType,
    Table,
    UserType,
)
from ringflow.schema._codec import (
    cells_from_collection_value,
    clustering_encoder,
    compare,
    serialize,
    serialized_collection_from_cells,
)

Clustering = tuple[bytes, ...]
ClusteringKey = Callable[[Sequence[bytes]], bytes]
"""Order-preserving bytes of a clustering key or prefix (``_codec.encode_clustering``)."""

TRUE = serialize(BOOLEAN, True)


def tinyint(value: int) -> bytes:
    return serialize(TINYINT, value)


def int32(value: int) -> bytes:
    return serialize(INT, value)


def bigint(value: int) -> bytes:
    return serialize(BIGINT, value)


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
    """The order-preserving encoder of ``base``'s clustering keys and prefixes."""
    columns = base.clustering_columns
    return clustering_encoder([(column.type, column.order) for column in columns])
