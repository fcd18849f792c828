"""Per-query latency of ``ringflow-cdc``'s CDC log window reads on a 3-node RF 3 cluster.

Run with the project venv: ``.venv/bin/python bench/bench_cdc_log_reads.py [--rows N]
[--queries Q] [--first-address A]``. To compare with an older commit, run the same script with
``PYTHONPATH=<worktree>/src`` (the node processes inherit it).

Set-up: ``ringflow cluster start --nodes 3`` (real node processes, gossip 200 ms) on a free
loopback block, keyspace ``SimpleStrategy`` RF 3, ``bench.events (pk int, ck int, v text, n bigint,
PRIMARY KEY (pk, ck)) WITH cdc = {'enabled': true}``, N rows inserted at QUORUM (64 in flight).
Then Q single queries, one at a time, of the statement the source prepares (``SELECT * ... WHERE
"cdc$stream_id" = ? AND "cdc$time" > maxTimeuuid(?) AND "cdc$time" <= maxTimeuuid(?)``) for a
random stream of the generation, token-aware, in four cases: a 2 s window ending now (few or no
rows) at ONE, a 30 s window at QUORUM, the whole hour (every row of the stream) at ONE, and the 2 s
window at ONE while a writer inserts at 64 in flight. Prints p50/p90/max latency and the median
rows per query. No figure is asserted: this is a measurement.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from cassandra import ConsistencyLevel
from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent_with_args

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cluster import free_block, local_cluster, make_session

QUERY = (
    'SELECT * FROM bench."events_scylla_cdc_log" WHERE "cdc$stream_id" = ? '
    'AND "cdc$time" > maxTimeuuid(?) AND "cdc$time" <= maxTimeuuid(?)'
)
INSERT = "INSERT INTO bench.events (pk, ck, v, n) VALUES (?, ?, ?, ?)"
UTC = datetime.UTC


def _load(session: Session, rows: int, first_ck: int) -> None:
    insert = session.prepare(INSERT)
    args = [(i % 5_000, first_ck + i, "v" * 20, i) for i in range(rows)]
    for start in range(0, rows, 5_000):
        execute_concurrent_with_args(session, insert, args[start : start + 5_000], concurrency=64)


def _time_queries(
    session: Session, streams: list[bytes], queries: int, window_s: float | None, level: int
) -> tuple[list[float], list[int]]:
    statement = session.prepare(QUERY)
    statement.consistency_level = level
    rng = random.Random(7)
    latencies, counts = [], []
    for _ in range(queries):
        high = datetime.datetime.now(UTC)
        low = high - datetime.timedelta(hours=1 if window_s is None else 0, seconds=window_s or 0)
        started = time.perf_counter()
        found = list(session.execute(statement, (rng.choice(streams), low, high)))
        latencies.append(time.perf_counter() - started)
        counts.append(len(found))
    return latencies, counts


def _report(name: str, latencies: list[float], counts: list[int], extra: str = "") -> None:
    ordered = sorted(latencies)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    print(
        f"{name:<34} p50 {statistics.median(ordered) * 1000:7.1f} ms  p90 {p90 * 1000:7.1f} ms  "
        f"max {ordered[-1] * 1000:7.1f} ms  rows/query median {statistics.median(counts):.0f} "
        f"max {max(counts)}{extra}",
        flush=True,
    )


def _under_load(session: Session, streams: list[bytes], queries: int) -> None:
    stop = threading.Event()
    written = [0]

    def writer() -> None:
        ck = 10**8
        while not stop.is_set():
            _load(session, 256, ck)
            ck += 256
            written[0] += 256

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    time.sleep(3.0)
    started, before = time.perf_counter(), written[0]
    latencies, counts = _time_queries(session, streams, queries, 2.0, ConsistencyLevel.ONE)
    rate = (written[0] - before) / (time.perf_counter() - started)
    stop.set()
    thread.join()
    _report("2 s window, ONE, under writes", latencies, counts, f"  ({rate:.0f} writes/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--first-address", default=None)
    args = parser.parse_args()
    first = args.first_address or free_block(3)
    print(
        f"bench_cdc_log_reads: {datetime.datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"load {os.getloadavg()[0]:.1f}, PYTHONPATH={os.environ.get('PYTHONPATH', '')!r}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as data, local_cluster(Path(data), 3, first):
        driver, session = make_session(first)
        try:
            session.execute(
                "CREATE KEYSPACE bench WITH replication = "
                "{'class': 'SimpleStrategy', 'replication_factor': 3}"
            )
            session.execute(
                "CREATE TABLE bench.events (pk int, ck int, v text, n bigint, "
                "PRIMARY KEY (pk, ck)) WITH cdc = {'enabled': true}"
            )
            started = time.perf_counter()
            _load(session, args.rows, 0)
            print(f"{args.rows} rows in {time.perf_counter() - started:.1f} s", flush=True)
            described = session.execute(
                "SELECT streams FROM system_distributed.cdc_streams_descriptions_v2"
            )
            streams = [stream for row in described for stream in row.streams]
            for name, window_s, level in (
                ("2 s window, ONE, idle", 2.0, ConsistencyLevel.ONE),
                ("30 s window, QUORUM, idle", 30.0, ConsistencyLevel.QUORUM),
                ("whole hour (all rows), ONE, idle", None, ConsistencyLevel.ONE),
            ):
                latencies, counts = _time_queries(session, streams, args.queries, window_s, level)
                _report(name, latencies, counts)
            _under_load(session, streams, args.queries)
        finally:
            driver.shutdown()


if __name__ == "__main__":
    main()
