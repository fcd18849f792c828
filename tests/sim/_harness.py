"""The simulated-cluster harness shared by the ``ringflow.sim`` tests.

A simulated process runs the real ``ClusterNode`` over a real SQLite ``Store`` on its
``SimDisk`` (adopted, so a crash closes it like a killed process would), a ``QueryProcessor``
for the schema, the process's ``SimClock`` and ``ProcessNetwork``, and an ``Offload`` that runs
store work as a zero-delay timer of the incarnation (lost with it on a crash). These tests drive
the coordinator API directly (``ClusterNode.write``/``read``); ``test_cql_sim`` drives the same
nodes through CQL (``serve_cql``: the statement path of a node process, no thread waiting).
"""

from __future__ import annotations

import random
import struct
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ringflow.cdc import CdcMetadata, GenerationIdV2, generate_topology_description
from ringflow.cluster import ApplicationState, ConsistencyLevel
from ringflow.cluster.service import (
    INTERNODE_PORT,
    BuiltNode,
    CaptureSettings,
    CdcGeneration,
    ClusterNode,
    ClusterSettings,
    NodeRuntime,
    NodeSpec,
    SchemaObserver,
    build_node,
)
from ringflow.cql._executor import NodeIdentity, QueryProcessor, SessionState
from ringflow.cql._requests import Query, QueryParameters
from ringflow.cql._wire import Consistency
from ringflow.ring import MIN_TOKEN, Host
from ringflow.runtime import Clock, ClockExecutor, ClockLoop, Runtime
from ringflow.schema import CDC_LOG_SUFFIX, Cell, Mutation, Row
from ringflow.sim import DEFAULT_EPOCH_MS, NetworkConfig, Simulation
from ringflow.storage import Store

_T = TypeVar("_T")
_S = TypeVar("_S", bound=Store)
QUORUM = ConsistencyLevel.QUORUM
GOSSIP_MS = 1_000
SEED_NODE = "n1"
KEYSPACE_RF3 = (
    "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}"
)
CDC_TABLE = "CREATE TABLE ks.kv (k int PRIMARY KEY, v int) WITH cdc = {'enabled': true}"
SIM_CAPTURE = CaptureSettings(slice_width_s=5, slice_count=2)
"""Every simulated node captures, with slices short enough to seal within a test."""


def interleaved_tokens(names: Sequence[str], name: str, per_node: int) -> tuple[int, ...]:
    """Evenly interleaved tokens: each of ``names`` owns an equal share of the ring."""
    step = 2**64 // (len(names) * per_node)
    index = names.index(name)
    return tuple(-(2**63) + (index + len(names) * j) * step + 1 for j in range(per_node))


NAMES = ("n1", "n2", "n3")
"""The three nodes of ``test_cluster_sim``'s and ``test_schema_migration_sim``'s cluster."""
TOKENS_PER_NODE = 4


def endpoint(name: str) -> str:
    return f"10.0.0.{NAMES.index(name) + 1}:{INTERNODE_PORT}"


def tokens_of(name: str) -> tuple[int, ...]:
    """Evenly interleaved tokens: every node owns a third of the ring."""
    return interleaved_tokens(NAMES, name, TOKENS_PER_NODE)


GENERATION_MS = DEFAULT_EPOCH_MS - 60_000
"""The cluster's one CDC generation, operating since a minute before the simulation starts."""
SHARDING = (2, 12)
"""Every simulated node's shard count and ignore_msb (gossiped)."""
DESCRIPTION = generate_topology_description(
    sorted(t for name in NAMES for t in tokens_of(name)), lambda token: SHARDING, random.Random(0)
)
INITIAL_UUID = uuid.UUID(int=7, version=4)
INITIAL_GENERATION = CdcGeneration(GenerationIdV2(GENERATION_MS, INITIAL_UUID), DESCRIPTION)
"""That generation as the nodes operate and gossip it (a v2 id)."""


def sim_host(namespace: uuid.UUID, name: str, endpoint: str) -> Host:
    return Host(uuid.uuid5(namespace, name), endpoint, "datacenter1", "rack1")


def sim_offload(clock: Clock) -> Callable[..., None]:
    """``Offload`` in the simulator: the work runs as a 0 ms timer of the incarnation."""

    def offload(
        work: Callable[[], _T], done: Callable[[_T | None, BaseException | None], None]
    ) -> None:
        def run() -> None:
            try:
                result = work()
            except Exception as error:
                done(None, error)
                return
            done(result, None)

        clock.call_later(0, run)

    return offload


def open_store(runtime: Runtime, kind: type[_S] = Store) -> _S:  # type: ignore[assignment]
    """The process's store on its disk, adopted: a crash closes it like a killed process."""
    store = kind(runtime.disk.root / "store.sqlite", synchronous="NORMAL")
    runtime.disk.adopt(store)
    return store


def sim_runtime(runtime: Runtime) -> NodeRuntime:
    """What a simulated node runs on: the incarnation's clock and network, its store work and
    a statement's later steps as 0 ms timers of its clock (``ClockLoop``, ``ClockExecutor``;
    lost with the incarnation on a crash), its random source."""
    worker = ClockExecutor(runtime.clock)
    return NodeRuntime(
        clock=runtime.clock,
        network=runtime.network,
        loop=ClockLoop(runtime.clock),
        offload=sim_offload(runtime.clock),
        statements=worker,
        auth_submit=worker.submit,
        rng=random.Random(runtime.random.getrandbits(64)),
    )


def sim_node(
    runtime: Runtime,
    *,
    host: Host,
    tokens: tuple[int, ...],
    store: Store,
    cdc: CdcMetadata,
    seed: str,
    capture: CaptureSettings | None = SIM_CAPTURE,
    initial: CdcGeneration | None = None,
    v2: bool = True,
    joining: bool = False,
    extra_states: Mapping[ApplicationState, str] | None = None,
    on_exit: Callable[[], None] | None = None,
    schema_observer: SchemaObserver | None = None,
    transmission: bool = False,
) -> BuiltNode:
    """The node a process would build (``build_node``, not started, its store prepared) at
    ``host.endpoint`` with a ``QueryProcessor`` seeded from the incarnation's random source,
    operating CDC generation ``initial``. Its store captures every CDC log row
    (``ReplicaCapture``, seed 002) and seals on the simulated clock unless ``capture`` is
    None; the node side of transmission only with ``transmission`` (its rounds add
    coordinated traffic to every history)."""
    node_runtime = sim_runtime(runtime)
    processor = QueryProcessor(
        store,
        node=NodeIdentity(host.host_id, tokens=tokens),
        clock=runtime.clock.now_us,
        cdc=cdc,
        rng=random.Random(node_runtime.rng.getrandbits(64)),
    )
    built = build_node(
        node_runtime,
        NodeSpec(
            settings=ClusterSettings(
                endpoint=host.endpoint,
                rpc_address=host.endpoint.split(":")[0],
                seeds=(seed,),
                cluster_name="sim",
                gossip_interval_ms=GOSSIP_MS,
                cdc_generations_v2=v2,
            ),
            host=host,
            tokens=tokens,
            store=store,
            processor=processor,
            cdc=cdc,
            data_dir=runtime.disk.root,
            shard_count=SHARDING[0],
            ignore_msb=SHARDING[1],
            joining=joining,
            initial_generation=initial,
            capture=capture,
            transmission=transmission,
            extra_states=extra_states or {},
            on_exit=on_exit,
            schema_observer=schema_observer,
        ),
    )
    built.prepare()  # the simulator is one thread: prepare runs here, as on the storage thread
    return built


def start_layout_node(
    runtime: Runtime, name: str, host: Host, store: Store, **options: Any
) -> tuple[BuiltNode, CdcMetadata]:
    """Node ``name`` of the ``NAMES`` layout started (seed n1), operating the cluster's one
    generation (``INITIAL_GENERATION``, from the start of time); ``options`` go to
    ``sim_node``."""
    cdc = CdcMetadata()
    cdc.insert(GENERATION_MS, DESCRIPTION, runtime.clock.now_us())
    built = sim_node(
        runtime,
        host=host,
        tokens=tokens_of(name),
        store=store,
        cdc=cdc,
        seed=endpoint(SEED_NODE),
        initial=INITIAL_GENERATION,
        **options,
    )
    built.start()
    return built, cdc


def random_faults(
    rng: random.Random, max_delays_us: Sequence[int], drop_probabilities: Sequence[float]
) -> NetworkConfig:
    """Delays (exponential, from 200 us up to one of ``max_delays_us``), one of
    ``drop_probabilities`` and reordering, chosen by ``rng``."""
    return NetworkConfig(
        delay_us_min=200,
        delay_us_max=rng.choice(max_delays_us),
        delay_distribution="exponential",
        drop_probability=rng.choice(drop_probabilities),
        reorder=True,
    )


def all_alive(
    nodes: Mapping[str, ClusterNode], running: Sequence[str], endpoint: Callable[[str], str]
) -> bool:
    """Every running node's failure detector sees every other running node alive."""
    for name in running:
        node = nodes[name]
        others = [n for n in running if n != name]
        if not all(node.gossiper.is_alive(endpoint(other)) for other in others):
            return False
    return True


def check_acting_node(sim: Simulation) -> None:
    """After every event of ``sim``, the invariants of the node whose code it ran: its
    incarnation's ``BuiltNode.validate``, when its factory built one (``sim_node``)."""

    def check() -> None:
        name = sim.acting_process()
        node = None if name is None else sim.process(name).node
        if isinstance(node, BuiltNode):
            node.validate()

    sim.add_invariant(check)


def built_node(sim: Simulation, name: str) -> BuiltNode:
    """The node process ``name`` runs now, as ``build_node`` built it."""
    node = sim.process(name).node
    assert isinstance(node, BuiltNode), f"{name} runs {node!r}"
    return node


def ddl(node: BuiltNode, text: str) -> None:
    """Run ``text`` on ``node`` as a client would, through its statement backend (it must
    succeed): the backend announces the change (``connect_statement_path``); its answer's
    wait for schema agreement goes on in the node's loop, unwatched."""
    query = Query(text, QueryParameters(Consistency.ONE))
    handled = node.backend.handle(SessionState(), query)
    assert "Error" not in type(handled.response).__name__, handled.response


def create_cdc_table(node: BuiltNode) -> None:
    """Keyspace ``ks`` (RF 3) and the CDC-enabled table ``ks.kv (k int, v int)``."""
    ddl(node, KEYSPACE_RF3)
    ddl(node, CDC_TABLE)


def kv_key(key: int) -> tuple[bytes]:
    return (struct.pack(">i", key),)


def kv_write(key: int, value: int, ts_us: int) -> Mutation:
    cells = {"v": Cell.live(ts_us, struct.pack(">i", value))}
    return Mutation("ks", "kv", kv_key(key), rows=(Row((), cells=cells),))


def kv_value(partition: Mutation | None) -> int | None:
    if partition is None or not partition.rows:
        return None
    cell = partition.rows[0].cells.get("v")
    if not isinstance(cell, Cell) or not cell.value:
        return None
    value: int = struct.unpack(">i", cell.value)[0]
    return value


def read_all(
    sim: Simulation,
    reader: ClusterNode,
    table: str,
    keys: Mapping[int, tuple[bytes, ...]],
    timeout_ms: int,
) -> dict[int, Mutation | None]:
    """QUORUM-read each partition key of ``ks.<table>`` through ``reader``; every read must
    answer without error."""
    answers: dict[int, Mutation | None] = {}
    errors: list[BaseException] = []
    for key, partition_key in keys.items():

        def got(partition: Mutation | None, error: BaseException | None, key: int = key) -> None:
            if error is not None:
                errors.append(error)
            answers[key] = partition

        reader.read("ks", table, partition_key, QUORUM, got)
    assert sim.run_until_true(lambda: len(answers) == len(keys), timeout_ms=timeout_ms)
    assert not errors, (errors, sim.describe())
    return answers


Columns = tuple[tuple[str, bytes | None], ...]


def capture_and_log(
    store: Store, table: str, now_s: int
) -> tuple[Counter[Columns], Counter[Columns]]:
    """What a node's replica capture holds (seed 002) and what its own CDC log table of
    ``ks.table`` holds, both as rows of column values (keys included): equal when the capture
    took every log row the store wrote, once."""
    logged: Counter[Columns] = Counter()
    state = None
    while True:
        page = store.scan(
            ("ks", table + CDC_LOG_SUFFIX), MIN_TOKEN, MIN_TOKEN, page_size=500,
            paging_state=state, now_s=now_s,
        )  # fmt: skip
        for row in page.rows:
            columns: dict[str, bytes | None] = dict(row.values)
            columns["cdc$stream_id"] = row.partition_key[0]
            columns["cdc$time"], columns["cdc$batch_seq_no"] = row.clustering
            logged[tuple(sorted(columns.items()))] += 1
        state = page.paging_state
        if state is None:
            break
    store.capture.validate()
    captured: Counter[Columns] = Counter(
        tuple(sorted(row.columns.items()))
        for piece in store.capture.slices(limit=10_000)
        for row in store.capture.rows(piece.key, limit=10_000)
    )
    return captured, logged
