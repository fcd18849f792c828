"""Ring benchmarks: token hashing, owner/replica lookup, allocation quality (a script, not a test).

Run with the project venv: ``.venv/bin/python bench/bench_ring.py [--quick]``. Every figure is
printed next to its baseline from the same run (the driver's C murmur3, the driver's token map,
random allocation), with the ratio. Contenders run in alternating rounds and each keeps its best
round, so a busy shared machine slows them alike. Targets (the brief): hashing within 1.5x of the
driver's C murmur3; >= 5,000,000 looked-up tokens/s on a 100-node x 256-vnode ring; balanced
max/mean <= 1.10 at 12 nodes x 16 vnodes, RF 3.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import time
import uuid
from collections.abc import Callable

import numpy as np
from cassandra.cmurmur3 import murmur3 as driver_murmur3
from cassandra.metadata import KeyspaceMetadata, Metadata, Murmur3Token
from cassandra.policies import SimpleConvictionPolicy
from cassandra.pool import Host as DriverHost

from ringflow.ring import (
    AllocatorName,
    Host,
    ReplicaMap,
    TokenMetadata,
    grow_ring,
    murmur3_token,
    murmur3_token_reference,
    murmur3_tokens,
    murmur3_tokens_of_matrix,
    ownership_report,
    replication_strategy,
)

Contender = tuple[str, int, Callable[[], object]]  # label, items per run, the run


def race(contenders: list[Contender], rounds: int) -> list[float]:
    """Items per second of each contender: best of ``rounds`` alternating rounds."""
    best = [math.inf] * len(contenders)
    for _ in range(rounds):
        for position, (_, _, run) in enumerate(contenders):
            start = time.perf_counter()
            run()
            best[position] = min(best[position], time.perf_counter() - start)
    return [count / seconds for (_, count, _), seconds in zip(contenders, best, strict=True)]


def report(contenders: list[Contender], rates: list[float], baseline: str) -> None:
    base = rates[[label for label, _, _ in contenders].index(baseline)]
    for (label, _, _), rate in zip(contenders, rates, strict=True):
        print(f"  {label:<56} {rate / 1e6:8.2f} M/s  {rate / base:6.2f}x")


def bench_hashing(key_count: int, rounds: int) -> None:
    print(f"\n## Token hashing ({key_count:,} keys; ratio to the driver's raw C murmur3)")
    rng = np.random.default_rng(1)
    fixed = rng.integers(0, 256, size=(key_count, 16), dtype=np.uint8)
    fixed_keys = [row.tobytes() for row in fixed]
    mixed_keys = [os.urandom(int(n)) for n in rng.integers(1, 65, size=key_count)]
    baseline = "driver cmurmur3.murmur3 (raw h1, no checks)"
    for title, keys in (("16-byte keys", fixed_keys), ("keys of 1-64 bytes", mixed_keys)):
        print(f" {title}")
        sample = keys[: key_count // 50]
        contenders: list[Contender] = [
            (baseline, key_count, lambda keys=keys: [driver_murmur3(k) for k in keys]),
            (
                "driver Murmur3Token.hash_fn (h1 + normalisation)",
                key_count,
                lambda keys=keys: [Murmur3Token.hash_fn(k) for k in keys],
            ),
            (
                "ours murmur3_token (scalar: C hash + checks)",
                key_count,
                lambda keys=keys: [murmur3_token(k) for k in keys],
            ),
            (
                "ours murmur3_tokens (batch, from list[bytes])",
                key_count,
                lambda keys=keys: murmur3_tokens(keys),
            ),
            (
                "ours murmur3_token_reference (pure Python)",
                len(sample),
                lambda sample=sample: [murmur3_token_reference(k) for k in sample],
            ),
        ]
        if keys is fixed_keys:
            contenders.append(
                (
                    "ours murmur3_tokens_of_matrix (uint8 matrix given)",
                    key_count,
                    lambda: murmur3_tokens_of_matrix(fixed),
                )
            )
        report(contenders, race(contenders, rounds), baseline)


def big_ring(node_count: int, vnodes: int) -> TokenMetadata:
    """Two DCs, three racks each, random allocation (seeded)."""
    rng = random.Random(7)
    hosts = [
        Host(
            uuid.UUID(int=rng.getrandbits(128)),
            f"10.{n // 250}.0.{n % 250 + 1}",
            f"dc{n % 2 + 1}",
            f"rack{n // 2 % 3 + 1}",
        )
        for n in range(node_count)
    ]
    return grow_ring(hosts, vnodes, rng, allocator="random")


def driver_token_map(ring: TokenMetadata) -> object:
    """The driver's TokenMap of the same ring, with a SimpleStrategy RF 3 keyspace 'ks'."""
    metadata = Metadata()
    driver_tokens = {}
    for host in ring.hosts:
        driver_host = DriverHost(
            host.endpoint,
            SimpleConvictionPolicy,
            datacenter=host.dc,
            rack=host.rack,
            host_id=host.host_id,
        )
        driver_tokens[driver_host] = [str(token) for token in ring.tokens_of(host)]
    metadata.rebuild_token_map("org.apache.cassandra.dht.Murmur3Partitioner", driver_tokens)
    metadata.keyspaces["ks"] = KeyspaceMetadata(
        "ks", True, "SimpleStrategy", {"replication_factor": "3"}
    )
    start = time.perf_counter()
    metadata.token_map.get_replicas("ks", Murmur3Token(0))
    print(
        f"  driver TokenMap replica map (SimpleStrategy RF 3) built in "
        f"{time.perf_counter() - start:.2f} s"
    )
    return metadata.token_map


def bench_lookup(token_count: int, rounds: int) -> None:
    node_count, vnodes = 100, 256
    print(
        f"\n## Owner / replica lookup: {node_count} nodes x {vnodes} vnodes (2 DCs x 3 racks), "
        f"{token_count:,} random tokens; ratio to the driver's TokenMap.get_replicas"
    )
    start = time.perf_counter()
    ring = big_ring(node_count, vnodes)
    print(
        f"  ring of {len(ring):,} tokens (random allocation) built in "
        f"{time.perf_counter() - start:.2f} s"
    )
    tokens = np.random.default_rng(3).integers(-(2**63) + 1, 2**63 - 1, token_count, np.int64)
    token_map = driver_token_map(ring)
    driver_probes = [Murmur3Token(t) for t in tokens[: token_count // 50].tolist()]
    maps = {}
    for options in (
        {"class": "SimpleStrategy", "replication_factor": "3"},
        {"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "3"},
    ):
        strategy = replication_strategy(options)
        start = time.perf_counter()
        maps[strategy.class_name] = ReplicaMap(strategy, ring)
        print(
            f"  ours ReplicaMap({strategy.class_name} {strategy.total_replication_factor}) "
            f"built in {time.perf_counter() - start:.2f} s"
        )
    simple = maps["SimpleStrategy"].strategy
    scalar_sample = tokens[:2000].tolist()
    baseline = "driver TokenMap.get_replicas (scalar, SimpleStrategy RF 3)"
    contenders: list[Contender] = [
        (
            baseline,
            len(driver_probes),
            lambda: [token_map.get_replicas("ks", p) for p in driver_probes],  # type: ignore[attr-defined]
        ),
        (
            "ours TokenMetadata.owners_of (primary owner)",
            token_count,
            lambda: ring.owners_of(tokens),
        ),
        (
            "ours ReplicaMap.replica_indices (SimpleStrategy RF 3)",
            token_count,
            lambda: maps["SimpleStrategy"].replica_indices(tokens),
        ),
        (
            "ours ReplicaMap.replica_indices (NTS dc1:3 dc2:3)",
            token_count,
            lambda: maps["NetworkTopologyStrategy"].replica_indices(tokens),
        ),
        (
            "ours strategy.replicas (scalar ring walk, Simple RF 3)",
            len(scalar_sample),
            lambda: [simple.replicas(t, ring) for t in scalar_sample],
        ),
    ]
    report(contenders, race(contenders, rounds), baseline)


def bench_allocation(seeds: int) -> None:
    node_count, vnodes, factor = 12, 16, 3
    print(
        f"\n## Allocation quality: {node_count} nodes x {vnodes} vnodes, RF {factor}, "
        f"seeds 0..{seeds - 1}"
    )
    print("  effective ownership per host under NetworkTopologyStrategy, ratios to the mean")
    strategy = replication_strategy({"class": "NetworkTopologyStrategy", "dc1": str(factor)})
    for racks in (1, 3, 4):
        hosts = [
            Host(uuid.UUID(int=n + 1), f"10.0.0.{n + 1}", "dc1", f"rack{n % racks + 1}")
            for n in range(node_count)
        ]
        allocators: tuple[AllocatorName, ...] = ("random", "balanced")
        for allocator in allocators:
            maxima, minima, deviations, seconds = [], [], [], []
            for seed in range(seeds):
                start = time.perf_counter()
                ring = grow_ring(
                    hosts,
                    vnodes,
                    random.Random(seed),
                    allocator=allocator,
                    replication_factor_by_dc={"dc1": factor},
                    planned_rack_count_by_dc={"dc1": racks},
                )
                seconds.append(time.perf_counter() - start)
                summary = ownership_report(ring, strategy).summary_of("dc1")
                maxima.append(summary.max_over_mean)
                minima.append(summary.min_over_mean)
                deviations.append(summary.stddev_over_mean)
            print(
                f"  racks {racks} {allocator:<8} max/mean mean {statistics.mean(maxima):.3f} "
                f"worst {max(maxima):.3f} | min/mean mean {statistics.mean(minima):.3f} | "
                f"stddev/mean {statistics.mean(deviations):.3f} | "
                f"{statistics.mean(seconds) * 1000:.0f} ms/ring"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller inputs, for a smoke run")
    quick = parser.parse_args().quick
    print(f"# bench_ring  {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(
        f"  {platform.machine()}, {os.cpu_count()} cores (shared), Python "
        f"{platform.python_version()}, numpy {np.__version__}"
    )
    rounds = 2 if quick else 5
    bench_hashing(100_000 if quick else 1_000_000, rounds)
    bench_lookup(100_000 if quick else 1_000_000, rounds)
    bench_allocation(3 if quick else 20)


if __name__ == "__main__":
    main()
