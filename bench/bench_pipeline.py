"""End-to-end pipeline figures (issue 8 §5): throughput edge -> lake / hub, and lag under load.

Run with the project venv: ``.venv/bin/python bench/bench_pipeline.py [--changes N]
[--lag-seconds S] [--rate R] [--skip-lag] [--skip-throughput] [--idle-seconds S]
[--lakehouse] [--max-rows-per-batch N]``.

Set-up: an edge cluster of 3 real ``ringflow`` node processes (``ringflow cluster start --nodes 3``,
gossip every 200 ms, keyspace ``SimpleStrategy`` RF 3) and a 1-node hub (``ringflow cluster start
--nodes 1``), each on a free loopback block (``--edge-address`` / ``--hub-address`` pin them, e.g.
127.0.0.1 and 127.0.0.11), a CDC-enabled table ``bench.events (pk int, ck int, v text, n bigint,
PRIMARY KEY (pk, ck))`` on the edge and the same table on the hub; Spark ``local[2]`` through
:func:`ringflow.pipeline.local_spark_session`; the job is the library's replication API
(:func:`ringflow.pipeline._replicate.plan_replication` / ``run_replication``), i.e. the same
``ringflow-cdc`` source -> sink queries as ``ringflow replicate``.

Throughput: N changes (inserts, updates, row deletes) preloaded with the Scylla driver (prepared
statements, ``execute_concurrent_with_args`` at 64 in flight, QUORUM). Then, in one Spark session:

- baseline: a plain Spark job writing the same number of rows, same schema (the change schema of
  the table), from a Python list in memory to Parquet (``createDataFrame(rows).write.parquet``),
  best of 2 after a warm-up;
- ``replicate --once`` (confidence window 2 s, the default 30 s query window; all the changes
  in one micro-batch unless ``--max-rows-per-batch`` caps them) to a Parquet
  change lake, three times (a cold run, the first Python data source read of the session, then
  two warm runs, each with a fresh lake and checkpoint; the ratio is the best warm run against
  the best plain run, every run printed), and once to the hub. Each run's time is the job's own
  wall time (queries started to queries done); its rows must be the N preloaded log rows.
- with ``--lakehouse`` (issue 19), each warm lake run is followed by one to a fresh Delta
  destination (``delta:DIR``) and one to a fresh Iceberg one (``iceberg:CATALOG#bench.events``,
  SQLite catalog): the change log and the current-state table each micro-batch; the ratio is
  the best of each against the best warm lake run.

Lag: a writer thread paces ``--rate`` writes/s (default 1,000; async driver writes, at most 256 in
flight, each at its own client timestamp) for ``--lag-seconds`` (default 60), while a continuous
replication (trigger 1 s, confidence window 2 s, query window 2 s, ``startingTime`` = its start)
writes to a fresh lake for 20 s of warm-up + the load + 84 s of drain. The lag of a change =
``committed_at`` of the lake commit marker listing its file (the instant the batch became
visible) - its write time (``cdc$time``). The writer's achieved rate is reported: the 3-node
edge on this 2-core machine may not sustain the asked rate (see the Cluster figures).

Idle micro-batches (``--idle-seconds S``): a continuous query (trigger 1 s, starting now) with no
writes, for S seconds: the median time of a micro-batch that reads nothing, i.e. the per-batch
overhead of source + sink (the first two batches start Spark's Python processes, left out).

No figure is asserted: this is a measurement. Cleanup: ``ringflow cluster stop`` in ``finally``,
then SIGKILL of any node pid still alive.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent_with_args
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for ``_cluster``

from _cluster import free_block, local_cluster, make_session

from ringflow.cdc import CdcOperation
from ringflow.pipeline import (
    Change,
    IcebergStore,
    change_schema,
    change_to_row,
    local_spark_session,
    parse_iceberg_location,
)
from ringflow.pipeline._replicate import cdc_options, plan_replication, run_replication
from ringflow.schema import BIGINT, INT, TEXT, ClusteringOrder, Table, timeuuid_from_micros

KEYSPACE = "bench"
TABLE_NAME = "events"
TABLE = Table.create(
    KEYSPACE,
    TABLE_NAME,
    partition_key=[("pk", INT)],
    clustering=[("ck", INT, ClusteringOrder.ASC)],
    regular=[("v", TEXT), ("n", BIGINT)],
)
DDL = (
    f"CREATE TABLE {KEYSPACE}.{TABLE_NAME} (pk int, ck int, v text, n bigint, PRIMARY KEY (pk, ck))"
)
CONCURRENCY = 64
CONFIDENCE_MS = 2_000
WINDOW_MS = 2_000
CATCH_UP_WINDOW_MS = 30_000  # the source's default query window, for the throughput runs


# --- the clusters (started by ``_cluster.local_cluster``) ------------------------------------


def create_schema(session: Session, rf: int, cdc: bool) -> None:
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
    )
    session.execute(DDL + (" WITH cdc = {'enabled': true}" if cdc else ""))
    if not session.wait_for_schema_agreement(wait_time=30):
        raise RuntimeError("no schema agreement after 30 s")


# --- the workload ----------------------------------------------------------------------------


class Writer:
    """Prepared statements of the workload: inserts, updates and row deletes."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.insert = session.prepare(
            f"INSERT INTO {KEYSPACE}.{TABLE_NAME} (pk, ck, v, n) VALUES (?, ?, ?, ?)"
        )
        self.update = session.prepare(
            f"UPDATE {KEYSPACE}.{TABLE_NAME} SET n = ? WHERE pk = ? AND ck = ?"
        )
        self.delete = session.prepare(
            f"DELETE FROM {KEYSPACE}.{TABLE_NAME} WHERE pk = ? AND ck = ?"
        )

    def statement(self, index: int) -> tuple[Any, tuple[object, ...]]:
        """The ``index``-th write: 80% inserts, 15% updates, 5% row deletes."""
        pk, ck = index % 5_000, index // 5_000
        kind = index % 20
        if kind < 16:
            return self.insert, (pk, ck, f"value-{index}", index)
        if kind < 19:
            return self.update, (index * 3, pk, max(ck - 1, 0))
        return self.delete, (pk, max(ck - 2, 0))


def preload(writer: Writer, first: int, count: int) -> float:
    """Write ``count`` changes at CONCURRENCY in flight; seconds taken."""
    groups: dict[int, list[tuple[object, ...]]] = {}
    kinds = {}
    for index in range(first, first + count):
        statement, params = writer.statement(index)
        kinds[id(statement)] = statement
        groups.setdefault(id(statement), []).append(params)
    started = time.perf_counter()
    for key, params in groups.items():
        results = execute_concurrent_with_args(
            writer.session, kinds[key], params, concurrency=CONCURRENCY, raise_on_first_error=True
        )
        if len(results) != len(params):
            raise RuntimeError(f"{len(results)} results for {len(params)} writes")
    return time.perf_counter() - started


@dataclass(slots=True)
class PacedRun:
    issued: int = 0
    failed: int = 0
    seconds: float = 0.0


def paced_writes(writer: Writer, first: int, rate: int, seconds: float, run: PacedRun) -> None:
    """Issue ``rate`` writes/s for ``seconds`` (async, at most 256 in flight)."""
    slots = threading.BoundedSemaphore(256)
    lock = threading.Lock()

    def done(_result: object) -> None:
        slots.release()

    def failed(_error: object) -> None:
        with lock:
            run.failed += 1
        slots.release()

    started = time.perf_counter()
    index = first
    while True:
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            break
        due = int(elapsed * rate)
        while run.issued < due:
            slots.acquire()
            statement, params = writer.statement(index)
            future = writer.session.execute_async(statement, params)
            future.add_callbacks(done, failed)
            index += 1
            run.issued += 1
        time.sleep(0.002)
    for _ in range(256):
        slots.acquire()  # every write answered
    run.seconds = time.perf_counter() - started


# --- the pipeline runs -----------------------------------------------------------------------


def baseline_rows(count: int) -> list[tuple[object, ...]]:
    """``count`` change rows of the bench table, as the source would produce them."""
    rows = []
    t0 = time.time_ns() // 1000
    for index in range(count):
        time_uuid = timeuuid_from_micros(t0 + index, index)
        key = {"pk": index % 5_000, "ck": index // 5_000}
        change = Change(
            KEYSPACE,
            TABLE_NAME,
            CdcOperation.INSERT,
            time_uuid,
            key,
            0,
            {"v": f"value-{index}", "n": index},
            frozenset(),
            {},
            None,
            index.to_bytes(16, "big"),
        )
        rows.append(change_to_row(TABLE, change))
    return rows


def plain_spark(spark: Any, rows: list[tuple[object, ...]], target: Path) -> float:
    started = time.perf_counter()
    spark.createDataFrame(rows, change_schema(TABLE)).write.parquet(str(target))
    return time.perf_counter() - started


def replicate(
    spark: Any,
    source: str,
    urls: list[str],
    checkpoint: Path,
    once: bool,
    timeout_s: float,
    window_ms: int = WINDOW_MS,
    starting_ms: int | None = None,
    max_rows: int | None = None,
) -> Any:
    options = cdc_options(
        source,
        f"{KEYSPACE}.{TABLE_NAME}",
        consistency="ONE",
        confidence_window_ms=CONFIDENCE_MS,
        query_window_ms=window_ms,
        startingTime=starting_ms,
        max_rows_per_batch=max_rows,
    )
    plan = plan_replication(options, urls, checkpoint)
    quiet = Console(file=io.StringIO())
    return run_replication(spark, plan, once=once, console=quiet, timeout_s=timeout_s)


def run_throughput(
    spark: Any, args: argparse.Namespace, edge: str, hub: str, scratch: Path
) -> None:
    cluster, session = make_session(edge)
    try:
        writer = Writer(session)
        seconds = preload(writer, 0, args.changes)
    finally:
        cluster.shutdown()
    rate = args.changes / seconds
    print(
        f"preloaded {args.changes:,} changes in {seconds:.1f} s "
        f"({rate:,.0f} writes/s at {CONCURRENCY} in flight)",
        flush=True,
    )
    time.sleep(CONFIDENCE_MS / 1000 + 0.5)

    rows = baseline_rows(args.changes)
    plain_spark(spark, rows[:1000], scratch / "warm")
    plain = min(plain_spark(spark, rows, scratch / f"plain-{i}") for i in range(2))
    print(f"plain Spark list -> Parquet: {plain:.2f} s, {args.changes / plain:,.0f} rows/s")

    warm: dict[str, list[float]] = {}
    runs = [("lake (cold: first source read)", f"parquet:{scratch / 'lake-cold'}")]
    for round_number in (1, 2):  # the destinations alternate, each fresh in every round
        runs.append((f"lake (warm {round_number})", f"parquet:{scratch / f'lake-{round_number}'}"))
        if args.lakehouse:
            runs.append(
                (f"delta (warm {round_number})", f"delta:{scratch / f'delta-{round_number}'}")
            )
            catalog = f"{scratch / f'catalog-{round_number}.db'}#{KEYSPACE}.{TABLE_NAME}"
            IcebergStore(parse_iceberg_location(catalog)).catalog.create_namespace(KEYSPACE)
            runs.append((f"iceberg (warm {round_number})", f"iceberg:{catalog}"))
    runs.append(("hub (1 node)", f"ringflow://{hub}"))
    for run, (name, url) in enumerate(runs):
        checkpoint = scratch / f"checkpoint-{run}"
        summary = replicate(
            spark,
            edge,
            [url],
            checkpoint,
            True,
            1800,
            CATCH_UP_WINDOW_MS,
            max_rows=args.max_rows_per_batch,
        )
        stats = summary.channels[0]
        per_change = stats.seconds / max(stats.rows, 1)
        if "(warm" in name:
            warm.setdefault(name.split(" ")[0], []).append(per_change * args.changes)
        print(
            f"replicate -> {name}: {stats.rows:,} changes in {stats.seconds:.2f} s, "
            f"{stats.rows / stats.seconds:,.0f} changes/s, {stats.batches} batch(es), "
            f"{stats.runs} run(s), status {stats.status}; ratio vs plain Spark "
            f"{per_change * args.changes / plain:.2f}x",
            flush=True,
        )
    lake = min(warm["lake"])
    print(
        f"edge -> lake, best warm run vs best plain run: {lake:.2f} s vs {plain:.2f} s = "
        f"{lake / plain:.2f}x (target <= 3x)",
        flush=True,
    )
    for name in ("delta", "iceberg"):
        if name in warm:
            best = min(warm[name])
            print(
                f"edge -> {name}, best warm run vs the lake's: {best:.2f} s vs {lake:.2f} s = "
                f"{best / lake:.2f}x (target <= 1.5x); vs plain Spark {best / plain:.2f}x",
                flush=True,
            )


def run_lag(spark: Any, args: argparse.Namespace, edge: str, scratch: Path) -> None:
    lake = scratch / "lake-lag"
    cluster, session = make_session(edge)
    run = PacedRun()
    writer = Writer(session)
    preload(writer, 10_000_000, 500)  # warm the connections
    warm_up_s = 20.0  # the query's first (cold) batches before the load starts
    started = {"unix": time.time() + warm_up_s}

    def write() -> None:
        time.sleep(warm_up_s)
        started["unix"] = time.time()
        paced_writes(writer, 20_000_000, args.rate, args.lag_seconds, run)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    drain_s = (CONFIDENCE_MS + WINDOW_MS) / 1000 + 20
    try:
        # The query runs in this thread: Spark resolves registered data sources per thread.
        replicate(
            spark, edge, [f"parquet:{lake}"], scratch / "checkpoint-lag", False,
            warm_up_s + args.lag_seconds + drain_s + 60, WINDOW_MS, time.time_ns() // 1_000_000,
        )  # fmt: skip
        thread.join()
    finally:
        cluster.shutdown()
    lags = lake_lags(lake, started["unix"])
    achieved = run.issued / run.seconds if run.seconds else 0.0
    print(
        f"writer: {run.issued:,} writes in {run.seconds:.1f} s = {achieved:,.0f}/s "
        f"(asked {args.rate:,}/s), {run.failed} failed",
        flush=True,
    )
    if not lags:
        print("no change of the paced run reached the lake")
        return
    lags.sort()
    p50 = lags[len(lags) // 2]
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    print(
        f"lag over {len(lags):,} delivered changes (of {run.issued:,} written): "
        f"p50 {p50:.2f} s, p99 {p99:.2f} s, max {lags[-1]:.2f} s, mean "
        f"{statistics.fmean(lags):.2f} s; target p99 <= {CONFIDENCE_MS / 1000:.0f} + "
        f"{WINDOW_MS / 1000:.0f} + 5 = {(CONFIDENCE_MS + WINDOW_MS) / 1000 + 5:.0f} s",
        flush=True,
    )


def run_idle(spark: Any, edge: str, scratch: Path, seconds: float) -> None:
    """Per-micro-batch cost with no new data: a continuous query (trigger 1 s) from now."""
    options = cdc_options(
        edge,
        f"{KEYSPACE}.{TABLE_NAME}",
        consistency="ONE",
        confidence_window_ms=CONFIDENCE_MS,
        query_window_ms=WINDOW_MS,
        startingTime=time.time_ns() // 1_000_000,
    )
    plan = plan_replication(options, [f"parquet:{scratch / 'lake-idle'}"], scratch / "ck-idle")
    sink = plan.destinations[0]
    query = (
        spark.readStream.format("ringflow-cdc")
        .options(**plan.source_options)
        .load()
        .writeStream.format(sink.sink_format)
        .options(**sink.options)
        .option("checkpointLocation", str(plan.checkpoint / sink.channel))
        .trigger(processingTime="1 second")
        .start()
    )
    time.sleep(seconds)
    query.stop()
    took = [
        int(p.durationMs["triggerExecution"])
        for p in query.recentProgress
        if p.durationMs.get("addBatch") is not None
    ]
    steady = took[2:]  # the first batches start the source's Python processes
    median = statistics.median(steady) if steady else float("nan")
    print(
        f"idle micro-batches: {len(took)} in {seconds:.0f} s; first {took[:2]} ms, "
        f"steady median {median:.0f} ms, max {max(steady, default=0)} ms",
        flush=True,
    )


def lake_lags(lake: Path, since_unix: float) -> list[float]:
    """Per change written after ``since_unix``: its batch's commit time - its write time (s)."""
    lags = []
    for marker in sorted(lake.glob("table=*/_commits/*/*.json")):
        content = json.loads(marker.read_text("utf-8"))
        committed = datetime.datetime.fromisoformat(content["committed_at"]).timestamp()
        for entry in content["files"]:
            path = marker.parent.parent.parent / entry["path"]
            times = pq.read_table(str(path), columns=["cdc$time_us"]).column(0).to_pylist()
            lags.extend(committed - t / 1e6 for t in times if t / 1e6 >= since_unix)
    return lags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--rate", type=int, default=1_000)
    parser.add_argument("--lag-seconds", type=float, default=60.0)
    parser.add_argument("--edge-address", help="first edge node address (default: a free block)")
    parser.add_argument("--hub-address", help="hub node address (default: a free block)")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-lag", action="store_true")
    parser.add_argument(
        "--max-rows-per-batch",
        type=int,
        help="the source's max_rows_per_batch in the throughput runs (default: none, one batch)",
    )
    parser.add_argument(
        "--lakehouse",
        action="store_true",
        help="also replicate to Delta and Iceberg (issue 19), alternating with the lake",
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=0.0, help="also time idle micro-batches this long"
    )
    args = parser.parse_args()
    print(
        f"bench_pipeline: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    edge_first = args.edge_address or free_block(3)
    hub_first = args.hub_address or free_block(1, avoid=edge_first)
    scratch = Path(tempfile.mkdtemp(prefix="ringflow-bench-pipeline-"))
    try:
        with (
            local_cluster(scratch / "edge", 3, edge_first),
            local_cluster(scratch / "hub", 1, hub_first),
        ):
            for address, rf, cdc in ((edge_first, 3, True), (hub_first, 1, False)):
                cluster, session = make_session(address)
                try:
                    create_schema(session, rf, cdc)
                finally:
                    cluster.shutdown()
            spark = local_spark_session("ringflow-bench-pipeline")
            try:
                if not args.skip_throughput:
                    run_throughput(spark, args, edge_first, hub_first, scratch)
                if not args.skip_lag:
                    run_lag(spark, args, edge_first, scratch)
                if args.idle_seconds > 0:
                    run_idle(spark, edge_first, scratch, args.idle_seconds)
            finally:
                spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
