"""The precomputed replica map (cassandra-core.md §3.4 idea): vectorised lookups equal the walk.

Proves: ``ReplicaMap`` lookups (scalar, vectorised, flags, primaries) equal the strategies' own
walk on random rings; effective ownership sums to each DC's replica count and equals the
ownership computed from the driver's replica sets.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from ringflow.ring import NO_HOST, ReplicaMap, replication_strategy

from ._driver_oracle import DriverRing, probe_tokens, random_ring


def strategies_for(factors: dict[str, int]) -> list[dict[str, str]]:
    return [
        {"class": "SimpleStrategy", "replication_factor": str(factors["dc1"])},
        {"class": "NetworkTopologyStrategy", **{dc: str(f) for dc, f in factors.items()}},
        {"class": "NetworkTopologyStrategy", **{dc: f"{f + 1}/1" for dc, f in factors.items()}},
    ]


def test_vectorised_lookups_equal_the_walk() -> None:
    rng = random.Random(31)
    for _ in range(25):
        ring = random_ring(rng)
        metadata = ring.token_metadata()
        probes = probe_tokens(rng, metadata.sorted_tokens, count=30)
        probe_array = np.array(probes, dtype=np.int64)
        for options in strategies_for(ring.factors_by_dc):
            strategy = replication_strategy(options)
            replica_map = ReplicaMap(strategy, metadata)
            rows = replica_map.replica_indices(probe_array)
            flags = replica_map.full_flags(probe_array)
            primaries = replica_map.primary_indices(probe_array)
            assert primaries.tolist() == metadata.owners_of(probe_array).tolist()
            for row, flag_row, probe in zip(rows.tolist(), flags.tolist(), probes, strict=True):
                plan = strategy.replica_plan(probe, metadata)
                assert replica_map.replica_plan(probe) == plan
                width = len(plan)
                assert row[width:] == [NO_HOST] * (replica_map.width - width)
                assert [metadata.hosts[i] for i in row[:width]] == [r.host for r in plan]
                assert flag_row[:width] == [r.is_full for r in plan]


def test_effective_ownership_sums_to_each_dcs_replica_count() -> None:
    rng = random.Random(8)
    for _ in range(20):
        ring = random_ring(rng)
        metadata = ring.token_metadata()
        options = {dc: str(f) for dc, f in ring.factors_by_dc.items()}
        replica_map = ReplicaMap(
            replication_strategy({"class": "NetworkTopologyStrategy", **options}), metadata
        )
        ownership = replica_map.effective_ownership()
        for dc, hosts in metadata.datacenters().items():
            total = sum(ownership[metadata.host_index(h)] for h in hosts)
            assert total == pytest.approx(min(ring.factors_by_dc[dc], len(hosts)))


def test_effective_ownership_equals_the_drivers_replica_sets() -> None:
    rng = random.Random(12)
    checked = 0
    while checked < 15:
        ring = random_ring(rng)
        if not ring.driver_trusted_for_nts():
            continue
        metadata = ring.token_metadata()
        options = {dc: str(f) for dc, f in ring.factors_by_dc.items()}
        driver = DriverRing(ring.tokens_by_host)
        keyspace = driver.keyspace("NetworkTopologyStrategy", options)
        expected = np.zeros(len(metadata.hosts))
        for index, token in enumerate(metadata.sorted_tokens):
            size = metadata.range_ending_at(index).size
            for replica in driver.replicas(keyspace, token):
                expected[metadata.host_index(replica)] += size
        replica_map = ReplicaMap(
            replication_strategy({"class": "NetworkTopologyStrategy", **options}), metadata
        )
        np.testing.assert_allclose(replica_map.effective_ownership(), expected, rtol=1e-12)
        checked += 1
