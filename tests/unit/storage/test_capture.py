"""Replica-side capture in the store (seed 002; issue 14 §1): the capture holds exactly the CDC
log rows the store wrote (direct and general paths, images included), in the same transaction
(a rolled-back transaction or a refused batch captures nothing; after kill -9 every committed log
row is captured), in slices by range and time; sealing gives ``slice_digest`` of the rows,
the same on two stores that got the same writes in other orders."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ringflow.errors import InvalidRequest
from ringflow.replication import SliceKey, SliceSettings, slice_digest
from ringflow.schema import Mutation, Row
from ringflow.storage import CaptureConfig, StorageFailure, Store
from tests.unit.storage._capture_helpers import (
    DELTA_BASE,
    DELTA_LOG,
    NODE,
    NOW_MS,
    NOW_S,
    RANGES,
    STREAMS,
    Clock,
    apply_writes,
    capture_store,
    captured_rows,
    log_rows,
    resolve,
    write,
)
from tests.unit.storage._tables import i32

TS_US = NOW_MS * 1000 - 300_000  # 0.3 s before the clock: in the slice starting at NOW_MS - 1 s


def test_the_capture_holds_exactly_the_log_rows_written(tmp_path: Path) -> None:
    """Delta-only writes (the direct path) and writes with pre- and post-images (the general
    path), in several transactions and slices: captured rows == log rows, as multisets."""
    clock = Clock()
    store = capture_store(tmp_path, clock)
    apply_writes(store, list(range(0, 9)), TS_US)
    apply_writes(store, list(range(0, 9)), TS_US, table="images")
    clock.now_ms += 1500
    apply_writes(store, list(range(9, 15)), TS_US + 1_500_000)
    apply_writes(store, list(range(9, 12)), TS_US + 1_500_000, table="images")
    logged = log_rows(store)
    assert sum(logged.values()) > 9 + 9 + 6 + 3  # images add pre/post-image rows
    assert captured_rows(store) == logged
    store.capture.validate()
    store.close()


def test_slices_are_keyed_by_table_range_and_time(tmp_path: Path) -> None:
    clock = Clock()
    store = capture_store(tmp_path, clock)
    apply_writes(store, [0, 1, 2], TS_US)
    keys = {s.key for s in store.capture.slices()}
    start = (TS_US // 1000) // 1000 * 1000
    assert keys == {
        SliceKey("ks", "orders", *RANGES[STREAMS[0]], start),  # streams 0 and 2 share it
        SliceKey("ks", "orders", *RANGES[STREAMS[1]], start),
    }
    by_key = {s.key: s for s in store.capture.slices()}
    first = by_key[SliceKey("ks", "orders", *RANGES[STREAMS[0]], start)]
    assert (first.row_count, first.opened_ms, first.due_ms, first.sealed) == (
        2, NOW_MS, start + 2000, False,
    )  # fmt: skip
    store.close()


def test_a_rolled_back_transaction_captures_nothing(tmp_path: Path) -> None:
    """A failure at the capture's own insert, or at the log's, rolls back base, log and capture
    together (real SQLite triggers make the statements fail)."""
    store = capture_store(tmp_path, Clock())
    apply_writes(store, [1], TS_US)
    before = (captured_rows(store), log_rows(store))
    for table in ("capture_queue", "log_queue"):
        store._connection.execute(
            f"CREATE TEMP TRIGGER fail_{table} BEFORE INSERT ON {table} "
            "BEGIN SELECT RAISE(ABORT, 'disk trouble'); END"
        )
        with pytest.raises(StorageFailure, match="disk trouble"):
            apply_writes(store, [3, 4], TS_US)
        store._connection.execute(f"DROP TRIGGER fail_{table}")
        assert (captured_rows(store), log_rows(store)) == before
        assert store.read_row(DELTA_BASE, (i32(3),), (i32(1),), now_s=NOW_S) is None
        store.capture.validate()
    store.close()


def test_a_batch_refused_in_a_group_is_not_captured_and_the_others_are(tmp_path: Path) -> None:
    store = capture_store(tmp_path, Clock())
    good, capture = write(1, TS_US)
    bad = Mutation("ks", "orders", (i32(2),), rows=(Row((), None, None, {}),))  # no clustering
    outcomes = store.apply_group([([bad], {0: capture}), ([good], {0: capture})], now_s=NOW_S)
    assert isinstance(outcomes[0], InvalidRequest) and outcomes[1] is None
    assert sum(captured_rows(store).values()) == 1
    assert captured_rows(store) == log_rows(store)
    store.close()


def test_sealing_digests_the_rows_held_and_two_stores_agree_whatever_the_order(
    tmp_path: Path,
) -> None:
    clocks = Clock(), Clock()
    stores = [capture_store(tmp_path, clock, name=f"n{i}.sqlite") for i, clock in enumerate(clocks)]
    numbers = list(range(12))
    for store, order in zip(stores, (numbers, numbers[::-1]), strict=True):
        for number in order:
            apply_writes(store, [number], TS_US)
        # five partitions each written once: the same pre-images whatever the order
        apply_writes(store, [n for n in order if n < 5], TS_US, table="images")
    # the slice starts at NOW_MS - 1 s (TS_US): due at its start + 2 widths
    assert stores[0].capture.seal_due(NOW_MS + 999) == []
    sealed = [store.capture.seal_due(NOW_MS + 1000) for store in stores]
    assert len(sealed[0]) == 4 and all(s.node == NODE for s in sealed[0])  # 2 tables x 2 ranges
    assert {(s.key, s.digest, s.row_count) for s in sealed[0]} == {
        (s.key, s.digest, s.row_count) for s in sealed[1]
    }
    for captured in sealed[0]:
        rows = stores[0].capture.rows(captured.key)
        assert captured.digest == slice_digest(row.digest for row in rows)
        assert captured.row_count == len(rows)
    assert stores[0].capture.seal_due(NOW_MS + 5000) == []  # nothing left to seal
    assert all(s.sealed for s in stores[0].capture.slices())
    for store in stores:
        store.capture.validate()
        store.close()


def test_rows_come_back_in_arrival_order_page_by_page(tmp_path: Path) -> None:
    store = capture_store(tmp_path, Clock())
    for number in (0, 3, 6, 9, 12, 15):  # one stream, one slice, six transactions
        apply_writes(store, [number], TS_US)
    (captured,) = store.capture.slices()
    first = store.capture.rows(captured.key, limit=4)
    rest = store.capture.rows(captured.key, after_seq=first[-1].seq, limit=4)
    rows = first + rest
    assert [r.seq for r in rows] == sorted(r.seq for r in rows) and len(rows) == 6
    values = [r.columns.get("w", r.columns.get("v")) for r in rows]
    expected = [write(n, TS_US)[0].rows[0].cells for n in (0, 3, 6, 9, 12, 15)]
    assert values == [
        cells["w"].value if "w" in cells else cells["v"].value  # type: ignore[union-attr]
        for cells in expected
    ]
    with pytest.raises(InvalidRequest, match="no captured slice"):
        store.capture.rows(SliceKey("ks", "orders", 1, 2, 0))
    store.close()


def test_a_store_that_does_not_capture_writes_no_capture(tmp_path: Path) -> None:
    with Store(tmp_path / "plain.sqlite", synchronous="NORMAL") as store:
        for table in (DELTA_BASE, DELTA_LOG):
            store.register_table(table)
        apply_writes(store, [1, 2], TS_US)
        assert store.capture.slices() == [] and not store.capture.enabled
        assert store.capture.status(NOW_MS).rows == 0
        with pytest.raises(InvalidRequest, match="not enabled"):
            store.capture.seal_due(NOW_MS)


_CHILD = """
import os, signal, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from tests.unit.storage._capture_helpers import Clock, apply_writes, capture_store
store = capture_store(Path({path!r}), Clock())
for number in range(40):
    apply_writes(store, [number], {ts})
    if number % 7 == 0:
        apply_writes(store, [number], {ts}, table="images")
print("acked", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_every_committed_log_row_is_captured_after_kill_9(tmp_path: Path) -> None:
    """A writer killed (-9) right after its last commit, before any seal or read settled the
    queues: reopened, the store's capture holds every row its log tables hold."""
    root = str(Path(__file__).resolve().parents[3])
    child = textwrap.dedent(_CHILD).format(root=root, path=str(tmp_path), ts=TS_US)
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == -9 and done.stdout == "acked\n", done.stderr
    store = capture_store(tmp_path, Clock())
    logged = log_rows(store)
    assert sum(logged.values()) >= 40
    assert captured_rows(store) == logged
    store.capture.validate()
    sealed = store.capture.seal_due(NOW_MS + 1000)
    assert sum(s.row_count for s in sealed) == sum(logged.values())
    store.close()


def test_capture_settings_are_checked() -> None:
    with pytest.raises(InvalidRequest, match="UUID"):
        CaptureConfig("node", resolve, Clock())  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="callables"):
        CaptureConfig(NODE, None, Clock())  # type: ignore[arg-type]


def test_the_tables_slicing_is_kept_across_a_restart(tmp_path: Path) -> None:
    """The slicing a node's channels set for a table is kept in the store: opened again with the
    node's default, the store slices that table as before from its first row on (hinted rows
    arriving before the node reads its channels again land in the slices their replicas use);
    a config naming table slicing of its own wins."""
    clock = Clock()
    store = capture_store(tmp_path, clock)
    channels = {("ks", "orders"): SliceSettings(slice_width_s=10, slice_count=4)}
    store.capture.update_settings(channels)
    store.close()

    again = capture_store(tmp_path, clock)  # the node's default: 1 s x 2
    assert again.capture.table_settings() == channels
    apply_writes(again, [0], TS_US)
    (captured,) = again.capture.slices()
    assert captured.key.slice_start_ms == (TS_US // 1000) // 10_000 * 10_000  # a 10 s slice
    assert captured.due_ms == captured.key.slice_start_ms + 40_000
    again.close()

    own = Store(tmp_path / "node.sqlite", synchronous="NORMAL")
    mine = {("ks", "orders"): SliceSettings(slice_width_s=2, slice_count=2)}
    own.capture.enable(CaptureConfig(NODE, resolve, clock, table_settings=mine))
    assert own.capture.table_settings() == mine
    own.close()
