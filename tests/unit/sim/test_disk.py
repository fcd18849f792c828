"""``SimDisk``: what a crash and a power loss keep and lose (conformance covers the rest)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ringflow.runtime import Runtime
from ringflow.sim import SimDisk, Simulation


def test_a_power_loss_cuts_appends_back_to_the_last_sync(tmp_path: Path) -> None:
    disk = SimDisk(tmp_path)
    disk.append_bytes("log", b"durable")
    disk.sync("log")
    disk.append_bytes("log", b"+volatile")
    disk.append_bytes("fresh", b"never synced")
    disk.write_bytes_atomic("whole", b"atomic")
    disk.append_bytes("whole", b"+tail")
    assert disk.synced_bytes("log") == 7 and disk.synced_bytes("fresh") is None

    disk.crash(power_loss=True)
    assert disk.read_bytes("log") == b"durable"
    assert not disk.exists("fresh")
    assert disk.read_bytes("whole") == b"atomic"
    disk.validate()


def test_a_plain_crash_keeps_unsynced_appends(tmp_path: Path) -> None:
    disk = SimDisk(tmp_path)
    disk.append_bytes("log", b"in the page cache")
    disk.crash()
    assert disk.read_bytes("log") == b"in the page cache"
    disk.crash(power_loss=True)  # the kernel had it; a later power loss still loses it
    assert not disk.exists("log")


def test_a_removed_and_recreated_file_is_not_durable_until_synced(tmp_path: Path) -> None:
    disk = SimDisk(tmp_path)
    disk.write_bytes_atomic("f", b"old")
    disk.remove("f")
    disk.append_bytes("f", b"new")
    disk.crash(power_loss=True)
    assert not disk.exists("f")


def test_a_crash_inside_a_transaction_rolls_it_back(tmp_path: Path) -> None:
    disk = SimDisk(tmp_path)
    connection = disk.open_sqlite("db/store.db")
    connection.execute("CREATE TABLE t (v)")
    connection.execute("BEGIN")
    connection.execute("INSERT INTO t VALUES ('uncommitted')")
    disk.crash(power_loss=True)
    with pytest.raises(sqlite3.ProgrammingError):
        connection.execute("SELECT 1")
    assert disk.open_sqlite("db/store.db").execute("SELECT count(*) FROM t").fetchone() == (0,)
    assert disk.crashes == 1


class Counter:
    """A node that keeps a durable counter in SQLite, committing every other increment."""

    def __init__(self, runtime: Runtime) -> None:
        self.db = runtime.disk.open_sqlite("counter.db")
        self.db.execute("CREATE TABLE IF NOT EXISTS c (n INTEGER)")
        row = self.db.execute("SELECT max(n) FROM c").fetchone()
        self.recovered = 0 if row[0] is None else int(row[0])

    def increment(self, n: int) -> None:
        if not self.db.in_transaction:
            self.db.execute("BEGIN")
        self.db.execute("INSERT INTO c VALUES (?)", (n,))
        if n % 2 == 0:
            self.db.execute("COMMIT")


def test_real_sqlite_code_recovers_only_committed_state_across_a_simulated_crash() -> None:
    with Simulation(1) as sim:
        process = sim.add_process("n", Counter)
        node = process.node
        assert isinstance(node, Counter)
        for n in range(1, 6):  # 2 and 4 commit; 5 is left open
            node.increment(n)
        sim.crash("n")
        restarted = sim.restart("n")
        assert isinstance(restarted, Counter) and restarted.recovered == 4
        assert sorted(process.disk.list_names()) == ["counter.db"]
