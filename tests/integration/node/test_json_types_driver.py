"""Issue 20 §3 (remainder A) through the real Python driver against one real node (shared by the
module): INSERT ... JSON (literal and prepared), fromJson(), ALTER TYPE seen by the driver's
metadata, NOT IN, empty values, duration filtering; Cassandra's results or error classes."""

from __future__ import annotations

import json
import time

import pytest
from cassandra import FunctionFailure, InvalidRequest
from cassandra.cluster import Cluster, Session
from cassandra.cqltypes import EMPTY

KEYSPACE = "json_types"


@pytest.fixture(scope="module")
def keyspace(session: Session) -> str:
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    session.execute(f"USE {KEYSPACE}")
    session.execute("CREATE TYPE addr (street text, zip int)")
    session.execute(
        "CREATE TABLE t (k int, c int, v int, tx text, m map<int, text>, ad frozen<addr>, "
        "d duration, PRIMARY KEY (k, c)) WITH cdc = {'enabled': true}"
    )
    return KEYSPACE


def test_insert_json_literal_and_prepared(session: Session, keyspace: str) -> None:
    session.execute(
        """INSERT INTO t JSON '{"k": 1, "c": 1, "v": "5", "m": {"2": "b"}, "ad": {"zip": 9}}'"""
    )
    prepared = session.prepare("INSERT INTO t JSON ? DEFAULT UNSET")
    assert [c.name for c in prepared.column_metadata] == ["[json]"]
    session.execute(prepared, [json.dumps({"k": 1, "c": 1, "tx": "x"})])
    row = session.execute("SELECT v, tx, m, ad FROM t WHERE k = 1 AND c = 1").one()
    assert (row.v, row.tx, dict(row.m), (row.ad.street, row.ad.zip)) == (
        5,
        "x",
        {2: "b"},
        (None, 9),
    )
    (text,) = session.execute("SELECT JSON m, ad FROM t WHERE k = 1 AND c = 1").one()
    assert json.loads(text) == {"m": {"2": "b"}, "ad": {"street": None, "zip": 9}}
    logged = session.execute('SELECT k, "cdc$operation" FROM t_scylla_cdc_log').all()
    assert len(logged) == 2 and all(r[0] == 1 for r in logged)
    with pytest.raises(InvalidRequest, match="JSON values map contains unrecognized column: x"):
        session.execute("""INSERT INTO t JSON '{"k": 1, "c": 1, "x": 2}'""")


def test_from_json_term_and_failure(session: Session, keyspace: str) -> None:
    prepared = session.prepare("INSERT INTO t (k, c, m) VALUES (?, ?, fromJson(?))")
    session.execute(prepared, [2, 1, '{"7": "g"}'])
    row = session.execute("SELECT m FROM t WHERE k = fromJson('2') AND c = 1").one()
    assert dict(row.m) == {7: "g"}
    with pytest.raises(FunctionFailure):
        session.execute("UPDATE t SET tx = fromJson('[1]') WHERE k = 2 AND c = 1")


def test_alter_type_reaches_the_driver_metadata(
    session: Session, cluster: Cluster, keyspace: str
) -> None:
    session.execute("INSERT INTO t (k, c, ad) VALUES (3, 1, {street: 'a', zip: 1})")
    session.execute("ALTER TYPE addr ADD city text")
    session.execute("ALTER TYPE addr RENAME street TO road")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        fields = cluster.metadata.keyspaces[keyspace].user_types["addr"].field_names
        if fields == ["road", "zip", "city"]:
            break
        time.sleep(0.1)
    assert fields == ["road", "zip", "city"]
    (text,) = session.execute("SELECT JSON ad FROM t WHERE k = 3 AND c = 1").one()
    assert json.loads(text) == {"ad": {"road": "a", "zip": 1, "city": None}}
    with pytest.raises(InvalidRequest, match="a field with name zip already exists"):
        session.execute("ALTER TYPE addr ADD zip int")


def test_not_in_empty_values_and_duration(session: Session, keyspace: str) -> None:
    for c in range(4):
        session.execute("INSERT INTO t (k, c, v, d) VALUES (4, %s, %s, 1h)", (c, c))
    rows = session.execute("SELECT c FROM t WHERE k = 4 AND c NOT IN (1, 2)").all()
    assert [r.c for r in rows] == [0, 3]
    with pytest.raises(InvalidRequest, match="ALLOW FILTERING"):
        session.execute("SELECT c FROM t WHERE k = 4 AND v NOT IN (1)")
    prepared = session.prepare("INSERT INTO t (k, c, v) VALUES (?, ?, ?)")
    empty_value = prepared.bind([5, 1, 0])
    empty_value.values[2] = b""  # a zero-byte int, as the driver puts it on the wire
    session.execute(empty_value)
    # the driver shows an empty int as None (or EMPTY); SELECT JSON tells it from null
    assert session.execute("SELECT v FROM t WHERE k = 5 AND c = 1").one().v in (None, EMPTY)
    assert session.execute("SELECT JSON v FROM t WHERE k = 5 AND c = 1").one()[0] == '{"v": ""}'
    empty_key = prepared.bind([0, 1, 1])
    empty_key.values[0] = b""
    with pytest.raises(InvalidRequest, match="Key may not be empty"):
        session.execute(empty_key)
    rows = session.execute("SELECT c FROM t WHERE k = 4 AND d = 1h ALLOW FILTERING").all()
    assert len(rows) == 4
    with pytest.raises(InvalidRequest, match="Slice restrictions are not supported on duration"):
        session.execute("SELECT c FROM t WHERE k = 4 AND d > 1h ALLOW FILTERING")
