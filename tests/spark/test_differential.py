"""Random workloads: the PostgreSQL sink's view equals materialize at several instants.

Timestamps are drawn from a small range so equal timestamps (Cassandra's tie rules), late older
writes, overlapping deletes and repeated collection paths are common.
"""

from __future__ import annotations

import pytest

from ringflow.pipeline import apply_changes, materialize, read_postgres_live
from ringflow.schema import Table

from ._generated import KV, ChangeGenerator
from ._workload import NOW_S, TABLE, as_comparable


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("table", [KV, TABLE], ids=["kv", "items"])
def test_postgres_view_equals_materialize(postgres_url: str, table: Table, seed: int) -> None:
    changes = ChangeGenerator(table, seed).workload(250)
    target = f"diff_{table.name}_{seed}"
    apply_changes(postgres_url, target, table, changes, rows_per_transaction=40)
    assert len(materialize(table, changes, NOW_S - 100)) >= 5  # the workload leaves a real table
    for now_s in (NOW_S - 100, NOW_S - 60, NOW_S - 20, NOW_S + 1000):
        expected = as_comparable(materialize(table, changes, now_s))
        actual = as_comparable(read_postgres_live(postgres_url, target, table, now_s=now_s))
        assert actual == expected, f"now_s={now_s}"
