"""A crash between a lakehouse batch's two commits (issue 19 §2): the process committing a batch
dies (``os._exit``, no cleanup, as ``kill -9``) after the change log's commit and before the
current-state table's. Spark then replays the batch with the same app id and batch id: the
change log, which records the batch, is not appended again; the current-state table, which
does not, gets it. The tables end as an uninterrupted run leaves them: each change once in the
log, the current state equal to the materialized oracle; the next batch goes on as usual.

The dying process is a real one (``multiprocessing``' spawn: a fresh interpreter) that writes
the real Delta table or Iceberg catalog; the fault is its ``write_current`` replaced by an exit.

Also here: a failed change-log append commits no current state; an Iceberg destination whose
SQL catalog is the session's real PostgreSQL (until now only an unreachable one was tested)
holds the batches exactly once.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from ringflow.pipeline import change_from_row
from ringflow.pipeline._delta import DeltaStore
from ringflow.pipeline._iceberg import IcebergStore, parse_location
from ringflow.pipeline._lakehouse import (
    ICEBERG_FORMAT,
    LakehouseStore,
    iceberg_options,
)
from ringflow.pipeline._materialize import materialize

from ._lakehouse import change_log_rows, commit_changes, current_rows, destination
from ._schema_evolution import differences, live_rows
from ._workload import TABLE, workload

APP = "ringflow-crash-between"
_DIED = 86


def _destination(kind: str, base: Path) -> tuple[str, dict[str, str], LakehouseStore]:
    return destination(kind, base, TABLE)


def _commit_then_die(kind: str, base: str, part: int, batch_id: int) -> None:
    """In the child: commit one batch, dying where the current-state commit would begin."""
    store_class = DeltaStore if kind == "delta" else IcebergStore

    def die(*_: object, **__: object) -> None:
        os._exit(_DIED)

    store_class.write_current = die  # type: ignore[method-assign]
    sink, options, _ = _destination(kind, Path(base))
    commit_changes(sink, options, TABLE, workload()[part::2], APP, batch_id)


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_crash_between_the_two_commits_is_replayed_into_the_current_state(
    tmp_path: Path, kind: str
) -> None:
    changes = workload()
    sink, options, store = _destination(kind, tmp_path)
    assert commit_changes(sink, options, TABLE, changes[0::2], APP, 1) == (True, True)

    child = multiprocessing.get_context("spawn").Process(
        target=_commit_then_die, args=(kind, str(tmp_path), 1, 2)
    )
    child.start()
    child.join(120)
    assert child.exitcode == _DIED  # it died between the commits
    assert (store.changes_committed(APP), store.current_committed(APP)) == (2, 1)
    logged = [change_from_row(TABLE, {k: v for k, v in r.items() if k != "date"})
              for r in change_log_rows(store)]  # fmt: skip
    assert sorted(logged, key=repr) == sorted(changes, key=repr)  # batch 2 is in the log

    # Spark's replay of batch 2: the log is not appended again, the current state takes it
    assert commit_changes(sink, options, TABLE, changes[1::2], APP, 2) == (False, True)
    assert (store.changes_committed(APP), store.current_committed(APP)) == (2, 2)
    logged = [change_from_row(TABLE, {k: v for k, v in r.items() if k != "date"})
              for r in change_log_rows(store)]  # fmt: skip
    assert sorted(logged, key=repr) == sorted(changes, key=repr)  # each change once
    expected = live_rows(TABLE, materialize(TABLE, changes, int(time.time())))
    assert differences(expected, current_rows(store, TABLE)) == []

    # and a replay of both (a crash after them, before Spark recorded the batch) changes nothing
    assert commit_changes(sink, options, TABLE, changes[1::2], APP, 2) == (False, False)
    assert differences(expected, current_rows(store, TABLE)) == []


def test_an_iceberg_table_in_a_postgresql_catalog_holds_the_batches(
    tmp_path: Path, postgres_url: str
) -> None:
    """The catalog in the session's real PostgreSQL 15 (``postgresql+psycopg://...
    ?warehouse=DIR``): two batches committed, the tables read back equal the oracle, each
    batch recorded once in the catalog (a replay changes nothing)."""
    catalog = postgres_url.replace("postgresql://", "postgresql+psycopg://", 1)
    location = parse_location(f"{catalog}?warehouse={tmp_path / 'warehouse'}#pgshop.items")
    store = IcebergStore(location)
    store.catalog.create_namespace("pgshop")
    options = iceberg_options(location, TABLE)
    changes = workload()
    for batch, part in ((1, changes[0::2]), (2, changes[1::2])):
        assert commit_changes(ICEBERG_FORMAT, options, TABLE, part, APP, batch) == (True, True)
    assert commit_changes(ICEBERG_FORMAT, options, TABLE, changes[1::2], APP, 2) == (False, False)
    assert (store.changes_committed(APP), store.current_committed(APP)) == (2, 2)
    logged = [change_from_row(TABLE, {k: v for k, v in r.items() if k != "date"})
              for r in change_log_rows(store)]  # fmt: skip
    assert sorted(logged, key=repr) == sorted(changes, key=repr)
    expected = live_rows(TABLE, materialize(TABLE, changes, int(time.time())))
    assert differences(expected, current_rows(store, TABLE)) == []
    assert len(store.catalog.list_tables("pgshop")) == 2  # the change log and its _current


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_failed_log_append_commits_no_current_state(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change log's append runs beside the current-state merge: when it fails, the batch
    fails with its error and the current-state table is not committed either (it never gets
    ahead of the log); the replay then commits both."""
    changes = workload()
    sink, options, store = _destination(kind, tmp_path)
    store_class = DeltaStore if kind == "delta" else IcebergStore

    def refuse(*_: object, **__: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(store_class, "append_changes", refuse)
    with pytest.raises(OSError, match="disk full"):
        commit_changes(sink, options, TABLE, changes, APP, 1)
    assert (store.changes_committed(APP), store.current_committed(APP)) == (-1, -1)
    monkeypatch.undo()
    assert commit_changes(sink, options, TABLE, changes, APP, 1) == (True, True)
    expected = live_rows(TABLE, materialize(TABLE, changes, int(time.time())))
    assert differences(expected, current_rows(store, TABLE)) == []
