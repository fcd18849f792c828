"""The current-state merge over columns (issue 19) against the row-by-row merge and the
materialized oracle: random batches of inserts, updates, TTLs, cells set to null, row and
partition deletions, with many writes at equal timestamps (Cassandra's tie rules), replayed
batches and TTLs running out between batches. Both merges keep their own stored table; after
every batch the two tables must be the same rows, column for column, and at the end equal to
the oracle. Range deletions (which the column merge leaves to the row merge) mix in through
:func:`merge_batch`, as the sink runs it."""

from __future__ import annotations

import datetime
import random
import uuid
from typing import Any

import pyarrow as pa
import pytest

from ringflow.cdc import CdcOperation
from ringflow.pipeline import Change, change_arrow_schema, change_to_arrow_row
from ringflow.pipeline._changes import value_columns
from ringflow.pipeline._errors import InvalidChange
from ringflow.pipeline._lakehouse import merge_batch
from ringflow.pipeline._lakehouse_columns import ColumnsMerge, columns_mergeable
from ringflow.pipeline._lakehouse_state import (
    ROW_FIELD,
    CurrentStateMerge,
    Wanted,
    current_arrow_schema,
    current_rows_table,
    selection_mask,
)
from ringflow.pipeline._materialize import materialize
from ringflow.schema import (
    BIGINT,
    BLOB,
    INT,
    TEXT,
    TIMESTAMP,
    TIMEUUID,
    UUID,
    ClusteringOrder,
    SetType,
    Table,
    timeuuid_from_micros,
)

from ._lakehouse import stored_live

T0_S = 1_800_000_000
CLUSTERED = Table.create(
    "shop",
    "events",
    partition_key=[("pk", INT), ("region", TEXT)],
    clustering=[("ck", INT, ClusteringOrder.DESC)],
    regular=[("v", TEXT), ("n", BIGINT)],
)
KEYED = Table.create("shop", "accounts", partition_key=[("id", BIGINT)], regular=[("v", TEXT)])
TYPED = Table.create(
    "shop",
    "readings",
    partition_key=[("id", UUID)],
    clustering=[("at", TIMESTAMP, ClusteringOrder.ASC)],
    regular=[("raw", BLOB), ("seen", TIMESTAMP), ("ref", TIMEUUID)],
)
_Store = dict[str, dict[str, Any]]
_UUIDS = [uuid.UUID(int=n * 0x1234567 + 5) for n in range(3)]
_MOMENTS = [datetime.datetime(2027, 1, 1) + datetime.timedelta(milliseconds=n) for n in (0, 1, 999)]
_TIMEUUIDS = [timeuuid_from_micros(ms * 1000, n) for n, ms in enumerate((5, 5, 9))]


def _key(rng: random.Random, table: Table) -> tuple[dict[str, object], dict[str, object]]:
    """(partition key, full key) of a random row of ``table``."""
    if table is TYPED:
        pk: dict[str, object] = {"id": rng.choice(_UUIDS)}
        return pk, {**pk, "at": rng.choice(_MOMENTS)}
    if table.clustering_columns:
        pk = {"pk": rng.randint(0, 3), "region": rng.choice("ab")}
        return pk, {**pk, "ck": rng.randint(0, 5)}
    return {}, {"id": rng.randint(-2, 4)}


def _value(rng: random.Random, name: str) -> object:
    """A value of a small domain (equal values are common) for column ``name``."""
    if name == "v":
        return f"x{rng.randint(0, 3)}"
    if name == "raw":
        return bytes(rng.randint(0, 2) for _ in range(rng.randint(0, 2)))
    if name == "seen":
        return rng.choice(_MOMENTS)
    if name == "ref":
        return rng.choice(_TIMEUUIDS)
    return rng.randint(-3, 3)


def _changes(table: Table, size: int, seed: int, ranges: bool = False) -> list[Change]:
    """Writes crowded on few keys and few timestamps (ties are common), some with TTLs short
    enough to run out while the batches are merged."""
    rng = random.Random(seed)
    out: list[Change] = []
    for index in range(size):
        second = T0_S + rng.randint(0, 40)
        time = timeuuid_from_micros(second * 10**6 + rng.choice((0, 0, 1, 7)), index)
        pk, key = _key(rng, table)
        roll = rng.random()
        names = [c.name for c in value_columns(table)]
        if roll < 0.05:
            out.append(Change("shop", table.name, CdcOperation.PARTITION_DELETE, time, pk or key))
        elif ranges and roll < 0.3 and pk == {"pk": 0, "region": "a"}:
            high = {**pk, "ck": key["ck"] + rng.randint(1, 3)}
            start, end = (
                CdcOperation.RANGE_DELETE_START_INCLUSIVE,
                CdcOperation.RANGE_DELETE_END_EXCLUSIVE,
            )
            out.append(Change("shop", table.name, start, time, key, 0))
            out.append(Change("shop", table.name, end, time, high, 1))
        elif roll < 0.14:
            out.append(Change("shop", table.name, CdcOperation.ROW_DELETE, time, key))
        else:
            op = CdcOperation.INSERT if roll < 0.55 else CdcOperation.UPDATE
            values: dict[str, object] = {}
            deleted = set()
            for name in names:
                pick = rng.random()
                if pick < 0.15:
                    deleted.add(name)
                elif pick < 0.8:
                    values[name] = _value(rng, name)
            ttl = rng.choice((None, None, 5, 30, 500))
            out.append(
                Change("shop", table.name, op, time, key, 0, values, frozenset(deleted), {}, ttl)
            )
    return out


def _arrow(table: Table, changes: list[Change]) -> Any:
    rows = [change_to_arrow_row(table, c) for c in changes]
    return pa.Table.from_pylist(rows, schema=change_arrow_schema(table))


def _selected(table: Table, store: _Store, wanted: Wanted) -> Any:
    found = current_rows_table(table, list(store.values()))
    return found.filter(selection_mask(found, wanted))


def _by_columns(table: Table, store: _Store, batch: list[Change], now_s: int) -> None:
    plan = ColumnsMerge.for_batch(table, _arrow(table, batch))
    assert plan is not None
    rows = plan.merge(_selected(table, store, plan.wanted(now_s)), now_s)
    assert rows is not None
    store.update({r[ROW_FIELD]: r for r in rows.to_pylist()})


def _by_rows(table: Table, store: _Store, batch: list[Change], now_s: int) -> None:
    merge = CurrentStateMerge(table)
    merge.load(_selected(table, store, merge.wanted(batch, now_s)).to_pylist())
    merge.apply(batch)
    written = current_rows_table(table, merge.rows(now_s)).to_pylist()
    store.update({r[ROW_FIELD]: r for r in written})


def _oracle(table: Table, changes: list[Change], now_s: int) -> dict[tuple[object, ...], Any]:
    return {
        key: (dict(row.values), dict(row.write_times_us))
        for key, row in materialize(table, changes, now_s).items()
    }


@pytest.mark.parametrize("table", [CLUSTERED, KEYED, TYPED], ids=["clustered", "keyed", "typed"])
@pytest.mark.parametrize("seed", range(6))
def test_the_column_merge_writes_what_the_row_merge_writes(table: Table, seed: int) -> None:
    assert columns_mergeable(table)
    changes = _changes(table, 400, seed)
    rng = random.Random(seed)
    replayed = changes + rng.sample(changes, 60)
    rng.shuffle(replayed)
    by_columns: _Store = {}
    by_rows: _Store = {}
    now_s = T0_S
    start = 0
    while start < len(replayed):
        batch = replayed[start : start + rng.randint(1, 50)]
        start += len(batch)
        now_s += rng.randint(0, 6)  # TTLs of 5 s and 30 s run out between batches
        _by_columns(table, by_columns, batch, now_s)
        _by_rows(table, by_rows, batch, now_s)
        assert by_columns == by_rows
    assert stored_live(table, by_columns) == _oracle(table, changes, now_s)
    # a replayed batch writes nothing
    plan = ColumnsMerge.for_batch(table, _arrow(table, replayed[:40]))
    assert plan is not None
    assert plan.merge(_selected(table, by_columns, plan.wanted(now_s)), now_s).num_rows == 0


class _MemoryStore:
    """The part of a lakehouse store :func:`merge_batch` reads, over a dict of rows."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.rows: _Store = {}

    def current_rows(self, wanted: Wanted, schema: Any) -> tuple[Any, Any]:
        found = current_rows_table(self.table, list(self.rows.values()))
        mask = selection_mask(found, wanted)
        return found.filter(mask), None


@pytest.mark.parametrize("seed", range(4))
def test_batches_with_range_deletions_go_row_by_row_and_the_rest_by_columns(seed: int) -> None:
    changes = _changes(CLUSTERED, 300, seed, ranges=True)  # ranges in one partition only
    rng = random.Random(seed)
    store = _MemoryStore(CLUSTERED)
    now_s, start, by_columns, by_rows = T0_S + 50, 0, 0, 0
    while start < len(changes):
        size = rng.randint(1, 8)
        while start + size < len(changes) and changes[start + size].batch_seq_no:
            size += 1  # a range's two bounds in one batch, as the source sends them
        batch = changes[start : start + size]
        start += size
        data = _arrow(CLUSTERED, batch)
        plan = ColumnsMerge.for_batch(CLUSTERED, data)
        rows, _, _ = merge_batch(CLUSTERED, data, store, now_s)
        if (
            plan is not None
            and plan.merge(store.current_rows(plan.wanted(now_s), None)[0], now_s) is not None
        ):
            by_columns += 1
        else:
            by_rows += 1
        store.rows.update({r[ROW_FIELD]: r for r in rows.to_pylist()})
    assert stored_live(CLUSTERED, store.rows) == _oracle(CLUSTERED, changes, now_s)
    assert by_columns > 0 and by_rows > 0


def test_what_the_column_merge_does_not_take() -> None:
    with_set = Table.create("shop", "t", partition_key=[("k", INT)], regular=[("s", SetType(TEXT))])
    with_static = Table.create(
        "shop", "t", partition_key=[("k", INT)], clustering=[("c", INT, ClusteringOrder.ASC)],
        static=[("o", TEXT)], regular=[("v", TEXT)],
    )  # fmt: skip
    assert not columns_mergeable(with_set) and not columns_mergeable(with_static)
    key = {"pk": 1, "region": "a", "ck": 1}
    time = timeuuid_from_micros(T0_S * 10**6, 1)
    ranged = [
        Change("shop", "events", CdcOperation.RANGE_DELETE_START_INCLUSIVE, time, key, 0),
        Change("shop", "events", CdcOperation.RANGE_DELETE_END_EXCLUSIVE, time, key, 1),
    ]
    assert ColumnsMerge.for_batch(CLUSTERED, _arrow(CLUSTERED, ranged)) is None
    # stored range tombstones: the row merge takes the partition
    store: _Store = {}
    _by_rows(CLUSTERED, store, ranged, T0_S)
    insert = Change("shop", "events", CdcOperation.INSERT, time, key, 0, {"v": "a"})
    plan = ColumnsMerge.for_batch(CLUSTERED, _arrow(CLUSTERED, [insert]))
    assert plan is not None
    assert plan.merge(_selected(CLUSTERED, store, plan.wanted(T0_S)), T0_S) is None
    assert current_arrow_schema(CLUSTERED).names == current_rows_table(CLUSTERED, []).schema.names


def test_values_not_in_their_canonical_form_go_row_by_row() -> None:
    """An uppercase UUID, a timestamp with microseconds, a timeuuid of another version: the
    row logic takes them (it makes them canonical); the column merge would not see them as
    equal to their canonical forms."""
    time = timeuuid_from_micros(T0_S * 10**6, 1)
    key = {"id": _UUIDS[0], "at": _MOMENTS[0]}
    row = change_to_arrow_row(
        TYPED, Change("shop", "readings", CdcOperation.INSERT, time, key, 0, {"raw": b"1"})
    )
    assert ColumnsMerge.for_batch(TYPED, pa.Table.from_pylist([row], change_arrow_schema(TYPED)))
    uneven = {
        "id": str(_UUIDS[1]).upper(),
        "at": row["at"] + datetime.timedelta(microseconds=5),
        "ref": str(uuid.uuid4()),
    }
    for column, value in uneven.items():
        data = pa.Table.from_pylist([{**row, column: value}], change_arrow_schema(TYPED))
        assert ColumnsMerge.for_batch(TYPED, data) is None, column


def test_a_malformed_change_is_refused_by_name_not_merged() -> None:
    """What the row logic refuses, the column merge does not take: the row logic then names
    the change and the rule (InvalidChange), and nothing is merged."""
    time = timeuuid_from_micros(T0_S * 10**6, 1)
    good = Change("shop", "events", CdcOperation.INSERT, time, {"pk": 1, "region": "a", "ck": 1})
    rows = [change_to_arrow_row(CLUSTERED, good)]
    broken = {
        "no clustering key": {**rows[0], "ck": None},
        "no partition key": {**rows[0], "region": None},
        "a value on a deletion": {**rows[0], "cdc$operation": int(CdcOperation.ROW_DELETE),
                                  "v": "x"},
        "an unknown operation": {**rows[0], "cdc$operation": 77},
        "a negative TTL": {**rows[0], "cdc$ttl": -5},
    }  # fmt: skip
    for what, row in broken.items():
        data = pa.Table.from_pylist([row], schema=change_arrow_schema(CLUSTERED))
        assert ColumnsMerge.for_batch(CLUSTERED, data) is None, what
        with pytest.raises(InvalidChange):
            merge_batch(CLUSTERED, data, _MemoryStore(CLUSTERED), T0_S)
