"""``ringflow replicate --capture replica``: sealed time slices from a 3-node RF 3 edge to a hub
node, a Parquet lake and PostgreSQL (issue 14 §4: its first four tests and bad input; issue 15
for this path).

The edge is this module's own: real node processes slicing 1 s x 3 (the channels' slicing too),
hints off (``--max-hint-window-ms 1``: a node that was down misses what was written meanwhile,
so its copies of the slices around its outage differ). The hub node, PostgreSQL and the
SparkSession are the session's. Every job runs in this process (``ReplicaJob``, the code of the
command) on the session's Spark, so the tests read its coordinator and its summary. Each test
has its own keyspace; the channels hub, lake and postgres are created by the first job's
``--table ... --to ...`` and pointed at the next test's table by the next.

Proves:

- all nodes up: every destination equals the edge read at ALL (keys, values, write times); the
  lake holds every change of the CDC log exactly once, equal to what ``ringflow-cdc`` reads
  (the same change rows); each channel's sends per unique change is exactly 1.00;
- an edge node SIGKILLed while the job transmits, restarted later: nothing is missing at any
  destination, and sends per unique change stays at most 1.05 (counted by the job, and
  measured independently in the lake: its rows over its distinct changes);
- a replica that missed writes: its copy of a slice differs from its peers', both copies are
  sent (the ``sent`` records hold two digests of one slice), and every destination is complete;
- bad input (unknown table or channel, bad URL, priority or slice width out of range, a table
  without CDC, nothing to run, log-mode options missing) exits 2 with one line, before any job
  starts: no checkpoint is made, no channel is written;
- a column added at the edge (issue 15): the lake and PostgreSQL (may alter) take it, the hub
  (may not) waits with the exact statement and nothing converted without the column, and
  catches up once the statement ran; every destination equals the edge with the column;
- the hub node SIGKILLed for 20 s under writes: the job never exits, the hub channel is
  ``unreachable since ...`` and backs off while the lake channel keeps delivering, and the
  hub catches up, equal to the edge (the session's hub node is started again).

Each test prints its sends per unique change per channel. The module runs in about 6 minutes
on 2 shared cores (the kill test alone about 1.5-3 minutes).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cassandra import ConsistencyLevel, InvalidRequest
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.query import SimpleStatement
from pyspark.sql import SparkSession
from rich.console import Console

from ringflow.cli import main
from ringflow.cli._demo import DDL, TABLE, Workload, driver_cluster
from ringflow.cli._demo_cluster import NodeProcess
from ringflow.pipeline import (
    ChannelSpec,
    PipelineConfigError,
    ReplicaJob,
    ReplicaSummary,
    change_from_row,
    plan_replica_job,
    read_changes,
    read_lake_changes,
)
from ringflow.pipeline._replicate import cdc_options, source_table
from ringflow.schema import Table
from tests.integration.cluster.conftest import LocalCluster, started_cluster
from tests.spark._job_thread import printed_statements
from tests.spark._replication import (
    assert_lake_is_log,
    change_identity,
    check_destinations,
    wait_for,
    write,
    write_statement,
)
from tests.spark._schema_evolution import cql_rows, differences, lake_rows, postgres_rows

pytestmark = pytest.mark.timeout(900)
SLICE_COUNT = 3
SLICING = ("--slice-width-s", "1", "--slice-count", str(SLICE_COUNT))
WINDOW_MS = SLICE_COUNT * 1000
WIDTH_MS = 1000
QUORUM = ConsistencyLevel.QUORUM
PERMITS = 128


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("replica-edge")
    # hints off: none kept for a node down longer than 1 ms, and those kept in the instant
    # before its peers convict it are not replayed within a test (an hour between replays)
    hints_off = ("--max-hint-window-ms", "1", "--hint-dispatch-interval-ms", "3600000")
    options = (*SLICING, "--num-tokens", "2", *hints_off)
    with started_cluster(data, *options) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def stage(
    edge: LocalCluster, hub_node: NodeProcess, hub: Any, postgres_url: str
) -> Iterator[dict[str, Any]]:
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy())
    driver = driver_cluster(edge.addresses, 9042, policy, "QUORUM")
    try:
        yield {
            "edge": driver.connect(),
            "source": ",".join(edge.addresses),
            "hub": hub,
            "hub_node": hub_node,
            "postgres_url": postgres_url,
        }
    finally:
        driver.shutdown()


def _create(stage: dict[str, Any], keyspace: str) -> None:
    for name, rf, cdc in (("edge", 3, " WITH cdc = {'enabled': true}"), ("hub", 1, "")):
        stage[name].execute(
            f"CREATE KEYSPACE {keyspace} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
        )
        stage[name].execute(DDL.format(ks=keyspace, t=TABLE, cdc=cdc))


def _plan(stage: dict[str, Any], keyspace: str, base: Path, alter: tuple[str, ...] = ()) -> Any:
    """hub, lake and postgres channels of ``keyspace``'s table (created or repointed); the
    job may alter the targets of the channels ``alter`` names."""
    hub: NodeProcess = stage["hub_node"]
    urls = (
        f"ringflow://{hub.endpoint}?consistency=ONE",
        f"parquet:{base / 'lake'}",
        stage["postgres_url"],
    )
    spec = ChannelSpec(f"{keyspace}.{TABLE}", urls, slice_width_s=1, slice_count=SLICE_COUNT)
    # 1 s slices of 6 vnode ranges are 6 copies a second per channel: room for a backlog
    return plan_replica_job(
        stage["source"], base / "checkpoints", spec, permits=PERMITS, alter_destinations=alter
    )


def _watermarks(stage: dict[str, Any], keyspace: str) -> dict[uuid.UUID, int]:
    statement = SimpleStatement(
        "SELECT node, sealed_through_ms FROM system_replication.seal_watermarks "
        "WHERE keyspace_name = %s AND table_name = %s",
        consistency_level=QUORUM,
    )
    rows = stage["edge"].execute(statement, (keyspace, TABLE))
    return {row["node"]: row["sealed_through_ms"] for row in rows}


def _wait_sealed(stage: dict[str, Any], keyspace: str, after_ms: int) -> None:
    """Every node has published every slice holding a write made before ``after_ms`` (its seal
    watermark passed the slice's due time): what a --once run delivers."""
    due = after_ms + WINDOW_MS + WIDTH_MS
    wait_for(
        lambda: (
            (marks := _watermarks(stage, keyspace)) != {}
            and len(marks) == 3
            and min(marks.values()) >= due
        ),
        "every node sealed and published the written slices",
    )


def _run_once(spark: SparkSession, plan: Any) -> ReplicaSummary:
    return ReplicaJob(spark, plan, once=True, console=Console(), timeout_s=600).run()


def _figures(summary: ReplicaSummary) -> dict[str, tuple[int, int, float | None]]:
    figures = {c.channel: (c.sends, c.unique, c.sends_per_unique) for c in summary.channels}
    print("sends, unique changes, sends per unique change:", figures, flush=True)
    return figures


def _lake_changes(base: Path, keyspace: str) -> tuple[int, int]:
    """(rows, distinct changes) in the lake: every row a send to it."""
    changes = read_lake_changes(base / "lake", f"{keyspace}.{TABLE}")
    return len(changes), len({change_identity(change) for change in changes})


def _check_log_delivered(spark: SparkSession, table: Table, source: str, lake: Path) -> None:
    """Every change of the table's CDC log (read through ringflow-cdc) is in the lake, and the
    lake holds nothing else."""
    options = cdc_options(source, f"{table.keyspace}.{table.name}")
    options.update(confidence_window_ms="1000")
    rows = read_changes(spark, options).collect()
    log = {change_identity(change_from_row(table, row)) for row in rows}
    held = {change_identity(c) for c in read_lake_changes(lake, f"{table.keyspace}.{table.name}")}
    assert held == log, f"{len(log - held)} changes missing, {len(held - log)} unknown"


def test_all_nodes_up_every_destination_equals_the_edge_and_each_change_is_sent_once(
    spark: SparkSession, stage: dict[str, Any], tmp_path: Path
) -> None:
    keyspace = "replica_steady"
    _create(stage, keyspace)
    plan = _plan(stage, keyspace, tmp_path)
    write(Workload(stage["edge"], 600, seed=21, keyspace=keyspace), 300, pause_s=0.005)
    _wait_sealed(stage, keyspace, time.time_ns() // 1_000_000)  # what --once delivers
    summary = _run_once(spark, plan)
    figures = _figures(summary)
    assert {c.channel: c.status for c in summary.channels} == dict.fromkeys(
        ("hub", "lake", "postgres"), "done"
    )
    table, rows = check_destinations(
        stage["edge"], stage["source"], keyspace, tmp_path, stage["postgres_url"], stage["hub"]
    )
    assert rows > 50
    log = assert_lake_is_log(spark, table, tmp_path / "lake", _cdc_options(stage, keyspace))
    for channel in summary.channels:  # every change once: exactly 1.00
        assert channel.sends == channel.rows == channel.unique == len(log), figures
        assert not channel.unique_saturated


def _cdc_options(stage: dict[str, Any], keyspace: str) -> dict[str, str]:
    options = cdc_options(stage["source"], f"{keyspace}.{TABLE}")
    options.update(confidence_window_ms="1000")
    return options


class Writer:
    """The workload written in a thread until stopped (each write retried until acknowledged:
    ``tests.spark._replication.write``), so writes go on across a kill and a restart."""

    def __init__(self, workload: Workload, pause_s: float) -> None:
        self.workload = workload
        self.pause_s = pause_s
        self.count = 0
        self._running = threading.Event()
        self._running.set()
        self._thread = threading.Thread(target=self._write, name="writer")
        self._thread.start()

    def _write(self) -> None:
        while self._running.is_set():
            write(self.workload, 1, pause_s=self.pause_s)
            self.count += 1

    def wait_for_more(self, count: int, what: str) -> None:
        target = self.count + count
        wait_for(lambda: self.count >= target, what)

    def stop(self) -> int:
        """Stop writing; the time of the last write (ms)."""
        self._running.clear()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the writer did not stop"
        return time.time_ns() // 1_000_000


@pytest.mark.long  # `make test-long`: 78 s quiet; test_demo kills an edge node in replica mode too
def test_an_edge_node_killed_mid_transmission_and_restarted_loses_nothing(
    spark: SparkSession, stage: dict[str, Any], edge: LocalCluster, tmp_path: Path
) -> None:
    keyspace = "replica_crash"
    _create(stage, keyspace)
    plan = _plan(stage, keyspace, tmp_path)
    workload = Workload(stage["edge"], 1500, seed=22, keyspace=keyspace)
    # a backlog for the first batches (Spark's Python workers start meanwhile). A kill costs a
    # roughly fixed number of extra sends (the rows written while the peers had not yet
    # convicted the victim reach it later, out of sequence, and every holder sends those; and
    # the slices around the kill differ between copies, so both go: 18 to 77 extra sends in
    # five runs on 2 shared cores), so the run needs some 2,000 changes for the ratio to be
    # the steady figure the issue asks for (1.067 over 1,146 changes failed once)
    write(workload, 1200, pause_s=0.0)
    job = ReplicaJob(spark, plan, once=False, console=Console(), timeout_s=800)
    stop = threading.Event()
    result: list[ReplicaSummary] = []
    runner = threading.Thread(target=lambda: result.append(job.run(stop)), name="replica-job")
    runner.start()
    wait_for(lambda: _committed(job, runner, 1), "every channel committed a batch")
    writer = Writer(workload, pause_s=0.05)
    victim = edge.addresses[1]
    began = time.monotonic()

    def phase(text: str) -> None:  # shown when the test fails (or with -s)
        print(f"{time.monotonic() - began:6.1f}s {text} ({writer.count} writes)", flush=True)

    try:
        wait_for(lambda: _committed(job, runner, 3), "every channel committed three batches")
        phase("transmitting")
        edge.kill(victim)  # while slices are read from it (most batches read from every node)
        phase(f"{victim} killed")
        writer.wait_for_more(120, "writes at QUORUM with a node down")
        edge.restart(victim)
        edge.wait_ready()
        phase(f"{victim} restarted and UP")
        writer.wait_for_more(120, "writes after the restart (the node missed the others)")
        last_ms = writer.stop()
        phase("writes stopped")
        wait_for(lambda: job.caught_up(last_ms + WINDOW_MS + WIDTH_MS), "the job caught up")
        phase("caught up")
    finally:
        writer.stop()
        stop.set()
        runner.join(120)
        edge.wait_ready()
    assert not runner.is_alive() and result, "the job did not stop"
    summary = result[0]
    figures = _figures(summary)
    table, rows = check_destinations(
        stage["edge"], stage["source"], keyspace, tmp_path, stage["postgres_url"], stage["hub"]
    )
    assert rows > 50
    _check_log_delivered(spark, table, stage["source"], tmp_path / "lake")
    lake_rows, lake_distinct = _lake_changes(tmp_path, keyspace)
    print(f"lake: {lake_rows} rows, {lake_distinct} distinct changes", flush=True)
    print(_sent_story(stage, keyspace, "lake", _host_id(edge, victim)), flush=True)
    assert lake_rows <= 1.05 * lake_distinct
    for channel in summary.channels:
        assert channel.status == "stopped", channel
        assert channel.unique == lake_distinct, figures
        assert channel.sends == channel.rows and channel.sends <= 1.05 * channel.unique, figures


def _committed(job: ReplicaJob, runner: threading.Thread, batches: int) -> bool:
    """Every channel has committed ``batches`` batches (the job must be running)."""
    assert runner.is_alive(), "the job ended"
    progress = job.progress()
    return bool(progress) and all(p.committed_batches >= batches for p in progress.values())


def test_a_replica_that_missed_writes_has_other_digests_and_the_union_is_sent(
    spark: SparkSession, stage: dict[str, Any], edge: LocalCluster, tmp_path: Path
) -> None:
    keyspace = "replica_missed"
    _create(stage, keyspace)
    plan = _plan(stage, keyspace, tmp_path)
    victim = edge.addresses[0]
    # writes go on across the kill and the restart, so slices straddle both: the victim holds
    # part of them (no hints: it never gets the rest)
    writer = Writer(Workload(stage["edge"], 1500, seed=23, keyspace=keyspace), pause_s=0.01)
    try:
        writer.wait_for_more(40, "writes with every node up")
        edge.kill(victim)
        writer.wait_for_more(40, "writes with a node down")
        edge.restart(victim)
        edge.wait_ready()
        writer.wait_for_more(40, "writes after the restart")
    finally:
        last_ms = writer.stop()
        edge.wait_ready()
    _wait_sealed(stage, keyspace, last_ms)
    summary = _run_once(spark, plan)
    _figures(summary)
    print(_sent_story(stage, keyspace, "lake", _host_id(edge, victim)), flush=True)
    assert {c.status for c in summary.channels} == {"done"}
    differing = _differing_keys(stage, keyspace)
    assert differing, "no slice whose copies differ: the victim missed no write of a sliced key"
    sent_twice = _keys_sent_with_two_digests(stage, keyspace, "lake", differing)
    assert sent_twice, f"none of {len(differing)} differing slices was sent as a union"
    table, rows = check_destinations(
        stage["edge"], stage["source"], keyspace, tmp_path, stage["postgres_url"], stage["hub"]
    )
    assert rows > 50
    _check_log_delivered(spark, table, stage["source"], tmp_path / "lake")


Key = tuple[int, int, int, bool]


def _differing_keys(stage: dict[str, Any], keyspace: str) -> set[Key]:
    """In-sequence slice keys of the table whose published copies do not all agree."""
    statement = SimpleStatement(
        "SELECT * FROM system_replication.slices", consistency_level=QUORUM, fetch_size=1000
    )
    digests: dict[Key, set[bytes]] = {}
    for row in stage["edge"].execute(statement):
        if (row["keyspace_name"], row["table_name"]) != (keyspace, TABLE):
            continue
        key = (row["slice_start_ms"], row["range_start"], row["range_end"], row["out_of_sequence"])
        digests.setdefault(key, set()).add(bytes(row["digest"]))
    return {key for key, found in digests.items() if len(found) > 1 and not key[3]}


def _keys_sent_with_two_digests(
    stage: dict[str, Any], keyspace: str, channel: str, keys: set[Key]
) -> set[Key]:
    statement = SimpleStatement(
        "SELECT * FROM system_replication.sent WHERE keyspace_name = %s AND table_name = %s "
        "AND channel = %s AND slice_start_ms = %s",
        consistency_level=QUORUM,
    )
    found: dict[Key, set[bytes]] = {}
    for start in sorted({key[0] for key in keys}):
        for row in stage["edge"].execute(statement, (keyspace, TABLE, channel, start)):
            key = (start, row["range_start"], row["range_end"], row["out_of_sequence"])
            found.setdefault(key, set()).add(bytes(row["digest"]))
    return {key for key in keys if len(found.get(key, ())) >= 2}


def _host_id(edge: LocalCluster, address: str) -> uuid.UUID:
    document = json.loads(
        (edge.data / f"node{edge.addresses.index(address) + 1}" / "status.json").read_text()
    )
    return uuid.UUID(document["host_id"])


def _sent_story(stage: dict[str, Any], keyspace: str, channel: str, victim: uuid.UUID) -> str:
    """Where a channel's extra sends came from: the slices sent as more than one copy, and
    the out-of-sequence ones (every holder sends those), with their rows."""
    statement = SimpleStatement(
        "SELECT * FROM system_replication.slices", consistency_level=QUORUM, fetch_size=1000
    )
    rows_of: dict[tuple[Key, uuid.UUID], int] = {}
    for row in stage["edge"].execute(statement):
        if (row["keyspace_name"], row["table_name"]) == (keyspace, TABLE):
            key = (
                row["slice_start_ms"],
                row["range_start"],
                row["range_end"],
                row["out_of_sequence"],
            )
            rows_of[key, row["node"]] = row["row_count"]
    sent: dict[Key, set[uuid.UUID]] = {}
    query = SimpleStatement(
        "SELECT * FROM system_replication.sent WHERE keyspace_name = %s AND table_name = %s "
        "AND channel = %s AND slice_start_ms = %s",
        consistency_level=QUORUM,
    )
    for start in sorted({key[0] for key, _ in rows_of}):
        for row in stage["edge"].execute(query, (keyspace, TABLE, channel, start)):
            key = (start, row["range_start"], row["range_end"], row["out_of_sequence"])
            sent.setdefault(key, set()).add(row["node"])
    lines = []
    for key, nodes in sorted(sent.items()):
        if len(nodes) > 1 or key[3]:
            copies = ", ".join(
                f"{'victim' if n == victim else str(n)[:8]}:{rows_of.get((key, n), '?')}"
                for n in sorted(nodes)
            )
            lines.append(f"  slice {key[0]} range {key[1]}..{key[2]} oos={key[3]}: {copies}")
    return (
        f"{channel}: {len(lines)} slices sent as several copies or out of sequence\n"
        + "\n".join(lines)
    )


def _channel_rows(stage: dict[str, Any]) -> list[dict[str, Any]]:
    statement = SimpleStatement(
        "SELECT * FROM system_replication.channels", consistency_level=QUORUM
    )
    return sorted((dict(row) for row in stage["edge"].execute(statement)), key=lambda r: r["name"])


def test_bad_input_is_refused_before_any_job_starts(
    stage: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stage["edge"].execute(
        "CREATE KEYSPACE IF NOT EXISTS replica_bad WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    stage["edge"].execute(DDL.format(ks="replica_bad", t="plain", cdc=""))
    stage["edge"].execute(
        DDL.format(ks="replica_bad", t="lonely", cdc=" WITH cdc = {'enabled': true}")
    )
    before = _channel_rows(stage)
    checkpoint = tmp_path / "checkpoints"
    lake = f"parquet:{tmp_path / 'lake'}"
    common = ["replicate", "--capture", "replica", "--source", stage["source"]]
    common += ["--checkpoint", str(checkpoint), "--once"]
    cases = {
        "unknown table": (["--table", "replica_bad.nope", "--to", lake], "unknown table"),
        "unknown keyspace": (["--table", "nope.t", "--to", lake], "unknown keyspace"),
        "unknown channel": (["--channel", "nope"], "unknown channel"),
        "bad URL": (["--table", "replica_bad.lonely", "--to", "ftp://x/y"], "ftp://x/y"),
        "priority 0": (
            ["--table", "replica_bad.lonely", "--to", lake, "--priority", "0"],
            "priority",
        ),
        "priority 101": (
            ["--table", "replica_bad.lonely", "--to", lake, "--priority", "101"],
            "priority",
        ),
        "slice width 0": (
            ["--table", "replica_bad.lonely", "--to", lake, "--slice-width-s", "0"],
            "slice_width_s",
        ),
        "slice width 3601": (
            ["--table", "replica_bad.lonely", "--to", lake, "--slice-width-s", "3601"],
            "slice_width_s",
        ),
        "no CDC": (["--table", "replica_bad.plain", "--to", lake], "CDC"),
        "nothing to run": (["--table", "replica_bad.lonely"], "no channel to run"),
        "permits 0": (["--permits", "0"], "permits"),
    }
    for name, (arguments, expected) in cases.items():
        assert main([*common, *arguments]) == 2, name
        out = capsys.readouterr()
        text = out.out + out.err
        assert expected in text, f"{name}: {text!r}"
        assert not checkpoint.exists(), name
    log_mode = ["replicate", "--source", stage["source"], "--checkpoint", str(checkpoint)]
    assert main([*log_mode, "--table", "replica_bad.lonely"]) == 2  # no --to
    assert main([*log_mode, "--table", "replica_bad.lonely", "--to", lake, "--permits", "3"]) == 2
    assert _channel_rows(stage) == before


class JobThread:
    """A continuous ``ReplicaJob`` in a thread of this process until :meth:`stop`; its console
    output kept for the test."""

    def __init__(self, spark: SparkSession, plan: Any) -> None:
        self.output = io.StringIO()
        console = Console(file=self.output, width=400, color_system=None)
        self.job = ReplicaJob(spark, plan, once=False, console=console, timeout_s=800)
        self._stop = threading.Event()
        self.result: list[ReplicaSummary] = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(self.job.run(self._stop)), name="replica-job"
        )
        self.thread.start()

    def text(self) -> str:
        return self.output.getvalue()

    def wait(self, condition: Any, what: str) -> None:
        def check() -> bool:
            assert self.thread.is_alive(), f"the job ended while waiting for {what}\n{self.text()}"
            return bool(condition())

        wait_for(check, what)

    def stop(self) -> ReplicaSummary:
        self._stop.set()
        self.thread.join(120)
        assert not self.thread.is_alive() and self.result, "the job did not stop"
        return self.result[0]


def test_a_column_added_at_the_edge_reaches_every_destination_or_waits_for_the_operator(
    spark: SparkSession, stage: dict[str, Any], tmp_path: Path
) -> None:
    """Issue 15 for replica-side capture: captured rows keep the log row as written, so after
    ``ALTER TABLE ... ADD note`` a query meets rows with a column its table lacks, stops
    (SourceSchemaChanged) and restarts from its checkpoint with the table reloaded: the lake
    takes a new schema version, PostgreSQL (may alter) gets the column, the hub (may not)
    waits with the exact statement while the others go on, and catches up once it has run.
    No value of the new column is lost anywhere. Then ``DROP amount``: the job goes on (no
    channel stops: a captured row has no value of a dropped column, the query's table still
    names it, nothing to follow), the rows written after it reach every destination."""
    keyspace = "replica_schema"
    _create(stage, keyspace)
    name = f"{keyspace}.{TABLE}"
    plan = _plan(stage, keyspace, tmp_path, alter=("postgres",))
    write(Workload(stage["edge"], 300, seed=24, keyspace=keyspace), 60, pause_s=0.0)
    runner = JobThread(spark, plan)
    lake, target = tmp_path / "lake", f"{keyspace}_{TABLE}"
    readers = {
        "hub": lambda t: cql_rows(stage["hub"], t, name),
        "lake": lambda t: lake_rows(lake, t),
        "postgres": lambda t: postgres_rows(stage["postgres_url"], target, t),
    }

    def equal(table: Table, channels: tuple[str, ...]) -> Callable[[], bool]:
        def check() -> bool:
            expected = cql_rows(stage["edge"], table, name, "ALL")
            try:
                return all(not differences(expected, readers[c](table)) for c in channels)
            except (InvalidRequest, psycopg.Error, PipelineConfigError):  # not there yet
                return False

        return check

    try:
        runner.wait(lambda: _committed(runner.job, runner.thread, 1), "a first batch each")
        stage["edge"].execute(f"ALTER TABLE {name} ADD note text")
        insert = stage["edge"].prepare(
            f"INSERT INTO {name} (customer, order_id, status, note) VALUES (?, ?, ?, ?)"
        )
        update = stage["edge"].prepare(
            f"UPDATE {name} SET note = ? WHERE customer = ? AND order_id = ?"
        )
        for i in range(40):
            write_statement(stage["edge"], insert, (5000 + i, i, "new", f"note {i}"))
        for row in list(stage["edge"].execute(f"SELECT customer, order_id FROM {name} LIMIT 10")):
            write_statement(stage["edge"], update, ("late", row["customer"], row["order_id"]))
        last_ms = time.time_ns() // 1_000_000
        table = source_table(cdc_options(stage["source"], name))
        assert table.has_column("note")
        runner.wait(equal(table, ("lake", "postgres")), "the lake and PostgreSQL with the column")
        expected = f'ALTER TABLE "{keyspace}"."{TABLE}" ADD "note" text'
        runner.wait(
            lambda: expected in printed_statements(runner.text(), "ALTER"), "the hub's statement"
        )
        assert "hub: stopped, the other channels go on" in runner.text(), runner.text()
        held = cql_rows(stage["hub"], _without(table, "note"), name)
        assert not [key for key in held if int(key[0]) >= 5000]  # nothing converted without it
        stage["hub"].execute(expected)  # the operator runs what was printed
        runner.wait(equal(table, ("hub", "lake", "postgres")), "every destination with the column")
        assert "hub: its destination takes the source table now" in runner.text()
        # then a column is dropped: the job goes on, the rows written after arrive everywhere
        stage["edge"].execute(f"ALTER TABLE {name} DROP amount")
        for i in range(30):
            write_statement(stage["edge"], insert, (6000 + i, i, "after drop", f"note {i}"))
        last_ms = time.time_ns() // 1_000_000
        dropped = source_table(cdc_options(stage["source"], name))
        assert not dropped.has_column("amount")
        runner.wait(equal(dropped, ("hub", "lake", "postgres")), "every destination after DROP")
        # the rows land before Spark commits their batch: wait for the commits, so that the
        # figures count every batch (an uncommitted one is sent again by the next run)
        runner.wait(
            lambda: runner.job.caught_up(last_ms + WINDOW_MS + WIDTH_MS), "every batch committed"
        )
    finally:
        summary = runner.stop()
    figures = _figures(summary)
    for channel in summary.channels:
        assert channel.status == "stopped", (channel, runner.text())
        assert channel.sends <= 1.05 * channel.unique, figures
    assert len({channel.unique for channel in summary.channels}) == 1, figures
    changes = {n: r.schema_changes for n, r in runner.job.runs.items()}
    print("schema changes followed:", changes, flush=True)
    assert all(any("added note" in c for c in found) for found in changes.values()), changes


def _without(table: Table, column: str) -> Table:
    return dataclasses.replace(table, columns=tuple(c for c in table.columns if c.name != column))


OUTAGE_S = float(os.environ.get("RINGFLOW_OUTAGE_S", "20"))  # 120: the two minutes


def test_a_destination_away_backs_off_while_the_others_go_on_and_it_catches_up(
    spark: SparkSession, stage: dict[str, Any], tmp_path: Path
) -> None:
    """REPLICATION.md decision 8: the hub node SIGKILLed for ~20 s under writes. The job never
    exits; the hub channel says ``unreachable since ...`` and backs off; the lake channel keeps
    delivering meanwhile; once the hub is back it catches up, equal to the edge."""
    keyspace = "replica_outage"
    _create(stage, keyspace)
    plan = _plan(stage, keyspace, tmp_path)
    workload = Workload(stage["edge"], 1500, seed=25, keyspace=keyspace)
    write(workload, 50, pause_s=0.0)
    runner = JobThread(spark, plan)
    hub_node: NodeProcess = stage["hub_node"]
    writer: Writer | None = None
    try:
        runner.wait(lambda: _committed(runner.job, runner.thread, 1), "a first batch each")
        writer = Writer(workload, pause_s=0.02)
        hub_node.kill()
        down = time.monotonic()
        lake_before = runner.job.progress()["lake"].sends
        runner.wait(
            lambda: runner.job.runs["hub"].status.startswith("unreachable since"),
            "the hub channel unreachable",
        )
        runner.wait(lambda: time.monotonic() - down >= OUTAGE_S, "the outage")
        lake_during = runner.job.progress()["lake"].sends - lake_before
        hub_status = runner.job.runs["hub"].status
        print(f"hub away {OUTAGE_S:.0f} s: {hub_status}; lake sends meanwhile {lake_during}")
        assert lake_during > 0, "the lake channel stopped with the hub"
        assert runner.job.runs["lake"].failures == 0, runner.text()
        hub_node.start()
        writer.wait_for_more(50, "writes after the hub is back")
        last_ms = writer.stop()
        runner.wait(
            lambda: runner.job.caught_up(last_ms + WINDOW_MS + WIDTH_MS), "the job caught up"
        )
        back = time.monotonic()
        check = lambda: _quietly_equal(stage, keyspace, tmp_path)  # noqa: E731
        runner.wait(check, "the hub equal to the edge (its driver reconnected)")
        print(f"caught up {time.monotonic() - back:.1f} s after the writes stopped", flush=True)
    finally:
        if writer is not None:
            writer.stop()
        hub_node.start()  # for the tests after this one, whatever happened
        summary = runner.stop()
    figures = _figures(summary)
    statuses = {c.channel: (c.status, c.failures) for c in summary.channels}
    print("status, failures:", statuses, flush=True)
    assert summary.channels and all(c.status == "stopped" for c in summary.channels), statuses
    assert statuses["hub"][1] >= 1, statuses
    for channel in summary.channels:
        assert channel.sends <= 1.05 * channel.unique, figures
    check_destinations(
        stage["edge"], stage["source"], keyspace, tmp_path, stage["postgres_url"], stage["hub"]
    )


def _quietly_equal(stage: dict[str, Any], keyspace: str, base: Path) -> bool:
    try:
        check_destinations(
            stage["edge"], stage["source"], keyspace, base, stage["postgres_url"], stage["hub"]
        )
    except Exception:  # not yet: a destination behind, or the hub's driver reconnecting
        return False
    return True
