"""Merkle-tree anti-entropy repair in ``ringflow.sim`` (issue 21 §2: ``build_node`` builds the
node's ``RepairService`` for the simulator as for a process; its asyncio shell runs on a
``ClockLoop`` over the simulated clock, so validation, the sync plan, streaming and the history
rows run the same code under the simulator's network, clock and crashes).

Three simulated nodes (``test_cluster_sim``'s layout) hold ``ks.kv`` (CDC on) at RF 3, written
at QUORUM. Then the replicas are made to differ behind the cluster's back (rows written into
one store only, a newer value on another, a deletion on the third) and n2 repairs the keyspace:

* with messages delayed and reordered, every range is repaired, exactly the differing
  partitions stream, and afterwards the three stores hold the same partitions (base table and
  CDC log), with no CDC log row made by the repair (origin REPAIR); a second repair finds
  nothing to stream; the history rows reach every replica.
* a replica that crashes mid-repair fails the ranges after its crash (each naming it), the
  ranges before stay repaired, and the repair ends instead of waiting; restarted, a repair
  brings it level.
* seeded (``run_scenario``, ``make sim SCENARIO=repair``): random divergence (newer values,
  deletions, rows on some replicas only), then a repair from a random node under message
  delays, drops and reordering, half the time with a replica crashed at a random moment.
  The repair ends; its summary accounts for every range (repaired or failed with a reason);
  without a crash it fails no range and levels the replicas (lost messages are sent again);
  once healed, a second repair fails nothing, every replica holds exactly the newest version
  of every partition (base table) and the CDC log rows of the acknowledged writes only.
"""

from __future__ import annotations

import asyncio
import random
import struct
import uuid
from collections.abc import Callable

import pytest

from ringflow.cdc import CdcMetadata
from ringflow.cluster._coordinator import prepare_cdc_write
from ringflow.cluster._digest import validation_digest
from ringflow.cluster._messages import Verb
from ringflow.cluster._repair_plan import RepairOptions, RepairSummary
from ringflow.cluster.service import BuiltNode
from ringflow.cluster.service._node import ClusterNode
from ringflow.cluster.service._repair import RESEND_AFTER_S
from ringflow.cql import DISTRIBUTED_TABLES
from ringflow.ring import MIN_TOKEN
from ringflow.runtime import Runtime
from ringflow.schema import DeletionTime, Mutation
from ringflow.sim import NetworkConfig, Simulation
from tests.sim._harness import (
    NAMES,
    QUORUM,
    all_alive,
    check_acting_node,
    create_cdc_table,
    endpoint,
    kv_key,
    kv_write,
    open_store,
    random_faults,
    sim_host,
    start_layout_node,
)
from tests.sim._seeds import ci_seeds

pytestmark = pytest.mark.timeout(300)
_NAMESPACE = uuid.UUID("6f1d2c3b-4a5e-4f60-9b7c-8d9e0a1b2c3d")
TABLES = ("kv", "kv_scylla_cdc_log")
WRITTEN = 40


class Cluster:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.built: dict[str, BuiltNode] = {}
        self.cdc: dict[str, CdcMetadata] = {}

    def factory(self, name: str) -> Callable[[Runtime], BuiltNode]:
        host = sim_host(_NAMESPACE, name, endpoint(name))

        def make(runtime: Runtime) -> BuiltNode:
            built, cdc = start_layout_node(runtime, name, host, open_store(runtime))
            self.built[name], self.cdc[name] = built, cdc
            return built

        return make

    def up(self, names: tuple[str, ...] = NAMES) -> None:
        nodes = {name: built.cluster for name, built in self.built.items()}
        assert self.sim.run_until_true(
            lambda: all_alive(nodes, names, endpoint), timeout_ms=120_000
        ), self.sim.describe()

    def held(self, name: str, table: str) -> dict[tuple[bytes, ...], bytes]:
        """Every partition of ``ks.<table>`` in ``name``'s store, by key: its digest."""
        page = self.built[name].cluster.store.scan_mutations(
            ("ks", table), MIN_TOKEN, MIN_TOKEN, page_size=10_000
        )
        return {m.partition_key: validation_digest(m) for m in page.mutations}

    def level(self) -> bool:
        return all(
            self.held("n1", table) == self.held(name, table) for table in TABLES for name in NAMES
        )

    def repair(
        self, through: str, progress: Callable[[str, int, int], None] | None = None
    ) -> asyncio.Task[RepairSummary]:
        """Start a repair of keyspace ks coordinated by ``through``: its task."""
        service = self.built[through].repair
        return service.loop.create_task(service.submit(RepairOptions("ks"), progress))

    def finish(self, task: asyncio.Task[RepairSummary]) -> RepairSummary:
        assert self.sim.run_until_true(task.done, timeout_ms=600_000), self.sim.describe()
        return task.result()


def _boot(sim: Simulation) -> Cluster:
    """The three nodes, n3's clock 2.5 s ahead (within the CDC leeway), ``ks.kv`` written at
    QUORUM with its CDC log rows, every replica level (base and log, compared by digest)."""
    cluster = Cluster(sim)
    check_acting_node(sim)
    for name in NAMES:
        sim.add_process(name, cluster.factory(name))
    sim.set_skew_ms("n3", 2_500)
    cluster.up()
    n1 = cluster.built["n1"].cluster
    create_cdc_table(cluster.built["n1"])
    assert sim.run_until_true(
        lambda: len({b.cluster.processor.schema_version for b in cluster.built.values()}) == 1,
        timeout_ms=60_000,
    )
    rng = random.Random(7)
    for key in range(WRITTEN):  # with their CDC log rows, as the statement path writes them
        outcome: list[BaseException | None] = []
        ts_us = n1.clock.now_us()
        mutation = kv_write(key, key, ts_us)
        capture = prepare_cdc_write(
            mutation,
            n1.processor.schema.tables[("ks", "kv")],
            ts_us,
            ts_us,
            cluster.cdc["n1"],
            rng,
            token_metadata=n1.membership.token_metadata,
            strategy=n1.placement.strategy_of("ks"),
        )
        n1.write([mutation], {0: capture}, QUORUM, outcome.append)
        assert sim.run_until_true(lambda o=outcome: bool(o), timeout_ms=30_000)
        assert outcome[0] is None
    # the third replica too, with the same log rows: their TTL counts from the coordinator's
    # clock (CdcCapture.now_s), not each replica's (n3's rows expired 2-3 s later before)
    assert sim.run_until_true(cluster.level, timeout_ms=60_000)
    return cluster


def _diverge(cluster: Cluster) -> int:
    """Make the replicas differ behind the cluster's back; how many partitions the repair
    streams: each once to every replica lacking its version (Cassandra's symmetric sync). A
    row only n1 has goes to n2 and n3 (10 x 2); a partition one replica holds differently
    (a newer value on n2, a deletion on n3) goes both ways: to the other two, and theirs to
    it (2 x 3)."""
    stores = {name: cluster.built[name].cluster.store for name in NAMES}
    now_us = cluster.built["n1"].cluster.clock.now_us()
    now_s = now_us // 1_000_000
    stores["n1"].apply([kv_write(1000 + k, k, now_us) for k in range(10)], now_s=now_s)
    stores["n2"].apply([kv_write(3, 333, now_us)], now_s=now_s)
    deleted = Mutation("ks", "kv", kv_key(5), partition_deletion=DeletionTime(now_us, now_s))
    stores["n3"].apply([deleted], now_s=now_s)
    return 10 * 2 + 2 * 3


def _log_rows(cluster: Cluster, name: str) -> int:
    page = cluster.built[name].cluster.store.scan_mutations(
        ("ks", "kv_scylla_cdc_log"), MIN_TOKEN, MIN_TOKEN, page_size=10_000
    )
    return sum(len(m.rows) for m in page.mutations)


def test_a_repair_in_the_simulator_brings_every_replica_level() -> None:
    with Simulation(21) as sim:
        cluster = _boot(sim)
        logs_before = {name: _log_rows(cluster, name) for name in NAMES}
        assert logs_before == dict.fromkeys(NAMES, WRITTEN)
        differing = _diverge(cluster)
        assert not cluster.level()
        sim.configure_network(  # messages late (up to 20 ms) and out of order
            NetworkConfig(
                delay_us_min=200,
                delay_us_max=20_000,
                delay_distribution="exponential",
                reorder=True,
            )
        )
        summary = cluster.finish(cluster.repair("n2"))
        assert summary.failed_ranges == 0, summary.to_json()
        base = next(t for t in summary.tables if t.table == "kv")
        assert base.ranges == base.ranges_repaired > 0
        assert base.partitions_differing == base.partitions_streamed == differing
        assert cluster.level()
        assert {name: _log_rows(cluster, name) for name in NAMES} == logs_before
        held = cluster.held("n1", "kv")
        assert len(held) == WRITTEN + 10

        again = cluster.finish(cluster.repair("n3"))
        assert again.failed_ranges == 0
        assert sum(t.partitions_streamed for t in again.tables) == 0

        parents = DISTRIBUTED_TABLES[("system_distributed", "parent_repair_history")]
        repairs = {uuid.UUID(summary.id), uuid.UUID(again.id)}

        def recorded(name: str) -> set[uuid.UUID]:
            store = cluster.built[name].cluster.store
            page = store.scan_mutations(parents, MIN_TOKEN, MIN_TOKEN, page_size=100)
            return {uuid.UUID(bytes=m.partition_key[0]) for m in page.mutations}

        # written at QUORUM: on two replicas when the repair ends, on the third soon after
        assert sum(repairs <= recorded(name) for name in NAMES) >= 2
        assert sim.run_until_true(
            lambda: all(repairs <= recorded(name) for name in NAMES), timeout_ms=10_000
        )


def test_a_replica_crashing_mid_repair_fails_the_ranges_after_it_and_the_repair_ends() -> None:
    with Simulation(22) as sim:
        cluster = _boot(sim)
        _diverge(cluster)
        done: list[tuple[str, int, int]] = []
        task = cluster.repair("n1", lambda table, n, total: done.append((table, n, total)))
        assert sim.run_until_true(lambda: len(done) >= 2, timeout_ms=600_000)
        sim.crash("n3")
        summary = cluster.finish(task)
        base = next(t for t in summary.tables if t.table == "kv")
        assert base.ranges_repaired >= 2 and base.ranges_failed
        assert base.ranges_repaired + len(base.ranges_failed) == base.ranges
        assert all(endpoint("n3") in problem for _, problem in base.ranges_failed)

        sim.restart("n3")
        cluster.up()
        summary = cluster.finish(cluster.repair("n1"))
        assert summary.failed_ranges == 0, summary.to_json()
        assert cluster.level()


def test_a_lost_request_and_a_lost_answer_are_sent_again_not_waited_for() -> None:
    """A REPAIR_REQ lost on its way to n3 and a REPAIR_RSP lost on its way back from n2 (a
    connection reset, a dropped message): the coordinator sends the request again after
    ``RESEND_AFTER_S`` with the same id, and the repair completes. Before, each loss failed
    its range after the 600 s validation timeout ("did not answer in 600 s")."""
    with Simulation(23) as sim:
        cluster = _boot(sim)
        differing = _diverge(cluster)
        lost: list[str] = []
        _lose_first(cluster.built["n1"].cluster, Verb.REPAIR_REQ, endpoint("n3"), lost)
        _lose_first(cluster.built["n2"].cluster, Verb.REPAIR_RSP, endpoint("n1"), lost)
        started_ms = sim.now_ms()
        summary = cluster.finish(cluster.repair("n1"))
        assert sorted(lost) == ["REPAIR_REQ", "REPAIR_RSP"]
        assert summary.failed_ranges == 0, summary.to_json()
        base = next(t for t in summary.tables if t.table == "kv")
        assert base.partitions_streamed == differing
        assert cluster.level()
        assert cluster.built["n1"].repair.resent >= 2
        assert sim.now_ms() - started_ms < 2 * RESEND_AFTER_S * 1000 + 10_000


def _lose_first(node: ClusterNode, verb: Verb, to: str, lost: list[str]) -> None:
    """``node``'s first ``verb`` message to ``to`` is lost (sent, as far as it knows)."""
    send = node.messenger.send

    def send_or_lose(target: str, sent_verb: Verb, request_id: int, payload: bytes) -> bool:
        if sent_verb == verb and target == to and verb.name not in lost:
            lost.append(verb.name)
            return True
        return send(target, sent_verb, request_id, payload)

    node.messenger.send = send_or_lose  # type: ignore[method-assign]


SEEDS = ci_seeds((), per_run=4, pool=2_000)
"""Seeded repairs a CI run covers (about 5 s each); ``make sim SCENARIO=repair`` runs more."""


@pytest.mark.parametrize("seed", SEEDS)
def test_seeded_repairs_under_faults_leave_every_replica_with_the_newest_versions(
    seed: int,
) -> None:
    """The checks of the module docstring's seeded scenario."""
    run_scenario(seed)


def run_scenario(seed: int) -> None:
    with Simulation(seed) as sim:
        rng = random.Random(seed * 7919 + 3)
        cluster = _boot(sim)
        newest = {key: (key, 0) for key in range(WRITTEN)}  # key -> (value or None, ts)
        now_us = cluster.built["n1"].cluster.clock.now_us()
        for change in range(12):  # behind the cluster's back, each on some replicas only
            key = rng.randrange(WRITTEN + 6)
            holders = rng.sample(NAMES, rng.randint(1, 2))
            ts_us, now_s = now_us + change + 1, now_us // 1_000_000
            if rng.random() < 0.3:
                mutation = Mutation(
                    "ks", "kv", kv_key(key), partition_deletion=DeletionTime(ts_us, now_s)
                )
                version: tuple[int | None, int] = (None, ts_us)
            else:
                value = rng.randrange(10_000)
                mutation, version = kv_write(key, value, ts_us), (value, ts_us)
            for name in holders:
                cluster.built[name].cluster.store.apply([mutation], now_s=now_s)
            newest[key] = max(newest.get(key, version), version, key=lambda v: v[1])

        sim.configure_network(random_faults(rng, (2_000, 30_000), (0.0, 0.005, 0.02)))
        coordinator = rng.choice(NAMES)
        task = cluster.repair(coordinator)
        victim = rng.choice([n for n in NAMES if n != coordinator]) if rng.random() < 0.5 else None
        crash = (
            None
            if victim is None
            else sim.after(rng.randrange(0, 1_000), lambda: sim.crash(victim))
        )
        assert sim.run_until_true(task.done, timeout_ms=4 * 3_600_000), sim.describe()
        if crash is not None:
            crash.cancel()  # the repair may end first
        first = task.result()
        crashed = victim is not None and not sim.process(victim).running
        if not crashed:  # drops and delays only: lost messages are sent again, nothing fails
            assert first.failed_ranges == 0, first.to_json()
            assert cluster.level(), sim.describe()
        for table in first.tables:
            assert table.ranges_repaired + len(table.ranges_failed) == table.ranges, first.to_json()
            assert all(problem for _, problem in table.ranges_failed), first.to_json()

        sim.heal()
        sim.configure_network(NetworkConfig())
        if victim is not None and not sim.process(victim).running:
            sim.restart(victim)
        cluster.up()
        second = cluster.finish(cluster.repair(coordinator))
        assert second.failed_ranges == 0, second.to_json()
        assert cluster.level(), sim.describe()
        for name in NAMES:
            node = cluster.built[name].cluster
            table, now_s = node.processor.schema.tables[("ks", "kv")], node.clock.now_ms() // 1000
            for key, (value, _ts) in newest.items():
                rows = node.store.read_partition(table, kv_key(key), now_s=now_s)
                found = [_int_of(row.values.get("v")) for row in rows]
                expected = [] if value is None else [value]
                assert found == expected, f"{name} key {key}: {found} != {expected}; seed {seed}"
            assert _log_rows(cluster, name) == WRITTEN, name


def _int_of(value: bytes | None) -> int | None:
    return None if value is None else int(struct.unpack(">i", value)[0])
