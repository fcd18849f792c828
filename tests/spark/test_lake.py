"""The Parquet change lake: exactly-once commits by batch id, replays, reading back."""

from __future__ import annotations

import os
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
)
from ringflow.pipeline._lake import _stage_batches, _write_config, commit_staged

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


def _staged_files(root: Path) -> list[Path]:
    return list(root.rglob("_staging/**/*.parquet"))


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
    assert _staged_files(lake) == []

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
    assert _staged_files(other) == []


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


def test_committing_a_batch_id_twice_changes_nothing(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    config = _write_config(lake_options(lake, TABLE, rows_per_file=5), None)
    batch = pa.Table.from_pylist(
        [change_to_arrow_row(TABLE, c) for c in workload()], schema=change_arrow_schema(TABLE)
    ).to_batches()

    first = _stage_batches(config, "q/7", "stream-q", iter(batch))
    assert commit_staged(config, [first], "stream-q", "7") is True
    snapshot = _lake_snapshot(lake)
    replay = _stage_batches(config, "q/7", "stream-q", iter(batch))
    assert commit_staged(config, [replay], "stream-q", "7") is False
    assert _lake_snapshot(lake) == snapshot
    assert _staged_files(lake) == []
    assert all(f.rows <= 5 for f in first.files)


def test_lake_options_fail_fast(tmp_path: Path) -> None:
    with pytest.raises(PipelineConfigError, match="'path'"):
        _write_config({"schema": "{}"}, None)
    with pytest.raises(PipelineConfigError, match="unknown option"):
        _write_config({"path": str(tmp_path), "schema": "{}", "compression": "zstd"}, None)
    with pytest.raises(PipelineConfigError, match="bad table description"):
        _write_config({"path": str(tmp_path), "schema": "{not json"}, None)
    with pytest.raises(PipelineConfigError, match="rows_per_file"):
        lake_options(tmp_path, TABLE, rows_per_file=0)
