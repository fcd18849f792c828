"""Merkle-tree anti-entropy repair (issue 17): validation cost and what a repair streams.

Run with the project venv: ``.venv/bin/python bench/bench_repair.py [--rows N]
[--validation-rows N] [--skip-cluster]``.

1. Validation vs scan, in process (no cluster): ``--validation-rows`` one-row partitions of
   ``bench.t (k bigint PRIMARY KEY, v text)`` in a store; in alternating rounds (best of 3) a
   plain full-range scan (``Store.scan_mutations``, 512 partitions a page, every page decoded)
   and a validation of the same range (the same scan + ``validation_digest`` + ``TreeBuilder``
   at depth 20, then the tree at ``depth_for(partitions)``, as ``RepairService.validate``
   does). Ratio validation / scan; target at most 1.5x.
1b. The same for ``--small-range-rows`` partitions validated in ``--small-ranges`` equal ranges
   (a repair validates one vnode range at a time): plain scans, ``TreeBuilder`` validations and
   the earlier dense tree (2**20 leaves allocated and folded per range, whatever it holds), in
   the same run.
2. Repair, on a real 3-node RF 3 cluster (``ringflow cluster start``, gossip 200 ms): ``--rows``
   one-row partitions bulk-loaded into node 1's store through ``Store.apply`` (cluster stopped),
   the stored atoms copied into node 2, and into node 3 without the partitions whose token is a
   multiple of 100 (~1%: what node 3 "missed"); cluster restarted; ``ringflow cluster repair
   bench.t`` (wall time, its summary: leaves, partitions and bytes streamed); partitions streamed
   over partitions missing = the overstreaming factor (target at most 2x); then the same repair
   again on the now-consistent table (target: nothing streamed).

Nothing is asserted: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cluster import free_block, ringflow
from bench.bench_topology import bulk_load
from ringflow.cluster import (
    MAX_TREE_DEPTH,
    MerkleTree,
    TreeBuilder,
    depth_for,
    validation_digest,
)
from ringflow.schema import BIGINT, TEXT, Table
from ringflow.storage import Store

MIN, MAX = -(2**63), 2**63 - 1
PAGE = 512


def scan_range(store: Store, low: int = MIN, high: int = MAX) -> int:
    state, count = None, 0
    while True:
        page = store.scan_mutations(("bench", "t"), low, high, page_size=PAGE, paging_state=state)
        count += len(page.mutations)
        state = page.paging_state
        if state is None:
            return count


def validate(store: Store, low: int = MIN, high: int = MAX, *, dense: bool = False) -> int:
    """``RepairService.validate``'s work on ``(low, high]``: a ``TreeBuilder`` (``dense``: the
    earlier whole ``MerkleTree`` at the max depth, then its fold)."""
    tree = MerkleTree.empty(low, high, MAX_TREE_DEPTH) if dense else None
    builder = None if dense else TreeBuilder(low, high, MAX_TREE_DEPTH)
    state = None
    while True:
        page = store.scan_mutations(("bench", "t"), low, high, page_size=PAGE, paging_state=state)
        for token, mutation in zip(page.tokens, page.mutations, strict=True):
            (tree or builder).add(token, validation_digest(mutation))  # type: ignore[union-attr]
        state = page.paging_state
        if state is None:
            break
    if tree is not None:
        folded = tree.folded(depth_for(tree.partitions, MAX_TREE_DEPTH))
    else:
        assert builder is not None
        folded = builder.tree()
    folded.root()
    return folded.partitions


def ranges(count: int) -> list[tuple[int, int]]:
    """The whole ring cut into ``count`` equal ranges (vnode-sized pieces of a repair)."""
    step = (MAX - MIN) // count
    bounds = [MIN + i * step for i in range(count)] + [MAX]
    return list(itertools.pairwise(bounds))


def bench_validation(rows: int) -> None:
    print(f"\n## Validation vs plain scan, {rows:,} one-row partitions (in process)")
    with tempfile.TemporaryDirectory(prefix="ringflow-bench-repair-") as directory:
        path = Path(directory) / "store.sqlite"
        store = Store(path, synchronous="NORMAL")
        store.register_table(_table())
        store.close()
        start = time.perf_counter()
        bulk_load(path, rows)
        print(f"  load: {time.perf_counter() - start:.1f} s")
        store = Store(path, synchronous="NORMAL")
        best = {"scan": float("inf"), "validation": float("inf")}
        for _ in range(3):
            for name, run in (("scan", scan_range), ("validation", validate)):
                start = time.perf_counter()
                count = run(store)
                best[name] = min(best[name], time.perf_counter() - start)
                assert count == rows, (name, count)
        store.close()
    for name, seconds in best.items():
        print(f"  {name}: {seconds:.2f} s = {rows / seconds:,.0f} partitions/s")
    print(f"  ratio validation / scan: {best['validation'] / best['scan']:.2f}x (target <= 1.5x)")


def bench_small_ranges(rows: int, count: int) -> None:
    """A repair validates range by range (one per vnode range and table): the same rows in
    ``count`` ranges, scanned plainly, validated with ``TreeBuilder`` and validated with the
    earlier dense tree (2**20 leaves allocated and folded whatever the range holds)."""
    print(f"\n## Validation of {count} small ranges, {rows:,} one-row partitions (in process)")
    pieces = ranges(count)
    with tempfile.TemporaryDirectory(prefix="ringflow-bench-repair-") as directory:
        path = Path(directory) / "store.sqlite"
        store = Store(path, synchronous="NORMAL")
        store.register_table(_table())
        store.close()
        bulk_load(path, rows)
        store = Store(path, synchronous="NORMAL")
        runs: dict[str, Callable[[int, int], int]] = {
            "scan": lambda low, high: scan_range(store, low, high),
            "validation (builder)": lambda low, high: validate(store, low, high),
            "validation (dense, before)": lambda low, high: validate(store, low, high, dense=True),
        }
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(3):
            for name, run in runs.items():
                start = time.perf_counter()
                count_seen = sum(run(low, high) for low, high in pieces)
                best[name] = min(best[name], time.perf_counter() - start)
                assert count_seen == rows, (name, count_seen)
        store.close()
    for name, seconds in best.items():
        ratio = seconds / best["scan"]
        print(
            f"  {name}: {seconds:.2f} s, {seconds / count * 1000:.1f} ms a range, {ratio:.2f}x scan"
        )


def _table() -> Table:
    return Table.create(
        "bench", "t", partition_key=[("k", BIGINT)], regular=[("v", TEXT)],
        table_id=uuid.uuid5(uuid.NAMESPACE_DNS, "bench.t"),
    )  # fmt: skip


def copy_table(source: Path, target: Path, where: str = "1") -> int:
    """``bench.t``'s atoms from ``source`` into ``target`` where ``where`` holds; the
    partitions copied."""
    connection = sqlite3.connect(target, isolation_level=None)
    try:
        connection.execute("ATTACH DATABASE ? AS source", (str(source),))
        query = "SELECT tid FROM {}._tables WHERE keyspace = 'bench' AND name = 't'"
        (source_tid,) = connection.execute(query.format("source")).fetchone()
        (target_tid,) = connection.execute(query.format("main")).fetchone()
        columns = [row[1] for row in connection.execute("PRAGMA table_info(atoms)")]
        rest = ", ".join(columns[1:])
        connection.execute("BEGIN")
        connection.execute(
            f"INSERT INTO main.atoms (tid, {rest}) SELECT ?, {rest} FROM source.atoms "
            f"WHERE tid = ? AND ({where})",
            (target_tid, source_tid),
        )
        connection.execute("COMMIT")
        count = connection.execute(
            "SELECT count(DISTINCT pk) FROM main.atoms WHERE tid = ?", (target_tid,)
        ).fetchone()[0]
        return int(count)
    finally:
        connection.close()


def repair_summary(data: Path) -> tuple[float, dict[str, object]]:
    start = time.perf_counter()
    output = ringflow("cluster", "repair", "bench.t", "--json", "--data", str(data),
                      timeout_s=7200)  # fmt: skip
    elapsed = time.perf_counter() - start
    summary = json.loads(output)
    return elapsed, summary["tables"][0]


def bench_cluster(rows: int) -> None:
    print(
        f"\n## Repair of bench.t, {rows:,} one-row partitions, 3 nodes RF 3, ~1% missing on node 3"
    )
    with tempfile.TemporaryDirectory(prefix="ringflow-bench-repair-") as directory:
        data = Path(directory) / "cluster"
        first = free_block(3)
        try:
            ringflow(
                "cluster", "start", "--data", str(data), "--nodes", "3", "--first-address", first,
                "--gossip-interval-ms", "200", "--timeout", "120",
            )  # fmt: skip
            from cassandra.cluster import Cluster

            driver = Cluster([first], protocol_version=4)
            session = driver.connect()
            session.execute(
                "CREATE KEYSPACE bench WITH replication = "
                "{'class': 'SimpleStrategy', 'replication_factor': 3}"
            )
            session.execute("CREATE TABLE bench.t (k bigint PRIMARY KEY, v text)")
            driver.shutdown()
            ringflow("cluster", "stop", "--data", str(data))
            start = time.perf_counter()
            source = data / "node1" / "store.sqlite"
            bulk_load(source, rows)
            copy_table(source, data / "node2" / "store.sqlite")
            kept = copy_table(source, data / "node3" / "store.sqlite", "token % 100 != 0")
            missing = rows - kept
            print(
                f"  load: {time.perf_counter() - start:.1f} s; node 3 misses {missing:,} partitions"
            )
            ringflow("cluster", "start", "--data", str(data), "--timeout", "180", timeout_s=240)
            for label in ("1% missing", "nothing missing"):
                elapsed, table = repair_summary(data)
                streamed = int(table["partitions_streamed"])
                print(
                    f"  {label}: repair {elapsed:.1f} s wall; {table['ranges']} ranges, "
                    f"{table['leaves_compared']:,} leaves compared, "
                    f"{table['leaves_mismatching']:,} mismatching; {streamed:,} partitions / "
                    f"{int(table['bytes_streamed']) / 1e6:.1f} MB streamed"
                )
                if label == "1% missing" and missing:
                    print(
                        f"  overstreaming: {streamed / missing:.2f}x the partitions missing "
                        "(target <= 2x)"
                    )
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
    parser.add_argument("--validation-rows", type=int, default=200_000)
    parser.add_argument("--small-ranges", type=int, default=256)
    parser.add_argument("--small-range-rows", type=int, default=20_000)
    parser.add_argument("--skip-cluster", action="store_true")
    arguments = parser.parse_args()
    print(f"bench_repair on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    bench_validation(arguments.validation_rows)
    bench_small_ranges(arguments.small_range_rows, arguments.small_ranges)
    if not arguments.skip_cluster:
        bench_cluster(arguments.rows)


if __name__ == "__main__":
    main()
