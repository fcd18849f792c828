"""TTL in the lakehouse current-state table (issue 19): a value past its TTL leaves the Delta and
Iceberg tables at the next commit, whatever rows that commit's batch touches, and each shown
row says when its next TTL runs out (``_expires_at``); read back by DuckDB. Iceberg both through
its filtered scans (a big table's) and with every read and write taking its whole-scan path
(past ``_IN_FILTER_MAX`` ids or in a small table, where the expired rows are picked in the same
scan)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringflow.cdc import CdcOperation
from ringflow.pipeline import Change, _iceberg
from ringflow.pipeline._lakehouse_state import DELETED_FIELD, EXPIRES_AT_FIELD
from ringflow.schema import INT, TEXT, ClusteringOrder, Table, timeuuid_from_micros

from ._lakehouse import commit_changes, current_rows, destination, duckdb_read

TABLE = Table.create(
    "shop",
    "items",
    partition_key=[("pk", INT)],
    clustering=[("ck", INT, ClusteringOrder.ASC)],
    regular=[("v", TEXT), ("n", INT)],
)
T0_S = 1_800_000_000
APP = "ringflow-ttl"


def _write(second: int, seq: int, pk: int, values: dict[str, object], ttl: int | None) -> Change:
    time = timeuuid_from_micros(second * 1_000_000, seq)
    key = {"pk": pk, "ck": 0}
    return Change("shop", "items", CdcOperation.INSERT, time, key, 0, values, frozenset(), {}, ttl)


@pytest.mark.parametrize("kind", ["delta", "iceberg", "iceberg, whole scans"])
def test_a_value_past_its_ttl_leaves_the_table_at_the_next_commit(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind == "iceberg, whole scans":  # every read and write past the In-filter limit
        monkeypatch.setattr(_iceberg, "_IN_FILTER_MAX", 0)
        kind = "iceberg"
    elif kind == "iceberg":  # the filtered scans a big table takes, not its small one's whole scan
        monkeypatch.setattr(_iceberg, "_WHOLE_SCAN_ROWS", 0)
    sink, options, store = destination(kind, tmp_path, TABLE)
    first = [
        _write(T0_S, 0, 1, {"v": "short", "n": 1}, 30),  # the whole row dies at T0 + 30
        _write(T0_S, 1, 2, {"v": "kept"}, None),
        _write(T0_S + 1, 2, 2, {"n": 7}, 60),  # one cell of row 2 dies at T0 + 61
    ]
    assert commit_changes(sink, options, TABLE, first, APP, 1, now_s=T0_S + 5) == (True, True)
    assert current_rows(store, TABLE) == {
        (1, 0): ({"v": "short", "n": 1}, {"v": T0_S * 10**6, "n": T0_S * 10**6}),
        (2, 0): ({"v": "kept", "n": 7}, {"v": T0_S * 10**6, "n": (T0_S + 1) * 10**6}),
    }
    expiry = {row["pk"]: row[EXPIRES_AT_FIELD] for row in duckdb_read(store.data_files()[1])}
    assert expiry == {1: (T0_S + 30) * 10**6, 2: (T0_S + 61) * 10**6}

    # later batches touch only row 3: the TTLs of rows 1 and 2 ran out meanwhile
    other = [_write(T0_S + 40, 3, 3, {"v": "other"}, None)]
    assert commit_changes(sink, options, TABLE, other, APP, 2, now_s=T0_S + 40)[1]
    assert set(current_rows(store, TABLE)) == {(2, 0), (3, 0)}
    again = [_write(T0_S + 70, 4, 3, {"v": "again"}, None)]
    assert commit_changes(sink, options, TABLE, again, APP, 3, now_s=T0_S + 70)[1]
    assert current_rows(store, TABLE) == {
        (2, 0): ({"v": "kept"}, {"v": T0_S * 10**6}),
        (3, 0): ({"v": "again"}, {"v": (T0_S + 70) * 10**6}),
    }
    stored = {row["pk"]: row for row in duckdb_read(store.data_files()[1])}
    assert stored[1][DELETED_FIELD] and stored[1][EXPIRES_AT_FIELD] is None
    assert {pk: row[EXPIRES_AT_FIELD] for pk, row in stored.items()} == {1: None, 2: None, 3: None}
