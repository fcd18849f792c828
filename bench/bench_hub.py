"""The hub sink's catch-up rate through ``ringflow replicate``, one statement per change against
the default grouping (issue 14 §5: "catch-up after a 10-minute destination outage at 500
writes/s, target at least 5x the write rate").

Run: ``.venv/bin/python bench/bench_hub.py [--changes N] [--rounds R] [--rate W]
[--contenders SPEC ...] [--edge-address A] [--hub-address A]``; a contender's SPEC is a
grouping with sink options, e.g. ``replica`` or ``replica:concurrency=64:batch_rows=4000``.

Set-up (as ``bench_pipeline``): an edge of 3 real ``ringflow`` node processes (``ringflow cluster
start --nodes 3``, gossip every 200 ms, ``SimpleStrategy`` RF 3) with the CDC table
``bench.events (pk int, ck int, v text, n bigint, PRIMARY KEY (pk, ck))`` and a 1-node hub
(keyspace ``bench`` at RF 1), each on a free loopback block; Spark ``local[2]``.

The backlog: ``--changes`` changes (default 40,000: 80% inserts, 15% updates, 5% row deletes;
``bench_pipeline``'s workload) written to the edge with the driver (QUORUM, 64 in flight) while
no job runs, i.e. what the edge's CDC log holds for a hub that was away. Each contender then
delivers the whole backlog with the replication API of ``ringflow replicate --once``
(:func:`~ringflow.pipeline._replicate.plan_replication` / ``run_replication``: the ``ringflow-cdc``
source read at CL ONE, 30 s query windows, confidence window 2 s, into ``ringflow-hub`` at CL ONE)
to a fresh hub table with a fresh checkpoint; the only difference is the hub sink's options,
set in the plan's sink options: ``grouping`` (``none``: one request per statement, the path
before issue 14 §5; ``replica``: the default, UNLOGGED BATCHes of a replica set's statements;
``partition``) and any other sink option a contender names (``--contenders``, default ``none
replica``: the old path against the defaults). Contenders run in ``--rounds`` alternating rounds
(default 2, order reversed every other round) after a warm-up (the session's first, cold, source
read, into a Parquet lake, then a warm lake run: the rate of reading the edge with an almost free
sink).

Figures per contender: delivered changes/s (rows the job wrote / the job's own wall time, best
and median of the rounds), ratio against the first contender in the same command, the catch-up
multiple (changes/s / ``--rate``, default 500 writes/s), how long a hub back from a 10-minute
outage takes to catch up while writes go on at that rate (600 s x rate / (changes/s - rate)),
and CPU per change of the hub node, of the 3 edge nodes and of this process with its Spark JVM
and Python workers. Each run must deliver every change of the log (else the bench fails), and
the hub tables of the first round must hold the same rows.

No figure is asserted: this is a measurement. Cleanup: ``ringflow cluster stop``, then SIGKILL of
any node pid left.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import io
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for ``_cluster``, ``bench_pipeline``

from _cluster import cpu_seconds, free_block, local_cluster, make_session
from bench_pipeline import CONCURRENCY, KEYSPACE, TABLE_NAME, Writer, create_schema, preload

from ringflow.pipeline import local_spark_session
from ringflow.pipeline._replicate import cdc_options, plan_replication, run_replication

HUB_DDL = "CREATE TABLE {name} (pk int, ck int, v text, n bigint, PRIMARY KEY (pk, ck))"
CONFIDENCE_MS = 2_000
WINDOW_MS = 30_000  # the source's default query window
OUTAGE_S = 600
TIMEOUT_S = 1_800


@dataclass(slots=True)
class Run:
    contender: str
    changes: int
    wall_s: float
    hub_cpu_s: float
    edge_cpu_s: float
    spark_cpu_s: float

    @property
    def rate(self) -> float:
        return self.changes / self.wall_s

    def per_change_us(self, cpu_s: float) -> float:
        return cpu_s / self.changes * 1e6


def tree_cpu_seconds() -> float:
    """CPU of this process and its descendants (the Spark JVM and its Python workers)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        tree.update(children)
        frontier.extend(children)
    total = 0.0
    for pid in tree:
        try:
            total += cpu_seconds([pid])
        except (OSError, IndexError):
            continue  # a worker that ended meanwhile
    return total


def sink_options(contender: str) -> dict[str, str]:
    """The sink options of ``grouping[:option=value...]``."""
    grouping, *pairs = contender.split(":")
    options = {"grouping": grouping}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"contender {contender!r}: {pair!r} is not option=value")
        options[name] = value
    return options


class Bench:
    def __init__(
        self, spark: Any, args: argparse.Namespace, edge: str, hub: str, pids: dict[str, list[int]]
    ) -> None:
        self.spark, self.args, self.edge, self.hub, self.pids = spark, args, edge, hub, pids
        self.scratch = Path(args.scratch)
        self.runs_made = 0

    def replicate(self, url: str, sink_options: dict[str, str]) -> tuple[int, float]:
        """``replicate --once`` of the whole log to ``url`` (sink options overridden);
        (changes written, the job's wall time)."""
        self.runs_made += 1
        options = cdc_options(
            self.edge,
            f"{KEYSPACE}.{TABLE_NAME}",
            consistency="ONE",
            confidence_window_ms=CONFIDENCE_MS,
            query_window_ms=WINDOW_MS,
        )
        plan = plan_replication(options, [url], self.scratch / f"checkpoint-{self.runs_made}")
        sink = plan.destinations[0]
        plan = dataclasses.replace(
            plan,
            destinations=(dataclasses.replace(sink, options={**sink.options, **sink_options}),),
        )
        quiet = Console(file=io.StringIO())
        summary = run_replication(self.spark, plan, once=True, console=quiet, timeout_s=TIMEOUT_S)
        stats = summary.channels[0]
        if stats.status != "done" or stats.rows != self.args.changes:
            raise RuntimeError(
                f"{url}: status {stats.status}, {stats.rows:,} of {self.args.changes:,} "
                f"changes, errors {stats.errors}"
            )
        return stats.rows, stats.seconds

    def lake(self, name: str) -> float:
        rows, seconds = self.replicate(f"parquet:{self.scratch / name}", {})
        return rows / seconds

    def hub_run(self, contender: str, target: str) -> Run:
        cluster, session = make_session(self.hub)
        try:
            session.execute(HUB_DDL.format(name=f"{KEYSPACE}.{target}"))
        finally:
            cluster.shutdown()
        url = f"ringflow://{self.hub}/{KEYSPACE}.{target}?consistency=ONE"
        hub_before = cpu_seconds(self.pids["hub"])
        edge_before = cpu_seconds(self.pids["edge"])
        spark_before = tree_cpu_seconds()
        rows, seconds = self.replicate(url, sink_options(contender))
        return Run(
            contender,
            rows,
            seconds,
            cpu_seconds(self.pids["hub"]) - hub_before,
            cpu_seconds(self.pids["edge"]) - edge_before,
            tree_cpu_seconds() - spark_before,
        )

    def hub_rows(self, target: str) -> list[tuple[object, ...]]:
        cluster, session = make_session(self.hub)
        try:
            rows = session.execute(f"SELECT pk, ck, v, n FROM {KEYSPACE}.{target}")
            return sorted(tuple(row) for row in rows)
        finally:
            cluster.shutdown()


def report(args: argparse.Namespace, runs: dict[str, list[Run]], lake_rate: float) -> None:
    base = next(iter(runs.values()))
    base_best = max(r.rate for r in base)
    base_median = statistics.median(r.rate for r in base)
    rate = args.rate
    print(
        f"\nedge -> hub, {args.changes:,} changes of the edge's CDC log, `replicate --once`, "
        f"{args.rounds} alternating round(s); catch-up multiple = changes/s / {rate:,} writes/s"
    )
    print(
        f"| contender | changes/s best (median) | vs {next(iter(runs))} best (median) "
        f"| catch-up multiple best (median) | catch-up after a {OUTAGE_S // 60}-min outage "
        "| hub node CPU µs/change | edge CPU µs/change | Spark CPU µs/change |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for contender, samples in runs.items():
        best = max(r.rate for r in samples)
        median = statistics.median(r.rate for r in samples)
        backlog = OUTAGE_S * rate
        drain = f"{backlog / (best - rate):,.0f} s" if best > rate else "never"
        print(
            f"| {contender} | {best:,.0f} ({median:,.0f}) | {best / base_best:.2f}x "
            f"({median / base_median:.2f}x) | {best / rate:.1f}x ({median / rate:.1f}x) | "
            f"{drain} | "
            + " | ".join(
                f"{statistics.median(r.per_change_us(cpu(r)) for r in samples):,.0f}"
                for cpu in (
                    lambda r: r.hub_cpu_s,
                    lambda r: r.edge_cpu_s,
                    lambda r: r.spark_cpu_s,
                )
            )
            + " |"
        )
    print(
        f"reference: edge -> Parquet lake (warm) {lake_rate:,.0f} changes/s = "
        f"{lake_rate / rate:.1f}x (reading the edge with an almost free sink)",
        flush=True,
    )


def bench(spark: Any, args: argparse.Namespace, edge: str, hub: str, pids: dict[str, Any]) -> None:
    cluster, session = make_session(edge)
    try:
        seconds = preload(Writer(session), 0, args.changes)
    finally:
        cluster.shutdown()
    print(
        f"backlog: {args.changes:,} changes written to the edge in {seconds:.1f} s "
        f"({args.changes / seconds:,.0f} writes/s at {CONCURRENCY} in flight)",
        flush=True,
    )
    time.sleep(CONFIDENCE_MS / 1000 + 0.5)
    runner = Bench(spark, args, edge, hub, pids)
    cold = runner.lake("lake-cold")
    lake_rate = runner.lake("lake-warm")
    print(f"warm-up: edge -> lake cold {cold:,.0f} changes/s, warm {lake_rate:,.0f} changes/s")
    contenders = list(dict.fromkeys(args.contenders))
    runs: dict[str, list[Run]] = {c: [] for c in contenders}
    for round_number in range(args.rounds):
        order = contenders if round_number % 2 == 0 else contenders[::-1]
        for contender in order:
            index = contenders.index(contender)
            run = runner.hub_run(contender, f"t_{index}_{round_number}")
            runs[contender].append(run)
            print(
                f"  round {round_number + 1}: {contender:<9} {run.changes:,} changes in "
                f"{run.wall_s:.2f} s = {run.rate:,.0f} changes/s ({run.rate / args.rate:.1f}x "
                f"{args.rate}/s); CPU µs/change hub {run.per_change_us(run.hub_cpu_s):,.0f}, "
                f"edge {run.per_change_us(run.edge_cpu_s):,.0f}, Spark "
                f"{run.per_change_us(run.spark_cpu_s):,.0f}; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    first = [runner.hub_rows(f"t_{index}_0") for index in range(len(contenders))]
    if any(rows != first[0] for rows in first[1:]):
        raise RuntimeError(f"the hub tables of round 1 differ ({[len(r) for r in first]} rows)")
    print(f"hub tables of round 1: {len(first[0]):,} rows each, the same for {contenders}")
    report(args, runs, lake_rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=int, default=500, help="the edge's write rate (/s)")
    parser.add_argument(
        "--contenders",
        nargs="+",
        default=["none", "replica"],
        help="grouping[:option=value...] each (hub sink options); the first is the baseline",
    )
    parser.add_argument("--edge-address", help="first edge node address (default: a free block)")
    parser.add_argument("--hub-address", help="hub node address (default: a free block)")
    args = parser.parse_args()
    print(
        f"bench_hub: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    edge_first = args.edge_address or free_block(3)
    hub_first = args.hub_address or free_block(1, avoid=edge_first)
    scratch = Path(tempfile.mkdtemp(prefix="ringflow-bench-hub-"))
    args.scratch = str(scratch)
    try:
        with (
            local_cluster(scratch / "edge", 3, edge_first) as edge_pids,
            local_cluster(scratch / "hub", 1, hub_first) as hub_pids,
        ):
            cluster, session = make_session(edge_first)
            try:
                create_schema(session, 3, True)
            finally:
                cluster.shutdown()
            cluster, session = make_session(hub_first)
            try:
                session.execute(
                    f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}"
                )
            finally:
                cluster.shutdown()
            spark = local_spark_session("ringflow-bench-hub")
            try:
                bench(spark, args, edge_first, hub_first, {"edge": edge_pids, "hub": hub_pids})
            finally:
                spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
