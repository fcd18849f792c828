"""The PostgreSQL sink: guarded upserts give the LWW state whatever the order or the replays."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession

from ringflow.cdc import CdcOperation
from ringflow.pipeline import (
    PipelineConfigError,
    apply_changes,
    change_schema,
    change_to_row,
    postgres_options,
    read_postgres_live,
    table_to_json,
)

from ._streams import change_stream, chunks, forget_commit, run_to_end, write_change_files
from ._workload import (
    NOW_S,
    TABLE,
    as_comparable,
    change,
    expected_rows,
    row,
    shuffled_with_duplicates,
    workload,
)


def _batches(url: str, target: str) -> int:
    with psycopg.connect(url) as connection:
        found = connection.execute(f'SELECT count(*) FROM "{target}__batches"').fetchone()
        return int(found[0]) if found else 0


def test_stream_with_replays_and_late_writes_equals_the_lww_state(
    spark: SparkSession, tmp_path: Path, postgres_url: str
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    write_change_files(source, TABLE, chunks(shuffled_with_duplicates(workload(), 7), 4))
    options = postgres_options(postgres_url, "items_stream", TABLE, rows_per_transaction=8)
    run_to_end(change_stream(spark, source, TABLE), "ringflow-postgres", options, checkpoint)
    state = read_postgres_live(postgres_url, "items_stream", TABLE, now_s=NOW_S)
    assert as_comparable(state) == expected_rows()
    assert _batches(postgres_url, "items_stream") == 4

    # Batch 3 runs again after a crash between the sink's work and Spark's commit.
    forget_commit(checkpoint, 3)
    run_to_end(change_stream(spark, source, TABLE), "ringflow-postgres", options, checkpoint)
    assert read_postgres_live(postgres_url, "items_stream", TABLE, now_s=NOW_S) == state
    assert _batches(postgres_url, "items_stream") == 4

    # Late writes older than what they would overwrite or resurrect change nothing.
    late = [
        change(CdcOperation.INSERT, 1, row("acme", 1, 4, "x"), {"amount": -4}),
        change(CdcOperation.INSERT, 2, row("acme", 1, 3, "a"), {"note": "zombie"}),
        change(CdcOperation.UPDATE, 3, row("acme", 1, 1, "a"), {"amount": -1, "note": "old"}),
        change(CdcOperation.INSERT, 4, row("acme", 2, 1, "a"), {"amount": -2}),
        change(CdcOperation.UPDATE, 5, row("acme", 1, 1, "a"), {"attrs": {"late": 1}}),
    ]
    write_change_files(source, TABLE, [late])
    run_to_end(change_stream(spark, source, TABLE), "ringflow-postgres", options, checkpoint)
    assert read_postgres_live(postgres_url, "items_stream", TABLE, now_s=NOW_S) == state
    assert _batches(postgres_url, "items_stream") == 5


def test_applying_without_spark_in_any_order_gives_the_same_state(postgres_url: str) -> None:
    for seed, target in [(1, "items_a"), (2, "items_b")]:
        changes = shuffled_with_duplicates(workload(), seed)
        assert apply_changes(postgres_url, target, TABLE, changes, rows_per_transaction=5) > 0
        state = read_postgres_live(postgres_url, target, TABLE, now_s=NOW_S)
        assert as_comparable(state) == expected_rows()
    # expired and deleted data stay out of the view at any later now as well
    later = read_postgres_live(postgres_url, "items_a", TABLE, now_s=NOW_S + 10_000)
    assert ("acme", 1, 2, "c") not in later and ("acme", 1, 1, "a") in later


def test_batch_write_and_bad_options(spark: SparkSession, postgres_url: str) -> None:
    frame = spark.createDataFrame(
        [change_to_row(TABLE, c) for c in workload()], change_schema(TABLE)
    )
    options = postgres_options(postgres_url, "items_batch", TABLE)
    frame.write.format("ringflow-postgres").mode("append").options(**options).save()
    state = read_postgres_live(postgres_url, "items_batch", TABLE, now_s=NOW_S)
    assert as_comparable(state) == expected_rows()

    closed_port = postgres_url.rsplit(":", 1)[0] + ":1/postgres"
    with pytest.raises(PipelineConfigError, match=r"cannot connect to PostgreSQL at .*:1/postgres"):
        postgres_options(closed_port, "items_x", TABLE)
    with pytest.raises(PipelineConfigError, match=r"\*\*\*"):
        postgres_options("postgresql://u:secret@127.0.0.1:1/db", "items_x", TABLE)
    with pytest.raises(PipelineConfigError, match="not postgresql://"):
        postgres_options("mysql://127.0.0.1/db", "items_x", TABLE)
    with pytest.raises(PipelineConfigError, match="target table"):
        postgres_options(postgres_url, "bad-name", TABLE)
    bad = {"url": postgres_url, "table": "t", "schema": table_to_json(TABLE), "batch": "1"}
    with pytest.raises(Exception, match="unknown option"):
        frame.write.format("ringflow-postgres").mode("append").options(**bad).save()
    missing = {"url": postgres_url, "schema": table_to_json(TABLE)}
    with pytest.raises(Exception, match=r"PipelineConfigError.*'table' is missing"):
        frame.write.format("ringflow-postgres").mode("append").options(**missing).save()


def test_stream_with_unreachable_url_fails_with_the_typed_error(
    spark: SparkSession, tmp_path: Path, postgres_url: str
) -> None:
    source = tmp_path / "in"
    write_change_files(source, TABLE, [workload()[:3]])
    closed_port = postgres_url.rsplit(":", 1)[0] + ":1/postgres"
    options = {"url": closed_port, "table": "items_never", "schema": table_to_json(TABLE)}
    with pytest.raises(Exception, match=r"PipelineConfigError: cannot connect to PostgreSQL at"):
        run_to_end(
            change_stream(spark, source, TABLE), "ringflow-postgres", options, tmp_path / "ckpt"
        )
