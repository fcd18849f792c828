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
  (``insert``, persisted in ``system.cdc_local``, gossiped by this node too) and *published*;
  a node still joining the ring persists and publishes only once joined (``joining``).
* **Catching up after a start.** A node that has peers (seeds other than itself, or rows in
  ``system.peers``) holds CDC writes (``HoldWrites``: they fail with ``GenerationsNotLearnt``,
  which drivers retry on another host) until a tick sees a live, complete peer: its gossip
  brought every generation the cluster made while this node was down, learnt in that same tick.
  A node that hears no peer for ``learn_wait_ms`` releases them anyway (a lone survivor serves).
* **Publication** is idempotent: skipped when the ``cdc_generation_timestamps`` row is already
  there, else every ``cdc_streams_descriptions_v2`` row then the timestamp row; whichever node gets
  there first wins, the others rewrite identical rows. Failures retry with backoff.
* **Versions** (seed 000 "upgrade procedure"; issue 7 §3). Each node gossips its features in
  ``SUPPORTED_FEATURES``; a new generation is v2 (``v2;<ms>;<uuid>``, internal rows in
  ``system_distributed_everywhere.cdc_generation_descriptions_v2``) only when every known endpoint
  has ``CDC_GENERATIONS_V2`` (``generation_version``), else v1: its id is its timestamp, chosen
  *before* its one-row description is written to ``system_distributed.cdc_generation_descriptions``
  at QUORUM, and it is loaded through the coordinator at QUORUM. Both kinds are learnt from
  gossip and ordered by timestamp. A node without the feature (an "old version") publishes to
  the v1 ``cdc_streams_descriptions`` table; one with it publishes every generation, v1 or v2, to
  the v2 tables (and rewrites older v1 generations: ``_cdc_rewrite``).
* **Later generations** on request (``request_new_generation``; ``ringflow cluster
  new-cdc-generation`` over the node's request channel, as Scylla's
  ``checkAndRepairCdcStreams``): the requesting node proposes one over the current ring once the
  cluster is ready and settled, starting ``now + 2 * max(ring_delay, 2 gossip rounds) + leeway``
  so every node learns it before it operates.

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
    parse_generation_id,
    publication_batches,
)
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster._gossip_state import ApplicationState, EndpointState
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
from ringflow.cluster.service._membership import peer_info
from ringflow.cluster.service._node import ClusterNode
from ringflow.errors import RingflowError
from ringflow.ring import MIN_TOKEN
from ringflow.schema import Mutation, cdc_local_row, table_mutation
from ringflow.storage import Store

_log = logging.getLogger(__name__)

DEFAULT_SETTLE_MS = 2_000
DEFAULT_LEARN_WAIT_MS = 10_000
LEARN_WAIT_GOSSIP_ROUNDS = 10
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
    generation: GenerationId | None
    features: frozenset[str] = frozenset()

    @property
    def complete(self) -> bool:
        return self.host_id is not None and bool(self.tokens) and self.sharding is not None


def _state_value(state: EndpointState, key: ApplicationState) -> str | None:
    versioned = state.get(key)
    return None if versioned is None else versioned.value


def _parse_generation(text: str | None) -> GenerationId | None:
    """A gossiped ``CDC_GENERATION_ID``: v1 (``<ms>``) or v2 (``v2;<ms>;<uuid>``)."""
    if text is None:
        return None
    try:
        return parse_generation_id(text)
    except RingflowError:
        return None


CDC_GENERATIONS_V2_FEATURE = "CDC_GENERATIONS_V2"
"""The cluster feature of v2 generations (seed 000 "Internal generation descriptions table V1
and upgrade procedure"): a node that has it reads and writes v2 ids and the v2 internal table."""


def encode_features(features: Collection[str]) -> str:
    """``SUPPORTED_FEATURES``: the feature names, sorted, comma-separated (Scylla's form)."""
    return ",".join(sorted(features))


def parse_features(text: str | None) -> frozenset[str]:
    if not text:
        return frozenset()
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def generation_version(views: Sequence[MemberView]) -> int:
    """2 when every known endpoint gossips the ``CDC_GENERATIONS_V2`` feature, else 1: a new
    generation must be readable by every node of the cluster (seed 000)."""
    if views and all(CDC_GENERATIONS_V2_FEATURE in view.features for view in views):
        return 2
    return 1


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
    generation = _parse_generation(_state_value(state, ApplicationState.CDC_GENERATION_ID))
    features = parse_features(_state_value(state, ApplicationState.SUPPORTED_FEATURES))
    if info is None:
        return MemberView(endpoint, None, (), None, alive, generation, features)
    return MemberView(
        endpoint, info.host.host_id, info.tokens, _sharding(state), alive, generation, features
    )


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


def newest_generation(views: Sequence[MemberView]) -> GenerationId | None:
    ids = [view.generation for view in views if view.generation is not None]
    return max(ids, key=_order, default=None)


def _order(generation: GenerationId) -> tuple[int, int]:
    """By timestamp; a v1 id (no uuid) before a v2 id of the same millisecond."""
    if isinstance(generation, GenerationIdV1):
        return (generation.timestamp_ms, -1)
    return (generation.timestamp_ms, generation.uuid.int)


def is_newer(candidate: GenerationId, current: GenerationId | None) -> bool:
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
    """Create a generation over these ring tokens (owner's sharding per token): the first one,
    or a later one asked for (``request_new_generation``). ``version`` 1 (timestamp id, v1
    tables) while some node lacks ``CDC_GENERATIONS_V2``, else 2 (``generation_version``)."""

    sharding: Mapping[int, tuple[int, int]]
    version: int = 2
    first: bool = True


@dataclass(frozen=True, slots=True)
class Announce:
    """Gossip ``CDC_GENERATION_ID`` = this id (the proposer, right after the data is written)."""

    generation: GenerationId


@dataclass(frozen=True, slots=True)
class Prepare:
    generation: GenerationId


@dataclass(frozen=True, slots=True)
class Load:
    """Read the description from the local internal rows, after ``delay_ms``."""

    generation: GenerationId
    delay_ms: int


@dataclass(frozen=True, slots=True)
class Activate:
    """``cdc.insert``, persist ``system.cdc_local``, gossip the id."""

    generation: GenerationId
    description: TopologyDescription


@dataclass(frozen=True, slots=True)
class Publish:
    """Make sure the user-facing tables describe the generation, after ``delay_ms``."""

    generation: GenerationId
    delay_ms: int


@dataclass(frozen=True, slots=True)
class HoldWrites:
    """Refuse CDC writes until ``ReleaseWrites``: the node may not know every generation yet."""

    reason: str


@dataclass(frozen=True, slots=True)
class ReleaseWrites:
    """The node has heard the cluster's generations (or waited long enough): route writes."""


GenerationAction = (
    Propose | Announce | Prepare | Load | Activate | Publish | HoldWrites | ReleaseWrites
)


class GenerationDecider:
    """The node's generation state machine (module docstring). Feed it gossip views at each tick
    and the outcomes of the actions it asked for; it answers with the next actions."""

    def __init__(
        self,
        local_host_id: uuid.UUID,
        *,
        settle_ms: int = DEFAULT_SETTLE_MS,
        retry: RetryPolicy = RetryPolicy(),
        loaded: GenerationId | None = None,
        remembered: GenerationId | None = None,
        wait_for_peers: bool = False,
        learn_wait_ms: int = DEFAULT_LEARN_WAIT_MS,
    ) -> None:
        self.local_host_id = local_host_id
        self.learnt = not wait_for_peers
        """Heard the cluster's generations since start (module docstring, "Catching up")."""
        self.learn_wait_ms = learn_wait_ms
        self._first_tick_ms: int | None = None
        self.settle_ms = settle_ms
        self.retry = retry
        self.current = loaded if remembered is None else remembered
        """The newest generation learnt (loaded or only prepared)."""
        self.loaded = loaded
        self._remembered = remembered
        """Named by ``system.cdc_local`` but not loadable at start-up (a v1 generation, whose
        description lives in the replicated ``system_distributed``): loaded like a learnt one."""
        self._requested = False
        self.published: set[GenerationId] = set()
        self._proposing = False
        self._proposal_failures = 0
        self._next_proposal_ms = 0
        self._signature: frozenset[tuple[str, tuple[int, ...]]] | None = None
        self._stable_since_ms = 0
        self._load_attempts = 0
        self._publish_attempts: dict[GenerationId, int] = {}

    def start(self) -> list[GenerationAction]:
        """At start-up: a generation reloaded from ``system.cdc_local`` is (re)published; one
        only remembered is prepared and loaded."""
        hold: list[GenerationAction] = []
        if not self.learnt:
            hold = [HoldWrites("it has not heard the cluster's CDC generations since it started")]
        if self._remembered is not None:
            return [*hold, *self._learn(self._remembered)]
        return hold if self.loaded is None else [*hold, Publish(self.loaded, 0)]

    def request_new_generation(self) -> None:
        """Ask for a new generation over the current ring (the admin request ``ringflow
        cluster new-cdc-generation``; Scylla's ``checkAndRepairCdcStreams`` regenerates the same
        way): this node proposes it at the next tick when the cluster is ready and settled."""
        self._requested = True

    def on_tick(
        self, views: Sequence[MemberView], seeds: Collection[str], now_ms: int
    ) -> list[GenerationAction]:
        newest = newest_generation(views)
        if newest is not None and is_newer(newest, self.current):
            return [*self._learn(newest), *self._caught_up(views, now_ms)]
        caught_up = self._caught_up(views, now_ms)
        if caught_up:
            return caught_up
        first = self.current is None and newest is None
        settled = self._may_propose(views, seeds, now_ms, first)  # tracks stability always
        if (first or self._requested) and settled:
            self._proposing = True
            return [Propose(ring_sharding(views), generation_version(views), first)]
        return []

    def _caught_up(self, views: Sequence[MemberView], now_ms: int) -> list[GenerationAction]:
        """``ReleaseWrites`` once a live, complete peer is in view (its gossip carried every
        generation id; the newest was learnt in this tick), or ``learn_wait_ms`` after the first
        tick without one."""
        if self.learnt:
            return []
        if self._first_tick_ms is None:
            self._first_tick_ms = now_ms
        heard = any(v.alive and v.complete and v.host_id != self.local_host_id for v in views)
        if not heard and now_ms - self._first_tick_ms < self.learn_wait_ms:
            return []
        if not heard:
            _log.warning(
                "no live peer heard in %d ms since start: CDC writes go on with the generations "
                "known locally",
                now_ms - self._first_tick_ms,
            )
        self.learnt = True
        return [ReleaseWrites()]

    def _may_propose(
        self, views: Sequence[MemberView], seeds: Collection[str], now_ms: int, first: bool
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
            not first or proposer(views) == self.local_host_id
        )

    def _learn(self, generation: GenerationId) -> list[GenerationAction]:
        self.current = generation
        self._load_attempts = 0
        return [Prepare(generation), Load(generation, 0)]

    def on_proposed(self, generation: GenerationId | None, now_ms: int) -> list[GenerationAction]:
        """The proposal's data is written on every node (``generation``), or failed (None)."""
        self._proposing = False
        if generation is None:
            self._next_proposal_ms = now_ms + self.retry.delay_ms(self._proposal_failures)
            self._proposal_failures += 1
            return []
        self._requested = False
        if not is_newer(generation, self.current):
            return []
        return [Announce(generation), *self._learn(generation)]

    def on_loaded(
        self, generation: GenerationId, description: TopologyDescription | None
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

    def on_published(self, generation: GenerationId, ok: bool) -> list[GenerationAction]:
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


def has_peers(cluster: ClusterNode) -> bool:
    """Whether the node belongs to a cluster of more than itself: seeds other than itself, or a
    ``system.peers`` row from an earlier run."""
    if set(cluster.settings.seeds) - {cluster.settings.endpoint}:
        return True
    page = cluster.store.scan(("system", "peers"), MIN_TOKEN, MIN_TOKEN, page_size=1, now_s=0)
    return bool(page.rows)


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
        remembered: GenerationId | None = None,
        v2_enabled: bool = True,
    ) -> None:
        self.cluster = cluster
        self.cdc = cdc
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
        if settle_ms is None:
            settle_ms = max(
                DEFAULT_SETTLE_MS, SETTLE_GOSSIP_ROUNDS * cluster.settings.gossip_interval_ms
            )
        interval_ms = cluster.settings.gossip_interval_ms
        self.decider = GenerationDecider(
            cluster.host.host_id,
            settle_ms=settle_ms,
            retry=retry,
            loaded=None if initial is None else initial.id,
            remembered=remembered,
            wait_for_peers=has_peers(cluster),
            learn_wait_ms=max(DEFAULT_LEARN_WAIT_MS, LEARN_WAIT_GOSSIP_ROUNDS * interval_ms),
        )

    def start(self) -> None:
        self._run(self.decider.start())

    def tick(self, now_ms: int) -> None:
        gossiper = self.cluster.gossiper
        try:
            views = member_views(gossiper.endpoint_states(), gossiper.is_alive)
            self._run(self.decider.on_tick(views, self.cluster.settings.seeds, now_ms))
        except Exception:  # never break the node's gossip loop
            _log.exception("CDC generation round failed")

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
