"""The current-state table's merge (issue 19): the state that batches of changes leave, merged
batch by batch through stored rows, equals the materialized oracle, whatever the batch split,
order or repetition (no Spark needed; here for the shared change workload)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ringflow.cdc import CdcOperation
from ringflow.pipeline import Change
from ringflow.pipeline._lakehouse_state import (
    DELETED_FIELD,
    EXPIRES_AT_FIELD,
    ROW_FIELD,
    CurrentStateMerge,
    current_rows_table,
    selection_mask,
)
from ringflow.pipeline._materialize import materialize
from ringflow.schema import BIGINT, INT, TEXT, ClusteringOrder, Table, timeuuid_from_micros

from ._lakehouse import stored_live
from ._workload import NOW_S, TABLE, as_comparable, shuffled_with_duplicates, workload


def _merge(table: Table, store: dict[str, dict[str, Any]], batch: list[Change], now_s: int) -> None:
    """One batch merged at ``now_s`` through the stored rows :meth:`CurrentStateMerge.wanted`
    selects (as the stores select them: :func:`selection_mask` over the stored Arrow rows)."""
    merge = CurrentStateMerge(table)
    wanted = merge.wanted(batch, now_s)
    whole, rows = set(wanted.partitions), set(wanted.rows)
    assert whole | {r.partition("/")[0] for r in rows} == set(merge.partition_ids(batch))
    if store:
        found = current_rows_table(table, list(store.values()))
        merge.load(found.filter(selection_mask(found, wanted)).to_pylist())
    merge.apply(batch)
    written = merge.rows(now_s)
    assert current_rows_table(table, written).num_rows == len(written)
    store.update({r[ROW_FIELD]: r for r in written})


@pytest.mark.parametrize("seed", range(4))
def test_batches_merged_through_stored_rows_equal_the_oracle(seed: int) -> None:
    changes = shuffled_with_duplicates(workload(), seed)
    rng = random.Random(seed)
    store: dict[str, dict[str, Any]] = {}
    start = 0
    while start < len(changes):
        batch = changes[start : start + rng.randint(1, 6)]
        start += len(batch)
        _merge(TABLE, store, batch, NOW_S)
    assert stored_live(TABLE, store) == as_comparable(materialize(TABLE, workload(), NOW_S))
    # a replayed batch changes nothing: no row to write
    merge = CurrentStateMerge(TABLE)
    merge.load(store.values())
    merge.apply(changes[:5])
    assert merge.rows(NOW_S) == []


PLAIN = Table.create(
    "bench",
    "events",
    partition_key=[("pk", INT)],
    clustering=[("ck", INT, ClusteringOrder.DESC)],
    regular=[("v", TEXT), ("n", BIGINT)],
)


def _plain_workload(size: int, seed: int) -> list[Change]:
    """Changes of a table without static columns, where a batch loads only the rows it
    touches and their partitions' heads unless it deletes a partition or a range: inserts,
    updates (some with a TTL, some deleting ``v``), row, range and partition deletes."""
    rng = random.Random(seed)
    changes = []
    for index in range(size):
        pk, ck = rng.randint(0, 6), rng.randint(0, 9)
        time = timeuuid_from_micros(NOW_S * 1_000_000 - 10**8 + rng.randint(0, 10**6), index)
        roll = rng.random()
        if roll < 0.03:
            changes.append(
                Change("bench", "events", CdcOperation.PARTITION_DELETE, time, {"pk": pk})
            )
        elif roll < 0.06:
            low = {"pk": pk, "ck": ck}
            high = {"pk": pk, "ck": ck + rng.randint(1, 4)}
            changes.append(
                Change("bench", "events", CdcOperation.RANGE_DELETE_START_INCLUSIVE, time, low, 0)
            )
            changes.append(
                Change("bench", "events", CdcOperation.RANGE_DELETE_END_EXCLUSIVE, time, high, 1)
            )
        elif roll < 0.12:
            changes.append(
                Change("bench", "events", CdcOperation.ROW_DELETE, time, {"pk": pk, "ck": ck})
            )
        else:
            op = CdcOperation.INSERT if roll < 0.5 else CdcOperation.UPDATE
            values: dict[str, object] = {"v": f"v{rng.randint(0, 99)}", "n": rng.randint(0, 9)}
            deleted = frozenset({"v"}) if roll > 0.93 else frozenset()
            if deleted:
                del values["v"]
            ttl = 10**6 if roll > 0.85 else None
            key = {"pk": pk, "ck": ck}
            changes.append(Change("bench", "events", op, time, key, 0, values, deleted, {}, ttl))
    return changes


@pytest.mark.parametrize("seed", range(3))
def test_a_table_without_statics_loads_touched_rows_only_and_equals_the_oracle(seed: int) -> None:
    changes = _plain_workload(300, seed)
    rng = random.Random(seed)
    doubled = changes + rng.sample(changes, 60)
    rng.shuffle(doubled)
    store: dict[str, dict[str, Any]] = {}
    start = 0
    while start < len(doubled):
        size = rng.randint(1, 40)
        _merge(PLAIN, store, doubled[start : start + size], NOW_S)
        start += size
    assert stored_live(PLAIN, store) == as_comparable(materialize(PLAIN, changes, NOW_S))


def _ttl_workload(size: int, seed: int, start_s: int) -> list[Change]:
    """Inserts and updates of ``PLAIN`` over 100 s from ``start_s``, a third with TTLs of
    5-60 s, some row and partition deletes: most TTLs run out within the test's clock."""
    rng = random.Random(seed)
    changes = []
    for index in range(size):
        pk, ck = rng.randint(0, 5), rng.randint(0, 6)
        written_us = (start_s + rng.randint(0, 100)) * 1_000_000 + rng.randint(0, 999_999)
        time = timeuuid_from_micros(written_us, index)
        roll = rng.random()
        if roll < 0.03:
            changes.append(
                Change("bench", "events", CdcOperation.PARTITION_DELETE, time, {"pk": pk})
            )
        elif roll < 0.08:
            changes.append(
                Change("bench", "events", CdcOperation.ROW_DELETE, time, {"pk": pk, "ck": ck})
            )
        else:
            op = CdcOperation.INSERT if roll < 0.5 else CdcOperation.UPDATE
            values: dict[str, object] = {"v": f"v{rng.randint(0, 99)}", "n": rng.randint(0, 9)}
            if rng.random() < 0.5:
                del values[rng.choice(["v", "n"])]
            ttl = rng.randint(5, 60) if rng.random() < 0.35 else None
            key = {"pk": pk, "ck": ck}
            changes.append(
                Change("bench", "events", op, time, key, 0, values, frozenset(), {}, ttl)
            )
    return changes


@pytest.mark.parametrize("seed", range(3))
def test_values_past_their_ttl_leave_the_table_at_the_next_commit(seed: int) -> None:
    """Batches committed as the clock runs: each commit also merges the rows whose
    ``_expires_at`` has passed, so after every commit the table equals the oracle at that
    second, TTL'd values gone, not only the rows the batch touched."""
    start_s = NOW_S - 200
    changes = sorted(_ttl_workload(250, seed, start_s), key=lambda c: c.time_us)
    rng = random.Random(seed)
    store: dict[str, dict[str, Any]] = {}
    applied: list[Change] = []
    now_s = start_s
    while applied != changes:
        batch = changes[len(applied) : len(applied) + rng.randint(1, 12)]
        applied += batch
        now_s = max(now_s, batch[-1].time_us // 1_000_000 + 1) + rng.randint(0, 3)
        _merge(PLAIN, store, batch, now_s)
        assert stored_live(PLAIN, store) == as_comparable(materialize(PLAIN, applied, now_s))
    expired_some = False
    for later in (now_s + 20, now_s + 61):  # commits of batches touching one other row
        other = Change(
            "bench",
            "events",
            CdcOperation.UPDATE,
            timeuuid_from_micros(later * 10**6, 0),
            {"pk": 99, "ck": 0},
            0,
            {"n": 1},
        )
        applied.append(other)
        before = {k: v for k, v in stored_live(PLAIN, store).items() if k != (99, 0)}
        _merge(PLAIN, store, [other], later)
        assert stored_live(PLAIN, store) == as_comparable(materialize(PLAIN, applied, later))
        after = {k: v for k, v in stored_live(PLAIN, store).items() if k != (99, 0)}
        expired_some |= before != after  # rows the batch did not touch changed: TTLs ran out
    assert expired_some  # the workload made the clock matter
    for row in store.values():  # what shows has no expiry in the past
        expiry = row[EXPIRES_AT_FIELD]
        assert expiry is None or expiry > (now_s + 61) * 1_000_000
        assert expiry is None or not row[DELETED_FIELD]
