"""System table definitions and rows, with the Scylla Python driver as the oracle.

Proves: every definition validates and carries Cassandra's system table id; every column the
driver's control connection selects and every column its ``SchemaParserV3`` reads (found by
reading the driver's own source) is defined; ``RELEASE_VERSION`` makes the driver pick
``SchemaParserV3``; rows built for a sample schema (NTS keyspace, UDT, a table with every column
kind and CDC on, its CDC log table, a dropped column), decoded with the driver's own
deserializers and served to the driver's real parser and control connection, give back the
same keyspaces, tables, columns, options, ``cdc`` extension, hosts and token map; schema
partitions are replaced whole; the ``cdc`` extension bytes are Scylla's.
"""

from __future__ import annotations

import ast
import ipaddress
import pathlib
import re
import types
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import cassandra
import pytest
from cassandra import InvalidRequest as DriverInvalidRequest
from cassandra import metadata as driver_metadata
from cassandra.cluster import Cluster, ControlConnection
from cassandra.metadata import Murmur3Token
from hypothesis import given
from hypothesis import strategies as st

from ringflow.errors import ErrorCode
from ringflow.schema import (
    DATE,
    DECIMAL,
    INT,
    LOCAL_SYSTEM_KEYSPACES,
    TEXT,
    TIMESTAMP,
    UUID,
    CdcOptions,
    Cell,
    ClusteringOrder,
    ComplexColumn,
    CqlType,
    DeltaMode,
    DroppedColumn,
    Keyspace,
    ListType,
    MapType,
    Mutation,
    PreimageMode,
    SchemaError,
    SchemaState,
    SetType,
    Table,
    TableOptions,
    TupleType,
    UserType,
    merge_mutations,
    name_uuid_from_bytes,
    purge_mutation,
    serialize,
    serialized_collection_from_cells,
)
from ringflow.schema._system_rows import (
    CDC_LOCAL_GENERATION_KEY,
    CDC_LOCAL_REWRITTEN_KEY,
    CQL_VERSION,
    DEFAULT_COMPACTION,
    MURMUR3_PARTITIONER,
    RELEASE_VERSION,
    NodeRow,
    cdc_extension_bytes,
    cdc_local_row,
    cdc_rewritten_row,
    dropped_keyspace_mutations,
    expand_user_types,
    local_row,
    parse_cdc_extension,
    peer_removal,
    peer_row,
    system_schema_mutations,
    table_mutation,
)
from ringflow.schema._system_tables import (
    LOCAL_STRATEGY_CLASS,
    SYSTEM_KEYSPACES,
    SYSTEM_SCHEMA_KEYSPACE_NAME,
    SYSTEM_SCHEMA_TABLE_NAMES,
    SYSTEM_TABLES,
    is_system_keyspace,
    system_table,
    system_tables_of,
)
from tests.unit.schema.test_codec_driver_oracle import driver_type

TIMESTAMP_US = 1_700_000_000_000_000
DRIVER_SOURCE = pathlib.Path(cassandra.__file__).parent

# --- helpers: our mutations as the rows a driver would receive -------------------------------


def _driver_value(cql_type: CqlType, data: bytes) -> Any:
    """What the driver's result decoder makes of stored bytes (inet comes back as a str)."""
    return driver_type(cql_type).from_binary(data, 4)


def decode(mutation: Mutation) -> list[dict[str, Any]]:
    """The live rows of a mutation, as dicts of driver values (a SELECT * answer)."""
    table = system_table(mutation.keyspace, mutation.table)
    keys = zip(table.partition_key_columns, mutation.partition_key, strict=True)
    partition = {column.name: _driver_value(column.type, value) for column, value in keys}
    rows = []
    for row in mutation.rows:
        values = dict(partition)
        clustering = zip(table.clustering_columns, row.clustering, strict=True)
        values.update({c.name: _driver_value(c.type, value) for c, value in clustering})
        for name, data in row.cells.items():
            column_type = table.column(name).type
            if isinstance(data, Cell):
                values[name] = _driver_value(column_type, data.value)
            else:
                pairs = [(cell.path or b"", cell.value) for cell in data.cells]
                whole = serialized_collection_from_cells(column_type, pairs)
                values[name] = _driver_value(column_type, whole)
        rows.append(values)
    return rows


def rows_by_table(mutations: Iterable[Mutation]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for mutation in mutations:
        found.setdefault((mutation.keyspace, mutation.table), []).extend(decode(mutation))
    return found


_SELECT = re.compile(r"SELECT (?P<columns>.+?) FROM (?P<keyspace>\w+)\.(?P<table>\w+)", re.I)


class FakeServer:
    """Answers the driver's system-table SELECTs from our rows, like a node would: the selected
    columns (``*`` = the table's columns in definition order), an Invalid error for a table
    ringflow does not define."""

    def __init__(self, rows: Mapping[tuple[str, str], list[dict[str, Any]]]) -> None:
        self.rows = rows
        self.queries: list[str] = []
        self.features = types.SimpleNamespace(
            shard_id=0, sharding_info=object(), tablets_routing_v2=False
        )

    def answer(self, query: str) -> tuple[bool, Any]:
        self.queries.append(query)
        match = _SELECT.match(query)
        assert match is not None, query
        try:
            table = system_table(match["keyspace"], match["table"])
        except SchemaError as error:
            return False, DriverInvalidRequest(str(error))
        columns = [column.name for column in table.columns]
        if match["columns"].strip() != "*":
            columns = [name.strip() for name in match["columns"].split(",")]
        found = self.rows.get((table.keyspace, table.name), [])
        parsed = [tuple(row.get(name) for name in columns) for row in found]
        return True, types.SimpleNamespace(
            paging_state=None, column_names=columns, parsed_rows=parsed
        )

    def wait_for_responses(self, *messages: Any, **_: Any) -> list[tuple[bool, Any]]:
        return [self.answer(message.query) for message in messages]


# --- the sample schema ------------------------------------------------------------------------

ADDRESS = UserType("shop", "address", ("street", "zip"), (TEXT, INT))
SHOP = Keyspace(
    "shop",
    {"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "2"},
    durable_writes=True,
    user_types={"address": ADDRESS},
)
CDC = CdcOptions(enabled=True, preimage=PreimageMode.FULL, postimage=True, ttl_s=3600)
ORDERS = Table.create(
    "shop",
    "orders",
    partition_key=[("customer", UUID), ("region", TEXT)],
    clustering=[("day", DATE, ClusteringOrder.DESC), ("seq", INT, ClusteringOrder.ASC)],
    static=[("note", TEXT)],
    regular=[
        ("total", DECIMAL),
        ("tags", SetType(TEXT)),
        ("ship_to", ADDRESS),
        ("lines", ListType(TEXT)),
        ("attrs", MapType(TEXT, INT, frozen=True)),
        ("pair", TupleType((INT, TEXT))),
    ],
    options=TableOptions(cdc=CDC, default_time_to_live_s=600, comment="orders by day"),
    table_id=uuid.UUID("11111111-2222-3333-4444-555555555555"),
)
DROPPED_AT_US = TIMESTAMP_US - 5_000_123


def sample_state() -> tuple[SchemaState, Table]:
    from ringflow.cdc._log_schema import cdc_log_table

    log = cdc_log_table(ORDERS)
    dropped = DroppedColumn("old_address", ListType(ADDRESS.frozen_form()), DROPPED_AT_US)
    state = SchemaState(
        keyspaces={"shop": SHOP},
        tables={("shop", "orders"): ORDERS, ("shop", log.name): log},
        dropped_columns={("shop", "orders", "old_address"): dropped},
    )
    return state, log


def log_aware_compaction(table: Table) -> Mapping[str, str]:
    from ringflow.cdc._log_schema import cdc_log_compaction_options

    if table.name.endswith("_scylla_cdc_log"):
        return cdc_log_compaction_options(CDC.ttl_s)
    return DEFAULT_COMPACTION


def driver_keyspaces(mutations: Iterable[Mutation]) -> dict[str, Any]:
    server = FakeServer(rows_by_table(mutations))
    parser = driver_metadata.get_schema_parser(server, RELEASE_VERSION, None, 10, None)
    keyspaces = {keyspace.name: keyspace for keyspace in parser.get_all_keyspaces()}
    for keyspace in keyspaces.values():
        assert keyspace._exc_info is None, keyspace.name
        for table in keyspace.tables.values():
            assert table._exc_info is None, (keyspace.name, table.name)
    return keyspaces


# --- definitions --------------------------------------------------------------------------


def test_every_definition_validates_with_cassandras_table_id_and_sorted_columns() -> None:
    for (keyspace, name), table in SYSTEM_TABLES.items():
        table.validate()
        assert (table.keyspace, table.name) == (keyspace, name)
        assert table.id == name_uuid_from_bytes((keyspace + name).encode())
        regular = [column.name.encode() for column in table.regular_columns]
        assert regular == sorted(regular), name
    # Ids every Cassandra 3+/Scylla node has (TableId.forSystemTable / generate_legacy_id).
    assert str(system_table("system", "local").id) == "7ad54392-bcdd-35a6-8417-4e047860b377"
    assert str(system_table("system_schema", "columns").id) == (
        "24101c25-a2ae-3af7-87c1-b40ee1aca33f"
    )


def test_system_keyspaces_are_local_and_the_ones_kept_out_of_the_digest() -> None:
    assert set(SYSTEM_KEYSPACES) == set(LOCAL_SYSTEM_KEYSPACES)
    for keyspace in SYSTEM_KEYSPACES.values():
        assert dict(keyspace.replication) == {"class": LOCAL_STRATEGY_CLASS}
        assert keyspace.durable_writes
        assert is_system_keyspace(keyspace.name)
    assert not is_system_keyspace("shop")
    assert [table.name for table in system_tables_of("system")] == [
        "cdc_local",
        "local",
        "peers",
        "schema_migrations",
    ]
    assert set(SYSTEM_SCHEMA_TABLE_NAMES) == {t.name for t in system_tables_of("system_schema")}


def test_an_undefined_system_table_is_a_clean_invalid_request() -> None:
    with pytest.raises(SchemaError, match="unconfigured table peers_v2") as raised:
        system_table("system", "peers_v2")
    assert raised.value.code is ErrorCode.INVALID
    with pytest.raises(SchemaError, match="not a system keyspace"):
        system_table("shop", "orders")
    with pytest.raises(SchemaError, match="not a system keyspace"):
        system_tables_of("shop")


def test_cdc_local_matches_the_cdc_layers_create_statement() -> None:
    from ringflow.cdc import CDC_LOCAL_CQL

    declared = dict(re.findall(r"^\s+(\w+) (\w+)", CDC_LOCAL_CQL, re.M))
    table = system_table("system", "cdc_local")
    assert declared == {column.name: column.type.cql_name() for column in table.columns}


# --- what the driver reads ---------------------------------------------------------------------


def _select_columns(query: str) -> tuple[str, list[str]]:
    match = _SELECT.match(query)
    assert match is not None, query
    columns = [name.strip() for name in match["columns"].split(",")]
    return f"{match['keyspace']}.{match['table']}", columns


def test_every_column_the_control_connection_selects_is_defined() -> None:
    queries = [
        value.format(nt_col_name="rpc_address")
        for name, value in vars(ControlConnection).items()
        if name.startswith("_SELECT_") and isinstance(value, str) and value.startswith("SELECT")
    ]
    checked = 0
    for query in queries:
        table, columns = _select_columns(query)
        if table not in ("system.local", "system.peers") or columns == ["*"]:
            continue
        defined = {column.name for column in system_table(*table.split(".")).columns}
        assert set(columns) <= defined, (query, set(columns) - defined)
        checked += 1
    assert checked >= 6  # _SELECT_LOCAL(_NO_TOKENS, ...), _SELECT_PEERS, the schema queries


def _parser_functions() -> dict[str, ast.FunctionDef]:
    tree = ast.parse((DRIVER_SOURCE / "metadata.py").read_text())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    functions: dict[str, ast.FunctionDef] = {}
    for class_name in ("SchemaParserV22", "SchemaParserV3"):  # V3 overrides V22
        for node in classes[class_name].body:
            if isinstance(node, ast.FunctionDef):
                functions[node.name] = node
    return functions


def _row_keys(function: ast.FunctionDef) -> tuple[set[str], set[str]]:
    """String keys the function reads from row dicts: ``row['x']`` (required) and
    ``row.get('x')`` (optional)."""
    required: set[str] = set()
    optional: set[str] = set()
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            required.add(node.slice.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name)
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            optional.add(node.args[0].value)
    return required, optional


# Which SchemaParserV3 builder reads which system_schema table.
_READERS = {
    "keyspaces": ["_build_keyspace_metadata_internal"],
    "tables": ["_build_table_metadata"],
    "columns": ["_build_table_columns", "_build_column_metadata"],
    "types": ["_build_user_type"],
    "functions": ["_build_function"],
    "aggregates": ["_build_aggregate"],
    "views": ["_build_view_metadata"],
    "indexes": ["_build_index_metadata"],
    "triggers": ["_build_trigger_metadata"],
}
# Optional keys the driver reads with .get() that neither Scylla nor ringflow has: Cassandra 5's
# function flags.
_ABSENT_OPTIONAL = {"deterministic", "monotonic", "monotonic_on"}


def test_every_column_the_schema_parser_reads_is_defined() -> None:
    functions = _parser_functions()
    parser = driver_metadata.SchemaParserV3
    for table_name, readers in _READERS.items():
        defined = {column.name for column in system_table("system_schema", table_name).columns}
        for reader in readers:
            required, optional = _row_keys(functions[reader])
            assert required <= defined, (table_name, reader, required - defined)
            assert optional - _ABSENT_OPTIONAL <= defined, (table_name, reader, optional)
    # Keys read through class attributes rather than literals.
    assert system_table("system_schema", "tables").has_column(parser._table_name_col)
    functions_table = system_table("system_schema", "functions")
    assert functions_table.has_column(parser._function_agg_arument_type_col)


def test_every_table_option_the_parser_recognises_is_served_except_cassandra_only_ones() -> None:
    tables = system_table("system_schema", "tables")
    missing = {o for o in driver_metadata.SchemaParserV3.recognized_table_options}
    missing -= {column.name for column in tables.columns}
    # Cassandra 3's cdc boolean and DSE's in_memory: Scylla has neither column (its cdc
    # options are the 'cdc' extension).
    assert missing == {"cdc", "in_memory"}


def test_release_version_selects_the_v3_schema_parser_and_cql_version_matches_the_wire() -> None:
    from ringflow.cql import CQL_VERSION as WIRE_CQL_VERSION
    from ringflow.cql._responses import MURMUR3_PARTITIONER as WIRE_PARTITIONER

    parser = driver_metadata.get_schema_parser(FakeServer({}), RELEASE_VERSION, None, 10, None)
    assert type(parser) is driver_metadata.SchemaParserV3
    assert CQL_VERSION == WIRE_CQL_VERSION
    assert MURMUR3_PARTITIONER == WIRE_PARTITIONER
    # cqlsh's full_cql_version needs major.minor.patch integers.
    assert all(part.isdigit() for part in CQL_VERSION.split(".")) and CQL_VERSION.count(".") == 2


# --- the schema parser oracle ---------------------------------------------------------------


def test_the_driver_rebuilds_the_sample_keyspace_and_types_from_our_rows() -> None:
    state, _ = sample_state()
    keyspaces = driver_keyspaces(system_schema_mutations(state, TIMESTAMP_US))
    assert set(keyspaces) == {"shop", "system", "system_schema"}
    shop = keyspaces["shop"]
    assert shop.durable_writes is True
    assert shop.replication_strategy.export_for_schema() == (
        "{'class': 'NetworkTopologyStrategy', 'dc1': '3', 'dc2': '2'}"
    )
    address = shop.user_types["address"]
    assert (address.field_names, address.field_types) == (["street", "zip"], ["text", "int"])
    assert keyspaces["system"].replication_strategy.export_for_schema() == (
        "{'class': 'LocalStrategy'}"
    )


def test_the_driver_rebuilds_the_sample_table_with_keys_orders_types_and_options() -> None:
    state, _ = sample_state()
    keyspaces = driver_keyspaces(system_schema_mutations(state, TIMESTAMP_US))
    orders = keyspaces["shop"].tables["orders"]
    assert [c.name for c in orders.partition_key] == ["customer", "region"]
    assert [(c.name, c.is_reversed) for c in orders.clustering_key] == [
        ("day", True),
        ("seq", False),
    ]
    assert {name: c.cql_type for name, c in orders.columns.items()} == {
        c.name: c.type.cql_name() for c in ORDERS.columns
    }
    assert [name for name, c in orders.columns.items() if c.is_static] == ["note"]
    assert orders.options["comment"] == "orders by day"
    assert orders.options["default_time_to_live"] == 600
    assert orders.options["gc_grace_seconds"] == 864000
    assert not orders.is_compact_storage
    assert parse_cdc_extension(orders.extensions["cdc"]) == CDC.to_map()
    cql = orders.export_as_string()
    assert cql.startswith("CREATE TABLE shop.orders (\n    customer uuid,\n    region text,\n")
    assert "    note text static,\n" in cql
    assert "    ship_to address,\n" in cql and "    pair frozen<tuple<int, text>>,\n" in cql
    assert "PRIMARY KEY ((customer, region), day, seq)" in cql
    assert "WITH CLUSTERING ORDER BY (day DESC, seq ASC)" in cql
    assert "AND default_time_to_live = 600" in cql


def test_the_cdc_log_table_is_an_ordinary_table_to_the_driver() -> None:
    state, log = sample_state()
    mutations = system_schema_mutations(state, TIMESTAMP_US, compaction=log_aware_compaction)
    driver_log = driver_keyspaces(mutations)["shop"].tables[log.name]
    assert [c.name for c in driver_log.partition_key] == ["cdc$stream_id"]
    assert [c.name for c in driver_log.clustering_key] == ["cdc$time", "cdc$batch_seq_no"]
    assert set(driver_log.columns) == {column.name for column in log.columns}
    assert driver_log.options["caching"] == {
        "enabled": "false",
        "keys": "NONE",
        "rows_per_partition": "NONE",
    }
    assert driver_log.options["compaction"]["class"] == "TimeWindowCompactionStrategy"
    assert driver_log.options["comment"] == "CDC log for shop.orders"
    assert "cdc" not in driver_log.extensions  # CDC is off on the log itself
    assert '"cdc$stream_id" blob' in driver_log.export_as_string()


def test_the_driver_reads_every_system_table_back_as_we_define_it() -> None:
    keyspaces = driver_keyspaces(system_schema_mutations(SchemaState(), TIMESTAMP_US))
    assert set(keyspaces) == set(SYSTEM_KEYSPACES)
    for (keyspace, name), table in SYSTEM_TABLES.items():
        seen = keyspaces[keyspace].tables[name]
        assert [c.name for c in seen.partition_key] == [c.name for c in table.partition_key_columns]
        assert [c.name for c in seen.clustering_key] == [c.name for c in table.clustering_columns]
        assert {n: c.cql_type for n, c in seen.columns.items()} == {
            c.name: c.type.cql_name() for c in table.columns
        }


def test_column_rows_follow_cassandras_kind_position_and_order_conventions() -> None:
    state, _ = sample_state()
    rows = rows_by_table(system_schema_mutations(state, TIMESTAMP_US))
    columns = {
        row["column_name"]: row
        for row in rows[(SYSTEM_SCHEMA_KEYSPACE_NAME, "columns")]
        if row["keyspace_name"] == "shop" and row["table_name"] == "orders"
    }
    summary = {
        name: (row["kind"], row["position"], row["clustering_order"])
        for name, row in columns.items()
    }
    assert summary == {
        "customer": ("partition_key", 0, "none"),
        "region": ("partition_key", 1, "none"),
        "day": ("clustering", 0, "desc"),
        "seq": ("clustering", 1, "asc"),
        "note": ("static", -1, "none"),
        "total": ("regular", -1, "none"),
        "tags": ("regular", -1, "none"),
        "ship_to": ("regular", -1, "none"),
        "lines": ("regular", -1, "none"),
        "attrs": ("regular", -1, "none"),
        "pair": ("regular", -1, "none"),
    }
    assert all(row["column_name_bytes"] == name.encode() for name, row in columns.items())
    table_row = next(r for r in rows[("system_schema", "tables")] if r["table_name"] == "orders")
    assert table_row["flags"] == {"compound"} and table_row["id"] == ORDERS.id


def test_dropped_columns_are_recorded_with_udts_expanded_and_time_in_ms() -> None:
    state, _ = sample_state()
    rows = rows_by_table(system_schema_mutations(state, TIMESTAMP_US))
    (dropped,) = rows[("system_schema", "dropped_columns")]
    assert (dropped["keyspace_name"], dropped["table_name"]) == ("shop", "orders")
    assert dropped["column_name"] == "old_address"
    assert dropped["type"] == "list<frozen<tuple<text, int>>>"
    expected_ms = DROPPED_AT_US // 1000
    assert int(dropped["dropped_time"].timestamp() * 1000) == expected_ms


def test_expand_user_types_reaches_into_collections_and_tuples() -> None:
    nested = MapType(TEXT, TupleType((ADDRESS.frozen_form(), INT)))
    assert expand_user_types(nested).cql_name() == (
        "map<text, frozen<tuple<frozen<tuple<text, int>>, int>>>"
    )
    assert expand_user_types(SetType(TIMESTAMP)) == SetType(TIMESTAMP)


# --- replacing partitions -------------------------------------------------------------------


def _live(mutations: Iterable[Mutation]) -> Iterator[Mutation]:
    merged: dict[tuple[str, str, tuple[bytes, ...]], Mutation] = {}
    for mutation in mutations:
        key = (mutation.keyspace, mutation.table, mutation.partition_key)
        merged[key] = merge_mutations(merged[key], mutation) if key in merged else mutation
    for mutation in merged.values():
        yield purge_mutation(mutation, gc_before_s=0)


def test_each_schema_partition_is_replaced_whole_so_drops_disappear() -> None:
    state, _ = sample_state()
    before = system_schema_mutations(state, TIMESTAMP_US)
    for mutation in before:
        assert mutation.partition_deletion is not None
        assert mutation.partition_deletion.marked_for_delete_at_us == TIMESTAMP_US - 1
        assert set(mutation.timestamps_us()) <= {TIMESTAMP_US, TIMESTAMP_US - 1}
    smaller = SchemaState(keyspaces={"shop": SHOP}, tables={("shop", "orders"): ORDERS})
    after = system_schema_mutations(smaller, TIMESTAMP_US + 1_000_000)
    rows = rows_by_table(_live([*before, *after]))
    shop_tables = [r for r in rows[("system_schema", "tables")] if r["keyspace_name"] == "shop"]
    assert [row["table_name"] for row in shop_tables] == ["orders"]
    assert rows[("system_schema", "dropped_columns")] == []
    # Replaying the older rows after the newer ones changes nothing.
    assert rows == rows_by_table(_live([*after, *before]))


def test_a_dropped_keyspace_leaves_no_schema_rows() -> None:
    state, _ = sample_state()
    later = TIMESTAMP_US + 1_000_000
    deletions = dropped_keyspace_mutations("shop", later)
    assert sorted(m.table for m in deletions) == sorted(SYSTEM_SCHEMA_TABLE_NAMES)
    live = rows_by_table(_live([*system_schema_mutations(state, TIMESTAMP_US), *deletions]))
    assert all(row["keyspace_name"] != "shop" for rows in live.values() for row in rows)


# --- system.local, system.peers and the control connection ----------------------------------

SCHEMA_VERSION = uuid.UUID("59adb24e-f3cd-3e02-97f0-5b395827453f")


def _node(index: int) -> NodeRow:
    return NodeRow(
        host_id=uuid.UUID(int=index + 1),
        broadcast_address=ipaddress.ip_address(f"127.0.0.{index + 1}"),
        rpc_address=f"127.0.0.{index + 1}",
        data_center="dc1" if index < 2 else "dc2",
        rack=f"rack{index % 2}",
        tokens=(index * 1000 - 9_000_000_000_000_000_000, index * 1000 + 17),
        schema_version=SCHEMA_VERSION,
    )


def test_the_control_connection_builds_hosts_and_token_map_from_our_rows() -> None:
    nodes = [_node(index) for index in range(3)]
    rows = rows_by_table(
        [
            local_row(nodes[0], cluster_name="ringflow-test", timestamp_us=TIMESTAMP_US),
            *(peer_row(node, timestamp_us=TIMESTAMP_US) for node in nodes[1:]),
        ]
    )
    server = FakeServer(rows)
    cluster = Cluster(contact_points=["127.0.0.1"])
    try:
        control = ControlConnection(cluster, 1, 0, 0, 0)
        connection = types.SimpleNamespace(
            original_endpoint=None, endpoint=None, features=server.features
        )
        control._uses_peers_v2 = False  # what the driver decides for a node with sharding info
        peers_query = control._get_peers_query(ControlConnection.PeersQueryType.PEERS, connection)
        _, peers = server.answer(peers_query)
        _, local = server.answer(ControlConnection._SELECT_LOCAL)
        control._refresh_node_list_and_token_map(connection, preloaded_results=(peers, local))
        metadata = cluster.metadata
        assert metadata.cluster_name == "ringflow-test"
        assert metadata.partitioner == MURMUR3_PARTITIONER
        hosts = {host.host_id: host for host in metadata.all_hosts()}
        assert set(hosts) == {node.host_id for node in nodes}
        for node in nodes:
            host = hosts[node.host_id]
            assert host.address == str(node.rpc_address)
            assert (host.datacenter, host.rack) == (node.data_center, node.rack)
            assert host.release_version == RELEASE_VERSION
            assert host.broadcast_address == str(node.broadcast_address)
        owners = metadata.token_map.token_to_host_owner
        assert {(t.value, h.host_id) for t, h in owners.items()} == {
            (token, node.host_id) for node in nodes for token in node.tokens
        }
        assert isinstance(next(iter(owners)), Murmur3Token)
    finally:
        cluster.shutdown()


def test_cqlsh_finds_its_versions_in_select_star_from_system_local() -> None:
    rows = rows_by_table([local_row(_node(0), cluster_name="c", timestamp_us=TIMESTAMP_US)])
    _, result = FakeServer(rows).answer("select * from system.local where key = 'local'")
    (row,) = (dict(zip(result.column_names, values, strict=True)) for values in result.parsed_rows)
    assert row["release_version"] == RELEASE_VERSION and row["cql_version"] == CQL_VERSION
    assert row["bootstrapped"] == "COMPLETED" and row["native_protocol_version"] == "4"
    assert row["listen_address"] == "127.0.0.1" and row["gossip_generation"] is None


def test_tokens_replace_the_previous_set_and_none_leaves_a_column_alone() -> None:
    mutation = local_row(_node(1), cluster_name="c", timestamp_us=TIMESTAMP_US)
    (row,) = mutation.rows
    tokens = row.cells["tokens"]
    assert isinstance(tokens, ComplexColumn)
    assert tokens.deletion is not None
    assert tokens.deletion.marked_for_delete_at_us == TIMESTAMP_US - 1
    assert sorted(cell.path or b"" for cell in tokens.cells) == sorted(
        serialize(TEXT, str(token)) for token in _node(1).tokens
    )
    assert "gossip_generation" not in row.cells and "truncated_at" not in row.cells
    assert row.liveness is not None and row.liveness.timestamp_us == TIMESTAMP_US


def test_peer_removal_deletes_the_peer_partition() -> None:
    node = _node(2)
    written = peer_row(node, timestamp_us=TIMESTAMP_US, preferred_ip="10.0.0.3")
    removal = peer_removal(node.broadcast_address, timestamp_us=TIMESTAMP_US + 1)
    assert removal.partition_key == written.partition_key
    assert decode(written)[0]["preferred_ip"] == "10.0.0.3"
    assert list(_live([written, removal])) == [removal]


# --- system.cdc_local -------------------------------------------------------------------------


def test_cdc_local_rows_carry_the_generation_and_the_rewritten_marker() -> None:
    from ringflow.cdc import GenerationIdV2, cdc_local_generation_row

    generation = uuid.UUID("c0ffee00-0000-1000-8000-000000000001")
    (row,) = decode(cdc_local_row(1_650_000_000_123, generation, timestamp_us=TIMESTAMP_US))
    expected = cdc_local_generation_row(GenerationIdV2(1_650_000_000_123, generation))
    assert row["key"] == CDC_LOCAL_GENERATION_KEY == expected.key
    assert row["uuid"] == generation
    streams_timestamp = row["streams_timestamp"]
    assert streams_timestamp == expected.to_columns()["streams_timestamp"].replace(tzinfo=None)
    (v1,) = decode(cdc_local_row(1_650_000_000_123, None, timestamp_us=TIMESTAMP_US))
    assert "uuid" not in v1
    marker = cdc_rewritten_row(timestamp_us=TIMESTAMP_US)
    assert decode(marker) == [{"key": CDC_LOCAL_REWRITTEN_KEY}]
    assert marker.rows[0].liveness is not None  # the row exists with no value set


# --- the cdc extension --------------------------------------------------------------------


def test_cdc_extension_bytes_are_scyllas_little_endian_string_map() -> None:
    data = cdc_extension_bytes(CdcOptions(enabled=True))
    expected = b"\x05\x00\x00\x00"
    for key, value in [
        ("delta", "full"),
        ("enabled", "true"),
        ("postimage", "false"),
        ("preimage", "false"),
        ("ttl", "86400"),
    ]:
        for text in (key, value):
            expected += len(text).to_bytes(4, "little") + text.encode()
    assert data == expected
    with pytest.raises(SchemaError, match="malformed"):
        parse_cdc_extension(data[:-1])
    with pytest.raises(SchemaError, match="malformed"):
        parse_cdc_extension(data + b"\x00")


@given(
    st.builds(
        CdcOptions,
        enabled=st.booleans(),
        preimage=st.sampled_from(PreimageMode),
        postimage=st.booleans(),
        delta=st.sampled_from(DeltaMode),
        ttl_s=st.integers(0, 2**31 - 1),
    )
)
def test_cdc_extension_round_trips_every_option_set(options: CdcOptions) -> None:
    parsed = parse_cdc_extension(cdc_extension_bytes(options))
    assert parsed == options.to_map()
    assert CdcOptions.from_map(parsed) == options


def test_default_cdc_options_write_no_extension() -> None:
    plain = Table.create("shop", "plain", [("k", INT)], table_id=uuid.UUID(int=7))
    state = SchemaState(keyspaces={"shop": SHOP}, tables={("shop", "plain"): plain})
    rows = rows_by_table(
        system_schema_mutations(state, TIMESTAMP_US, include_system_keyspaces=False)
    )
    (table_row,) = rows[("system_schema", "tables")]
    assert table_row["extensions"] == {}
    assert {m for (_, m) in rows} <= set(SYSTEM_SCHEMA_TABLE_NAMES)
    assert {r["keyspace_name"] for rs in rows.values() for r in rs} == {"shop"}


# --- the generic builder's refusals -------------------------------------------------------------


def test_table_mutation_refuses_bad_rows() -> None:
    peers = system_table("system", "peers")
    columns = system_table("system_schema", "columns")
    with pytest.raises(SchemaError, match="undefined column"):
        table_mutation(peers, [{"peer": "127.0.0.1", "nope": 1}], TIMESTAMP_US)
    with pytest.raises(SchemaError, match="missing value for key column 'peer'"):
        table_mutation(peers, [{"rack": "r1"}], TIMESTAMP_US)
    with pytest.raises(SchemaError, match="share the partition key"):
        table_mutation(peers, [{"peer": "127.0.0.1"}, {"peer": "127.0.0.2"}], TIMESTAMP_US)
    row = {"keyspace_name": "k", "table_name": "t", "column_name": "c"}
    with pytest.raises(SchemaError, match="same clustering key"):
        table_mutation(columns, [row, dict(row)], TIMESTAMP_US)
    with pytest.raises(SchemaError, match="partition key values or rows"):
        table_mutation(columns, [], TIMESTAMP_US)


def test_rows_come_out_in_clustering_order() -> None:
    columns = system_table("system_schema", "columns")
    names = ["b", "a", "c"]
    rows = [{"keyspace_name": "k", "table_name": "t", "column_name": n} for n in names]
    mutation = table_mutation(columns, rows, TIMESTAMP_US)
    assert [r["column_name"] for r in decode(mutation)] == ["a", "b", "c"]


def test_a_row_written_with_a_ttl_expires_as_an_insert_using_ttl_would() -> None:
    """Row marker and every cell expire ``ttl_s`` after the timestamp's second; no TTL: live
    for ever; a bad TTL is refused."""
    peers = system_table("system", "peers")
    now_s = TIMESTAMP_US // 1_000_000
    mutation = table_mutation(
        peers, [{"peer": "127.0.0.1", "rack": "r1", "data_center": "d"}], TIMESTAMP_US, ttl_s=60
    )
    (row,) = mutation.rows
    assert row.liveness is not None and row.liveness.ttl_s == 60
    assert row.liveness.is_live(now_s + 59) and not row.liveness.is_live(now_s + 60)
    cells = [cell for cell in row.cells.values() if isinstance(cell, Cell)]
    assert len(cells) == 2 and all(c.ttl_s == 60 and not c.is_live(now_s + 60) for c in cells)
    plain = table_mutation(peers, [{"peer": "127.0.0.1", "rack": "r1"}], TIMESTAMP_US)
    assert plain.rows[0].liveness is not None and not plain.rows[0].liveness.is_expiring
    with pytest.raises(SchemaError, match="ttl_s"):
        table_mutation(peers, [{"peer": "127.0.0.1"}], TIMESTAMP_US, ttl_s=-1)
