"""A CDC generation switch during ``ringflow replicate`` (issue 8 §4).

A 3-node RF 3 edge cluster of this module (its own loopback block: a 4th node joins it, which
the session's shared ``edge_cluster`` must not see) with a CDC table; ``ringflow replicate
--continuous`` (a child process, source read at QUORUM, 1 s confidence window) feeds the hub
(the session's one-node ringflow cluster, ``conftest.hub_node``, written at ONE), a Parquet lake
and PostgreSQL while a QUORUM workload writes; a 4th node joins (``ringflow cluster add``:
its bootstrap publishes a new CDC generation starting a few seconds ahead) with the workload
going on, then more writes land in the new generation. Afterwards:

* ``system_distributed.cdc_generation_timestamps`` holds two generations;
* the source finished the old generation up to the new one's start before moving on: every lake
  change before the new start is on a stream of the old generation, every later one on a stream
  of the new one; the lake's batches (commit markers, in order) never put an old-generation
  change after a new-generation one; Spark's offset log has the old generation's watermark
  standing exactly at the new start - 1 ms before the first offset in the new generation;
* the hub, the lake and PostgreSQL each equal the edge table read at ALL (keys, values, write
  timestamps), and the lake holds each change of the CDC log (a batch read through
  ``ringflow-cdc``) exactly once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from pyspark.sql import SparkSession

from ringflow.cli._demo import DDL, TABLE, Workload, driver_cluster
from ringflow.cli._demo_cluster import LocalCluster, NodeProcess, free_loopback_block
from ringflow.pipeline import Change, change_arrow_schema, change_from_row
from ringflow.pipeline._cdc_source import generations, vnode_stream_groups
from ringflow.pipeline._lake import table_dir
from ringflow.pipeline._replicate import cdc_options
from ringflow.schema import Table
from tests.spark._replication import (
    Job,
    assert_lake_is_log,
    batch_offsets,
    check_destinations,
    committed_watermark,
    wait_for,
    write,
)

KEYSPACE = "gen_switch"
CONFIDENCE_MS = 1000
QUERY_WINDOW_MS = 5000


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """3 nodes (2 vnodes each, gossip every 200 ms) on a block with room for a 4th."""
    data = Path(tempfile.mkdtemp(prefix="ringflow-gen-switch-"))
    first = free_loopback_block(4)
    edge = LocalCluster(data, 3, first_address=first, num_tokens=2, gossip_interval_ms=200)
    try:
        yield edge.start()
    finally:
        edge.stop()
        for log in sorted(data.glob("node*/node.log")):
            print(f"--- {log}", log.read_text(errors="replace")[-600:], sep="\n")


def _create(session: Any, rf: int, cdc: str) -> None:
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
    )
    session.execute(DDL.format(ks=KEYSPACE, t=TABLE, cdc=cdc))


@pytest.fixture(scope="module")
def edge(cluster: LocalCluster, hub: Any) -> Iterator[Any]:
    """A token-aware QUORUM driver session on the edge, with the CDC table created; the same
    table (RF 1, no CDC) on the hub."""
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy())
    driver = driver_cluster(cluster.addresses, 9042, policy, "QUORUM")
    try:
        session = driver.connect()
        _create(session, 3, " WITH cdc = {'enabled': true}")
        _create(hub, 1, "")
        yield session
    finally:
        driver.shutdown()


def _add_node(cluster: LocalCluster, log: Path) -> subprocess.Popen[bytes]:
    """``ringflow cluster add`` in a child process (it returns when the node is NORMAL)."""
    script = Path(sys.executable).parent / "ringflow"
    command = [str(script), "cluster", "add", "--data", str(cluster.data), "--timeout", "240"]
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def _lake_batches(lake: Path, table: Table) -> list[list[Change]]:
    """The lake's committed batches of ``table``, in commit order (one streaming query)."""
    import pyarrow.parquet as pq

    directory = table_dir(lake, table)
    markers = sorted((directory / "_commits").glob("*/*.json"))
    assert len({m.parent for m in markers}) == 1, markers  # one query, batch ids in order
    schema = change_arrow_schema(table)
    batches = []
    for marker in markers:
        changes = []
        for entry in json.loads(marker.read_text())["files"]:
            rows = pq.read_table(str(directory / entry["path"]), schema=schema).to_pylist()
            changes.extend(change_from_row(table, row) for row in rows)
        batches.append(changes)
    return batches


def _check_generation_order(
    batches: list[list[Change]], streams: dict[int, set[bytes]], new_start_ms: int
) -> None:
    """Changes before the new start are on old streams, later ones on new streams; no batch
    with an old-generation change after one with a new-generation change."""
    old, new = sorted(streams)
    seen_new = False
    counts = {old: 0, new: 0}
    for index, batch in enumerate(batches):
        in_batch = set()
        for change in batch:
            generation = old if change.time_us < new_start_ms * 1000 else new
            assert change.stream_id in streams[generation], (index, change)
            in_batch.add(generation)
            counts[generation] += 1
        assert not (seen_new and old in in_batch), f"batch {index}: old changes after new ones"
        seen_new = seen_new or new in in_batch
    assert counts[old] > 0 and counts[new] > 0, counts  # both generations were replicated


def _check_offsets(checkpoint: Path, old_ms: int, new_ms: int) -> None:
    """Spark's offset log: generations never go back, and the last old-generation offset
    before the first new-generation one stands at the new start - 1 ms."""
    offsets = [offset for _, offset in batch_offsets(checkpoint)]
    assert [o["generation"] for o in offsets] == sorted(o["generation"] for o in offsets)
    assert [o["watermark_ms"] for o in offsets] == sorted(o["watermark_ms"] for o in offsets)
    first_new = next(i for i, o in enumerate(offsets) if o["generation"] == new_ms)
    assert first_new > 0 and offsets[first_new - 1] == {
        "generation": old_ms,
        "watermark_ms": new_ms - 1,
    }, offsets


def _wait_caught_up(job: Job, checkpoint: Path, last_write_ms: int) -> None:
    """Until the channel's sink committed a batch whose watermark passed the last write."""

    def done() -> bool:
        return not job.running() or (committed_watermark(checkpoint) or 0) >= last_write_ms

    wait_for(done, f"the {checkpoint.name} channel past the last write")
    assert job.running(), job.output()


def test_replication_reads_the_old_generation_up_to_the_new_one_then_the_new_one(
    spark: SparkSession,
    cluster: LocalCluster,
    edge: Any,
    hub_node: NodeProcess,
    hub: Any,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    name = f"{KEYSPACE}.{TABLE}"
    checkpoints = tmp_path / "checkpoints"
    arguments = [
        "replicate",
        *("--source", cluster.contact_points, "--table", name, "--consistency", "QUORUM"),
        *("--to", f"ringflow://{hub_node.endpoint}?consistency=ONE"),
        *("--to", f"parquet:{tmp_path / 'lake'}", "--to", postgres_url),
        *("--checkpoint", str(checkpoints)),
        *("--confidence-window-ms", str(CONFIDENCE_MS)),
        *("--query-window-ms", str(QUERY_WINDOW_MS)),
    ]
    workload = Workload(edge, 400, seed=23, keyspace=KEYSPACE)
    write(workload, 60, pause_s=0)
    job = Job(arguments, tmp_path / "job.log")
    started = time.monotonic()

    def phase(text: str) -> None:  # shown when the test fails (or with -s)
        print(f"{time.monotonic() - started:6.1f}s {text}", flush=True)

    try:
        while not (checkpoints / "lake" / "commits" / "0").exists():
            assert job.running(), job.output()
            write(workload, 1, pause_s=0.5)
        phase("the lake channel committed batch 0; a 4th node joins")
        adding = _add_node(cluster, tmp_path / "add.log")
        while adding.poll() is None:  # the workload goes on during the bootstrap
            write(workload, 1, pause_s=0.1)
        assert adding.returncode == 0, (tmp_path / "add.log").read_text(errors="replace")
        phase("the 4th node is NORMAL; writes in the new generation")
        write(workload, 60)
        last_write_ms = time.time_ns() // 1_000_000
        for channel in ("hub", "lake", "postgres"):
            _wait_caught_up(job, checkpoints / channel, last_write_ms)
        phase("all three channels past the last write")
    finally:
        job.kill()

    known = generations(edge)
    assert len(known) == 2, known
    old_ms, new_ms = known
    streams = {g: {s for group in vnode_stream_groups(edge, g) for s in group} for g in known}
    assert not streams[old_ms] & streams[new_ms]
    table, rows = check_destinations(
        edge, cluster.contact_points, KEYSPACE, tmp_path, postgres_url, hub
    )
    assert rows > 20
    _check_generation_order(_lake_batches(tmp_path / "lake", table), streams, new_ms)
    _check_offsets(checkpoints / "lake", old_ms, new_ms)
    options = cdc_options(cluster.contact_points, name)
    options.update(confidence_window_ms=str(CONFIDENCE_MS))
    log = assert_lake_is_log(spark, table, tmp_path / "lake", options)
    assert {c.stream_id for c in log} & streams[new_ms]
