"""``ringflow-cdc`` (batch and streaming) against a real node.

Proves: after a workload of inserts, updates, column deletes, row, range and partition deletes,
TTL'd writes and a static column, a batch read returns exactly the log rows the driver sees in
``<table>_scylla_cdc_log`` (each once, in the change schema, sorted by stream, time and
batch_seq_no within a partition, post-images included), and applying them with the sinks'
``materialize`` rebuilds the base table; a streaming query with small windows, run during a
workload, delivers every log row exactly once and, restarted from its checkpoint, delivers only
what was written since; bad options and tables without CDC fail with PipelineConfigError before
any job starts; a read pinned to a table's schema (option ``schema``) that finds the log with
other columns (an ``ALTER TABLE`` since) fails with SourceSchemaChanged naming them, converting
nothing, and the same read with the new schema has the new column's values (issue 15).
"""

from __future__ import annotations

import itertools
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ringflow.cli._demo_cluster import NodeProcess
from ringflow.pipeline import (
    change_from_log_row,
    change_from_row,
    change_to_row,
    materialize,
    table_to_json,
)
from ringflow.pipeline._cdc_source import read_changes
from ringflow.pipeline._cluster_client import load_table, plain_value
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.schema import Table
from tests.spark import conftest_sources
from tests.spark.conftest_sources import source_options

# The node fixtures, shared with the other source tests (module scope: one node here).
driver = conftest_sources.driver
ringflow_node = conftest_sources.ringflow_node

KEYSPACE = "changes"
CONFIDENCE_MS = 1000
SMALL = {"confidence_window_ms": CONFIDENCE_MS, "query_window_ms": 700}


@pytest.fixture(scope="module")
def keyspace(driver: Any) -> Any:
    _, session = driver
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    return driver


def _workload(session: Any, table: str, rng: random.Random, steps: int) -> None:
    """Inserts, updates, column/row/partition/range deletes, TTLs, static and set columns."""
    insert = session.prepare(f"INSERT INTO {table} (pk, ck, v, n, s) VALUES (?, ?, ?, ?, ?)")
    for step in range(steps):
        pk, ck = rng.randrange(8), rng.randrange(6)
        kind = rng.random()
        if kind < 0.4:
            session.execute(insert, (pk, ck, f"v{step}", step, {step % 7, step % 3}))
        elif kind < 0.55:
            session.execute(
                f"UPDATE {table} SET v = 'u{step}', s = s + {{9}} WHERE pk = {pk} AND ck = {ck}"
            )
        elif kind < 0.62:
            session.execute(
                f"UPDATE {table} USING TTL 3600 SET n = {step} WHERE pk = {pk} AND ck = {ck}"
            )
        elif kind < 0.68:
            session.execute(f"UPDATE {table} SET st = 'st{step}' WHERE pk = {pk}")
        elif kind < 0.75:
            session.execute(f"DELETE v FROM {table} WHERE pk = {pk} AND ck = {ck}")
        elif kind < 0.85:
            session.execute(f"DELETE FROM {table} WHERE pk = {pk} AND ck = {ck}")
        elif kind < 0.9:
            session.execute(f"DELETE FROM {table} WHERE pk = {pk}")
        else:
            low = rng.randrange(5)
            session.execute(
                f"DELETE FROM {table} WHERE pk = {pk} AND ck >= {low} AND ck < {low + 2}"
            )


def _create(session: Any, name: str, cdc: str) -> str:
    session.execute(
        f"CREATE TABLE {KEYSPACE}.{name} (pk int, ck int, v text, n int, s set<int>, "
        f"st text static, PRIMARY KEY (pk, ck)) WITH cdc = {cdc}"
    )
    return f"{KEYSPACE}.{name}"


def _log_rows(cluster: Any, session: Any, name: str) -> tuple[Table, list[tuple[object, ...]]]:
    """The driver's full view of the log, as change rows (tuples of the change schema)."""
    cluster.refresh_schema_metadata()
    table = load_table(cluster, KEYSPACE, name)
    rows = session.execute(f"SELECT * FROM {KEYSPACE}.{name}_scylla_cdc_log")
    changes = [
        change_from_log_row(table, {k: plain_value(v) for k, v in row.items()}) for row in rows
    ]
    return table, [change_to_row(table, c) for c in changes]


def _identity(row: Any) -> tuple[object, ...]:
    return (bytes(row[0]), row[1], row[3])  # stream, time, batch_seq_no


def _spark_rows(frame: Any) -> list[tuple[Any, ...]]:
    return [tuple(bytes(v) if isinstance(v, bytearray) else v for v in r) for r in frame.collect()]


def _hashable(row: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row)


def _base_rows(session: Any, name: str) -> dict[tuple[object, ...], dict[str, object]]:
    result: dict[tuple[object, ...], dict[str, object]] = {}
    for row in session.execute(f"SELECT * FROM {KEYSPACE}.{name}"):
        values: dict[str, object] = {
            c: (frozenset(row[c]) if c == "s" else row[c])
            for c in ("v", "n", "s", "st")
            if row[c] is not None
        }
        result[(row["pk"], row["ck"])] = values
    return dict(result)


def test_batch_read_equals_the_log_and_rebuilds_the_table(
    spark: SparkSession, ringflow_node: NodeProcess, keyspace: Any
) -> None:
    cluster, session = keyspace
    _create(session, "t", "{'enabled': true, 'preimage': true, 'postimage': true}")
    _workload(session, f"{KEYSPACE}.t", random.Random(8), 300)
    time.sleep(CONFIDENCE_MS / 1000 + 0.5)
    table, expected = _log_rows(cluster, session, "t")
    frame = read_changes(spark, source_options(ringflow_node, KEYSPACE, "t", **SMALL))
    with_partition = frame.withColumn("_part", F.spark_partition_id())
    collected = _spark_rows(with_partition)
    rows = [r[:-1] for r in collected]
    assert len(rows) == len(expected) > 300
    assert len({_identity(r) for r in rows}) == len(rows)  # nothing twice
    assert {_hashable(r) for r in rows} == {_hashable(r) for r in expected}
    assert {"PRE_IMAGE", "POST_IMAGE"} <= {r[5] for r in rows}
    # sorted by (stream, time, batch_seq_no) within each partition
    by_partition: dict[int, list[tuple[Any, ...]]] = {}
    for r in collected:
        by_partition.setdefault(int(r[-1]), []).append((bytes(r[0]), r[2], r[1], r[3]))
    for ordered in by_partition.values():
        for before, after in itertools.pairwise(ordered):
            assert before[0] < after[0] or (
                before[0] == after[0] and (before[1], before[3]) <= (after[1], after[3])
            )
    changes = [change_from_row(table, row) for row in frame.collect()]
    state = materialize(table, changes, int(time.time()))
    rebuilt = {
        key: {k: v for k, v in live.values.items() if v is not None} for key, live in state.items()
    }
    assert rebuilt == _base_rows(session, "t")


def test_starting_and_ending_time_bound_a_batch_read(
    spark: SparkSession, ringflow_node: NodeProcess, keyspace: Any
) -> None:
    _, session = keyspace
    _create(session, "window", "{'enabled': true}")
    session.execute(f"INSERT INTO {KEYSPACE}.window (pk, ck, v) VALUES (1, 1, 'old')")
    time.sleep(0.05)
    middle_ms = time.time_ns() // 1_000_000
    time.sleep(0.05)
    session.execute(f"INSERT INTO {KEYSPACE}.window (pk, ck, v) VALUES (1, 2, 'new')")
    time.sleep(CONFIDENCE_MS / 1000 + 0.3)
    options = source_options(ringflow_node, KEYSPACE, "window", **SMALL)
    after = read_changes(spark, {**options, "startingTime": str(middle_ms)}).collect()
    before = read_changes(spark, {**options, "endingTime": str(middle_ms)}).collect()
    assert [r.v for r in after] == ["new"]
    assert [r.v for r in before] == ["old"]
    # An empty window (ending before starting): no partition planned, an empty answer (Spark
    # then reads one InputPartition(None); it used to fail the read's type assertion)
    empty = {**options, "startingTime": str(middle_ms), "endingTime": str(middle_ms - 20)}
    assert read_changes(spark, empty).count() == 0


def _watermark(query: Any) -> int:
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return -1
    end = progress["sources"][0]["endOffset"]
    return int((json.loads(end) if isinstance(end, str) else end)["watermark_ms"])


def _run_until(query: Any, target_ms: int, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _watermark(query) < target_ms:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"watermark stuck at {_watermark(query)}"
        time.sleep(0.3)


def test_stream_delivers_every_log_row_once_across_a_restart(
    spark: SparkSession, ringflow_node: NodeProcess, keyspace: Any, tmp_path: Path
) -> None:
    cluster, session = keyspace
    name = _create(session, "streamed", "{'enabled': true}")
    options = source_options(
        ringflow_node, KEYSPACE, "streamed", max_window_ms=4000, max_rows_per_batch=50, **SMALL
    )
    checkpoint = str(tmp_path / "checkpoint")
    # An idempotent sink keyed by batch id (a replayed batch replaces itself).
    batches: dict[int, list[tuple[object, ...]]] = {}

    def sink(frame: Any, batch_id: int) -> None:
        batches[batch_id] = _spark_rows(frame)

    def start(**trigger: Any) -> Any:
        frame = read_changes(spark, options, streaming=True)
        writer = frame.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
        return writer.trigger(**trigger).start()

    query = start(processingTime="500 milliseconds")
    try:
        rng = random.Random(3)
        for _ in range(3):
            _workload(session, name, rng, 60)
            time.sleep(0.7)
        last_write_ms = time.time_ns() // 1_000_000
        _run_until(query, last_write_ms)
    finally:
        query.stop()
    first_ids = set(batches)
    first = [r for rows in batches.values() for r in rows]
    _, expected = _log_rows(cluster, session, "streamed")
    assert len(first_ids) > 1
    # ReadMaxRows(50) cuts batches at query-window edges (a batch holds at least one window, and
    # the workload writes well under 200 rows per 700 ms window).
    assert max(len(rows) for rows in batches.values()) < 200
    assert len(first) == len(expected) > 180
    assert len({_identity(r) for r in first}) == len(first)
    assert {_hashable(r) for r in first} == {_hashable(r) for r in expected}

    _workload(session, name, rng, 20)
    time.sleep(CONFIDENCE_MS / 1000 + 0.5)
    again = start(availableNow=True)
    assert again.awaitTermination(120)
    assert again.exception() is None
    second = [r for batch_id, rows in batches.items() if batch_id not in first_ids for r in rows]
    _, everything = _log_rows(cluster, session, "streamed")
    assert not {_identity(r) for r in first} & {_identity(r) for r in second}
    assert {_hashable(r) for r in first + second} == {_hashable(r) for r in everything}
    assert len(first) + len(second) == len(everything) > len(expected)


def test_bad_cdc_options_fail_before_any_job(
    spark: SparkSession, ringflow_node: NodeProcess, keyspace: Any
) -> None:
    _, session = keyspace
    session.execute(f"CREATE TABLE {KEYSPACE}.plain (k int PRIMARY KEY, v text)")
    base = source_options(ringflow_node, KEYSPACE, "plain")
    with pytest.raises(PipelineConfigError, match="does not have CDC enabled"):
        read_changes(spark, base)
    with pytest.raises(PipelineConfigError, match="does not have CDC enabled"):
        read_changes(spark, base, streaming=True)
    good = source_options(ringflow_node, KEYSPACE, "missing")
    with pytest.raises(PipelineConfigError, match="unknown table"):
        read_changes(spark, good, streaming=True)
    for option, value in [
        ("query_window_ms", "0"),
        ("confidence_window_ms", "-1"),
        ("max_rows_per_batch", "x"),
        ("startingTime", "-5"),
    ]:
        with pytest.raises(PipelineConfigError, match=option):
            read_changes(spark, {**base, option: value})


def test_a_read_pinned_to_an_old_schema_fails_and_the_new_schema_reads_the_new_column(
    spark: SparkSession, ringflow_node: NodeProcess, keyspace: Any
) -> None:
    cluster, session = keyspace
    name = f"{KEYSPACE}.altered"
    session.execute(
        f"CREATE TABLE {name} (pk int, ck int, v text, PRIMARY KEY (pk, ck)) "
        "WITH cdc = {'enabled': true}"
    )
    session.execute(f"INSERT INTO {name} (pk, ck, v) VALUES (1, 1, 'before')")
    options = source_options(ringflow_node, KEYSPACE, "altered", confidence_window_ms=0)
    cluster.refresh_table_metadata(KEYSPACE, "altered")
    first = table_to_json(load_table(cluster, KEYSPACE, "altered"))
    assert len(read_changes(spark, {**options, "schema": first}).collect()) == 1
    session.execute(f"ALTER TABLE {name} ADD w int")
    session.execute(f"INSERT INTO {name} (pk, ck, v, w) VALUES (2, 1, 'after', 7)")
    with pytest.raises(Exception, match=r"SourceSchemaChanged.*now also \['cdc\$deleted_w', 'w'\]"):
        read_changes(spark, {**options, "schema": first}).collect()
    rows = read_changes(spark, options).collect()  # the table as it is now
    assert sorted((r["pk"], r["w"]) for r in rows) == [(1, None), (2, 7)]
    cluster.refresh_table_metadata(KEYSPACE, "altered")
    second = table_to_json(load_table(cluster, KEYSPACE, "altered"))
    session.execute(f"ALTER TABLE {name} DROP v")
    dropped = r"SourceSchemaChanged.*no longer \['cdc\$deleted_v', 'v'\]"
    with pytest.raises(Exception, match=dropped):
        read_changes(spark, {**options, "schema": second}).collect()
    after = read_changes(spark, options).collect()
    assert sorted((r["pk"], r["w"]) for r in after) == [(1, None), (2, 7)]
    assert "v" not in after[0].asDict()
