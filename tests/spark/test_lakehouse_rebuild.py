"""A current-state table in the first layout (a JSON ``_state`` per row, before the merge
went over typed columns) is rebuilt from the change log when a job next opens the destination:
the Delta and Iceberg tables then hold the new layout, equal to the materialized oracle, and
later batches merge into them (issue 19). Read back by DuckDB."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from ringflow.pipeline import Change
from ringflow.pipeline._delta import DeltaStore
from ringflow.pipeline._lakehouse import lakehouse_options
from ringflow.pipeline._lakehouse_state import LEGACY_STATE_FIELD, current_arrow_schema
from ringflow.pipeline._materialize import materialize

from ._lakehouse import commit_changes, current_rows, destination
from ._workload import TABLE, as_comparable, workload

APP = "ringflow-rebuild-test"
_ATOMIC = {c.name for c in TABLE.columns if not c.type.is_multicell}


def _oracle(changes: list[Change], now_s: int) -> dict[tuple[object, ...], object]:
    """The live rows, write times of the atomic columns only (as ``current_rows`` gives)."""
    return {
        key: (values, {n: t for n, t in times.items() if n in _ATOMIC})
        for key, (values, times) in as_comparable(materialize(TABLE, changes, now_s)).items()
    }


def _to_first_layout(kind: str, store: object) -> None:
    """Give the current-state table a ``_state`` column, as the first layout had."""
    if isinstance(store, DeltaStore):
        found = DeltaTable(str(store.current)).to_pyarrow_table()
        old = found.append_column(LEGACY_STATE_FIELD, pa.array(["{}"] * found.num_rows))
        write_deltalake(str(store.current), old, mode="overwrite", schema_mode="overwrite")
        return
    from pyiceberg.types import StringType

    table = store.catalog.load_table(store.location.current)  # type: ignore[attr-defined]
    with table.update_schema() as update:
        update.add_column(LEGACY_STATE_FIELD, StringType())


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_first_layout_table_is_rebuilt_from_the_change_log(kind: str, tmp_path: Path) -> None:
    changes = workload()
    sink, options, store = destination(kind, tmp_path, TABLE)
    half = len(changes) // 2
    assert commit_changes(sink, options, TABLE, changes[:half], APP, 1)[0]
    _to_first_layout(kind, store)
    assert store.legacy_current()

    target = {"path": options["path"]} if kind == "delta" else {
        k: options[k] for k in ("uri", "warehouse", "namespace", "table")
    }  # fmt: skip
    options = lakehouse_options(sink, target, TABLE)  # what a job does when it starts
    assert not store.legacy_current()
    now_s = int(time.time())
    assert current_rows(store, TABLE) == _oracle(changes[:half], now_s)

    assert commit_changes(sink, options, TABLE, changes[half:], APP, 2, now_s=now_s)[1]
    assert current_rows(store, TABLE) == _oracle(changes, now_s)
    names = set(current_arrow_schema(TABLE).names)
    assert LEGACY_STATE_FIELD not in names
