"""Start-up of a single node: store, system tables, identity, the first CDC generation, the server.

``open_node`` (synchronous; run it on the storage thread) does, in order:

1. create the data directory and load, or create and save, the node record (host id, tokens:
   ``_config``); a restart keeps both;
2. open the store and register the system tables (``ensure_system_tables``);
3. write ``system.local`` (host id, tokens, addresses, DC/rack, schema version, gossip
   generation = start second);
4. find the node's CDC generation (``system.cdc_local``) or create the first one; publish it;
   load it into ``CdcMetadata``;
5. build the ``QueryProcessor``.

The first CDC generation (scylla-cdc.md §2, §4, §6; seed 000):

* Its description covers the node's own tokens with its own sharding
  (``generate_topology_description``), and its id is ``GenerationIdV2(timestamp, uuid4)``.
* Timestamp: a cluster's *first* generation needs no delay, as in Scylla's Raft topology
  coordinator (``new_generation_timestamp`` delays only later generations, so that every node
  learns them before they operate). Nothing can have written CDC data before the node existed,
  so the generation starts at the start-up instant, floored to the millisecond, and CDC writes
  work as soon as the node listens. (Scylla's gossip-era first generation started ~1 min later,
  during which CDC writes failed with "could not find any CDC stream".)
* Durability order, each step a committed store transaction: the internal v2 rows
  (``system_distributed_everywhere.cdc_generation_descriptions_v2``, in chunks), then the
  ``system.cdc_local`` row naming the generation, the node's *commit* of its choice. A crash
  before that row leaves only unreferenced internal rows; the next start creates a new
  generation. Then publication: every ``system_distributed.cdc_streams_descriptions_v2`` row,
  *then* the ``cdc_generation_timestamps`` row (the publishing rule: a consumer that sees the
  timestamp finds all streams). Publication is idempotent and is redone at start-up whenever the
  timestamp row is missing (a crash during publication).
* On restart the generation is read back from the internal rows (not regenerated), so the
  streams of data already written stay valid.

``run_node`` is the asyncio shell: one storage thread (``ThreadPoolExecutor(max_workers=1)``)
for every store call and statement, the statements' writes committed in groups there without
the thread waiting for them (``_write_group.GroupCommitPlane``; the server answers a write when
its group is durable), the CQL server on ``address:port``, and a clean shutdown on SIGTERM or
SIGINT (stop accepting, finish statements in flight, close the store).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ringflow.cdc import CdcMetadata
from ringflow.cluster.service import (
    CdcGeneration,
    load_local_generation,
    publish_generation,
    store_first_generation,
)
from ringflow.cql import (
    CqlServer,
    NodeIdentity,
    ProcessorBackend,
    QueryProcessor,
    ensure_system_tables,
)
from ringflow.node._config import (
    DataDirLock,
    NodeConfig,
    NodeRecord,
    load_record,
    native_tls,
    prepare_data_dir,
    save_record,
)
from ringflow.node._write_group import GroupCommitPlane, StorageExecutor
from ringflow.schema import NodeRow, local_row
from ringflow.storage import Store

_log = logging.getLogger(__name__)

Clock = Callable[[], int]
"""Wall clock in microseconds since the epoch."""

LOGIN_THREADS = 2
"""Threads checking logins (bcrypt) on a single node, apart from its one storage thread (the
store is safe from several threads; statements stay on one)."""


def system_clock_us() -> int:
    return time.time_ns() // 1000


@dataclass(eq=False, slots=True)
class Node:
    """An opened node: everything the server needs. ``close`` releases the store."""

    config: NodeConfig
    record: NodeRecord
    store: Store
    generation: CdcGeneration | None
    cdc: CdcMetadata
    processor: QueryProcessor
    lock: DataDirLock
    clock: Clock

    def rewrite_local_row(self) -> None:
        """``system.local`` with the processor's schema version as it is now: after every
        schema change, a statement's or (on a cluster node) a peer's schema merged."""
        version = self.processor.schema_version
        write_local_row(self.store, self.config, self.record, version, self.clock())

    def backend(self) -> ProcessorBackend:
        """A single node's statement backend: each statement's schema changes rewrite
        ``system.local`` (on the statement's thread, before its answer)."""
        return ProcessorBackend(
            self.processor, on_schema_change=lambda _changes: self.rewrite_local_row()
        )

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            self.lock.release()


# --- opening -------------------------------------------------------------------------------------


def load_or_create_record(config: NodeConfig, rng: random.Random) -> NodeRecord:
    """The saved record (checked against ``config``), or a new one, saved before use."""
    prepare_data_dir(config.data_dir)
    record = load_record(config.data_dir)
    if record is not None:
        record.check_matches(config)
        return record
    record = NodeRecord.create(config, rng)
    save_record(config.data_dir, record)
    return record


def open_node(
    config: NodeConfig,
    *,
    clock: Clock = system_clock_us,
    rng: random.Random,
    cdc: CdcMetadata | None = None,
    create_generation: bool = True,
) -> Node:
    """Open (or create) the node in ``config.data_dir``. Blocking: call it on the storage
    thread. Holds the data directory's lock until ``Node.close``; the store is closed and
    the lock released again if anything fails.

    A cluster node passes ``create_generation=False``: it only reloads the generation named by
    ``system.cdc_local`` (None before the cluster made one; ``ringflow.cluster.service.
    _cdc_generations`` creates and loads the cluster's generation) and its own ``cdc``."""
    prepare_data_dir(config.data_dir)
    lock = DataDirLock(config.data_dir)
    try:
        record = load_or_create_record(config, rng)
        store = Store(config.store_path)
    except BaseException:
        lock.release()
        raise
    try:
        ensure_system_tables(store)
        now_us = clock()
        generation: CdcGeneration | None
        if create_generation:
            generation = ensure_cdc_generation(store, record, now_us=now_us, rng=rng)
        else:  # rows gone (expired while the node was down): the cluster service takes over
            generation = load_local_generation(store, now_us, missing_ok=True)
        cdc = CdcMetadata() if cdc is None else cdc
        if generation is not None:
            cdc.insert(generation.id.timestamp_ms, generation.description, now_us)
        identity = NodeIdentity(
            host_id=record.host_id,
            cluster_name=record.cluster_name,
            data_center=record.dc,
            rack=record.rack,
            rpc_address=config.address,
            broadcast_address=config.address,
            tokens=record.tokens,
        )
        processor = QueryProcessor(store, node=identity, clock=clock, cdc=cdc, rng=rng)
        if config.auth.enabled:
            processor.enable_auth(config.auth, lambda: time.monotonic() * 1000)
        version = processor.schema_version
        write_local_row(store, config, record, version, now_us, gossip_generation=now_us // 10**6)
    except BaseException:
        store.close()
        lock.release()
        raise
    return Node(config, record, store, generation, cdc, processor, lock, clock)


def write_local_row(
    store: Store,
    config: NodeConfig,
    record: NodeRecord,
    schema_version: uuid.UUID,
    now_us: int,
    *,
    gossip_generation: int | None = None,
) -> None:
    """``system.local`` as the driver's control connection and cqlsh read it. Rewritten after
    every schema change (``Node.rewrite_local_row``), so
    ``schema_version`` is the digest drivers compare when they wait for schema agreement.
    ``gossip_generation`` (the start second, as Cassandra's) is kept when None."""
    row = NodeRow(
        host_id=record.host_id,
        broadcast_address=config.address,
        rpc_address=config.address,
        data_center=record.dc,
        rack=record.rack,
        tokens=record.tokens,
        schema_version=schema_version,
    )
    mutation = local_row(
        row,
        cluster_name=record.cluster_name,
        timestamp_us=now_us,
        gossip_generation=gossip_generation,
    )
    store.apply([mutation], now_s=now_us // 1_000_000)


# --- the CDC generation --------------------------------------------------------------------------


def ensure_cdc_generation(
    store: Store, record: NodeRecord, *, now_us: int, rng: random.Random
) -> CdcGeneration:
    """The node's generation: read back after a restart, else created; published either way."""
    generation = load_local_generation(store, now_us)
    if generation is None:
        generation = create_first_generation(store, record, now_us=now_us, rng=rng)
        _log.info("created the first CDC generation %s", generation.id.to_gossip())
    publish_generation(store, generation, now_us=now_us)
    return generation


def create_first_generation(
    store: Store, record: NodeRecord, *, now_us: int, rng: random.Random
) -> CdcGeneration:
    """Generate, store (internal rows, then ``system.cdc_local``) and return a generation of
    the node's tokens starting now (see the module docstring for why a first generation needs
    no delay)."""
    sharding = (record.shard_count, record.ignore_msb)
    return store_first_generation(store, record.tokens, sharding, now_us=now_us, rng=rng)


# --- serving ------------------------------------------------------------------------------------


async def run_node(
    config: NodeConfig,
    *,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    clock: Clock = system_clock_us,
    rng: random.Random | None = None,
) -> None:
    """Open the node, serve CQL until ``stop`` is set or SIGTERM/SIGINT arrives, shut down."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    rng = rng or random.Random()
    worker = StorageExecutor("ringflow-storage")
    try:
        node = await loop.run_in_executor(worker, lambda: open_node(config, clock=clock, rng=rng))
        try:
            await _serve(node, worker, stop, on_ready)
        finally:
            await loop.run_in_executor(worker, node.close)
    finally:
        worker.shutdown(wait=True)


async def _serve(
    node: Node,
    worker: StorageExecutor,
    stop: asyncio.Event,
    on_ready: Callable[[str], None] | None,
) -> None:
    config = node.config
    backend = node.backend()
    plane = GroupCommitPlane(node.store, worker)
    node.processor.use_data_plane(plane, plane.submit)
    logins = concurrent.futures.ThreadPoolExecutor(
        LOGIN_THREADS, thread_name_prefix="ringflow-login"
    )
    server = CqlServer(
        backend,
        worker,
        host=config.address,
        port=config.native_port,
        limits=config.limits,
        shard_count=node.record.shard_count,
        ignore_msb=node.record.ignore_msb,
        tls=native_tls(config),
        authenticator=backend.server_authenticator(),
        login_worker=logins,
    )
    loop = asyncio.get_running_loop()
    if node.processor.auth is not None:  # one node: its own store, set up at once
        await loop.run_in_executor(worker, node.processor.auth.setup_default_superuser)
    await server.start()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop.set)
    try:
        if on_ready is not None:
            on_ready(
                f"ringflow node {node.record.host_id} listening on {config.address}:{server.port}"
            )
        await stop.wait()
    finally:
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal_number)
        await server.close()
        logins.shutdown(wait=True)
