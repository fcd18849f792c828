"""gc_grace compaction: shadowed data goes at once, tombstones and expired data after gc_grace.

Each test writes a small partition, compacts at chosen seconds, and checks both the raw stored
state (``read_mutation``) and that CQL reads do not change.
"""

from __future__ import annotations

from pathlib import Path

from ringflow.schema import (
    EXPIRED_LIVENESS_TTL_S,
    Cell,
    ClusteringBound,
    DeletionTime,
    LivenessInfo,
    Mutation,
    RangeTombstone,
    Row,
)
from ringflow.storage import CompactionResult, Store
from tests.unit.storage._tables import EVENTS, GC_GRACE_S, i32, insert, open_store, txt

NOW = 10_000
PK = (i32(1),)


def ck(n: int) -> tuple[bytes, bytes]:
    return (i32(n), txt("a"))


def _rows(store: Store, now_s: int) -> list[tuple[bytes, ...]]:
    return [row.clustering for row in store.read_partition(EVENTS, PK, now_s=now_s)]


def test_partition_deletion_drops_shadowed_rows_then_itself(tmp_path: Path) -> None:
    store = open_store(tmp_path, EVENTS)
    store.apply([insert(EVENTS, PK, ck(n), {"v": txt("x")}, 5) for n in range(3)], now_s=NOW)
    store.apply([insert(EVENTS, PK, ck(9), {"v": txt("new")}, 20)], now_s=NOW)
    store.apply([Mutation("ks", "events", PK, DeletionTime(10, NOW))], now_s=NOW)
    result = store.compact(EVENTS, NOW + 1)
    assert result == CompactionResult(1, 1, 0)
    stored = store.read_mutation(EVENTS, PK)
    assert stored is not None and stored.partition_deletion == DeletionTime(10, NOW)
    assert [row.clustering for row in stored.rows] == [ck(9)]
    assert store.compact(EVENTS, NOW + 1) == CompactionResult(1, 0, 0)  # idempotent
    store.compact(EVENTS, NOW + GC_GRACE_S + 1)
    stored = store.read_mutation(EVENTS, PK)
    assert stored is not None and stored.partition_deletion is None
    assert _rows(store, NOW + GC_GRACE_S + 1) == [ck(9)]
    store.close()


def test_range_tombstone_shadows_inside_only_and_is_purged_after_gc_grace(tmp_path: Path) -> None:
    store = open_store(tmp_path, EVENTS)
    store.apply([insert(EVENTS, PK, ck(n), {"v": txt("x")}, 5) for n in range(5)], now_s=NOW)
    rt = RangeTombstone(
        ClusteringBound((i32(1),)), ClusteringBound((i32(3),), False), DeletionTime(6, NOW)
    )
    store.apply([Mutation("ks", "events", PK, range_tombstones=(rt,))], now_s=NOW)
    before = _rows(store, NOW)
    store.compact(EVENTS, NOW)
    assert _rows(store, NOW) == before == [ck(0), ck(3), ck(4)]
    stored = store.read_mutation(EVENTS, PK)
    assert stored is not None and stored.range_tombstones == (rt,)
    assert [row.clustering for row in stored.rows] == before
    store.compact(EVENTS, NOW + GC_GRACE_S + 1)
    stored = store.read_mutation(EVENTS, PK)
    assert stored is not None and stored.range_tombstones == ()
    store.close()


def test_expired_data_becomes_tombstones_then_goes(tmp_path: Path) -> None:
    store = open_store(tmp_path, EVENTS)
    cells = {"v": Cell.expiring(5, 10, NOW, txt("t")), "n": Cell.live(5, i32(1))}
    row = Row(ck(1), LivenessInfo(5, 10, NOW + 10), None, cells)
    store.apply([Mutation("ks", "events", PK, rows=(row,))], now_s=NOW)
    store.compact(EVENTS, NOW + 5)  # nothing expired yet
    assert store.read_mutation(EVENTS, PK) == Mutation("ks", "events", PK, rows=(row,))
    store.compact(EVENTS, NOW + 10)
    stored = store.read_mutation(EVENTS, PK)
    assert stored is not None
    (kept,) = stored.rows
    assert kept.cells["v"] == Cell(5, b"", 0, NOW)  # tombstone at its write second
    assert kept.liveness == LivenessInfo(5, EXPIRED_LIVENESS_TTL_S, NOW)
    assert kept.cells["n"] == Cell.live(5, i32(1))
    result = store.read_row(EVENTS, PK, ck(1), now_s=NOW + 10)
    assert result is not None and dict(result.values) == {"n": i32(1)}
    store.compact(EVENTS, NOW + GC_GRACE_S + 1)
    stored = store.read_mutation(EVENTS, PK)
    assert stored is not None and stored.rows[0] == Row(
        ck(1), None, None, {"n": Cell.live(5, i32(1))}
    )
    store.close()


def test_fully_dead_partition_is_removed(tmp_path: Path) -> None:
    store = open_store(tmp_path, EVENTS)
    row = Row(ck(1), None, DeletionTime(7, NOW), {"v": Cell.tombstone(6, NOW)})
    store.apply([Mutation("ks", "events", PK, rows=(row,))], now_s=NOW)
    assert store.compact(EVENTS, NOW + GC_GRACE_S + 1) == CompactionResult(1, 1, 1)
    assert store.read_mutation(EVENTS, PK) is None
    store.close()
