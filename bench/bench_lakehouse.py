"""Throughput of the lakehouse sinks (issue 19) next to the Parquet change lake and plain Spark.

Contenders, in alternating rounds (best of ``--rounds``), on the same cached DataFrame of
``--changes`` change rows (bench_pipeline_sinks' workload: inserts, updates, column/row/partition
deletes, TTLs), each written as ``--batches`` appends to a fresh destination (a micro-batch
each, as a replication job commits them). Each destination is set up (tables created) before the
timed writes, as a job does once before its first batch; the set-up is timed and shown apart:

- spark parquet (baseline): ``df.write.parquet``, no exactly-once, no current state;
- ringflow-lake: the Parquet change lake (staged files + commit marker);
- ringflow-delta: the Delta change log + the current-state table merged per batch;
- ringflow-iceberg: the same in Iceberg (SQLite catalog).

The brief's target: Delta and Iceberg at most 1.5x the lake's time.
Run: ``.venv/bin/python bench/bench_lakehouse.py [--changes N] [--batches B] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipeline_sinks import TABLE, best_of, workload

from ringflow.pipeline import (
    IcebergStore,
    change_schema,
    change_to_row,
    delta_options,
    iceberg_options,
    lake_options,
    local_spark_session,
    parse_iceberg_location,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=20_000)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spark = local_spark_session("ringflow-bench-lakehouse")
    changes = workload(args.changes)
    rows = [change_to_row(TABLE, c) for c in changes]
    size = -(-len(rows) // args.batches)
    frames = []
    for start in range(0, len(rows), size):
        frame = spark.createDataFrame(rows[start : start + size], change_schema(TABLE)).cache()
        frame.count()
        frames.append(frame)
    scratch = Path(tempfile.mkdtemp(prefix="ringflow-bench-lakehouse-"))
    try:
        _run(args, frames, scratch)
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _append_all(frames: list[Any], sink: str, options: dict[str, str]) -> None:
    for frame in frames:
        frame.write.format(sink).mode("append").options(**options).save()


def _iceberg(scratch: Path, round_number: int) -> dict[str, str]:
    location = parse_iceberg_location(f"{scratch / f'catalog-{round_number}.db'}#bench.events")
    IcebergStore(location).catalog.create_namespace("bench")
    return iceberg_options(location, TABLE)


def _run(args: argparse.Namespace, frames: list[Any], scratch: Path) -> None:
    # Each destination is set up (its tables created, the held table recorded: what a job
    # does once, before its first batch) outside the timed writes, and timed apart.
    setup: dict[str, float] = {}
    options: dict[tuple[str, int], dict[str, str]] = {}
    for r in range(args.rounds):
        for name, make in (
            ("ringflow-lake", lambda r: lake_options(scratch / f"lake-{r}", TABLE)),
            ("ringflow-delta", lambda r: delta_options(str(scratch / f"delta-{r}"), TABLE)),
            ("ringflow-iceberg", lambda r: _iceberg(scratch, r)),
        ):
            started = time.perf_counter()
            options[name, r] = make(r)
            setup[name] = min(setup.get(name, float("inf")), time.perf_counter() - started)

    def plain(r: int) -> None:
        for frame in frames:
            frame.write.mode("append").parquet(str(scratch / f"plain-{r}"))

    contenders = {
        "spark parquet (baseline)": plain,
        "ringflow-lake": lambda r: _append_all(
            frames, "ringflow-lake", options["ringflow-lake", r]
        ),
        "ringflow-delta": lambda r: _append_all(
            frames, "ringflow-delta", options["ringflow-delta", r]
        ),
        "ringflow-iceberg": lambda r: _append_all(
            frames, "ringflow-iceberg", options["ringflow-iceberg", r]
        ),
    }
    best = best_of(args.rounds, contenders)
    n = args.changes
    print(f"\nlakehouse writes, {n:,} changes in {len(frames)} batches (best of {args.rounds})")
    print(f"{'contender':<26} {'seconds':>8} {'changes/s':>11} {'vs parquet':>11} {'vs lake':>8}")
    for name, seconds in best.items():
        print(
            f"{name:<26} {seconds:>8.2f} {n / seconds:>11,.0f} "
            f"{seconds / best['spark parquet (baseline)']:>10.2f}x "
            f"{seconds / best['ringflow-lake']:>7.2f}x"
        )
    print("set-up before the first batch (tables created, best of the rounds):")
    for name, seconds in setup.items():
        print(f"  {name:<24} {seconds:>8.2f} s")


if __name__ == "__main__":
    main()
