"""The Parquet change lake: exactly-once commits by batch id, replays, reading back."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from ringflow.pipeline import (
    Change,
    PipelineConfigError,
    change_arrow_schema,
    change_from_row,
    change_schema,
    change_to_arrow_row,
    change_to_row,
    committed_files,
    lake_options,
    materialize,
    read_lake,
    read_lake_changes,
    uncommitted_files,
    vacuum_lake,
)
from ringflow.pipeline._lake import (
    _LakeConfig,
    _write_config,
    abort_batch,
    commit_batch,
    table_dir,
    write_task_files,
)

from ._streams import change_stream, chunks, forget_commit, run_to_end, write_change_files
from ._workload import (
    NOW_S,
    TABLE,
    as_comparable,
    expected_rows,
    shuffled_with_duplicates,
    workload,
)


def _ordered(changes: list[Change]) -> list[Change]:
    return sorted(changes, key=lambda c: (c.time.bytes, c.batch_seq_no))


def _lake_snapshot(root: Path) -> tuple[list[str], list[Change]]:
    """(committed file names, sorted change reprs): what a reader can see."""
    files = sorted(p.name for p in committed_files(root, TABLE))
    return files, _ordered(read_lake_changes(root))


def _left_over(root: Path) -> list[Path]:
    """Files of the lake no reader reads (written by attempts that did not commit)."""
    return uncommitted_files(root, TABLE)


_FLAG = Path(os.environ.get("TMPDIR", "/tmp")) / "ringflow-lake-fail-once"


def _fail_once(value):  # type hints would make PySpark guess a pandas UDF
    """Raise the first time the flag file exists and the partition delete goes by."""
    if value == "PARTITION_DELETE" and _FLAG.exists():
        _FLAG.unlink()
        raise RuntimeError("injected failure in a writer task")
    return value


def test_stream_replays_leave_the_lake_as_an_uninterrupted_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    changes = shuffled_with_duplicates(workload(), 3)
    source = tmp_path / "in"
    write_change_files(source, TABLE, chunks(changes, 3))
    lake, checkpoint = tmp_path / "lake", tmp_path / "ckpt"
    options = lake_options(lake, TABLE, rows_per_file=7)
    run_to_end(change_stream(spark, source, TABLE), "ringflow-lake", options, checkpoint)
    clean = _lake_snapshot(lake)
    assert clean[1] == _ordered(changes)
    assert as_comparable(materialize(TABLE, clean[1], NOW_S)) == expected_rows()
    assert len(list((lake / "table=shop.items" / "_commits").rglob("*.json"))) == 3

    # Crash after the lake commit, before Spark's: batch 2 runs again and must change nothing.
    forget_commit(checkpoint, 2)
    run_to_end(change_stream(spark, source, TABLE), "ringflow-lake", options, checkpoint)
    assert _lake_snapshot(lake) == clean
    assert _left_over(lake) == []

    # A task fails in the middle of batch 1 of a fresh query; the restart replays it.
    other, other_checkpoint = tmp_path / "lake2", tmp_path / "ckpt2"
    failing = change_stream(spark, source, TABLE).withColumn(
        "cdc$operation_name", F.udf(_fail_once, StringType())(F.col("cdc$operation_name"))
    )
    _FLAG.write_text("fail")
    with pytest.raises(Exception, match="injected failure"):
        run_to_end(failing, "ringflow-lake", lake_options(other, TABLE), other_checkpoint)
    assert not _FLAG.exists()
    run_to_end(failing, "ringflow-lake", lake_options(other, TABLE), other_checkpoint)
    assert _lake_snapshot(other)[1] == clean[1]
    assert _left_over(other) == []


def test_materialized_lake_equals_the_expected_table(spark: SparkSession, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    frame = spark.createDataFrame(
        [change_to_row(TABLE, c) for c in workload()], change_schema(TABLE)
    )
    frame.write.format("ringflow-lake").mode("append").options(**lake_options(lake, TABLE)).save()
    assert as_comparable(materialize(TABLE, read_lake_changes(lake), NOW_S)) == expected_rows()
    read_back = [change_from_row(TABLE, r) for r in read_lake(spark, lake).collect()]
    assert _ordered(read_back) == _ordered(workload())
    with pytest.raises(Exception, match=r"PipelineConfigError.*unknown option"):
        frame.write.format("ringflow-lake").mode("append").options(
            **lake_options(lake, TABLE), compression="zstd"
        ).save()
    with pytest.raises(PipelineConfigError, match=r"no table 'shop\.other'"):
        read_lake(spark, lake, "shop.other")
    with pytest.raises(Exception, match="append-only"):
        frame.write.format("ringflow-lake").mode("overwrite").options(
            **lake_options(lake, TABLE)
        ).save()


def _arrow_batches(changes: list[Change], size: int = 1_000) -> list[pa.RecordBatch]:
    rows = [change_to_arrow_row(TABLE, c) for c in changes]
    table = pa.Table.from_pylist(rows, schema=change_arrow_schema(TABLE))
    return table.to_batches(max_chunksize=size)


def _config(root: Path) -> _LakeConfig:
    return _write_config(lake_options(root, TABLE, rows_per_file=5), None)


def test_committing_a_batch_id_twice_changes_nothing(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    config = _config(lake)
    batch = _arrow_batches(workload())

    first = write_task_files(config, "q/7", "stream-q", iter(batch))
    assert commit_batch(config, [first], "stream-q", "7") is True
    snapshot = _lake_snapshot(lake)
    replay = write_task_files(config, "q/7", "stream-q", iter(batch))
    assert commit_batch(config, [replay], "stream-q", "7") is False
    assert _lake_snapshot(lake) == snapshot
    assert _left_over(lake) == []
    assert all(f.rows <= 5 for f in first.files)


def test_the_driver_commits_files_it_cannot_see(tmp_path: Path) -> None:
    """Tasks write under their view of the lake (``executors/``), the driver commits under its
    own (``driver/``), where no data file ever is: the marker lists the tasks' files relative to
    the table, so the two views together are one lake that reads back as the batch. A replay
    the driver skips leaves files it could not delete; they are invisible, and vacuumed."""
    executors, driver = tmp_path / "executors", tmp_path / "driver"
    changes = workload()
    batches = _arrow_batches(changes, size=len(changes) // 2 + 1)
    tasks = [write_task_files(_config(executors), "q/0", "stream-q", iter([b])) for b in batches]
    assert len(tasks) == 2 and all(task.files for task in tasks)
    assert commit_batch(_config(driver), tasks, "stream-q", "0") is True
    assert list(driver.rglob("*.parquet")) == []
    shutil.copytree(driver, executors, dirs_exist_ok=True)  # markers and schema next to the data
    assert _ordered(read_lake_changes(executors)) == _ordered(changes)
    assert _left_over(executors) == []

    replay = write_task_files(_config(executors), "q/0", "stream-q", iter(batches))
    assert commit_batch(_config(driver), [replay], "stream-q", "0") is False
    shutil.copytree(driver, executors, dirs_exist_ok=True)
    assert _ordered(read_lake_changes(executors)) == _ordered(changes)
    left = sorted(table_dir(executors, TABLE) / f.path for f in replay.files)
    assert _left_over(executors) == left
    assert vacuum_lake(executors, TABLE, min_age_s=0) == left
    assert _left_over(executors) == []
    assert _ordered(read_lake_changes(executors)) == _ordered(changes)


def test_a_crash_before_the_marker_leaves_nothing_visible(tmp_path: Path) -> None:
    """The job killed between the steps of a commit: after the tasks wrote their files, and
    after the driver wrote its temporary marker but before linking it. Nothing is visible; the
    replay commits once; an abort reported after the marker deletes none of its files; vacuum
    removes what the crash left once it is old enough, and nothing else."""
    lake = tmp_path / "lake"
    config = _config(lake)
    changes = workload()
    lost = write_task_files(config, "q/3", "stream-q", iter(_arrow_batches(changes)))
    commits = table_dir(lake, TABLE) / "_commits" / "stream-q"
    commits.mkdir(parents=True)
    temporary = commits / f".{3:020d}.json.0123abcd.tmp"
    temporary.write_text("{")  # cut short by the kill
    assert committed_files(lake, TABLE) == []
    crashed = sorted([temporary, *(table_dir(lake, TABLE) / f.path for f in lost.files)])
    assert _left_over(lake) == crashed

    replay = write_task_files(config, "q/3", "stream-q", iter(_arrow_batches(changes)))
    assert commit_batch(config, [replay], "stream-q", f"{3:020d}") is True
    abort_batch(config, [replay], "stream-q", f"{3:020d}")
    snapshot = _lake_snapshot(lake)
    assert snapshot[1] == _ordered(changes)
    assert vacuum_lake(lake, TABLE, min_age_s=3600) == []
    assert vacuum_lake(lake, TABLE, min_age_s=0) == crashed
    assert _left_over(lake) == []
    assert _lake_snapshot(lake) == snapshot


def _failing(batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches
    raise RuntimeError("the task fails after its files were written")


def test_a_failing_task_deletes_its_own_files(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    batches = _arrow_batches(workload(), size=4)  # rows_per_file 5: files complete on the way
    with pytest.raises(RuntimeError, match="task fails"):
        write_task_files(_config(lake), "q/0", "stream-q", _failing(batches))
    assert _left_over(lake) == []
    assert list(lake.rglob("*.parquet")) == []


def test_lake_options_fail_fast(tmp_path: Path) -> None:
    with pytest.raises(PipelineConfigError, match="'path'"):
        _write_config({"schema": "{}"}, None)
    with pytest.raises(PipelineConfigError, match="unknown option"):
        _write_config({"path": str(tmp_path), "schema": "{}", "compression": "zstd"}, None)
    with pytest.raises(PipelineConfigError, match="bad table description"):
        _write_config({"path": str(tmp_path), "schema": "{not json"}, None)
    with pytest.raises(PipelineConfigError, match="rows_per_file"):
        lake_options(tmp_path, TABLE, rows_per_file=0)
