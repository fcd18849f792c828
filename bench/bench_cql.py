"""Single-node CQL benchmark through the Scylla Python driver (issue 5 §5): a script.

Run with the project venv: ``.venv/bin/python bench/bench_cql.py [--quick] [--profile]``.

A real ``ringflow node start`` subprocess serves CQL (native protocol v4) on a loopback address
127.0.0.2x and a free port, with a temporary data directory; it is always killed at the end.
The client is the real ``cassandra`` driver (token-aware round-robin, prepared statements):

- single-row INSERTs (``k int PRIMARY KEY, v text, n bigint``; a new partition each) into a
  table with CDC off and one with ``cdc = {'enabled': true}`` (delta), each with 1 request in
  flight (a loop of ``session.execute``, each one timed: p50/p99) and with 8 in flight
  (``execute_concurrent_with_args(..., concurrency=8)``); the CDC cost ratio is time per row
  with CDC on over time per row with CDC off, at the same concurrency, in the same round;
- SELECT of one row by partition key (prepared), 1 and 8 in flight.

Defaults: 3,000 rows per configuration, 4 alternating rounds (about 1-1.5 min); ``--quick``
is 500 rows, 1 round. The machine has 2 cores shared with other work, so the configurations run
in alternating rounds (the order reversed every other round) and each figure is the best round;
the CDC ratio is printed both best/best and as the median of the per-round ratios. Besides wall
time, each configuration records the CPU the node process used (``/proc/<pid>/stat``) and the
CPU this client process used, per row: on a loopback benchmark with 2 cores the Python driver
is a large share of the cost, and the node's CPU per row is the server's own cost.

The node is started as ``python -c <bootstrap> node start ...``: the bootstrap runs the same
``ringflow.cli.main`` as the ``ringflow`` script, and only adds a line with the server's
counters (``CqlServer.stats``) to stderr on clean shutdown (SIGTERM), which the bench prints;
with ``--profile`` a second node, afterwards, runs under ``cProfile`` (its event-loop thread and
its storage thread, each timed by its own CPU clock: a wait costs nothing, be it the loop in
epoll, the storage thread on its queue or a COMMIT on its fsync) for one CDC-on insert run at 8
in flight, and the bench prints where that node's CPU went (deterministic profiling inflates
small calls; read it as proportions).
No figure here is asserted: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pstats
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cassandra.cluster import Session

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for ``_cluster``, ``_runs``
from _cluster import make_session
from _runs import Run, best, fmt_ms, measure

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
REQUEST_TIMEOUT_S = 30.0
KEYSPACE = "bench"
STATS_PREFIX = "RINGFLOW-BENCH-STATS "

BOOTSTRAP = r"""
import json, os, sys, threading, time, traceback
from ringflow.cli import main
from ringflow.cql import _server

_close = _server.CqlServer.close

async def _close_and_report(self):
    try:
        stats = {name: getattr(self.stats, name) for name in self.stats.__slots__}
        print("RINGFLOW-BENCH-STATS " + json.dumps(stats), file=sys.stderr, flush=True)
    except Exception:
        traceback.print_exc()
    await _close(self)

_server.CqlServer.close = _close_and_report

_profile_dir = os.environ.get("RINGFLOW_BENCH_CPROFILE")
if _profile_dir:
    import cProfile
    from concurrent.futures import thread as _thread

    # Each thread's own CPU time, not the wall clock: a thread waiting (the event loop in
    # epoll, the storage thread on its queue, a COMMIT on its fsync) costs no CPU.
    _profiles = {"MainThread": cProfile.Profile(time.thread_time)}
    _plain_worker = _thread._worker

    def _profiled_worker(*args):
        profile = _profiles[threading.current_thread().name] = cProfile.Profile(time.thread_time)
        profile.enable()
        _plain_worker(*args)

    _thread._worker = _profiled_worker
    _close_plain = _server.CqlServer.close

    async def _close_and_dump(self):
        for name, profile in _profiles.items():
            profile.dump_stats(os.path.join(_profile_dir, name + ".pstats"))
        await _close_plain(self)

    _server.CqlServer.close = _close_and_dump
    _profiles["MainThread"].enable()

sys.exit(main(sys.argv[1:]))
"""


# --- the node process ---------------------------------------------------------------------------


def free_address_and_port() -> tuple[str, int]:
    """127.0.0.2x (x random) and a port the kernel says is free on it."""
    for x in random.sample(range(10), 10):
        address = f"127.0.0.2{x}"
        with socket.socket() as probe:
            try:
                probe.bind((address, 0))
            except OSError:
                continue
            return address, probe.getsockname()[1]
    raise RuntimeError("no free loopback address 127.0.0.2x")


class Node:
    """``ringflow node start`` in a subprocess; ``stop`` is SIGTERM then SIGKILL, bounded."""

    def __init__(
        self, data_dir: Path, address: str, port: int, profile_dir: Path | None = None
    ) -> None:
        self.address = address
        self.port = port
        self.log_path = data_dir.parent / "node.log"
        command = [
            sys.executable,
            "-c",
            BOOTSTRAP,
            "node",
            "start",
            "--address",
            address,
            "--port",
            str(port),
            "--data",
            str(data_dir),
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if profile_dir is not None:
            env["RINGFLOW_BENCH_CPROFILE"] = str(profile_dir)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env
            )
        self.ready_line = self._wait_ready()

    def _wait_ready(self) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        os.set_blocking(self.process.stdout.fileno(), False)
        buffer = b""
        while b"\n" not in buffer:
            if time.monotonic() > deadline:
                raise TimeoutError(f"node did not start in {START_TIMEOUT_S}s: {self.log()}")
            if self.process.poll() is not None:
                raise RuntimeError(f"node exited with {self.process.returncode}: {self.log()}")
            chunk = self.process.stdout.read(4096)
            if chunk:
                buffer += chunk
            else:
                time.sleep(0.05)
        line = buffer.split(b"\n", 1)[0].decode()
        if "listening on" not in line:
            raise RuntimeError(f"unexpected first line {line!r}: {self.log()}")
        return line

    def cpu_seconds(self) -> float:
        """User + system CPU of the node process so far (all its threads)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return "<no log>"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)

    def report(self, prefix: str) -> dict[str, object] | None:
        """The last line of the node's log that starts with ``prefix``, decoded."""
        lines = [line for line in self.log().splitlines() if line.startswith(prefix)]
        return json.loads(lines[-1][len(prefix) :]) if lines else None


# --- measurements -------------------------------------------------------------------------------


def create_schema(session: Session) -> None:
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    session.execute(f"CREATE TABLE {KEYSPACE}.cdc_off (k int PRIMARY KEY, v text, n bigint)")
    session.execute(
        f"CREATE TABLE {KEYSPACE}.cdc_on (k int PRIMARY KEY, v text, n bigint) "
        "WITH cdc = {'enabled': true}"
    )


def insert_params(first: int, rows: int) -> list[tuple[int, str, int]]:
    return [(k, f"value number {k}", k * 7) for k in range(first, first + rows)]


INSERT_CONFIGS = [
    ("INSERT, CDC off, 1 in flight", "cdc_off", 1),
    ("INSERT, CDC delta, 1 in flight", "cdc_on", 1),
    ("INSERT, CDC off, 8 in flight", "cdc_off", 8),
    ("INSERT, CDC delta, 8 in flight", "cdc_on", 8),
]
SELECT_CONFIGS = [
    ("SELECT by partition key, 1 in flight", 1),
    ("SELECT by partition key, 8 in flight", 8),
]


def run_bench(node: Node, session: Session, rows: int, rounds: int) -> dict[str, list[Run]]:
    create_schema(session)
    inserts = {
        table: session.prepare(f"INSERT INTO {KEYSPACE}.{table} (k, v, n) VALUES (?, ?, ?)")
        for table in ("cdc_off", "cdc_on")
    }
    select = session.prepare(f"SELECT k, v, n FROM {KEYSPACE}.cdc_off WHERE k = ?")
    # Warm-up: connections, prepared-statement caches, the node's first writes to each table.
    for statement in inserts.values():
        measure(node.cpu_seconds, session, statement, insert_params(-1_000_000, 200), 8)
        measure(node.cpu_seconds, session, statement, insert_params(-2_000_000, 50), 1)
    measure(node.cpu_seconds, session, select, [(k,) for k in range(-1_000_000, -999_800)], 8)

    runs: dict[str, list[Run]] = {name: [] for name, _, _ in INSERT_CONFIGS}
    runs.update({name: [] for name, _ in SELECT_CONFIGS})
    next_key = 0
    cdc_off_keys: list[int] = []
    for round_index in range(rounds):
        order = INSERT_CONFIGS if round_index % 2 == 0 else INSERT_CONFIGS[::-1]
        for name, table, concurrency in order:
            params = insert_params(next_key, rows)
            next_key += rows
            if table == "cdc_off":
                cdc_off_keys.extend(k for k, _, _ in params)
            run = measure(node.cpu_seconds, session, inserts[table], params, concurrency)
            runs[name].append(run)
            print(f"  round {round_index + 1}: {name}: {run.rows_per_s:,.0f} rows/s", flush=True)
        select_order = SELECT_CONFIGS if round_index % 2 == 0 else SELECT_CONFIGS[::-1]
        for name, concurrency in select_order:
            params = [(k,) for k in random.sample(cdc_off_keys, rows)]  # rows that exist
            run = measure(node.cpu_seconds, session, select, params, concurrency)
            runs[name].append(run)
            print(f"  round {round_index + 1}: {name}: {run.rows_per_s:,.0f} rows/s", flush=True)
    return runs


def profile_node(directory: Path, rows: int) -> None:
    """A second node under cProfile (both its threads); CDC-on INSERTs, 8 in flight."""
    profile_dir = directory / "profile"
    profile_dir.mkdir()
    address, port = free_address_and_port()
    node = Node(directory / "profiled-data", address, port, profile_dir)
    try:
        cluster, session = make_session(node.address, node.port)
        try:
            create_schema(session)
            statement = session.prepare(f"INSERT INTO {KEYSPACE}.cdc_on (k, v, n) VALUES (?, ?, ?)")
            run = measure(node.cpu_seconds, session, statement, insert_params(0, rows), 8)
        finally:
            cluster.shutdown()
        node.stop()
    finally:
        node.kill()
    print(
        f"\nNode under cProfile (each thread's CPU time; deterministic, so inflated): {rows:,} "
        f"CDC-on INSERTs, 8 in flight, {run.rows_per_s:,.0f} rows/s; whole node lifetime, top "
        "by own time:"
    )
    for path in sorted(profile_dir.glob("*.pstats")):
        stats = pstats.Stats(str(path))
        total = stats.total_tt  # type: ignore[attr-defined]
        print(f"  thread {path.stem}: {total:.2f} s profiled")
        entries = sorted(
            stats.stats.items(),  # type: ignore[attr-defined]
            key=lambda item: item[1][2],
            reverse=True,
        )
        for (filename, line, function), (_, calls, own, cumulative, _) in entries[:15]:
            where = filename.split("/src/", 1)[-1].split("/site-packages/", 1)[-1]
            print(
                f"    own {100 * own / total:5.1f}%  cum {100 * cumulative / total:5.1f}%  "
                f"{calls:>8,} calls  {where}:{line}({function})"
            )


# --- output -------------------------------------------------------------------------------------


def print_table(runs: dict[str, list[Run]]) -> None:
    header = (
        "| workload | rows/s | µs/row (wall) | p50 ms | p99 ms | node CPU µs/row "
        "| client CPU µs/row | CDC cost (time/row vs CDC off) |"
    )
    print("\n" + header)
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, samples in runs.items():
        run = best(samples)
        ratio = "–"
        if "CDC delta" in name:
            base = name.replace("CDC delta", "CDC off")
            per_round = [
                on.us_per_row / off.us_per_row for on, off in zip(samples, runs[base], strict=True)
            ]
            ratio = (
                f"**{best(samples).us_per_row / best(runs[base]).us_per_row:.2f}x** best/best, "
                f"{statistics.median(per_round):.2f}x median of rounds "
                f"({', '.join(f'{r:.2f}x' for r in per_round)})"
            )
        elif "CDC off" in name:
            ratio = "1.00x"
        print(
            f"| {name} | {run.rows_per_s:,.0f} | {run.us_per_row:,.0f} | "
            f"{fmt_ms(run.percentile_ms(0.50))} | {fmt_ms(run.percentile_ms(0.99))} | "
            f"{run.server_cpu_s / run.rows * 1e6:,.0f} | {run.client_cpu_s / run.rows * 1e6:,.0f} "
            f"| {ratio} |"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="500 rows, 1 round (a smoke run)")
    parser.add_argument("--rows", type=int, help="rows per configuration per round (3000)")
    parser.add_argument("--rounds", type=int, help="alternating rounds, best taken (4)")
    parser.add_argument(
        "--profile", action="store_true", help="then profile a second node (cProfile)"
    )
    arguments = parser.parse_args(argv)
    rows = arguments.rows or (500 if arguments.quick else 3000)
    rounds = arguments.rounds or (1 if arguments.quick else 4)

    print(
        f"bench_cql: {rows:,} rows per configuration, {rounds} alternating round(s), best of; "
        f"{platform.machine()}, {os.cpu_count()} cores (shared), Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    cleanup: list[Callable[[], None]] = []
    with tempfile.TemporaryDirectory(prefix="ringflow-bench-cql-") as directory:
        address, port = free_address_and_port()
        node = Node(Path(directory) / "data", address, port)
        cleanup.append(node.kill)
        try:
            print(f"node: {node.ready_line}")
            cluster, session = make_session(node.address, node.port)
            cleanup.append(cluster.shutdown)
            started = time.perf_counter()
            runs = run_bench(node, session, rows, rounds)
            elapsed = time.perf_counter() - started
            print_table(runs)
            print(f"\nmeasured in {elapsed:.0f} s; load average now {os.getloadavg()[0]:.1f}")
            p50s = [
                f"{name}: {statistics.median(r.latencies_s) * 1e3:.2f} ms"
                for name, samples in runs.items()
                for r in samples[:1]
                if r.latencies_s
            ]
            print("first-round p50s:", "; ".join(p50s))
            cluster.shutdown()
            cleanup.remove(cluster.shutdown)
            node.stop()
            stats = node.report(STATS_PREFIX)
            print("\nnode server counters (CqlServer.stats, at shutdown):", stats or "unavailable")
            if arguments.profile:
                profile_node(Path(directory), rows)
        finally:
            for step in reversed(cleanup):
                try:
                    step()
                except Exception as error:  # cleanup must go on: the node must die
                    print(f"cleanup step failed: {error!r}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
