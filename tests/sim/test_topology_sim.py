"""Bootstrap and decommission inside ``ringflow.sim`` under QUORUM writes with faults (issue 7 §4).

Every simulated process runs the real ``ClusterNode``, ``CdcGenerationService`` and
``TopologyService`` (``ringflow.cluster.service._bootstrap``) over a real SQLite store, like
``test_cluster_sim.py``. Three nodes start with one CDC generation; then a 4th and a 5th node
join (tokens from the balanced allocator over the ring they see, STATUS BOOT -> new generation
-> streaming -> NORMAL) and one of the first three is decommissioned, while writes at QUORUM to
a CDC table go through random NORMAL coordinators, with message delays, drops and reordering
and one crash/restart of a node that is not changing.

Proves, per seed: every change completes (the joiners reach NORMAL, the leaver LEFT) and made a
new generation; every write acknowledged at QUORUM is read back at QUORUM through every
remaining node; every write's CDC stream belongs to the generation operating at its timestamp
(descriptions read back from the internal table); and a consumer reading each acknowledged
write's log partition at QUORUM (generation by generation, stream by stream) finds the change,
so it reconstructs the acknowledged base rows exactly.
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from ringflow.cdc import (
    CdcMetadata,
    GenerationIdV1,
    GenerationIdV2,
    StreamId,
    TopologyDescription,
)
from ringflow.cluster._coordinator import log_token, prepare_cdc_write
from ringflow.cluster._gossip_state import ApplicationState
from ringflow.cluster._topology_change import choose_tokens
from ringflow.cluster.service._bootstrap import (
    Phase,
    TopologyService,
    joining_states,
    save_bootstrap_state,
)
from ringflow.cluster.service._cdc_generations import (
    CDC_GENERATIONS_V2_FEATURE,
    CdcGenerationService,
    read_description,
)
from ringflow.cluster.service._node import INTERNODE_PORT, ClusterNode
from ringflow.cql._exec_system import ensure_system_tables
from ringflow.node._startup import CdcGeneration, load_local_generation
from ringflow.replication import Origin
from ringflow.ring import Host, TokenMetadata
from ringflow.runtime import Runtime
from ringflow.schema import CDC_LOG_SUFFIX, Cell, Mutation
from ringflow.sim import NetworkConfig, Simulation
from tests.sim._harness import (
    DESCRIPTION,
    GENERATION_MS,
    QUORUM,
    SEED_NODE,
    all_alive,
    capture_and_log,
    create_cdc_table,
    interleaved_tokens,
    kv_key,
    kv_value,
    kv_write,
    open_store,
    random_faults,
    read_all,
    sim_host,
    sim_node,
)

pytestmark = pytest.mark.timeout(300)
FIRST = ("n1", "n2", "n3")
JOINERS = ("n4", "n5")
TOKENS_PER_NODE = 4
SEEDS = tuple(range(30))
WRITES = 90
_NAMESPACE = uuid.UUID("7c1f6a4e-0b9d-4f51-8f6e-2a9d5f0e3c21")
INITIAL_UUID = uuid.UUID(int=7, version=4)


def endpoint(name: str) -> str:
    return f"10.0.1.{int(name[1:])}:{INTERNODE_PORT}"


def host_of(name: str) -> Host:
    return sim_host(_NAMESPACE, name, endpoint(name))


def first_tokens(name: str) -> tuple[int, ...]:
    return interleaved_tokens(FIRST, name, TOKENS_PER_NODE)


@dataclass
class TopologyCluster:
    sim: Simulation
    tokens: dict[str, tuple[int, ...]] = field(default_factory=dict)
    nodes: dict[str, ClusterNode] = field(default_factory=dict)
    cdc: dict[str, CdcMetadata] = field(default_factory=dict)
    topology: dict[str, TopologyService] = field(default_factory=dict)
    left: set[str] = field(default_factory=set)
    without_v2: frozenset[str] = frozenset()
    """Nodes that do not advertise CDC_GENERATIONS_V2 (an older version)."""

    def factory(self, name: str, joining: bool) -> Callable[[Runtime], ClusterNode]:
        host = host_of(name)
        fresh = [joining]

        def make(runtime: Runtime) -> ClusterNode:
            root = runtime.disk.root
            if fresh[0]:
                save_bootstrap_state(root, "joining")
                fresh[0] = False
            store = open_store(runtime)
            ensure_system_tables(store)
            cdc = self.cdc[name] = CdcMetadata()
            initial = load_local_generation(store, runtime.clock.now_us())  # a restart
            if initial is None and name in FIRST:
                initial = CdcGeneration(GenerationIdV2(GENERATION_MS, INITIAL_UUID), DESCRIPTION)
            if initial is not None:
                cdc.insert(initial.id.timestamp_ms, initial.description, runtime.clock.now_us())
            states = {
                ApplicationState.SHARD_COUNT: "2",
                ApplicationState.IGNORE_MSB: "12",
                ApplicationState.SUPPORTED_FEATURES: (
                    "" if name in self.without_v2 else CDC_GENERATIONS_V2_FEATURE
                ),
            }
            if initial is not None:
                states[ApplicationState.CDC_GENERATION_ID] = initial.id.to_gossip()
            node = sim_node(
                runtime,
                host=host,
                tokens=self.tokens[name],
                store=store,
                cdc=cdc,
                seed=endpoint(SEED_NODE),
                extra_states={**states, **joining_states(root)},
            )
            rng = random.Random(runtime.random.getrandbits(64))
            generations = CdcGenerationService(
                node, cdc, rng=rng, initial=initial, v2_enabled=name not in self.without_v2
            )
            node.start()
            generations.start()
            self.topology[name] = TopologyService(
                node,
                generations,
                root,
                joining=bool(joining_states(root)),
                rng=rng,
                on_exit=lambda: self.left.add(name),
            )
            self.nodes[name] = node
            return node

        return make

    def running(self) -> list[str]:
        return [p.name for p in self.sim.processes if p.running and p.name not in self.left]

    def coordinators(self) -> list[str]:
        """Running NORMAL members (a joining node has no old generation to write with)."""
        return [
            name
            for name in self.running()
            if endpoint(name) in self.nodes[name].members
            and self.topology[name].phase in (Phase.IDLE, Phase.DONE)
            and self.topology[name].change != "leave"
        ]

    def ring(self) -> TokenMetadata:
        return self.nodes["n1"].token_metadata

    def all_up(self) -> bool:
        return all_alive(self.nodes, self.running(), endpoint)


def add_joiner(cluster: TopologyCluster, name: str) -> None:
    """Start ``name`` with balanced tokens over the ring n1 sees (what discovery learns)."""
    rng = random.Random(cluster.sim.rng.getrandbits(64))
    cluster.tokens[name] = choose_tokens(cluster.ring(), host_of(name), TOKENS_PER_NODE, 3, rng)
    cluster.sim.add_process(name, cluster.factory(name, joining=True))


def phases(cluster: TopologyCluster) -> str:
    return ", ".join(
        f"{name}: {service.status()}" for name, service in sorted(cluster.topology.items())
    )


def settled(cluster: TopologyCluster) -> bool:
    """Every running node sees every running node NORMAL, and no change in progress."""
    running = cluster.running()
    expected = sorted(endpoint(n) for n in running)
    return all(
        sorted(cluster.nodes[n].members) == expected and not cluster.nodes[n].transitions
        for n in running
    )


def boot(seed: int, without_v2: frozenset[str] = frozenset()) -> tuple[Simulation, TopologyCluster]:
    sim = Simulation(seed)
    try:
        cluster = TopologyCluster(sim, without_v2=without_v2)
        for name in FIRST:
            cluster.tokens[name] = first_tokens(name)
            sim.add_process(name, cluster.factory(name, joining=False))
        assert sim.run_until_true(cluster.all_up, timeout_ms=60_000), sim.describe()
        create_cdc_table(cluster.nodes["n1"])
        versions = lambda: {cluster.nodes[n].processor.schema_version for n in FIRST}  # noqa: E731
        assert sim.run_until_true(lambda: len(versions()) == 1, timeout_ms=60_000)
    except BaseException:
        sim.close()
        raise
    return sim, cluster


@dataclass
class Writes:
    acked: dict[int, int] = field(default_factory=dict)
    streams: dict[int, tuple[bytes, int]] = field(default_factory=dict)
    coordinated: dict[int, tuple[str, int]] = field(default_factory=dict)
    """Each write's coordinator and when it was issued (simulated ms)."""
    refused: int = 0
    settled: int = 0
    """Writes issued and answered (acknowledged or refused)."""


def schedule_writes(cluster: TopologyCluster, writes: Writes, count: int, span_ms: int) -> None:
    sim, rng = cluster.sim, cluster.sim.rng
    for index in range(count):

        def issue(key: int = index) -> None:
            candidates = cluster.coordinators()
            if not candidates:
                writes.refused += 1
                writes.settled += 1
                return
            name = rng.choice(candidates)
            node = cluster.nodes[name]
            value = rng.randrange(1 << 30)
            ts_us = node.clock.now_us()
            mutation = kv_write(key, value, ts_us)
            table = node.processor.schema.tables[("ks", "kv")]
            try:
                capture = prepare_cdc_write(mutation, table, ts_us, ts_us, cluster.cdc[name], rng)
            except Exception:
                writes.refused += 1
                writes.settled += 1
                return
            writes.streams[key] = (capture.stream_id, ts_us)
            writes.coordinated[key] = (name, sim.loop.now_us // 1000)

            def done(error: BaseException | None) -> None:
                writes.settled += 1
                if error is None:
                    writes.acked[key] = value
                else:
                    writes.refused += 1

            node.write([mutation], {0: capture}, QUORUM, done)

        sim.after(rng.randrange(0, span_ms), issue)


def logged(partition: Mutation | None, key: int) -> set[int]:
    values = set()
    for row in () if partition is None else partition.rows:
        k, v = row.cells.get("k"), row.cells.get("v")
        if isinstance(k, Cell) and isinstance(v, Cell) and k.value == struct.pack(">i", key):
            values.add(struct.unpack(">i", v.value)[0])
    return values


def generations_of(cluster: TopologyCluster) -> dict[int, TopologyDescription]:
    """Every generation made, by start (ms): the initial one and each change's, read back from
    a remaining node's copy of the internal table."""
    found = {GENERATION_MS: DESCRIPTION}
    reader = cluster.nodes[cluster.running()[0]]
    for service in cluster.topology.values():
        generation = service.generation
        if generation is not None:
            now_us = reader.clock.now_us()
            description = read_description(reader.store, generation, now_us)
            assert description is not None, f"generation {generation} not on {reader.host}"
            found[generation.timestamp_ms] = description
    return found


HINT_SETTLE_MS = 1_000


def check_log_replicas(
    cluster: TopologyCluster, writes: Writes, remaining: list[str], crash: tuple[str, int]
) -> None:
    """Every acknowledged change's log row is stored on every replica of its stream in the
    final ring (read from each node's own store, before any QUORUM read could repair it there):
    writes reached natural and pending replicas, streaming moved the log ranges with the base
    ones, hints replayed what a crashed replica missed. A write whose coordinator crashed
    before its write timeout may miss a replica for good (the coordinator hints a replica
    that did not answer at the timeout, as Cassandra does; repair's job): there, base and log
    row are missing together (one unit)."""
    table = ("ks", "kv" + CDC_LOG_SUFFIX)
    victim, crash_ms = crash
    timeout_ms = cluster.nodes[remaining[0]].settings.write_timeout_ms
    for key, value in writes.acked.items():
        stream, _ts_us = writes.streams[key]
        coordinator, issued_ms = writes.coordinated[key]
        unhinted = coordinator == victim and 0 <= crash_ms - issued_ms < timeout_ms
        replicas = cluster.nodes[remaining[0]].replicas_of(
            "ks", log_token(StreamId.from_bytes(stream))
        )
        for host in replicas.natural:
            name = next(n for n in remaining if endpoint(n) == host.endpoint)
            stored = cluster.nodes[name].store.read_mutation(table, (stream,))
            if value in logged(stored, key):
                continue
            assert unhinted, f"log row of write {key} missing on {name}"
            base = cluster.nodes[name].store.read_mutation(("ks", "kv"), kv_key(key))
            assert kv_value(base) != value, f"write {key} split on {name}"


def run_scenario(seed: int) -> None:
    sim, cluster = boot(seed)
    with sim:
        rng = sim.rng
        sim.configure_network(random_faults(rng, (2_000, 50_000, 200_000), (0.0, 0.01, 0.05)))
        writes = Writes()
        schedule_writes(cluster, writes, WRITES, 150_000)
        leaver = rng.choice(FIRST[1:])
        victim = next(n for n in FIRST if n not in ("n1", leaver))
        crash_at = rng.randrange(5_000, 100_000)
        crash = (victim, sim.loop.now_us // 1000 + crash_at)
        sim.after(crash_at, lambda: sim.process(victim).running and sim.crash(victim))
        restart_at = crash_at + rng.randrange(2_000, 20_000)
        sim.after(restart_at, lambda: sim.process(victim).running or sim.restart(victim))
        sim.after(1_000, lambda: add_joiner(cluster, "n4"))

        def done(name: str) -> bool:
            service = cluster.topology.get(name)
            return service is not None and service.phase is Phase.DONE

        assert sim.run_until_true(lambda: done("n4"), timeout_ms=600_000), phases(cluster)
        assert sim.run_until_true(lambda: settled(cluster), timeout_ms=120_000), sim.describe()
        add_joiner(cluster, "n5")
        assert sim.run_until_true(lambda: done("n5"), timeout_ms=600_000), phases(cluster)
        assert sim.run_until_true(lambda: settled(cluster), timeout_ms=120_000), sim.describe()
        assert cluster.topology[leaver].decommission()
        assert sim.run_until_true(lambda: leaver in cluster.left, timeout_ms=600_000)
        sim.crash(leaver)
        sim.run_for(10_000)
        sim.heal()
        sim.configure_network(NetworkConfig())
        if not sim.process(victim).running:
            sim.restart(victim)
        assert sim.run_until_true(cluster.all_up, timeout_ms=60_000), sim.describe()
        answered = sim.run_until_true(lambda: writes.settled == WRITES, timeout_ms=300_000)
        assert answered, f"{writes.settled} of {WRITES} writes answered; {sim.describe()}"
        remaining = cluster.running()
        assert sorted(remaining) == sorted({"n1", "n2", "n3", "n4", "n5"} - {leaver})
        for name in remaining:  # every node's ring: the four remaining nodes, nobody moving
            node = cluster.nodes[name]
            assert sorted(node.members) == sorted(endpoint(n) for n in remaining), name
            assert not node.transitions, (name, node.transitions)
        assert writes.acked, f"no write acknowledged: {sim.describe()}"

        generations = generations_of(cluster)
        assert len(generations) == 4, sorted(generations)
        starts = sorted(generations)
        for key in writes.acked:
            stream, ts_us = writes.streams[key]
            operating = max(start for start in starts if start * 1000 <= ts_us)
            streams = {s.to_bytes() for s in generations[operating].all_streams()}
            assert stream in streams, f"write {key} at {ts_us} left its generation"

        sim.run_for(10 * HINT_SETTLE_MS)  # hints of the crash window replayed
        check_log_replicas(cluster, writes, remaining, crash)
        for name in remaining:  # before any QUORUM read repairs a log row somewhere
            node = cluster.nodes[name]
            in_capture, in_log = capture_and_log(node.store, "kv", node.clock.now_ms() // 1000)
            assert in_capture == in_log, f"{name}: capture != its CDC log; {sim.describe()}"
            capture = node.store.capture  # rows streamed in (joins, the leave): out of sequence
            for piece in capture.slices(out_of_sequence=False, limit=10_000):
                origins = {row.origin for row in capture.rows(piece.key, limit=10_000)}
                assert Origin.STREAM not in origins, f"{name}: streamed rows in {piece.key}"
        base_keys = {k: kv_key(k) for k in writes.acked}
        log_keys = {k: (writes.streams[k][0],) for k in writes.acked}
        for reader in remaining:
            node = cluster.nodes[reader]
            base = read_all(sim, node, "kv", base_keys, timeout_ms=60_000)
            lost = {k: v for k, v in writes.acked.items() if kv_value(base[k]) != v}
            assert not lost, f"acked writes lost through {reader}: {lost}; {sim.describe()}"
        consumer = cluster.nodes[remaining[0]]
        log = read_all(sim, consumer, "kv" + CDC_LOG_SUFFIX, log_keys, timeout_ms=60_000)
        missing = {k: v for k, v in writes.acked.items() if v not in logged(log[k], k)}
        assert not missing, f"changes missing from the CDC log: {missing}; {sim.describe()}"


@pytest.mark.parametrize("seed", SEEDS)
def test_joins_and_a_decommission_under_quorum_writes(seed: int) -> None:
    """Two joins and a decommission under faults: the checks of the module docstring."""
    run_scenario(seed)


def test_a_join_in_a_cluster_with_an_older_node_makes_a_v1_generation() -> None:
    """Issue 7 §3: with one node lacking CDC_GENERATIONS_V2 the joiner's generation is a v1 one
    (timestamp id, v1 description read back through the coordinator), every node operates it,
    and writes after its start use its streams."""
    sim, cluster = boot(1, without_v2=frozenset({"n3"}))
    with sim:
        add_joiner(cluster, "n4")
        joined = lambda: cluster.topology["n4"].phase is Phase.DONE  # noqa: E731
        assert sim.run_until_true(joined, timeout_ms=600_000), phases(cluster)
        assert sim.run_until_true(lambda: settled(cluster), timeout_ms=120_000), sim.describe()
        generation = cluster.topology["n4"].generation
        assert isinstance(generation, GenerationIdV1), generation
        start_us = generation.timestamp_ms * 1000
        for name in cluster.running():
            assert start_us in cluster.cdc[name].generation_timestamps_us, name
        description = cluster.cdc["n1"].description_at(generation.timestamp_ms)
        assert description is not None
        assert description != DESCRIPTION
        writes = Writes()
        schedule_writes(cluster, writes, 20, 5_000)
        assert sim.run_until_true(lambda: writes.settled == 20, timeout_ms=120_000)
        assert writes.acked, sim.describe()
        streams = {stream.to_bytes() for stream in description.all_streams()}
        for key in writes.acked:
            stream, ts_us = writes.streams[key]
            assert ts_us >= start_us and stream in streams, key
