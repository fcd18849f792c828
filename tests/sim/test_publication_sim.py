"""Publication of sealed slices and seal watermarks in ``ringflow.sim`` (issue 14 §1): three
simulated nodes run their replica capture with the node side of transmission
(``CaptureServices``: channel watch, publication; synch-delete off) under message drops,
delays, reordering, a partition and a crash/restart, with CDC writes at QUORUM.

Proves, per seed: whenever a QUORUM read of ``system_replication.seal_watermarks`` followed by
one of ``system_replication.slices`` succeeds (through any running node, during the faults
and after), every slice a node holds sealed and due at or before its watermark is in the
slices read, with its digest and row count: the planner's rule 2 ("a reader that sees a
watermark sees the slices") holds under faults. After healing, every slice of every node is
sealed and published, and its published copy is what the node holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from ringflow.cdc import CdcMetadata, GenerationsNotLearnt
from ringflow.cluster._coordinator import prepare_cdc_write
from ringflow.cluster.service import BuiltNode
from ringflow.cluster.service._cdc_tables import RowValues, scan_rows
from ringflow.cluster.service._node import ClusterNode
from ringflow.cql import DISTRIBUTED_TABLES
from ringflow.replication import (
    REPLICATION_KEYSPACE,
    SLICES_TABLE,
    WATERMARKS_TABLE,
    SealedSlice,
    SliceKey,
    sealed_slice_from_row,
    watermark_from_row,
)
from ringflow.runtime import Runtime
from ringflow.sim import NetworkConfig, Simulation
from tests.sim._harness import (
    NAMES,
    QUORUM,
    SIM_CAPTURE,
    all_alive,
    built_node,
    create_cdc_table,
    endpoint,
    kv_write,
    open_store,
    random_faults,
    sim_host,
    start_layout_node,
)
from tests.sim._seeds import ci_seeds

pytestmark = pytest.mark.timeout(120)
SEEDS = ci_seeds((), per_run=5, pool=500)
_NAMESPACE = uuid.UUID("6f1d2a4e-6a53-4c59-9d0e-3e5f1f0f7a12")
SETTINGS = SIM_CAPTURE.__class__(**{**SIM_CAPTURE.as_dict(), "drop_sent_slices": False})
SLICES = DISTRIBUTED_TABLES[REPLICATION_KEYSPACE, SLICES_TABLE]
WATERMARKS = DISTRIBUTED_TABLES[REPLICATION_KEYSPACE, WATERMARKS_TABLE]


@dataclass
class PublishingCluster:
    sim: Simulation
    nodes: dict[str, ClusterNode] = field(default_factory=dict)
    cdc: dict[str, CdcMetadata] = field(default_factory=dict)
    checks: int = 0

    def factory(self, name: str) -> Callable[[Runtime], BuiltNode]:
        host = sim_host(_NAMESPACE, name, endpoint(name))

        def make(runtime: Runtime) -> BuiltNode:
            store = open_store(runtime)
            built, self.cdc[name] = start_layout_node(
                runtime, name, host, store, capture=SETTINGS, transmission=True
            )
            self.nodes[name] = built.cluster
            return built

        return make

    def running(self) -> list[str]:
        return [p.name for p in self.sim.processes if p.running]

    def all_up(self) -> bool:
        return all_alive(self.nodes, self.running(), endpoint)

    def agreed(self) -> bool:
        nodes = [self.nodes[name] for name in self.running()]
        return len({n.processor.schema_version for n in nodes}) == 1 and all(
            ("ks", "kv") in n.processor.schema.tables for n in nodes
        )

    def check(self) -> None:
        """Read the watermarks, then the slices, at QUORUM through a running node; if both
        answer, check the promise of every watermark read (module docstring)."""
        reader = self.nodes[self.sim.rng.choice(self.running())]

        def marks_read(rows: list[RowValues] | None, error: BaseException | None) -> None:
            if error is None and rows is not None:
                scan_rows(
                    reader, SLICES, QUORUM, lambda found, e: self._slices_read(rows, found, e)
                )

        scan_rows(reader, WATERMARKS, QUORUM, marks_read)

    def _slices_read(
        self, marks: list[RowValues], rows: list[RowValues] | None, error: BaseException | None
    ) -> None:
        if error is not None or rows is None:
            return
        published = {(c.node, c.key): c for c in map(sealed_slice_from_row, rows)}
        by_host = {node.host.host_id: name for name, node in self.nodes.items()}
        for mark in map(watermark_from_row, marks):
            name = by_host[mark.node]
            if name not in self.running():
                continue
            for held in self.nodes[name].store.capture.slices(sealed=True, limit=10_000):
                if held.due_ms <= mark.sealed_through_ms:
                    copy = published.get((mark.node, held.key))
                    expected = held.sealed_slice(mark.node)
                    assert _same(copy, expected), (
                        f"{name}'s watermark {mark.sealed_through_ms} passed {held.key} (due "
                        f"{held.due_ms}) but its published copy is {copy}; {self.sim.describe()}"
                    )
        self.checks += 1


def _same(copy: SealedSlice | None, expected: SealedSlice) -> bool:
    return copy is not None and (copy.digest, copy.row_count) == (
        expected.digest,
        expected.row_count,
    )


def write_under_faults(cluster: PublishingCluster, count: int, duration_ms: int) -> None:
    sim, rng = cluster.sim, cluster.sim.rng
    for index in range(count):

        def issue(key: int = index) -> None:
            name = rng.choice(cluster.running())
            node = cluster.nodes[name]
            ts_us = node.clock.now_us()
            mutation = kv_write(key, rng.randrange(1 << 30), ts_us)
            try:
                capture = prepare_cdc_write(
                    mutation, node.processor.schema.tables[("ks", "kv")], ts_us, ts_us,
                    cluster.cdc[name], rng, token_metadata=node.membership.token_metadata,
                    strategy=node.placement.strategy_of("ks"),
                )  # fmt: skip
            except GenerationsNotLearnt:  # just restarted: a client tries elsewhere
                return
            node.write([mutation], {0: capture}, QUORUM, lambda _error: None)

        sim.after(rng.randrange(0, duration_ms), issue)


def all_published(cluster: PublishingCluster) -> bool:
    for name in NAMES:
        capture = cluster.nodes[name].store.capture
        if capture.slices(sealed=False, limit=1) or capture.unpublished(limit=1):
            return False
    return True


def run_scenario(seed: int) -> int:
    """Boot, write and check under faults, heal, check; the number of successful checks."""
    with Simulation(seed) as sim:
        cluster = PublishingCluster(sim)
        for name in NAMES:
            sim.add_process(name, cluster.factory(name))
        assert sim.run_until_true(cluster.all_up, timeout_ms=60_000), sim.describe()
        create_cdc_table(built_node(sim, "n1"))
        assert sim.run_until_true(cluster.agreed, timeout_ms=60_000), sim.describe()
        rng = sim.rng
        sim.configure_network(random_faults(rng, (2_000, 50_000, 400_000), (0.0, 0.02, 0.1)))
        victim = rng.choice(NAMES)
        crash_at = rng.randrange(5_000, 25_000)
        sim.after(crash_at, lambda: sim.crash(victim))
        sim.after(crash_at + rng.randrange(5_000, 20_000), lambda: sim.restart(victim))
        cut = rng.choice(NAMES)
        cut_at = rng.randrange(0, 40_000)
        sim.after(cut_at, lambda: sim.partition([cut], [n for n in NAMES if n != cut]))
        sim.after(cut_at + rng.randrange(1_000, 15_000), sim.heal)
        write_under_faults(cluster, 40, 40_000)
        for at_ms in range(3_000, 60_000, 3_000):
            sim.after(at_ms, cluster.check)
        sim.run_for(60_000)
        sim.heal()
        sim.configure_network(NetworkConfig())
        for name in NAMES:
            if not sim.process(name).running:
                sim.restart(name)
        assert sim.run_until_true(cluster.all_up, timeout_ms=60_000), sim.describe()
        assert sim.run_until_true(lambda: all_published(cluster), timeout_ms=60_000), (
            f"slices left open or unpublished; {sim.describe()}"
        )
        before = cluster.checks
        cluster.check()
        assert sim.run_until_true(lambda: cluster.checks > before, timeout_ms=30_000)
        final_read(cluster)
        return cluster.checks


def final_read(cluster: PublishingCluster) -> None:
    """After healing: every node's every slice is published as it holds it."""
    found: list[list[RowValues]] = []
    reader = cluster.nodes["n1"]
    scan_rows(reader, SLICES, QUORUM, lambda rows, error: found.append(rows or []))
    assert cluster.sim.run_until_true(lambda: bool(found), timeout_ms=30_000)
    published = {(c.node, c.key): c for c in map(sealed_slice_from_row, found[0])}
    for node in cluster.nodes.values():
        held: dict[SliceKey, Any] = {
            s.key: s.sealed_slice(node.host.host_id)
            for s in node.store.capture.slices(limit=10_000)
        }
        assert held, "every node captured rows"
        for key, expected in held.items():
            assert _same(published.get((node.host.host_id, key)), expected), key


@pytest.mark.parametrize("seed", SEEDS)
def test_a_watermark_read_means_its_slices_are_readable(seed: int) -> None:
    assert run_scenario(seed) >= 2  # the final check, and at least one more
