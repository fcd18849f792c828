"""Storage benchmarks: write throughput with and without CDC, and token-range scans.

Run with the project venv: ``.venv/bin/python bench/bench_storage.py [--quick] [--profile]``.
Figures (targets from the brief):

* single-row inserts/s into one store (one COMMIT, one fsync per row);
* rows/s with batched commits of 100 single-row mutations, for CDC off, CDC delta, and CDC with
  pre- and post-images; printed with the ratio of time per row to CDC off (target: CDC delta
  <= 1.5x CDC off; >= 20,000 rows/s CDC off). "CDC delta, log prebuilt" hands the store the
  log mutations built beforehand, which separates the store's cost of CDC (writing the log rows
  in the same transaction) from the log builder's;
* token-range scan rows/s over 1,000,000 rows (100,000 partitions x 10 rows), bulk-loaded
  straight into the store's layout so that the load does not dominate the run.

Write contenders run in alternating rounds on fresh stores (``synchronous=FULL``, the default;
the order reversed every other round) and each keeps its best round, so a busy shared machine
slows them alike; wall time and process CPU time are both reported (CPU time does not count the
other processes on a shared machine), with the median of the per-round ratios next to the
best-over-best one. ``--delta ROUNDS`` runs only CDC off against CDC delta (the 1.5x target).
``--profile [MODE]`` prints the top of a cProfile of one write mode (default: the CDC-images
path). ``--breakdown`` prints where a CDC-delta row's CPU time goes, stage by stage (process
time, so other processes on the machine do not count; best of several rounds).
"""

from __future__ import annotations

import argparse
import cProfile
import math
import platform
import pstats
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import msgpack

from ringflow.cdc._log_rows import (
    CdcCapture,
    build_log_mutations,
    delta_row_builder,
    image_rows_needed,
)
from ringflow.cdc._log_schema import cdc_log_table, is_cdc_log_table
from ringflow.ring import MIN_TOKEN, murmur3_tokens
from ringflow.schema import (
    BIGINT,
    INT,
    NO_DELETION_TIME,
    NO_TIMESTAMP,
    TEXT,
    CdcOptions,
    Cell,
    ClusteringOrder,
    LivenessInfo,
    Mutation,
    PreimageMode,
    Row,
    Table,
    TableOptions,
)
from ringflow.schema._codec import clustering_encoder, serialize
from ringflow.storage import Store, StoreLimits
from ringflow.storage._catalog import TableInfo
from ringflow.storage._keys import row_key
from ringflow.storage._sqlite_layout import KIND_CELL, KIND_CLUSTERING, KIND_LIVENESS, UPSERT_ATOM
from ringflow.storage._write import delta_row_atom, flatten_built_log, flatten_mutation

NOW_S = 1_700_000_000
BATCH_ROWS = 100


def table(name: str, cdc: CdcOptions) -> Table:
    return Table.create(
        "bench",
        name,
        partition_key=[("pk", BIGINT)],
        clustering=[("ck", INT, ClusteringOrder.ASC)],
        regular=[("v", TEXT), ("n", BIGINT)],
        options=TableOptions(cdc=cdc),
        table_id=uuid.uuid5(uuid.NAMESPACE_DNS, name),
    )


MODES = {
    "CDC off": table("cdc_off", CdcOptions()),
    "CDC delta": table("cdc_delta", CdcOptions(enabled=True)),
    "CDC pre+post images": table(
        "cdc_images", CdcOptions(enabled=True, preimage=PreimageMode.CHANGED, postimage=True)
    ),
}


def row_mutation(base: Table, index: int) -> Mutation:
    """An INSERT of one row: marker, a text and a bigint cell (a new partition each)."""
    timestamp_us = NOW_S * 1_000_000 + index
    cells = {
        "v": Cell.live(timestamp_us, serialize(TEXT, f"value number {index}")),
        "n": Cell.live(timestamp_us, serialize(BIGINT, index)),
    }
    row = Row((serialize(INT, index % 16),), LivenessInfo(timestamp_us), None, cells)
    return Mutation(base.keyspace, base.name, (serialize(BIGINT, index),), rows=(row,))


def open_store(directory: Path, base: Table, synchronous: str = "FULL") -> Store:
    store = Store(directory / f"{uuid.uuid4()}.sqlite", synchronous=synchronous)  # type: ignore[arg-type]
    store.register_table(base)
    if base.options.cdc.enabled:
        store.register_table(cdc_log_table(base))
    return store


Batch = tuple[list[Mutation], dict[int, CdcCapture] | None]


STREAMS = 256
"""CDC streams the bench's log rows go to (a node's log has a few hundred: vnodes x shards)."""


def stream_ids(count: int) -> list[bytes]:
    """``count`` stream ids spread over the ring (token = the first 8 bytes, as in Scylla)."""
    step = 2**64 // count
    return [
        (-(2**63) + n * step + 12_345).to_bytes(8, "big", signed=True) + (n << 4 | 1).to_bytes(8)
        for n in range(count)
    ]


def batches(
    base: Table, row_count: int, batch_rows: int, streams: int | None = STREAMS
) -> list[Batch]:
    """The write workload: row ``i`` goes to stream ``i % streams`` (``None``: a stream of its
    own per row, ids ``0, 1, 2, ...``, all at token 0, the bench's first form)."""
    ids = stream_ids(streams) if streams else []
    result: list[Batch] = []
    for start in range(0, row_count, batch_rows):
        indexes = range(start, start + batch_rows)
        mutations = [row_mutation(base, index) for index in indexes]
        captures = None
        if base.options.cdc.enabled:
            captures = {
                position: CdcCapture(ids[index % streams] if streams else index.to_bytes(16), index)
                for position, index in enumerate(indexes)
            }
        result.append((mutations, captures))
    return result


def prebuilt_log_batches(
    base: Table, row_count: int, batch_rows: int, streams: int | None = STREAMS
) -> list[Batch]:
    """The CDC-delta batches with their log rows built beforehand (the coordinator's job in
    ARCHITECTURE.md step 3): the store only writes base and log mutations together."""
    log = cdc_log_table(base)
    result: list[Batch] = []
    for mutations, captures in batches(base, row_count, batch_rows, streams):
        assert captures is not None
        logs = [
            log_mutation
            for position, mutation in enumerate(mutations)
            for log_mutation in build_log_mutations(base, log, mutation, captures[position], NOW_S)
        ]
        result.append((mutations + logs, None))
    return result


def run_batches(store: Store, work: list[Batch]) -> None:
    """Apply ``work``, then read one log partition: the store's CDC log appends are settled into
    their stream order before a log read, so that cost is counted with the writes."""
    for mutations, captures in work:
        store.apply(mutations, now_s=NOW_S, cdc=captures)
    for table_ in store.tables():
        if is_cdc_log_table(table_.name):
            store.read_partition(table_, [bytes(16)], now_s=NOW_S)


def timed(
    directory: Path, base: Table, work: list[Batch], synchronous: str = "FULL"
) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of writing ``work`` into a fresh store."""
    store = open_store(directory, base, synchronous)
    start, start_cpu = time.perf_counter(), time.process_time()
    run_batches(store, work)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    store.close()
    return elapsed, cpu


def bench_writes(
    directory: Path,
    row_count: int,
    rounds: int,
    modes: Sequence[str] = (),
    streams: int | None = STREAMS,
) -> dict[str, float]:
    """Write contenders in alternating rounds (the order reversed every other round), each on a
    fresh store; prints best wall rows/s, best CPU µs per row, both as ratios to CDC off (best
    over best), and the median of the per-round ratios."""
    title = f"Batched commits of {BATCH_ROWS} rows ({row_count:,} rows per round"
    where = f"{streams} CDC streams" if streams else "a CDC stream per row"
    print(f"\n## {title}, {rounds} alternating rounds, {where})")
    tables = dict(MODES)
    work = {mode: batches(base, row_count, BATCH_ROWS, streams) for mode, base in MODES.items()}
    prebuilt = "CDC delta, log prebuilt"
    tables[prebuilt] = MODES["CDC delta"]
    work[prebuilt] = prebuilt_log_batches(MODES["CDC delta"], row_count, BATCH_ROWS, streams)
    if modes:
        tables = {mode: tables[mode] for mode in ("CDC off", *modes)}
    walls: dict[str, list[float]] = {mode: [] for mode in tables}
    cpus: dict[str, list[float]] = {mode: [] for mode in tables}
    for round_ in range(rounds):
        order = list(tables) if round_ % 2 == 0 else list(reversed(tables))
        for mode in order:
            wall, cpu = timed(directory, tables[mode], work[mode])
            walls[mode].append(wall)
            cpus[mode].append(cpu)
    print(
        f"  {'mode':<26} {'rows/s':>10} {'CPU µs/row':>11}   wall ratio (median)"
        "   CPU ratio (median)"
    )
    for mode in tables:
        wall_ratio = min(walls[mode]) / min(walls["CDC off"])
        cpu_ratio = min(cpus[mode]) / min(cpus["CDC off"])
        off_walls, off_cpus = walls["CDC off"], cpus["CDC off"]
        wall_rounds = statistics.median(w / o for w, o in zip(walls[mode], off_walls, strict=True))
        cpu_rounds = statistics.median(c / o for c, o in zip(cpus[mode], off_cpus, strict=True))
        print(
            f"  {mode:<26} {row_count / min(walls[mode]):10,.0f} "
            f"{min(cpus[mode]) / row_count * 1e6:11.1f}   {wall_ratio:5.2f}x ({wall_rounds:5.2f}x)"
            f"      {cpu_ratio:5.2f}x ({cpu_rounds:5.2f}x)"
        )
    return {mode: row_count / min(walls[mode]) for mode in tables}


def bench_single_rows(directory: Path, row_count: int) -> None:
    print(f"\n## Single-row inserts ({row_count:,} commits of one row, CDC off)")
    base = MODES["CDC off"]
    for synchronous in ("FULL", "NORMAL"):
        seconds, _cpu = timed(directory, base, batches(base, row_count, 1), synchronous)
        print(f"  synchronous={synchronous:<6} {row_count / seconds:10,.0f} rows/s")


def bulk_load(store_path: Path, base: Table, partitions: int, rows_per_partition: int) -> None:
    """Write rows straight into the layout (what ``apply`` would write, without validation)."""
    with Store(store_path) as store:
        store.register_table(base)
    connection = sqlite3.connect(store_path, isolation_level=None)
    connection.execute("PRAGMA synchronous=NORMAL")
    (tid,) = connection.execute("SELECT tid FROM _tables").fetchone()
    encoder = clustering_encoder(((INT, ClusteringOrder.ASC),))
    keys = [serialize(BIGINT, n) for n in range(partitions)]
    tokens = murmur3_tokens(keys).tolist()
    clustering = [(serialize(INT, c),) for c in range(rows_per_partition)]
    cks = [row_key(encoder, c) for c in clustering]
    packed = [msgpack.packb(c, use_bin_type=True) for c in clustering]
    order = sorted(range(partitions), key=lambda n: (tokens[n], keys[n]))
    connection.execute("BEGIN")
    chunk: list[tuple[object, ...]] = []
    for n in order:
        token, pk = tokens[n], keys[n]
        for c in range(rows_per_partition):
            ts = NOW_S * 1_000_000
            head = (tid, token, pk, cks[c])
            chunk.append(
                (*head, KIND_CLUSTERING, "", b"", NO_TIMESTAMP, 0, NO_DELETION_TIME, packed[c])
            )
            chunk.append((*head, KIND_LIVENESS, "", b"", ts, 0, NO_DELETION_TIME, b""))
            chunk.append((*head, KIND_CELL, "n", b"", ts, 0, NO_DELETION_TIME, pk))
            chunk.append((*head, KIND_CELL, "v", b"", ts, 0, NO_DELETION_TIME, b"value %d" % c))
        if len(chunk) >= 200_000:
            connection.executemany(UPSERT_ATOM, chunk)
            chunk = []
    connection.executemany(UPSERT_ATOM, chunk)
    connection.execute("COMMIT")
    connection.close()


def bench_scan(directory: Path, partitions: int, rows_per_partition: int, rounds: int) -> None:
    total = partitions * rows_per_partition
    print(
        f"\n## Token-range scan ({total:,} rows: {partitions:,} partitions x {rows_per_partition})"
    )
    base = MODES["CDC off"]
    path = directory / "scan.sqlite"
    start = time.perf_counter()
    bulk_load(path, base, partitions, rows_per_partition)
    print(f"  bulk load: {time.perf_counter() - start:.1f} s")
    store = Store(path, limits=StoreLimits(max_page_size_rows=10_000))
    best = math.inf
    for _ in range(rounds):
        start = time.perf_counter()
        seen, state = 0, None
        while True:
            page = store.scan(
                base, MIN_TOKEN, MIN_TOKEN, page_size=10_000, paging_state=state, now_s=NOW_S
            )
            seen += len(page.rows)
            state = page.paging_state
            if state is None:
                break
        best = min(best, time.perf_counter() - start)
        assert seen == total, seen
    print(f"  full-ring scan, pages of 10,000: {total / best:10,.0f} rows/s ({best:.1f} s)")
    start = time.perf_counter()
    rows = store.read_partition(base, (serialize(BIGINT, 7),), now_s=NOW_S)
    assert len(rows) == rows_per_partition and rows[3].values["v"] == b"value 3"
    print(f"  one partition read: {(time.perf_counter() - start) * 1e3:.2f} ms")
    store.close()


def cpu_us_per_row(run: Callable[[], object], rows: int, rounds: int = 5) -> float:
    """Best process time of ``run`` over ``rounds``, in µs per row."""
    best = math.inf
    for _ in range(rounds):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best / rows * 1e6


def apply_cpu_us_per_row(
    directory: Path, base: Table, work: list[Batch], rows: int, rounds: int = 5
) -> float:
    """Best process time of writing ``work`` (``rows`` base rows) into a fresh store, in µs per
    base row."""
    best = math.inf
    for _ in range(rounds):
        store = open_store(directory, base)
        start = time.process_time()
        run_batches(store, work)
        best = min(best, time.process_time() - start)
        store.close()
    return best / rows * 1e6


def bench_breakdown(directory: Path, row_count: int) -> None:
    """CPU µs per row of each stage of a CDC-delta write, and of the whole ``apply``."""
    print(f"\n## Where a CDC-delta row's CPU time goes ({row_count:,} rows, process time)")
    base, off = MODES["CDC delta"], MODES["CDC off"]
    log = cdc_log_table(base)
    base_info, log_info = TableInfo.of(1, base), TableInfo.of(2, log, packed_rows=True)
    work = batches(base, row_count, BATCH_ROWS)
    pairs = [(m, captures[i]) for ms, captures in work if captures for i, m in enumerate(ms)]
    logs = [entry for m, c in pairs for entry in build_log_mutations(base, log, m, c, NOW_S)]

    def flatten_base() -> None:
        for mutation, _ in pairs:
            flatten_mutation(base_info, mutation)

    def build_log() -> None:
        for mutation, capture in pairs:
            image_rows_needed(base, mutation)
            build_log_mutations(base, log, mutation, capture, NOW_S)

    def flatten_log() -> None:
        for log_mutation in logs:
            flatten_mutation(log_info, log_mutation)

    def pack_built_log() -> None:
        for log_mutation in logs:
            flatten_built_log(log_info, log_mutation)

    def direct_log() -> None:
        build_delta = delta_row_builder(base, log)  # once per table and batch in the store
        assert build_delta is not None
        for mutation, capture in pairs:
            delta = build_delta(mutation, capture, NOW_S)
            assert delta is not None
            delta_row_atom(log_info, delta)

    stages = {
        "validate + flatten the base row": flatten_base,
        "build the log row (cdc._log_rows)": build_log,
        "validate + pack the log row": flatten_log,
        "pack the store-built log row (no checks)": pack_built_log,
        "the store's path: delta row + packed atom": direct_log,
    }
    for name, run in stages.items():
        print(f"  {name:<44} {cpu_us_per_row(run, row_count):6.1f} µs")
    print("  Store.apply, whole batches (SQLite included):")
    for mode, table_, mode_work in (
        ("CDC off", off, batches(off, row_count, BATCH_ROWS)),
        ("CDC delta", base, work),
        ("CDC delta, log prebuilt", base, prebuilt_log_batches(base, row_count, BATCH_ROWS)),
    ):
        cost = apply_cpu_us_per_row(directory, table_, mode_work, row_count)
        print(f"    {mode:<42} {cost:6.1f} µs")


def profile_cdc(directory: Path, row_count: int, mode: str) -> None:
    base = MODES[mode]
    work = batches(base, row_count, BATCH_ROWS)
    store = open_store(directory, base)
    profiler = cProfile.Profile()
    profiler.runcall(run_batches, store, work)
    store.close()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes for a smoke run")
    parser.add_argument(
        "--profile",
        nargs="?",
        const="CDC pre+post images",
        choices=sorted(MODES),
        help="cProfile one write mode (default: the CDC-images path)",
    )
    parser.add_argument("--breakdown", action="store_true", help="CPU per stage of a CDC row")
    parser.add_argument(
        "--delta",
        type=int,
        metavar="ROUNDS",
        help="only CDC off vs CDC delta in ROUNDS alternating rounds (the 1.5x target)",
    )
    parser.add_argument("--rows", type=int, default=5_000, help="rows per --delta round")
    parser.add_argument(
        "--streams", type=int, default=STREAMS, help="CDC streams written (0: one per row)"
    )
    args = parser.parse_args()
    print(f"# storage bench, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {platform.machine()}"
    )
    with tempfile.TemporaryDirectory(prefix="ringflow-bench-") as name:
        directory = Path(name)
        if args.profile:
            profile_cdc(directory, 2_000, args.profile)
            return
        if args.breakdown:
            bench_breakdown(directory, 2_000 if args.quick else 5_000)
            return
        if args.delta:
            bench_writes(directory, args.rows, args.delta, ["CDC delta"], args.streams or None)
            return
        bench_single_rows(directory, 300 if args.quick else 1_000)
        rows, rounds = (2_000, 2) if args.quick else (10_000, 4)
        bench_writes(directory, rows, rounds, streams=args.streams or None)
        bench_scan(directory, 10_000 if args.quick else 100_000, 10, 1 if args.quick else 2)


if __name__ == "__main__":
    main()
