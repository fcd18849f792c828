"""What the store knows about one registered table, precomputed once per table. Pure.

``TableInfo`` carries the table definition plus the lookups the write and read paths need on
every row: the local table id used in SQLite keys, the compiled clustering encoder, which
columns are static, regular and multi-cell (non-frozen collections and UDTs), and for each
multi-cell column the order of its element paths (the collection's CQL order: element or key
type order for sets and maps, timeuuid order for lists, field index for UDTs), and whether its
rows are stored packed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType

from ringflow.schema import (
    NEXT_COMPONENT,
    TIMEUUID,
    ClusteringOrder,
    Column,
    CqlType,
    ListType,
    MapType,
    SetType,
    Table,
    clustering_encoder,
    codec_for,
    token_of_key_bytes,
)
from ringflow.storage._keys import CLUSTERED_TAG, ClusteringEncoder, row_key

PathOrder = Callable[[bytes], bytes]
"""Sort key of an element path: its byte-comparable form in the collection's order."""


def _path_order(cql_type: CqlType) -> PathOrder:
    if isinstance(cql_type, ListType):
        path_type: CqlType | None = TIMEUUID
    elif isinstance(cql_type, SetType):
        path_type = cql_type.element
    elif isinstance(cql_type, MapType):
        path_type = cql_type.key
    else:
        path_type = None  # UDT: 2-byte big-endian field index, already in order
    if path_type is None:
        return bytes
    comparable = codec_for(path_type).comparable

    def order(path: bytes) -> bytes:
        try:
            return b"\x01" + comparable(path)
        except Exception:  # a path the type rejects sorts first, by its raw bytes
            return b"\x00" + path

    return order


def _trusted_row_key(table: Table, encode: ClusteringEncoder) -> Callable[[Sequence[bytes]], bytes]:
    """``row_key(encode, clustering)`` for a full clustering the store built itself (its CDC
    log rows): for the log tables' two ascending columns, the components' comparable forms
    joined without the generic encoder's per-component loop; the same bytes. Raises on a bad
    value like the encoder does, though not necessarily the same error."""
    columns = table.clustering_columns
    if len(columns) != 2 or any(c.order is not ClusteringOrder.ASC for c in columns):
        return lambda clustering: row_key(encode, clustering)
    first, second = (codec_for(column.type).comparable for column in columns)
    head = CLUSTERED_TAG + NEXT_COMPONENT
    seconds: dict[bytes, bytes] = {}  # the second component's few values (cdc$batch_seq_no)

    def key(clustering: Sequence[bytes]) -> bytes:
        one, two = clustering
        tail = seconds.get(two) if type(two) is bytes else None
        if tail is None:
            tail = NEXT_COMPONENT + second(two)
            if type(two) is bytes and len(seconds) < _SECOND_COMPONENTS_KEPT:
                seconds[two] = tail
        return head + first(one) + tail

    return key


_SECOND_COMPONENTS_KEPT = 64


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A registered table as the store sees it. Build with :meth:`of`."""

    tid: int
    table: Table
    encode_clustering: ClusteringEncoder
    static_columns: Mapping[str, Column]
    regular_columns: Mapping[str, Column]
    multicell: frozenset[str]
    multicell_types: Mapping[str, CqlType]
    path_orders: Mapping[str, PathOrder]
    partition_key_arity: int
    clustering_arity: int
    packed_rows: bool = False
    """Rows are written as one packed atom each (see the layout module); CDC log tables."""
    trusted_row_key: Callable[[Sequence[bytes]], bytes] | None = None
    """``ck`` of a full, store-built clustering (see :func:`_trusted_row_key`)."""
    token_of_key: Callable[[bytes], int] | None = None
    """``token_of_key_bytes`` for the table's name, with the partitioner chosen once."""
    dropped_at_us: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Columns of the table that were dropped and added again: their cells written at or
    before the drop are never read (``Table.dropped_columns``)."""
    dropped_names: frozenset[str] = frozenset()
    """Columns dropped and not added again: a mutation's cells of them are skipped, not
    refused (:func:`~ringflow.storage._write.without_dropped_columns`)."""

    @classmethod
    def of(cls, tid: int, table: Table, packed_rows: bool = False) -> TableInfo:
        static = {column.name: column for column in table.static_columns}
        regular = {column.name: column for column in table.regular_columns}
        value_columns = (*table.static_columns, *table.regular_columns)
        multicell = {column.name: column for column in value_columns if column.type.is_multicell}
        types = tuple((column.type, column.order) for column in table.clustering_columns)
        encode = clustering_encoder(types)
        return cls(
            tid=tid,
            table=table,
            encode_clustering=encode,
            static_columns=MappingProxyType(static),
            regular_columns=MappingProxyType(regular),
            multicell=frozenset(multicell),
            multicell_types=MappingProxyType({n: c.type for n, c in multicell.items()}),
            path_orders=MappingProxyType(
                {name: _path_order(column.type) for name, column in multicell.items()}
            ),
            partition_key_arity=len(table.partition_key_columns),
            clustering_arity=len(table.clustering_columns),
            packed_rows=packed_rows,
            trusted_row_key=_trusted_row_key(table, encode),
            token_of_key=partial(token_of_key_bytes, table.name),
            dropped_at_us=MappingProxyType(
                {name: at for name, at in table.dropped_columns if table.has_column(name)}
            ),
            dropped_names=frozenset(
                name for name, _ in table.dropped_columns if not table.has_column(name)
            ),
        )

    @property
    def qualified_name(self) -> str:
        return f"{self.table.keyspace}.{self.table.name}"
