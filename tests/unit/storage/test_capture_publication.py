"""What the store keeps for the node's publication of its slices (issue 14 §1): a durable
"published" marker per sealed slice (unpublished slices listed oldest seal first, a restart
sees what was not marked), the seal horizon kept also when nothing was open, the watermark a
table may promise, the rows as their canonical bytes for the node-local ``captured_rows``
table, per-table slicing changed in place, and a store made before the marker upgraded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ringflow.errors import InvalidRequest
from ringflow.replication import SliceKey, SliceSettings, canonical_row_bytes
from ringflow.storage import Store
from tests.unit.storage._capture_helpers import (
    NOW_MS,
    RANGES,
    STREAMS,
    Clock,
    apply_writes,
    capture_store,
)

TS_US = NOW_MS * 1000 - 300_000  # in the slice starting at NOW_MS - 1 s, due at NOW_MS + 1 s


def test_sealed_slices_stay_unpublished_until_marked_and_the_mark_is_durable(
    tmp_path: Path,
) -> None:
    clock = Clock()
    store = capture_store(tmp_path, clock)
    apply_writes(store, list(range(6)), TS_US)
    assert store.capture.unpublished() == []  # open slices are never published
    sealed = store.capture.seal_due(NOW_MS + 1000)
    assert len(sealed) == 2
    unpublished = store.capture.unpublished()
    assert {s.key for s in unpublished} == {s.key for s in sealed}
    assert unpublished == sorted(unpublished, key=lambda s: s.sealed_at_ms)
    first, second = sorted(s.key for s in sealed)
    missing = SliceKey("ks", "orders", 1, 2, 0)
    assert store.capture.mark_published([first, missing], NOW_MS + 1100) == 1
    assert store.capture.mark_published([first], NOW_MS + 1200) == 0  # marked already
    assert [s.key for s in store.capture.unpublished()] == [second]
    by_key = {s.key: s for s in store.capture.slices()}
    assert by_key[first].published_ms == NOW_MS + 1100 and not by_key[second].published
    store.close()
    reopened = capture_store(tmp_path, clock)
    assert [s.key for s in reopened.capture.unpublished()] == [second]
    reopened.close()


def test_the_watermark_stops_before_the_oldest_unpublished_slice(tmp_path: Path) -> None:
    clock = Clock()
    store = capture_store(tmp_path, clock)
    apply_writes(store, list(range(6)), TS_US)
    apply_writes(store, [1], TS_US, table="images")
    sealed = store.capture.seal_due(NOW_MS + 1500)
    state = store.capture.publication_state()
    assert state.sealed_through_ms == NOW_MS + 1500
    due = NOW_MS + 1000  # the slices' start (NOW_MS - 1 s) plus two widths
    assert state.watermark_ms("ks", "orders") == due - 1
    assert state.unpublished == {("ks", "orders"): 2, ("ks", "images"): 1}
    store.capture.mark_published([s.key for s in sealed if s.key.table == "orders"])
    state = store.capture.publication_state()
    assert state.watermark_ms("ks", "orders") == NOW_MS + 1500
    assert state.watermark_ms("ks", "images") == due - 1
    assert state.watermark_ms("ks", "idle") == NOW_MS + 1500  # nothing held: the horizon
    store.close()


def test_an_idle_store_moves_its_seal_horizon_and_keeps_it(tmp_path: Path) -> None:
    """Nothing open: the horizon still follows the clock, durably; a clock that steps back
    after a restart cannot put a new row into a slice due before it."""
    clock = Clock()
    store = capture_store(tmp_path, clock)
    assert store.capture.seal_due(NOW_MS + 60_000) == []
    assert store.capture.publication_state().sealed_through_ms == NOW_MS + 60_000
    store.close()
    clock.now_ms = NOW_MS  # a minute back
    reopened = capture_store(tmp_path, clock)
    assert reopened.capture.publication_state().sealed_through_ms == NOW_MS + 60_000
    apply_writes(reopened, [1], TS_US)  # a row of a minute ago: out of sequence now
    (captured,) = reopened.capture.slices()
    assert captured.key.out_of_sequence and captured.due_ms > NOW_MS + 60_000
    reopened.close()


def test_canonical_rows_are_the_rows_as_stored_between_two_sequences(tmp_path: Path) -> None:
    store = capture_store(tmp_path, Clock())
    for number in (0, 3, 6, 9, 12):  # one stream, one slice, five transactions
        apply_writes(store, [number], TS_US)
    (captured,) = store.capture.slices()
    rows = store.capture.rows(captured.key)
    stored = store.capture.canonical_rows(captured.key)
    assert stored is not None
    assert [(r.seq, r.digest, r.origin) for r in stored] == [
        (r.seq, r.digest, r.origin) for r in rows
    ]
    assert [r.data for r in stored] == [canonical_row_bytes(r.columns) for r in rows]
    middle = store.capture.canonical_rows(
        captured.key, after_seq=rows[0].seq, through_seq=rows[3].seq, limit=2
    )
    assert middle is not None and [r.seq for r in middle] == [rows[1].seq, rows[2].seq]
    assert store.capture.canonical_rows(SliceKey("ks", "orders", 1, 2, 0)) is None
    with pytest.raises(InvalidRequest, match="limit"):
        store.capture.canonical_rows(captured.key, limit=0)
    store.close()


def test_per_table_settings_change_in_place(tmp_path: Path) -> None:
    clock = Clock()
    store = capture_store(tmp_path, clock)
    apply_writes(store, [2], TS_US)  # an update: captured with the default 1 s x 2
    store.capture.update_settings({("ks", "orders"): SliceSettings(10, 3)})
    apply_writes(store, [4], TS_US)  # a second row, sliced 10 s x 3 now
    starts = {(s.key.slice_start_ms, s.due_ms) for s in store.capture.slices()}
    one_second = (TS_US // 1_000_000) * 1000
    ten_seconds = (TS_US // 10_000_000) * 10_000
    assert starts == {(one_second, one_second + 2000), (ten_seconds, ten_seconds + 30_000)}
    assert store.capture.status(NOW_MS).rows == 2  # the counters and totals went on
    store.capture.validate()
    with pytest.raises(InvalidRequest, match="SliceSettings"):
        store.capture.update_settings({("ks", "orders"): (10, 3)})  # type: ignore[dict-item]
    store.close()


def test_a_store_made_before_the_published_marker_gets_it(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    database = sqlite3.connect(path)
    database.execute(
        "CREATE TABLE capture_slices (sid INTEGER PRIMARY KEY, keyspace TEXT NOT NULL, "
        "table_name TEXT NOT NULL, range_start INTEGER NOT NULL, range_end INTEGER NOT NULL, "
        "slice_start_ms INTEGER NOT NULL, out_of_sequence INTEGER NOT NULL, "
        "due_ms INTEGER NOT NULL, opened_ms INTEGER NOT NULL, row_count INTEGER NOT NULL, "
        "size_bytes INTEGER NOT NULL, sealed_ms INTEGER, digest BLOB, UNIQUE (keyspace, "
        "table_name, range_start, range_end, slice_start_ms, out_of_sequence))"
    )
    database.execute(
        "INSERT INTO capture_slices VALUES (1, 'ks', 'orders', ?, ?, 0, 0, 10, 0, 0, 32, 10, ?)",
        (*RANGES[STREAMS[0]], bytes(16)),
    )
    database.commit()
    database.close()
    with Store(path, synchronous="NORMAL") as store:
        (old,) = store.capture.slices()
        assert old.sealed and not old.published  # published again by the node: harmless
    with Store(path, synchronous="NORMAL") as store:  # opened again: nothing to add
        assert store.capture.slices() == [old]
