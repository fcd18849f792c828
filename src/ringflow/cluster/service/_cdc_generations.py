"""One CDC generation for the whole cluster: who creates it, and how every node learns it.

Reference: scylla-cdc.md §2 (gossip era: the first generation is proposed by the node with the
highest host id; generation timestamp), §4 (``CdcMetadata.prepare``/``insert``), §6 (tables);
seed 000 (generation creation, "prepare until loaded", publication race).

Pure decisions (no I/O; ``GenerationDecider`` and the functions above it):

* **Readiness.** A first generation may be created only when gossip shows every known endpoint
  NORMAL with TOKENS, HOST_ID, SHARD_COUNT and IGNORE_MSB, alive, every seed among them, and that
  membership (endpoints and tokens) unchanged for ``settle_ms`` (gossip needs a few rounds to
  spread a peer that only talked to a seed; Scylla waits ``ring_delay`` for the same reason).
* **Proposer.** Of those endpoints, the one with the highest host id; nobody proposes while any
  endpoint gossips a generation id.
* **Learning.** The newest id gossiped by any endpoint (by timestamp, then uuid) that is newer
  than ours is *prepared* at once (CDC writes that need it fail with ``GenerationNotLoaded``),
  then loaded from the local copy of the internal table, retried with capped exponential backoff
  while the rows are not there (bounded number of attempts). Once loaded it is *activated*
  (``insert``, persisted in ``system.cdc_local``, gossiped by this node too) and *published*.
* **Publication** is idempotent: skipped when the ``cdc_generation_timestamps`` row is already
  there, else every ``cdc_streams_descriptions_v2`` row then the timestamp row; whichever node gets
  there first wins, the others rewrite identical rows. Failures retry with backoff.

The shell (``CdcGenerationService``) runs on the ``ClusterNode``'s thread, called at each gossip
tick: it turns the decider's actions into store work (``Offload``), coordinated writes (internal
rows at CL=ALL on the ``system_distributed_everywhere`` keyspace, replicated to every node;
publication at QUORUM on ``system_distributed``, RF 3 SimpleStrategy as in Scylla), timers and
gossip. ``SynchronizedCdcMetadata`` lets the statement thread read the metadata while the event
loop updates it.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from ringflow.cdc import (
    DEFAULT_BATCH_BYTES_MAX,
    CdcMetadata,
    GenerationIdV2,
    GenerationTimestampRow,
    StreamId,
    TopologyDescription,
    description_from_generation_v2_rows,
    generate_topology_description,
    generation_description_v2_rows,
    parse_generation_id,
    publication_batches,
)
from ringflow.cdc._metadata import new_generation_timestamp
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster._gossip_state import ApplicationState, EndpointState
from ringflow.cluster.service._membership import peer_info
from ringflow.cluster.service._node import ClusterNode
from ringflow.errors import RingflowError
from ringflow.node._startup import (
    GENERATION_TABLE,
    ROWS_PER_WRITE_MAX,
    STREAMS_TABLE,
    TIMESTAMPS_TABLE,
    CdcGeneration,
    internal_rows_mutation,
    is_published,
    read_generation_v2_rows,
)
from ringflow.schema import Mutation
from ringflow.schema._system_rows import cdc_local_row, table_mutation
from ringflow.storage import Store

_log = logging.getLogger(__name__)

DEFAULT_SETTLE_MS = 2_000
SETTLE_GOSSIP_ROUNDS = 5


# --- pure: what gossip says ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberView:
    """One endpoint as the generation logic needs it. ``complete``: NORMAL with host id, tokens
    and sharding parameters."""

    endpoint: str
    host_id: uuid.UUID | None
    tokens: tuple[int, ...]
    sharding: tuple[int, int] | None
    alive: bool
    generation: GenerationIdV2 | None

    @property
    def complete(self) -> bool:
        return self.host_id is not None and bool(self.tokens) and self.sharding is not None


def _state_value(state: EndpointState, key: ApplicationState) -> str | None:
    versioned = state.get(key)
    return None if versioned is None else versioned.value


def _parse_v2(text: str | None) -> GenerationIdV2 | None:
    if text is None:
        return None
    try:
        parsed = parse_generation_id(text)
    except RingflowError:
        return None
    return parsed if isinstance(parsed, GenerationIdV2) else None


def _sharding(state: EndpointState) -> tuple[int, int] | None:
    shards = _state_value(state, ApplicationState.SHARD_COUNT)
    msb = _state_value(state, ApplicationState.IGNORE_MSB)
    try:
        return None if shards is None or msb is None else (max(1, int(shards)), int(msb))
    except ValueError:
        return None


def member_view(endpoint: str, state: EndpointState, alive: bool) -> MemberView:
    """``state`` of ``endpoint`` seen by the generation logic (incomplete if not NORMAL)."""
    info = peer_info(endpoint, state)
    generation = _parse_v2(_state_value(state, ApplicationState.CDC_GENERATION_ID))
    if info is None:
        return MemberView(endpoint, None, (), None, alive, generation)
    return MemberView(endpoint, info.host.host_id, info.tokens, _sharding(state), alive, generation)


def member_views(
    states: Mapping[str, EndpointState], is_alive: Callable[[str], bool]
) -> list[MemberView]:
    return [member_view(e, state, is_alive(e)) for e, state in sorted(states.items())]


def cluster_ready(views: Sequence[MemberView], seeds: Collection[str]) -> bool:
    """Every known endpoint complete and alive, every seed known."""
    known = {view.endpoint for view in views}
    return (
        bool(views)
        and all(seed in known for seed in seeds)
        and all(view.complete and view.alive for view in views)
    )


def proposer(views: Sequence[MemberView]) -> uuid.UUID | None:
    """The host id that creates the first generation: the highest one (Scylla's
    ``should_propose_first_generation``)."""
    ids = [view.host_id for view in views if view.host_id is not None]
    return max(ids, default=None)


def newest_generation(views: Sequence[MemberView]) -> GenerationIdV2 | None:
    ids = [view.generation for view in views if view.generation is not None]
    return max(ids, key=_order, default=None)


def _order(generation: GenerationIdV2) -> tuple[int, int]:
    return (generation.timestamp_ms, generation.uuid.int)


def is_newer(candidate: GenerationIdV2, current: GenerationIdV2 | None) -> bool:
    return current is None or _order(candidate) > _order(current)


def ring_signature(views: Sequence[MemberView]) -> frozenset[tuple[str, tuple[int, ...]]]:
    return frozenset((view.endpoint, view.tokens) for view in views)


def ring_sharding(views: Sequence[MemberView]) -> dict[int, tuple[int, int]]:
    """Each ring token's owner's (shard count, ignore msb): the generator's sharding input."""
    return {
        token: view.sharding for view in views if view.sharding is not None for token in view.tokens
    }


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Capped exponential backoff with a bounded number of attempts."""

    base_ms: int = 100
    cap_ms: int = 5_000
    max_attempts: int = 720

    def delay_ms(self, attempt: int) -> int:
        return int(min(self.cap_ms, self.base_ms * 2 ** min(attempt, 30)))


# --- pure: the decider ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Propose:
    """Create the first generation over these ring tokens (owner's sharding per token)."""

    sharding: Mapping[int, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Announce:
    """Gossip ``CDC_GENERATION_ID`` = this id (the proposer, right after the data is written)."""

    generation: GenerationIdV2


@dataclass(frozen=True, slots=True)
class Prepare:
    generation: GenerationIdV2


@dataclass(frozen=True, slots=True)
class Load:
    """Read the description from the local internal rows, after ``delay_ms``."""

    generation: GenerationIdV2
    delay_ms: int


@dataclass(frozen=True, slots=True)
class Activate:
    """``cdc.insert``, persist ``system.cdc_local``, gossip the id."""

    generation: GenerationIdV2
    description: TopologyDescription


@dataclass(frozen=True, slots=True)
class Publish:
    """Make sure the user-facing tables describe the generation, after ``delay_ms``."""

    generation: GenerationIdV2
    delay_ms: int


GenerationAction = Propose | Announce | Prepare | Load | Activate | Publish


class GenerationDecider:
    """The node's generation state machine (module docstring). Feed it gossip views at each tick
    and the outcomes of the actions it asked for; it answers with the next actions."""

    def __init__(
        self,
        local_host_id: uuid.UUID,
        *,
        settle_ms: int = DEFAULT_SETTLE_MS,
        retry: RetryPolicy = RetryPolicy(),
        loaded: GenerationIdV2 | None = None,
    ) -> None:
        self.local_host_id = local_host_id
        self.settle_ms = settle_ms
        self.retry = retry
        self.current = loaded
        """The newest generation learnt (loaded or only prepared)."""
        self.loaded = loaded
        self.published: set[GenerationIdV2] = set()
        self._proposing = False
        self._proposal_failures = 0
        self._next_proposal_ms = 0
        self._signature: frozenset[tuple[str, tuple[int, ...]]] | None = None
        self._stable_since_ms = 0
        self._load_attempts = 0
        self._publish_attempts: dict[GenerationIdV2, int] = {}

    def start(self) -> list[GenerationAction]:
        """At start-up: a generation reloaded from ``system.cdc_local`` is (re)published."""
        return [] if self.loaded is None else [Publish(self.loaded, 0)]

    def on_tick(
        self, views: Sequence[MemberView], seeds: Collection[str], now_ms: int
    ) -> list[GenerationAction]:
        newest = newest_generation(views)
        if newest is not None and is_newer(newest, self.current):
            return self._learn(newest)
        if self.current is None and newest is None and self._may_propose(views, seeds, now_ms):
            self._proposing = True
            return [Propose(ring_sharding(views))]
        return []

    def _may_propose(
        self, views: Sequence[MemberView], seeds: Collection[str], now_ms: int
    ) -> bool:
        if not cluster_ready(views, seeds):
            self._signature = None
            return False
        signature = ring_signature(views)
        if signature != self._signature:
            self._signature, self._stable_since_ms = signature, now_ms
            return False
        if self._proposing or now_ms < self._next_proposal_ms:
            return False
        return now_ms - self._stable_since_ms >= self.settle_ms and (
            proposer(views) == self.local_host_id
        )

    def _learn(self, generation: GenerationIdV2) -> list[GenerationAction]:
        self.current = generation
        self._load_attempts = 0
        return [Prepare(generation), Load(generation, 0)]

    def on_proposed(self, generation: GenerationIdV2 | None, now_ms: int) -> list[GenerationAction]:
        """The proposal's data is written on every node (``generation``), or failed (None)."""
        self._proposing = False
        if generation is None:
            self._next_proposal_ms = now_ms + self.retry.delay_ms(self._proposal_failures)
            self._proposal_failures += 1
            return []
        if not is_newer(generation, self.current):
            return []
        return [Announce(generation), *self._learn(generation)]

    def on_loaded(
        self, generation: GenerationIdV2, description: TopologyDescription | None
    ) -> list[GenerationAction]:
        """Outcome of a ``Load``: the description, or None while the rows are missing."""
        if generation != self.current:
            return []  # superseded meanwhile: the newer one is being loaded
        if description is None:
            self._load_attempts += 1
            if self._load_attempts >= self.retry.max_attempts:
                _log.error("CDC generation %s: data never became readable", generation)
                return []
            return [Load(generation, self.retry.delay_ms(self._load_attempts))]
        self.loaded = generation
        return [Activate(generation, description), Publish(generation, 0)]

    def on_published(self, generation: GenerationIdV2, ok: bool) -> list[GenerationAction]:
        """Outcome of a ``Publish`` (``ok``: the timestamp row is known to be written)."""
        if ok:
            self.published.add(generation)
            self._publish_attempts.pop(generation, None)
            return []
        attempts = self._publish_attempts.get(generation, 0) + 1
        self._publish_attempts[generation] = attempts
        if attempts >= self.retry.max_attempts or generation != self.current:
            return []
        return [Publish(generation, self.retry.delay_ms(attempts))]


def publication_needed(already_published: bool) -> bool:
    """Idempotent publication: nothing to do once the timestamp row (the commit) exists."""
    return not already_published


# --- thread-safe metadata ------------------------------------------------------------------------


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
) -> TopologyDescription | None:
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


def publication_mutations(
    store: Store, generation: GenerationIdV2, description: TopologyDescription, now_us: int
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


class CdcGenerationService:
    """Runs a ``GenerationDecider`` on a ``ClusterNode`` (module docstring). ``start`` once the
    node is started; the node calls ``tick`` after each gossip round."""

    def __init__(
        self,
        cluster: ClusterNode,
        cdc: CdcMetadata,
        *,
        rng: random.Random,
        initial: CdcGeneration | None = None,
        settle_ms: int | None = None,
        ring_delay_ms: int = 0,
        retry: RetryPolicy = RetryPolicy(),
    ) -> None:
        self.cluster = cluster
        self.cdc = cdc
        self._rng = rng
        self._ring_delay_ms = ring_delay_ms
        if settle_ms is None:
            settle_ms = max(
                DEFAULT_SETTLE_MS, SETTLE_GOSSIP_ROUNDS * cluster.settings.gossip_interval_ms
            )
        self.decider = GenerationDecider(
            cluster.host.host_id,
            settle_ms=settle_ms,
            retry=retry,
            loaded=None if initial is None else initial.id,
        )

    def start(self) -> None:
        self.cluster.tick_listeners.append(self.tick)
        self._run(self.decider.start())

    def tick(self, now_ms: int) -> None:
        gossiper = self.cluster.gossiper
        try:
            views = member_views(gossiper.endpoint_states(), gossiper.is_alive)
            self._run(self.decider.on_tick(views, self.cluster.settings.seeds, now_ms))
        except Exception:  # never break the node's gossip loop
            _log.exception("CDC generation round failed")

    def _run(self, actions: Sequence[GenerationAction]) -> None:
        for action in actions:
            if isinstance(action, Propose):
                self._propose(action)
            elif isinstance(action, Announce):
                self._gossip(action.generation)
            elif isinstance(action, Prepare):
                self.cdc.prepare(action.generation.timestamp_ms, self.cluster.clock.now_us())
            elif isinstance(action, Load):
                self._later(action.delay_ms, functools.partial(self._load, action.generation))
            elif isinstance(action, Activate):
                self._activate(action.generation, action.description)
            else:
                self._later(action.delay_ms, functools.partial(self._publish, action.generation))

    def _later(self, delay_ms: int, callback: Callable[[], None]) -> None:
        if delay_ms <= 0:
            callback()
        else:
            self.cluster.clock.call_later(delay_ms, callback)

    def _gossip(self, generation: GenerationIdV2) -> None:
        self.cluster.gossiper.set_application_state(
            ApplicationState.CDC_GENERATION_ID, generation.to_gossip()
        )

    def _propose(self, action: Propose) -> None:
        """Generate, write the internal rows at CL=ALL, then pick the timestamp (seed 000: the
        timestamp is chosen after the data is written)."""
        generation_uuid = uuid.UUID(int=self._rng.getrandbits(128), version=4)
        now_us = self.cluster.clock.now_us()
        try:
            description = generate_topology_description(
                action.sharding.keys(), dict(action.sharding), self._rng
            )
            mutations = internal_mutations(self.cluster.store, generation_uuid, description, now_us)
        except RingflowError:
            _log.exception("building the first CDC generation failed")
            self._run(self.decider.on_proposed(None, self.cluster.clock.now_ms()))
            return

        def written(error: BaseException | None) -> None:
            now_ms = self.cluster.clock.now_ms()
            if error is not None:
                _log.warning("writing CDC generation %s failed: %s", generation_uuid, error)
                self._run(self.decider.on_proposed(None, now_ms))
                return
            timestamp = new_generation_timestamp(now_ms, self._ring_delay_ms)
            generation = GenerationIdV2(timestamp, generation_uuid)
            _log.info("created the cluster's first CDC generation %s", generation.to_gossip())
            self._run(self.decider.on_proposed(generation, now_ms))

        self._write_in_order(mutations, ConsistencyLevel.ALL, written)

    def _write_in_order(
        self,
        mutations: Sequence[Mutation],
        consistency: ConsistencyLevel,
        done: Callable[[BaseException | None], None],
    ) -> None:
        """Coordinated writes one after the other (publication order matters)."""
        if not mutations:
            done(None)
            return

        def next_one(error: BaseException | None) -> None:
            if error is not None:
                done(error)
            else:
                self._write_in_order(mutations[1:], consistency, done)

        self.cluster.write([mutations[0]], {}, consistency, next_one)

    def _load(self, generation: GenerationIdV2) -> None:
        store, now_us = self.cluster.store, self.cluster.clock.now_us()

        def done(description: TopologyDescription | None, error: BaseException | None) -> None:
            if error is not None:
                _log.warning("reading CDC generation %s failed: %s", generation.uuid, error)
            self._run(self.decider.on_loaded(generation, description))

        self.cluster.offload(lambda: read_description(store, generation, now_us), done)

    def _activate(self, generation: GenerationIdV2, description: TopologyDescription) -> None:
        now_us = self.cluster.clock.now_us()
        self.cdc.insert(generation.timestamp_ms, description, now_us)
        self._gossip(generation)
        row = cdc_local_row(generation.timestamp_ms, generation.uuid, timestamp_us=now_us)
        store = self.cluster.store

        def persist() -> None:
            store.apply([row], now_s=now_us // 1_000_000)

        def done(_result: object, error: BaseException | None) -> None:
            if error is not None:
                _log.error("persisting CDC generation %s failed", generation, exc_info=error)

        self.cluster.offload(persist, done)
        _log.info("CDC generation %s loaded", generation.to_gossip())

    def _publish(self, generation: GenerationIdV2) -> None:
        description = self.cdc.description_at(generation.timestamp_ms)
        if description is None:  # obsolete already (collected): nothing left to publish
            self._run(self.decider.on_published(generation, True))
            return
        store, now_us = self.cluster.store, self.cluster.clock.now_us()

        def written(error: BaseException | None) -> None:
            if error is not None:
                _log.info("publishing CDC generation %s failed: %s", generation, error)
            self._run(self.decider.on_published(generation, error is None))

        def checked(published: bool | None, error: BaseException | None) -> None:
            if error is not None or published is None:
                written(error or RuntimeError("publication check failed"))
            elif not publication_needed(published):
                written(None)
            else:
                mutations = publication_mutations(store, generation, description, now_us)
                self._write_in_order(mutations, ConsistencyLevel.QUORUM, written)

        self.cluster.offload(lambda: is_published(store, generation, now_us), checked)
