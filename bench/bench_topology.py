"""Bootstrap of a 4th node into a 3-node RF 3 cluster holding N rows (issue 7 §5).

Run with the project venv: ``.venv/bin/python bench/bench_topology.py [--rows N] [--quick]``.

1. ``ringflow cluster start --nodes 3`` (gossip every 200 ms) on a free loopback block, keyspace
   ``bench`` (SimpleStrategy RF 3), tables ``bench.t (k bigint PRIMARY KEY, v text)`` (the data
   to stream) and ``bench.w (k int PRIMARY KEY, v text) WITH cdc`` (the client workload), then
   ``cluster stop``.
2. Bulk load: N rows into ``bench.t`` of node 1's store directly (``Store.apply`` in batches,
   the cluster stopped), then its stored atoms copied into nodes 2 and 3 (RF 3 on 3 nodes: every
   node holds every row), as ``bench_storage.py`` loads for scans, to keep the load fast.
3. ``cluster start`` again; steady state: QUORUM INSERTs into ``bench.w`` through the driver
   (token aware, 16 in flight) for ``--steady-s`` seconds -> rows/s.
4. The same workload runs in a thread while ``ringflow cluster add`` bootstraps the 4th node:
   bootstrap wall time (the command: discovery, BOOT, ring delay, generation, streaming, wait for
   the generation + leeway, NORMAL), the node's own streaming time and partitions (its
   ``status.json``) -> streamed rows/s, and the QUORUM write throughput during the bootstrap
   over the steady state (ratio, same process, same workload).

Nothing is asserted: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.policies import RoundRobinPolicy, TokenAwarePolicy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cluster import free_block, ringflow
from ringflow.schema import BIGINT, TEXT, Cell, LivenessInfo, Mutation, Row
from ringflow.schema._codec import serialize
from ringflow.storage import Store

BATCH = 5_000


def bulk_load(store_path: Path, rows: int) -> None:
    """``rows`` one-row partitions of ``bench.t`` straight into a stopped node's store."""
    store = Store(store_path, synchronous="NORMAL")
    try:
        timestamp_us = time.time_ns() // 1000
        now_s = timestamp_us // 1_000_000
        for start in range(0, rows, BATCH):
            batch = []
            for key in range(start, min(rows, start + BATCH)):
                cells = {"v": Cell.live(timestamp_us, serialize(TEXT, f"value {key}"))}
                row = Row((), LivenessInfo(timestamp_us), None, cells)
                batch.append(Mutation("bench", "t", (serialize(BIGINT, key),), rows=(row,)))
            store.apply(batch, now_s=now_s)
    finally:
        store.close()


def copy_table(source: Path, target: Path) -> None:
    """``bench.t``'s stored atoms from ``source`` into ``target`` (same rows on every replica;
    each store numbers its tables itself, so the table id is mapped)."""
    connection = sqlite3.connect(target, isolation_level=None)
    try:
        connection.execute("ATTACH DATABASE ? AS source", (str(source),))
        query = "SELECT tid FROM {}._tables WHERE keyspace = 'bench' AND name = 't'"
        (source_tid,) = connection.execute(query.format("source")).fetchone()
        (target_tid,) = connection.execute(query.format("main")).fetchone()
        columns = [row[1] for row in connection.execute("PRAGMA table_info(atoms)")]
        rest = ", ".join(columns[1:])
        assert columns[0] == "tid", columns
        connection.execute("BEGIN")
        connection.execute(
            f"INSERT INTO main.atoms (tid, {rest}) SELECT ?, {rest} FROM source.atoms "
            "WHERE tid = ?",
            (target_tid, source_tid),
        )
        connection.execute("COMMIT")
    finally:
        connection.close()


class Workload:
    """QUORUM INSERTs into ``bench.w``, 16 in flight, in chunks; counts acknowledged rows."""

    def __init__(self, address: str) -> None:
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(RoundRobinPolicy()),
            consistency_level=ConsistencyLevel.QUORUM,
            request_timeout=20,
        )
        self.cluster = Cluster(
            [address], protocol_version=4, execution_profiles={EXEC_PROFILE_DEFAULT: profile}
        )
        self.session = self.cluster.connect()
        self.insert = self.session.prepare("INSERT INTO bench.w (k, v) VALUES (?, ?)")
        self.next_key = 0
        self.acked = 0
        self.failed = 0
        self.stop = threading.Event()

    def chunk(self, size: int = 400) -> None:
        keys = range(self.next_key, self.next_key + size)
        self.next_key += size
        results = execute_concurrent_with_args(
            self.session,
            self.insert,
            [(k, f"w{k}") for k in keys],
            concurrency=16,
            raise_on_first_error=False,
        )
        for ok, _ in results:
            if ok:
                self.acked += 1
            else:
                self.failed += 1

    def run_for(self, seconds: float) -> float:
        """Rows/s over ``seconds``."""
        start, acked = time.perf_counter(), self.acked
        while time.perf_counter() - start < seconds:
            self.chunk()
        return (self.acked - acked) / (time.perf_counter() - start)

    def run_until_stopped(self) -> None:
        while not self.stop.is_set():
            self.chunk()


def setup(data: Path, first: str, rows: int) -> None:
    ringflow(
        "cluster", "start", "--data", str(data), "--nodes", "3", "--first-address", first,
        "--gossip-interval-ms", "200", "--timeout", "120",
    )  # fmt: skip
    cluster = Cluster([first], protocol_version=4)
    session = cluster.connect()
    session.execute(
        "CREATE KEYSPACE bench WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.execute("CREATE TABLE bench.t (k bigint PRIMARY KEY, v text)")
    session.execute("CREATE TABLE bench.w (k int PRIMARY KEY, v text) WITH cdc = {'enabled': true}")
    cluster.shutdown()
    ringflow("cluster", "stop", "--data", str(data))
    start = time.perf_counter()
    bulk_load(data / "node1" / "store.sqlite", rows)
    for node in ("node2", "node3"):
        copy_table(data / "node1" / "store.sqlite", data / node / "store.sqlite")
    print(f"  bulk load: {rows:,} rows x 3 stores in {time.perf_counter() - start:.1f} s")
    ringflow("cluster", "start", "--data", str(data), "--timeout", "180", timeout_s=240)


def bench(rows: int, steady_s: float) -> None:
    print(f"\n## Bootstrap of a 4th node into 3 nodes RF 3 holding {rows:,} rows")
    with tempfile.TemporaryDirectory(prefix="ringflow-bench-topology-") as directory:
        data = Path(directory) / "cluster"
        first = free_block(4)
        try:
            setup(data, first, rows)
            workload = Workload(first)
            steady = workload.run_for(steady_s)
            print(f"  steady state: {steady:,.0f} QUORUM writes/s (16 in flight)")
            writer = threading.Thread(target=workload.run_until_stopped)
            acked_before = workload.acked
            start = time.perf_counter()
            writer.start()
            try:
                ringflow("cluster", "add", "--data", str(data), "--timeout", "1200", timeout_s=1300)
            finally:
                elapsed = time.perf_counter() - start
                workload.stop.set()
                writer.join()
            during = (workload.acked - acked_before) / (time.perf_counter() - start)
            status = json.loads((data / "node4" / "status.json").read_text())["topology"]
            streamed, stream_ms = status["streamed_partitions"], status["stream_ms"]
            print(f"  bootstrap (ringflow cluster add, wall): {elapsed:.1f} s")
            print(
                f"  streaming: {streamed:,} partitions ({status['streamed_bytes'] / 1e6:.0f} MB "
                f"on the wire) in {stream_ms / 1000:.1f} s = "
                f"{streamed / max(stream_ms / 1000, 1e-9):,.0f} rows/s"
            )
            print(
                f"  QUORUM writes during bootstrap: {during:,.0f}/s, ratio to steady state "
                f"{during / steady:.2f} (failed writes: {workload.failed})"
            )
            workload.cluster.shutdown()
        finally:
            subprocess.run(
                [str(Path(sys.executable).parent / "ringflow"), "cluster", "stop", "--data",
                 str(data)],
                capture_output=True,
                timeout=120,
            )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--steady-s", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true", help="50,000 rows, 5 s steady state")
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.rows, arguments.steady_s = 50_000, 5.0
    bench(arguments.rows, arguments.steady_s)


if __name__ == "__main__":
    main()
