"""The system keyspaces' table definitions: the exact schemas drivers, cqlsh and CDC clients read.

Owns the shape of ``system`` (``local``, ``peers``, ``cdc_local``, and ringflow's own
``schema_migrations``: the migration chain, one partition ordered by version) and ``system_schema``
(``keyspaces``, ``scylla_keyspaces``, ``tables``, ``columns``, ``dropped_columns``, ``types``,
``functions``, ``aggregates``, ``views``, ``indexes``, ``triggers``) as Scylla defines them
(``db/system_keyspace.cc`` ``local()``/``peers()``, ``db/schema_tables.cc`` ``v3::*``), which is
Cassandra 3.0's ``SchemaKeyspace`` layout plus Scylla's extras. Rows are built in
``_system_rows``. Rules:

- Column names and types are the servers' own, so ``SELECT *`` answers what clients expect:
  the Scylla driver's control connection (``cluster.py`` ``_SELECT_LOCAL``, ``_SELECT_PEERS``),
  its ``SchemaParserV3`` (``metadata.py``: ``SELECT *`` of every ``system_schema`` table, see
  cassandra-core.md §12 item 4), cqlsh (``select * from system.local``: ``release_version``,
  ``cql_version``), scylla-cdc-go (``system.cdc_local`` key ``'rewritten'``, scylla-cdc.md §6;
  ``system_schema.tables.extensions['cdc']``, §5 "Options"; ``system_schema.scylla_keyspaces``,
  whose absence it treats as an error while a missing row means "no tablets").
- Collection columns of ``system_schema`` are frozen, the ``tokens`` and ``truncated_at``
  columns of ``system.local``/``system.peers`` are not (Scylla's ``is_multi_cell`` flags).
- Regular columns are sorted by name, as Scylla keeps them (and ``SELECT *`` lists them).
- Table ids are Cassandra's and Scylla's for system tables (``generate_legacy_id``,
  ``TableId.forSystemTable``): ``UUID.nameUUIDFromBytes(keyspace + table)``, so
  ``system.local`` is ``7ad54392-bcdd-35a6-8417-4e047860b377`` everywhere.
- Both keyspaces use ``LocalStrategy``: every node holds its own copy, outside the schema digest
  (cassandra-core.md §9, ``LOCAL_SYSTEM_KEYSPACES``).
- Not defined, on purpose: ``system.peers_v2`` (Scylla has none; the driver falls back to
  ``system.peers`` when it gets an error, and never asks when the node advertises Scylla
  sharding), ``system_virtual_schema`` (only ``SchemaParserV4`` asks, and tolerates an error),
  ``system_schema.scylla_tables``/``computed_columns``/``view_virtual_columns`` (no client reads
  them).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ringflow.schema._digest import name_uuid_from_bytes
from ringflow.schema._errors import SchemaError
from ringflow.schema._table import ClusteringOrder, Keyspace, Table, TableOptions
from ringflow.schema._types import parse_type

SYSTEM_KEYSPACE_NAME = "system"
SYSTEM_SCHEMA_KEYSPACE_NAME = "system_schema"
LOCAL_STRATEGY_CLASS = "org.apache.cassandra.locator.LocalStrategy"

SCHEMA_GC_GRACE_SECONDS = 7 * 86400
"""gc_grace_seconds of the ``system_schema`` tables (Scylla's ``schema_gc_grace``)."""

_ColumnSpec = tuple[str, str]
"""A column as (name, CQL type spelling)."""


@dataclass(frozen=True, slots=True)
class _TableSpec:
    keyspace: str
    name: str
    partition_key: tuple[_ColumnSpec, ...]
    clustering: tuple[_ColumnSpec, ...]
    regular: tuple[_ColumnSpec, ...]
    comment: str
    gc_grace_seconds: int


_TEXT_MAP = "frozen<map<text, text>>"
_TEXT_LIST = "frozen<list<text>>"

_TABLE_OPTION_COLUMNS: tuple[_ColumnSpec, ...] = (
    ("bloom_filter_fp_chance", "double"),
    ("caching", _TEXT_MAP),
    ("comment", "text"),
    ("compaction", _TEXT_MAP),
    ("compression", _TEXT_MAP),
    ("crc_check_chance", "double"),
    ("dclocal_read_repair_chance", "double"),
    ("default_time_to_live", "int"),
    ("extensions", "frozen<map<text, blob>>"),
    ("gc_grace_seconds", "int"),
    ("id", "uuid"),
    ("max_index_interval", "int"),
    ("memtable_flush_period_in_ms", "int"),
    ("min_index_interval", "int"),
    ("read_repair_chance", "double"),
    ("speculative_retry", "text"),
)
"""The option columns ``system_schema.tables`` and ``system_schema.views`` share."""

_KEYSPACE_NAME: tuple[_ColumnSpec, ...] = (("keyspace_name", "text"),)
_S, _SCHEMA = SYSTEM_KEYSPACE_NAME, SYSTEM_SCHEMA_KEYSPACE_NAME
_LOCAL_GC = 0

_SPECS: tuple[_TableSpec, ...] = (
    _TableSpec(
        _S,
        "local",
        (("key", "text"),),
        (),
        (
            ("bootstrapped", "text"),
            ("broadcast_address", "inet"),
            ("cluster_name", "text"),
            ("cql_version", "text"),
            ("data_center", "text"),
            ("gossip_generation", "int"),
            ("host_id", "uuid"),
            ("listen_address", "inet"),
            ("native_protocol_version", "text"),
            ("partitioner", "text"),
            ("rack", "text"),
            ("release_version", "text"),
            ("rpc_address", "inet"),
            ("schema_version", "uuid"),
            ("supported_features", "text"),
            ("tokens", "set<text>"),
            ("truncated_at", "map<uuid, blob>"),
        ),
        "information about the local node",
        _LOCAL_GC,
    ),
    _TableSpec(
        _S,
        "peers",
        (("peer", "inet"),),
        (),
        (
            ("data_center", "text"),
            ("host_id", "uuid"),
            ("preferred_ip", "inet"),
            ("rack", "text"),
            ("release_version", "text"),
            ("rpc_address", "inet"),
            ("schema_version", "uuid"),
            ("supported_features", "text"),
            ("tokens", "set<text>"),
        ),
        "information about known peers in the cluster",
        _LOCAL_GC,
    ),
    _TableSpec(
        _S,
        "cdc_local",
        (("key", "text"),),
        (),
        (("streams_timestamp", "timestamp"), ("uuid", "uuid")),
        "CDC-specific information that the local node stores",
        _LOCAL_GC,
    ),
    _TableSpec(
        _S,
        "schema_migrations",
        (("key", "text"),),
        (("version", "timeuuid"),),
        (("change", "blob"), ("previous_version", "timeuuid")),
        "the schema migrations this node applied (ringflow)",
        _LOCAL_GC,
    ),
    _TableSpec(
        _SCHEMA,
        "keyspaces",
        _KEYSPACE_NAME,
        (),
        (("durable_writes", "boolean"), ("replication", _TEXT_MAP)),
        "keyspace definitions",
        SCHEMA_GC_GRACE_SECONDS,
    ),
    _TableSpec(
        _SCHEMA,
        "scylla_keyspaces",
        _KEYSPACE_NAME,
        (),
        (
            ("consistency", "text"),
            ("initial_tablets", "int"),
            ("storage_options", _TEXT_MAP),
            ("storage_type", "text"),
        ),
        "scylla-specific information for keyspaces",
        SCHEMA_GC_GRACE_SECONDS,
    ),
    _TableSpec(
        _SCHEMA,
        "tables",
        _KEYSPACE_NAME,
        (("table_name", "text"),),
        (*_TABLE_OPTION_COLUMNS, ("flags", "frozen<set<text>>")),
        "table definitions",
        SCHEMA_GC_GRACE_SECONDS,
    ),
    _TableSpec(
        _SCHEMA,
        "columns",
        _KEYSPACE_NAME,
        (("table_name", "text"), ("column_name", "text")),
        (
            ("clustering_order", "text"),
            ("column_name_bytes", "blob"),
            ("kind", "text"),
            ("position", "int"),
            ("type", "text"),
        ),
        "column definitions",
        SCHEMA_GC_GRACE_SECONDS,
    ),
    _TableSpec(
        _SCHEMA,
        "dropped_columns",
        _KEYSPACE_NAME,
        (("table_name", "text"), ("column_name", "text")),
        (("dropped_time", "timestamp"), ("type", "text")),
        "dropped column registry",
        SCHEMA_GC_GRACE_SECONDS,
    ),
    _TableSpec(
        _SCHEMA,
        "triggers",
        _KEYSPACE_NAME,
        (("table_name", "text"), ("trigger_name", "text")),
        (("options", _TEXT_MAP),),
        "trigger definitions",
        SCHEMA_GC_GRACE_SECONDS,
    ),
    _TableSpec(
        _SCHEMA,
        "views",
        _KEYSPACE_NAME,
        (("view_name", "text"),),
        (
            *_TABLE_OPTION_COLUMNS,
            ("base_table_id", "uuid"),
            ("base_table_name", "text"),
            ("include_all_columns", "boolean"),
            ("where_clause", "text"),
        ),
        "view definitions",
        SCHEMA_GC_GRACE_SECONDS,
    ),
    _TableSpec(
        _SCHEMA,
        "indexes",
        _KEYSPACE_NAME,
        (("table_name", "text"), ("index_name", "text")),
        (("kind", "text"), ("options", _TEXT_MAP)),
        "secondary index definitions",
        SCHEMA_GC_GRACE_SECONDS,
    ),
    _TableSpec(
        _SCHEMA,
        "types",
        _KEYSPACE_NAME,
        (("type_name", "text"),),
        (("field_names", _TEXT_LIST), ("field_types", _TEXT_LIST)),
        "user defined type definitions",
        SCHEMA_GC_GRACE_SECONDS,
    ),
    _TableSpec(
        _SCHEMA,
        "functions",
        _KEYSPACE_NAME,
        (("function_name", "text"), ("argument_types", _TEXT_LIST)),
        (
            ("argument_names", _TEXT_LIST),
            ("body", "text"),
            ("called_on_null_input", "boolean"),
            ("language", "text"),
            ("return_type", "text"),
        ),
        "user defined function definitions",
        SCHEMA_GC_GRACE_SECONDS,
    ),
    _TableSpec(
        _SCHEMA,
        "aggregates",
        _KEYSPACE_NAME,
        (("aggregate_name", "text"), ("argument_types", _TEXT_LIST)),
        (
            ("final_func", "text"),
            ("initcond", "text"),
            ("return_type", "text"),
            ("state_func", "text"),
            ("state_type", "text"),
        ),
        "user defined aggregate definitions",
        SCHEMA_GC_GRACE_SECONDS,
    ),
)


def system_table_id(keyspace: str, name: str) -> uuid.UUID:
    """Cassandra's id of a system table: ``UUID.nameUUIDFromBytes(keyspace + name)``."""
    return name_uuid_from_bytes((keyspace + name).encode("utf-8"))


def _build(spec: _TableSpec) -> Table:
    regular = sorted(spec.regular, key=lambda column: column[0].encode("utf-8"))
    return Table.create(
        spec.keyspace,
        spec.name,
        partition_key=[(name, parse_type(cql)) for name, cql in spec.partition_key],
        clustering=[(name, parse_type(cql), ClusteringOrder.ASC) for name, cql in spec.clustering],
        regular=[(name, parse_type(cql)) for name, cql in regular],
        options=TableOptions(comment=spec.comment, gc_grace_seconds=spec.gc_grace_seconds),
        table_id=system_table_id(spec.keyspace, spec.name),
    )


SYSTEM_TABLES: Mapping[tuple[str, str], Table] = MappingProxyType(
    {(spec.keyspace, spec.name): _build(spec) for spec in _SPECS}
)
"""Every system table, by (keyspace, table)."""

SYSTEM_KEYSPACES: Mapping[str, Keyspace] = MappingProxyType(
    {
        name: Keyspace(name, MappingProxyType({"class": LOCAL_STRATEGY_CLASS}), True)
        for name in (SYSTEM_KEYSPACE_NAME, SYSTEM_SCHEMA_KEYSPACE_NAME)
    }
)
"""The node-local system keyspaces (``LocalStrategy``, durable writes)."""

SYSTEM_SCHEMA_TABLE_NAMES: tuple[str, ...] = tuple(
    spec.name for spec in _SPECS if spec.keyspace == SYSTEM_SCHEMA_KEYSPACE_NAME
)
"""The ``system_schema`` tables, in definition order."""


def is_system_keyspace(name: str) -> bool:
    return name in SYSTEM_KEYSPACES


def system_table(keyspace: str, name: str) -> Table:
    """The definition of ``keyspace.name``; SchemaError (CQL Invalid) if ringflow has none.

    The message is Cassandra's for an unknown table, so ``system.peers_v2`` fails the way the
    driver's fallback expects.
    """
    found = SYSTEM_TABLES.get((keyspace, name))
    if found is None:
        if keyspace not in SYSTEM_KEYSPACES:
            raise SchemaError(f"keyspace {keyspace!r} is not a system keyspace")
        raise SchemaError(f"unconfigured table {name}")
    return found


def system_tables_of(keyspace: str) -> tuple[Table, ...]:
    """The tables of a system keyspace, by name."""
    if keyspace not in SYSTEM_KEYSPACES:
        raise SchemaError(f"keyspace {keyspace!r} is not a system keyspace")
    return tuple(SYSTEM_TABLES[key] for key in sorted(SYSTEM_TABLES) if key[0] == keyspace)


# --- system_distributed repair history (Cassandra's SystemDistributedKeyspace) -------------------
# Replicated (SimpleStrategy RF 3, like the CDC description tables registered in
# ``ringflow.cql._exec_system``); the columns are Cassandra 4's ``repair_history`` and
# ``parent_repair_history`` (``SystemDistributedKeyspace.java``), so tools that read them work.

REPAIR_HISTORY_CQL = """\
CREATE TABLE system_distributed.repair_history (
    keyspace_name text,
    columnfamily_name text,
    id timeuuid,
    parent_id timeuuid,
    range_begin text,
    range_end text,
    coordinator inet,
    coordinator_port int,
    participants set<inet>,
    participants_v2 set<text>,
    exception_message text,
    exception_stacktrace text,
    status text,
    started_at timestamp,
    finished_at timestamp,
    PRIMARY KEY ((keyspace_name, columnfamily_name), id)
)"""

PARENT_REPAIR_HISTORY_CQL = """\
CREATE TABLE system_distributed.parent_repair_history (
    parent_id timeuuid,
    keyspace_name text,
    columnfamily_names set<text>,
    started_at timestamp,
    finished_at timestamp,
    exception_message text,
    exception_stacktrace text,
    requested_ranges set<text>,
    successful_ranges set<text>,
    options map<text, text>,
    PRIMARY KEY (parent_id)
)"""
