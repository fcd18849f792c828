"""Replica-side capture on the write path: CDC writes with capture vs without (issue 14 §5,
seed 002; target: capture at most 1.15x).

Run with the project venv: ``.venv/bin/python bench/bench_capture.py [--quick]``.

Two 3-node clusters of the same shape run side by side (``ringflow cluster start --nodes 3`` on
two free loopback blocks, gossip every 200 ms, 8 vnodes per node, keyspace ``SimpleStrategy``
RF 3, table ``(k int PRIMARY KEY, v text, n bigint) WITH cdc = {'enabled': true}``): one with
``--replica-capture off``, one capturing with test-size slices (``--slice-width-s 2
--slice-count 2``, so slices seal every second during the measurement and the sealing is in the
figures). The client is the real ``cassandra`` driver, token-aware, prepared INSERTs at QUORUM,
a new partition per row. Per round, each cluster in turn (order reversed every other round):

- throughput at 32 in flight (``execute_concurrent_with_args``): rows/s and the CPU the three
  node processes used (``/proc/<pid>/stat``) per row;
- latency at 1 in flight (p50/p99).

Each figure is the best round; the ratios are with / without capture (node CPU per row, wall
time per row), best/best and per round. At the end the capturing cluster's ``status.json``
says how many rows each node captured and sealed (every written row, on every node: RF 3).

Defaults: 3,000 rows per configuration at 32 in flight, 500 at 1 in flight, 3 rounds;
``--quick`` is 600 / 100 rows, 1 round. No figure is asserted: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from cassandra.cluster import Session

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for ``_cluster``, ``_runs``

from _cluster import cpu_seconds, free_block, local_cluster, make_session
from _runs import Run, best, fmt_ms, measure

NODES = 3
KEYSPACE = "bench"
CONCURRENCY = 32
CAPTURE_OPTIONS = ("--slice-width-s", "2", "--slice-count", "2", "--drop-sent-slices", "off")
"""Slices sealing (and published) during the run; kept (no channels would drop them all)."""
CLUSTERS = {"without capture": ("--replica-capture", "off"), "with capture": CAPTURE_OPTIONS}


def create_schema(session: Session) -> None:
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.execute(
        f"CREATE TABLE {KEYSPACE}.events (k int PRIMARY KEY, v text, n bigint) "
        "WITH cdc = {'enabled': true}"
    )
    if not session.wait_for_schema_agreement(wait_time=30):
        raise RuntimeError("no schema agreement after 30 s")


def params(first: int, rows: int) -> list[tuple[int, str, int]]:
    return [(k, f"value number {k}", k * 7) for k in range(first, first + rows)]


def run_rounds(
    targets: dict[str, tuple[Sequence[int], Session]], rows: int, latency_rows: int, rounds: int
) -> dict[tuple[str, int], list[Run]]:
    """Every round: each cluster at 32 in flight, then at 1 in flight (order reversed every
    other round); the runs by (cluster, concurrency)."""
    statements = {}
    for name, (pids, session) in targets.items():
        create_schema(session)
        statement = session.prepare(f"INSERT INTO {KEYSPACE}.events (k, v, n) VALUES (?, ?, ?)")
        statements[name] = statement
        cpu = functools.partial(cpu_seconds, pids)
        measure(cpu, session, statement, params(-1_000_000, 500), CONCURRENCY)  # warm-up
        measure(cpu, session, statement, params(-2_000_000, 50), 1)
    runs: dict[tuple[str, int], list[Run]] = {}
    next_key = 0
    for round_index in range(rounds):
        names = list(targets) if round_index % 2 == 0 else list(targets)[::-1]
        for concurrency in (CONCURRENCY, 1):
            count = rows if concurrency > 1 else latency_rows
            for name in names:
                pids, session = targets[name]
                cpu = functools.partial(cpu_seconds, pids)
                run = measure(cpu, session, statements[name], params(next_key, count), concurrency)
                next_key += count
                runs.setdefault((name, concurrency), []).append(run)
                print(
                    f"  round {round_index + 1}: {name}, {concurrency} in flight: "
                    f"{run.rows_per_s:,.0f} rows/s, node CPU "
                    f"{run.server_cpu_s / run.rows * 1e6:,.0f} µs/row",
                    flush=True,
                )
    return runs


def _cpu_per_row(run: Run) -> float:
    return run.server_cpu_s / run.rows * 1e6


def print_table(runs: dict[tuple[str, int], list[Run]]) -> None:
    print(
        "\n| workload | rows/s | µs/row (wall) | p50 ms | p99 ms | 3 nodes' CPU µs/row "
        "| with / without: CPU per row | with / without: time per row |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (name, concurrency), samples in runs.items():
        run = best(samples)
        cpu_ratio = time_ratio = "1.00x"
        if name == "with capture":
            base = runs[("without capture", concurrency)]
            cheapest = min(samples, key=_cpu_per_row)
            cpu = _cpu_per_row(cheapest) / min(_cpu_per_row(r) for r in base)
            wall = run.us_per_row / best(base).us_per_row
            per_round_cpu = ", ".join(
                f"{_cpu_per_row(a) / _cpu_per_row(b):.2f}x"
                for a, b in zip(samples, base, strict=True)
            )
            per_round_wall = ", ".join(
                f"{a.us_per_row / b.us_per_row:.2f}x" for a, b in zip(samples, base, strict=True)
            )
            cpu_ratio = f"**{cpu:.2f}x** (rounds: {per_round_cpu})"
            time_ratio = f"**{wall:.2f}x** (rounds: {per_round_wall})"
        print(
            f"| QUORUM CDC INSERT, {name}, {concurrency} in flight | {run.rows_per_s:,.0f} | "
            f"{run.us_per_row:,.0f} | {fmt_ms(run.percentile_ms(0.50))} | "
            f"{fmt_ms(run.percentile_ms(0.99))} | {_cpu_per_row(run):,.0f} | {cpu_ratio} "
            f"| {time_ratio} |"
        )


def print_captured(data: Path) -> None:
    """What each node of the capturing cluster captured and sealed (``status.json``)."""
    for status_file in sorted(data.glob("node*/status.json")):
        capture = json.loads(status_file.read_text()).get("capture", {})
        print(
            f"{status_file.parent.name}: {capture.get('rows')} rows captured, "
            f"{capture.get('slices_sealed')} slices sealed, {capture.get('slices_open')} open, "
            f"{capture.get('size_bytes')} bytes, unresolved {capture.get('unresolved_rows')}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few rows, 1 round")
    parser.add_argument("--rows", type=int, help="rows per configuration at 32 in flight (3000)")
    parser.add_argument("--latency-rows", type=int, help="rows per configuration at 1 (500)")
    parser.add_argument("--rounds", type=int, help="alternating rounds, best taken (3)")
    arguments = parser.parse_args(argv)
    rows = arguments.rows or (600 if arguments.quick else 3000)
    latency_rows = arguments.latency_rows or (100 if arguments.quick else 500)
    rounds = arguments.rounds or (1 if arguments.quick else 3)
    print(
        f"bench_capture: {rows:,} rows per configuration at {CONCURRENCY} in flight, "
        f"{latency_rows:,} at 1 in flight, {rounds} alternating round(s), best of; "
        f"{platform.machine()}, {os.cpu_count()} cores (shared), Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    with (
        tempfile.TemporaryDirectory(prefix="ringflow-bench-capture-") as directory,
        ExitStack() as stack,
    ):
        targets: dict[str, tuple[Sequence[int], Session]] = {}
        avoid = ""
        for name, options in CLUSTERS.items():
            data = Path(directory) / name.replace(" ", "-")
            first = free_block(NODES, avoid=avoid)
            avoid = first
            pids = stack.enter_context(local_cluster(data, NODES, first, options))
            driver, session = make_session(first)
            stack.callback(driver.shutdown)
            targets[name] = (pids, session)
        started = time.perf_counter()
        runs = run_rounds(targets, rows, latency_rows, rounds)
        elapsed = time.perf_counter() - started
        print_table(runs)
        print(f"\nmeasured in {elapsed:.0f} s; load average now {os.getloadavg()[0]:.1f}")
        time.sleep(5)  # the last slices seal (2 s x 2 + the 1 s timer) and status.json follows
        print_captured(Path(directory) / "with-capture")
    return 0


if __name__ == "__main__":
    sys.exit(main())
