"""Non-frozen collections inside user types, as Cassandra 4 allows them.

Proves, against Cassandra's ``CreateTypeStatement`` / ``CreateTableStatement`` /
``AlterTableStatement``: ``CREATE TYPE t (l list<int>, m map<text, int>, s set<text>)`` is
accepted and ``system_schema.types`` keeps the declared field types; used as ``frozen<t>``
(alone or inside a collection) the collections are frozen with the value, and values round-trip
through INSERT, SELECT (also field selection), JSON in and out, the CDC log row and a restart; a
non-frozen ``t`` column of such a type is refused with Cassandra's "Non-frozen UDTs with nested
non-frozen collections are not supported" (CREATE TABLE, ALTER TABLE ADD, and ALTER TYPE ADD of a
collection while a non-frozen column uses the type); a non-frozen UDT field is refused with "A
user type cannot contain non-frozen UDTs". Each failed before: such a type was refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.errors import ErrorCode
from tests.unit.cql._exec_harness import ExecNode, node_with_keyspace

NESTED = "Non-frozen UDTs with nested non-frozen collections are not supported"
VALUE = {"i": 1, "l": [3, 1, 3], "m": {"a": 1}, "s": frozenset({"z", "y"})}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TYPE w (i int, l list<int>, m map<text, int>, s set<text>)")
    node.ok(
        "CREATE TABLE t (k int PRIMARY KEY, x frozen<w>, xs list<frozen<w>>) "
        "WITH cdc = {'enabled': true, 'preimage': true}"
    )
    yield node
    assert node.processor.internal_errors == 0
    node.close()


def test_the_type_keeps_its_declared_collections(node: ExecNode) -> None:
    assert node.ok(
        "SELECT field_names, field_types FROM system_schema.types WHERE keyspace_name = 'ks'"
    ) == [(["i", "l", "m", "s"], ["int", "list<int>", "map<text, int>", "set<text>"])]
    assert node.ok(
        "SELECT column_name, type FROM system_schema.columns WHERE keyspace_name = 'ks' "
        "AND table_name = 't'"
    ) == [("k", "int"), ("x", "frozen<w>"), ("xs", "list<frozen<w>>")]
    described = node.ok("DESCRIBE TYPE w")[0][3]
    assert "    l list<int>,\n    m map<text, int>,\n" in described


def test_frozen_values_round_trip(node: ExecNode) -> None:
    node.ok(
        "INSERT INTO t (k, x, xs) VALUES "
        "(1, {i: 1, l: [3, 1, 3], m: {'a': 1}, s: {'z', 'y'}}, [{i: 2, l: [5]}])"
    )
    second = {"i": 2, "l": [5], "m": None, "s": None}
    assert node.ok("SELECT x, xs FROM t WHERE k = 1") == [(VALUE, [second])]
    assert node.ok("SELECT x.l, x.m, x.s FROM t WHERE k = 1") == [
        ([3, 1, 3], {"a": 1}, frozenset({"y", "z"}))
    ]
    assert node.ok("SELECT JSON x FROM t WHERE k = 1") == [
        ('{"x": {"i": 1, "l": [3, 1, 3], "m": {"a": 1}, "s": ["y", "z"]}}',)
    ]
    node.ok("""INSERT INTO t JSON '{"k": 2, "x": {"i": 5, "l": [9], "m": {"q": 2}, "s": ["b"]}}'""")
    assert node.ok("SELECT x FROM t WHERE k = 2") == [
        ({"i": 5, "l": [9], "m": {"q": 2}, "s": frozenset({"b"})},)
    ]
    assert node.ok(
        "SELECT k FROM t WHERE x = {i: 5, l: [9], m: {'q': 2}, s: {'b'}} ALLOW FILTERING"
    ) == [(2,)]
    node.restart()
    node.ok("USE ks")
    assert node.ok("SELECT x FROM t WHERE k = 1") == [(VALUE,)]


def test_the_cdc_log_row_carries_the_value(node: ExecNode) -> None:
    node.ok("INSERT INTO t (k, x) VALUES (1, {i: 1, l: [3, 1, 3], m: {'a': 1}, s: {'z', 'y'}})")
    node.ok("UPDATE t SET x = {i: 7, l: [1]} WHERE k = 1")
    rows = node.ok('SELECT "cdc$operation", x FROM t_scylla_cdc_log')
    after = {"i": 7, "l": [1], "m": None, "s": None}
    assert rows == [(2, VALUE), (0, VALUE), (1, after)]  # insert, preimage, update


def test_adding_a_collection_field_keeps_old_values(node: ExecNode) -> None:
    node.ok("INSERT INTO t (k, x) VALUES (1, {i: 1})")
    node.ok("ALTER TYPE w ADD extra list<text>")
    node.ok("INSERT INTO t (k, x) VALUES (2, {i: 2, extra: ['e']})")
    rows = node.ok("SELECT k, x.i, x.extra FROM t")
    assert sorted(rows) == [(1, 1, None), (2, 2, ["e"])]


REFUSALS = [
    ("CREATE TABLE bad (k int PRIMARY KEY, x w)", NESTED),
    ("ALTER TABLE t ADD y w", NESTED),
    ("CREATE TYPE bad (p plain)", "A user type cannot contain non-frozen UDTs"),
    ("ALTER TYPE plain ADD l list<int>", NESTED),  # nf.p is a non-frozen plain
    ("ALTER TYPE w ADD p plain", "A user type cannot contain non-frozen UDTs"),
    ("CREATE TYPE bad (l list<list<int>>)", "non-frozen collections are not allowed inside"),
]


@pytest.mark.parametrize(("statement", "message"), REFUSALS)
def test_refusals(node: ExecNode, statement: str, message: str) -> None:
    node.ok("CREATE TYPE plain (a int)")
    node.ok("CREATE TABLE nf (k int PRIMARY KEY, p plain)")
    error = node.error(statement)
    assert error.code == ErrorCode.INVALID and message in error.message, error


def test_a_type_of_frozen_collections_may_be_a_non_frozen_column(node: ExecNode) -> None:
    node.ok("CREATE TYPE fz (l frozen<list<int>>, a int)")
    node.ok("CREATE TABLE nf (k int PRIMARY KEY, p fz)")
    node.ok("INSERT INTO nf (k, p) VALUES (1, {l: [1, 2], a: 3})")
    node.ok("UPDATE nf SET p.l = [4] WHERE k = 1")
    assert node.ok("SELECT p FROM nf") == [({"l": [4], "a": 3},)]
