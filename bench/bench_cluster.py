"""A 3-node RF=3 cluster through the Scylla Python driver, and simulation speed (issue 6 §6).

Run with the project venv: ``.venv/bin/python bench/bench_cluster.py [--quick]``.

Cluster part: ``ringflow cluster start --nodes 3`` on a free loopback block 127.a.b.(c..c+2)
(gossip every 200 ms), a temporary data directory, and ``ringflow cluster stop`` in a
``finally`` (any node pid still alive afterwards is SIGKILLed). The client is the real
``cassandra`` driver: token-aware round-robin, prepared statements, QUORUM for everything,
keyspace ``SimpleStrategy`` RF 3, tables ``(k int PRIMARY KEY, v text, n bigint)`` with CDC off
and with ``cdc = {'enabled': true}``. Per round:

- throughput at 32 in flight (``execute_concurrent_with_args(..., concurrency=32)``): INSERTs
  into the CDC-off table, INSERTs into the CDC-on table (a new partition each), SELECTs of one
  existing row by partition key; the CDC INSERTs and the SELECTs also at 128 in flight;
- latency at 1 in flight (a loop of single ``session.execute`` calls, each timed: p50/p99), for
  the same three statements.

The configurations alternate (order reversed every other round) and each figure is the best
round; the CDC cost is time per row with CDC on over time per row with CDC off at the same
concurrency, printed best/best and per round. Besides wall time, each run records the CPU the
three node processes used (``/proc/<pid>/stat``) and the CPU of this client process, per row.

Simulation part: ``boot`` from ``tests/sim/test_cluster_sim.py`` (three real ``ClusterNode``
in ``ringflow.sim``, the CDC table ``ks.kv`` agreed), then, on the default (fault-free) network,
a steady QUORUM write workload through random coordinators, issued exactly like that test's
scenario (``prepare_cdc_write`` + ``ClusterNode.write``) for a fixed simulated duration; the
bench reports acknowledged simulated writes per wall second, simulated events per wall second
and simulated seconds per wall second (boot, and 10 idle simulated seconds of gossip only,
reported separately).

Defaults: 2,000 rows per configuration at 32 in flight, 1,000 at 1 in flight, 2 rounds, 30
simulated seconds at 100 writes per simulated second; ``--quick`` is 300 / 100 rows, 1 round,
5 simulated seconds. No figure here is asserted: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cassandra.cluster import Session

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for ``tests.sim``
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for ``_cluster``

from _cluster import cpu_seconds, free_block, local_cluster, make_session
from _runs import Run, best, fmt_ms, measure

from ringflow.cluster._coordinator import prepare_cdc_write
from tests.sim._harness import QUORUM, kv_write
from tests.sim.test_cluster_sim import boot

NODES = 3
KEYSPACE = "bench"
CONCURRENCY = 32


# --- measurements -------------------------------------------------------------------------------


def create_schema(session: Session) -> None:
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.execute(f"CREATE TABLE {KEYSPACE}.cdc_off (k int PRIMARY KEY, v text, n bigint)")
    session.execute(
        f"CREATE TABLE {KEYSPACE}.cdc_on (k int PRIMARY KEY, v text, n bigint) "
        "WITH cdc = {'enabled': true}"
    )
    if not session.wait_for_schema_agreement(wait_time=30):
        raise RuntimeError("no schema agreement after 30 s")


def insert_params(first: int, rows: int) -> list[tuple[int, str, int]]:
    return [(k, f"value number {k}", k * 7) for k in range(first, first + rows)]


WRITE_OFF = "QUORUM INSERT, CDC off"
WRITE_ON = "QUORUM INSERT, CDC on"
READ = "QUORUM SELECT by partition key"
HIGH_CONCURRENCY = 128
"""Above the node's ``max_statements_in_flight`` (32): the rest wait on its event loop."""
CONFIGS = [
    (f"{WRITE_OFF}, {CONCURRENCY} in flight", "cdc_off", CONCURRENCY),
    (f"{WRITE_ON}, {CONCURRENCY} in flight", "cdc_on", CONCURRENCY),
    (f"{READ}, {CONCURRENCY} in flight", "select", CONCURRENCY),
    (f"{WRITE_ON}, {HIGH_CONCURRENCY} in flight", "cdc_on", HIGH_CONCURRENCY),
    (f"{READ}, {HIGH_CONCURRENCY} in flight", "select", HIGH_CONCURRENCY),
    (f"{WRITE_OFF}, 1 in flight", "cdc_off", 1),
    (f"{WRITE_ON}, 1 in flight", "cdc_on", 1),
    (f"{READ}, 1 in flight", "select", 1),
]


def run_bench(
    pids: Sequence[int], session: Session, rows: int, latency_rows: int, rounds: int
) -> dict[str, list[Run]]:
    create_schema(session)
    nodes_cpu = functools.partial(cpu_seconds, pids)
    statements = {
        table: session.prepare(f"INSERT INTO {KEYSPACE}.{table} (k, v, n) VALUES (?, ?, ?)")
        for table in ("cdc_off", "cdc_on")
    }
    statements["select"] = session.prepare(f"SELECT k, v, n FROM {KEYSPACE}.cdc_off WHERE k = ?")
    # Warm-up: connections to every node, prepared-statement caches, first writes to each table.
    for table in ("cdc_off", "cdc_on"):
        measure(nodes_cpu, session, statements[table], insert_params(-1_000_000, 300), CONCURRENCY)
        measure(nodes_cpu, session, statements[table], insert_params(-2_000_000, 30), 1)
    measure(
        nodes_cpu, session, statements["select"], [(k,) for k in range(-1_000_000, -999_800)], 8
    )

    runs: dict[str, list[Run]] = {name: [] for name, _, _ in CONFIGS}
    next_key = 0
    written: list[int] = []
    for round_index in range(rounds):
        order = CONFIGS if round_index % 2 == 0 else CONFIGS[::-1]
        for name, target, concurrency in order:
            count = rows if concurrency > 1 else latency_rows
            if target == "select":
                if len(written) < count:  # the reversed order reads before this round writes
                    params: list[tuple[object, ...]] = [
                        (k,) for k in random.sample(range(-1_000_000, -999_700), count)
                    ]
                else:
                    params = [(k,) for k in random.sample(written, count)]  # rows that exist
            else:
                params = list(insert_params(next_key, count))
                next_key += count
                if target == "cdc_off":
                    written.extend(k for k in range(next_key - count, next_key))
            run = measure(nodes_cpu, session, statements[target], params, concurrency)
            runs[name].append(run)
            print(f"  round {round_index + 1}: {name}: {run.rows_per_s:,.0f} rows/s", flush=True)
    return runs


# --- the simulation -----------------------------------------------------------------------------


@dataclass(slots=True)
class SimRun:
    boot_wall_s: float
    boot_sim_s: float
    idle_sim_s: float
    idle_wall_s: float
    sim_s: float
    wall_s: float
    events: int
    issued: int
    acked: int
    refused: int


def run_simulation(seed: int, sim_seconds: int, writes_per_sim_s: int) -> SimRun:
    """Boot the test's 3-node cluster, then time a steady QUORUM write workload."""
    started = time.perf_counter()
    sim, cluster = boot(seed)
    boot_wall = time.perf_counter() - started
    with sim:
        boot_sim_s = sim.now_us() / 1e6
        idle_sim_s = 10
        started = time.perf_counter()
        sim.run_for(idle_sim_s * 1000)  # gossip only: the floor of the simulation's cost
        idle_wall = time.perf_counter() - started
        rng = sim.rng
        acked = [0]
        refused = [0]
        issued = sim_seconds * writes_per_sim_s
        for index in range(issued):

            def issue(key: int = index) -> None:
                coordinator = rng.choice(cluster.running())
                node = cluster.node(coordinator)
                ts_us = node.clock.now_us()
                mutation = kv_write(key, rng.randrange(1 << 30), ts_us)
                capture = prepare_cdc_write(
                    mutation,
                    node.processor.schema.tables[("ks", "kv")],
                    ts_us,
                    ts_us,
                    cluster.cdc[coordinator],
                    rng,
                    token_metadata=node.membership.token_metadata,
                    strategy=node.placement.strategy_of("ks"),
                )

                def done(error: BaseException | None) -> None:
                    (acked if error is None else refused)[0] += 1

                node.write([mutation], {0: capture}, QUORUM, done)

            sim.after(index * 1000 // writes_per_sim_s, issue)
        events_before = sim.loop.events_run
        started = time.perf_counter()
        sim.run_for(sim_seconds * 1000)
        wall = time.perf_counter() - started
        return SimRun(
            boot_wall_s=boot_wall,
            boot_sim_s=boot_sim_s,
            idle_sim_s=idle_sim_s,
            idle_wall_s=idle_wall,
            sim_s=sim_seconds,
            wall_s=wall,
            events=sim.loop.events_run - events_before,
            issued=issued,
            acked=acked[0],
            refused=refused[0],
        )


# --- output -------------------------------------------------------------------------------------


def print_table(runs: dict[str, list[Run]]) -> None:
    header = (
        "| workload | rows/s | µs/row (wall) | p50 ms | p99 ms | 3 nodes' CPU µs/row "
        "| client CPU µs/row | CDC cost (time/row vs CDC off) |"
    )
    print("\n" + header)
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, samples in runs.items():
        run = best(samples)
        ratio = "–"
        base = name.replace(WRITE_ON, WRITE_OFF)
        if WRITE_ON in name and base in runs:
            per_round = [
                on.us_per_row / off.us_per_row for on, off in zip(samples, runs[base], strict=True)
            ]
            ratio = (
                f"**{best(samples).us_per_row / best(runs[base]).us_per_row:.2f}x** best/best "
                f"(rounds: {', '.join(f'{r:.2f}x' for r in per_round)})"
            )
        elif WRITE_OFF in name:
            ratio = "1.00x"
        print(
            f"| {name} | {run.rows_per_s:,.0f} | {run.us_per_row:,.0f} | "
            f"{fmt_ms(run.percentile_ms(0.50))} | {fmt_ms(run.percentile_ms(0.99))} | "
            f"{run.server_cpu_s / run.rows * 1e6:,.0f} | {run.client_cpu_s / run.rows * 1e6:,.0f} "
            f"| {ratio} |"
        )


def print_simulation(run: SimRun, seed: int) -> None:
    print(
        f"\nSimulation (tests/sim/test_cluster_sim.py boot, seed {seed}, 3 ClusterNodes, "
        f"CDC table, default network):"
    )
    print("| figure | value |")
    print("| --- | ---: |")
    print(f"| boot (UP + schema agreed) | {run.boot_sim_s:.1f} sim s in {run.boot_wall_s:.2f} s |")
    print(
        f"| write workload | {run.issued:,} QUORUM writes over {run.sim_s:g} sim s: "
        f"{run.acked:,} acked, {run.refused:,} refused, {run.wall_s:.2f} s wall |"
    )
    print(f"| simulated ops/s (acked writes per wall second) | {run.acked / run.wall_s:,.0f} |")
    print(f"| simulated events per wall second | {run.events / run.wall_s:,.0f} |")
    print(f"| simulated seconds per wall second, writing | {run.sim_s / run.wall_s:,.2f} |")
    print(
        f"| simulated seconds per wall second, idle (gossip only, {run.idle_sim_s:g} sim s) "
        f"| {run.idle_sim_s / run.idle_wall_s:,.1f} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few rows, 1 round")
    parser.add_argument("--rows", type=int, help="rows per configuration at 32 in flight (2000)")
    parser.add_argument("--latency-rows", type=int, help="rows per configuration at 1 (1000)")
    parser.add_argument("--rounds", type=int, help="alternating rounds, best taken (2)")
    parser.add_argument("--sim-seconds", type=int, help="simulated seconds of writes (30)")
    parser.add_argument("--sim-rate", type=int, default=100, help="writes per simulated second")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed")
    parser.add_argument("--skip-cluster", action="store_true", help="only the simulation")
    arguments = parser.parse_args(argv)
    rows = arguments.rows or (300 if arguments.quick else 2000)
    latency_rows = arguments.latency_rows or (100 if arguments.quick else 1000)
    rounds = arguments.rounds or (1 if arguments.quick else 2)
    sim_seconds = arguments.sim_seconds or (5 if arguments.quick else 30)

    print(
        f"bench_cluster: {rows:,} rows per configuration at {CONCURRENCY} in flight, "
        f"{latency_rows:,} at 1 in flight, {rounds} alternating round(s), best of; "
        f"{platform.machine()}, {os.cpu_count()} cores (shared), Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    if not arguments.skip_cluster:
        with tempfile.TemporaryDirectory(prefix="ringflow-bench-cluster-") as directory:
            data = Path(directory) / "cluster"
            first = free_block(NODES)
            with local_cluster(data, NODES, first) as pids:
                cluster, session = make_session(first)
                try:
                    started = time.perf_counter()
                    runs = run_bench(pids, session, rows, latency_rows, rounds)
                    elapsed = time.perf_counter() - started
                finally:
                    cluster.shutdown()
                print_table(runs)
                print(f"\nmeasured in {elapsed:.0f} s; load average now {os.getloadavg()[0]:.1f}")
                medians = [
                    f"{name}: {statistics.median(r.latencies_s) * 1e3:.2f} ms"
                    for name, samples in runs.items()
                    for r in samples
                    if r.latencies_s
                ]
                print("every round's p50:", "; ".join(medians))
    print(f"\nsimulation: seed {arguments.seed}, {sim_seconds} simulated s ...", flush=True)
    print_simulation(
        run_simulation(arguments.seed, sim_seconds, arguments.sim_rate), arguments.seed
    )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
