"""The asyncio shell of a cluster node process: store, CQL server, cluster service, status file.

The node process builds the cluster runtime (``ringflow.cluster.service``), not the reverse:
this module is the node's, and the cluster service knows nothing of the node's files.

``run_cluster_node`` opens the node like ``ringflow.node.run_node`` does, then adds the cluster:

* four executors: *statements*, one thread running CQL requests through the
  ``QueryProcessor`` (a write is sent and a SELECT's reads started, and the thread goes on: the
  server answers from their futures; the server's ``max_statements_in_flight`` bounds the
  statements started); *auth*, ``AUTH_THREADS`` threads for the CPU of logins and role
  statements (bcrypt) and the later runs of auth work, whose reads and writes go through the
  cluster with no thread waiting (``ringflow.cql``'s ``run_auth``);
  *storage*, one thread (replica verbs, hints, ``system.peers``), and *schema*, one thread
  (merging a peer's schema, which needs the processor's lock);
* ``AsyncioNetwork`` on ``address:7000`` and ``SystemClock`` for the ``ClusterNode``;
* the ``ClusterDataPlane`` installed in the processor, so every write and partition read is
  coordinated at its consistency level;
* native-protocol STATUS/TOPOLOGY EVENTs pushed through the ``CqlServer``;
* a DDL answer that waits (bounded: ``schema_agreement_timeout_ms``) for schema agreement and,
  without it, carries a warning naming the nodes that disagree
  (``ClusterDataPlane.schema_agreement_warning``, awaited on the event loop);
* the node's timings (``NodeTimings``: gossip, failure detector, timeouts, hints) as given;
* the cluster's CDC generation (``CdcGenerationService``): the node opens with
  ``create_generation=False`` (it only reloads the one ``system.cdc_local`` names) and learns or,
  as the highest host id, creates the one generation of the whole cluster;
* the replica-side capture (``ReplicaCapture``, seed 002; on unless ``CaptureSettings``
  disable it): enabled on the store before the node listens, slices sealed every second;
  with it the node side of transmission (``CaptureServices``: channel watch, publication of
  sealed slices and seal watermarks to ``system_replication``, synch-delete);
* ``status.json`` in the data directory, rewritten every second: what ``ringflow cluster
  status`` prints (so no extra RPC port is needed), with the capture's status; the same
  figures as Prometheus metrics on ``address:metrics_port`` (``_metrics``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ipaddress
import json
import logging
import os
import random
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ringflow.cluster import ApplicationState
from ringflow.cluster.service import (
    DISCOVERY_GOSSIP_INTERVAL_MS,
    INTERNODE_PORT,
    NODE_NETWORK_CONFIG,
    CaptureSettings,
    ClusterNode,
    ClusterSettings,
    MetricsServer,
    NodeMetrics,
    NodeRuntime,
    NodeSpec,
    NodeTimings,
    RingDiscovery,
    SynchronizedCdcMetadata,
    build_node,
    discover_ring,
    joining_states,
    local_generation_id,
    pick_tokens,
    save_bootstrap_state,
)
from ringflow.cql import (
    CqlServer,
    EventType,
    Inet,
    QueryProcessor,
    SessionState,
    StatusChangeEvent,
    StatusChangeType,
    TopologyChangeEvent,
    TopologyChangeType,
)
from ringflow.node._config import (
    NodeConfig,
    NodeRecord,
    auth_mode,
    internode_tls,
    load_record,
    native_tls,
    prepare_data_dir,
    save_record,
)
from ringflow.node._control import ControlServer
from ringflow.node._startup import Node, open_node
from ringflow.ring import Host
from ringflow.runtime import AsyncioNetwork, SystemClock

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

STATUS_FILE_NAME = "status.json"
OLD_SCRATCH_FILES = "coordinator-scratch*.db*"
"""Scratch stores earlier versions read coordinated SELECTs through (with their -wal and
-shm files): removed at start, nothing reads them any more."""
STATEMENT_THREADS = 1
"""Threads running CQL statements. No statement waits on one for the cluster: writes, reads,
procedures and auth work are answered from their futures."""
AUTH_THREADS = 2
"""Threads for the CPU of auth work: a login's password check and a new password's hash
(bcrypt, which runs without the GIL), and the later runs of auth work once its reads are here.
None of them waits for the cluster."""


class ExecutorOffload:
    """``Offload`` onto one executor; results come back on the event loop."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, executor: concurrent.futures.Executor
    ) -> None:
        self._loop = loop
        self._executor = executor

    def __call__(
        self, work: Callable[[], _T], done: Callable[[_T | None, BaseException | None], None]
    ) -> None:
        future = self._loop.run_in_executor(self._executor, work)

        def finished(f: asyncio.Future[_T]) -> None:
            if f.cancelled():
                done(None, asyncio.CancelledError())
            elif (error := f.exception()) is not None:
                done(None, error)
            else:
                done(f.result(), None)

        future.add_done_callback(finished)


class DefaultSuperuserSetup:
    """``CassandraRoleManager.setupDefaultRole`` for a cluster node: once the node is up, try
    (at most one attempt at a time, every ``RETRY_S``, its reads and writes through the cluster
    with no thread waiting) to create the default superuser if no role exists, until one
    attempt succeeds (a QUORUM read or write fails while too few replicas are up)."""

    RETRY_S = 2.0

    def __init__(self, loop: asyncio.AbstractEventLoop, processor: QueryProcessor) -> None:
        self._loop = loop
        self._processor = processor
        self._running: concurrent.futures.Future[bool] | None = None
        self._next_try = loop.time() + self.RETRY_S
        self.done = False

    def poll(self) -> None:
        if self.done or self._loop.time() < self._next_try:
            return
        running = self._running
        if running is not None and not running.done():
            return
        if running is not None:
            failure = running.exception()
            if failure is None:
                self.done = True
                return
            _log.info("default superuser not set up yet: %s", failure)
        self._next_try = self._loop.time() + self.RETRY_S
        self._running = self._processor.run_auth(lambda auth: auth.setup_default_superuser())


def _event_sink(
    server_of: Callable[[], CqlServer[SessionState] | None], native_port: int
) -> Callable[[str, str, str], None]:
    """The client events of the native protocol server ``server_of`` returns once it exists
    (it is built over the node's backend, after the node)."""

    def push(event_type: str, change: str, address: str) -> None:
        server = server_of()
        if server is None:
            return
        try:  # the address a peer gossips: not ours to trust (issue 16)
            node = Inet(ipaddress.ip_address(address), native_port)
        except ValueError:
            _log.warning("no %s event for %r: not an address", event_type, address)
            return
        if event_type == "STATUS_CHANGE":
            server.push(StatusChangeEvent(StatusChangeType(change), node), EventType.STATUS_CHANGE)
        else:
            event = TopologyChangeEvent(TopologyChangeType(change), node)
            server.push(event, EventType.TOPOLOGY_CHANGE)

    return push


def status_document(cluster: ClusterNode, node: Node) -> dict[str, object]:
    """What this node knows of the cluster (``ringflow cluster status`` prints it)."""
    nodes = []
    for endpoint, info in sorted(cluster.membership.members.items()):
        state = cluster.gossiper.endpoint_state(endpoint)
        schema = None if state is None else state.get(ApplicationState.SCHEMA)
        generation = None if state is None else state.get(ApplicationState.CDC_GENERATION_ID)
        nodes.append(
            {
                "address": info.rpc_address,
                "state": "UN" if cluster.placement.live(info.host) else "DN",
                "host_id": str(info.host.host_id),
                "dc": info.host.dc,
                "rack": info.host.rack,
                "tokens": len(info.tokens),
                "schema_version": None if schema is None else schema.value,
                "cdc_generation": None if generation is None else generation.value,
            }
        )
    return {
        "address": node.config.address,
        "native_port": node.config.native_port,
        "auth_mode": auth_mode(node.config.auth),
        "host_id": str(node.record.host_id),
        "pid": os.getpid(),
        "event_loop": type(asyncio.get_running_loop()).__module__.partition(".")[0],
        "load_bytes": _load_bytes(node.config.data_dir),
        "schema_version": str(node.processor.schema_version),
        "schema_agreement": cluster.state.schema_agreement(),
        "written_ms": cluster.clock.now_ms(),
        "nodes": nodes,
        "internode": internode_counters(cluster),
    }


def internode_counters(cluster: ClusterNode) -> dict[str, int]:
    """The node's internode protocol counters (issue 16): malformed messages (each closed its
    connection), refused ones, and the network shell's own counters when it has them."""
    counters = {
        "protocol_errors": cluster.protocol_errors,
        "refused_messages": cluster.refused_messages,
    }
    stats = getattr(cluster.network, "stats", None)
    if callable(stats):
        snapshot = stats()
        names = ("frames_received", "protocol_violations", "read_timeouts", "handler_errors")
        more = ("links_evicted", "connections_refused", "tls_handshake_failures")
        for name in (*names, *more, "tls_handshakes_refused"):
            value = getattr(snapshot, name, None)
            if isinstance(value, int):
                counters[f"network_{name}"] = value
    return counters


def _load_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.glob("store*") if p.is_file())


def _write_status(path: Path, document: dict[str, object]) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document, indent=1))
    os.replace(temporary, path)


async def prepare_join(config: NodeConfig, seeds: Sequence[str], rng: random.Random) -> None:
    """Before a joining node opens: learn the ring through gossip, choose its tokens and save
    its record (``bootstrap.json`` = joining). Nothing to do once the record exists (a restart
    resumes the bootstrap with the saved tokens)."""
    if load_record(config.data_dir) is not None:
        return
    prepare_data_dir(config.data_dir)
    host_id = uuid.UUID(int=rng.getrandbits(128), version=4)
    endpoint = f"{config.address}:{INTERNODE_PORT}"
    network = AsyncioNetwork(
        NODE_NETWORK_CONFIG, rng=random.Random(rng.getrandbits(64)), tls=internode_tls(config)
    )
    try:
        discovery = RingDiscovery(
            network,
            SystemClock(),
            endpoint=endpoint,
            seeds=[f"{seed}:{INTERNODE_PORT}" for seed in seeds],
            cluster_name=config.cluster_name,
            states={
                ApplicationState.HOST_ID: str(host_id),
                ApplicationState.DC: config.dc,
                ApplicationState.RACK: config.rack,
                ApplicationState.RPC_ADDRESS: config.address,
            },
            gossip_interval_ms=DISCOVERY_GOSSIP_INTERVAL_MS,
            rng=rng,
        )
        ring = await discover_ring(discovery)
    finally:
        await network.aclose()
    host = Host(host_id, endpoint, config.dc, config.rack)
    tokens = pick_tokens(ring, host, config.num_tokens, rng)
    record = NodeRecord(
        host_id=host_id,
        tokens=tuple(tokens),
        cluster_name=config.cluster_name,
        dc=config.dc,
        rack=config.rack,
        shard_count=config.shard_count,
        ignore_msb=config.ignore_msb,
    )
    save_bootstrap_state(config.data_dir, "joining")
    save_record(config.data_dir, record)
    _log.info("joining a ring of %d nodes with %d tokens", len(ring.hosts), len(tokens))
    # The node's own gossip generation (start second) must be newer than the discovery's.
    await asyncio.sleep(1.1)


async def run_cluster_node(
    config: NodeConfig,
    *,
    seeds: Sequence[str],
    bootstrap: bool = False,
    timings: NodeTimings | None = None,
    capture: CaptureSettings | None = None,
    cdc_generations_v2: bool = True,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run one cluster node until ``stop`` is set or SIGTERM/SIGINT arrives; ``capture``:
    the replica-side capture's settings (default: on, 60 s x 5 slices)."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    rng = random.Random()
    pools = [
        concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=f"ringflow-{name}")
        for name, threads in (
            ("statements", STATEMENT_THREADS),
            ("storage", 1),
            ("schema", 1),
            ("auth", AUTH_THREADS),
        )
    ]
    statements, storage, schema, auth = pools
    try:
        if bootstrap:  # learn the ring, choose tokens (``_bootstrap``)
            await prepare_join(config, seeds, rng)
        cdc = SynchronizedCdcMetadata()
        node = await loop.run_in_executor(
            storage,
            lambda: open_node(config, rng=rng, cdc=cdc, create_generation=False),
        )
        try:
            settings = ClusterSettings(
                endpoint=f"{config.address}:{INTERNODE_PORT}",
                rpc_address=config.address,
                seeds=tuple(f"{seed}:{INTERNODE_PORT}" for seed in seeds),
                cluster_name=node.record.cluster_name,
                cdc_generations_v2=cdc_generations_v2,
            ).with_timings(timings or NodeTimings())
            await _serve(
                node,
                settings,
                capture or CaptureSettings(),
                (statements, storage, schema, auth),
                stop,
                on_ready,
                rng,
            )
        finally:
            await loop.run_in_executor(storage, node.close)
    finally:
        for pool in pools:
            pool.shutdown(wait=True)


async def _serve(
    node: Node,
    settings: ClusterSettings,
    capture_settings: CaptureSettings,
    pools: tuple[concurrent.futures.Executor, ...],
    stop: asyncio.Event,
    on_ready: Callable[[str], None] | None,
    rng: random.Random,
) -> None:
    loop = asyncio.get_running_loop()
    statements, storage, schema, auth = pools
    config, record = node.config, node.record
    server: CqlServer[SessionState] | None = None
    network = AsyncioNetwork(
        NODE_NETWORK_CONFIG, rng=random.Random(rng.getrandbits(64)), tls=internode_tls(config)
    )
    host = Host(record.host_id, settings.endpoint, record.dc, record.rack)

    now_us = time.time_ns() // 1000
    remembered = (  # a v1 generation: loaded through the coordinator by the service
        None
        if node.generation is not None
        else await loop.run_in_executor(storage, lambda: local_generation_id(node.store, now_us))
    )
    built = build_node(
        NodeRuntime(
            clock=SystemClock(loop),
            network=network,
            loop=loop,
            offload=ExecutorOffload(loop, storage),
            statements=statements,
            auth_submit=auth.submit,
            rng=random.Random(rng.getrandbits(64)),
            schema_offload=ExecutorOffload(loop, schema),
            events=_event_sink(lambda: server, config.native_port),
        ),
        NodeSpec(
            settings=settings,
            host=host,
            tokens=record.tokens,
            store=node.store,
            processor=node.processor,
            cdc=node.cdc,
            data_dir=config.data_dir,
            joining=bool(joining_states(config.data_dir)),
            initial_generation=node.generation,
            remembered_generation=remembered,
            capture=capture_settings,
            shard_count=record.shard_count,
            ignore_msb=record.ignore_msb,
            extra_states={
                ApplicationState.AUTH_MODE: auth_mode(config.auth),
                **joining_states(config.data_dir),
            },
            on_exit=stop.set,
            on_schema_version=node.rewrite_local_row,
        ),
    )
    cluster, backend = built.cluster, built.backend
    capture, transmission = built.capture, built.transmission
    server = CqlServer(
        backend,
        statements,
        host=config.address,
        port=config.native_port,
        limits=config.limits,
        shard_count=record.shard_count,
        ignore_msb=record.ignore_msb,
        tls=native_tls(config),
        authenticator=backend.server_authenticator(),
        login_worker=auth,
    )
    for stale in config.data_dir.glob(OLD_SCRATCH_FILES):
        stale.unlink(missing_ok=True)
    await loop.run_in_executor(storage, built.prepare)
    built.start()
    repair = built.repair
    control = ControlServer(
        config.data_dir,
        {
            "decommission": built.topology.decommission_request,
            "removenode": built.topology.removenode_request,
            "new-cdc-generation": built.generations.new_generation_request,
            "repair": repair.repair_request,
            "repair-status": repair.repair_status,
        },
    )
    await control.start()
    await server.start()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop.set)
    superuser = None if node.processor.auth is None else DefaultSuperuserSetup(loop, node.processor)
    status_path = config.data_dir / STATUS_FILE_NAME
    metrics = MetricsServer(config.address, capture_settings.metrics_port, NodeMetrics())
    try:
        if on_ready is not None:
            on_ready(f"ringflow node {record.host_id} listening on {config.address}:{server.port}")
        last_status_error = ""
        while not stop.is_set():
            if superuser is not None:
                superuser.poll()
            try:
                document = {
                    **status_document(cluster, node),
                    "topology": built.topology.status(),
                    "repair": repair.status(),
                }
                if capture is not None:
                    document["capture"] = {
                        **capture.status(),
                        **({} if transmission is None else transmission.status()),
                    }
                _write_status(status_path, document)
                metrics.metrics.update(document)
                last_status_error = ""
            except Exception as error:  # the status is for operators: log it, never stop
                if repr(error) != last_status_error:
                    _log.warning("writing %s failed: %r", status_path, error)
                    last_status_error = repr(error)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        metrics.close()
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal_number)
        built.stop()
        await control.close()
        await server.close()
        await network.aclose()
        await loop.run_in_executor(storage, built.plane.close)
