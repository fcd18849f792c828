"""Rows of the system tables, as mutations: ``system.local``/``peers``/``cdc_local`` and the
``system_schema`` rows that describe a schema to drivers, cqlsh and CDC clients.

Pure: every timestamp is an argument; values are serialized with the codec. Definitions live in
``_system_tables``. Sources: Scylla ``db/schema_tables.cc`` (``add_table_params_to_mutations``,
``make_table_mutations``, ``add_dropped_column_to_schema_mutation``), Cassandra 3.0
``SchemaKeyspace`` (column ``kind``/``position``/``clustering_order`` conventions), the Scylla
driver's ``SchemaParserV3`` and control connection (what is read), scylla-cdc.md §5 "Options"
(``cdc`` extension bytes) and §6 (``system.cdc_local``). Rules:

- ``release_version`` is Scylla's ``3.0.8``: the driver then picks ``SchemaParserV3``
  (``get_schema_parser``: ``>= 3.0.0`` and ``< 4-a``), which reads exactly the Scylla layout
  defined here and never asks for ``system_virtual_schema``; ``4.x`` would select
  ``SchemaParserV4``, whose options (``additional_write_policy``, ``read_repair``) Scylla has not.
- A row is written like a CQL ``INSERT``: a row marker plus one cell per non-null value, all at
  the given timestamp. A non-frozen collection replaces its old elements (a collection tombstone
  at ``timestamp - 1``). A ``None`` value leaves the column as it is.
- ``system_schema`` partitions (one per keyspace and schema table) are rewritten whole: a
  partition deletion at ``timestamp - 1`` and the current rows at ``timestamp``, so a dropped
  table, column or type disappears and replaying older schema rows changes nothing. Timestamps
  must therefore increase from one schema version to the next.
- Local deletion times are the timestamp's second.
- Table option values are Scylla's defaults for what ringflow does not model (bloom filter,
  compression, ...); ``flags`` is ``{'compound'}``, without which the driver treats a table as
  COMPACT STORAGE and drops its clustering key. CDC log tables get caching disabled, as Scylla
  gives them; their TimeWindowCompactionStrategy map comes from the caller (``compaction``),
  which owns the TTL rule (``ringflow.cdc.cdc_log_compaction_options``).
- The ``cdc`` extension is written when a table's cdc options differ from the defaults, as the
  bytes of Scylla's ``cdc_extension``: little-endian int32 count, then per entry (sorted by key)
  LE-int32-length-prefixed key and value.
- Dropped columns record UDTs expanded to tuples, as Cassandra and Scylla do, and the drop time
  in milliseconds.
"""

from __future__ import annotations

import ipaddress
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from ringflow.schema._codec import cells_from_collection_value, encode_clustering, serialize
from ringflow.schema._errors import SchemaError
from ringflow.schema._migrations import (
    AddColumn,
    AlterKeyspace,
    AlterTableOptions,
    AlterType,
    CreateKeyspace,
    CreateTable,
    CreateType,
    DropColumn,
    DropKeyspace,
    DropTable,
    DropType,
    Migration,
    RenameColumn,
    SchemaState,
)
from ringflow.schema._migrations import SchemaChange as MigrationChange
from ringflow.schema._mutation import Cell, ComplexColumn, DeletionTime, LivenessInfo, Mutation, Row
from ringflow.schema._system_tables import (
    SYSTEM_KEYSPACE_NAME,
    SYSTEM_KEYSPACES,
    SYSTEM_SCHEMA_KEYSPACE_NAME,
    SYSTEM_SCHEMA_TABLE_NAMES,
    SYSTEM_TABLES,
    system_table,
)
from ringflow.schema._table import (
    CDC_LOG_SUFFIX,
    CdcOptions,
    ClusteringOrder,
    Column,
    ColumnKind,
    Keyspace,
    PropertyValue,
    Table,
    TableOptions,
)
from ringflow.schema._types import (
    CqlType,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    expand_user_types,
)

RELEASE_VERSION = "3.0.8"
"""What ringflow reports as its Cassandra release: Scylla's value (see the module docstring)."""

CQL_VERSION = "3.4.5"
"""Must equal what the CQL layer advertises in SUPPORTED (``ringflow.cql.CQL_VERSION``)."""

NATIVE_PROTOCOL_VERSION = "4"
MURMUR3_PARTITIONER = "org.apache.cassandra.dht.Murmur3Partitioner"
BOOTSTRAP_COMPLETED = "COMPLETED"
LOCAL_KEY = "local"
CDC_LOCAL_GENERATION_KEY = "cdc_local"
CDC_LOCAL_REWRITTEN_KEY = "rewritten"
REPLICATION_CLASS_PREFIX = "org.apache.cassandra.locator."

DEFAULT_COMPACTION: Mapping[str, str] = {"class": "SizeTieredCompactionStrategy"}
DEFAULT_CACHING: Mapping[str, str] = {"keys": "ALL", "rows_per_partition": "ALL"}
DISABLED_CACHING: Mapping[str, str] = {
    "enabled": "false",
    "keys": "NONE",
    "rows_per_partition": "NONE",
}
DEFAULT_COMPRESSION: Mapping[str, str] = {
    "sstable_compression": "org.apache.cassandra.io.compress.LZ4Compressor"
}
_FIXED_TABLE_OPTIONS: Mapping[str, object] = {
    "bloom_filter_fp_chance": 0.01,
    "compression": DEFAULT_COMPRESSION,
    "crc_check_chance": 1.0,
    "dclocal_read_repair_chance": 0.0,
    "max_index_interval": 2048,
    "memtable_flush_period_in_ms": 0,
    "min_index_interval": 128,
    "read_repair_chance": 0.0,
    "speculative_retry": "99.0PERCENTILE",
}
_ENGINE_DEFAULTS: Mapping[str, PropertyValue] = {
    "bloom_filter_fp_chance": 0.01,
    "caching": tuple(sorted(DEFAULT_CACHING.items())),
    "compaction": tuple(sorted(DEFAULT_COMPACTION.items())),
    "compression": tuple(sorted(DEFAULT_COMPRESSION.items())),
    "crc_check_chance": 1.0,
    "max_index_interval": 2048,
    "memtable_flush_period_in_ms": 0,
    "min_index_interval": 128,
    "speculative_retry": "99.0PERCENTILE",
}
"""What a user table shows for each storage-engine property nobody set."""
_COMPOUND_FLAGS = frozenset({"compound"})
_INT32_LE = struct.Struct("<i")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address | str
CompactionFor = Callable[[Table], Mapping[str, str]]
"""The ``compaction`` map of a table's ``system_schema.tables`` row."""


def default_compaction(table: Table) -> Mapping[str, str]:
    return DEFAULT_COMPACTION


# --- generic ---------------------------------------------------------------------------------


def table_mutation(
    table: Table,
    rows: Sequence[Mapping[str, object]],
    timestamp_us: int,
    *,
    partition: Mapping[str, object] | None = None,
    replace_partition: bool = False,
    ttl_s: int = 0,
) -> Mutation:
    """One partition of ``table`` holding ``rows`` (column name → Python value), written at
    ``timestamp_us`` as an INSERT would. The partition key values come from ``partition`` or
    else from the rows, which must all agree on them; ``replace_partition`` also deletes what
    the partition held before (at ``timestamp_us - 1``); ``ttl_s`` > 0 makes the row marker and
    cells expire ``ttl_s`` seconds after the timestamp's second (``USING TTL``; pass the
    table's ``default_time_to_live_s`` to write as a plain INSERT would). SchemaError on
    unknown columns, missing key values, disagreeing partition keys or duplicate clustering
    keys."""
    if type(ttl_s) is not int or ttl_s < 0:
        raise SchemaError(f"ttl_s must be an int >= 0, got {ttl_s!r}")
    where = f"{table.keyspace}.{table.name}"
    source = partition if partition is not None else (rows[0] if rows else None)
    if source is None:
        raise SchemaError(f"{where}: a mutation needs partition key values or rows")
    key_columns = table.partition_key_columns
    partition_key = tuple(_key_value(where, column, source) for column in key_columns)
    for values in rows:
        if tuple(_key_value(where, column, values) for column in key_columns) != partition_key:
            raise SchemaError(f"{where}: rows of one mutation must share the partition key")
    built = [_row(where, table, values, timestamp_us, ttl_s) for values in rows]
    order = [(column.type, column.order) for column in table.clustering_columns]
    keyed = sorted(((encode_clustering(order, row.clustering), row) for row in built), key=_first)
    if len({key for key, _ in keyed}) != len(keyed):
        raise SchemaError(f"{where}: two rows with the same clustering key")
    deletion = _deletion(timestamp_us - 1, timestamp_us) if replace_partition else None
    return Mutation(
        table.keyspace,
        table.name,
        partition_key,
        partition_deletion=deletion,
        rows=tuple(row for _, row in keyed),
    )


def _first(pair: tuple[bytes, Row]) -> bytes:
    return pair[0]


def _deletion(marked_at_us: int, timestamp_us: int) -> DeletionTime:
    return DeletionTime(marked_at_us, timestamp_us // 1_000_000)


def _key_value(where: str, column: Column, values: Mapping[str, object]) -> bytes:
    value = values.get(column.name)
    if value is None:
        raise SchemaError(f"{where}: missing value for key column {column.name!r}")
    return serialize(column.type, value, column.name)


def _row(
    where: str, table: Table, values: Mapping[str, object], timestamp_us: int, ttl_s: int = 0
) -> Row:
    cells: dict[str, Cell | ComplexColumn] = {}
    for name, value in values.items():
        column = table.column(name)
        if column.is_primary_key or value is None:
            continue
        if column.kind is ColumnKind.STATIC:
            raise SchemaError(f"{where}: static column {name!r} is not supported here")
        cells[name] = _cell(column, value, timestamp_us, ttl_s)
    clustering = tuple(_key_value(where, column, values) for column in table.clustering_columns)
    now_s = timestamp_us // 1_000_000
    liveness = (
        LivenessInfo(timestamp_us, ttl_s, now_s + ttl_s) if ttl_s else LivenessInfo(timestamp_us)
    )
    return Row(clustering, liveness, None, cells)


def _cell(column: Column, value: object, timestamp_us: int, ttl_s: int = 0) -> Cell | ComplexColumn:
    serialized = serialize(column.type, value, column.name)
    if not column.type.is_multicell:
        if ttl_s:
            return Cell.expiring(timestamp_us, ttl_s, timestamp_us // 1_000_000, serialized)
        return Cell.live(timestamp_us, serialized)
    if ttl_s:
        raise SchemaError(f"a TTL on collection column {column.name!r} is not supported here")
    if isinstance(column.type, ListType):
        raise SchemaError(f"non-frozen list column {column.name!r} is not supported here")
    elements = cells_from_collection_value(column.type, serialized, column.name)
    return ComplexColumn(
        tuple(Cell.live(timestamp_us, element, path) for path, element in elements),
        _deletion(timestamp_us - 1, timestamp_us),
    )


# --- system.local, system.peers, system.cdc_local -----------------------------------------


@dataclass(frozen=True, slots=True)
class NodeRow:
    """What ``system.local`` and ``system.peers`` say about one node.

    ``broadcast_address`` is the internode address (``peer`` in ``system.peers``),
    ``rpc_address`` the CQL address clients connect to; ``tokens`` are Murmur3 tokens.
    """

    host_id: uuid.UUID
    broadcast_address: Address
    rpc_address: Address
    data_center: str
    rack: str
    tokens: tuple[int, ...]
    schema_version: uuid.UUID
    release_version: str = RELEASE_VERSION

    def _common_columns(self) -> dict[str, object]:
        return {
            "data_center": self.data_center,
            "host_id": self.host_id,
            "rack": self.rack,
            "release_version": self.release_version,
            "rpc_address": self.rpc_address,
            "schema_version": self.schema_version,
            "tokens": frozenset(str(token) for token in self.tokens),
        }


def local_row(
    node: NodeRow,
    *,
    cluster_name: str,
    timestamp_us: int,
    listen_address: Address | None = None,
    gossip_generation: int | None = None,
    cql_version: str = CQL_VERSION,
    partitioner: str = MURMUR3_PARTITIONER,
) -> Mutation:
    """The ``system.local`` row (key ``'local'``) the control connection and cqlsh read.

    ``listen_address`` defaults to the broadcast address; a ``None`` gossip generation leaves
    the stored one untouched.
    """
    values = {
        "key": LOCAL_KEY,
        "bootstrapped": BOOTSTRAP_COMPLETED,
        "broadcast_address": node.broadcast_address,
        "cluster_name": cluster_name,
        "cql_version": cql_version,
        "gossip_generation": gossip_generation,
        "listen_address": node.broadcast_address if listen_address is None else listen_address,
        "native_protocol_version": NATIVE_PROTOCOL_VERSION,
        "partitioner": partitioner,
        **node._common_columns(),
    }
    return table_mutation(_system("local"), [values], timestamp_us)


def peer_row(node: NodeRow, *, timestamp_us: int, preferred_ip: Address | None = None) -> Mutation:
    """The ``system.peers`` row of another node (partition ``peer = broadcast_address``)."""
    values = {"peer": node.broadcast_address, "preferred_ip": preferred_ip}
    return table_mutation(_system("peers"), [{**values, **node._common_columns()}], timestamp_us)


def peer_removal(peer: Address, *, timestamp_us: int) -> Mutation:
    """Delete a node's ``system.peers`` row (it left the ring)."""
    return Mutation(
        SYSTEM_KEYSPACE_NAME,
        "peers",
        (serialize(_system("peers").column("peer").type, peer, "peer"),),
        partition_deletion=_deletion(timestamp_us, timestamp_us),
    )


def cdc_local_row(
    streams_timestamp_ms: int,
    generation_uuid: uuid.UUID | None,
    *,
    timestamp_us: int,
    key: str = CDC_LOCAL_GENERATION_KEY,
) -> Mutation:
    """The ``system.cdc_local`` row persisting the generation this node gossips (scylla-cdc.md
    §6): its timestamp in ms and, for a v2 generation, its UUID."""
    values = {"key": key, "streams_timestamp": streams_timestamp_ms, "uuid": generation_uuid}
    return table_mutation(_system("cdc_local"), [values], timestamp_us)


def cdc_rewritten_row(*, timestamp_us: int) -> Mutation:
    """The ``system.cdc_local`` row keyed ``'rewritten'``: the v1 -> v2 streams rewrite is done.
    A row marker only; consumers test for the row's existence."""
    return table_mutation(_system("cdc_local"), [{"key": CDC_LOCAL_REWRITTEN_KEY}], timestamp_us)


def _system(name: str) -> Table:
    return system_table(SYSTEM_KEYSPACE_NAME, name)


# --- system_schema ---------------------------------------------------------------------------


def system_schema_mutations(
    state: SchemaState,
    timestamp_us: int,
    *,
    include_system_keyspaces: bool = True,
    compaction: CompactionFor = default_compaction,
) -> list[Mutation]:
    """Every ``system_schema`` partition describing ``state`` (and, by default, the system
    keyspaces themselves, as Scylla lists them): for each keyspace and each schema table, one
    mutation replacing the partition. CDC log tables are ordinary tables here."""
    keyspaces = dict(state.keyspaces)
    tables = dict(state.tables)
    if include_system_keyspaces:
        keyspaces.update(SYSTEM_KEYSPACES)
        tables.update(SYSTEM_TABLES)
    mutations: list[Mutation] = []
    for name in sorted(keyspaces):
        in_keyspace = [tables[key] for key in sorted(tables) if key[0] == name]
        rows = _keyspace_schema_rows(state, keyspaces[name], in_keyspace, compaction)
        for table_name in SYSTEM_SCHEMA_TABLE_NAMES:
            mutations.append(
                table_mutation(
                    system_table(SYSTEM_SCHEMA_KEYSPACE_NAME, table_name),
                    rows.get(table_name, ()),
                    timestamp_us,
                    partition={"keyspace_name": name},
                    replace_partition=True,
                )
            )
    return mutations


def dropped_keyspace_mutations(keyspace: str, timestamp_us: int) -> list[Mutation]:
    """Delete a dropped keyspace's partition from every ``system_schema`` table."""
    key_type = system_table(SYSTEM_SCHEMA_KEYSPACE_NAME, "keyspaces").column("keyspace_name").type
    partition_key = (serialize(key_type, keyspace, "keyspace_name"),)
    deletion = _deletion(timestamp_us, timestamp_us)
    return [
        Mutation(SYSTEM_SCHEMA_KEYSPACE_NAME, name, partition_key, partition_deletion=deletion)
        for name in SYSTEM_SCHEMA_TABLE_NAMES
    ]


def _keyspace_schema_rows(
    state: SchemaState,
    keyspace: Keyspace,
    tables: Sequence[Table],
    compaction: CompactionFor,
) -> dict[str, list[dict[str, object]]]:
    name = keyspace.name
    return {
        "keyspaces": [
            {
                "keyspace_name": name,
                "durable_writes": keyspace.durable_writes,
                "replication": replication_map(keyspace.replication),
            }
        ],
        "types": [_type_row(name, user_type) for user_type in keyspace.user_types.values()],
        "tables": [_table_row(table, compaction) for table in tables],
        "columns": [_column_row(table, column) for table in tables for column in table.columns],
        "dropped_columns": [
            _dropped_column_row(table, dropped.name, dropped.type, dropped.dropped_at_us)
            for table in tables
            for dropped in state.dropped_columns_of(name, table.name)
        ],
    }


def replication_map(replication: Mapping[str, str]) -> dict[str, str]:
    """The stored replication map: the strategy class spelled in full, as Cassandra stores it."""
    stored = {str(key): str(value) for key, value in replication.items()}
    if "." not in stored["class"]:
        stored["class"] = REPLICATION_CLASS_PREFIX + stored["class"]
    return stored


def _type_row(keyspace: str, user_type: UserType) -> dict[str, object]:
    return {
        "keyspace_name": keyspace,
        "type_name": user_type.name,
        "field_names": list(user_type.field_names),
        "field_types": [field_type.cql_name() for field_type in user_type.field_types],
    }


def _table_row(table: Table, compaction: CompactionFor) -> dict[str, object]:
    is_log = table.name.endswith(CDC_LOG_SUFFIX)
    extensions: dict[str, bytes] = {}
    if table.options.cdc != CdcOptions():
        extensions["cdc"] = cdc_extension_bytes(table.options.cdc)
    return {
        **_FIXED_TABLE_OPTIONS,
        "keyspace_name": table.keyspace,
        "table_name": table.name,
        "caching": DISABLED_CACHING if is_log else DEFAULT_CACHING,
        "comment": table.options.comment,
        "compaction": dict(compaction(table)),
        "default_time_to_live": table.options.default_time_to_live_s,
        "extensions": extensions,
        "flags": _COMPOUND_FLAGS,
        "gc_grace_seconds": table.options.gc_grace_seconds,
        "id": table.id,
        **{
            name: dict(value) if isinstance(value, tuple) else value
            for name, value in table.options.engine
        },
    }


_ROW_IDENTITY = frozenset({"keyspace_name", "table_name", "extensions", "flags", "id"})


def table_properties(
    table: Table, compaction: CompactionFor = default_compaction
) -> dict[str, object]:
    """The table properties its ``system_schema.tables`` row shows (name → value: a float, an
    int, a text or a text map), the ``cdc`` extension aside: what ``DESCRIBE`` writes in the
    table's ``WITH`` clause."""
    row = _table_row(table, compaction)
    return {name: value for name, value in row.items() if name not in _ROW_IDENTITY}


def _column_row(table: Table, column: Column) -> dict[str, object]:
    keyed = column.is_primary_key
    return {
        "keyspace_name": table.keyspace,
        "table_name": table.name,
        "column_name": column.name,
        "clustering_order": (
            column.order.value if column.kind is ColumnKind.CLUSTERING else "none"
        ),
        "column_name_bytes": column.name.encode("utf-8"),
        "kind": column.kind.value,
        "position": column.position if keyed else -1,
        "type": column.type.cql_name(),
    }


def _dropped_column_row(
    table: Table, name: str, cql_type: CqlType, dropped_at_us: int
) -> dict[str, object]:
    return {
        "keyspace_name": table.keyspace,
        "table_name": table.name,
        "column_name": name,
        "dropped_time": dropped_at_us // 1000,
        "type": expand_user_types(cql_type).cql_name(),
    }


# --- the cdc extension -----------------------------------------------------------------------


def cdc_extension_bytes(options: CdcOptions) -> bytes:
    """Scylla's serialized ``cdc`` schema extension: LE int32 count, then LE-int32-length-
    prefixed UTF-8 key and value per entry, in key order (``std::map``)."""
    entries = sorted(options.to_map().items())
    parts = [_INT32_LE.pack(len(entries))]
    for key, value in entries:
        for text in (key, value):
            encoded = text.encode("utf-8")
            parts += [_INT32_LE.pack(len(encoded)), encoded]
    return b"".join(parts)


def parse_cdc_extension(data: bytes) -> dict[str, str]:
    """The option map in a ``cdc`` extension blob (the reading side, as scylla-cdc-go's
    ``parseStringMap``). SchemaError on malformed bytes."""
    position = 0

    def take(size: int) -> bytes:
        nonlocal position
        if size < 0 or position + size > len(data):
            raise SchemaError(f"malformed cdc extension: {data!r}")
        chunk = data[position : position + size]
        position += size
        return chunk

    def take_int() -> int:
        value: int = _INT32_LE.unpack(take(4))[0]
        return value

    entries = {}
    for _ in range(take_int()):
        key = take(take_int()).decode("utf-8")
        entries[key] = take(take_int()).decode("utf-8")
    if position != len(data):
        raise SchemaError(f"malformed cdc extension: trailing bytes in {data!r}")
    return entries


# --- system.schema_migrations ----------------------------------------------------------------

SCHEMA_MIGRATIONS_TABLE = "schema_migrations"
SCHEMA_MIGRATIONS_KEY = "migrations"
"""The one partition of ``system.schema_migrations``: every migration, clustered by version."""

MIGRATION_CHANGE_ENCODING_VERSION = 1
"""The first byte of a stored change: ``0x01`` then a msgpack ``[kind, fields...]`` array."""


class MigrationDecodeError(SchemaError):
    """A stored migration change that cannot be read back."""


def schema_migration_rows(migrations: Sequence[Migration], timestamp_us: int) -> list[Mutation]:
    """The ``system.schema_migrations`` rows of ``migrations`` (none if there are none)."""
    if not migrations:
        return []
    rows = [
        {
            "key": SCHEMA_MIGRATIONS_KEY,
            "version": migration.version,
            "previous_version": migration.previous_version,
            "change": encode_change(migration.change),
        }
        for migration in migrations
    ]
    return [table_mutation(_system(SCHEMA_MIGRATIONS_TABLE), rows, timestamp_us)]


def encode_change(change: MigrationChange) -> bytes:
    """The versioned binary form of a schema change (inverse: :func:`decode_change`)."""
    body: list[object]
    if isinstance(change, CreateKeyspace):
        body = ["create_keyspace", _keyspace_body(change.keyspace)]
    elif isinstance(change, AlterKeyspace):
        body = ["alter_keyspace", change.name, dict(change.replication), change.durable_writes]
    elif isinstance(change, DropKeyspace):
        body = ["drop_keyspace", change.name]
    elif isinstance(change, CreateType):
        body = ["create_type", _type_body(change.user_type)]
    elif isinstance(change, AlterType):
        body = ["alter_type", _type_body(change.user_type)]
    elif isinstance(change, DropType):
        body = ["drop_type", change.keyspace, change.name]
    elif isinstance(change, CreateTable):
        body = ["create_table", _table_body(change.table)]
    elif isinstance(change, DropTable):
        body = ["drop_table", change.keyspace, change.name]
    elif isinstance(change, AddColumn):
        body = ["add_column", change.keyspace, change.table, _column_body(change.column)]
    elif isinstance(change, DropColumn):
        body = ["drop_column", change.keyspace, change.table, change.name]
        if change.dropped_at_us is not None:
            body.append(change.dropped_at_us)
    elif isinstance(change, RenameColumn):
        body = ["rename_column", change.keyspace, change.table, change.old, change.new]
    elif isinstance(change, AlterTableOptions):
        body = ["alter_table_options", change.keyspace, change.table, _options_body(change.options)]
    else:
        raise SchemaError(f"no stored form for schema change {change!r}")
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return bytes([MIGRATION_CHANGE_ENCODING_VERSION]) + packed


def decode_change(data: bytes) -> MigrationChange:
    """The schema change :func:`encode_change` wrote; MigrationDecodeError if unreadable."""
    if not data or data[0] != MIGRATION_CHANGE_ENCODING_VERSION:
        version = data[0] if data else None
        raise MigrationDecodeError(f"stored schema change: unknown encoding version {version!r}")
    try:
        kind, *fields = msgpack.unpackb(data[1:], raw=False, use_list=True)
        return _decode_change(str(kind), fields)
    except MigrationDecodeError:
        raise
    except (ValueError, TypeError, KeyError, SchemaError, msgpack.UnpackException) as error:
        raise MigrationDecodeError(f"stored schema change is unreadable: {error}") from None


def _decode_change(kind: str, fields: list[Any]) -> MigrationChange:
    if kind == "create_keyspace":
        return CreateKeyspace(_keyspace_from(fields[0]))
    if kind == "alter_keyspace":
        return AlterKeyspace(str(fields[0]), dict(fields[1]), bool(fields[2]))
    if kind == "drop_keyspace":
        return DropKeyspace(str(fields[0]))
    if kind == "create_type":
        user_type = _type_from(fields[0])
        if not isinstance(user_type, UserType):
            raise MigrationDecodeError("stored CREATE TYPE holds no user type")
        return CreateType(user_type)
    if kind == "alter_type":
        altered = _type_from(fields[0])
        if not isinstance(altered, UserType):
            raise MigrationDecodeError("stored ALTER TYPE holds no user type")
        return AlterType(altered)
    if kind == "drop_type":
        return DropType(str(fields[0]), str(fields[1]))
    if kind == "create_table":
        return CreateTable(_table_from(fields[0]))
    if kind == "drop_table":
        return DropTable(str(fields[0]), str(fields[1]))
    if kind == "add_column":
        return AddColumn(str(fields[0]), str(fields[1]), _column_from(fields[2]))
    if kind == "drop_column":
        at_us = int(fields[3]) if len(fields) > 3 else None
        return DropColumn(str(fields[0]), str(fields[1]), str(fields[2]), at_us)
    if kind == "rename_column":
        return RenameColumn(str(fields[0]), str(fields[1]), str(fields[2]), str(fields[3]))
    if kind == "alter_table_options":
        return AlterTableOptions(str(fields[0]), str(fields[1]), _options_from(fields[2]))
    raise MigrationDecodeError(f"stored schema change of unknown kind {kind!r}")


def _type_body(cql_type: CqlType) -> object:
    if isinstance(cql_type, NativeType):
        return cql_type.name
    if isinstance(cql_type, ListType | SetType):
        kind = "list" if isinstance(cql_type, ListType) else "set"
        return [kind, cql_type.frozen, _type_body(cql_type.element)]
    if isinstance(cql_type, MapType):
        return ["map", cql_type.frozen, _type_body(cql_type.key), _type_body(cql_type.value)]
    if isinstance(cql_type, TupleType):
        return ["tuple", [_type_body(element) for element in cql_type.elements]]
    if isinstance(cql_type, UserType):
        types = [_type_body(t) for t in cql_type.field_types]
        return [
            "udt",
            cql_type.frozen,
            cql_type.keyspace,
            cql_type.name,
            list(cql_type.field_names),
            types,
        ]
    raise SchemaError(f"no stored form for type {cql_type!r}")


def _type_from(data: Any) -> CqlType:
    if isinstance(data, str):
        return NativeType(data)
    kind = data[0]
    if kind == "list":
        return ListType(_type_from(data[2]), bool(data[1]))
    if kind == "set":
        return SetType(_type_from(data[2]), bool(data[1]))
    if kind == "map":
        return MapType(_type_from(data[2]), _type_from(data[3]), bool(data[1]))
    if kind == "tuple":
        return TupleType(tuple(_type_from(element) for element in data[1]))
    if kind == "udt":
        types = tuple(_type_from(t) for t in data[5])
        return UserType(str(data[2]), str(data[3]), tuple(data[4]), types, bool(data[1]))
    raise MigrationDecodeError(f"stored type of unknown kind {kind!r}")


def _keyspace_body(keyspace: Keyspace) -> object:
    types = [_type_body(keyspace.user_types[name]) for name in sorted(keyspace.user_types)]
    return [keyspace.name, dict(keyspace.replication), keyspace.durable_writes, types]


def _keyspace_from(data: Any) -> Keyspace:
    user_types = {}
    for body in data[3]:
        user_type = _type_from(body)
        if not isinstance(user_type, UserType):
            raise MigrationDecodeError("stored keyspace holds a user type that is not one")
        user_types[user_type.name] = user_type
    return Keyspace(str(data[0]), dict(data[1]), bool(data[2]), user_types)


def _column_body(column: Column) -> object:
    return [
        column.name,
        _type_body(column.type),
        column.kind.value,
        column.position,
        column.order.value,
    ]


def _column_from(data: Any) -> Column:
    name, type_body, kind, position, order = data
    return Column(
        str(name), _type_from(type_body), ColumnKind(kind), int(position), ClusteringOrder(order)
    )


def _options_body(options: TableOptions) -> object:
    return [
        dict(options.cdc.to_map()),
        options.default_time_to_live_s,
        options.gc_grace_seconds,
        options.comment,
        [
            [name, list(value) if isinstance(value, tuple) else value]
            for name, value in options.engine
        ],
    ]


def engine_value(value: Any) -> PropertyValue:
    """A storage-engine property's value as a body or record holds it (a map as pairs)."""
    if isinstance(value, list | tuple):
        return tuple(sorted((str(key), str(item)) for key, item in value))
    if isinstance(value, dict):
        return tuple(sorted((str(key), str(item)) for key, item in value.items()))
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SchemaError(f"bad table property value {value!r}")
    return value


def engine_overrides(
    table_name: str, values: Mapping[str, object]
) -> tuple[tuple[str, PropertyValue], ...]:
    """The storage-engine properties among ``values`` (a statement's, or a
    ``system_schema.tables`` row's) that differ from what a table shows by default, by name: a
    property set to its default is not recorded, so a table reads back equal to the one its
    DDL built. A CDC log table's caching and compaction follow its base and are not read."""
    found = []
    for name, default in _ENGINE_DEFAULTS.items():
        raw = values.get(name)
        if raw is None:
            continue
        value = engine_value(raw)
        if table_name.endswith(CDC_LOG_SUFFIX) and _log_shows_by_default(name, value):
            continue
        if value != default:
            found.append((name, value))
    return tuple(found)


def _log_shows_by_default(name: str, value: PropertyValue) -> bool:
    """A CDC log table shows disabled caching and a TimeWindowCompactionStrategy derived from
    its base's cdc ``ttl`` (``ringflow.cdc``) unless a user altered them: any TWCS map counts
    as the derived one (the window follows the base), another strategy is the user's."""
    if name == "caching":
        return value == tuple(sorted(DISABLED_CACHING.items()))
    if name == "compaction" and isinstance(value, tuple):
        strategy = dict(value).get("class", "")
        return strategy.rsplit(".", 1)[-1] == "TimeWindowCompactionStrategy"
    return False


def _options_from(data: Any) -> TableOptions:
    engine = tuple((str(name), engine_value(value)) for name, value in (data[4:5] or [[]])[0])
    return TableOptions(
        CdcOptions.from_map(data[0]), int(data[1]), int(data[2]), str(data[3]), engine
    )


def _table_body(table: Table) -> object:
    return [
        table.keyspace,
        table.name,
        table.id.bytes,
        [_column_body(column) for column in table.columns],
        _options_body(table.options),
    ]


def _table_from(data: Any) -> Table:
    keyspace, name, table_id, columns, options = data
    return Table(
        str(keyspace),
        str(name),
        tuple(_column_from(column) for column in columns),
        _options_from(options),
        uuid.UUID(bytes=bytes(table_id)),
    )
