"""A coordinated batch reaches each replica as one write unit per set of replicas, not one per
partition (issue 14 §5: a hub pays one write for a batch of many partitions), and nothing of it
is lost on the way: every partition's value and CDC log row (in the stream the coordinator
chose, each capture with its own mutation) on every replica, the replica-side capture equal to
the log, every value read back at QUORUM. Also when a replica is down for the batch (its share
goes as one hint and is replayed) and on an RF 1 keyspace (one unit per owner). Seeded
simulation of the real ClusterNode (tests/sim/test_cluster_sim).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from ringflow.cluster._coordinator import base_token, prepare_cdc_write
from tests.sim._harness import NAMES, QUORUM, built_node, ddl, kv_key, kv_value, kv_write
from tests.sim.test_cluster_sim import SimCluster, boot, check_capture, check_cdc_log, read_back

KEYS = range(40)


def _units_applied(cluster: SimCluster) -> dict[str, int]:
    return {name: cluster.node(name).requests.group_commit.units for name in NAMES}


@pytest.mark.parametrize("seed", [11, 12])
def test_a_batch_of_many_partitions_goes_as_one_unit_per_replica_set(seed: int) -> None:
    sim, cluster = boot(seed)
    with sim:
        n1 = cluster.node("n1")
        now_us = n1.clock.now_us()
        batch = [kv_write(key, key + 1000, now_us) for key in KEYS]
        orders = {n1.placement.replicas_of("ks", base_token(m)).natural for m in batch}
        before = _units_applied(cluster)
        table = n1.processor.schema.tables[("ks", "kv")]
        captures = {
            index: prepare_cdc_write(
                mutation,
                table,
                now_us,
                now_us,
                cluster.cdc["n1"],
                sim.rng,
                token_metadata=n1.membership.token_metadata,
                strategy=n1.placement.strategy_of("ks"),
            )
            for index, mutation in enumerate(batch)
        }
        outcome: list[BaseException | None] = []
        n1.write(batch, captures, QUORUM, outcome.append)
        assert sim.run_until_true(lambda: bool(outcome), timeout_ms=10_000), sim.describe()
        assert outcome == [None], sim.describe()
        sim.run_for(2_000)  # the third replica's share too
        after = _units_applied(cluster)
        # RF 3 on 3 nodes: every partition on every node, one unit per replica order
        assert 1 <= len(orders) <= 3
        assert {name: after[name] - before[name] for name in NAMES} == {
            name: len(orders) for name in NAMES
        }
        streams = {key: captures[index].stream_id for index, key in enumerate(KEYS)}
        check_cdc_log(cluster, streams, sim)
        check_capture(cluster, sim)
        for name in NAMES:
            stored = cluster.node(name).store
            assert all(
                kv_value(stored.read_mutation(("ks", "kv"), kv_key(key))) == key + 1000
                for key in KEYS
            ), name
        assert read_back(sim, cluster.node("n2"), list(KEYS)) == {k: k + 1000 for k in KEYS}


def test_an_rf1_batch_goes_as_one_unit_per_owner() -> None:
    sim, cluster = boot(13)
    with sim:
        n1 = cluster.node("n1")
        ddl(
            built_node(sim, "n1"),
            "CREATE KEYSPACE one WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        )
        ddl(built_node(sim, "n1"), "CREATE TABLE one.kv (k int PRIMARY KEY, v int)")
        assert sim.run_until_true(cluster.agreed, timeout_ms=60_000), sim.describe()
        now_us = n1.clock.now_us()
        batch = [replace(kv_write(key, key, now_us), keyspace="one") for key in KEYS]
        owners = {n1.placement.replicas_of("one", base_token(m)).natural for m in batch}
        assert len(owners) == 3
        before = _units_applied(cluster)
        outcome: list[BaseException | None] = []
        n1.write(batch, {}, QUORUM, outcome.append)
        assert sim.run_until_true(lambda: bool(outcome), timeout_ms=10_000), sim.describe()
        assert outcome == [None], sim.describe()
        after = _units_applied(cluster)
        assert {name: after[name] - before[name] for name in NAMES} == dict.fromkeys(NAMES, 1)
        for key, mutation in zip(KEYS, batch, strict=True):
            (owner,) = n1.placement.replicas_of("one", base_token(mutation)).natural
            name = NAMES[[cluster.node(n).host for n in NAMES].index(owner)]
            value = cluster.node(name).store.read_mutation(("one", "kv"), kv_key(key))
            assert kv_value(value) == key, (key, name)


@pytest.mark.parametrize("limit", [{"max_batch_mutations": 8}, {"max_batch_cells": 5}])
def test_units_are_cut_at_the_store_batch_limits(limit: dict[str, int]) -> None:
    """With the coordinator's store allowing 8 mutations (or 5 cells: a write here is one
    cell) a batch, each replica order's partitions go in units of at most that many."""
    sim, cluster = boot(15)
    with sim:
        n1 = cluster.node("n1")
        n1.store.limits = replace(n1.store.limits, **limit)
        now_us = n1.clock.now_us()
        batch = [kv_write(key, key + 3, now_us) for key in KEYS]
        per_order = Counter(n1.placement.replicas_of("ks", base_token(m)).natural for m in batch)
        size = next(iter(limit.values()))
        expected = sum(-(-count // size) for count in per_order.values())
        before = _units_applied(cluster)
        outcome: list[BaseException | None] = []
        n1.write(batch, {}, QUORUM, outcome.append)
        assert sim.run_until_true(lambda: bool(outcome), timeout_ms=10_000), sim.describe()
        assert outcome == [None], sim.describe()
        sim.run_for(2_000)
        after = _units_applied(cluster)
        assert {name: after[name] - before[name] for name in NAMES} == dict.fromkeys(
            NAMES, expected
        )
        assert read_back(sim, n1, list(KEYS)) == {k: k + 3 for k in KEYS}


def test_a_replica_down_for_a_batch_gets_its_share_as_a_hint() -> None:
    sim, cluster = boot(14)
    with sim:
        n1 = cluster.node("n1")
        sim.crash("n3")
        assert sim.run_until_true(
            lambda: not n1.gossiper.is_alive("10.0.0.3:7000"), timeout_ms=60_000
        )
        now_us = n1.clock.now_us()
        batch = [kv_write(key, key + 7, now_us) for key in KEYS]
        outcome: list[BaseException | None] = []
        n1.write(batch, {}, QUORUM, outcome.append)
        assert sim.run_until_true(lambda: bool(outcome), timeout_ms=10_000), sim.describe()
        assert outcome == [None], sim.describe()
        sim.restart("n3")
        sim.run_for(120_000)
        n3 = cluster.node("n3").store
        missing = [
            key for key in KEYS if kv_value(n3.read_mutation(("ks", "kv"), kv_key(key))) != key + 7
        ]
        assert not missing, f"n3 misses hinted writes {missing}: {n1.hints.story()[-4:]}"
