"""Replica-side transmission (``ringflow replicate --capture replica``, seed 002; issue 14 §5):
sends per unique change, node CPU per delivered change against ``ringflow-cdc`` log capture,
and lag at a steady write rate.

Run with the project venv: ``.venv/bin/python bench/bench_replica.py [--changes N]
[--rounds R] [--idle-seconds S] [--kill-backlog N] [--kill-writes N] [--rate W] [--lag-seconds S]
[--hints on|off] [--kill-slice-width-s W] [--kill-slice-count C] [--kill-node-slicing]
[--skip-backlog] [--skip-lag] [--skip-kill] [--py-spy PATH] [--edge-address A]``; ``--py-spy``
profiles the node processes during phase 1's counted runs (own-time and ``ringflow``-frame shares
printed per run; the sampling costs CPU, so the figures come from runs without it).

Set-up, as ``tests/spark/test_replica_transmission.py``: an edge of 3 real ``ringflow`` node
processes (``ringflow cluster start --nodes 3``, gossip every 200 ms, 2 vnodes per node, slices
1 s x 3, hints off: ``--max-hint-window-ms 1 --hint-dispatch-interval-ms 3600000``, or with
``--hints on`` the nodes' default hint settings: kept 3 h, replayed every second), one
keyspace per phase (``SimpleStrategy`` RF 3) with ``bench_pipeline``'s CDC table ``events (pk int,
ck int, v text, n bigint, PRIMARY KEY (pk, ck))`` and workload (80% inserts, 15% updates, 5% row
deletes), Parquet lakes as destinations, Spark ``local[2]``. The replica-side jobs are
:class:`ringflow.pipeline.ReplicaJob` (the code of ``ringflow replicate --capture replica``), their
channels created by :func:`plan_replica_job` before the writes (a table without a collecting
channel drops its slices at once). Phases, in this order:

1. **Backlog delivery, replica-side vs log capture** (``--skip-backlog`` to skip; ``--rounds``
   rounds, default 2, the order of the two runs reversed every other round, after a round 0 of
   ``--warmup-changes``, default 500, not counted: the session's first Python data source reads
   start Spark's Python workers). Per round, ``--changes`` changes (default 5,000) are written at
   QUORUM (64 in flight) to keyspace ``rsteadyN``, whose lake channel exists (``lake``), and the
   same workload to keyspace ``rlogN`` (no channel). Once every node has sealed and published the
   slices, an idle baseline of the 3 node processes' CPU is taken (``--idle-seconds``, default 10);
   then each run delivers its whole backlog to a fresh lake (``--once``), the node CPU
   (``/proc/<pid>/stat`` utime + stime of the 3 node processes) read around the run only, so the
   writes are excluded; "net" subtracts the idle rate x the run's time:

   - **replica**: all nodes up; sends per unique change from the job's summary
     (``ChannelSummary.sends / unique``: change rows handed to the sink / distinct row digests),
     the lake checked to hold every change;
   - **every replica sends** (the baseline, 3.00x at RF 3), computed from the same captured data,
     not run: the rows of every node's published copies of the table's slices
     (``system_replication.slices``, read before the run) / the job's unique changes. A measured
     run of it is not possible without changing the product: the job's sources check, on the
     executors, each copy's rows against the digest it was planned with, so the planner cannot be
     told that every copy mismatches from outside;
   - **log**: ``ringflow-cdc`` at QUORUM (confidence window 2 s, 30 s query windows: the source
     of ``ringflow replicate --capture log``) from ``rlogN``.

   The ratio is node CPU per delivered change, replica / log (target at most 0.5x).

2. **Lag** (``--skip-lag`` to skip): a continuous replica job (channel ``lake`` pointed at
   keyspace ``rlag``) runs; once it committed its first batches, a writer paces ``--rate``
   writes/s (default 500; async, at most 256 in flight) for ``--lag-seconds`` (default 60); the
   job runs until it has delivered every slice due by the last write. The lag of a change = the
   ``committed_at`` of the lake commit marker listing its file - its write time (``cdc$time``);
   target p99 <= (slice_count + 1) x slice_width + 5 s = 9 s. The achieved write rate is
   reported (the 3-node edge shares 2 cores with Spark).

3. **One node killed** (``--skip-kill`` to skip), as the test: a backlog of ``--kill-backlog``
   changes (default 1,500) in keyspace ``rkill``, a continuous job, writes at ~20/s in a thread
   (each retried until acknowledged); after 3 committed batches the second node is SIGKILLed
   (``ringflow cluster kill``), ``--kill-writes`` more writes (default 120), restarted and UP,
   as many writes again, then the job runs until caught up. Sends per unique change from the
   job's summary, and in the lake (target at most 1.05); then, from ``system_replication.slices``
   and ``sent``, the in-sequence slices whose copies differ, the out-of-sequence copies by node
   and the rows of the copies sent, by kind. The table's slicing is its channel's,
   ``--kill-slice-width-s`` x ``--kill-slice-count`` (default 1 s x 3); the nodes slice by
   their default (1 s x 3) until they have read the channel (every 2 s), and so does the
   restarted node for its first seconds (printed: when its ``status.json`` first shows the
   channel's slicing); ``--kill-node-slicing`` makes phase 3's slicing the nodes' default too.

No figure is asserted: this is a measurement. Cleanup: ``ringflow cluster stop``, then SIGKILL of
any node pid left.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.cluster import Session
from cassandra.query import SimpleStatement
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for ``_cluster``, ``bench_pipeline``

from _cluster import cpu_seconds, free_block, local_cluster, make_session, node_pids, ringflow
from bench_pipeline import DDL, TABLE_NAME, PacedRun, Writer, lake_lags, paced_writes, preload

from ringflow.pipeline import (
    ChannelSpec,
    ReplicaJob,
    ReplicaSummary,
    local_spark_session,
    plan_replica_job,
    read_lake_changes,
)
from ringflow.pipeline._replicate import cdc_options, plan_replication, run_replication

SLICE_WIDTH_S = 1
SLICE_COUNT = 3
WINDOW_MS = SLICE_WIDTH_S * SLICE_COUNT * 1000
WIDTH_MS = SLICE_WIDTH_S * 1000
LAG_TARGET_S = (SLICE_COUNT + 1) * SLICE_WIDTH_S + 5
NODE_OPTIONS = (
    "--slice-width-s", str(SLICE_WIDTH_S), "--slice-count", str(SLICE_COUNT), "--num-tokens", "2",
)  # fmt: skip
HINTS_OFF = ("--max-hint-window-ms", "1", "--hint-dispatch-interval-ms", "3600000")
"""``--hints off``; ``on`` passes no hint option: the node's defaults (hints kept for a replica
down up to 3 h, replayed every second once it is UP and agrees on the schema)."""
CHANNEL_WATCH_S = 2.0
"""A node reads the channels (so a table's slicing) every 2 s (``_channel_watch``)."""
PERMITS = 128
CONFIDENCE_MS = 2_000
QUERY_WINDOW_MS = 30_000
TIMEOUT_S = 1_200.0
WAIT_S = 240.0
QUORUM = ConsistencyLevel.QUORUM


# --- the edge --------------------------------------------------------------------------------


class KeyspaceWriter(Writer):
    """``bench_pipeline``'s workload on ``<keyspace>.events``."""

    def __init__(self, session: Session, keyspace: str) -> None:
        table = f"{keyspace}.{TABLE_NAME}"
        self.session = session
        self.insert = session.prepare(f"INSERT INTO {table} (pk, ck, v, n) VALUES (?, ?, ?, ?)")
        self.update = session.prepare(f"UPDATE {table} SET n = ? WHERE pk = ? AND ck = ?")
        self.delete = session.prepare(f"DELETE FROM {table} WHERE pk = ? AND ck = ?")


def create_keyspace(session: Session, keyspace: str) -> None:
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    ddl = DDL.replace("bench.", f"{keyspace}.") + " WITH cdc = {'enabled': true}"
    session.execute(ddl)
    if not session.wait_for_schema_agreement(wait_time=30):
        raise RuntimeError("no schema agreement after 30 s")


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.5)


def watermarks(session: Session, keyspace: str) -> dict[Any, int]:
    statement = SimpleStatement(
        "SELECT node, sealed_through_ms FROM system_replication.seal_watermarks "
        "WHERE keyspace_name = %s AND table_name = %s",
        consistency_level=QUORUM,
    )
    return {
        row.node: row.sealed_through_ms
        for row in session.execute(statement, (keyspace, TABLE_NAME))
    }


def wait_sealed(session: Session, keyspace: str, after_ms: int) -> None:
    """Every node published every slice holding a write made before ``after_ms``."""
    due = after_ms + WINDOW_MS + WIDTH_MS

    def sealed() -> bool:
        marks = watermarks(session, keyspace)
        return len(marks) == 3 and min(marks.values()) >= due

    wait_for(sealed, f"every node sealed {keyspace}'s slices")


def published_rows(session: Session, keyspace: str) -> tuple[int, int]:
    """(rows of every node's published copies, copies) of the keyspace's table: what every
    replica would send if each sent all it holds."""
    statement = SimpleStatement(
        "SELECT keyspace_name, table_name, row_count FROM system_replication.slices",
        consistency_level=QUORUM,
        fetch_size=2000,
    )
    rows = copies = 0
    for row in session.execute(statement):
        if (row.keyspace_name, row.table_name) == (keyspace, TABLE_NAME):
            rows += row.row_count
            copies += 1
    return rows, copies


class NodeCpu:
    """CPU seconds of the edge's node processes (pids read again: a restart changes them)."""

    def __init__(self, data: Path) -> None:
        self.data = data

    def __call__(self) -> float:
        return cpu_seconds(node_pids(self.data))


class NodeProfile:
    """``py-spy record`` (raw folded stacks, 50 Hz, non-blocking) of each node process around
    a delivery run, when ``--py-spy`` names the binary; then the functions where the samples
    are (own time, and the ``ringflow`` frames on the stacks), printed per run."""

    def __init__(self, binary: str | None, data: Path, where: Path) -> None:
        self.binary, self.data, self.where = binary, data, where
        self.processes: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, name: str) -> None:
        if not self.binary:
            return
        self.where.mkdir(parents=True, exist_ok=True)
        for index, pid in enumerate(node_pids(self.data)):
            output = self.where / f"{name}-node{index + 1}.txt"
            command = [self.binary, "record", "-p", str(pid), "-r", "50", "-f", "raw"]
            command += ["--nonblocking", "-o", str(output)]
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.processes.append((process, output))

    def stop(self, name: str) -> None:
        if not self.processes:
            return
        for process, _ in self.processes:
            process.send_signal(signal.SIGINT)
        own: Counter[str] = Counter()
        inside: Counter[str] = Counter()
        total = 0
        for process, output in self.processes:
            process.wait(60)
            if not output.exists():
                continue
            for line in output.read_text().splitlines():
                stack, _, count_text = line.rpartition(" ")
                count = int(count_text)
                frames = stack.split(";")
                total += count
                own[_short(frames[-1])] += count
                for frame in {_short(f) for f in frames if "ringflow/" in f}:
                    inside[frame] += count
        self.processes = []
        if not total:
            print(f"  py-spy {name}: no samples", flush=True)
            return
        top_own = ", ".join(f"{f} {c / total:.0%}" for f, c in own.most_common(8))
        top_in = ", ".join(f"{f} {c / total:.0%}" for f, c in inside.most_common(12))
        print(f"  py-spy {name}: {total} samples; own: {top_own}", flush=True)
        print(f"  py-spy {name}: on the stack (ringflow): {top_in}", flush=True)


def _short(frame: str) -> str:
    """``function (path/file.py:line)`` -> ``file.function``."""
    function, _, where = frame.partition(" (")
    return f"{Path(where.split(':')[0]).stem}.{function}"


# --- phase 1: the same backlog delivered three ways ------------------------------------------


@dataclass(slots=True)
class Delivery:
    name: str
    unique: int
    sends: int
    published: int
    wall_s: float
    node_cpu_s: float
    idle_cpu_s: float

    @property
    def net_cpu_s(self) -> float:
        return self.node_cpu_s - self.idle_cpu_s

    def per_change_us(self, net: bool = True) -> float:
        return (self.net_cpu_s if net else self.node_cpu_s) / max(self.unique, 1) * 1e6


def lake_counts(lake: Path, table: str) -> tuple[int, int]:
    """(rows, distinct changes) in the lake: every row a send to it."""
    changes = read_lake_changes(lake, table)
    return len(changes), len({(c.stream_id, c.time, c.batch_seq_no) for c in changes})


def quiet() -> Console:
    return Console(file=io.StringIO(), width=300)


def replica_once(
    spark: Any, source: str, scratch: Path, channel: str, cpu: NodeCpu, idle_rate: float
) -> tuple[ReplicaSummary, float, float, float]:
    """One ``--once`` run of ``channel``; (summary, wall s, node CPU s, idle CPU s)."""
    plan = plan_replica_job(
        source, scratch / "checkpoints", ChannelSpec(channels=(channel,)), permits=PERMITS
    )
    before = cpu()
    began = time.monotonic()
    summary = ReplicaJob(spark, plan, once=True, console=quiet(), timeout_s=TIMEOUT_S).run()
    wall = time.monotonic() - began
    return summary, wall, cpu() - before, idle_rate * wall


def deliver_backlog(
    spark: Any, args: argparse.Namespace, session: Session, source: str, scratch: Path,
    cpu: NodeCpu, round_number: int, changes: int, profile: NodeProfile,
) -> list[Delivery]:  # fmt: skip
    """One round of phase 1: the replica run and the log run of a backlog of ``changes`` each
    (the log run first in even rounds; round 0 is the warm-up)."""
    replica_ks, log_ks = f"rsteady{round_number}", f"rlog{round_number}"
    create_keyspace(session, replica_ks)
    create_keyspace(session, log_ks)
    lake = scratch / f"lake-steady-{round_number}"
    plan = channel_plan(source, scratch, replica_ks, lake)
    if [p.channel.name for p in plan.channels] != ["lake"]:
        raise RuntimeError(f"channels {[p.channel.name for p in plan.channels]}")
    took = {}
    for keyspace in (replica_ks, log_ks):
        took[keyspace] = preload(KeyspaceWriter(session, keyspace), 0, changes)
    print(
        f"round {round_number}: {changes:,} changes written to {replica_ks} in "
        f"{took[replica_ks]:.1f} s and to {log_ks} in {took[log_ks]:.1f} s (QUORUM, 64 in "
        "flight)",
        flush=True,
    )
    wait_sealed(session, replica_ks, time.time_ns() // 1_000_000)
    published, copies = published_rows(session, replica_ks)
    time.sleep(2)
    idle_before = cpu()
    time.sleep(args.idle_seconds)
    idle_rate = (cpu() - idle_before) / args.idle_seconds
    print(
        f"  published: {copies:,} slice copies holding {published:,} rows; idle node CPU "
        f"{idle_rate * 100:.1f}% of a core (3 nodes, {args.idle_seconds:.0f} s); load "
        f"{os.getloadavg()[0]:.1f}",
        flush=True,
    )

    def replica() -> Delivery:
        job_plan = plan_replica_job(
            source, scratch / f"checkpoints-{replica_ks}", ChannelSpec(channels=("lake",)),
            permits=PERMITS,
        )  # fmt: skip
        profile.start(f"replica-{round_number}")
        before = cpu()
        began = time.monotonic()
        summary = ReplicaJob(spark, job_plan, once=True, console=quiet(), timeout_s=TIMEOUT_S).run()
        wall = time.monotonic() - began
        node_cpu = cpu() - before
        profile.stop(f"replica-{round_number}")
        figures = summary.channels[0]
        lake_rows, lake_distinct = lake_counts(lake, f"{replica_ks}.events")
        if figures.status != "done" or lake_distinct != changes:
            raise RuntimeError(
                f"replica: status {figures.status}, {lake_distinct:,} distinct changes in the "
                f"lake of {changes:,}, errors {figures.errors}"
            )
        print(
            f"  replica: sends {figures.sends:,}, unique {figures.unique:,} = "
            f"{figures.sends_per_unique or 0:.3f} sends per unique change (lake: {lake_rows:,} "
            f"rows, {lake_distinct:,} distinct); every replica sending its copies would send "
            f"{published:,} = {published / max(figures.unique, 1):.3f} per unique change; "
            f"{wall:.1f} s, node CPU {node_cpu:.2f} s (idle share {idle_rate * wall:.2f} s); "
            f"load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        return Delivery(
            "replica", figures.unique, figures.sends, published, wall, node_cpu, idle_rate * wall
        )

    def log() -> Delivery:
        options = cdc_options(
            source,
            f"{log_ks}.events",
            consistency="QUORUM",
            confidence_window_ms=CONFIDENCE_MS,
            query_window_ms=QUERY_WINDOW_MS,
        )
        log_plan = plan_replication(
            options, [f"parquet:{scratch / f'lake-log-{round_number}'}"],
            scratch / f"ck-log-{round_number}",
        )  # fmt: skip
        profile.start(f"log-{round_number}")
        before = cpu()
        began = time.monotonic()
        summary = run_replication(spark, log_plan, once=True, console=quiet(), timeout_s=TIMEOUT_S)
        wall = time.monotonic() - began
        node_cpu = cpu() - before
        profile.stop(f"log-{round_number}")
        stats = summary.channels[0]
        if stats.status != "done" or stats.rows != changes:
            raise RuntimeError(f"log: status {stats.status}, {stats.rows:,} of {changes:,}")
        print(
            f"  log: {stats.rows:,} changes in {wall:.1f} s, node CPU {node_cpu:.2f} s (idle "
            f"share {idle_rate * wall:.2f} s); load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        return Delivery("log", stats.rows, stats.rows, 0, wall, node_cpu, idle_rate * wall)

    order = (log, replica) if round_number % 2 == 0 else (replica, log)
    return [run() for run in order]


def report_deliveries(runs: list[Delivery]) -> None:
    """The table of phase 1: per mode, the medians over the rounds, and the per-round ratios."""
    by_mode: dict[str, list[Delivery]] = {}
    for run in runs:
        by_mode.setdefault(run.name, []).append(run)
    replica, log = by_mode["replica"], by_mode["log"]

    def median_us(samples: list[Delivery], net: bool) -> float:
        return statistics.median(r.per_change_us(net) for r in samples)

    print(
        f"\n{len(replica)} round(s); node CPU = utime + stime of the 3 node processes during the "
        "delivery; net = minus the idle rate x the run's time"
    )
    print(
        "| run | sends / unique change | changes | wall s | node CPU µs/change net (raw) "
        "| vs log net (raw) | per round, net |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, samples in by_mode.items():
        sends = sum(r.sends for r in samples) / sum(r.unique for r in samples)
        rounds = ", ".join(
            f"{a.per_change_us(True) / b.per_change_us(True):.2f}x"
            for a, b in zip(samples, log, strict=True)
        )
        print(
            f"| {name} | {sends:.3f} | {samples[0].unique:,} | "
            f"{statistics.median(r.wall_s for r in samples):.1f} | "
            f"{median_us(samples, True):,.0f} ({median_us(samples, False):,.0f}) | "
            f"{median_us(samples, True) / median_us(log, True):.2f}x "
            f"({median_us(samples, False) / median_us(log, False):.2f}x) | {rounds} |"
        )
    every = sum(r.published for r in replica) / sum(r.unique for r in replica)
    print(
        f"| every replica sends (rows of every node's published copies / unique changes) | "
        f"{every:.3f} | | | | | |"
    )
    print(
        "target: replica node CPU per change at most 0.5x log: "
        f"{median_us(replica, True) / median_us(log, True):.2f}x net, "
        f"{median_us(replica, False) / median_us(log, False):.2f}x raw",
        flush=True,
    )


# --- continuous jobs ---------------------------------------------------------------------


class JobThread:
    """A continuous ``ReplicaJob`` in a thread until :meth:`stop`."""

    def __init__(self, spark: Any, plan: Any) -> None:
        self.output = io.StringIO()
        console = Console(file=self.output, width=400, color_system=None)
        self.job = ReplicaJob(spark, plan, once=False, console=console, timeout_s=TIMEOUT_S)
        self._stop = threading.Event()
        self.result: list[ReplicaSummary] = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(self.job.run(self._stop)), name="replica-job"
        )
        self.thread.start()

    def wait(self, condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        def check() -> bool:
            if not self.thread.is_alive():
                raise RuntimeError(f"the job ended waiting for {what}\n{self.output.getvalue()}")
            return condition()

        wait_for(check, what, timeout_s)

    def committed(self, batches: int) -> bool:
        progress = self.job.progress()
        return bool(progress) and all(p.committed_batches >= batches for p in progress.values())

    def stop(self) -> ReplicaSummary:
        self._stop.set()
        self.thread.join(180)
        if self.thread.is_alive() or not self.result:
            raise RuntimeError("the job did not stop")
        return self.result[0]


def channel_plan(
    source: str, scratch: Path, keyspace: str, lake: Path,
    slicing: tuple[int, int] = (SLICE_WIDTH_S, SLICE_COUNT),
) -> Any:  # fmt: skip
    """Channel ``lake`` pointed at ``<keyspace>.events`` -> ``lake``, sliced ``slicing``
    (width s, count)."""
    spec = ChannelSpec(
        f"{keyspace}.events",
        (f"parquet:{lake}",),
        slice_width_s=slicing[0],
        slice_count=slicing[1],
    )
    return plan_replica_job(source, scratch / f"checkpoints-{keyspace}", spec, permits=PERMITS)


def run_lag(
    spark: Any, args: argparse.Namespace, session: Session, source: str, scratch: Path,
    cpu: NodeCpu,
) -> None:  # fmt: skip
    create_keyspace(session, "rlag")
    lake = scratch / "lake-lag"
    plan = channel_plan(source, scratch, "rlag", lake)
    writer = KeyspaceWriter(session, "rlag")
    preload(writer, 10_000_000, 200)  # the first batches have something to carry
    runner = JobThread(spark, plan)
    paced = PacedRun()
    try:
        runner.wait(lambda: runner.committed(1), "a first committed batch")
        time.sleep(3)
        since = time.time()
        before = cpu()
        paced_writes(writer, 20_000_000, args.rate, args.lag_seconds, paced)
        node_cpu = cpu() - before
        last_ms = time.time_ns() // 1_000_000
        runner.wait(
            lambda: runner.job.caught_up(last_ms + WINDOW_MS + WIDTH_MS), "the job caught up"
        )
        drained = time.time() - last_ms / 1000
    finally:
        summary = runner.stop()
    achieved = paced.issued / paced.seconds if paced.seconds else 0.0
    print(
        f"writer: {paced.issued:,} writes in {paced.seconds:.1f} s = {achieved:,.0f}/s (asked "
        f"{args.rate:,}/s), {paced.failed} failed; node CPU meanwhile {node_cpu:.1f} s "
        f"({node_cpu / paced.seconds * 100:.0f}% of a core); caught up {drained:.1f} s after "
        f"the last write; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    figures = summary.channels[0]
    print(
        f"job: sends {figures.sends:,}, unique {figures.unique:,}, "
        f"{figures.sends_per_unique or 0:.3f} sends per unique change, "
        f"{figures.batches} batches, failures {figures.failures}",
        flush=True,
    )
    lags = sorted(lake_lags(lake, since))
    if not lags:
        print("no change of the paced run reached the lake")
        return
    p50 = lags[len(lags) // 2]
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    print(
        f"lag over {len(lags):,} delivered changes (of {paced.issued - paced.failed:,} "
        f"acknowledged): p50 {p50:.2f} s, p99 {p99:.2f} s, max {lags[-1]:.2f} s, mean "
        f"{statistics.fmean(lags):.2f} s; target p99 <= ({SLICE_COUNT} + 1) x {SLICE_WIDTH_S} "
        f"+ 5 = {LAG_TARGET_S} s",
        flush=True,
    )


# --- phase 3: a node killed ---------------------------------------------------------------


class RetryingWriter:
    """The workload written one at a time in a thread, each write retried until acknowledged
    (a write fails around a kill), so writes go on across the kill and the restart."""

    def __init__(self, writer: Writer, first: int, pause_s: float) -> None:
        self.writer, self.index, self.pause_s = writer, first, pause_s
        self.count = 0
        self._running = threading.Event()
        self._running.set()
        self._thread = threading.Thread(target=self._write, name="writer", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        while self._running.is_set():
            statement, params = self.writer.statement(self.index)
            deadline = time.monotonic() + 120
            while True:
                try:
                    self.writer.session.execute(statement, params, timeout=30.0)
                    break
                except Exception:  # the driver's NoHostAvailable / timeouts around the kill
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            self.index += 1
            self.count += 1
            time.sleep(self.pause_s)

    def wait_for_more(self, count: int, what: str) -> None:
        target = self.count + count
        wait_for(lambda: self.count >= target, what)

    def stop(self) -> int:
        self._running.clear()
        self._thread.join(150)
        return time.time_ns() // 1_000_000


@dataclass(slots=True)
class CopyFigures:
    """Copies of a table's slices published by the nodes (``system_replication.slices``) and
    those the job sent (``system_replication.sent`` of the channel), by kind."""

    oos_copies: Counter[str]
    """Out-of-sequence copies by node address."""
    oos_rows: Counter[str]
    in_sequence_keys: int
    mismatched_keys: int
    mismatched_rows: int
    """Rows of every copy of the in-sequence slices whose copies' digests differ."""
    sent_rows: Counter[str]
    """Rows of the copies the job sent: "in sequence", "out of sequence"."""


def copy_figures(
    session: Session, keyspace: str, channel: str, names: dict[Any, str]
) -> CopyFigures:
    """Read once the job caught up (both tables keep their rows 7 days)."""

    def scan(table: str) -> list[Any]:
        statement = SimpleStatement(
            f"SELECT * FROM system_replication.{table}", consistency_level=QUORUM, fetch_size=2000
        )
        return [
            row
            for row in session.execute(statement)
            if (row.keyspace_name, row.table_name) == (keyspace, TABLE_NAME)
        ]

    copies: dict[tuple[Any, ...], dict[Any, Any]] = {}
    for row in scan("slices"):
        key = (row.slice_start_ms, row.range_start, row.range_end, row.out_of_sequence)
        copies.setdefault(key, {})[row.node] = row
    oos_copies: Counter[str] = Counter()
    oos_rows: Counter[str] = Counter()
    in_sequence = mismatched = mismatched_rows = 0
    for key, by_node in copies.items():
        if key[3]:
            for node, row in by_node.items():
                oos_copies[names.get(node, str(node))] += 1
                oos_rows[names.get(node, str(node))] += row.row_count
            continue
        in_sequence += 1
        if len({row.digest for row in by_node.values()}) > 1:
            mismatched += 1
            mismatched_rows += sum(row.row_count for row in by_node.values())
    sent_rows: Counter[str] = Counter()
    for row in scan("sent"):
        if row.channel != channel:
            continue
        key = (row.slice_start_ms, row.range_start, row.range_end, row.out_of_sequence)
        published = copies.get(key, {}).get(row.node)
        kind = "out of sequence" if row.out_of_sequence else "in sequence"
        sent_rows[kind] += published.row_count if published is not None else 0
    return CopyFigures(oos_copies, oos_rows, in_sequence, mismatched, mismatched_rows, sent_rows)


def node_names(session: Session) -> dict[Any, str]:
    """Host id -> address, from the driver's metadata."""
    return {host.host_id: host.address for host in session.cluster.metadata.all_hosts()}


class SlicedAt:
    """When a restarted node's ``status.json`` first shows ``table`` sliced by its channel
    (until then the node slices it by its default), watched in a thread for up to 120 s."""

    def __init__(self, node_dir: Path | None, table: str) -> None:
        self.seen_s: float | None = None
        if node_dir is None:
            return
        self._path, self._table, self._began = node_dir / "status.json", table, time.monotonic()
        threading.Thread(target=self._watch, name="sliced-at", daemon=True).start()

    def _watch(self) -> None:
        while time.monotonic() - self._began < 120:
            try:
                document = json.loads(self._path.read_text())
                if self._table in document["capture"]["channels"]["sliced_by_channels"]:
                    self.seen_s = time.monotonic() - self._began
                    return
            except (OSError, ValueError, KeyError, TypeError):
                pass
            time.sleep(0.1)


def run_kill(
    spark: Any, args: argparse.Namespace, session: Session, source: str, scratch: Path,
    data: Path, addresses: list[str],
) -> None:  # fmt: skip
    slicing = (args.kill_slice_width_s, args.kill_slice_count)
    window_ms = slicing[0] * slicing[1] * 1000
    width_ms = slicing[0] * 1000
    default = "the same" if args.kill_node_slicing else f"{SLICE_WIDTH_S} s x {SLICE_COUNT}"
    print(
        f"hints {args.hints}; table rkill.events sliced {slicing[0]} s x {slicing[1]} (its "
        f"channel; window {window_ms / 1000:.0f} s; the nodes' default {default})",
        flush=True,
    )
    create_keyspace(session, "rkill")
    lake = scratch / "lake-kill"
    plan = channel_plan(source, scratch, "rkill", lake, slicing)
    time.sleep(2 * CHANNEL_WATCH_S + 1)  # every node slices the table as its channel says
    writer = KeyspaceWriter(session, "rkill")
    preload(writer, 0, args.kill_backlog)
    runner = JobThread(spark, plan)
    victim = addresses[1]
    began = time.monotonic()
    writes: RetryingWriter | None = None
    sliced_at = SlicedAt(None, "")

    def phase(text: str) -> None:
        count = writes.count if writes is not None else 0
        print(f"  {time.monotonic() - began:6.1f} s {text} ({count} writes)", flush=True)

    try:
        runner.wait(lambda: runner.committed(1), "a first committed batch")
        writes = RetryingWriter(writer, 1_000_000, pause_s=0.05)
        runner.wait(lambda: runner.committed(3), "three committed batches")
        phase("transmitting")
        ringflow("cluster", "kill", victim, "--data", str(data))
        phase(f"{victim} killed")
        writes.wait_for_more(args.kill_writes, "writes with a node down")
        ringflow("cluster", "restart", victim, "--data", str(data))
        sliced_at = SlicedAt(data / f"node{addresses.index(victim) + 1}", "rkill.events")
        ringflow("cluster", "start", "--data", str(data), "--timeout", "90", timeout_s=150)
        phase(f"{victim} restarted and UP")
        writes.wait_for_more(args.kill_writes, "writes after the restart")
        last_ms = writes.stop()
        phase("writes stopped")
        runner.wait(
            lambda: runner.job.caught_up(last_ms + window_ms + width_ms),
            "the job caught up",
            WAIT_S + window_ms / 1000,
        )
        phase("caught up")
    finally:
        if writes is not None:
            writes.stop()
        summary = runner.stop()
    figures = summary.channels[0]
    lake_rows, lake_distinct = lake_counts(lake, "rkill.events")
    written = args.kill_backlog + (writes.count if writes is not None else 0)
    print(
        f"node killed: {written:,} writes acknowledged; job: sends {figures.sends:,}, unique "
        f"{figures.unique:,} = **{figures.sends_per_unique or 0:.3f}** sends per unique change "
        f"({figures.failures} query failures, status {figures.status}); lake: {lake_rows:,} "
        f"rows, {lake_distinct:,} distinct = {lake_rows / max(lake_distinct, 1):.3f}; "
        f"target <= 1.05",
        flush=True,
    )
    found = copy_figures(session, "rkill", "lake", node_names(session))
    print(
        f"copies: {found.in_sequence_keys:,} in-sequence slices, {found.mismatched_keys} of "
        f"them with differing copies ({found.mismatched_rows:,} rows over their copies); "
        f"out-of-sequence copies by node {dict(found.oos_copies)} holding "
        f"{dict(found.oos_rows)} rows (victim {victim}); rows of the copies sent: "
        f"{dict(found.sent_rows)}",
        flush=True,
    )
    if sliced_at.seen_s is not None:
        print(
            f"  the restarted victim sliced the table as its channel says {sliced_at.seen_s:.1f} "
            "s after the restart command (its status.json; before that: the node's default)",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=5_000, help="backlog of phase 1")
    parser.add_argument("--rounds", type=int, default=2, help="phase 1 rounds (alternating)")
    parser.add_argument("--warmup-changes", type=int, default=500, help="phase 1 round 0")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=500, help="writes/s of the lag phase")
    parser.add_argument("--lag-seconds", type=float, default=60.0)
    parser.add_argument("--kill-backlog", type=int, default=1_500)
    parser.add_argument("--kill-writes", type=int, default=120)
    parser.add_argument(
        "--py-spy",
        metavar="PATH",
        help="profile the node processes during phase 1's counted runs with this py-spy "
        "(the sampling costs CPU: use runs without it for the figures)",
    )
    parser.add_argument(
        "--hints",
        choices=("on", "off"),
        default="off",
        help="off (default): hints off on the nodes (--max-hint-window-ms 1 "
        "--hint-dispatch-interval-ms 3600000); on: the nodes' default hint settings",
    )
    parser.add_argument(
        "--kill-slice-width-s", type=int, default=SLICE_WIDTH_S, help="phase 3's slicing"
    )
    parser.add_argument("--kill-slice-count", type=int, default=SLICE_COUNT)
    parser.add_argument(
        "--kill-node-slicing",
        action="store_true",
        help="the nodes' default slicing (--slice-width-s/--slice-count) is phase 3's too, "
        "so the restarted node slices the table the same before it has read the channels",
    )
    parser.add_argument("--skip-backlog", action="store_true", help="skip phase 1")
    parser.add_argument("--skip-lag", action="store_true")
    parser.add_argument("--skip-kill", action="store_true")
    parser.add_argument("--edge-address", help="first edge node address (default: a free block)")
    args = parser.parse_args()
    print(
        f"bench_replica: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    first = args.edge_address or free_block(3)
    prefix, last = first.rsplit(".", 1)
    addresses = [f"{prefix}.{int(last) + i}" for i in range(3)]
    scratch = Path(tempfile.mkdtemp(prefix="ringflow-bench-replica-"))
    data = scratch / "edge"
    started = time.monotonic()
    try:
        options = NODE_OPTIONS + (HINTS_OFF if args.hints == "off" else ())
        if args.kill_node_slicing:
            slicing = ("--slice-width-s", str(args.kill_slice_width_s))
            slicing += ("--slice-count", str(args.kill_slice_count))
            options = slicing + options[4:]
        with local_cluster(data, 3, first, options):
            source = ",".join(addresses)
            cluster, session = make_session(first)
            spark = local_spark_session("ringflow-bench-replica")
            cpu = NodeCpu(data)
            profile = NodeProfile(args.py_spy, data, scratch / "profiles")
            no_profile = NodeProfile(None, data, scratch / "profiles")
            try:
                if not args.skip_backlog:
                    print("\n== 1. a backlog delivered: replica-side vs log capture", flush=True)
                    runs: list[Delivery] = []
                    for round_number in range(args.rounds + 1):  # round 0: the warm-up
                        changes = args.warmup_changes if round_number == 0 else args.changes
                        found = deliver_backlog(
                            spark, args, session, source, scratch, cpu, round_number, changes,
                            profile if round_number > 0 else no_profile,
                        )  # fmt: skip
                        runs += found if round_number > 0 else []
                    report_deliveries(runs)
                if not args.skip_lag:
                    print(f"\n== 2. lag at {args.rate} writes/s", flush=True)
                    run_lag(spark, args, session, source, scratch, cpu)
                if not args.skip_kill:
                    print("\n== 3. one node SIGKILLed mid-transmission and restarted", flush=True)
                    run_kill(spark, args, session, source, scratch, data, addresses)
            finally:
                cluster.shutdown()
                spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"\nbench_replica took {time.monotonic() - started:.0f} s; load at the end "
        f"{os.getloadavg()[0]:.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
