"""Issue 20 §3 (remainder A) through the executor: INSERT ... JSON, fromJson(), ALTER TYPE,
NOT IN, empty values and duration filtering, with Cassandra's results and messages."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.cql._error_responses import FunctionFailureResponse
from ringflow.cql._results import RowsResult
from ringflow.errors import ErrorCode
from ringflow.schema import INT, TEXT, Duration, ListType

from ._exec_harness import ExecNode, node_with_keyspace, value

ALL_TYPES = """CREATE TABLE t (k int PRIMARY KEY, ti tinyint, si smallint, bi bigint, vi varint,
 de decimal, f float, d double, b boolean, tx text, a ascii, u uuid, tu timeuuid, ip inet,
 ts timestamp, dt date, tm time, du duration, bl blob, l list<int>, s set<text>, m map<int, text>,
 fm frozen<map<uuid, int>>, tp tuple<int, text>, ad addr, fad frozen<addr>, "Mixed" int)"""
U = "a4a70900-24e1-11df-8924-001ff3591711"
TU = "50554d6e-29bb-11e5-b345-feff819cdc9f"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path)
    node.ok('CREATE TYPE addr (street text, "Zip" int)')
    node.ok(ALL_TYPES)
    yield node
    node.close()


def insert_json(node: ExecNode, document: object, suffix: str = "") -> object:
    text = document if isinstance(document, str) else json.dumps(document)
    return node.q(f"INSERT INTO t JSON '{text.replace(chr(39), chr(39) * 2)}' {suffix}")


def test_insert_json_reads_every_type_as_cassandra_does(node: ExecNode) -> None:
    """Numbers as numbers or strings, "NaN", "TRUE", timestamps with offsets, collections,
    a map with non-text keys as JSON strings, tuples, UDTs (quoted field names keep case)."""
    document = {
        "K": 1, "ti": "7", "si": 300, "bi": 2**40, "vi": 10**30, "de": 1.25, "f": "NaN",
        "d": 2.5, "b": "TRUE", "tx": "héllo", "a": "abc", "u": U, "tu": TU, "ip": "::1",
        "ts": "2011-02-03 04:05:00.123+0100", "dt": "2011-02-03", "tm": "08:12:54.123456789",
        "du": "1h30m", "bl": "0xcafe", "l": [3, 1], "s": ["b", "a"], "m": {"2": "two", "1": "one"},
        "fm": {U: 4}, "tp": [1, "x"], "ad": {"street": "Main", '"Zip"': 12345},
        "fad": '{"street": "F"}', '"Mixed"': 5,
    }  # fmt: skip
    assert not isinstance(insert_json(node, document), RowsResult)
    names = ["k", "Mixed", "a", "ad", "b", "bi", "bl", "d", "de", "dt", "du", "f", "fad", "fm",
             "ip", "l", "m", "s", "si", "ti", "tm", "ts", "tp", "tu", "tx", "u", "vi"]  # fmt: skip
    selected = ", ".join('"Mixed"' if name == "Mixed" else name for name in names)
    row = node.ok(f"SELECT {selected} FROM t")[0]
    got = dict(zip(names, row, strict=True))
    assert got["k"] == 1 and got["Mixed"] == 5 and got["ti"] == 7 and got["si"] == 300
    assert got["bi"] == 2**40 and got["vi"] == 10**30 and got["de"] == decimal.Decimal("1.25")
    assert got["f"] != got["f"] and got["d"] == 2.5 and got["b"] is True
    assert got["tx"] == "héllo" and got["a"] == "abc" and got["u"] == uuid.UUID(U)
    assert str(got["ip"]) == "::1" and got["bl"] == b"\xca\xfe"
    assert got["ts"] == datetime.datetime(2011, 2, 3, 3, 5, 0, 123000)
    assert got["dt"] == datetime.date(2011, 2, 3) and got["du"] == Duration(0, 0, 5400 * 10**9)
    assert got["tm"] == 29574123456789
    assert got["l"] == [3, 1] and got["s"] == frozenset({"a", "b"})
    assert got["m"] == {1: "one", 2: "two"} and got["fm"] == {uuid.UUID(U): 4}
    assert got["tp"] == (1, "x") and got["ad"] == {"street": "Main", "Zip": 12345}
    assert got["fad"] == {"street": "F", "Zip": None}
    # SELECT JSON gives back what INSERT JSON takes (the map key stays one JSON string)
    (text,) = node.ok("SELECT JSON fm, m, ad FROM t")[0]
    assert json.loads(text) == {"fm": {U: 4}, "m": {"1": "one", "2": "two"},
                                "ad": {"street": "Main", '"Zip"': 12345}}  # fmt: skip


def test_insert_json_default_null_unset_ttl_and_bind_marker(node: ExecNode) -> None:
    insert_json(node, {"k": 1, "tx": "a", "bi": 5})
    insert_json(node, {"k": 1, "bi": 6})  # DEFAULT NULL: tx becomes null
    assert node.ok("SELECT tx, bi FROM t WHERE k = 1") == [(None, 6)]
    insert_json(node, {"k": 2, "tx": "a", "bi": 5})
    insert_json(node, {"k": 2, "bi": 6, "ts": 1000}, "DEFAULT UNSET USING TTL 100")
    assert node.ok("SELECT tx, bi, ts, ttl(bi) FROM t WHERE k = 2") == [
        ("a", 6, datetime.datetime(1970, 1, 1, 0, 0, 1), 100)
    ]
    prepared = node.prepare("INSERT INTO t JSON ? DEFAULT UNSET")
    (spec,) = prepared.bind_metadata.columns
    assert (spec.name, spec.type) == ("[json]", TEXT)
    node.execute(prepared.statement_id, [value(TEXT, '{"k": 3, "l": [1, 2]}')])
    assert node.ok("SELECT l FROM t WHERE k = 3") == [([1, 2],)]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ('{"k": 1, "x": 2}', "JSON values map contains unrecognized column: x"),
        ('{"k": 1, "Mixed": 2}', "JSON values map contains unrecognized column: mixed"),
        ('{"k": 1.5}', "Error decoding JSON value for k: Expected an int value, but got a Double"),
        ('{"k": 3000000000}', "Expected an int value, but got a Long: 3000000000"),
        ('{"k": 1, "dt": 5}', "Expected a string representation of a date value"),
        ('{"k": 1, "l": [null]}', "Error decoding JSON value for l: Invalid null element in list"),
        ('{"k": 1, "bl": "cafe"}', "String representation of blob is missing 0x prefix: cafe"),
        ('{"k": 1, "ad": {"nope": 1}}', "Unknown field 'nope' in value of user defined type addr"),
        ('{"k": 1, "tp": [1, "a", 3]}', "Tuple contains extra items (expected 2)"),
        ('{"k": 1, "tx": 5}', "Expected a UTF-8 string, but got a Integer: 5"),
        ('{"k": 1, "b": "yes"}', "Unable to make boolean from 'yes'"),
        ('{"k": "x"}', "Unable to make int from 'x'"),
        ("[1]", "Could not decode JSON string as a map"),
        ('{"k":', "Could not decode JSON string as a map"),
        ("null", "Got null for INSERT JSON values"),
        ("{}", "Invalid null value for partition key part k"),
        ('{"k": ""}', "Key may not be empty"),
    ],
)
def test_insert_json_errors(node: ExecNode, document: str, message: str) -> None:
    error = node.error(f"INSERT INTO t JSON '{document}'")
    assert error.code == ErrorCode.INVALID and message in error.message, error


def test_insert_json_default_unset_needs_the_key(node: ExecNode) -> None:
    error = node.error("""INSERT INTO t JSON '{"tx": "a"}' DEFAULT UNSET""")
    assert error.message == "Invalid unset value for column k"


def test_insert_json_writes_cdc_rows_like_insert(node: ExecNode) -> None:
    node.ok("CREATE TABLE c (k int PRIMARY KEY, v text) WITH cdc = {'enabled': true}")
    node.ok("""INSERT INTO c JSON '{"k": 1, "v": "a"}'""")
    node.ok("INSERT INTO c (k, v) VALUES (2, 'a')")
    rows = node.ok('SELECT k, v, "cdc$operation" FROM c_scylla_cdc_log')
    assert sorted(rows) == [(1, "a", 2), (2, "a", 2)]


def test_from_json_in_values_set_and_where(node: ExecNode) -> None:
    node.ok("""INSERT INTO t (k, tx, l) VALUES (fromJson('5'), fromJson('"a"'), fromJson('[2]'))""")
    node.ok('UPDATE t SET ad = fromJson(\'{"street": "S"}\') WHERE k = fromJson(\'"5"\')')
    assert node.ok("SELECT tx, l, ad FROM t WHERE k = fromJson('5')") == [
        ("a", [2], {"street": "S", "Zip": None})
    ]
    node.ok("UPDATE t SET tx = fromJson(null) WHERE k = 5")
    assert node.ok("SELECT tx FROM t WHERE k = 5") == [(None,)]
    prepared = node.prepare("INSERT INTO t (k, m) VALUES (?, fromJson(?))")
    assert [c.name for c in prepared.bind_metadata.columns] == ["k", "arg0(system.fromjson)"]
    node.execute(prepared.statement_id, [value(INT, 6), value(TEXT, '{"3": "c"}')])
    assert node.ok("SELECT m FROM t WHERE k = 6") == [({3: "c"},)]


@pytest.mark.parametrize(
    ("text", "message"),
    [("[1, 2]", "Expected a UTF-8 string, but got a ArrayList"), ("[1", "Could not decode")],
)
def test_from_json_failures_are_function_failures(node: ExecNode, text: str, message: str) -> None:
    error = node.raw(f"UPDATE t SET tx = fromJson('{text}') WHERE k = 1")
    assert isinstance(error, FunctionFailureResponse) and message in error.message
    assert (error.keyspace, error.function, error.argument_types) == (
        "system",
        "fromjson",
        ("text",),
    )


# --- ALTER TYPE ----------------------------------------------------------------------------------


def test_alter_type_add_and_rename_keep_rows(node: ExecNode) -> None:
    node.ok("CREATE TYPE ut (a int)")
    node.ok("CREATE TYPE holder (u frozen<ut>)")
    node.ok("CREATE TABLE r (k int PRIMARY KEY, v ut, f frozen<ut>, h frozen<holder>)")
    node.ok("INSERT INTO r (k, v, f, h) VALUES (1, {a: 1}, {a: 2}, {u: {a: 3}})")
    change = node.ok("ALTER TYPE ut ADD b text")
    assert (change.change.change_type.value, change.change.target.value) == ("UPDATED", "TYPE")
    assert node.ok("SELECT v, f, h FROM r") == [
        ({"a": 1, "b": None}, {"a": 2, "b": None}, {"u": {"a": 3, "b": None}})
    ]
    node.ok("ALTER TYPE ut RENAME a TO z AND b TO y")
    node.ok("INSERT INTO r (k, v) VALUES (2, {z: 5, y: 'q'})")
    assert node.ok("SELECT v.z, v.y FROM r WHERE k IN (1, 2)") == [(1, None), (5, "q")]
    assert node.ok(
        "SELECT field_names, field_types FROM system_schema.types "
        "WHERE keyspace_name = 'ks' AND type_name = 'ut'"
    ) == [(["z", "y"], ["int", "text"])]
    node.restart()
    node.ok("USE ks")
    assert node.ok("SELECT v FROM r WHERE k = 1") == [({"z": 1, "y": None},)]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("ALTER TYPE ut ADD a int", "Cannot add field a to type ks.ut: a field with name a"),
        ("ALTER TYPE ut RENAME nope TO x", "Unkown field nope in user type ks.ut"),
        ("ALTER TYPE ut RENAME a TO b", "Duplicate field name b in type ks"),
        ("ALTER TYPE ut ALTER a TYPE bigint", "Altering field types is no longer supported"),
        ("ALTER TYPE nope ADD x int", "Type ks.nope doesn't exist"),
        ("ALTER TYPE ut ADD c frozen<holder>", "as it would create a circular reference"),
        ("ALTER TYPE kt ADD x int", "is being used in partition key by the following tables: ks.p"),
    ],
)
def test_alter_type_errors(node: ExecNode, statement: str, message: str) -> None:
    node.ok("CREATE TYPE ut (a int, b int)")
    node.ok("CREATE TYPE holder (u frozen<ut>)")
    node.ok("CREATE TYPE kt (a int)")
    node.ok("CREATE TABLE p (k frozen<kt> PRIMARY KEY)")
    error = node.error(statement)
    assert error.code == ErrorCode.INVALID and message in error.message, error
    assert node.ok("ALTER TYPE IF EXISTS nope ADD x int") is not None
    assert node.ok("ALTER TYPE ut ADD IF NOT EXISTS a int") is not None


# --- NOT IN, durations, empty values -------------------------------------------------------------


@pytest.fixture
def rows(node: ExecNode) -> ExecNode:
    node.ok("CREATE TABLE w (k int, c int, v int, d duration, PRIMARY KEY (k, c))")
    for i in range(5):
        node.ok(f"INSERT INTO w (k, c, v, d) VALUES (1, {i}, {i * 10}, {i}h)")
    node.ok("INSERT INTO w (k, c, v) VALUES (2, 0, 0)")
    return node


def test_not_in_as_cassandra_5(rows: ExecNode) -> None:
    assert rows.ok("SELECT c FROM w WHERE k = 1 AND c NOT IN (1, 3)") == [(0,), (2,), (4,)]
    assert rows.ok("SELECT c FROM w WHERE k = 1 AND v NOT IN (10, 20) ALLOW FILTERING") == [
        (0,), (3,), (4,)
    ]  # fmt: skip
    assert rows.ok("SELECT k FROM w WHERE k NOT IN (1) ALLOW FILTERING") == [(2,)]
    prepared = rows.prepare("SELECT c FROM w WHERE k = ? AND c NOT IN ?")
    assert prepared.bind_metadata.columns[1].name == "in(c)"
    answer = rows.execute(
        prepared.statement_id, [value(INT, 1), value(ListType(INT, True), [0, 4])]
    )
    assert [r[0] for r in answer.rows] == [value(INT, 1), value(INT, 2), value(INT, 3)]
    assert "ALLOW FILTERING" in rows.error("SELECT c FROM w WHERE k = 1 AND v NOT IN (1)").message
    error = rows.error("DELETE FROM w WHERE k = 1 AND c NOT IN (1)")
    assert "NOT IN restrictions are not supported on the clustering columns" in error.message
    assert len(rows.ok("SELECT c FROM w WHERE k = 1")) == 5


def test_duration_filters_by_equality_only(rows: ExecNode) -> None:
    assert rows.ok("SELECT c FROM w WHERE k = 1 AND d = 2h ALLOW FILTERING") == [(2,)]
    assert rows.ok("SELECT c FROM w WHERE k = 1 AND d IN (2h, 3h) ALLOW FILTERING") == [(2,), (3,)]
    error = rows.error("SELECT c FROM w WHERE k = 1 AND d > 2h ALLOW FILTERING")
    assert error.message == "Slice restrictions are not supported on duration columns"


def test_empty_values_are_stored_and_refused_in_keys(node: ExecNode) -> None:
    node.ok("CREATE TABLE e (k int, c int, v int, ts timestamp, sm smallint, PRIMARY KEY (k, c))")
    insert = "INSERT INTO e (k, c, v, ts) VALUES (?, ?, ?, ?)"
    node.ok(insert, value(INT, 1), value(INT, 1), b"", b"")
    assert node.raw("SELECT v, ts FROM e WHERE k = 1").rows == ((b"", b""),)
    assert node.ok("SELECT JSON v FROM e") == [('{"v": ""}',)]
    assert node.ok("SELECT c FROM e WHERE k = 1 AND v < 3 ALLOW FILTERING") == [(1,)]
    assert node.error(insert, b"", value(INT, 1), b"", b"").message == "Key may not be empty"
    assert node.error("UPDATE e SET v = 1 WHERE k = ? AND c = 1", b"").message == (
        "Key may not be empty"
    )
    error = node.error("INSERT INTO e (k, c, sm) VALUES (1, 1, ?)", b"")
    assert error.code == ErrorCode.INVALID and "smallint" in error.message
    node.ok("""INSERT INTO e JSON '{"k": 2, "c": 1, "v": ""}'""")
    assert node.raw("SELECT v FROM e WHERE k = 2").rows == ((b"",),)
