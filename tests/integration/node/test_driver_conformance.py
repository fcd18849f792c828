"""Issue 20, the last items, against one real node through the Scylla Python driver.

Proves: bind markers inside nested ``blobAsX``/``xAsBlob`` calls get the types (and names)
Cassandra infers and the values bind; ``DESCRIBE CLUSTER`` lists every range of the ring with
its replica endpoints; ``DESCRIBE ... WITH INTERNALS`` shows dropped columns as Cassandra's
``ALTER TABLE ... DROP ... USING TIMESTAMP`` lines and the script recreates them; renaming key
columns reaches the driver's metadata, re-prepared statements and the CDC log (as Scylla's);
user types with non-frozen collections round-trip frozen (JSON and CDC log too) and are refused
as non-frozen columns; empty values sort first in clustering keys and live inside collections.
Each failed before this change.
"""

from __future__ import annotations

import pytest
from cassandra import InvalidRequest
from cassandra.cluster import Cluster, Session

from ringflow.cli._demo_cluster import NodeProcess
from tests.integration.node.conftest import saved_tokens

KEYSPACE = "conform"


@pytest.fixture(scope="module")
def keyspace(session: Session) -> str:
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    session.set_keyspace(KEYSPACE)
    return KEYSPACE


def bind_columns(session: Session, query: str) -> list[tuple[str, str]]:
    prepared = session.prepare(query)
    return [
        (column.name, column.type.cql_parameterized_type()) for column in prepared.column_metadata
    ]


def test_blob_conversions_infer_bind_types_through_nested_calls(
    session: Session, keyspace: str
) -> None:
    session.execute("CREATE TABLE blobs (k int PRIMARY KEY, v int, b blob)")
    insert = "INSERT INTO blobs (k, v, b) VALUES (?, blobAsInt(intAsBlob(?)), textAsBlob(?))"
    assert bind_columns(session, insert) == [
        ("k", "int"),
        ("arg0(system.intasblob)", "int"),
        ("arg0(system.textasblob)", "varchar"),  # the driver names text so
    ]
    session.execute(session.prepare(insert), (1, 7, "hi"))
    select = "SELECT v, blobAsText(b) FROM blobs WHERE k = blobAsInt(?)"
    assert bind_columns(session, select) == [("arg0(system.blobasint)", "blob")]
    row = session.execute(session.prepare(select), (b"\x00\x00\x00\x01",)).one()
    assert tuple(row) == (7, "hi")
    nested = session.prepare("SELECT blobAsText(textAsBlob(?)) FROM blobs")
    assert [c.type.cql_parameterized_type() for c in nested.column_metadata] == ["varchar"]
    assert session.execute(nested, ("echo",)).one()[0] == "echo"
    with pytest.raises(InvalidRequest, match="Type error"):
        session.prepare("INSERT INTO blobs (k, v) VALUES (?, blobAsText(?))")


def test_describe_cluster_lists_every_range_and_its_replica(
    session: Session, keyspace: str, node: NodeProcess
) -> None:
    row = session.execute("DESCRIBE CLUSTER").one()
    ownership = dict(row.range_ownership)
    assert sorted(ownership, key=int) == [str(t) for t in sorted(saved_tokens(node))]
    assert set(map(tuple, ownership.values())) == {(f"/{node.address}:7000",)}


def test_describe_with_internals_shows_dropped_columns(
    session: Session, keyspace: str, cluster: Cluster
) -> None:
    session.execute("CREATE TABLE evolving (k int PRIMARY KEY, v text, d int)")
    session.execute("INSERT INTO evolving (k, v, d) VALUES (1, 'a', 5)")
    session.execute("ALTER TABLE evolving DROP d USING TIMESTAMP 1700000000000000")
    session.execute("ALTER TABLE evolving DROP v")
    session.execute("ALTER TABLE evolving ADD v text")
    (row,) = session.execute("DESCRIBE TABLE evolving WITH INTERNALS")
    script = row.create_statement
    assert "    k int,\n    d int,\n    v text,\n    PRIMARY KEY (k)\n" in script
    lines = script.split("\n")
    assert lines[-3:] == [
        "ALTER TABLE conform.evolving DROP d USING TIMESTAMP 1700000000000000;",
        lines[-2],
        "ALTER TABLE conform.evolving ADD v text;",
    ]
    assert lines[-2].startswith("ALTER TABLE conform.evolving DROP v USING TIMESTAMP ")
    assert session.execute("SELECT v FROM evolving WHERE k = 1").one().v is None
    session.execute("DROP TABLE evolving")
    for statement in script.split(";\n"):
        session.execute(statement.removesuffix(";"))
    (again,) = session.execute("DESCRIBE TABLE evolving WITH INTERNALS")
    assert again.create_statement == script
    dropped = session.execute(
        f"SELECT column_name, dropped_time FROM system_schema.dropped_columns "
        f"WHERE keyspace_name = '{keyspace}' AND table_name = 'evolving'"
    )
    assert [r.column_name for r in dropped] == ["d", "v"]


def test_rename_of_key_columns_reaches_metadata_and_prepared_statements(
    session: Session, keyspace: str, cluster: Cluster
) -> None:
    session.execute(
        "CREATE TABLE renamed (k int, c int, v text, PRIMARY KEY (k, c)) "
        "WITH cdc = {'enabled': true}"
    )
    session.execute("INSERT INTO renamed (k, c, v) VALUES (1, 2, 'before')")
    select = session.prepare("SELECT * FROM renamed")
    assert list(session.execute(select).one()._fields) == ["k", "c", "v"]
    session.execute("ALTER TABLE renamed RENAME k TO key AND c TO ck")
    assert session.wait_for_schema_agreement()
    cluster.refresh_table_metadata(keyspace, "renamed")
    table = cluster.metadata.keyspaces[keyspace].tables["renamed"]
    assert [c.name for c in table.partition_key] == ["key"]
    assert [c.name for c in table.clustering_key] == ["ck"]
    row = session.execute(select).one()  # the driver re-prepares (UNPREPARED)
    assert row._asdict() == {"key": 1, "ck": 2, "v": "before"}
    session.execute(
        session.prepare("INSERT INTO renamed (key, ck, v) VALUES (?, ?, ?)"), (1, 3, "after")
    )
    log = {
        r.v: (r.key, r.ck) for r in session.execute("SELECT key, ck, v FROM renamed_scylla_cdc_log")
    }
    assert log == {"after": (1, 3), "before": (None, None)}  # Scylla drops the old log column
    with pytest.raises(InvalidRequest, match="Cannot rename non PRIMARY KEY column v"):
        session.execute("ALTER TABLE renamed RENAME v TO w")


def test_user_types_with_non_frozen_collections(session: Session, keyspace: str) -> None:
    session.execute("CREATE TYPE holder (i int, l list<int>, m map<text, int>, s set<text>)")
    session.execute(
        "CREATE TABLE held (k int PRIMARY KEY, x frozen<holder>) WITH cdc = {'enabled': true}"
    )
    insert = session.prepare("INSERT INTO held (k, x) VALUES (?, ?)")
    session.execute(insert, (1, (1, [3, 1, 3], {"a": 1}, {"y", "z"})))  # a UDT bound by position
    row = session.execute("SELECT x FROM held WHERE k = 1").one()
    assert (row.x.i, list(row.x.l), dict(row.x.m), set(row.x.s)) == (
        1,
        [3, 1, 3],
        {"a": 1},
        {"y", "z"},
    )
    json_row = session.execute("SELECT JSON x FROM held WHERE k = 1").one()
    assert json_row[0] == '{"x": {"i": 1, "l": [3, 1, 3], "m": {"a": 1}, "s": ["y", "z"]}}'
    logged = session.execute("SELECT x FROM held_scylla_cdc_log").one()
    assert list(logged.x.l) == [3, 1, 3]
    types = session.execute(
        f"SELECT field_types FROM system_schema.types WHERE keyspace_name = '{keyspace}' "
        "AND type_name = 'holder'"
    ).one()
    assert list(types.field_types) == ["int", "list<int>", "map<text, int>", "set<text>"]
    with pytest.raises(InvalidRequest, match="Non-frozen UDTs with nested non-frozen collections"):
        session.execute("CREATE TABLE unheld (k int PRIMARY KEY, x holder)")


def test_empty_values_in_clustering_keys_and_collections(session: Session, keyspace: str) -> None:
    session.execute("CREATE TABLE empties (k int, c int, v int, s set<int>, PRIMARY KEY (k, c))")
    for c, v in (("5", 1), ("blobAsInt(0x)", 2), ("-7", 3)):
        session.execute(f"INSERT INTO empties (k, c, v) VALUES (1, {c}, {v})")
    rows = list(session.execute("SELECT c, v FROM empties WHERE k = 1"))
    assert [(r.c, r.v) for r in rows] == [(None, 2), (-7, 3), (5, 1)]  # the driver: empty = None
    found = session.execute("SELECT v FROM empties WHERE k = 1 AND c = blobAsInt(0x)").one()
    assert found.v == 2
    session.execute(
        "UPDATE empties SET s = {3, blobAsInt(0x), -1} WHERE k = 1 AND c = blobAsInt(0x)"
    )
    (json,) = session.execute("SELECT JSON s FROM empties WHERE k = 1 AND c = blobAsInt(0x)").one()
    assert json == '{"s": ["", -1, 3]}'
    session.execute("CREATE TABLE tiny (k int, c tinyint, PRIMARY KEY (k, c))")
    insert = session.prepare("INSERT INTO tiny (k, c) VALUES (1, blobAsTinyint(?))")
    message = "In call to function system.blobastinyint, value 0x is not a valid binary"
    with pytest.raises(InvalidRequest, match=message):
        session.execute(insert, (b"",))
