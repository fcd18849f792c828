"""Schema statements through the executor: keyspaces, tables, CDC log tables, types, TRUNCATE.

Proves: each DDL form answers the right schema change (or Void under IF [NOT] EXISTS), updates
the store (tables registered/dropped) and the ``system_schema`` rows drivers read, survives a
restart, hands its changes to the backend's reaction (every one, in order; a failing reaction
undoes nothing) and invalidates prepared statements it affects.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.cql import ProcessorBackend, Query, QueryParameters
from ringflow.cql._results import (
    SchemaChange,
    SchemaChangeResult,
    SchemaChangeTarget,
    SchemaChangeType,
    VoidResult,
)
from ringflow.errors import Consistency, ErrorCode
from ringflow.ring import MIN_TOKEN
from ringflow.schema import ClusteringOrder, ColumnKind
from tests.unit.cql._exec_harness import KEYSPACE_CQL, ExecNode, node_with_keyspace

CREATED, UPDATED, DROPPED = (
    SchemaChangeType.CREATED,
    SchemaChangeType.UPDATED,
    SchemaChangeType.DROPPED,
)
KEYSPACE, TABLE, TYPE = (
    SchemaChangeTarget.KEYSPACE,
    SchemaChangeTarget.TABLE,
    SchemaChangeTarget.TYPE,
)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path)
    yield node
    node.close()


def change(response: object) -> SchemaChange:
    assert isinstance(response, SchemaChangeResult), response
    return response.change


def schema_tables(node: ExecNode, keyspace: str) -> list[str]:
    rows = node.ok(
        "SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?",
        keyspace.encode(),
    )
    return [row[0] for row in rows]


# --- keyspaces -----------------------------------------------------------------------------------


def test_create_keyspace_is_announced_and_visible_in_system_schema(tmp_path: Path) -> None:
    node = ExecNode(tmp_path)
    assert change(node.q(KEYSPACE_CQL)) == SchemaChange(CREATED, KEYSPACE, "ks")
    assert node.processor.take_schema_changes() == (SchemaChange(CREATED, KEYSPACE, "ks"),)
    rows = node.ok("SELECT keyspace_name, durable_writes, replication FROM system_schema.keyspaces")
    assert (
        "ks",
        True,
        {"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "1"},
    ) in rows
    assert {row[0] for row in rows} >= {"system", "system_schema", "system_distributed"}
    node.close()


KEYSPACE_CASES = [
    # (statement, expected error code or None for success)
    ("CREATE KEYSPACE IF NOT EXISTS ks WITH replication = {'class': 'SimpleStrategy', "
     "'replication_factor': 3}", None),
    (KEYSPACE_CQL, ErrorCode.ALREADY_EXISTS),
    ("CREATE KEYSPACE k2 WITH replication = {'class': 'Bogus'}", ErrorCode.CONFIG_ERROR),
    ("CREATE KEYSPACE k2 WITH replication = {'class': 'SimpleStrategy'}", None),
    ("CREATE KEYSPACE k2 WITH replication = {'replication_factor': 1}", ErrorCode.CONFIG_ERROR),
    ("CREATE KEYSPACE k2 WITH replication = {'class': 'NetworkTopologyStrategy', 'nodc': 3}",
     ErrorCode.CONFIG_ERROR),
    ("CREATE KEYSPACE k2 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1, "
     "'dc1': 2}", ErrorCode.CONFIG_ERROR),
    ("CREATE KEYSPACE k2 WITH durable_writes = true", ErrorCode.INVALID),
    ("CREATE KEYSPACE k2 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1} "
     "AND colour = 'red'", ErrorCode.SYNTAX_ERROR),
    ("CREATE KEYSPACE k2 WITH replication = {'class': 'NetworkTopologyStrategy', "
     "'replication_factor': 3}", None),
    ("CREATE KEYSPACE system WITH replication = {'class': 'SimpleStrategy', "
     "'replication_factor': 1}", ErrorCode.ALREADY_EXISTS),
    ("ALTER KEYSPACE nope WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
     ErrorCode.INVALID),
    ("ALTER KEYSPACE system_schema WITH durable_writes = false", ErrorCode.UNAUTHORIZED),
    ("DROP KEYSPACE nope", ErrorCode.INVALID),
    ("DROP KEYSPACE IF EXISTS nope", None),
    ("DROP KEYSPACE system", ErrorCode.UNAUTHORIZED),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "code"), KEYSPACE_CASES)
def test_keyspace_statements(node: ExecNode, statement: str, code: ErrorCode | None) -> None:
    response = node.q(statement)
    if code is None:
        assert isinstance(response, SchemaChangeResult | VoidResult), response
    else:
        assert response.code == code, response


def test_alter_and_drop_keyspace(node: ExecNode) -> None:
    node.ok("CREATE TABLE t (k int PRIMARY KEY, v int)")
    altered = node.q(
        "ALTER KEYSPACE ks WITH replication = {'class': 'NetworkTopologyStrategy', "
        "'datacenter1': 2}"
    )
    assert change(altered) == SchemaChange(UPDATED, KEYSPACE, "ks")
    replication = node.processor.schema.keyspaces["ks"].replication
    assert replication == {
        "class": "org.apache.cassandra.locator.NetworkTopologyStrategy",
        "datacenter1": "2",
    }
    assert change(node.q("DROP KEYSPACE ks")) == SchemaChange(DROPPED, KEYSPACE, "ks")
    assert ("ks", "t") not in {(t.keyspace, t.name) for t in node.store.tables()}
    assert node.ok("SELECT * FROM system_schema.keyspaces WHERE keyspace_name = 'ks'") == []
    assert node.ok("SELECT * FROM system_schema.columns WHERE keyspace_name = 'ks'") == []
    assert node.error("SELECT * FROM ks.t").code == ErrorCode.INVALID


# --- tables --------------------------------------------------------------------------------------


def test_create_table_with_every_column_kind_and_options(node: ExecNode) -> None:
    response = node.q(
        "CREATE TABLE t (k int, k2 text, c timeuuid, c2 int, s int static, v list<int>, "
        "m map<text, frozen<set<int>>>, PRIMARY KEY ((k, k2), c, c2)) "
        "WITH CLUSTERING ORDER BY (c DESC, c2 ASC) AND default_time_to_live = 60 "
        "AND gc_grace_seconds = 10 AND comment = 'hello' AND compaction = {'class': 'X'}"
    )
    assert change(response) == SchemaChange(CREATED, TABLE, "ks", "t")
    table = node.processor.schema.tables[("ks", "t")]
    assert [c.name for c in table.partition_key_columns] == ["k", "k2"]
    assert [(c.name, c.order) for c in table.clustering_columns] == [
        ("c", ClusteringOrder.DESC),
        ("c2", ClusteringOrder.ASC),
    ]
    assert table.column("s").kind is ColumnKind.STATIC
    options = table.options
    assert (options.default_time_to_live_s, options.gc_grace_seconds, options.comment) == (
        60,
        10,
        "hello",
    )
    assert node.store.table("ks", "t").id == table.id
    rows = node.ok(
        "SELECT column_name, kind, position, clustering_order, type FROM system_schema.columns "
        "WHERE keyspace_name = 'ks' AND table_name = 't'"
    )
    assert ("c", "clustering", 0, "desc", "timeuuid") in rows
    assert ("m", "regular", -1, "none", "map<text, frozen<set<int>>>") in rows
    options_row = node.ok(
        "SELECT default_time_to_live, gc_grace_seconds, comment, flags FROM system_schema.tables "
        "WHERE keyspace_name = 'ks' AND table_name = 't'"
    )
    assert options_row == [(60, 10, "hello", frozenset({"compound"}))]


TABLE_ERRORS = [
    ("CREATE TABLE t (k int, v int)", ErrorCode.SYNTAX_ERROR),
    ("CREATE TABLE t (k int PRIMARY KEY, v counter)", ErrorCode.INVALID),
    ("CREATE TABLE t (k int PRIMARY KEY, v int) WITH flavour = 'x'", ErrorCode.SYNTAX_ERROR),
    ("CREATE TABLE t (k int PRIMARY KEY, v int) WITH default_time_to_live = -1", ErrorCode.INVALID),
    ("CREATE TABLE t (k int PRIMARY KEY, v int) WITH cdc = {'enabled': 'maybe'}",
     ErrorCode.INVALID),
    ("CREATE TABLE t (k int PRIMARY KEY, s int static)", ErrorCode.INVALID),
    ("CREATE TABLE t (k list<int> PRIMARY KEY)", ErrorCode.INVALID),
    ("CREATE TABLE t (k int, c duration, PRIMARY KEY (k, c))", ErrorCode.INVALID),
    ("CREATE TABLE t (k int, c int, PRIMARY KEY (k, x))", ErrorCode.INVALID),
    ("CREATE TABLE t (k int, c int, d int, PRIMARY KEY (k, c, d)) "
     "WITH CLUSTERING ORDER BY (d DESC, c ASC)", ErrorCode.INVALID),
    ("CREATE TABLE t (k int PRIMARY KEY) WITH COMPACT STORAGE", ErrorCode.INVALID),
    ("CREATE TABLE nope.t (k int PRIMARY KEY)", ErrorCode.INVALID),
    ("CREATE TABLE system.t (k int PRIMARY KEY)", ErrorCode.UNAUTHORIZED),
    ("CREATE TABLE t (k int PRIMARY KEY, u nosuchtype)", ErrorCode.INVALID),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "code"), TABLE_ERRORS)
def test_create_table_errors(node: ExecNode, statement: str, code: ErrorCode) -> None:
    assert node.error(statement).code == code
    assert ("ks", "t") not in node.processor.schema.tables


def test_create_existing_table(node: ExecNode) -> None:
    node.ok("CREATE TABLE t (k int PRIMARY KEY)")
    error = node.error("CREATE TABLE t (k int PRIMARY KEY)")
    assert (error.code, error.keyspace, error.table) == (ErrorCode.ALREADY_EXISTS, "ks", "t")
    assert isinstance(node.q("CREATE TABLE IF NOT EXISTS t (k int PRIMARY KEY)"), VoidResult)


def test_no_keyspace_in_session(tmp_path: Path) -> None:
    node = ExecNode(tmp_path)
    error = node.error("CREATE TABLE t (k int PRIMARY KEY)")
    assert error.code == ErrorCode.INVALID and "No keyspace has been specified" in error.message
    assert node.error("USE nope").code == ErrorCode.INVALID
    node.close()


def test_cdc_table_creates_its_log_table(node: ExecNode) -> None:
    seen: list[tuple[SchemaChange, ...]] = []
    backend = ProcessorBackend(node.processor, on_schema_change=seen.append)
    text = "CREATE TABLE t (k int, c int, v text, PRIMARY KEY (k, c)) WITH cdc = {'enabled': true}"
    handled = backend.handle(node.session, Query(text, QueryParameters(Consistency.ONE)))
    changes = (
        SchemaChange(CREATED, TABLE, "ks", "t"),
        SchemaChange(CREATED, TABLE, "ks", "t_scylla_cdc_log"),
    )
    assert handled.schema_changes == changes
    assert seen == [changes]  # one reaction for the statement, with every change
    assert schema_tables(node, "ks") == ["t", "t_scylla_cdc_log"]
    log = node.store.table("ks", "t_scylla_cdc_log")
    assert {"cdc$stream_id", "cdc$time", "cdc$operation", "cdc$deleted_v", "k", "c"} <= {
        c.name for c in log.columns
    }
    extensions = node.ok(
        "SELECT extensions, compaction FROM system_schema.tables WHERE keyspace_name = 'ks' "
        "AND table_name IN ('t', 't_scylla_cdc_log')"
    )
    assert "cdc" in extensions[0][0]
    assert extensions[1][1]["class"] == "TimeWindowCompactionStrategy"


def test_alter_table_keeps_the_log_in_step_and_disabling_keeps_it(node: ExecNode) -> None:
    node.ok("CREATE TABLE t (k int PRIMARY KEY, v int)")
    assert change(node.q("ALTER TABLE t WITH cdc = {'enabled': true}")) == SchemaChange(
        UPDATED, TABLE, "ks", "t"
    )
    assert ("ks", "t_scylla_cdc_log") in node.processor.schema.tables
    node.ok("ALTER TABLE t ADD w set<int>")
    log = node.processor.schema.tables[("ks", "t_scylla_cdc_log")]
    assert {"w", "cdc$deleted_w", "cdc$deleted_elements_w"} <= {c.name for c in log.columns}
    node.ok("ALTER TABLE t DROP v")
    log = node.processor.schema.tables[("ks", "t_scylla_cdc_log")]
    assert not log.has_column("v") and not log.has_column("cdc$deleted_v")
    assert node.store.table("ks", "t_scylla_cdc_log") == log
    node.ok("ALTER TABLE t WITH cdc = {'enabled': false}")
    assert ("ks", "t_scylla_cdc_log") in node.processor.schema.tables
    node.ok("DROP TABLE t_scylla_cdc_log")
    assert ("ks", "t_scylla_cdc_log") not in node.processor.schema.tables


def test_drop_table_drops_its_log(node: ExecNode) -> None:
    node.ok("CREATE TABLE t (k int PRIMARY KEY, v int) WITH cdc = {'enabled': true}")
    assert node.error("DROP TABLE t_scylla_cdc_log").code == ErrorCode.INVALID
    assert node.error("ALTER TABLE t_scylla_cdc_log ADD x int").code == ErrorCode.INVALID
    assert change(node.q("DROP TABLE t")) == SchemaChange(DROPPED, TABLE, "ks", "t")
    assert schema_tables(node, "ks") == []
    names = {(t.keyspace, t.name) for t in node.store.tables()}
    assert ("ks", "t") not in names and ("ks", "t_scylla_cdc_log") not in names
    assert isinstance(node.q("DROP TABLE IF EXISTS t"), VoidResult)
    assert node.error("DROP TABLE t").message == "unconfigured table t"


ALTER_CASES = [
    ("ALTER TABLE t ADD v int", ErrorCode.INVALID),
    ("ALTER TABLE t ADD IF NOT EXISTS v int", None),
    ("ALTER TABLE t ADD (x int, y text)", "UPDATED"),
    ("ALTER TABLE t ADD s int static", ErrorCode.INVALID),
    ("ALTER TABLE t DROP k", ErrorCode.INVALID),
    ("ALTER TABLE t DROP nope", ErrorCode.INVALID),
    ("ALTER TABLE t DROP IF EXISTS nope", None),
    ("ALTER TABLE t RENAME k TO kk", "UPDATED"),
    ("ALTER TABLE t RENAME v TO w", ErrorCode.INVALID),
    ("ALTER TABLE t WITH comment = 'c' AND gc_grace_seconds = 5", "UPDATED"),
    ("ALTER TABLE t WITH bogus = 1", ErrorCode.SYNTAX_ERROR),
    ("ALTER TABLE nope ADD x int", ErrorCode.INVALID),
    ("ALTER TABLE IF EXISTS nope ADD x int", None),
]


@pytest.mark.parametrize(("statement", "expected"), ALTER_CASES)
def test_alter_table(node: ExecNode, statement: str, expected: ErrorCode | str | None) -> None:
    node.ok("CREATE TABLE t (k int PRIMARY KEY, v int)")
    response = node.q(statement)
    if expected is None:
        assert isinstance(response, VoidResult), response
    elif expected == "UPDATED":
        assert change(response) == SchemaChange(UPDATED, TABLE, "ks", "t")
    else:
        assert response.code == expected, response


def test_dropped_column_is_recorded(node: ExecNode) -> None:
    node.ok("CREATE TABLE t (k int PRIMARY KEY, v int)")
    node.ok("ALTER TABLE t DROP v")
    rows = node.ok(
        "SELECT column_name, type FROM system_schema.dropped_columns WHERE keyspace_name = 'ks'"
    )
    assert rows == [("v", "int")]


def test_a_column_dropped_and_added_again_never_shows_its_old_cells(tmp_path: Path) -> None:
    """Cassandra keeps the drop time (system_schema.dropped_columns) and skips that column's
    cells written at or before it, also once the column is added again: at read, after a
    restart, after compaction and in the raw partitions streaming and repair move. Before,
    the old values came back with the column."""
    node = node_with_keyspace(tmp_path)
    node.ok(
        "CREATE TABLE r (k int, c int, v int, w int, s int static, m map<int, int>, "
        "PRIMARY KEY (k, c))"
    )
    node.ok("INSERT INTO r (k, c, v, w, s, m) VALUES (1, 1, 5, 6, 7, {1: 1})")
    node.ok("INSERT INTO r (k, c, v) VALUES (1, 2, 8) USING TIMESTAMP 1")
    node.clock.advance(1)
    for column in ("v", "s", "m"):
        node.ok(f"ALTER TABLE r DROP {column}")
    node.clock.advance(1)
    node.ok("ALTER TABLE r ADD v int")
    node.ok("ALTER TABLE r ADD s int static")
    node.ok("ALTER TABLE r ADD m map<int, int>")
    query = "SELECT c, v, w, s, m FROM ks.r WHERE k = 1"
    assert node.ok(query) == [(1, None, 6, None, None), (2, None, None, None, None)]
    node.ok("UPDATE r SET v = 9, m = m + {3: 3} WHERE k = 1 AND c = 1")
    node.ok("INSERT INTO r (k, c, v) VALUES (1, 3, 4) USING TIMESTAMP 2")  # before the drop
    expected = [(1, 9, 6, None, {3: 3}), (2, None, None, None, None), (3, None, None, None, None)]
    assert node.ok(query) == expected
    node.restart()
    assert node.ok(query) == expected
    node.store.compact(("ks", "r"), now_s=node.clock.now_us // 1_000_000)
    assert node.ok(query) == expected
    page = node.store.scan_mutations(("ks", "r"), MIN_TOKEN, MIN_TOKEN, page_size=10)
    (streamed,) = page.mutations
    old = [(name, data) for row in streamed.rows for name, data in row.cells.items()]
    assert sorted(name for name, _ in old) == ["m", "v", "w"]  # only what was written after
    assert node.processor.internal_errors == 0
    node.close()


ENGINE_COLUMNS = (
    "bloom_filter_fp_chance, caching, compaction, compression, crc_check_chance, "
    "max_index_interval, memtable_flush_period_in_ms, min_index_interval, speculative_retry"
)


def test_storage_engine_table_properties_are_kept_and_shown(tmp_path: Path) -> None:
    """CREATE/ALTER ... WITH min_index_interval (and the other TableParams) show back in
    system_schema.tables and survive a restart; before, they were accepted and dropped."""
    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TABLE p (k int PRIMARY KEY) WITH min_index_interval = 64")
    node.ok(
        "ALTER TABLE p WITH max_index_interval = 1024 AND bloom_filter_fp_chance = 0.1 "
        "AND caching = {'keys': 'NONE', 'rows_per_partition': 'ALL'} AND crc_check_chance = 0.5 "
        "AND compaction = {'class': 'LeveledCompactionStrategy', 'sstable_size_in_mb': 160} "
        "AND compression = {'class': 'LZ4Compressor'} AND speculative_retry = '99p' "
        "AND memtable_flush_period_in_ms = 10"
    )
    query = (
        f"SELECT {ENGINE_COLUMNS} FROM system_schema.tables WHERE table_name = 'p' ALLOW FILTERING"
    )
    expected = [
        (
            0.1,
            {"keys": "NONE", "rows_per_partition": "ALL"},
            {"class": "LeveledCompactionStrategy", "sstable_size_in_mb": "160"},
            {"class": "LZ4Compressor"},
            0.5,
            1024,
            10,
            64,
            "99p",
        )
    ]
    assert node.ok(query) == expected
    node.restart()
    assert node.ok(query) == expected
    node.ok("CREATE TABLE ks.q (k int PRIMARY KEY)")  # defaults unchanged
    (defaults,) = node.ok(query.replace("'p'", "'q'"))
    assert defaults[5:] == (2048, 0, 128, "99.0PERCENTILE")
    node.close()


ENGINE_ERRORS = [
    ("min_index_interval = 0", "min_index_interval must be greater than or equal to 1 (got 0)"),
    ("max_index_interval = 10", "max_index_interval must be greater than or equal to"),
    ("bloom_filter_fp_chance = 2", "bloom_filter_fp_chance must be larger than"),
    ("crc_check_chance = 1.5", "crc_check_chance must be larger than or equal to 0"),
    ("memtable_flush_period_in_ms = -1", "memtable_flush_period_in_ms must be greater than"),
    ("speculative_retry = 'sometimes'", "Invalid value sometimes for option 'speculative_retry'"),
    ("compaction = {'x': 'y'}", "Missing sub-option 'class' for the 'compaction' option"),
]


@pytest.mark.parametrize(("option", "message"), ENGINE_ERRORS)
def test_bad_storage_engine_properties_are_configuration_errors(
    node: ExecNode, option: str, message: str
) -> None:
    node.ok("CREATE TABLE IF NOT EXISTS e (k int PRIMARY KEY)")
    error = node.error(f"ALTER TABLE e WITH {option}")
    assert error.code == ErrorCode.CONFIG_ERROR and message in error.message, error


# --- types and truncate --------------------------------------------------------------------------


def test_user_types(node: ExecNode) -> None:
    assert change(node.q("CREATE TYPE addr (street text, zip int)")) == SchemaChange(
        CREATED, TYPE, "ks", "addr"
    )
    exists = node.error("CREATE TYPE addr (x int)")
    assert (exists.code, exists.message) == (
        ErrorCode.ALREADY_EXISTS,
        "cannot create type ks.addr: it already exists",
    )
    assert isinstance(node.q("CREATE TYPE IF NOT EXISTS addr (x int)"), VoidResult)
    node.ok("CREATE TYPE holder (l list<int>)")  # as Cassandra; test_exec_udt_collections
    assert node.error("CREATE TYPE bad (a addr)").code == ErrorCode.INVALID  # a non-frozen UDT
    node.ok("CREATE TYPE person (name text, home frozen<addr>)")
    node.ok("CREATE TABLE t (k int PRIMARY KEY, p person)")
    rows = node.ok("SELECT type_name, field_names, field_types FROM system_schema.types")
    assert ("addr", ["street", "zip"], ["text", "int"]) in rows
    assert node.error("DROP TYPE addr").code == ErrorCode.INVALID
    assert node.error("DROP TYPE person").code == ErrorCode.INVALID
    node.ok("DROP TABLE t")
    assert change(node.q("DROP TYPE person")) == SchemaChange(DROPPED, TYPE, "ks", "person")
    assert node.error("DROP TYPE person").code == ErrorCode.INVALID
    assert isinstance(node.q("DROP TYPE IF EXISTS person"), VoidResult)


def test_truncate_removes_every_row(node: ExecNode) -> None:
    node.ok("CREATE TABLE t (k int PRIMARY KEY, v int)")
    for key in range(5):
        node.ok(f"INSERT INTO t (k, v) VALUES ({key}, 1)")
    node.ok("INSERT INTO t (k, v) VALUES (9, 1) USING TIMESTAMP 9000000000000000000")
    assert isinstance(node.q("TRUNCATE t"), VoidResult)
    assert node.ok("SELECT * FROM t") == []
    node.ok("INSERT INTO t (k, v) VALUES (1, 2)")
    assert node.ok("SELECT * FROM t") == [(1, 2)]
    assert node.error("TRUNCATE nope").code == ErrorCode.INVALID
    assert node.error("TRUNCATE system.local").code == ErrorCode.UNAUTHORIZED


# --- durability ----------------------------------------------------------------------------------


def test_schema_survives_a_restart(node: ExecNode) -> None:
    node.ok("CREATE TYPE addr (street text, zip int)")
    node.ok('CREATE TYPE "Person" (name text, home frozen<addr>)')
    node.ok(
        'CREATE TABLE t (k int PRIMARY KEY, p frozen<"Person">, v int) '
        "WITH cdc = {'enabled': true}"
    )
    node.ok("ALTER TABLE t DROP v")
    node.ok("INSERT INTO t (k, p) VALUES (1, {name: 'a', home: {street: 's', zip: 1}})")
    before = node.processor.schema
    version = node.processor.schema_version
    node.restart()
    after = node.processor.schema
    assert after.tables == before.tables
    assert after.keyspaces["ks"].user_types == before.keyspaces["ks"].user_types
    assert set(after.dropped_columns) == set(before.dropped_columns)
    assert node.processor.schema_version == version
    node.ok("USE ks")
    assert node.ok("SELECT k, p FROM t") == [(1, {"name": "a", "home": {"street": "s", "zip": 1}})]
    node.ok("CREATE TABLE t2 (k int PRIMARY KEY)")
    assert schema_tables(node, "ks") == ["t", "t2", "t_scylla_cdc_log"]


def test_schema_change_invalidates_prepared_statements(node: ExecNode) -> None:
    node.ok("CREATE TABLE t (k int PRIMARY KEY, v int)")
    node.ok("CREATE TABLE u (k int PRIMARY KEY, v int)")
    on_t = node.prepare("SELECT * FROM t WHERE k = ?")
    on_u = node.prepare("SELECT * FROM u WHERE k = ?")
    node.ok("ALTER TABLE t ADD w int")
    assert on_t.statement_id not in node.processor.prepared_statements
    assert on_u.statement_id in node.processor.prepared_statements
    assert node.execute(on_t.statement_id, [b"\x00\x00\x00\x01"]).code == ErrorCode.UNPREPARED


def test_a_failing_reaction_does_not_undo_the_change(node: ExecNode) -> None:
    def broken(changes: tuple[SchemaChange, ...]) -> None:
        raise RuntimeError("reaction bug")

    backend = ProcessorBackend(node.processor, on_schema_change=broken)
    query = Query("CREATE TABLE t (k int PRIMARY KEY)", QueryParameters(Consistency.ONE))
    handled = backend.handle(node.session, query)
    assert change(handled.response) == SchemaChange(CREATED, TABLE, "ks", "t")
    assert ("ks", "t") in node.processor.schema.tables
    assert node.processor.internal_errors == 0


def test_a_table_lost_by_the_store_is_rebuilt_from_system_schema(node: ExecNode) -> None:
    node.ok("CREATE TYPE addr (street text, zip int)")
    node.ok(
        "CREATE TABLE t (k int, c timeuuid, s int static, l list<frozen<addr>>, m map<int, text>, "
        "PRIMARY KEY (k, c)) WITH CLUSTERING ORDER BY (c DESC) AND comment = 'x' "
        "AND default_time_to_live = 9 AND cdc = {'enabled': true, 'preimage': 'full'}"
    )
    before = node.processor.schema.tables[("ks", "t")]
    node.store.drop_table("ks", "t")  # as if TRUNCATE crashed between drop and re-register
    node.restart()
    assert node.processor.schema.tables[("ks", "t")] == before
    assert node.store.table("ks", "t") == before
    node.processor.validate()


def test_the_migration_chain_survives_a_restart(node: ExecNode) -> None:
    versions = [node.processor.schema.version]

    def step(statement: str) -> None:
        node.ok(statement)
        assert node.processor.schema.version != versions[-1], statement
        versions.append(node.processor.schema.version)

    step("ALTER KEYSPACE ks WITH durable_writes = false")
    step("CREATE TYPE addr (street text, zip int)")
    step("CREATE TYPE gone (x int)")
    step("DROP TYPE gone")
    step("CREATE TABLE t (k int PRIMARY KEY, a frozen<addr>, v int) WITH cdc = {'enabled': true}")
    step("ALTER TABLE t DROP v")
    step("ALTER TABLE t ADD w text")
    step("CREATE TABLE u (k int PRIMARY KEY)")
    step("DROP TABLE u")
    assert node.error("DROP TYPE addr").code == ErrorCode.INVALID
    before, digest = node.processor.schema, node.processor.schema_version
    assert len(before.migrations) > len(versions) - 1  # the CDC log's own migrations too
    node.restart()
    assert node.processor.schema == before
    assert node.processor.schema.chain == before.chain
    assert node.processor.schema_version == digest
    node.processor.validate()
    node.ok("USE ks")
    node.ok("CREATE TABLE after (k int PRIMARY KEY)")
    assert node.processor.schema.migrations[-1].previous_version == before.version
    again = node.processor.schema
    node.restart()
    assert node.processor.schema == again
    assert node.processor.reload_schema() is False


def test_a_store_without_migrations_loads_from_system_schema(node: ExecNode) -> None:
    node.ok("CREATE TYPE addr (street text, zip int)")
    node.ok("CREATE TABLE t (k int PRIMARY KEY, a frozen<addr>)")
    before, digest = node.processor.schema, node.processor.schema_version
    node.store.drop_table("system", "schema_migrations")  # a store written before migrations
    node.restart()
    after = node.processor.schema
    assert after.migrations == ()
    assert (after.keyspaces, after.tables) == (before.keyspaces, before.tables)
    assert node.processor.schema_version == digest
    node.ok("USE ks")
    node.ok("DROP TABLE t")
    node.restart()
    assert len(node.processor.schema.migrations) == 1
    assert ("ks", "t") not in node.processor.schema.tables
