"""Throughput of ringflow's sinks next to plain baselines (local[2] Spark, loopback PostgreSQL).

Contenders, each run in alternating rounds (best of ``--rounds``) on the same DataFrame of
``--changes`` change rows (inserts, updates, column/row/partition deletes, TTLs):

- lake: ``df.write.format("ringflow-lake")`` (staged files + commit marker) against Spark's own
  ``df.write.parquet`` (no exactly-once marker, no per-date files).
- PostgreSQL: ``df.write.format("ringflow-postgres")`` (LWW-guarded upserts, tombstones) against
  a ``foreachPartition`` with psycopg ``executemany`` of an unguarded ``INSERT ... ON CONFLICT DO
  UPDATE`` of the same rows (what pipelines-spark.md §9.2 measured); plus a replay of the same
  batch through the ringflow sink (everything already applied).
- materialize: the pure-Python LWW oracle, changes per second.

Run: ``.venv/bin/python bench/bench_pipeline_sinks.py [--changes N] [--rounds R]``. Starts a
throwaway PostgreSQL (as ``nobody`` when run as root) unless ``--postgres-url`` is given.
"""

from __future__ import annotations

import argparse
import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from ringflow.cdc import CdcOperation
from ringflow.pipeline import (
    Change,
    change_schema,
    change_to_row,
    lake_options,
    local_spark_session,
    materialize,
    postgres_options,
)
from ringflow.schema import BIGINT, INT, TEXT, ClusteringOrder, Table, timeuuid_from_micros

TABLE = Table.create(
    "bench",
    "events",
    partition_key=[("pk", INT)],
    clustering=[("ck", INT, ClusteringOrder.ASC)],
    regular=[("v", TEXT), ("n", BIGINT)],
)
T0 = 1_700_000_000_000_000


def workload(size: int, seed: int = 1) -> list[Change]:
    rng = random.Random(seed)
    changes = []
    for index in range(size):
        key = {"pk": rng.randint(0, size // 20), "ck": rng.randint(0, 50)}
        time = timeuuid_from_micros(T0 + rng.randint(0, 10**9), index)
        roll = rng.random()
        if roll < 0.02:
            changes.append(
                Change("bench", "events", CdcOperation.PARTITION_DELETE, time, {"pk": key["pk"]})
            )
        elif roll < 0.07:
            changes.append(Change("bench", "events", CdcOperation.ROW_DELETE, time, key))
        else:
            op = CdcOperation.INSERT if roll < 0.5 else CdcOperation.UPDATE
            values = {"v": f"value-{rng.randint(0, 999)}", "n": rng.randint(0, 10**12)}
            deleted = frozenset({"v"}) if roll > 0.95 else frozenset()
            if deleted:
                del values["v"]
            ttl = 3600 if roll > 0.9 else None
            changes.append(Change("bench", "events", op, time, key, 0, values, deleted, {}, ttl))
    return changes


@contextmanager
def throwaway_postgres() -> Iterator[str]:
    base = Path(tempfile.mkdtemp(prefix="ringflow-bench-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        entry = pwd.getpwnam("nobody")
        os.chown(base, entry.pw_uid, entry.pw_gid)
        prefix = ["runuser", "-u", "nobody", "--"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = str(base / "data")
    initdb = ["initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]
    subprocess.run([*prefix, *initdb], check=True, capture_output=True)
    options = f"-k {base} -h 127.0.0.1 -p {port} -c fsync=off"
    start = ["pg_ctl", "-D", data, "-o", options, "-l", str(base / "log"), "-w", "start"]
    subprocess.run([*prefix, *start], check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, "pg_ctl", "-D", data, "-m", "immediate", "stop"], check=False)
        shutil.rmtree(base, ignore_errors=True)


def best_of(rounds: int, contenders: dict[str, Callable[[int], None]]) -> dict[str, float]:
    """Best wall time of each contender over alternating rounds (the round number is passed)."""
    best = {name: float("inf") for name in contenders}
    for round_number in range(rounds):
        for name, run in contenders.items():
            started = time.perf_counter()
            run(round_number)
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def _plain_upsert(url: str) -> Callable[[Iterator[object]], None]:
    sql = (
        "INSERT INTO plain (pk, ck, v, n) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (pk, ck) DO UPDATE SET v = EXCLUDED.v, n = EXCLUDED.n"
    )

    def write(rows: Iterator[object]) -> None:
        # sorted, so that concurrent tasks lock rows in one order (else they deadlock)
        params = [(r["pk"], r["ck"] or 0, r["v"], r["n"]) for r in rows]  # type: ignore[index]
        params.sort(key=lambda p: (p[0], p[1]))
        with psycopg.connect(url) as connection, connection.cursor() as cursor:
            for start in range(0, len(params), 5000):
                cursor.executemany(sql, params[start : start + 5000])
                connection.commit()

    return write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres-url")
    args = parser.parse_args()
    changes = workload(args.changes)
    spark = local_spark_session("ringflow-bench")
    frame = spark.createDataFrame([change_to_row(TABLE, c) for c in changes], change_schema(TABLE))
    frame = frame.cache()
    frame.count()
    scratch = Path(tempfile.mkdtemp(prefix="ringflow-bench-"))
    try:
        _run(args, changes, frame, scratch)
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _run(args: argparse.Namespace, changes: list[Change], frame: Any, scratch: Path) -> None:
    n = args.changes
    lake = best_of(
        args.rounds,
        {
            "spark parquet (baseline)": lambda r: frame.write.mode("append").parquet(
                str(scratch / f"plain-{r}")
            ),
            "ringflow-lake": lambda r: (
                frame.write.format("ringflow-lake")
                .mode("append")
                .options(**lake_options(scratch / f"lake-{r}", TABLE))
                .save()
            ),
        },
    )
    _report("lake writes", n, lake, "spark parquet (baseline)")

    with _postgres(args.postgres_url) as url:
        with psycopg.connect(url) as connection:
            connection.execute(
                "CREATE TABLE plain (pk int, ck int, v text, n bigint, PRIMARY KEY (pk, ck))"
            )
        rows = frame.select("pk", "ck", "v", "n")
        postgres = best_of(
            args.rounds,
            {
                "plain upsert (baseline)": lambda r: _truncate_then(url, rows),
                "ringflow-postgres": lambda r: (
                    frame.write.format("ringflow-postgres")
                    .mode("append")
                    .options(**postgres_options(url, f"events_{r}", TABLE))
                    .save()
                ),
                "ringflow-postgres replay": lambda r: (
                    frame.write.format("ringflow-postgres")
                    .mode("append")
                    .options(**postgres_options(url, f"events_{r}", TABLE))
                    .save()
                ),
            },
        )
        _report("PostgreSQL writes", n, postgres, "plain upsert (baseline)")

    started = time.perf_counter()
    materialize(TABLE, changes, T0 // 1_000_000)
    elapsed = time.perf_counter() - started
    print(f"\nmaterialize: {n / elapsed:,.0f} changes/s ({elapsed:.2f} s for {n:,})")


def _truncate_then(url: str, rows: object) -> None:
    with psycopg.connect(url) as connection:
        connection.execute("TRUNCATE plain")
    rows.foreachPartition(_plain_upsert(url))  # type: ignore[attr-defined]


@contextmanager
def _postgres(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with throwaway_postgres() as started:
        yield started


def _report(title: str, n: int, best: dict[str, float], baseline: str) -> None:
    print(f"\n{title}, {n:,} changes (best of rounds)")
    print(f"{'contender':<28} {'seconds':>8} {'changes/s':>12} {'ratio':>7}")
    for name, seconds in best.items():
        ratio = best[baseline] / seconds
        print(f"{name:<28} {seconds:>8.2f} {n / seconds:>12,.0f} {ratio:>6.2f}x")


if __name__ == "__main__":
    main()
