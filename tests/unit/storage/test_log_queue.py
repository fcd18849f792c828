"""CDC log rows queued in write order (``log_queue``) and settled into key order before reads.

Checks: rows written out of key order across batches read back in stream order, and a row
written twice is kept once; the writing transaction settles the queue past its threshold; rows
committed but not yet settled survive a SIGKILL of the writer and read back exactly after
reopening; an older store's ``log_appends`` (the queue's first form) is settled on open; dropping
a table drops its queued rows.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from ringflow.cdc._log_rows import CdcCapture, build_log_mutations, delta_row_builder
from ringflow.cdc._log_schema import cdc_log_table
from ringflow.schema import CdcOptions, Cell, ClusteringBound, Mutation, Row, TableOptions
from ringflow.schema._codec import deserialize
from ringflow.storage import Store, _store
from ringflow.storage._catalog import TableInfo
from ringflow.storage._read import ResultRow
from ringflow.storage._write import delta_row_atom
from tests.unit.storage._tables import CDC_BASE, i32, insert, open_store, txt

NOW = 1_000
BASE = replace(CDC_BASE, options=TableOptions(cdc=CdcOptions(enabled=True)))
LOG = cdc_log_table(BASE)
STREAMS = [bytes([n]) * 16 for n in (9, 3, 7)]


def _write(number: int) -> tuple[Mutation, CdcCapture]:
    """Write ``number`` (an insert or an update), its stream and cdc$time fixed by ``number``."""
    timestamp = 100 - number  # later writes carry earlier timestamps: out of key order
    if number % 2:
        mutation = insert(BASE, (i32(number),), (i32(1),), {"v": txt(f"v{number}")}, timestamp)
    else:
        row = Row((i32(1),), None, None, {"w": Cell.live(timestamp, i32(number))})
        mutation = Mutation("ks", "orders", (i32(number),), rows=(row,))
    return mutation, CdcCapture(STREAMS[number % 3], number)


def _apply(store: Store, numbers: range) -> None:
    writes = [_write(number) for number in numbers]
    store.apply([m for m, _ in writes], now_s=NOW, cdc={i: c for i, (_, c) in enumerate(writes)})


def _expected(numbers: range, stream: bytes) -> list[dict[str, bytes]]:
    """The log rows of ``stream`` by the general builder, in key order (cdc$time)."""
    rows = [
        log_row
        for number in numbers
        for log_mutation in build_log_mutations(BASE, LOG, *_write(number), NOW)
        if log_mutation.partition_key == (stream,)
        for log_row in log_mutation.rows
    ]
    time_type = LOG.column("cdc$time").type
    rows.sort(key=lambda row: deserialize(time_type, row.clustering[0]).time)  # type: ignore[attr-defined]
    return [{name: cell.value for name, cell in row.cells.items()} for row in rows]  # type: ignore[union-attr]


def _values(rows: list[ResultRow]) -> list[dict[str, bytes]]:
    return [{k: v for k, v in row.values.items() if v is not None} for row in rows]


def _count(path: Path, sql: str) -> int:
    database = sqlite3.connect(path)
    try:
        (count,) = database.execute(sql).fetchone()
        return int(count)
    finally:
        database.close()


def _queued(path: Path) -> int:
    return _count(path, "SELECT COUNT(*) FROM log_queue")


def test_rows_settle_in_key_order_and_a_rewrite_is_kept_once(tmp_path: Path) -> None:
    store = open_store(tmp_path, BASE, LOG)
    _apply(store, range(0, 6))
    _apply(store, range(6, 12))
    _apply(store, range(3, 9))  # the same writes again: the same log rows, byte for byte
    assert _queued(tmp_path / "node.sqlite") == 18
    for stream in STREAMS:
        rows = store.read_partition(LOG, (stream,), now_s=NOW)
        assert _values(rows) == _expected(range(12), stream)
    assert _queued(tmp_path / "node.sqlite") == 0
    assert _count(tmp_path / "node.sqlite", "SELECT COUNT(*) FROM atoms WHERE kind = 5") == 12
    store.close()


def test_the_writing_transaction_settles_past_the_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_store, "LOG_APPEND_SETTLE_ROWS", 5)
    store = open_store(tmp_path, BASE, LOG)
    _apply(store, range(0, 4))
    assert _queued(tmp_path / "node.sqlite") == 4
    _apply(store, range(4, 8))
    assert _queued(tmp_path / "node.sqlite") == 0
    assert _values(store.read_partition(LOG, (STREAMS[0],), now_s=NOW)) == _expected(
        range(8), STREAMS[0]
    )
    store.close()


_CHILD = """
import os, signal, sys
sys.path.insert(0, {root!r})
from tests.unit.storage.test_log_queue import BASE, LOG, _apply
from ringflow.storage import Store
store = Store({path!r})
store.register_table(BASE)
store.register_table(LOG)
for start in range(0, 12, 4):
    _apply(store, range(start, start + 4))
print("acked", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_queued_rows_survive_kill_9_before_settling(tmp_path: Path) -> None:
    path = tmp_path / "node.sqlite"
    root = str(Path(__file__).resolve().parents[3])
    child = textwrap.dedent(_CHILD).format(root=root, path=str(path))
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == -9 and done.stdout == "acked\n", done.stderr
    assert _queued(path) == 12  # committed, not settled: the writer died before any read
    with Store(path) as store:
        for stream in STREAMS:
            rows = store.read_partition(LOG, (stream,), now_s=NOW)
            assert _values(rows) == _expected(range(12), stream)
            assert len(store.read_partition(BASE, (i32(STREAMS.index(stream)),), now_s=NOW)) == 1
    assert _queued(path) == 0


def test_an_older_stores_log_appends_are_settled_on_open(tmp_path: Path) -> None:
    path = tmp_path / "node.sqlite"
    with Store(path) as store:
        store.register_table(BASE)
        store.register_table(LOG)
    builder = delta_row_builder(BASE, LOG)
    assert builder is not None
    delta = builder(*_write(1), NOW)
    assert delta is not None
    atom = delta_row_atom(TableInfo.of(2, LOG, packed_rows=True), delta)
    database = sqlite3.connect(path)
    database.execute(
        "CREATE TABLE log_appends (seq INTEGER PRIMARY KEY, tid INTEGER NOT NULL, "
        "token INTEGER NOT NULL, pk BLOB NOT NULL, ck BLOB NOT NULL, kind INTEGER NOT NULL, "
        "col TEXT NOT NULL, path BLOB NOT NULL, ts INTEGER NOT NULL, ttl INTEGER NOT NULL, "
        "ldt INTEGER NOT NULL, value BLOB NOT NULL)"
    )
    database.execute("INSERT INTO log_appends VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", atom)
    database.commit()
    database.close()
    with Store(path) as store:
        rows = store.read_partition(LOG, (STREAMS[1],), now_s=NOW)
        assert _values(rows) == _expected(range(1, 2), STREAMS[1])
    database = sqlite3.connect(path)
    tables = {name for (name,) in database.execute("SELECT name FROM sqlite_master")}
    database.close()
    assert "log_appends" not in tables and "log_queue" in tables


def test_dropping_a_table_drops_its_queued_rows(tmp_path: Path) -> None:
    store = open_store(tmp_path, BASE, LOG)
    _apply(store, range(0, 3))
    store.drop_table(LOG.keyspace, LOG.name)
    assert _queued(tmp_path / "node.sqlite") == 0
    store.register_table(LOG)
    assert store.read_partition(LOG, (STREAMS[0],), now_s=NOW) == []
    store.close()


def test_a_slice_read_of_the_log_sees_unsettled_rows(tmp_path: Path) -> None:
    """``read_mutation`` of a clustering slice (a coordinated window read) settles the queue
    first, so rows committed a moment ago are in the answer."""
    store = open_store(tmp_path, BASE, LOG)
    _apply(store, range(0, 12))
    assert _queued(tmp_path / "node.sqlite") == 12
    stream = STREAMS[0]  # numbers 0, 3, 6, 9
    whole = store.read_mutation(LOG, (stream,))
    assert whole is not None and len(whole.rows) == 4
    start = ClusteringBound(whole.rows[1].clustering, True)
    end = ClusteringBound(whole.rows[2].clustering, True)
    _apply(store, range(12, 13))  # queued again, not settled
    assert _queued(tmp_path / "node.sqlite") == 1
    sliced = store.read_mutation(LOG, (stream,), start=start, end=end)
    assert sliced is not None and sliced.rows == whole.rows[1:3]
    (fresh,) = build_log_mutations(BASE, LOG, *_write(15), NOW)  # number 15: stream 0
    _apply(store, range(15, 16))
    assert _queued(tmp_path / "node.sqlite") == 1
    at = ClusteringBound(fresh.rows[0].clustering, True)
    newest = store.read_mutation(LOG, (stream,), start=at, end=at)
    assert newest is not None
    assert [row.clustering for row in newest.rows] == [fresh.rows[0].clustering]
    store.close()
