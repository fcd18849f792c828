"""The Delta Lake and Iceberg destinations (issue 19) on the shared change workload, streamed
by real Spark: the change log and the current-state table read back by DuckDB equal the changes
and the materialized oracle; a batch replayed after a crash (a task killed mid-batch, before
any commit; or after both commits, before Spark recorded the batch) leaves the tables as an
uninterrupted run (the change log holds each change once, the current state equals the oracle):
each batch committed once, the tables' recorded batch is the last one. One query lineage per
format carries both crashes (CI time)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from ringflow.cdc import CdcOperation
from ringflow.pipeline import change_from_row
from ringflow.pipeline._lakehouse import LakehouseStore
from ringflow.pipeline._materialize import materialize

from ._lakehouse import change_log_rows, current_rows, destination
from ._schema_evolution import differences, live_rows
from ._streams import change_stream, forget_commit, run_to_end, write_change_files
from ._workload import TABLE, shuffled_with_duplicates, workload

_FLAG = Path(os.environ.get("TMPDIR", "/tmp")) / "ringflow-lakehouse-fail-once"


def _fail_once(value):  # type hints would make PySpark guess a pandas UDF
    if value == "PARTITION_DELETE" and _FLAG.exists():
        _FLAG.unlink()
        raise RuntimeError("injected failure in a writer task")
    return value


def _destination(kind: str, base: Path) -> tuple[str, dict[str, str], LakehouseStore]:
    return destination(kind, base, TABLE)


def _snapshot(store: LakehouseStore) -> tuple[Any, Any]:
    """What a reader sees: the change log's rows and the live current state (DuckDB)."""
    log = [{k: v for k, v in r.items() if k != "cdc$stream_id"} for r in change_log_rows(store)]
    return sorted(log, key=repr), current_rows(store, TABLE)


def _expected_current() -> Any:
    """The oracle now (the workload's TTLs expired long ago, as at the commits)."""
    return live_rows(TABLE, materialize(TABLE, workload(), int(time.time())))


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_stream_is_committed_once_whatever_crashes(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    """One query: a task of a batch fails mid-batch and the restart replays it; then a crash
    after both commits of the last batch, before Spark's, replays that one too."""
    changes = shuffled_with_duplicates(workload(), 5)
    source = tmp_path / "in"
    deletes = [c for c in changes if c.operation is CdcOperation.PARTITION_DELETE]
    others = [c for c in changes if c.operation is not CdcOperation.PARTITION_DELETE]
    batches = [others[: len(others) // 2], others[len(others) // 2 :] + deletes]
    write_change_files(source, TABLE, batches)
    sink, options, store = _destination(kind, tmp_path)
    checkpoint = tmp_path / "ck"
    failing = change_stream(spark, source, TABLE).withColumn(
        "cdc$operation_name", F.udf(_fail_once, StringType())(F.col("cdc$operation_name"))
    )
    _FLAG.write_text("fail")
    with pytest.raises(Exception, match="injected failure"):
        run_to_end(failing, sink, options, checkpoint)  # batch 0 commits, batch 1 fails
    assert not _FLAG.exists()
    query = json.loads((checkpoint / "metadata").read_text())["id"]
    assert store.changes_committed(f"ringflow-{query}") == 0
    run_to_end(failing, sink, options, checkpoint)
    clean = _snapshot(store)
    log = [
        change_from_row(TABLE, {k: v for k, v in r.items() if k != "date"})
        for r in change_log_rows(store)
    ]
    assert sorted(log, key=repr) == sorted(changes, key=repr)  # each change once
    assert differences(_expected_current(), clean[1]) == []
    assert store.changes_committed(f"ringflow-{query}") == 1
    assert store.current_committed(f"ringflow-{query}") == 1

    # crash after both commits, before Spark's: batch 1 runs again and changes nothing
    forget_commit(checkpoint, 1)
    run_to_end(failing, sink, options, checkpoint)
    assert _snapshot(store) == clean
