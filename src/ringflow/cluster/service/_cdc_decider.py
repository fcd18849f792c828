"""One CDC generation for the whole cluster, decided with no I/O (issue 21 §2: a core of the
node state): who creates it, and how every node learns it. The shell that carries its actions
out is ``_cdc_generations.CdcGenerationService``.

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
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from ringflow.cdc import (
    GenerationId,
    GenerationIdV1,
    TopologyDescription,
    parse_generation_id,
)
from ringflow.cluster._gossip_state import ApplicationState, EndpointState
from ringflow.cluster.service._membership import peer_info
from ringflow.errors import RingflowError, invariant

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

    def validate(self) -> None:
        """The generation operated (``loaded``) and every one published are never newer than
        the newest learnt (``current``); retries stay within the policy's attempts."""
        current, loaded = self.current, self.loaded
        invariant(
            loaded is None or (current is not None and not is_newer(loaded, current)),
            lambda: f"operating CDC generation {loaded}, newer than the newest learnt {current}",
        )
        newer = [g for g in self.published if current is None or is_newer(g, current)]
        invariant(not newer, lambda: f"published {newer}, newer than the newest learnt {current}")
        invariant(
            0 <= self._load_attempts <= self.retry.max_attempts,
            lambda: f"{self._load_attempts} load attempts, at most {self.retry.max_attempts}",
        )


@dataclass(frozen=True, slots=True)
class RunJob:
    """Run background job ``name`` now: it is due and the cluster is ready."""

    name: str


class BackgroundJob:
    """When a background job over the cluster's CDC tables runs (the expiry of old
    generations, the v1 -> v2 streams rewrite): only while ``active``, once the cluster is
    ready (every known endpoint complete and alive: the replicas of ``system_distributed``
    are known), never twice at once, and not before ``next_ms``. The node state asks ``due``
    every round (``RunJob``); the job's shell says when a run ended (``done``) or that the job
    has nothing more to do (``stop``)."""

    __slots__ = ("active", "name", "next_ms", "running")

    def __init__(self, name: str, *, active: bool = True) -> None:
        self.name = name
        self.active = active
        self.running = False
        self.next_ms = 0

    def due(self, ready: bool, now_ms: int) -> bool:
        """Whether to run now; if so, the job is running until ``done`` or ``stop``."""
        if not self.active or self.running or now_ms < self.next_ms or not ready:
            return False
        self.running = True
        return True

    def done(self, next_ms: int) -> None:
        """The run ended; the next one not before ``next_ms``."""
        self.running = False
        self.next_ms = next_ms

    def activate(self) -> None:
        self.active = True

    def stop(self) -> None:
        """Nothing more to do: never due again."""
        self.running = False
        self.active = False

    def validate(self) -> None:
        invariant(self.active or not self.running, lambda: f"{self.name} runs, stopped")


def publication_needed(already_published: bool) -> bool:
    """Idempotent publication: nothing to do once the timestamp row (the commit) exists."""
    return not already_published


# --- thread-safe metadata ------------------------------------------------------------------------
