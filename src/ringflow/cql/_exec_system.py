"""System tables: which table a name means, the CDC description tables, and the durable schema.

Rules:

* Names resolve in three places: the user schema (``SchemaState``), the node-local system
  keyspaces ``system``/``system_schema`` (``ringflow.schema._system_tables``; an unknown name
  such as ``system.peers_v2`` is Invalid "unconfigured table peers_v2", which the Python driver
  expects), and the CDC description keyspaces ``system_distributed`` and
  ``system_distributed_everywhere``, whose tables are defined here by parsing the ``CREATE
  TABLE`` constants of ``ringflow.cdc`` (scylla-cdc.md §6) with the CQL parser and the DDL
  code, with Cassandra's name-based ids.
* :func:`ensure_system_tables` registers every one of them in the store (idempotent); the node
  shell calls it at start, the processor calls it too.
* The node-local virtual tables of ``system_replication`` (``VIRTUAL_TABLES``: the replica
  capture's ``captured_rows`` and ``local_slices``) resolve like the others and are described
  in ``system_schema`` too, but no store holds them: the processor answers them itself.
* The schema's durable form is the ``system_schema`` rows themselves, as in Cassandra: every DDL
  rewrites the partitions of the keyspaces it touched (``system_schema_mutations``), and
  :func:`load_schema` rebuilds the ``SchemaState`` at start from ``system_schema.keyspaces``,
  ``types``, ``tables``, ``columns`` and ``dropped_columns`` rows (a table the store holds
  keeps its column order), then makes the store's tables match (``sync_store_tables``): the
  rows are the truth, also when they were merged from a peer (seed 004: an ALTER or DROP made
  elsewhere) or when a crash came between a DDL's commit and the store's registration or drop
  (the DDL registers and drops after committing its rows, so a crash before the commit leaves
  nothing of it).
* The migration chain is durable too: each DDL writes its migrations to
  ``system.schema_migrations`` (one partition, clustered by version) in the same store batch
  as its ``system_schema`` rows. :func:`load_schema` follows the stored chain from the genesis
  version, replays it (every chain and DDL rule checked) and keeps the replayed state when it
  agrees with the rows, so a restarted node's chain version continues where it was. A store
  without migrations (older data) loads from the rows alone, chain at genesis; a store whose
  rows have moved past its chain (a cluster node merges peers' ``system_schema`` rows, which
  carry no migrations) loads the rows' schema and keeps its chain, so later local DDL still
  follows the stored chain version.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

from ringflow.cdc import (
    GENERATION_DESCRIPTIONS_V1_CQL,
    GENERATION_DESCRIPTIONS_V2_CQL,
    GENERATION_TIMESTAMPS_CQL,
    STREAMS_DESCRIPTIONS_V1_CQL,
    STREAMS_DESCRIPTIONS_V2_CQL,
    cdc_log_compaction_options,
)
from ringflow.cql._ast import CreateTableStatement
from ringflow.cql._auth_tables import AUTH_TABLES_CQL
from ringflow.cql._exec_common import (
    DISTRIBUTED_KEYSPACES,
    LOCAL_KEYSPACES,
    RESERVED_KEYSPACES,
    SYSTEM_AUTH_KEYSPACE,
    SYSTEM_DISTRIBUTED_EVERYWHERE_KEYSPACE,
    SYSTEM_DISTRIBUTED_KEYSPACE,
    SYSTEM_REPLICATION_KEYSPACE,
)
from ringflow.cql._exec_ddl import build_table
from ringflow.cql._parser import parse_statement
from ringflow.errors import AlreadyExists, InternalError, InvalidRequest
from ringflow.replication import (
    CHANNEL_PROGRESS_TABLE_CQL,
    CHANNELS_TABLE_CQL,
    DEAD_LETTERS_TABLE_CQL,
    SENT_TABLE_CQL,
    SLICES_TABLE_CQL,
    VIRTUAL_TABLES_CQL,
    WATERMARKS_TABLE_CQL,
)
from ringflow.ring import MIN_TOKEN
from ringflow.schema import (
    CDC_LOG_SUFFIX,
    ENGINE_PROPERTY_KINDS,
    GENESIS_VERSION,
    PARENT_REPAIR_HISTORY_CQL,
    REPAIR_HISTORY_CQL,
    SCHEMA_MIGRATIONS_TABLE,
    SYSTEM_KEYSPACE_NAME,
    SYSTEM_KEYSPACES,
    SYSTEM_TABLES,
    CdcOptions,
    ClusteringOrder,
    Column,
    ColumnKind,
    CompactionFor,
    CqlType,
    DroppedColumn,
    Keyspace,
    Migration,
    Mutation,
    SchemaError,
    SchemaState,
    Table,
    TableOptions,
    UserType,
    decode_change,
    default_compaction,
    deserialize,
    dropped_keyspace_mutations,
    engine_overrides,
    expand_user_types,
    parse_cdc_extension,
    parse_type,
    system_schema_mutations,
    system_table,
    system_table_id,
)
from ringflow.storage import ResultRow, Store

_log = logging.getLogger(__name__)

DISTRIBUTED_KEYSPACE_DEFINITIONS: Mapping[str, Keyspace] = MappingProxyType(
    {
        SYSTEM_DISTRIBUTED_KEYSPACE: Keyspace(
            SYSTEM_DISTRIBUTED_KEYSPACE,
            {"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "3"},
        ),
        SYSTEM_DISTRIBUTED_EVERYWHERE_KEYSPACE: Keyspace(
            SYSTEM_DISTRIBUTED_EVERYWHERE_KEYSPACE,
            {"class": "org.apache.cassandra.locator.EverywhereStrategy"},
        ),
        SYSTEM_REPLICATION_KEYSPACE: Keyspace(
            SYSTEM_REPLICATION_KEYSPACE,
            {"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "3"},
        ),
        SYSTEM_AUTH_KEYSPACE: Keyspace(
            SYSTEM_AUTH_KEYSPACE,
            {"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "3"},
        ),
    }
)
_DESCRIPTION_TABLE_CQL = (
    STREAMS_DESCRIPTIONS_V2_CQL,
    GENERATION_TIMESTAMPS_CQL,
    GENERATION_DESCRIPTIONS_V2_CQL,
    STREAMS_DESCRIPTIONS_V1_CQL,
    GENERATION_DESCRIPTIONS_V1_CQL,
    CHANNELS_TABLE_CQL,
    SLICES_TABLE_CQL,
    WATERMARKS_TABLE_CQL,
    SENT_TABLE_CQL,
    DEAD_LETTERS_TABLE_CQL,
    CHANNEL_PROGRESS_TABLE_CQL,
    REPAIR_HISTORY_CQL,
    PARENT_REPAIR_HISTORY_CQL,
    *AUTH_TABLES_CQL,
)


def _description_table(cql: str) -> Table:
    statement = parse_statement(cql)
    if not isinstance(statement, CreateTableStatement) or statement.table.keyspace is None:
        raise InternalError(f"not a qualified CREATE TABLE: {cql!r}")
    keyspace = DISTRIBUTED_KEYSPACE_DEFINITIONS[statement.table.keyspace]
    table_id = system_table_id(keyspace.name, statement.table.name)
    return build_table(statement, keyspace, table_id)


DISTRIBUTED_TABLES: Mapping[tuple[str, str], Table] = MappingProxyType(
    {(t.keyspace, t.name): t for t in map(_description_table, _DESCRIPTION_TABLE_CQL)}
)
"""The CDC description tables (v2 and v1) and the replica-side replication tables
(``ringflow.replication``: channels, sealed slices, seal watermarks, sent copies, dead letters),
by (keyspace, table)."""
VIRTUAL_TABLES: Mapping[tuple[str, str], Table] = MappingProxyType(
    {(t.keyspace, t.name): t for t in map(_description_table, VIRTUAL_TABLES_CQL)}
)
"""The node-local virtual tables of ``system_replication`` (``captured_rows``,
``local_slices``): described in ``system_schema`` like the others (so drivers and cqlsh see
them), never registered in a store; the processor answers their SELECTs from its own store's
capture (``_exec_virtual``) and refuses every write."""


def is_virtual_table(table: Table) -> bool:
    return VIRTUAL_TABLES.get((table.keyspace, table.name)) is table


def ensure_system_tables(store: Store) -> None:
    """Register every system and CDC description table in ``store`` (idempotent)."""
    for table in (*SYSTEM_TABLES.values(), *DISTRIBUTED_TABLES.values()):
        store.register_table(table)


def keyspace_exists(state: SchemaState, name: str) -> bool:
    return name in state.keyspaces or name in RESERVED_KEYSPACES


def lookup_table(state: SchemaState, keyspace: str, name: str) -> Table:
    """The table ``keyspace.name`` means; Invalid (Cassandra's messages) if none."""
    if keyspace in LOCAL_KEYSPACES:
        return system_table(keyspace, name)
    if keyspace in DISTRIBUTED_KEYSPACES:
        found = DISTRIBUTED_TABLES.get((keyspace, name)) or VIRTUAL_TABLES.get((keyspace, name))
    else:
        if keyspace not in state.keyspaces:
            raise InvalidRequest(f"Keyspace {keyspace} does not exist")
        found = state.tables.get((keyspace, name))
    if found is None:
        raise InvalidRequest(f"unconfigured table {name}")
    return found


# --- system_schema rows --------------------------------------------------------------------------


def compaction_for(state: SchemaState) -> CompactionFor:
    """The ``compaction`` map each table of ``state`` shows (a CDC log's follows its base's
    cdc ``ttl``)."""

    def compaction(table: Table) -> Mapping[str, str]:
        if not table.name.endswith(CDC_LOG_SUFFIX):
            return default_compaction(table)
        base = state.tables.get((table.keyspace, table.name[: -len(CDC_LOG_SUFFIX)]))
        ttl_s = base.options.cdc.ttl_s if base is not None else 86400
        return cdc_log_compaction_options(ttl_s)

    return compaction


def _described_state(state: SchemaState, keyspaces: Iterable[str] | None) -> SchemaState:
    wanted = None if keyspaces is None else set(keyspaces)
    all_keyspaces = {**state.keyspaces, **DISTRIBUTED_KEYSPACE_DEFINITIONS}
    all_tables = {**state.tables, **DISTRIBUTED_TABLES, **VIRTUAL_TABLES}
    return SchemaState(
        keyspaces={k: v for k, v in all_keyspaces.items() if wanted is None or k in wanted},
        tables={k: v for k, v in all_tables.items() if wanted is None or k[0] in wanted},
        dropped_columns={
            k: v for k, v in state.dropped_columns.items() if wanted is None or k[0] in wanted
        },
    )


def schema_rows(
    state: SchemaState, keyspaces: Iterable[str] | None, timestamp_us: int
) -> list[Mutation]:
    """The ``system_schema`` partitions of ``keyspaces`` (all, system ones included, if None)."""
    described = _described_state(state, keyspaces)
    return system_schema_mutations(
        described,
        timestamp_us,
        include_system_keyspaces=keyspaces is None,
        compaction=compaction_for(state),
    )


def dropped_keyspace_rows(keyspaces: Iterable[str], timestamp_us: int) -> list[Mutation]:
    return [m for name in keyspaces for m in dropped_keyspace_mutations(name, timestamp_us)]


# --- loading the schema at start -----------------------------------------------------------------


def _all_rows(store: Store, keyspace: str, name: str, now_s: int) -> Iterator[ResultRow]:
    table = system_table(keyspace, name)
    state = None
    while True:
        page = store.scan(
            table, MIN_TOKEN, MIN_TOKEN, page_size=1000, paging_state=state, now_s=now_s
        )
        yield from page.rows
        state = page.paging_state
        if state is None:
            return


def _text_of(row: ResultRow, table: Table, name: str) -> object:
    column = table.column(name)
    if column.is_primary_key:
        parts = row.partition_key if column.kind.value == "partition_key" else row.clustering
        raw: bytes | None = parts[column.position]
    else:
        raw = row.values.get(name)
    return None if raw is None else deserialize(column.type, raw, name)


def _load_keyspaces(store: Store, now_s: int) -> dict[str, Keyspace]:
    table = system_table("system_schema", "keyspaces")
    found = {}
    for row in _all_rows(store, "system_schema", "keyspaces", now_s):
        name = str(_text_of(row, table, "keyspace_name"))
        if name in RESERVED_KEYSPACES or name in SYSTEM_KEYSPACES:
            continue
        replication = _text_of(row, table, "replication")
        durable = _text_of(row, table, "durable_writes")
        if not isinstance(replication, dict):
            raise InternalError(f"system_schema.keyspaces row of {name} has no replication")
        found[name] = Keyspace(name, dict(replication), durable is not False)
    return found


def _user_type_lookup(types: Mapping[str, UserType]) -> dict[str, UserType]:
    lookup = dict(types)
    lookup.update({name.lower(): user_type for name, user_type in types.items()})
    return lookup


def _load_types(store: Store, keyspaces: dict[str, Keyspace], now_s: int) -> None:
    table = system_table("system_schema", "types")
    pending: dict[str, list[tuple[str, list[str], list[str]]]] = {}
    for row in _all_rows(store, "system_schema", "types", now_s):
        keyspace = str(_text_of(row, table, "keyspace_name"))
        if keyspace not in keyspaces:
            continue
        names = _text_of(row, table, "field_names") or []
        types = _text_of(row, table, "field_types") or []
        assert isinstance(names, list) and isinstance(types, list)
        name = str(_text_of(row, table, "type_name"))
        pending.setdefault(keyspace, []).append((name, names, types))
    for keyspace, definitions in pending.items():
        resolved: dict[str, UserType] = {}
        while definitions:
            waiting = []
            for name, field_names, field_types in definitions:
                try:
                    lookup = _user_type_lookup(resolved)
                    parsed = tuple(parse_type(text, lookup) for text in field_types)
                except SchemaError:
                    waiting.append((name, field_names, field_types))
                    continue
                resolved[name] = UserType(keyspace, name, tuple(field_names), parsed)
            if len(waiting) == len(definitions):
                raise InternalError(f"user types of {keyspace} cannot be resolved: {waiting}")
            definitions = waiting
        base = keyspaces[keyspace]
        keyspaces[keyspace] = Keyspace(base.name, base.replication, base.durable_writes, resolved)


def _load_dropped(
    store: Store, tables: Mapping[tuple[str, str], Table], now_s: int
) -> dict[tuple[str, str, str], DroppedColumn]:
    table = system_table("system_schema", "dropped_columns")
    dropped = {}
    for row in _all_rows(store, "system_schema", "dropped_columns", now_s):
        keyspace = str(_text_of(row, table, "keyspace_name"))
        table_name = str(_text_of(row, table, "table_name"))
        column = str(_text_of(row, table, "column_name"))
        if (keyspace, table_name) not in tables:
            continue
        when = _text_of(row, table, "dropped_time")
        if isinstance(when, datetime.datetime):
            epoch = datetime.datetime(1970, 1, 1)
            when = (when - epoch) // datetime.timedelta(milliseconds=1)
        cql_type: CqlType = parse_type(str(_text_of(row, table, "type")))
        dropped[(keyspace, table_name, column)] = DroppedColumn(
            column, cql_type, int(str(when)) * 1000
        )
    return dropped


def schema_high_water_us(store: Store) -> int:
    """The latest write timestamp (tombstones included) in ``system_schema.keyspaces``: new
    schema rows must be written later, or they would lose to the old ones (the clock may have
    gone back, or not moved, since the last DDL)."""
    table = system_table("system_schema", "keyspaces")
    latest = -(2**63)
    state = None
    while True:
        page = store.scan_mutations(table, MIN_TOKEN, MIN_TOKEN, page_size=1000, paging_state=state)
        for mutation in page.mutations:
            latest = max((latest, *mutation.timestamps_us()))
        state = page.paging_state
        if state is None:
            return latest


def _column_rows(store: Store, now_s: int) -> dict[tuple[str, str], list[ResultRow]]:
    found: dict[tuple[str, str], list[ResultRow]] = {}
    table = system_table("system_schema", "columns")
    for row in _all_rows(store, "system_schema", "columns", now_s):
        key = (str(_text_of(row, table, "keyspace_name")), str(_text_of(row, table, "table_name")))
        found.setdefault(key, []).append(row)
    return found


def _table_from_rows(
    keyspace: Keyspace, table_row: ResultRow, column_rows: list[ResultRow]
) -> Table:
    """A table rebuilt from its ``system_schema.tables`` and ``columns`` rows (regular and
    static columns come back in name order: the rows do not keep definition order)."""
    tables, columns = (
        system_table("system_schema", "tables"),
        system_table("system_schema", "columns"),
    )
    lookup = _user_type_lookup(keyspace.user_types)
    defined = []
    for row in column_rows:
        kind = ColumnKind(str(_text_of(row, columns, "kind")))
        order = str(_text_of(row, columns, "clustering_order"))
        position = _text_of(row, columns, "position")
        defined.append(
            Column(
                str(_text_of(row, columns, "column_name")),
                parse_type(str(_text_of(row, columns, "type")), lookup),
                kind,
                position if isinstance(position, int) and position >= 0 else 0,
                ClusteringOrder.DESC if order == "desc" else ClusteringOrder.ASC,
            )
        )
    extensions = _text_of(table_row, tables, "extensions") or {}
    assert isinstance(extensions, dict)
    cdc = extensions.get("cdc")
    options = TableOptions(
        CdcOptions.from_map(parse_cdc_extension(cdc)) if isinstance(cdc, bytes) else CdcOptions(),
        int(str(_text_of(table_row, tables, "default_time_to_live") or 0)),
        int(str(_text_of(table_row, tables, "gc_grace_seconds") or 0)),
        str(_text_of(table_row, tables, "comment") or ""),
        engine_overrides(
            str(_text_of(table_row, tables, "table_name")),
            {name: _text_of(table_row, tables, name) for name in ENGINE_PROPERTY_KINDS},
        ),
    )
    table_id = _text_of(table_row, tables, "id")
    assert isinstance(table_id, uuid.UUID)
    name = str(_text_of(table_row, tables, "table_name"))
    ranks = {ColumnKind.PARTITION_KEY: 0, ColumnKind.CLUSTERING: 1, ColumnKind.STATIC: 2}
    defined.sort(key=lambda c: (ranks.get(c.kind, 3), c.position, c.name.encode("utf-8")))
    table = Table(keyspace.name, name, tuple(defined), options, table_id)
    table.validate()
    return table


def _load_tables(
    store: Store, keyspaces: Mapping[str, Keyspace], now_s: int
) -> dict[tuple[str, str], Table]:
    """The tables the ``system_schema.tables`` and ``columns`` rows describe (the durable
    schema, peers' DDL merged in): a table the store holds with the same id keeps the store's
    column order (the rows keep none), columns the rows add come after it."""
    stored = {(t.keyspace, t.name): t for t in store.tables()}
    described = system_table("system_schema", "tables")
    column_rows: dict[tuple[str, str], list[ResultRow]] | None = None
    tables: dict[tuple[str, str], Table] = {}
    for row in _all_rows(store, "system_schema", "tables", now_s):
        keyspace = str(_text_of(row, described, "keyspace_name"))
        key = (keyspace, str(_text_of(row, described, "table_name")))
        if keyspace not in keyspaces or keyspace in RESERVED_KEYSPACES:
            continue
        if column_rows is None:
            column_rows = _column_rows(store, now_s)
        table = _table_from_rows(keyspaces[keyspace], row, column_rows.get(key, []))
        known = stored.get(key)
        if known is not None and known.id == table.id:
            table = _in_stored_order(known, table)
        tables[key] = table
    return tables


def _in_stored_order(stored: Table, table: Table) -> Table:
    """``table`` with its columns in ``stored``'s order, columns new to it last."""
    rank = {column.name: index for index, column in enumerate(stored.columns)}
    ordered = sorted(table.columns, key=lambda c: rank.get(c.name, len(rank)))
    return dataclasses.replace(table, columns=tuple(ordered))


def sync_store_tables(store: Store, tables: Mapping[tuple[str, str], Table]) -> None:
    """Make the store's user tables exactly ``tables``: drop the ones no longer described (a
    DROP merged from a peer, a DDL whose rows never committed) or described with another id
    (the same table created concurrently elsewhere), register the missing ones (a CREATE merged
    from a peer, a crash between a DDL's commit and its registration) and the changed ones
    (an ALTER merged from a peer)."""
    stored = {
        (t.keyspace, t.name): t for t in store.tables() if t.keyspace not in RESERVED_KEYSPACES
    }
    for key, known in list(stored.items()):
        wanted = tables.get(key)
        if wanted is None or wanted.id != known.id:
            _log.warning("table %s.%s (id %s) is not in the schema: dropped", *key, known.id)
            store.drop_table(*key)
            del stored[key]
    for key, table in tables.items():
        if stored.get(key) != table:
            if key not in stored:
                _log.info("table %s.%s of the schema registered in the store", *key)
            store.register_table(table)


def load_migrations(store: Store, now_s: int) -> tuple[Migration, ...]:
    """The migration chain ``system.schema_migrations`` holds, oldest first (followed from the
    genesis version by ``previous_version``, not by time); SchemaError if the stored migrations
    fork, leave a gap or cannot be decoded."""
    table = system_table(SYSTEM_KEYSPACE_NAME, SCHEMA_MIGRATIONS_TABLE)
    by_previous: dict[uuid.UUID, Migration] = {}
    count = 0
    for row in _all_rows(store, SYSTEM_KEYSPACE_NAME, SCHEMA_MIGRATIONS_TABLE, now_s):
        version = _text_of(row, table, "version")
        previous = _text_of(row, table, "previous_version")
        change = _text_of(row, table, "change")
        if not (
            isinstance(version, uuid.UUID)
            and isinstance(previous, uuid.UUID)
            and isinstance(change, bytes)
        ):
            raise SchemaError(f"stored migration {version} is incomplete")
        migration = Migration(version, previous, decode_change(change))
        if previous in by_previous:
            raise SchemaError(
                f"stored migrations {by_previous[previous].version} and {version} both follow "
                f"{previous}"
            )
        by_previous[previous] = migration
        count += 1
    chain: list[Migration] = []
    current = GENESIS_VERSION
    while current in by_previous:
        chain.append(by_previous[current])
        current = chain[-1].version
    if len(chain) != count:
        raise SchemaError(f"{count - len(chain)} stored migrations do not follow the chain")
    return tuple(chain)


def replay_migrations(migrations: Iterable[Migration]) -> SchemaState:
    """The state ``migrations`` build from the empty schema, checking the chain and every DDL
    rule as they were checked when first applied."""
    state = SchemaState()
    for migration in migrations:
        state = state.apply(migration)
    return state


def _agrees(replayed: SchemaState, described: SchemaState) -> bool:
    """True if the replayed chain built what the ``system_schema`` rows and the store's tables
    describe (dropped columns compare with user types expanded, as the rows keep them)."""
    if replayed.keyspaces != described.keyspaces or replayed.tables != described.tables:
        return False
    if replayed.dropped_columns.keys() != described.dropped_columns.keys():
        return False
    return all(
        dropped.dropped_at_us == described.dropped_columns[key].dropped_at_us
        and expand_user_types(dropped.type)
        == expand_user_types(described.dropped_columns[key].type)
        for key, dropped in replayed.dropped_columns.items()
    )


def load_schema(store: Store, now_s: int) -> SchemaState:
    """The user schema a store holds (see the module docstring): the stored migration chain
    replayed, checked against the ``system_schema`` rows; the rows alone for a store without
    migrations; the rows with the stored chain when the rows have moved past it (schema
    merged from a peer). The store's tables are then made to match it (``sync_store_tables``)."""
    state = _load_state(store, now_s)
    sync_store_tables(store, state.tables)
    return state


def _load_state(store: Store, now_s: int) -> SchemaState:
    described = _described_schema(store, now_s)
    try:
        migrations = load_migrations(store, now_s)
    except SchemaError as error:
        _log.error("stored schema migrations are unusable, chain restarts: %s", error)
        return described
    if not migrations:
        return described
    try:
        replayed = replay_migrations(migrations)
    except (SchemaError, AlreadyExists) as error:
        _log.info("stored migrations do not replay alone (%s): schema from system_schema", error)
        replayed = None
    if replayed is not None and _agrees(replayed, described):
        return replayed
    state = dataclasses.replace(described, migrations=migrations)
    state.validate()
    return state


def _described_schema(store: Store, now_s: int) -> SchemaState:
    """The user schema the ``system_schema`` rows and the store's tables describe."""
    keyspaces = _load_keyspaces(store, now_s)
    _load_types(store, keyspaces, now_s)
    tables = _load_tables(store, keyspaces, now_s)
    dropped = _load_dropped(store, tables, now_s)
    for (keyspace, table_name, column), record in sorted(dropped.items()):
        key = (keyspace, table_name)
        tables[key] = tables[key].with_dropped_column(column, record.dropped_at_us)
    state = SchemaState(keyspaces=keyspaces, tables=tables, dropped_columns=dropped)
    state.validate()
    return state
