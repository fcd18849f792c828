"""One CDC generation for the whole cluster: who creates it, and how every node learns it.

Reference: scylla-cdc.md §2 (gossip era: the first generation is proposed by the node with the
highest host id; generation timestamp), §4 (``CdcMetadata.prepare``/``insert``), §6 (tables);
seed 000 (generation creation, "prepare until loaded", publication race).

The pure decisions (``GenerationDecider`` and what it reads from gossip) and their rules are
in ``_cdc_decider``; the decider is a core of the node's state (``NodeState``), ticked in its
gossip round. The shell here (``CdcGenerationService``) runs on the ``ClusterNode``'s thread:
it turns the decider's actions into store work (``Offload``), coordinated writes (internal
rows at CL=ALL on the ``system_distributed_everywhere`` keyspace, replicated to every node;
publication at QUORUM on ``system_distributed``, RF 3 SimpleStrategy as in Scylla), timers and
gossip, and feeds their outcomes back to the decider. ``generation_decider`` builds a node's
decider. ``SynchronizedCdcMetadata`` lets the statement thread read the metadata while the
event loop updates it.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ringflow.cdc import (
    DEFAULT_BATCH_BYTES_MAX,
    CdcMetadata,
    GenerationId,
    GenerationIdV1,
    GenerationIdV2,
    GenerationTimestampRow,
    StreamId,
    TopologyDescription,
    datetime_from_ms,
    description_from_generation_v2_rows,
    generate_topology_description,
    generation_description_v2_rows,
    new_generation_timestamp,
    publication_batches,
)
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster._gossip_state import ApplicationState
from ringflow.cluster.service._cdc_decider import (
    DEFAULT_LEARN_WAIT_MS,
    DEFAULT_SETTLE_MS,
    LEARN_WAIT_GOSSIP_ROUNDS,
    SETTLE_GOSSIP_ROUNDS,
    Activate,
    Announce,
    GenerationAction,
    GenerationDecider,
    HoldWrites,
    Load,
    Prepare,
    Propose,
    Publish,
    ReleaseWrites,
    RetryPolicy,
    publication_needed,
)
from ringflow.cluster.service._cdc_local import (
    GENERATION_TABLE,
    ROWS_PER_WRITE_MAX,
    STREAMS_TABLE,
    TIMESTAMPS_TABLE,
    V1_GENERATION_TABLE,
    CdcGeneration,
    internal_rows_mutation,
    is_published,
    read_generation_v2_rows,
)
from ringflow.cluster.service._cdc_tables import (
    read_partition_rows,
    v1_description,
    v1_generation_mutations,
    v1_publication_mutations,
    write_in_order,
)
from ringflow.cluster.service._node import ClusterNode
from ringflow.cluster.service._settings import ClusterSettings
from ringflow.errors import RingflowError
from ringflow.ring import MIN_TOKEN
from ringflow.schema import Mutation, cdc_local_row, table_mutation
from ringflow.storage import Store

_log = logging.getLogger(__name__)


class SynchronizedCdcMetadata(CdcMetadata):
    """``CdcMetadata`` whose operations are serialised by a lock: the event loop prepares and
    inserts generations while the statement thread picks streams."""

    __slots__ = ("_guard",)

    def __init__(self, leeway_us: int | None = None) -> None:
        if leeway_us is None:
            super().__init__()
        else:
            super().__init__(leeway_us)
        self._guard = threading.RLock()

    def known_or_obsolete(self, timestamp_ms: int, now_us: int) -> bool:
        with self._guard:
            return super().known_or_obsolete(timestamp_ms, now_us)

    def prepare(self, timestamp_ms: int, now_us: int) -> bool:
        with self._guard:
            return super().prepare(timestamp_ms, now_us)

    def insert(self, timestamp_ms: int, description: TopologyDescription, now_us: int) -> bool:
        with self._guard:
            return super().insert(timestamp_ms, description, now_us)

    def streams_available(self, now_us: int) -> bool:
        with self._guard:
            return super().streams_available(now_us)

    def get_stream(self, write_timestamp_us: int, token: int, now_us: int) -> StreamId:
        with self._guard:
            return super().get_stream(write_timestamp_us, token, now_us)

    def description_for_write(self, write_timestamp_us: int, now_us: int) -> TopologyDescription:
        with self._guard:
            return super().description_for_write(write_timestamp_us, now_us)

    def description_at(self, timestamp_ms: int) -> TopologyDescription | None:
        with self._guard:
            return super().description_at(timestamp_ms)


# --- store work (runs on the storage thread) -----------------------------------------------------


def read_description(
    store: Store, generation: GenerationIdV2, now_us: int
) -> TopologyDescription | None:  # v1 generations: ``v1_description`` (coordinated read)
    """The generation's description from the local internal rows; None while missing/partial."""
    try:
        rows = read_generation_v2_rows(store, generation.uuid, now_us)
    except RingflowError as error:
        _log.info("CDC generation %s unreadable locally yet: %s", generation.uuid, error)
        return None
    if not rows:
        return None
    try:
        return description_from_generation_v2_rows(rows)
    except RingflowError as error:
        _log.info("CDC generation %s not complete locally yet: %s", generation.uuid, error)
        return None


def internal_mutations(
    store: Store, generation_uuid: uuid.UUID, description: TopologyDescription, now_us: int
) -> list[Mutation]:
    """The internal v2 rows of a new generation, one mutation per chunk of rows."""
    rows = generation_description_v2_rows(generation_uuid, description)
    table = store.table(*GENERATION_TABLE)
    return [
        internal_rows_mutation(table, rows[start : start + ROWS_PER_WRITE_MAX], now_us)
        for start in range(0, len(rows), ROWS_PER_WRITE_MAX)
    ]


def later_generation_timestamp(now_ms: int, ring_delay_ms: int, gossip_interval_ms: int) -> int:
    """Start of a generation that is not the cluster's first: ``now + 2 * ring_delay + leeway``
    so every node learns it before it operates; a ring delay of 0 (test clusters) counts as
    two gossip rounds, never as no delay at all."""
    return new_generation_timestamp(now_ms, max(ring_delay_ms, 2 * gossip_interval_ms, 1))


def publication_mutations(
    store: Store, generation: GenerationId, description: TopologyDescription, now_us: int
) -> list[Mutation]:
    """Publication in write order: every streams chunk, the timestamp row last."""
    streams = store.table(*STREAMS_TABLE)
    timestamps = store.table(*TIMESTAMPS_TABLE)
    mutations = []
    time_ms = generation.timestamp_ms
    for batch in publication_batches(time_ms, description, DEFAULT_BATCH_BYTES_MAX):
        table = timestamps if isinstance(batch[0], GenerationTimestampRow) else streams
        for start in range(0, len(batch), ROWS_PER_WRITE_MAX):
            values = [row.to_columns() for row in batch[start : start + ROWS_PER_WRITE_MAX]]
            mutations.append(table_mutation(table, values, now_us))
    return mutations


# --- the shell -----------------------------------------------------------------------------------


def has_peers(settings: ClusterSettings, store: Store) -> bool:
    """Whether the node belongs to a cluster of more than itself: seeds other than itself, or a
    ``system.peers`` row from an earlier run."""
    if set(settings.seeds) - {settings.endpoint}:
        return True
    page = store.scan(("system", "peers"), MIN_TOKEN, MIN_TOKEN, page_size=1, now_s=0)
    return bool(page.rows)


def generation_decider(
    settings: ClusterSettings,
    host_id: uuid.UUID,
    store: Store,
    *,
    initial: GenerationId | None = None,
    remembered: GenerationId | None = None,
    settle_ms: int | None = None,
    retry: RetryPolicy | None = None,
) -> GenerationDecider:
    """The decider of a node starting with ``initial`` (loaded from ``system.cdc_local``) or
    ``remembered`` (named there, loaded like a learnt one), part of its node state: it holds
    CDC writes until it hears its peers when it has any (``has_peers``). ``settle_ms``
    defaults to 5 gossip rounds (at least 2 s), the wait for peers to 10 (at least 10 s)."""
    interval_ms = settings.gossip_interval_ms
    if settle_ms is None:
        settle_ms = max(DEFAULT_SETTLE_MS, SETTLE_GOSSIP_ROUNDS * interval_ms)
    return GenerationDecider(
        host_id,
        settle_ms=settle_ms,
        retry=RetryPolicy() if retry is None else retry,
        loaded=initial,
        remembered=remembered,
        wait_for_peers=has_peers(settings, store),
        learn_wait_ms=max(DEFAULT_LEARN_WAIT_MS, LEARN_WAIT_GOSSIP_ROUNDS * interval_ms),
    )


class CdcGenerationService:
    """Carries out the actions of the node state's ``GenerationDecider`` on a ``ClusterNode``
    (module docstring), and feeds it their outcomes. ``start`` once the node is started; the
    decider is ticked in the node state's gossip round."""

    def __init__(
        self,
        cluster: ClusterNode,
        cdc: CdcMetadata,
        *,
        rng: random.Random,
        initial: CdcGeneration | None = None,
        ring_delay_ms: int = 0,
        v2_enabled: bool = True,
    ) -> None:
        self.cluster = cluster
        self.cdc = cdc
        self.decider = cluster.state.generations
        self._rng = rng
        self._ring_delay_ms = ring_delay_ms
        self.v2_enabled = v2_enabled
        """This node has ``CDC_GENERATIONS_V2`` (publishes to the v2 tables); without it, it acts
        as a Scylla 4.3 node: v1 ids only, the v1 streams table."""
        self._seen_v2: dict[uuid.UUID, int] = {}
        self._joining = False
        self._deferred: list[GenerationId] = []
        """Publications asked for while joining, run once joined (``joining``)."""
        if initial is not None and isinstance(initial.id, GenerationIdV2):
            self._seen_v2[initial.id.uuid] = initial.id.timestamp_ms

    def start(self) -> None:
        self._run(self.decider.start())

    def action_handlers(self) -> dict[type, Callable[[Any], None]]:
        """What the decider's actions do here, registered with the node's ``ActionExecutor``
        by ``build_node``."""
        cdc, clock = self.cdc, self.cluster.clock

        def load(action: Load) -> None:
            self._later(action.delay_ms, functools.partial(self._load, action.generation))

        def prepare(action: Prepare) -> None:
            cdc.prepare(action.generation.timestamp_ms, clock.now_us())

        def publish(action: Publish) -> None:
            if not self._joining:
                self._later(action.delay_ms, functools.partial(self._publish, action.generation))
            elif action.generation not in self._deferred:
                self._deferred.append(action.generation)

        return {
            Propose: self._propose,
            Announce: lambda action: self._gossip(action.generation),
            Prepare: prepare,
            Load: load,
            Activate: lambda action: self._activate(action.generation, action.description),
            HoldWrites: lambda action: cdc.hold_writes(action.reason),
            ReleaseWrites: lambda _action: cdc.release_writes(),
            Publish: publish,
        }

    def _run(self, actions: Sequence[GenerationAction]) -> None:
        self.cluster.executor.run(actions)

    def joining(self) -> None:
        """The node is joining the ring (``TopologyService``): until ``joined``, the generations
        it activates are neither persisted in ``system.cdc_local`` nor published, its own one
        included. Scylla's joiner persists its generation id only just before it persists
        ``bootstrap_state = COMPLETED`` ("if we crash now, we will choose a new CDC streams
        timestamp anyway"), and handles generations (publication) only once bootstrapped: a
        joiner killed after gossiping its new generation but before any peer heard it comes
        back without it and makes another, and nobody ever operates the first. Persisted at
        once, it came back from ``system.cdc_local`` and gossiped it again after its start had
        passed: the cluster learnt a generation late, and the writes coordinated between its
        start and then had gone to the previous generation's streams, where a consumer reading
        generation by generation never looks (issue 22, wide topology seed 428). The other
        nodes publish a generation as soon as they learn it from gossip."""
        self._joining = True

    def joined(self) -> None:
        """The join is done: persist the generation operated here in ``system.cdc_local`` and
        run the publications held back since ``joining``."""
        if not self._joining:
            return
        self._joining = False
        loaded = self.decider.loaded
        if loaded is not None:
            self._persist(loaded, self.cluster.clock.now_us())
        deferred, self._deferred = self._deferred, []
        for generation in deferred:
            self._publish(generation)

    def _later(self, delay_ms: int, callback: Callable[[], None]) -> None:
        if delay_ms <= 0:
            callback()
        else:
            self.cluster.clock.call_later(delay_ms, callback)

    def request_new_generation(self) -> None:
        """Admin request: propose a new generation over the current ring (see the decider)."""
        self.decider.request_new_generation()

    def new_generation_request(self, _request: Mapping[str, object]) -> dict[str, object]:
        """The operator's ``new-cdc-generation`` (over the node's request channel)."""
        _log.info("admin request: a new CDC generation")
        self.request_new_generation()
        return {"accepted": True}

    def known_v2_ids(self) -> dict[uuid.UUID, int]:
        """The v2 generation ids this node activated since it started, with their timestamps
        (what expiry can attribute the internal rows of)."""
        return dict(self._seen_v2)

    def _gossip(self, generation: GenerationId) -> None:
        self.cluster.gossiper.set_application_state(
            ApplicationState.CDC_GENERATION_ID, generation.to_gossip()
        )

    def _timestamp(self, first: bool, now_ms: int) -> int:
        if first:
            return new_generation_timestamp(now_ms, self._ring_delay_ms)
        interval = self.cluster.settings.gossip_interval_ms
        return later_generation_timestamp(now_ms, self._ring_delay_ms, interval)

    def _propose(self, action: Propose) -> None:
        """Generate, write the internal rows at CL=ALL, then pick the timestamp (seed 000: the
        timestamp is chosen after the data is written). Version 1: ``_propose_v1``."""
        if action.version == 1:
            self._propose_v1(action)
            return
        generation_uuid = uuid.UUID(int=self._rng.getrandbits(128), version=4)
        now_us = self.cluster.clock.now_us()
        try:
            description = generate_topology_description(
                action.sharding.keys(), dict(action.sharding), self._rng
            )
            mutations = internal_mutations(self.cluster.store, generation_uuid, description, now_us)
        except RingflowError:
            _log.exception("building a CDC generation failed")
            self._run(self.decider.on_proposed(None, self.cluster.clock.now_ms()))
            return

        def written(error: BaseException | None) -> None:
            now_ms = self.cluster.clock.now_ms()
            if error is not None:
                _log.warning("writing CDC generation %s failed: %s", generation_uuid, error)
                self._run(self.decider.on_proposed(None, now_ms))
                return
            generation = GenerationIdV2(self._timestamp(action.first, now_ms), generation_uuid)
            _log.info("created CDC generation %s", generation.to_gossip())
            self._run(self.decider.on_proposed(generation, now_ms))

        self._write_in_order(mutations, ConsistencyLevel.ALL, written)

    def _propose_v1(self, action: Propose) -> None:
        """A v1 generation (some node lacks ``CDC_GENERATIONS_V2``): the timestamp is the key of
        the description, so it is chosen *before* the one-row description is written, at QUORUM
        in ``system_distributed`` as Scylla 4.3 did (seed 000, "V1 IDs")."""
        now_us = self.cluster.clock.now_us()
        generation = GenerationIdV1(self._timestamp(action.first, now_us // 1000))
        try:
            description = generate_topology_description(
                action.sharding.keys(), dict(action.sharding), self._rng
            )
            mutations = v1_generation_mutations(self.cluster.store, generation, description, now_us)
        except RingflowError:
            _log.exception("building a v1 CDC generation failed")
            self._run(self.decider.on_proposed(None, self.cluster.clock.now_ms()))
            return

        def written(error: BaseException | None) -> None:
            now_ms = self.cluster.clock.now_ms()
            if error is not None:
                _log.warning("writing v1 CDC generation %s failed: %s", generation, error)
                self._run(self.decider.on_proposed(None, now_ms))
                return
            _log.info("created v1 CDC generation %s", generation.to_gossip())
            self._run(self.decider.on_proposed(generation, now_ms))

        self._write_in_order(mutations, ConsistencyLevel.QUORUM, written)

    def _write_in_order(
        self,
        mutations: Sequence[Mutation],
        consistency: ConsistencyLevel,
        done: Callable[[BaseException | None], None],
    ) -> None:
        """Coordinated writes one after the other (publication order matters)."""
        write_in_order(self.cluster, mutations, consistency, done)

    def _load(self, generation: GenerationId) -> None:
        if isinstance(generation, GenerationIdV1):
            self._load_v1(generation)
            return
        store, now_us = self.cluster.store, self.cluster.clock.now_us()

        def done(description: TopologyDescription | None, error: BaseException | None) -> None:
            if error is not None:
                _log.warning("reading CDC generation %s failed: %s", generation.uuid, error)
            self._run(self.decider.on_loaded(generation, description))

        self.cluster.offload(lambda: read_description(store, generation, now_us), done)

    def _load_v1(self, generation: GenerationIdV1) -> None:
        """The v1 description through the coordinator at QUORUM (it lives in the replicated
        ``system_distributed``, not on every node)."""
        table = self.cluster.store.table(*V1_GENERATION_TABLE)

        def done(rows: list[dict[str, object]] | None, error: BaseException | None) -> None:
            description = None
            if error is not None:
                _log.info("reading v1 CDC generation %s failed: %s", generation, error)
            else:
                try:
                    description = v1_description(rows or [])
                except RingflowError as bad:
                    _log.warning("v1 CDC generation %s unusable: %s", generation, bad)
            self._run(self.decider.on_loaded(generation, description))

        key = [datetime_from_ms(generation.timestamp_ms)]
        read_partition_rows(self.cluster, table, key, ConsistencyLevel.QUORUM, done)

    def _activate(self, generation: GenerationId, description: TopologyDescription) -> None:
        now_us = self.cluster.clock.now_us()
        self.cdc.insert(generation.timestamp_ms, description, now_us)
        self._gossip(generation)
        if isinstance(generation, GenerationIdV2):
            self._seen_v2[generation.uuid] = generation.timestamp_ms
        if not self._joining:
            self._persist(generation, now_us)
        _log.info("CDC generation %s loaded", generation.to_gossip())

    def _persist(self, generation: GenerationId, now_us: int) -> None:
        """``system.cdc_local`` names ``generation`` (what a restart loads and gossips)."""
        generation_uuid = generation.uuid if isinstance(generation, GenerationIdV2) else None
        row = cdc_local_row(generation.timestamp_ms, generation_uuid, timestamp_us=now_us)
        store = self.cluster.store

        def persist() -> None:
            store.apply([row], now_s=now_us // 1_000_000)

        def done(_result: object, error: BaseException | None) -> None:
            if error is not None:
                _log.error("persisting CDC generation %s failed", generation, exc_info=error)

        self.cluster.offload(persist, done)

    def _publish(self, generation: GenerationId) -> None:
        """v2 tables (streams rows, then the timestamp row) on a node with the v2 feature, for
        v1 and v2 generations alike (Scylla 4.4+); the v1 streams row on a node without it."""
        description = self.cdc.description_at(generation.timestamp_ms)
        if description is None:  # obsolete already (collected): nothing left to publish
            self._run(self.decider.on_published(generation, True))
            return
        store, now_us = self.cluster.store, self.cluster.clock.now_us()

        def written(error: BaseException | None) -> None:
            if error is not None:
                _log.info("publishing CDC generation %s failed: %s", generation, error)
            self._run(self.decider.on_published(generation, error is None))

        if not self.v2_enabled:
            v1_rows = v1_publication_mutations(store, generation, description, now_us)
            self._write_in_order(v1_rows, ConsistencyLevel.QUORUM, written)
            return

        def checked(published: bool | None, error: BaseException | None) -> None:
            if error is not None or published is None:
                written(error or RuntimeError("publication check failed"))
            elif not publication_needed(published):
                written(None)
            else:
                mutations = publication_mutations(store, generation, description, now_us)
                self._write_in_order(mutations, ConsistencyLevel.QUORUM, written)

        self.cluster.offload(lambda: is_published(store, generation, now_us), checked)
