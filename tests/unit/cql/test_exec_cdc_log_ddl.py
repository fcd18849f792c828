"""DDL on CDC log tables and on tables that only have a log's name, as Scylla (``_cdc_log_rules``).

Proves: ``ALTER TABLE <log> WITH`` sets the log's properties, which survive a restart and the
base's own ALTERs (Scylla keeps them); column changes, renames, ``cdc`` and ``tombstone_gc``
repair on a log are Invalid with Scylla's messages (attached and detached); a user table may be
called ``<x>_scylla_cdc_log``, is an ordinary table (writable, dropped on its own), and enabling
CDC on ``x`` over it is Invalid with Scylla's message; a detached log is reattached. Before this
change every ALTER of a log and every such CREATE TABLE was refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.errors import ErrorCode
from tests.unit.cql._exec_harness import ExecNode, node_with_keyspace

LOG = "t_scylla_cdc_log"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TABLE t (k int PRIMARY KEY, v int) WITH cdc = {'enabled': true, 'ttl': 600}")
    yield node
    node.close()


def log_row(node: ExecNode) -> tuple[object, ...]:
    (row,) = node.ok(
        "SELECT comment, gc_grace_seconds, default_time_to_live, compaction, caching "
        f"FROM system_schema.tables WHERE keyspace_name = 'ks' AND table_name = '{LOG}'"
    )
    return tuple(row)


def test_alter_log_properties_are_kept(node: ExecNode) -> None:
    node.ok(
        f"ALTER TABLE {LOG} WITH comment = 'mine' AND gc_grace_seconds = 7 "
        "AND default_time_to_live = 30 AND compaction = {'class': 'LeveledCompactionStrategy'} "
        "AND caching = {'keys': 'ALL', 'rows_per_partition': 'NONE'} "
        "AND bloom_filter_fp_chance = 0.1"
    )
    expected = (
        "mine",
        7,
        30,
        {"class": "LeveledCompactionStrategy"},
        {"keys": "ALL", "rows_per_partition": "NONE"},
    )
    assert log_row(node) == expected
    node.ok("ALTER TABLE t ADD w text")  # the log gains columns, keeps its properties
    node.ok("ALTER TABLE t WITH cdc = {'enabled': true, 'ttl': 60}")
    assert log_row(node) == expected
    assert node.processor.schema.tables[("ks", LOG)].has_column("w")
    node.restart()
    node.ok("USE ks")
    assert log_row(node) == expected
    node.ok(f"ALTER TABLE {LOG} WITH compaction = {{'class': 'TimeWindowCompactionStrategy'}}")
    assert log_row(node)[3]["class"] == "TimeWindowCompactionStrategy"  # the base's window again


REFUSED = [
    (
        f"ALTER TABLE {LOG} ADD x int",
        "You cannot modify the set of columns of a CDC log table directly. Modify the base "
        "table instead.",
    ),
    (f"ALTER TABLE {LOG} DROP v", "You cannot modify the set of columns of a CDC log table"),
    (f'ALTER TABLE {LOG} RENAME "cdc$ttl" TO x', "Cannot rename a column of a CDC log table."),
    (
        f"ALTER TABLE {LOG} WITH cdc = {{'enabled': true}}",
        f"Cannot create a CDC log for a table ks.{LOG}, because creating nested CDC logs is not "
        "allowed",
    ),
    (
        f"ALTER TABLE {LOG} WITH tombstone_gc = {{'mode': 'repair'}}",
        "The 'repair' mode for tombstone_gc is not allowed on CDC log tables.",
    ),
]


@pytest.mark.parametrize(("statement", "message"), REFUSED)
def test_refused_on_a_log(node: ExecNode, statement: str, message: str) -> None:
    error = node.error(statement)
    assert error.code == ErrorCode.INVALID and error.message.startswith(message)


def test_detached_log_and_reattaching(node: ExecNode) -> None:
    node.ok("ALTER TABLE t WITH cdc = {'enabled': false}")
    error = node.error(f"ALTER TABLE {LOG} ADD x int")
    assert "Although the base table has deactivated CDC" in error.message
    assert "Although the base table" in node.error(f"ALTER TABLE {LOG} RENAME k TO kk").message
    node.ok(f"ALTER TABLE {LOG} WITH comment = 'detached'")
    assert [row[2] for row in node.ok("DESC TABLES")] == ["t", LOG]  # a table again
    node.ok("ALTER TABLE t WITH cdc = {'enabled': true}")  # reattached
    assert [row[2] for row in node.ok("DESC TABLES")] == ["t"]
    assert log_row(node)[0] == "detached"


def test_a_user_table_with_a_log_name(tmp_path: Path) -> None:
    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TABLE x_scylla_cdc_log (k int PRIMARY KEY, v text)")
    node.ok("INSERT INTO x_scylla_cdc_log (k, v) VALUES (1, 'a')")
    assert node.ok("SELECT k, v FROM x_scylla_cdc_log") == [(1, "a")]
    node.ok("ALTER TABLE x_scylla_cdc_log ADD w int")  # an ordinary table
    message = (
        "Cannot create CDC log table for table ks.x because a table of name "
        "ks.x_scylla_cdc_log already exists"
    )
    error = node.error("CREATE TABLE x (k int PRIMARY KEY) WITH cdc = {'enabled': true}")
    assert (error.code, error.message) == (ErrorCode.INVALID, message)
    assert ("ks", "x") not in node.processor.schema.tables
    node.ok("CREATE TABLE x (k int PRIMARY KEY)")
    error = node.error("ALTER TABLE x WITH cdc = {'enabled': true}")
    assert (error.code, error.message) == (ErrorCode.INVALID, message)
    assert not node.processor.schema.tables[("ks", "x")].options.cdc.enabled
    node.ok("DROP TABLE x")  # the user table of the log's name stays
    assert node.ok("SELECT k, v FROM x_scylla_cdc_log") == [(1, "a")]
    node.ok("DROP TABLE x_scylla_cdc_log")
    node.close()
