"""``ringflow diff`` throughput (issue 17 part 2): rows compared per second against a plain Spark
read of the same two tables, in the same run.

Run with the project venv: ``.venv/bin/python bench/bench_diff.py [--rows N] [--splits S]
[--differences D] [--rounds R]``.

Set-up: two 1-node clusters (``ringflow cluster start --nodes 1``, each on a free loopback
block), the same table ``bench.rows (pk int, ck int, v text, n bigint, tags set<int>, PRIMARY KEY
(pk, ck))`` on both, N rows loaded into each through the Scylla driver (prepared inserts in
unlogged batches of one partition's 100 rows, 8 batches in flight, every write ``USING
TIMESTAMP`` its row index + 1 so that both copies are equal, write times included). Then D
rows of the target are changed (a third values, a third write times, a third deleted), so
the diff's row pass runs over D ranges at most. Spark ``local[2]``.

Measured in alternating rounds (best of R each, after one warm-up of each unless
``--no-warmup``):

- baseline: ``spark.read.format("ringflow")`` of both tables, ``count()`` each, with the read
  options the diff uses (one query per token range of ``--splits``, in ``1 + 2 x cores``
  Spark partitions);
- diff: :func:`ringflow.pipeline.run_diff` (hash pass over both tables, row pass over the
  differing ranges); its report must name exactly the D differences.

Printed: rows/s of each (2 x N rows / wall time) and the ratio diff / baseline. No figure is
asserted: this is a measurement. Cleanup: ``ringflow cluster stop`` in ``finally``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cassandra.concurrent import execute_concurrent
from cassandra.query import BatchStatement, BatchType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cluster import free_block, local_cluster, make_session

from ringflow.pipeline import local_spark_session, plan_diff, read_table, run_diff
from ringflow.pipeline._diff import DEFAULT_READ_PARTITIONS

KEYSPACE, TABLE = "bench", "rows"
CONCURRENCY = 8  # batches of PER_PARTITION rows in flight
PER_PARTITION = 100
LOAD_CHUNK = 50_000


def create_schema(session: Any) -> None:
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    session.execute(
        f"CREATE TABLE {KEYSPACE}.{TABLE} (pk int, ck int, v text, n bigint, tags set<int>, "
        "PRIMARY KEY (pk, ck))"
    )


def load(session: Any, rows: int) -> float:
    """Insert the rows, one unlogged batch a partition (``PER_PARTITION`` rows); seconds taken."""
    insert = session.prepare(
        f"INSERT INTO {KEYSPACE}.{TABLE} (pk, ck, v, n, tags) VALUES (?, ?, ?, ?, ?) "
        "USING TIMESTAMP ?"
    )
    started = time.perf_counter()
    for first in range(0, rows, LOAD_CHUNK):
        batches = []
        for start in range(first, min(rows, first + LOAD_CHUNK), PER_PARTITION):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for i in range(start, min(rows, start + PER_PARTITION)):
                pk, ck = i // PER_PARTITION, i % PER_PARTITION
                batch.add(insert, (pk, ck, f"value-{i}", i * 7, {i % 5, i % 7}, i + 1))
            batches.append((batch, ()))
        results = execute_concurrent(
            session, batches, concurrency=CONCURRENCY, raise_on_first_error=True
        )
        if len(results) != len(batches):
            raise RuntimeError(f"{len(results)} results for {len(batches)} batches")
        print(f"  {min(rows, first + LOAD_CHUNK):,} rows", flush=True)
    return time.perf_counter() - started


def change_target(session: Any, rows: int, differences: int) -> None:
    """``differences`` rows spread over the table: values, write times, deletions."""
    step = max(1, rows // max(differences, 1))
    for n, i in enumerate(range(0, rows, step)[:differences]):
        key = (i // PER_PARTITION, i % PER_PARTITION)
        if n % 3 == 0:
            session.execute(
                f"UPDATE {KEYSPACE}.{TABLE} USING TIMESTAMP %s SET v = 'changed' "
                "WHERE pk = %s AND ck = %s",
                (i + 2, *key),  # a later write: at the same timestamp the greater value wins
            )
        elif n % 3 == 1:
            session.execute(
                f"UPDATE {KEYSPACE}.{TABLE} USING TIMESTAMP %s SET n = %s "
                "WHERE pk = %s AND ck = %s",
                (i + 2, i * 7, *key),
            )
        else:
            session.execute(f"DELETE FROM {KEYSPACE}.{TABLE} WHERE pk = %s AND ck = %s", key)


def plain_read(spark: Any, endpoints: list[str], splits: int) -> float:
    started = time.perf_counter()
    for endpoint in endpoints:
        host, port = endpoint.split(":")
        options = {
            "contact_points": host,
            "port": port,
            "keyspace": KEYSPACE,
            "table": TABLE,
            "consistency": "ALL",
            "splits": str(splits),  # the diff's token ranges, one query each
            "partitions": str(DEFAULT_READ_PARTITIONS),
        }
        read_table(spark, options).count()
    return time.perf_counter() - started


def diff(spark: Any, endpoints: list[str], splits: int, differences: int) -> float:
    started = time.perf_counter()
    plan = plan_diff(endpoints[0], endpoints[1], f"{KEYSPACE}.{TABLE}", splits=splits)
    report = run_diff(spark, plan, examples=3)
    took = time.perf_counter() - started
    found = sum(report.counts.values())
    if found != differences:
        raise RuntimeError(f"the diff found {found} differences, {differences} were made")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--splits", type=int, default=256)
    parser.add_argument("--differences", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the warm-up of each contender (at 1,000,000 rows each round takes minutes)",
    )
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, {platform.python_version()}")
    base = Path(tempfile.mkdtemp(prefix="ringflow-bench-diff-"))
    source_first = free_block(1)
    target_first = free_block(1, avoid=source_first)
    with (
        local_cluster(base / "source", 1, source_first),
        local_cluster(base / "target", 1, target_first),
    ):
        endpoints = [f"{source_first}:9042", f"{target_first}:9042"]
        for endpoint in endpoints:
            cluster, session = make_session(endpoint.split(":")[0])
            try:
                create_schema(session)
                print(f"loading {args.rows:,} rows into {endpoint}", flush=True)
                took = load(session, args.rows)
                print(f"  loaded in {took:.1f} s ({args.rows / took:,.0f} rows/s)", flush=True)
                if endpoint == endpoints[1]:
                    change_target(session, args.rows, args.differences)
            finally:
                cluster.shutdown()
        spark = local_spark_session("bench-diff")
        try:
            compared = 2 * args.rows
            if not args.no_warmup:
                plain_read(spark, endpoints, args.splits)
                diff(spark, endpoints, args.splits, args.differences)
            plain, diffs = [], []
            for round_ in range(args.rounds):
                plain.append(plain_read(spark, endpoints, args.splits))
                diffs.append(diff(spark, endpoints, args.splits, args.differences))
                print(
                    f"round {round_ + 1}: plain read {plain[-1]:.1f} s, diff {diffs[-1]:.1f} s",
                    flush=True,
                )
            best_plain, best_diff = min(plain), min(diffs)
            print(
                f"rows {args.rows:,} a side, splits {args.splits}, differences "
                f"{args.differences}: plain read of both {compared / best_plain:,.0f} rows/s "
                f"({best_plain:.1f} s), diff {compared / best_diff:,.0f} rows/s "
                f"({best_diff:.1f} s): diff/plain time {best_diff / best_plain:.2f}x"
            )
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
