"""A node's topology change decided with no I/O (issue 21 §2: a core of the node state): when
a joiner or a leaver announces itself, withdraws, makes its generation, streams, finishes; and
the same for a removenode this node coordinates. ``_bootstrap.TopologyService`` is the shell
that carries its actions out (the module docstring there tells the whole story); this core
holds the change's state and decides its next step from gossip, the membership, schema
agreement and the CDC generation the node operates.

Events (``TopologyEvent``; ``NodeState.topology`` passes them with what they read):

* ``Tick``: once a gossip round, after the round's actions have been carried out;
* ``Decommission``, ``RemoveNode``: the operator's requests;
* ``GenerationMade`` / ``GenerationFailed``: the changed ring's generation written (or not);
* ``Streamed`` / ``Restreamed``: a stream run (a join's or leave's; a removenode's pulls
  everywhere) ended, well or not;
* ``JoinPersisted``: a finished join's generation persisted and its publications run.

Steps out (``TopologyStep``): the gossip states it sets itself (STATUS, REMOVAL_COORDINATOR;
the node's own gossip state, in memory), which ``RingChanged`` tells the node state to rebuild
the membership from; ``Adopted`` for the generation decider (gossip it, load it); ``Refused``
(an operator's request turned down: why, and whether to ask again); and the shell's actions
(``TopologyAction``): make the generation, stream, restream everywhere, persist a finished
join, save the bootstrap state, exit. An action's ``delay_ms`` is when the shell carries it
out (a retry's back-off).
"""

from __future__ import annotations

import enum
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ringflow.cdc import DEFAULT_LEEWAY_US, GenerationId
from ringflow.cluster._gossip import Gossiper
from ringflow.cluster._gossip_state import ApplicationState
from ringflow.cluster._topology_change import (
    BOOT_STATUS,
    LEAVING_STATUS,
    LEFT_STATUS,
    NORMAL_STATUS,
    REMOVED,
    REMOVING,
    decode_removals,
    encode_removals,
    status_value,
)
from ringflow.cluster.service._membership import Membership
from ringflow.errors import invariant

_log = logging.getLogger(__name__)

ALIVE = "the node is alive (decommission a live node)"
BUSY = "a topology change is in progress here"
STARTING_STATUS = "STARTING"
RING_DELAY_ROUNDS = 5
"""Ring delay for topology changes, in gossip rounds, when none is configured."""
STREAM_ATTEMPTS = 5
"""Failed stream runs before a join starts again (a leave keeps retrying, less often)."""
STREAM_RETRY_MS = 2_000
STREAM_RETRY_MAX_MS = 30_000
RESTREAM_RETRY_MS = 2_000
ANNOUNCE_WAIT_ROUNDS_MAX = 12
"""Ring delays a change waits for every live member to show its announcement
(``TopologyChange._announcement_spread``)."""


def ring_delay(cdc_ring_delay_ms: int, gossip_interval_ms: int) -> int:
    """Ring delay for topology changes: the configured one, at least ``RING_DELAY_ROUNDS``
    gossip rounds."""
    return max(cdc_ring_delay_ms, RING_DELAY_ROUNDS * gossip_interval_ms)


class Phase(enum.Enum):
    IDLE = "idle"
    WAIT_SCHEMA = "wait-schema"
    ANNOUNCED = "announced"
    PROPOSING = "proposing"
    STREAMING = "streaming"
    WAIT_GENERATION = "wait-generation"
    LEFT = "left"
    DONE = "done"


# --- events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    """A gossip round went by."""


@dataclass(frozen=True, slots=True)
class Decommission:
    """The operator asks this node to leave the ring."""


@dataclass(frozen=True, slots=True)
class RemoveNode:
    """The operator asks this node to remove the dead node ``host_id``."""

    host_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class GenerationMade:
    """The changed ring's generation is written (its description rows), with this id."""

    generation: GenerationId


@dataclass(frozen=True, slots=True)
class GenerationFailed:
    """Building or writing the changed ring's generation failed."""


@dataclass(frozen=True, slots=True)
class Streamed:
    """A join's or a leave's stream run ended (``ok``: every task done)."""

    ok: bool


@dataclass(frozen=True, slots=True)
class Restreamed:
    """A removenode's pulls, here and on every live member, ended (``ok``: none failed)."""

    ok: bool


@dataclass(frozen=True, slots=True)
class JoinPersisted:
    """A finished join's generation is persisted here and its publications run."""


TopologyEvent = (
    Tick
    | Decommission
    | RemoveNode
    | GenerationMade
    | GenerationFailed
    | Streamed
    | Restreamed
    | JoinPersisted
)


# --- steps ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RingChanged:
    """This node's own STATUS or REMOVAL_COORDINATOR changed: the membership is rebuilt."""


@dataclass(frozen=True, slots=True)
class Adopted:
    """The generation decider takes the changed ring's generation (gossips it, loads it)."""

    generation: GenerationId


@dataclass(frozen=True, slots=True)
class Refused:
    """An operator's request turned down: why, and whether asking again may succeed."""

    reason: str
    retry: bool


@dataclass(frozen=True, slots=True)
class MakeGeneration:
    """Make the changed ring's generation (v2, or v1 while some node lacks the feature), from
    the gossip states of then; tell ``GenerationMade`` or ``GenerationFailed``."""

    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class StartStreaming:
    """Plan the join's or leave's streaming on the rings of then and run it; tell
    ``Streamed``."""

    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class RestreamEverywhere:
    """Have this node and every live member pull what they gain from removing ``host_id``;
    tell ``Restreamed``."""

    host_id: uuid.UUID
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class PersistJoin:
    """Persist the generation a finished join operates and run its held publications; tell
    ``JoinPersisted``."""


@dataclass(frozen=True, slots=True)
class SaveBootstrapState:
    """Record the change's state in the data directory (``bootstrap.json``)."""

    state: str


@dataclass(frozen=True, slots=True)
class ExitNode:
    """The node has left the ring and gossip has spread it: the process ends."""


TopologyAction = (
    MakeGeneration
    | StartStreaming
    | RestreamEverywhere
    | PersistJoin
    | SaveBootstrapState
    | ExitNode
)
"""What the shell carries out (``TopologyService``)."""

TopologyStep = RingChanged | Adopted | Refused | TopologyAction
Steps = list[TopologyStep]


@dataclass(frozen=True, slots=True)
class RingState:
    """What a topology event reads: the node's gossip and membership (its own gossip state is
    what the change sets), whether the live members agree on the schema, and the generation
    the node operates."""

    gossiper: Gossiper
    membership: Membership
    schema_agreed: Callable[[], bool]
    loaded: GenerationId | None


class TopologyChange:
    """The topology change of one node (module docstring)."""

    def __init__(
        self,
        endpoint: str,
        *,
        joining: bool,
        ring_delay_ms: int,
        gossip_interval_ms: int,
        rng: random.Random,
        now_ms: int,
    ) -> None:
        self.endpoint = endpoint
        self.ring_delay_ms = ring_delay_ms
        self.gossip_interval_ms = gossip_interval_ms
        self.rng = rng
        self.change: str | None = "join" if joining else None
        self.phase = Phase.WAIT_SCHEMA if joining else Phase.IDLE
        self.phase_since_ms = now_ms
        self.generation: GenerationId | None = None
        self.made: list[GenerationId] = []
        """Every generation this change made, oldest first (a join given up and started again
        makes another)."""
        self.stream_attempts = 0
        self.removing: uuid.UUID | None = None
        self.refused: str | None = None
        """Why this node will not join (a token collision), for the log and status."""
        self._backoff_ms = 0
        """After a withdrawal, how long ``WAIT_SCHEMA`` waits before announcing again."""
        self._announced_version = 0
        """Our gossip version of the last STATUS or removal this change announced."""
        self._handlers: dict[type, Callable[[Any, int, RingState, Steps], None]] = {
            Tick: lambda _e, now, ring, steps: self._tick(now, ring, steps),
            Decommission: lambda _e, now, ring, steps: self._decommission(now, ring, steps),
            RemoveNode: lambda e, now, ring, steps: self._removenode(e.host_id, now, ring, steps),
            GenerationMade: lambda e, now, _ring, steps: self._made(e.generation, now, steps),
            GenerationFailed: self._on_failed,
            Streamed: lambda e, now, ring, steps: self._streamed(e.ok, now, ring, steps),
            Restreamed: lambda e, now, ring, steps: self._restreamed(e.ok, now, ring, steps),
            JoinPersisted: self._on_persisted,
        }

    def handle(self, event: TopologyEvent, now_ms: int, ring: RingState) -> list[TopologyStep]:
        """What ``event`` means at ``now_ms``: the steps to take, in order (its handler looked
        up by the event's exact type, as the executor looks up an action's)."""
        steps: list[TopologyStep] = []
        self._handlers[type(event)](event, now_ms, ring, steps)
        return steps

    def _on_failed(self, _e: GenerationFailed, _now: int, _r: RingState, steps: Steps) -> None:
        steps.append(MakeGeneration(2 * self.gossip_interval_ms))

    def _on_persisted(self, _e: JoinPersisted, now_ms: int, ring: RingState, steps: Steps) -> None:
        self._set_status(ring.gossiper, NORMAL_STATUS, steps)
        steps.append(SaveBootstrapState("done"))
        self._enter(Phase.DONE, now_ms)

    def validate(self) -> None:
        """The change's state hangs together: idle exactly when no change was asked for, a
        removal names its node, the generation it operates on is the last one it made, a
        change waiting for its generation or gone has one."""
        invariant(
            (self.phase is Phase.IDLE) == (self.change is None),
            lambda: f"topology change {self.change!r} in phase {self.phase.value}",
        )
        invariant(
            self.change != "remove" or self.removing is not None,
            "a removenode without the node it removes",
        )
        invariant(
            self.phase is not Phase.LEFT or self.change == "leave",
            lambda: f"left the ring in a {self.change!r} change",
        )
        invariant(
            self.generation is None or (bool(self.made) and self.generation == self.made[-1]),
            lambda: f"generation {self.generation} is not the last one made, {self.made}",
        )
        invariant(
            self.phase not in (Phase.WAIT_GENERATION, Phase.LEFT) or self.generation is not None,
            lambda: f"phase {self.phase.value} without a generation",
        )
        invariant(
            self.change == "leave" or self.stream_attempts <= STREAM_ATTEMPTS,
            lambda: f"{self.stream_attempts} failed stream runs of a {self.change!r} change",
        )

    # -- the state machine ------------------------------------------------------------------

    def _enter(self, phase: Phase, now_ms: int) -> None:
        _log.info("topology change %s: %s -> %s", self.change, self.phase.value, phase.value)
        self.phase, self.phase_since_ms = phase, now_ms

    def _tick(self, now_ms: int, ring: RingState, steps: list[TopologyStep]) -> None:
        waited = now_ms - self.phase_since_ms
        if self.phase is Phase.WAIT_SCHEMA:
            if self._ready_to_announce(ring) and waited >= max(
                self.gossip_interval_ms, self._backoff_ms
            ):
                word = BOOT_STATUS if self.change == "join" else LEAVING_STATUS
                self._set_status(ring.gossiper, word, steps)
                self._enter(Phase.ANNOUNCED, now_ms)
        elif self.phase is Phase.ANNOUNCED and self._another_change(ring.membership):
            self._withdraw(now_ms, ring, steps)
        elif self.phase is Phase.ANNOUNCED and self._announcement_spread(waited, ring):
            if self.change == "remove":
                assert self.removing is not None
                self._enter(Phase.STREAMING, now_ms)
                steps.append(RestreamEverywhere(self.removing))
            else:
                self._enter(Phase.PROPOSING, now_ms)
                steps.append(MakeGeneration())
        elif self.phase is Phase.WAIT_GENERATION and self._generation_operates(now_ms, ring):
            self._finish(now_ms, ring, steps)
        elif self.phase is Phase.LEFT and waited >= self.ring_delay_ms:
            self._enter(Phase.DONE, now_ms)
            steps.append(ExitNode())

    def _set_status(self, gossiper: Gossiper, word: str, steps: list[TopologyStep]) -> None:
        value = status_value(word, self._own_tokens(gossiper))
        versioned = gossiper.set_application_state(ApplicationState.STATUS, value)
        self._announced_version = versioned.version
        steps.append(RingChanged())

    def _set_removal(
        self, gossiper: Gossiper, host_id: uuid.UUID, word: str, steps: list[TopologyStep]
    ) -> None:
        state = gossiper.endpoint_state(self.endpoint)
        value = None if state is None else state.get(ApplicationState.REMOVAL_COORDINATOR)
        removals = decode_removals(None if value is None else value.value)
        removals[host_id] = word
        versioned = gossiper.set_application_state(
            ApplicationState.REMOVAL_COORDINATOR, encode_removals(removals)
        )
        self._announced_version = versioned.version
        steps.append(RingChanged())

    def _own_tokens(self, gossiper: Gossiper) -> tuple[int, ...]:
        state = gossiper.endpoint_state(self.endpoint)
        tokens = None if state is None else state.get(ApplicationState.TOKENS)
        if tokens is None:
            return ()
        return tuple(int(part) for part in tokens.value.split(",") if part)

    def _another_change(self, membership: Membership) -> bool:
        """Another node joins or leaves too: two nodes announced at once, each before it saw the
        other (gossip is not instant). One range movement at a time (Cassandra's
        ``consistent.rangemovement``), so a joiner or leaver that sees another change before
        it proposes its generation withdraws (``_withdraw``). Both cannot go on: a node goes
        on only once every live member has shown it holds its announcement
        (``_announcement_spread``) and it sees no other change; if A went on without B's
        announcement, B had A's before A went on, so B sees A and withdraws."""
        if self.change not in ("join", "leave"):
            return False
        return any(e != self.endpoint for e in membership.transitions)

    def _withdraw(self, now_ms: int, ring: RingState, steps: list[TopologyStep]) -> None:
        """Take the announcement back (``_take_back``) and announce again later."""
        _log.warning(
            "topology change %s: another change is in flight (%s); withdrawing and retrying",
            self.change,
            ", ".join(sorted(e for e in ring.membership.transitions if e != self.endpoint)),
        )
        self._take_back(now_ms, ring, steps)

    def _take_back(self, now_ms: int, ring: RingState, steps: list[TopologyStep]) -> None:
        """Gossip STARTING (a joiner) or NORMAL (a leaver) again and wait a random 1-3 ring
        delays in ``WAIT_SCHEMA`` before announcing again."""
        word = STARTING_STATUS if self.change == "join" else NORMAL_STATUS
        self._set_status(ring.gossiper, word, steps)
        self._backoff_ms = self.rng.randint(1, 3) * self.ring_delay_ms
        self._enter(Phase.WAIT_SCHEMA, now_ms)

    def _announcement_spread(self, waited_ms: int, ring: RingState) -> bool:
        """Every live ring member has seen the announced STATUS (or removal) and ``ring_delay``
        has passed: a coordinator that had not would leave the joiner (or the gainers of a
        leaver's ranges) out of the writes it coordinates while streaming reads the sources,
        and those writes would be lost there. Gossip is no guarantee within ``ring_delay`` when
        messages drop; ``Gossiper.seen_by`` says who has it. A live member that never shows it
        (a partition only one way) is waited for ``ANNOUNCE_WAIT_ROUNDS_MAX`` ring delays, then
        the change goes on, as Cassandra's does after ``ring_delay``, with a warning."""
        if waited_ms < self.ring_delay_ms:
            return False
        gossiper, membership = ring.gossiper, ring.membership
        peers = (set(membership.members) | set(membership.transitions)) - {self.endpoint}
        behind = sorted(
            e
            for e in peers
            if gossiper.is_alive(e) and gossiper.seen_by(e) < self._announced_version
        )
        if not behind:
            return True
        if waited_ms < ANNOUNCE_WAIT_ROUNDS_MAX * self.ring_delay_ms:
            return False
        _log.warning(
            "topology change %s goes on although %s never showed the announcement",
            self.change,
            ", ".join(behind),
        )
        return True

    def _ready_to_announce(self, ring: RingState) -> bool:
        """Schema agreed with the live members, and no other node joining or leaving (one
        range movement at a time, Cassandra's ``consistent.rangemovement``)."""
        membership = ring.membership
        live = ring.gossiper.live_endpoints()
        others = [e for e in membership.transitions if e != self.endpoint]
        if others or not membership.members or not live or not ring.schema_agreed():
            return False
        return self._tokens_free(ring)

    def _tokens_free(self, ring: RingState) -> bool:
        """None of our tokens is another member's: Cassandra refuses to bootstrap "to existing
        token" (two nodes that discovered the ring at the same time can pick the same balanced
        tokens). We wait, saying so in the log and status, rather than join a ring where a
        token has two owners; the operator removes one of the nodes."""
        own = set(self._own_tokens(ring.gossiper))
        owners = {
            token: info.host.endpoint
            for endpoint, info in ring.membership.members.items()
            if endpoint != self.endpoint
            for token in info.tokens
        }
        taken = sorted((token, owners[token]) for token in own if token in owners)
        if taken and self.refused is None:
            self.refused = f"tokens already owned: {taken[:5]}; not joining"
            _log.error("bootstrap: %s (remove this node and start it again)", self.refused)
        return not taken

    def _generation_operates(self, now_ms: int, ring: RingState) -> bool:
        generation = self.generation
        return (
            generation is not None
            and now_ms >= generation.timestamp_ms + DEFAULT_LEEWAY_US // 1000
            and ring.loaded == generation
        )

    def _finish(self, now_ms: int, ring: RingState, steps: list[TopologyStep]) -> None:
        if self.change == "remove":
            _log.info("removenode %s done", self.removing)
            self._enter(Phase.DONE, now_ms)
        elif self.change == "join":
            steps.append(PersistJoin())  # system.cdc_local first, as Scylla's bootstrap
        else:
            self._set_status(ring.gossiper, LEFT_STATUS, steps)
            steps.append(SaveBootstrapState("left"))
            self._enter(Phase.LEFT, now_ms)

    def _decommission(self, now_ms: int, ring: RingState, steps: list[TopologyStep]) -> None:
        """Start leaving the ring, unless a change is in progress here or elsewhere."""
        if self.phase not in (Phase.IDLE, Phase.DONE) or ring.membership.transitions:
            steps.append(Refused(BUSY, retry=True))
            return
        self.change = "leave"
        self._set_status(ring.gossiper, LEAVING_STATUS, steps)
        self._enter(Phase.ANNOUNCED, now_ms)

    def _removenode(
        self, host_id: uuid.UUID, now_ms: int, ring: RingState, steps: list[TopologyStep]
    ) -> None:
        """Start removing the dead node ``host_id``, unless it is not a member, is alive, or a
        change is in progress here."""
        if self.phase not in (Phase.IDLE, Phase.DONE) or self.change == "leave":
            steps.append(Refused(BUSY, retry=True))
            return
        members = ring.membership.members.values()
        info = next((i for i in members if i.host.host_id == host_id), None)
        if info is None:
            steps.append(Refused(f"{host_id} is not a ring member", retry=False))
            return
        if info.host.endpoint == self.endpoint or ring.gossiper.is_alive(info.host.endpoint):
            steps.append(Refused(ALIVE, retry=True))
            return
        self.change, self.removing, self.generation = "remove", host_id, None
        self._set_removal(ring.gossiper, host_id, REMOVING, steps)
        self._enter(Phase.ANNOUNCED, now_ms)

    def _made(self, generation: GenerationId, now_ms: int, steps: list[TopologyStep]) -> None:
        """The changed ring's generation is written: the decider adopts it; a join or leave
        streams, a removal (its ranges moved before the dead node was dropped) waits for it."""
        self.generation = generation
        self.made.append(generation)
        _log.info("CDC generation %s for the %s", generation.to_gossip(), self.change)
        steps.append(Adopted(generation))
        if self.change == "remove":
            self._enter(Phase.WAIT_GENERATION, now_ms)
        else:
            self._enter(Phase.STREAMING, now_ms)
            steps.append(StartStreaming())

    def _streamed(self, ok: bool, now_ms: int, ring: RingState, steps: list[TopologyStep]) -> None:
        if ok:
            self._enter(Phase.WAIT_GENERATION, now_ms)
            return
        self.stream_attempts += 1
        _log.warning("streaming failed (attempt %d)", self.stream_attempts)
        if self.stream_attempts < STREAM_ATTEMPTS:
            steps.append(StartStreaming(STREAM_RETRY_MS))
        elif self.change == "join":
            self._join_again(now_ms, ring, steps)
        else:  # a leaver cannot hand its ranges to anyone else: it retries until they answer
            delay_ms = min(STREAM_RETRY_MAX_MS, STREAM_RETRY_MS << (self.stream_attempts - 1))
            _log.error("streaming for the leave keeps failing; retrying in %d ms", delay_ms)
            steps.append(StartStreaming(delay_ms))

    def _join_again(self, now_ms: int, ring: RingState, steps: list[TopologyStep]) -> None:
        """Give the join up after ``STREAM_ATTEMPTS`` failed stream runs and start it again
        (``_bootstrap`` module docstring, step 4), rather than stay announced with nothing
        moving: a joiner stuck in ``STREAMING`` would be a pending replica forever and hold
        every other topology change back (one at a time). What it streamed stays (applying a
        partition again converges); its generation stays too (the cluster operates it until
        the next one, as that of a joiner restarted before it was done)."""
        _log.error(
            "bootstrap: streaming failed %d times; withdrawing and joining again",
            self.stream_attempts,
        )
        self.stream_attempts = 0
        self._take_back(now_ms, ring, steps)

    def _restreamed(
        self, ok: bool, now_ms: int, ring: RingState, steps: list[TopologyStep]
    ) -> None:
        """A removenode's pulls ended: on success the node is dropped from the ring
        (``removed``) and the generation without it made; a failed run is retried, up to
        ``STREAM_ATTEMPTS`` runs."""
        host_id = self.removing
        assert host_id is not None
        if not ok:
            self.stream_attempts += 1
            if self.stream_attempts < STREAM_ATTEMPTS:
                steps.append(RestreamEverywhere(host_id, RESTREAM_RETRY_MS))
            else:
                _log.error("removenode %s: restreaming failed %d times", host_id, STREAM_ATTEMPTS)
            return
        self._set_removal(ring.gossiper, host_id, REMOVED, steps)
        self._enter(Phase.PROPOSING, now_ms)
        steps.append(MakeGeneration())
