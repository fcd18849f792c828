"""Seed 004's failure cases in ``ringflow.sim``: a node crashing after each step of a DDL.

Three simulated nodes run the real ``ClusterNode`` over a real SQLite ``Store`` and
``QueryProcessor`` (the set-up of ``test_cluster_sim``). Crash points come from the node's own
seam, ``schema_observer``: at the chosen ``SchemaStep`` the observer crashes the process (its
memory, timers and in-flight messages lost, its disk kept) and raises ``Crashed`` out of the
step, so nothing after that step runs; the process restarts a few seconds later. A crash before
the local commit comes from the store itself (a ``Store`` whose write of the migration crashes
the process first).

Seed 004, "Handling Failure" (steps 2-5, the schema rows, the migration and the version, are one
SQLite transaction in ringflow, step 6 the tables registered before it):

* ``test_crash_before_the_migration_is_persisted``: 1. nothing applied, the update fails
  outright; the cluster stays on the old version and the same DDL works again afterwards.
* ``test_crash_after_persisting_before_announcing``: 5./6. start-up happens normally and
  the new version reaches every node ("Starting Up": gossip shows the mismatch, peers pull).
* ``test_crash_after_announcing_before_push``, ``test_crash_during_push``: announce/push
  interrupted ("Definition Promulgation"); the pull on mismatch completes it.
* ``test_receiver_crashes_before_merging``, ``test_receiver_crashes_after_persisting_merge``:
  a peer dies with the push in hand, or after persisting it but before reloading/gossiping.
* ``test_node_down_during_ddl_crashes_during_pull``: a node down during the DDL, which then
  crashes while pulling the schema after its restart ("a node that was down").
* ``test_concurrent_ddl_on_two_nodes``: "Concurrency": two DDLs at once on two nodes (different
  tables, and the same table created on both).

After each case (``assert_converged``): every node on the same schema version digest (also as
gossiped), the same keyspaces, tables (ids, columns), every store registering exactly the
schema's tables, each node's stored migration chain intact (it loads: no fork, no gap; no
version twice) and no migration applied twice (every migration stored on exactly one node, as
many as the DDLs that committed); after a crash/restart of every node the versions do not
change; and the table takes a QUORUM write read back at QUORUM through every node.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from ringflow.cluster.service import BuiltNode
from ringflow.cluster.service._node import ClusterNode, SchemaStep
from ringflow.cql._exec_system import load_migrations
from ringflow.runtime import Runtime
from ringflow.schema import Cell, Mutation, Row
from ringflow.sim import Simulation
from ringflow.storage import Store
from tests.sim._harness import (
    KEYSPACE_RF3,
    NAMES,
    QUORUM,
    all_alive,
    built_node,
    ddl,
    endpoint,
    kv_key,
    open_store,
    sim_host,
    start_layout_node,
)

pytestmark = pytest.mark.timeout(180)
RESTART_AFTER_MS = 3_000
CONVERGE_MS = 60_000
_NAMESPACE = uuid.UUID("5f0c7e1a-2b43-4f7e-9a61-0d3c2e8b9a10")
KEYSPACE = KEYSPACE_RF3
TABLE = "CREATE TABLE ks.t (k int PRIMARY KEY, v int)"


class Crashed(BaseException):
    """Raised out of a step after the process crashed there: nothing after the step runs
    (a BaseException, so no ``except Exception`` of the node code swallows it)."""


@dataclass
class CrashPlan:
    """Crash ``node`` the ``occurrence``-th time it reaches ``step`` (detail ``peer``, if given)."""

    node: str
    step: SchemaStep | str
    peer: str | None = None
    occurrence: int = 1
    seen: int = 0
    fired: bool = False


@dataclass
class SchemaCluster:
    sim: Simulation
    plans: list[CrashPlan] = field(default_factory=list)
    nodes: dict[str, ClusterNode] = field(default_factory=dict)

    def factory(self, name: str) -> Callable[[Runtime], BuiltNode]:
        host = sim_host(_NAMESPACE, name, endpoint(name))

        def make(runtime: Runtime) -> BuiltNode:
            store = open_store(runtime, CrashingStore)
            store.crash = lambda: self._crash_point(name, "persist", "")
            observer = functools.partial(self._crash_point, name)
            built, _cdc = start_layout_node(runtime, name, host, store, schema_observer=observer)
            self.nodes[name] = built.cluster
            return built

        return make

    def _crash_point(self, name: str, step: SchemaStep | str, detail: str) -> None:
        for plan in self.plans:
            if plan.fired or plan.node != name or plan.step != step:
                continue
            if plan.peer is not None and detail != endpoint(plan.peer):
                continue
            plan.seen += 1
            if plan.seen == plan.occurrence:
                plan.fired = True
                self.sim.note(f"crash {name} at {step} {detail}")
                self.sim.crash(name)
                self.sim.after(RESTART_AFTER_MS, lambda: self.sim.restart(name))
                raise Crashed

    def running(self) -> list[str]:
        return [p.name for p in self.sim.processes if p.running]

    def run_until(self, predicate: Callable[[], bool], timeout_ms: int = CONVERGE_MS) -> bool:
        """``sim.run_until_true``, carrying on through planned crashes."""
        deadline = self.sim.now_ms() + timeout_ms
        while True:
            try:
                return self.sim.run_until_true(
                    predicate, timeout_ms=max(0, deadline - self.sim.now_ms())
                )
            except Crashed:
                continue

    def all_up(self) -> bool:
        running = self.running()
        return len(running) == len(NAMES) and all_alive(self.nodes, running, endpoint)

    def agreed(self) -> bool:
        if not self.all_up():
            return False
        versions = {str(self.nodes[n].processor.schema_version) for n in NAMES}
        return len(versions) == 1 and all(self.nodes[n].state.schema_agreement() for n in NAMES)

    def ddl(self, name: str, text: str) -> bool:
        """Run ``text`` on ``name`` as a client would; False if the node crashed before it
        announced the change (the statement path announces it in a 0 ms step of the node, and
        pushes it in the same step: a crash there comes after the announcement)."""
        try:
            ddl(built_node(self.sim, name), text)
        except Crashed:
            return False
        try:
            self.sim.run_for(0)
        except Crashed:
            return not any(
                plan.fired and plan.node == name and plan.step == SchemaStep.ANNOUNCE
                for plan in self.plans
            )
        return True


class CrashingStore(Store):
    """A real store whose write of a DDL's migration crashes the process first, when planned
    (``crash`` raises ``Crashed`` then; otherwise it returns and the write goes on)."""

    crash: Callable[[], None] = staticmethod(lambda: None)

    def apply(self, mutations, *args, **kwargs):  # type: ignore[no-untyped-def,override]
        if any((m.keyspace, m.table) == ("system", "schema_migrations") for m in mutations):
            self.crash()
        return super().apply(mutations, *args, **kwargs)


def boot(seed: int, plans: Sequence[CrashPlan] = ()) -> SchemaCluster:
    """Three nodes UP and agreed on keyspace ``ks``; then ``plans`` armed."""
    sim = Simulation(seed)
    cluster = SchemaCluster(sim)
    try:
        for name in NAMES:
            sim.add_process(name, cluster.factory(name))
        assert cluster.run_until(cluster.all_up), sim.describe()
        assert cluster.ddl("n1", KEYSPACE)
        assert cluster.run_until(cluster.agreed), sim.describe()
    except BaseException:
        sim.close()
        raise
    cluster.plans.extend(plans)
    return cluster


def _chains(cluster: SchemaCluster) -> dict[str, tuple[uuid.UUID, ...]]:
    """Each node's stored migration chain (raises if it forks, has a gap or cannot load)."""
    now_s = cluster.sim.now_ms() // 1000
    chains = {}
    for name in NAMES:
        migrations = load_migrations(cluster.nodes[name].store, now_s)
        versions = tuple(m.version for m in migrations)
        assert len(set(versions)) == len(versions), f"{name}: a migration stored twice"
        chains[name] = versions
    return chains


def _use_table(cluster: SchemaCluster, table: str, key: int) -> None:
    """A QUORUM write through n1 of ``ks.<table>``, read back at QUORUM through every node."""
    node = cluster.nodes["n1"]
    ts_us = node.clock.now_us()
    row = Row((), cells={"v": Cell.live(ts_us, struct.pack(">i", key * 7))})
    written: list[BaseException | None] = []
    node.write([Mutation("ks", table, kv_key(key), rows=(row,))], {}, QUORUM, written.append)
    assert cluster.run_until(lambda: bool(written)), cluster.sim.describe()
    assert written == [None], written
    for name in NAMES:
        answers: list[tuple[Mutation | None, BaseException | None]] = []

        def done(
            partition: Mutation | None,
            error: BaseException | None,
            answers: list[tuple[Mutation | None, BaseException | None]] = answers,
        ) -> None:
            answers.append((partition, error))

        cluster.nodes[name].read("ks", table, kv_key(key), QUORUM, done)
        assert cluster.run_until(functools.partial(bool, answers)), cluster.sim.describe()
        partition, error = answers[0]
        assert error is None and partition is not None, (name, answers)
        cell = partition.rows[0].cells["v"]
        assert isinstance(cell, Cell) and cell.value == struct.pack(">i", key * 7)


def assert_converged(cluster: SchemaCluster, tables: set[str], migrations: int) -> None:
    """See the module docstring: one schema everywhere, chains intact, nothing applied twice,
    stable across a restart of every node, and every table in ``tables`` usable."""
    sim = cluster.sim
    assert all(not plan.fired or plan.seen for plan in cluster.plans)
    assert cluster.run_until(cluster.agreed), sim.describe()
    first = cluster.nodes["n1"].processor
    version = first.schema_version
    for name in NAMES:
        processor = cluster.nodes[name].processor
        assert processor.schema_version == version, name
        assert processor.schema.keyspaces == first.schema.keyspaces, name
        assert processor.schema.tables == first.schema.tables, name
        processor.validate()  # the store registers exactly the schema's tables
    assert {t for (ks, t) in first.schema.tables if ks == "ks"} == tables
    chains = _chains(cluster)
    stored = [v for chain in chains.values() for v in chain]
    assert len(stored) == len(set(stored)), f"a migration applied on two nodes: {chains}"
    assert len(stored) == migrations, chains
    for name in NAMES:  # restart every node: the persisted schema is the one in memory
        sim.crash(name)
        sim.restart(name)
    assert cluster.run_until(cluster.agreed), sim.describe()
    assert all(cluster.nodes[n].processor.schema_version == version for n in NAMES)
    assert _chains(cluster) == chains
    for index, table in enumerate(sorted(tables)):
        _use_table(cluster, table, index)
    sim.close()


SEEDS = (1, 2)


@pytest.mark.parametrize("seed", SEEDS)
def test_crash_before_the_migration_is_persisted(seed: int) -> None:
    """Seed 004 failure 1: nothing applied, the update fails outright; it works when retried."""
    cluster = boot(seed, [CrashPlan("n1", "persist")])
    assert not cluster.ddl("n1", TABLE)
    assert cluster.run_until(cluster.agreed), cluster.sim.describe()
    assert all(("ks", "t") not in cluster.nodes[n].processor.schema.tables for n in NAMES)
    assert cluster.ddl("n1", TABLE)
    assert_converged(cluster, {"t"}, migrations=2)


@pytest.mark.parametrize("seed", SEEDS)
def test_crash_after_persisting_before_announcing(seed: int) -> None:
    """Seed 004 failures 5/6: persisted, never announced: start-up happens normally and the
    peers pull the new version once the restarted node gossips it."""
    cluster = boot(seed, [CrashPlan("n1", SchemaStep.ANNOUNCE)])
    assert not cluster.ddl("n1", TABLE)
    assert_converged(cluster, {"t"}, migrations=2)


@pytest.mark.parametrize("seed", SEEDS)
def test_crash_after_announcing_before_push(seed: int) -> None:
    """Announced (gossip state set), crashed before the first push left."""
    cluster = boot(seed, [CrashPlan("n2", SchemaStep.PUSH)])
    assert cluster.ddl("n2", TABLE)
    assert_converged(cluster, {"t"}, migrations=2)


@pytest.mark.parametrize("seed", SEEDS)
def test_crash_during_push(seed: int) -> None:
    """The push reached one peer, the coordinator crashed before pushing to the other."""
    cluster = boot(seed, [CrashPlan("n1", SchemaStep.PUSH, occurrence=2)])
    assert cluster.ddl("n1", TABLE)
    assert_converged(cluster, {"t"}, migrations=2)


@pytest.mark.parametrize("seed", SEEDS)
def test_receiver_crashes_before_merging(seed: int) -> None:
    """A peer crashes with the push in hand, before persisting it."""
    cluster = boot(seed, [CrashPlan("n3", SchemaStep.RECEIVE, peer="n1")])
    assert cluster.ddl("n1", TABLE)
    assert_converged(cluster, {"t"}, migrations=2)


@pytest.mark.parametrize("seed", SEEDS)
def test_receiver_crashes_after_persisting_merge(seed: int) -> None:
    """A peer crashes after persisting the merged rows, before reloading and gossiping."""
    cluster = boot(seed, [CrashPlan("n2", SchemaStep.MERGED)])
    assert cluster.ddl("n1", TABLE)
    assert_converged(cluster, {"t"}, migrations=2)


@pytest.mark.parametrize("seed", SEEDS)
def test_node_down_during_ddl_crashes_during_pull(seed: int) -> None:
    """n3 is down during two DDLs; restarted, it crashes when the pulled schema arrives, then
    catches up after its second restart."""
    cluster = boot(seed, [CrashPlan("n3", SchemaStep.RECEIVE)])
    cluster.sim.crash("n3")
    assert cluster.ddl("n1", TABLE)
    n2 = cluster.nodes["n2"].processor
    assert cluster.run_until(lambda: ("ks", "t") in n2.schema.tables)
    assert cluster.ddl("n2", "ALTER TABLE ks.t ADD w text")
    cluster.run_until(lambda: False, timeout_ms=2_000)
    cluster.sim.restart("n3")
    assert_converged(cluster, {"t"}, migrations=3)
    assert cluster.plans[0].fired


@pytest.mark.parametrize("seed", SEEDS)
def test_concurrent_ddl_on_two_nodes(seed: int) -> None:
    """Two DDLs at the same instant on two nodes: different tables, both everywhere."""
    cluster = boot(seed)
    assert cluster.ddl("n1", TABLE)
    assert cluster.ddl("n2", "CREATE TABLE ks.u (k int PRIMARY KEY, v int)")
    assert_converged(cluster, {"t", "u"}, migrations=3)


@pytest.mark.parametrize("seed", SEEDS)
def test_concurrent_create_of_the_same_table(seed: int) -> None:
    """The same CREATE TABLE at the same instant on two nodes (two table ids): every node ends
    with one and the same table."""
    cluster = boot(seed)
    assert cluster.ddl("n1", TABLE)
    assert cluster.ddl("n3", TABLE)
    assert_converged(cluster, {"t"}, migrations=3)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_wait_for_agreement_ends_when_gossip_brings_it_or_at_its_deadline(seed: int) -> None:
    """What a DDL's answer waits on (``ClusterNode.await_schema_agreement``), without polling:
    answered at the first event after which every live node gossips the new version (every
    node is then on it, and it was not yet when the wait began), long before the deadline; a
    node cut off from the others keeps a second wait until its deadline, which then names that
    node and the version it still gossips."""
    cluster = boot(seed)
    sim, n1 = cluster.sim, cluster.nodes["n1"]
    answers: list[tuple[int, dict[str, str | None], set[str]]] = []

    def done(disagreeing: dict[str, str | None]) -> None:
        versions = {str(cluster.nodes[name].processor.schema_version) for name in NAMES}
        answers.append((sim.now_ms(), disagreeing, versions))

    assert cluster.ddl("n1", TABLE)
    started = sim.now_ms()
    assert n1.state.schema_disagreement(), "the peers cannot have the new version yet"
    n1.await_schema_agreement(30_000, done)
    assert cluster.run_until(lambda: bool(answers), timeout_ms=40_000), sim.describe()
    answered_at, disagreeing, versions = answers[0]
    assert disagreeing == {}
    assert versions == {str(n1.processor.schema_version)}
    assert answered_at - started < 10_000  # gossip every second: a few rounds, not the deadline

    old_version = str(n1.processor.schema_version)
    sim.partition(["n1", "n2"], ["n3"])
    assert cluster.ddl("n1", "ALTER TABLE ks.t ADD w text")
    started = sim.now_ms()
    n1.await_schema_agreement(3_000, done)
    assert cluster.run_until(lambda: len(answers) == 2, timeout_ms=10_000), sim.describe()
    answered_at, disagreeing, _versions = answers[1]
    assert answered_at - started == 3_000
    assert list(disagreeing.values()) == [old_version]  # n3, still on the old version
    sim.heal()
    sim.close()
