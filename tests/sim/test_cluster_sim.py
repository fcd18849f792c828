"""``ClusterNode`` inside ``ringflow.sim``: 3 nodes, seeded faults, QUORUM writes (issue 6 §5).

Each simulated process runs the real ``ClusterNode`` (gossip, failure detector, coordinator,
hints, schema push/pull) over a real SQLite ``Store`` on its ``SimDisk``, a ``QueryProcessor``
for the schema, the process's ``SimClock`` and ``ProcessNetwork``, and an ``Offload`` that runs
store work as a zero-delay timer of the incarnation (lost with it on a crash). The test drives
the coordinator API directly (``ClusterNode.write``/``read``); ``test_cql_sim`` goes through
CQL.

Proves, per seed: the nodes find each other through the seed and agree on a schema created on
one of them; under message drops, delays, reordering, one node partitioned away for a while and
one crash/restart, QUORUM writes to a CDC-enabled table carry their captures: after healing,
every node holding a base row holds its CDC log row, in a stream whose replicas are the base
partition's; every write acknowledged at QUORUM is read back at QUORUM through every node; and
the same seed gives the same trace digest.
Not asserted: that hint replay alone brings every replica up to date. A coordinator that
crashes before its write timeout stores no hint for a replica that missed the write (as
Cassandra's), so that replica waits for a read repair or a repair (``test_repair_sim``). A
HINT_REQ or HINT_RSP lost in flight no longer stalls the target's replay: the delivery gives up
after the write timeout and replays again (``test_hint_delivery_sim``).
"""

from __future__ import annotations

import random
import struct
import types
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from ringflow.cdc import CdcMetadata, GenerationsNotLearnt, StreamId
from ringflow.cluster._coordinator import (
    CoordinatorAction,
    base_token,
    log_token,
    prepare_cdc_write,
)
from ringflow.cluster._gossip import Send
from ringflow.cluster._gossip_state import ApplicationState
from ringflow.cluster._hints import HintAction, ReplayHints
from ringflow.cluster._messages import Verb
from ringflow.cluster._read_path import Respond
from ringflow.cluster._write_path import SendMutation, StoreHint
from ringflow.cluster.service import BuiltNode, RingDiscovery
from ringflow.cluster.service._cdc_decider import (
    GenerationAction,
    Publish,
)
from ringflow.cluster.service._membership import WritePeers
from ringflow.cluster.service._node import ClusterNode
from ringflow.cluster.service._node_state import NodeAction
from ringflow.cluster.service._schema_versions import PullSchema
from ringflow.cluster.service._topology_state import MakeGeneration, Refused, StartStreaming
from ringflow.errors import InternalError, RingflowError
from ringflow.ring import TokenMetadata
from ringflow.runtime import Runtime
from ringflow.schema import CDC_LOG_SUFFIX, Cell
from ringflow.sim import MessageSent, NetworkConfig, ProcessCrashed, Simulation
from tests.sim._harness import (
    NAMES,
    QUORUM,
    all_alive,
    built_node,
    capture_and_log,
    check_acting_node,
    create_cdc_table,
    endpoint,
    kv_key,
    kv_value,
    kv_write,
    open_store,
    random_faults,
    read_all,
    sim_host,
    start_layout_node,
)
from tests.sim._seeds import ci_seeds

pytestmark = pytest.mark.timeout(120)
SEEDS = ci_seeds((), per_run=50, pool=2_000)  # issue 6: >= 50 seeds in CI (about a minute)
_NAMESPACE = uuid.UUID("0d5b2a4e-6a53-4c59-9d0e-3e5f1f0f7a11")


@dataclass
class SimCluster:
    sim: Simulation
    nodes: dict[str, ClusterNode] = field(default_factory=dict)
    cdc: dict[str, CdcMetadata] = field(default_factory=dict)

    def factory(self, name: str) -> Callable[[Runtime], BuiltNode]:
        host = sim_host(_NAMESPACE, name, endpoint(name))

        def make(runtime: Runtime) -> BuiltNode:
            built, self.cdc[name] = start_layout_node(runtime, name, host, open_store(runtime))
            self.nodes[name] = built.cluster
            return built

        return make

    def node(self, name: str) -> ClusterNode:
        return self.nodes[name]

    def running(self) -> list[str]:
        return [p.name for p in self.sim.processes if p.running]

    def all_up(self) -> bool:
        return all_alive(self.nodes, self.running(), endpoint)

    def agreed(self) -> bool:
        versions = {self.nodes[name].processor.schema_version for name in self.running()}
        keyspaces = all("ks" in self.nodes[n].processor.schema.keyspaces for n in self.running())
        return len(versions) == 1 and keyspaces


def check_cdc_log(cluster: SimCluster, streams: dict[int, bytes], sim: Simulation) -> None:
    """Every node holding a base row (from a write or a hint, never from a repair: no read ran
    yet) holds its CDC log row in the stream the coordinator chose, and that stream's replicas
    are the base partition's replicas."""
    for name in NAMES:
        node = cluster.node(name)
        for key, stream in streams.items():
            token_replicas = node.placement.replicas_of("ks", base_token(kv_write(key, 0, 1)))
            stream_replicas = node.placement.replicas_of(
                "ks", log_token(StreamId.from_bytes(stream))
            )
            assert set(token_replicas.natural) == set(stream_replicas.natural)
            value = kv_value(node.store.read_mutation(("ks", "kv"), kv_key(key)))
            if value is None:
                continue
            log = node.store.read_mutation(("ks", "kv" + CDC_LOG_SUFFIX), (stream,))
            logged = set()
            for row in () if log is None else log.rows:
                k, v = row.cells.get("k"), row.cells.get("v")
                if isinstance(k, Cell) and isinstance(v, Cell):
                    logged.add((k.value, v.value))
            assert (struct.pack(">i", key), struct.pack(">i", value)) in logged, (
                f"{name} holds base row {key}={value} without its CDC log row; {sim.describe()}"
            )


def read_back(sim: Simulation, reader: ClusterNode, keys: list[int]) -> dict[int, int | None]:
    """QUORUM-read ``keys`` through ``reader``; every read must answer without error."""
    answers = read_all(sim, reader, "kv", {key: kv_key(key) for key in keys}, timeout_ms=30_000)
    return {key: kv_value(partition) for key, partition in answers.items()}


def boot(seed: int) -> tuple[Simulation, SimCluster]:
    """Three nodes UP with the CDC table's schema agreed (the simulation closed on failure)."""
    sim = Simulation(seed)
    try:
        cluster = SimCluster(sim)
        check_acting_node(sim)
        for name in NAMES:
            sim.add_process(name, cluster.factory(name))
        assert sim.run_until_true(cluster.all_up, timeout_ms=60_000), sim.describe()
        create_cdc_table(built_node(sim, "n1"))
        assert sim.run_until_true(cluster.agreed, timeout_ms=60_000), sim.describe()
    except BaseException:
        sim.close()
        raise
    return sim, cluster


def run_scenario(seed: int) -> tuple[str, dict[int, int], int]:
    """Boot, write under faults with one crash/restart, heal, check; return the trace digest,
    the acknowledged writes and the number of refused writes."""
    sim, cluster = boot(seed)
    with sim:
        rng = sim.rng
        sim.configure_network(random_faults(rng, (2_000, 50_000, 400_000), (0.0, 0.02, 0.1)))
        acked: dict[int, int] = {}
        streams: dict[int, bytes] = {}
        refused = [0]
        victim = rng.choice(NAMES[1:])
        crash_at = rng.randrange(5_000, 20_000)
        sim.after(crash_at, lambda: sim.crash(victim))
        sim.after(crash_at + rng.randrange(5_000, 30_000), lambda: sim.restart(victim))
        cut = rng.choice(NAMES)
        cut_at = rng.randrange(0, 50_000)
        sim.after(cut_at, lambda: sim.partition([cut], [n for n in NAMES if n != cut]))
        sim.after(cut_at + rng.randrange(1_000, 20_000), sim.heal)
        for index in range(60):

            def issue(key: int = index) -> None:
                coordinator = rng.choice(cluster.running())
                value = rng.randrange(1 << 30)

                def done(error: BaseException | None) -> None:
                    if error is None:
                        acked[key] = value
                    else:
                        refused[0] += 1

                node = cluster.node(coordinator)
                ts_us = node.clock.now_us()
                mutation = kv_write(key, value, ts_us)
                try:
                    capture = prepare_cdc_write(
                        mutation,
                        node.processor.schema.tables[("ks", "kv")],
                        ts_us,
                        ts_us,
                        cluster.cdc[coordinator],
                        rng,
                        token_metadata=node.membership.token_metadata,
                        strategy=node.placement.strategy_of("ks"),
                    )
                except GenerationsNotLearnt:  # just restarted: a client tries elsewhere
                    refused[0] += 1
                    return
                streams[key] = capture.stream_id
                node.write([mutation], {0: capture}, QUORUM, done)

            sim.after(rng.randrange(0, 60_000), issue)
        sim.run_for(70_000)

        sim.heal()
        sim.configure_network(NetworkConfig())
        for name in NAMES:
            if not sim.process(name).running:
                sim.restart(name)
        assert sim.run_until_true(cluster.all_up, timeout_ms=60_000), sim.describe()
        assert acked, f"no write was acknowledged: {sim.describe()}"
        assert [event for _, event in sim.trace.timed(ProcessCrashed) if event.name == victim]
        check_cdc_log(cluster, streams, sim)
        check_capture(cluster, sim)

        for reader in NAMES:
            answers = read_back(sim, cluster.node(reader), sorted(acked))
            lost = {k: (v, answers[k]) for k, v in acked.items() if answers[k] != v}
            assert not lost, (
                f"acknowledged writes not read back at QUORUM through {reader}: {lost}; "
                f"{sim.describe()}"
            )
        return sim.trace.digest(), acked, refused[0]


def check_capture(cluster: SimCluster, sim: Simulation) -> None:
    """Every node's replica-side capture (seed 002) holds exactly the CDC log rows its own log
    table holds, whatever reached it as a write, a hint or late, across its crash; its totals
    are what its tables hold."""
    for name in NAMES:
        node = cluster.node(name)
        captured, logged = capture_and_log(node.store, "kv", node.clock.now_ms() // 1000)
        assert captured == logged, f"{name}: capture != its CDC log; {sim.describe()}"


@pytest.mark.parametrize("seed", SEEDS)
def test_quorum_writes_survive_faults_and_a_crash(seed: int) -> None:
    """For this seed: the nodes find each other and agree on the schema; under drops, delays,
    a partition and a crash/restart every node holding a base row holds its CDC log row, and
    every write acknowledged at QUORUM is read back at QUORUM through every node after healing."""
    _digest, acked, refused = run_scenario(seed)
    assert len(acked) + refused <= 60


def test_same_seed_same_trace() -> None:
    """Two runs of one seed produce the same trace digest and the same acknowledged writes."""
    first = run_scenario(3)
    second = run_scenario(3)
    assert first == second


def _action_types(union: object) -> set[type]:
    """The classes of the union type ``union`` (generic ones by their origin)."""
    kinds: set[type] = set()
    for member in typing.get_args(union) or (union,):
        origin = typing.get_origin(member)
        if origin is types.UnionType or origin is typing.Union:
            kinds |= _action_types(member)
        else:
            kinds.add(origin or member)
    return kinds


def test_every_action_the_cores_of_a_built_node_decide_has_its_handler() -> None:
    """Each node's one ``ActionExecutor`` (``build_node``) carries out every action type its
    node state (gossip, membership, hints, the topology change), coordinator, hint manager
    and CDC generation decider can return."""
    sim, cluster = boot(1)
    with sim:
        unions = (NodeAction, CoordinatorAction, HintAction, GenerationAction)
        kinds = set().union(*(_action_types(union) for union in unions))
        assert {Send, WritePeers, PullSchema, SendMutation, StoreHint, Respond, Publish} <= kinds
        assert ReplayHints in kinds and {MakeGeneration, StartStreaming, Refused} <= kinds
        for name in NAMES:
            executor = cluster.node(name).executor
            assert [k.__name__ for k in kinds if not executor.handles(k)] == [], name


def test_each_verb_is_served_by_one_service() -> None:
    """The services built on a node (streaming, repair) serve their verbs through
    ``ClusterNode.serve``: a second service for a verb already served is a wiring fault, and
    the node keeps the first."""
    sim, cluster = boot(2)
    with sim:
        node = cluster.node("n1")
        streaming = node.verb_handler(Verb.STREAM_REQ)
        assert streaming is not None
        with pytest.raises(InternalError, match="verbs already served: STREAM_REQ"):
            node.serve({Verb.STREAM_REQ: lambda source, request_id, payload: None})
        with pytest.raises(InternalError, match="verbs already served: MUTATION_REQ"):
            node.serve({Verb.MUTATION_REQ: lambda source, request_id, payload: None})
        assert node.verb_handler(Verb.STREAM_REQ) is streaming


@pytest.mark.parametrize("seed", [41, 42, 43])
def test_a_joiner_learns_the_ring_through_gossip_under_faults(seed: int) -> None:
    """``RingDiscovery`` (what a joining node process runs before it opens) on a simulated
    process: under delays, drops and reordering it learns the ring of the three nodes, every
    host with its tokens, and then stops gossiping."""
    sim, cluster = boot(seed)
    with sim:
        sim.configure_network(random_faults(sim.rng, (2_000, 50_000), (0.0, 0.05)))
        learnt: list[tuple[TokenMetadata | None, RingflowError | None]] = []
        discoveries: list[RingDiscovery] = []
        joiner = "10.0.0.9:7000"

        def discoverer(runtime: Runtime) -> RingDiscovery:
            discovery = RingDiscovery(
                runtime.network,
                runtime.clock,
                endpoint=joiner,
                seeds=[endpoint("n1")],
                cluster_name=cluster.node("n1").settings.cluster_name,
                states={
                    ApplicationState.HOST_ID: str(uuid.uuid5(_NAMESPACE, "n9")),
                    ApplicationState.DC: "datacenter1",
                    ApplicationState.RACK: "rack1",
                    ApplicationState.RPC_ADDRESS: "10.0.0.9",
                },
                gossip_interval_ms=200,
                rng=random.Random(runtime.random.getrandbits(64)),
            )
            discovery.start(lambda ring, error: learnt.append((ring, error)))
            discoveries.append(discovery)
            return discovery

        sim.add_process("n9", discoverer)
        assert sim.run_until_true(lambda: bool(learnt), timeout_ms=120_000), sim.describe()
        ((ring, error),) = learnt
        assert error is None and ring is not None
        expected = cluster.node("n1").membership.token_metadata
        assert sorted(ring.hosts, key=str) == sorted(expected.hosts, key=str)
        for host in expected.hosts:
            assert ring.tokens_of(host) == expected.tokens_of(host), host
        sent = len([e for _, e in sim.trace.timed(MessageSent) if e.src == joiner])
        sim.run_for(5_000)  # stopped: it sends nothing more, and learns nothing more
        assert len([e for _, e in sim.trace.timed(MessageSent) if e.src == joiner]) == sent
        assert len(learnt) == 1
