"""The current-state table's merge (issue 19): the state that batches of changes leave, merged
batch by batch through stored rows, equals the materialized oracle, whatever the batch split,
order or repetition (no Spark needed; here for the shared change workload)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ringflow.cdc import CdcOperation
from ringflow.pipeline import Change
from ringflow.pipeline._changes import value_columns
from ringflow.pipeline._lakehouse_state import (
    DELETED_FIELD,
    PK_FIELD,
    ROW_FIELD,
    STATE_FIELD,
    CurrentStateMerge,
    current_rows_table,
    write_time_field,
)
from ringflow.pipeline._materialize import canonical_value, hashable, materialize
from ringflow.schema import BIGINT, INT, TEXT, ClusteringOrder, Table, timeuuid_from_micros

from ._workload import NOW_S, TABLE, as_comparable, shuffled_with_duplicates, workload


def _merge(table: Table, store: dict[str, dict[str, Any]], batch: list[Change], now_s: int) -> None:
    """One batch merged through the stored rows :meth:`CurrentStateMerge.wanted` selects."""
    merge = CurrentStateMerge(table)
    whole, rows = (set(found) for found in merge.wanted(batch))
    assert whole | {r.partition("/")[0] for r in rows} == set(merge.partition_ids(batch))
    merge.load(
        r[STATE_FIELD] for r in store.values() if r[PK_FIELD] in whole or r[ROW_FIELD] in rows
    )
    merge.apply(batch)
    written = merge.rows(now_s)
    assert current_rows_table(table, written).num_rows == len(written)
    store.update({r[ROW_FIELD]: r for r in written})


def _live(table: Table, store: dict[str, dict[str, Any]]) -> dict[tuple[object, ...], Any]:
    found = {}
    for row in store.values():
        if row[DELETED_FIELD]:
            continue
        key = tuple(
            None if row[c.name] is None else hashable(canonical_value(c.type, row[c.name]))
            for c in table.primary_key_columns
        )
        present = [c for c in value_columns(table) if row[c.name] is not None]
        values = {c.name: canonical_value(c.type, row[c.name]) for c in present}
        times = {c.name: row[write_time_field(c.name)] for c in present}
        found[key] = (values, times)
    return found


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
    assert _live(TABLE, store) == as_comparable(materialize(TABLE, workload(), NOW_S))
    # a replayed batch changes nothing: no row to write
    merge = CurrentStateMerge(TABLE)
    merge.load(r[STATE_FIELD] for r in store.values())
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
    assert _live(PLAIN, store) == as_comparable(materialize(PLAIN, changes, NOW_S))
