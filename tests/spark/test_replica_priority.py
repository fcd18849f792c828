"""Priority and order of replica-side transmission (issue 14 §4; REPLICATION.md decision 7).

Two Parquet lake channels of one table on the session's 3-node edge (``conftest.edge_cluster``),
sliced 1 s x 3: ``prio-high`` (priority 90, lifo) and ``prio-low`` (priority 10, fifo), created
before any write (a node keeps no data of a table without a channel). Five bursts of writes to
one partition, two seconds apart, make a backlog of about five sealed slices of one token range
(one copy each: the three replicas agree). Then ``--capture replica --once --permits 1``
(``ReplicaJob``, the command's code, on the session's Spark).

What one permit guarantees, per ``replication.PermitBroker``: a permit goes to the eligible
channel (reachable, transmission on) with pending work and the highest priority, and it is
given back only when its copy's batch is committed; so while the high channel is eligible and
has offered copies, the low channel is granted nothing, and every batch carries exactly one
slice copy. With every slice sealed before the job starts and no query failing (asserted),
the high channel has pending copies until its last one is granted: **every one of its slices
is committed at its destination before the low channel's first**. Within a channel the broker
grants in dispatch order (``_dispatch_order``: fifo by slice start ascending, lifo descending),
re-offered each round, so with one permit the commits come **newest slice first (lifo)** or
**oldest first (fifo)**. The test observes this at the destinations only: each lake's commit
markers (``_commits/<namespace>/<batch>.json``: batch order and ``committed_at``) and the write
times of the changes each marker's files hold. It runs in about 40-60 s (the edge and Spark
are the session's).

The same run checks what the job tells of its channels at its end: its Prometheus metrics,
served over HTTP and scraped once (sends, unique changes, rows and batches equal the summary's,
the destination reachable, no backlog left, a lag known) and each channel's row of
``system_replication.channel_progress`` read back (state ``done``, the summary's figures).
"""

from __future__ import annotations

import datetime
import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from cassandra import ConsistencyLevel
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.query import SimpleStatement
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import SparkSession
from rich.console import Console

from ringflow.cli._demo import DDL, TABLE, driver_cluster
from ringflow.cli._demo_cluster import LocalCluster
from ringflow.pipeline import (
    TIME_US_FIELD,
    ChannelSpec,
    JobMetrics,
    ReplicaJob,
    ReplicaSummary,
    create_channel,
    drop_channel,
    load_channel_progress,
    plan_replica_job,
    read_lake_changes,
    serve_job_metrics,
)
from ringflow.replication import Channel, ChannelOrder, SliceSettings
from tests.spark._replication import wait_for, write_statement

pytestmark = pytest.mark.timeout(300)
KEYSPACE = "replica_priority"
SOURCE = f"{KEYSPACE}.{TABLE}"
SLICING = SliceSettings(1, 3)  # a 3 s window: a replica slow to store a write keeps it in sequence
WIDTH_MS = SLICING.slice_width_ms
WINDOW_MS = SLICING.window_ms
BURSTS = 5
ROWS_PER_BURST = 6
BURST_EVERY_S = 2.0
CUSTOMER = 7  # one partition: one token range, so one copy a slice (the replicas agree)
QUORUM = ConsistencyLevel.QUORUM


@pytest.fixture(scope="module")
def edge(edge_cluster: LocalCluster) -> Iterator[tuple[Any, Any]]:
    """A driver (token-aware, QUORUM) and its session on the session's edge."""
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy())
    driver = driver_cluster(edge_cluster.addresses, 9042, policy, "QUORUM")
    try:
        yield driver, driver.connect()
    finally:
        driver.shutdown()


def _sliced_by_channels(cluster: LocalCluster) -> bool:
    """Every node slices the table as its channels say (its status.json)."""
    for index in range(len(cluster.addresses)):
        path = cluster.data / f"node{index + 1}" / "status.json"
        try:
            capture = json.loads(path.read_text())["capture"]
        except (OSError, ValueError, KeyError):
            return False
        sliced = (capture.get("channels") or {}).get("sliced_by_channels") or {}
        if sliced.get(SOURCE) != f"{SLICING.slice_width_s} s x {SLICING.slice_count}":
            return False
    return True


def _write_bursts(session: Any) -> int:
    """``BURSTS`` bursts of ``ROWS_PER_BURST`` inserts, each inside one slice (started just
    after a slice boundary), ``BURST_EVERY_S`` apart; the time of the last write (ms)."""
    insert = session.prepare(
        f"INSERT INTO {SOURCE} (customer, order_id, status, qty) VALUES (?, ?, ?, ?)"
    )
    for burst in range(BURSTS):
        now_ms = time.time_ns() // 1_000_000
        time.sleep((WIDTH_MS - now_ms % WIDTH_MS + 50) / 1000)  # 50 ms into a slice
        for row in range(ROWS_PER_BURST):
            write_statement(session, insert, (CUSTOMER, burst * 100 + row, f"b{burst}", row))
        if burst < BURSTS - 1:
            time.sleep(BURST_EVERY_S - 1.0)
    return time.time_ns() // 1_000_000


def _wait_sealed(session: Any, after_ms: int) -> None:
    """Every node's seal watermark of the table passed the due time of the last write's slice
    (what a --once run delivers)."""
    statement = SimpleStatement(
        "SELECT node, sealed_through_ms FROM system_replication.seal_watermarks "
        "WHERE keyspace_name = %s AND table_name = %s",
        consistency_level=QUORUM,
    )
    due = after_ms + WINDOW_MS + WIDTH_MS

    def sealed() -> bool:
        marks = [row["sealed_through_ms"] for row in session.execute(statement, (KEYSPACE, TABLE))]
        return len(marks) == 3 and min(marks) >= due

    wait_for(sealed, "every node sealed and published the written slices", timeout_s=120)


def _commits(lake: Path) -> list[tuple[datetime.datetime, list[int]]]:
    """The lake's commits of the table in batch order: (committed_at, the slice starts of the
    write times of the changes its files hold, sorted)."""
    directory = lake / f"table={SOURCE}"
    markers = list((directory / "_commits").glob("*/*.json"))
    assert len({marker.parent for marker in markers}) <= 1, "one query, one namespace"
    found = []
    for marker in sorted(markers, key=lambda path: int(path.stem)):
        content = json.loads(marker.read_text("utf-8"))
        starts = set()
        for entry in content["files"]:
            times = pq.read_table(directory / entry["path"], columns=[TIME_US_FIELD])
            starts |= {us // 1000 // WIDTH_MS * WIDTH_MS for us in times.column(0).to_pylist()}
        if starts:  # a batch with no rows holds no slice
            found.append((datetime.datetime.fromisoformat(content["committed_at"]), sorted(starts)))
    return found


def _scrape(port: int) -> dict[tuple[str, str], float]:
    """The job's metrics served on ``port``: (sample name, channel) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, sample.labels["channel"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if "channel" in sample.labels
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _check_told(summary: ReplicaSummary, port: int, session: Any) -> None:
    """The metrics and the progress rows say what the summary says (module docstring)."""
    samples = _scrape(port)
    stored = load_channel_progress(session)
    prefix = "ringflow_replication_"
    for channel in summary.channels:
        name = channel.channel

        def sample(field: str, name: str = name) -> float:
            return samples[prefix + field, name]

        assert sample("sends_total") == channel.sends
        assert sample("unique_changes_total") == channel.unique
        assert (sample("rows_total"), sample("batches_total")) == (channel.rows, channel.batches)
        assert (sample("reachable"), sample("failures_total")) == (1, 0)
        assert (sample("backlog_slices"), sample("backlog_rows")) == (0, 0)
        assert sample("lag_seconds") >= 0
        row = stored[name]
        assert (row.state, row.rows, row.sends, row.unique_changes) == (
            "done",
            channel.rows,
            channel.sends,
            channel.unique,
        )
        assert row.unreachable_since_ms is None and row.lag_ms is not None
        assert row.job.startswith("replica ")


def test_with_one_permit_the_higher_priority_channel_drains_first_in_its_order(
    spark: SparkSession,
    edge_cluster: LocalCluster,
    edge: tuple[Any, Any],
    tmp_path: Path,
) -> None:
    driver, session = edge
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.execute(DDL.format(ks=KEYSPACE, t=TABLE, cdc=" WITH cdc = {'enabled': true}"))
    lakes = {"prio-high": tmp_path / "lake-high", "prio-low": tmp_path / "lake-low"}
    settings = {"prio-high": (90, ChannelOrder.LIFO), "prio-low": (10, ChannelOrder.FIFO)}
    for name, (priority, order) in settings.items():
        channel = Channel(
            name, KEYSPACE, TABLE, f"parquet:{lakes[name]}", None, priority, order,
            slice_settings=SLICING,
        )  # fmt: skip
        create_channel(driver, session, channel)
    try:
        wait_for(lambda: _sliced_by_channels(edge_cluster), "the nodes slice as the channels say")
        began = time.monotonic()
        last_ms = _write_bursts(session)
        _wait_sealed(session, last_ms)
        print(f"backlog written and sealed in {time.monotonic() - began:.1f} s", flush=True)
        spec = ChannelSpec(channels=tuple(settings))
        plan = plan_replica_job(
            edge_cluster.contact_points, tmp_path / "checkpoints", spec, permits=1
        )
        metrics, port = JobMetrics(), _free_port()
        assert serve_job_metrics(metrics, "127.0.0.1", port)
        job = ReplicaJob(spark, plan, once=True, console=Console(), timeout_s=240, metrics=metrics)
        summary = job.run()
    finally:
        for name in settings:
            drop_channel(session, name)
    print(f"job: {summary.seconds:.1f} s", flush=True)
    written = BURSTS * ROWS_PER_BURST
    for channel in summary.channels:
        assert (channel.status, channel.failures) == ("done", 0), channel
        assert channel.sends == channel.unique == written, channel
        assert len(read_lake_changes(lakes[channel.channel], SOURCE)) == written
    high, low = _commits(lakes["prio-high"]), _commits(lakes["prio-low"])
    print("high (lifo):", [(at.time().isoformat(), starts) for at, starts in high], flush=True)
    print("low (fifo):", [(at.time().isoformat(), starts) for at, starts in low], flush=True)
    # one permit: one slice copy a batch, so one slice a commit
    assert all(len(starts) == 1 for _, starts in high + low), (high, low)
    high_starts = [starts[0] for _, starts in high]
    low_starts = [starts[0] for _, starts in low]
    assert len(set(high_starts)) >= BURSTS - 1, high_starts  # a backlog of several slices
    assert set(high_starts) == set(low_starts)
    # priority: every slice of the high channel committed before the low channel's first
    assert max(at for at, _ in high) < min(at for at, _ in low), (high, low)
    # order: lifo newest slice first, fifo oldest first
    assert high_starts == sorted(high_starts, reverse=True), high_starts
    assert low_starts == sorted(low_starts), low_starts
    _check_told(summary, port, session)
