"""CDC generation benchmarks: build, encode and query a 1.6 M-stream generation (a script).

Run with the project venv: ``.venv/bin/python bench/bench_cdc_generation.py [--quick]``.
The generation is the seed's worst case: 100 nodes x 256 vnodes x 64 shards = 1,638,400 streams
(``shared/reference/scylla-cdc.md`` §6, issue #7961). Targets (the brief):

- build the generation and encode its v2 rows: <= 10 s wall, <= 1 GiB peak memory;
- ``stream_for`` >= 300,000 lookups/s; vectorised ``streams_for`` >= 5,000,000 lookups/s.

Baselines printed in the same run: the scalar reference generator (one ``first_token_for_shard``
call per stream, on a tenth of the ring, extrapolated) and a plain ``np.searchsorted`` lookup.
Memory: ``tracemalloc`` peak in a separate run of the build (numpy reports its buffers to it),
and the process's maximum RSS. Timings are best-of-N, the machine being shared; each is given
as wall time and as this process's CPU time (``time.process_time``), since on a machine shared
by several people the wall clock can run several times slower than the CPU the code used.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import time
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from ringflow.cdc import (
    TopologyDescription,
    encode_blob_set,
    encode_v1_description,
    generate_topology_description,
    generation_description_v1_row,
    generation_description_v2_rows,
    streams_description_v1_row,
    streams_description_v2_rows,
)
from ringflow.cdc._generator import _generate
from ringflow.cdc._vector_sharder import unbias_array, zero_based_shard_of_array

GIB = 2**30
BUILD_TARGET_S = 10.0
MEMORY_TARGET_BYTES = GIB
SCALAR_TARGET_PER_S = 300_000
VECTOR_TARGET_PER_S = 5_000_000
SHARDS = 64
IGNORE_MSB = 12
GENERATION_UUID = uuid.UUID("5e5fbd5c-0e56-11ec-9a03-0242ac130003")
TIME_MS = 1_700_000_000_000


def ring_tokens(nodes: int, vnodes: int, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    tokens: set[int] = set()
    while len(tokens) < nodes * vnodes:
        tokens.add(rng.randint(-(2**63) + 1, 2**63 - 1))
    return sorted(tokens)


def best_seconds(function: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """Best wall and best CPU seconds over ``repeats`` runs, and the last result."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = function()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), result


def build_and_encode(tokens: list[int]) -> tuple[TopologyDescription, int, int]:
    """The measured work: generate, build both v2 row kinds, serialize every streams cell."""
    description = generate_topology_description(
        tokens, lambda token: (SHARDS, IGNORE_MSB), random.Random(7)
    )
    internal = generation_description_v2_rows(GENERATION_UUID, description)
    user_facing = streams_description_v2_rows(TIME_MS, description)
    largest = max(len(encode_blob_set(row.streams)) for row in internal)
    total = sum(len(encode_blob_set(row.streams)) for row in user_facing)
    return description, largest, total


def ratio(value: float, target: float, lower_is_better: bool) -> str:
    factor = target / value if lower_is_better else value / target
    verdict = "meets" if factor >= 1 else "MISSES"
    return f"{factor:5.2f}x target ({verdict})"


def seconds_line(label: str, wall: float, cpu: float, target_s: float | None = None) -> None:
    wall_ratio = f" {ratio(wall, target_s, lower_is_better=True)}" if target_s else ""
    cpu_ratio = f" {ratio(cpu, target_s, lower_is_better=True)}" if target_s else ""
    print(f"  {label:<36} wall {wall:6.2f} s{wall_ratio} | cpu {cpu:6.2f} s{cpu_ratio}")


def rate_line(label: str, count: int, wall: float, cpu: float, target: float) -> None:
    print(
        f"  {label:<38} wall {count / wall:12,.0f}/s "
        f"{ratio(count / wall, target, lower_is_better=False)} | cpu {count / cpu:12,.0f}/s "
        f"{ratio(count / cpu, target, lower_is_better=False)}"
    )


def bench_build(tokens: list[int], repeats: int) -> TopologyDescription:
    print(f"\n## Build + encode v2 rows ({len(tokens):,} ranges x {SHARDS} shards)")
    wall, cpu, (description, largest, total) = best_seconds(
        lambda: build_and_encode(tokens), repeats
    )
    generate_wall, generate_cpu, _ = best_seconds(
        lambda: generate_topology_description(
            tokens, lambda t: (SHARDS, IGNORE_MSB), random.Random(7)
        ),
        repeats,
    )
    print(f"  streams {description.stream_count:>38,}")
    seconds_line("generate only", generate_wall, generate_cpu)
    seconds_line("generate + v2 rows + encode", wall, cpu, BUILD_TARGET_S)
    tracemalloc.start()
    build_and_encode(tokens)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"  {'tracemalloc peak':<36} {peak / 2**20:8.1f} MiB "
        f"{ratio(peak, MEMORY_TARGET_BYTES, lower_is_better=True)}"
    )
    print(f"  {'largest v2 streams cell':<36} {largest:>10,} B")
    print(f"  {'all v2 streams cells':<36} {total:>10,} B in {len(description):,} rows")
    return description


def bench_baseline_generator(tokens: list[int], full_ranges: int) -> None:
    sample = tokens[:: max(1, len(tokens) // max(1, full_ranges // 10))]
    print(f"\n## Baseline: scalar reference generator ({len(sample):,} ranges, extrapolated)")
    _, scalar_s, _ = best_seconds(
        lambda: _generate(
            sample, lambda t: (SHARDS, IGNORE_MSB), random.Random(7), (), vectorised=False
        ),
        1,
    )
    _, vector_s, _ = best_seconds(
        lambda: _generate(
            sample, lambda t: (SHARDS, IGNORE_MSB), random.Random(7), (), vectorised=True
        ),
        1,
    )
    scale = full_ranges / len(sample)
    print("  (cpu seconds)")
    print(f"  scalar   {scalar_s:8.2f} s  (x{scale:.0f} = {scalar_s * scale:8.1f} s, full ring)")
    print(f"  numpy    {vector_s:8.2f} s  ({scalar_s / vector_s:6.1f}x faster than scalar)")


def bench_v1_sizes(description: TopologyDescription) -> None:
    print("\n## v1 single-row cells of the same generation (the seed's ~32 MB)")
    start = time.perf_counter()
    v1_streams = len(encode_blob_set(streams_description_v1_row(TIME_MS, description).streams))
    v1_internal = len(
        encode_v1_description(generation_description_v1_row(TIME_MS, description).description)
    )
    print(
        f"  v1 cdc_streams_descriptions.streams        {v1_streams:>12,} B "
        f"({v1_streams / 2**20:.1f} MiB)"
    )
    print(
        f"  v1 cdc_generation_descriptions.description {v1_internal:>12,} B "
        f"({v1_internal / 2**20:.1f} MiB)"
    )
    print(f"  (encoded in {time.perf_counter() - start:.2f} s)")


def bench_lookups(
    description: TopologyDescription, scalar_count: int, vector_count: int, repeats: int
) -> None:
    print("\n## Token -> stream lookups")
    rng = np.random.default_rng(5)
    tokens = rng.integers(-(2**63), 2**63 - 1, vector_count, dtype=np.int64, endpoint=True)
    scalar_tokens = tokens[:scalar_count].tolist()
    stream_for = description.stream_for
    wall, cpu, _ = best_seconds(lambda: [stream_for(t) for t in scalar_tokens], 1)
    rate_line("stream_for, first pass", scalar_count, wall, cpu, SCALAR_TARGET_PER_S)
    wall, cpu, _ = best_seconds(lambda: [stream_for(t) for t in scalar_tokens], repeats)
    rate_line("stream_for, StreamIds built", scalar_count, wall, cpu, SCALAR_TARGET_PER_S)
    index_for = description.stream_index_for
    wall, cpu, _ = best_seconds(lambda: [index_for(t) for t in scalar_tokens], repeats)
    rate_line("stream_index_for (flat index only)", scalar_count, wall, cpu, SCALAR_TARGET_PER_S)
    wall, cpu, _ = best_seconds(lambda: description.streams_for(tokens), 1)
    rate_line("streams_for, first call", vector_count, wall, cpu, VECTOR_TARGET_PER_S)
    wall, cpu, flat = best_seconds(lambda: description.streams_for(tokens), repeats)
    rate_line("streams_for (vectorised)", vector_count, wall, cpu, VECTOR_TARGET_PER_S)
    base_wall, base_cpu, baseline = best_seconds(
        lambda: searchsorted_lookup(description, tokens), repeats
    )
    assert np.array_equal(flat, baseline), "vectorised lookup disagrees with the baseline"
    rate_line("baseline np.searchsorted", vector_count, base_wall, base_cpu, VECTOR_TARGET_PER_S)


def searchsorted_lookup(description: TopologyDescription, tokens: np.ndarray) -> np.ndarray:
    normalised = np.where(tokens == -(2**63), 2**63 - 1, tokens)
    entries = np.searchsorted(description.range_ends, normalised, side="left")
    entries[entries == len(description)] = 0
    shards = zero_based_shard_of_array(
        unbias_array(normalised),
        description.shard_counts.view(np.uint64)[entries],
        description.ignore_msbs.view(np.uint64)[entries],
    )
    return description.stream_offsets[entries] + shards.view(np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 nodes instead of 100, 1 repeat")
    arguments = parser.parse_args()
    nodes = 10 if arguments.quick else 100
    repeats = 1 if arguments.quick else 3
    print(
        f"# CDC generation bench: {nodes} nodes x 256 vnodes x {SHARDS} shards, "
        f"ignore_msb {IGNORE_MSB}"
    )
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cpus")
    tokens = ring_tokens(nodes, 256)
    description = bench_build(tokens, repeats)
    bench_baseline_generator(tokens, len(tokens))
    bench_v1_sizes(description)
    bench_lookups(description, 300_000, 5_000_000, repeats)
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        f"\nprocess max RSS (whole run, incl. interpreter and v1 cells): {max_rss / 2**20:.0f} MiB"
    )


if __name__ == "__main__":
    main()
