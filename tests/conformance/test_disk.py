"""One suite, two disks: ``SimDisk`` (crash as the restart) and ``LocalDisk`` (close and reopen).

What both promise (``ringflow.runtime._interfaces.Disk``): names stay inside the directory,
``write_bytes_atomic`` replaces whole contents durably, synced appends and committed SQLite
transactions survive a restart, an uncommitted transaction does not, and a connection from
before the restart is dead rather than silently writing into the next incarnation's files.
"""

from __future__ import annotations

import sqlite3

import pytest

from ringflow.runtime import DiskError
from tests.conformance._harness import DiskHarness

pytestmark = pytest.mark.timeout(60)


def test_whole_files_round_trip_and_list_sorted(disk_harness: DiskHarness) -> None:
    disk = disk_harness.disk
    disk.write_bytes_atomic("b.bin", b"first")
    disk.write_bytes_atomic("b.bin", b"second")
    disk.write_bytes_atomic("dir/a.bin", b"")
    assert disk.read_bytes("b.bin") == b"second"
    assert disk.read_bytes("dir/a.bin") == b""
    assert disk.list_names() == ["b.bin", "dir/a.bin"]
    assert disk.exists("b.bin") and not disk.exists("c.bin")
    disk.remove("b.bin")
    assert disk.list_names() == ["dir/a.bin"]
    with pytest.raises(DiskError):
        disk.read_bytes("b.bin")
    with pytest.raises(DiskError):
        disk.remove("b.bin")


@pytest.mark.parametrize(
    "name", ["", "../escape", "/abs", ".hidden", "a//b", "a/../b", "x.tmp", "sp ace", "a\\b"]
)
def test_names_that_could_escape_or_collide_are_refused(
    disk_harness: DiskHarness, name: str
) -> None:
    with pytest.raises(DiskError):
        disk_harness.disk.write_bytes_atomic(name, b"x")
    assert disk_harness.disk.list_names() == []


def test_synced_appends_and_atomic_files_survive_a_restart(disk_harness: DiskHarness) -> None:
    disk = disk_harness.disk
    assert disk.append_bytes("log", b"abc") == 3
    assert disk.append_bytes("log", b"de") == 5
    disk.sync("log")
    disk.write_bytes_atomic("state", b"v1")

    disk = disk_harness.restart()
    assert disk.read_bytes("log") == b"abcde"
    assert disk.read_bytes("state") == b"v1"
    assert disk.append_bytes("log", b"f") == 6


def test_committed_sqlite_survives_a_restart_and_uncommitted_does_not(
    disk_harness: DiskHarness,
) -> None:
    disk = disk_harness.disk
    connection = disk.open_sqlite("store.db")
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    connection.execute("BEGIN IMMEDIATE")
    connection.execute("INSERT INTO t VALUES (1, 'committed')")
    connection.execute("COMMIT")
    connection.execute("BEGIN IMMEDIATE")
    connection.execute("INSERT INTO t VALUES (2, 'in flight')")

    disk = disk_harness.restart()
    with pytest.raises(sqlite3.ProgrammingError):
        connection.execute("COMMIT")  # the old incarnation's handle is dead
    reopened = disk.open_sqlite("store.db")
    assert reopened.execute("SELECT k, v FROM t ORDER BY k").fetchall() == [(1, "committed")]
    reopened.execute("INSERT INTO t VALUES (2, 'again')")  # the write lock was released
    assert reopened.execute("SELECT count(*) FROM t").fetchone() == (2,)


def test_adopted_resources_are_closed_by_a_restart(disk_harness: DiskHarness) -> None:
    closed: list[str] = []

    class Resource:
        def close(self) -> None:
            closed.append("closed")

    disk_harness.disk.adopt(Resource())
    disk_harness.restart()
    assert closed == ["closed"]
