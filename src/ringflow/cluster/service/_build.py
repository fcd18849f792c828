"""One node's cluster runtime, built the same way for a node process and for the simulator
(issue 21 §2): ``build_node(runtime, spec)``.

``NodeRuntime`` is what differs between the two: the clock, the network, the event loop the
statement path's futures complete on, where store work and a SELECT's local reads run, the
random source, the client event sink. ``NodeSpec`` is what the node is: its settings, host,
tokens, store, processor, CDC metadata and data directory, the generation it starts with, the
capture's settings. ``build_node`` composes, in this order:

* the ``ClusterNode`` (gossip, coordinator, hints, schema sync, the verbs it serves);
* its CDC generations (``CdcGenerationService``) and, on a node with ``CDC_GENERATIONS_V2``,
  the v1 -> v2 streams rewrite and the expiry of old generations;
* its topology changes (``TopologyService``, the shell of the node state's
  ``TopologyChange``: join, decommission, removenode);
* the statement path (``connect_statement_path``: ``ClusterBackend`` over a
  ``ClusterDataPlane``);
* the replica-side capture (``ReplicaCapture``, seed 002) and, when ``transmission`` is on,
  the node side of transmission (``CaptureServices``);
* anti-entropy repair (``RepairService``: REPAIR_REQ, the repairs it coordinates, the
  ``CALL NodeOps.repair`` procedures), an asyncio shell on the runtime's loop: asyncio's in a
  process, a ``ClockLoop`` over the simulated clock in the simulator.

``BuiltNode.prepare`` is the store work to do before the node listens (the capture's
triggers, a joiner's rewrite marker): a process runs it on its storage thread, the simulator
in place. Then ``start``, and ``stop`` at the end of the incarnation. The gossip round is
driven here, every ``gossip_interval_ms`` on the node's clock: the ``ClusterNode``'s round (its
node state decides, for gossip, hints, schema pulls, CDC generations, the background CDC jobs,
the expiry and the rewrite, whose schedules ``build_node`` gives it, and the topology change in
progress, which ``build_node`` gives it too); nothing calls back up into this composition.
``validate`` checks the node's invariants; the simulator calls it after every event.

What only a process has is added by ``ringflow.node`` around the built node: the native
protocol server, the operator's control channel and ``status.json``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ringflow.cdc import CdcMetadata, GenerationId
from ringflow.cluster import ApplicationState
from ringflow.cluster.service._backend import ClusterBackend, connect_statement_path
from ringflow.cluster.service._bootstrap import TopologyService
from ringflow.cluster.service._capture import ReplicaCapture
from ringflow.cluster.service._capture_services import CaptureServices
from ringflow.cluster.service._cdc_decider import (
    CDC_GENERATIONS_V2_FEATURE,
    BackgroundJob,
    RunJob,
    encode_features,
)
from ringflow.cluster.service._cdc_expiry import EXPIRY_JOB, GenerationExpiryService
from ringflow.cluster.service._cdc_generations import (
    CdcGenerationService,
    generation_decider,
)
from ringflow.cluster.service._cdc_local import CdcGeneration
from ringflow.cluster.service._cdc_rewrite import (
    REWRITE_JOB,
    StreamsRewriteService,
    write_rewritten_marker,
)
from ringflow.cluster.service._node import ClusterNode
from ringflow.cluster.service._plane import ClusterDataPlane
from ringflow.cluster.service._repair import RepairService
from ringflow.cluster.service._repair_procedures import register_repair_procedures
from ringflow.cluster.service._schema_sync import SchemaObserver
from ringflow.cluster.service._settings import (
    CaptureSettings,
    ClusterSettings,
    EventSink,
    Offload,
)
from ringflow.cluster.service._topology_state import TopologyChange, ring_delay
from ringflow.cql import QueryProcessor
from ringflow.errors import RingflowError, invariant
from ringflow.ring import Host
from ringflow.runtime import Clock, Network, TimerHandle
from ringflow.storage import Store

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeRuntime:
    """What a node runs on: a process's (system clock, asyncio network and loop, threads) or
    the simulator's (its clock, network, ``ClockLoop`` and ``ClockExecutor``)."""

    clock: Clock
    network: Network
    loop: asyncio.AbstractEventLoop
    """Where the statement path's futures complete, schema changes are announced from and
    repairs run (a ``ClockLoop`` in the simulator)."""
    offload: Offload
    """Store work off the event loop (the storage thread; in place in the simulator)."""
    statements: concurrent.futures.Executor
    """Where a SELECT goes on once its local reads are here."""
    auth_submit: Callable[[Callable[[], None]], object]
    """Where later runs of auth work go (bcrypt's CPU)."""
    rng: random.Random
    """The node's random source: gossip, generations and topology draw their seeds from it."""
    schema_offload: Offload | None = None
    """Schema merges off the event loop (default: ``offload``)."""
    events: EventSink | None = None
    """Where the native protocol's client events go (STATUS_CHANGE, TOPOLOGY_CHANGE)."""


@dataclass(frozen=True)
class NodeSpec:
    """What the node is (module docstring)."""

    settings: ClusterSettings
    host: Host
    tokens: tuple[int, ...]
    store: Store
    processor: QueryProcessor
    cdc: CdcMetadata
    data_dir: Path
    """Where the topology change keeps its state (``bootstrap_state``)."""
    shard_count: int
    ignore_msb: int
    """The node's sharding, gossiped (``SHARD_COUNT``, ``IGNORE_MSB``): CDC generations cut
    their streams by it, and a peer without it is not complete to them."""
    joining: bool = False
    """The node is joining the ring (a ``joining`` bootstrap state)."""
    initial_generation: CdcGeneration | None = None
    """The CDC generation the node operates from its start (loaded from ``system.cdc_local``,
    or the cluster's first one)."""
    remembered_generation: GenerationId | None = None
    """A v1 generation id the node knew, loaded through the coordinator once it runs."""
    capture: CaptureSettings | None = field(default_factory=CaptureSettings)
    """The replica-side capture's settings; None: no capture."""
    transmission: bool = True
    """With the capture: the node side of transmission (``CaptureServices``)."""
    extra_states: Mapping[ApplicationState, str] = field(default_factory=dict)
    """Gossip states beyond the ring's and those ``node_states`` derives (auth mode, a
    joiner's status, ...)."""
    on_exit: Callable[[], None] | None = None
    """Called when the node has left the ring (decommissioned or removed)."""
    on_schema_version: Callable[[], None] | None = None
    """The node's schema version changed, by a statement it ran or a peer's schema it merged:
    a node process rewrites its ``system.local`` row (on the thread that changed it)."""
    schema_observer: SchemaObserver | None = None


@dataclass
class BuiltNode:
    """A node's cluster runtime (module docstring): its parts, started and stopped together."""

    runtime: NodeRuntime
    cluster: ClusterNode
    generations: CdcGenerationService
    topology: TopologyService
    backend: ClusterBackend
    plane: ClusterDataPlane
    capture: ReplicaCapture | None
    transmission: CaptureServices | None
    rewrite: StreamsRewriteService | None
    expiry: GenerationExpiryService | None
    repair: RepairService
    joining: bool
    started: bool = False
    _round_timer: TimerHandle | None = field(default=None, init=False, repr=False)
    _stopped: bool = field(default=False, init=False, repr=False)

    def prepare(self) -> None:
        """The store work before the node listens, on the thread that owns the store: the
        capture's triggers, so that every write the node takes is captured, and a joiner's
        rewrite marker (a new node never rewrites v1 streams, seed 000)."""
        if self.capture is not None:
            self.capture.prepare()
        if self.rewrite is not None and self.joining:
            write_rewritten_marker(self.cluster.store, self.cluster.clock.now_us())

    def start(self) -> None:
        self.started = True
        self.cluster.start()
        self.generations.start()
        if self.capture is not None:
            self.capture.start()
        if self.transmission is not None:
            self.transmission.start()
        if self.rewrite is not None:
            self.rewrite.start()
        self.topology.start()
        self._schedule_round()

    def _schedule_round(self) -> None:
        if not self._stopped:
            clock, interval_ms = self.cluster.clock, self.cluster.settings.gossip_interval_ms
            self._round_timer = clock.call_later(interval_ms, self.round)

    def round(self) -> None:
        """One round of the node, then the next one scheduled: the cluster node's round
        (gossip, hints, schema pulls, CDC generations, the background CDC jobs due: the
        expiry of old generations, the v1 -> v2 streams rewrite: ``NodeState.round``; then
        the topology change in progress). A round that fails is logged; the next one runs
        whatever failed."""
        now_ms = self.cluster.clock.now_ms()
        try:
            self.cluster.round(now_ms)
        except RingflowError:
            _log.exception("gossip round failed")
        finally:
            self._schedule_round()

    def stop(self) -> None:
        self._stopped = True
        if self._round_timer is not None:
            self._round_timer.cancel()
        if self.transmission is not None:
            self.transmission.stop()
        if self.capture is not None:
            self.capture.stop()
        self.cluster.stop()

    def validate(self) -> None:
        """The node's invariants, which the simulator checks after every event of the node:
        its gossip, coordinator and statements' requests (``ClusterNode.validate``), and once
        started, its CDC generations: it refuses CDC writes exactly while it has not heard the
        cluster's generations since it started, and the generation it operates is one its
        writes can be routed by."""
        self.cluster.validate()
        if not self.started:
            return
        decider, cdc = self.generations.decider, self.generations.cdc
        invariant(
            cdc.writes_held == (not decider.learnt),
            lambda: f"CDC writes held: {cdc.writes_held}, generations learnt: {decider.learnt}",
        )
        loaded = decider.loaded
        invariant(
            loaded is None or cdc.description_at(loaded.timestamp_ms) is not None,
            lambda: f"the generation operated, {loaded}, is not in the node's CDC metadata",
        )


def node_states(spec: NodeSpec) -> dict[ApplicationState, str]:
    """What the node gossips beyond its ring state: its sharding, its features
    (``CDC_GENERATIONS_V2`` when it has it), the generation it operates, then
    ``spec.extra_states``."""
    states = {
        ApplicationState.SHARD_COUNT: str(spec.shard_count),
        ApplicationState.IGNORE_MSB: str(spec.ignore_msb),
        ApplicationState.SUPPORTED_FEATURES: encode_features(
            [CDC_GENERATIONS_V2_FEATURE] if spec.settings.cdc_generations_v2 else []
        ),
    }
    if spec.initial_generation is not None:
        states[ApplicationState.CDC_GENERATION_ID] = spec.initial_generation.id.to_gossip()
    return {**states, **spec.extra_states}


def build_node(runtime: NodeRuntime, spec: NodeSpec) -> BuiltNode:
    """The node ``spec`` describes on ``runtime``, not started (module docstring)."""
    settings = spec.settings
    decider = generation_decider(
        settings,
        spec.host.host_id,
        spec.store,
        initial=None if spec.initial_generation is None else spec.initial_generation.id,
        remembered=spec.remembered_generation,
        settle_ms=settings.cdc_settle_ms,
    )
    v2 = settings.cdc_generations_v2  # an upgraded node: v1 -> v2 rewrite, expiry
    expiry_job = BackgroundJob(EXPIRY_JOB)
    rewrite_job = BackgroundJob(REWRITE_JOB, active=False)  # active once its checks say so
    rng = runtime.rng
    cluster_seed, generations_seed, topology_seed = (rng.getrandbits(64) for _ in range(3))
    topology_rng = random.Random(topology_seed)
    """Draws the topology change's back-offs and the changed ring's generations."""
    topology_change = TopologyChange(
        settings.endpoint,
        joining=spec.joining,
        ring_delay_ms=ring_delay(settings.cdc_ring_delay_ms, settings.gossip_interval_ms),
        gossip_interval_ms=settings.gossip_interval_ms,
        rng=topology_rng,
        now_ms=runtime.clock.now_ms(),
    )
    cluster = ClusterNode(
        settings,
        host=spec.host,
        tokens=spec.tokens,
        store=spec.store,
        processor=spec.processor,
        clock=runtime.clock,
        network=runtime.network,
        rng_seed=cluster_seed,
        offload=runtime.offload,
        generations=decider,
        topology=topology_change,
        jobs=(expiry_job, rewrite_job) if v2 else (),
        schema_offload=runtime.schema_offload,
        events=runtime.events,
        extra_states=node_states(spec),
        on_schema_merged=spec.on_schema_version,
        schema_observer=spec.schema_observer,
    )
    generations = CdcGenerationService(
        cluster,
        spec.cdc,
        rng=random.Random(generations_seed),
        initial=spec.initial_generation,
        ring_delay_ms=settings.cdc_ring_delay_ms,
        v2_enabled=settings.cdc_generations_v2,
    )
    cluster.executor.register_all(generations.action_handlers())
    topology = TopologyService(
        cluster, generations, spec.data_dir, rng=topology_rng, on_exit=spec.on_exit
    )
    cluster.executor.register_all(topology.action_handlers())
    backend = connect_statement_path(
        cluster, runtime.loop, runtime.statements, runtime.auth_submit, spec.on_schema_version
    )
    capture = transmission = None
    settings_of_capture = spec.capture
    if settings_of_capture is not None and settings_of_capture.enabled:
        capture = ReplicaCapture(cluster, spec.cdc, settings_of_capture)
        if spec.transmission:
            transmission = CaptureServices(cluster, settings_of_capture)
    built = BuiltNode(
        runtime=runtime,
        cluster=cluster,
        generations=generations,
        topology=topology,
        backend=backend,
        plane=backend.plane,
        capture=capture,
        transmission=transmission,
        rewrite=StreamsRewriteService(cluster, rewrite_job) if v2 else None,
        expiry=(
            GenerationExpiryService(cluster, expiry_job, generations.known_v2_ids) if v2 else None
        ),
        repair=RepairService(
            cluster,
            spec.data_dir,
            runtime.loop,
            rng=random.Random(runtime.rng.getrandbits(64)),
        ),
        joining=spec.joining,
    )
    register_repair_procedures(built.repair)
    runs = {
        job.name: service.run
        for job, service in ((expiry_job, built.expiry), (rewrite_job, built.rewrite))
        if service is not None
    }
    cluster.executor.register(RunJob, lambda action: runs[action.name]())
    return built
