"""The current-state table's merge (issue 19): the state that batches of changes leave, merged
batch by batch through stored rows, equals the materialized oracle, whatever the batch split,
order or repetition (no Spark needed; here for the shared change workload)."""

from __future__ import annotations

import random
from typing import Any

import pytest

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

from ._workload import NOW_S, TABLE, as_comparable, shuffled_with_duplicates, workload


def _live(store: dict[str, dict[str, Any]]) -> dict[tuple[object, ...], Any]:
    found = {}
    for row in store.values():
        if row[DELETED_FIELD]:
            continue
        key = tuple(
            None if row[c.name] is None else hashable(canonical_value(c.type, row[c.name]))
            for c in TABLE.primary_key_columns
        )
        present = [c for c in value_columns(TABLE) if row[c.name] is not None]
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
        merge = CurrentStateMerge(TABLE)
        touched = set(merge.partition_ids(batch))
        merge.load(r[STATE_FIELD] for r in store.values() if r[PK_FIELD] in touched)
        merge.apply(batch)
        rows = merge.rows(NOW_S)
        assert current_rows_table(TABLE, rows).num_rows == len(rows)
        store.update({r[ROW_FIELD]: r for r in rows})
    assert _live(store) == as_comparable(materialize(TABLE, workload(), NOW_S))
    # a replayed batch changes nothing: no row to write
    merge = CurrentStateMerge(TABLE)
    merge.load(r[STATE_FIELD] for r in store.values())
    merge.apply(changes[:5])
    assert merge.rows(NOW_S) == []
