"""Hinted handoff bookkeeping: whom to hint, when to replay, which hints to drop.

Owns ``shared/reference/cassandra-core.md`` §7.1 (C41 ``service/StorageProxy.shouldHint``,
``hints/Hint.java``, ``hints/HintsService.java``, ``HintsDispatchTrigger``) and seed 003 "Replica
Synchronization". The hints themselves live in the node's store (``Store.store_hint``,
``hints_for``, ``delete_hint``); this pure core only decides, and the shell carries out its
actions and reports back. Time is passed in as ``now_ms``.

Rules:

* ``should_hint(host, now_ms)`` is False when hints are off, off for the host's DC, when the
  host has been down longer than ``max_hint_window_ms`` (3 h), when its oldest hint still queued
  is older than the window (Cassandra's persistent window), or when ``max_targets`` other hosts
  already have hints. A host never seen down has downtime 0 (a live replica that timed out is
  hinted).
* A hint's time to live is the smallest ``gc_grace_seconds`` of the tables its mutations touch
  (``Hint.gcgs``). A hint that has outlived it is deleted, never replayed: replaying data older
  than gc_grace could resurrect what a purged tombstone deleted. The store does not record the
  grace period at creation, so the table's current value is used (Cassandra takes the smaller of
  the recorded and the current one).
* Every ``dispatch_interval_ms`` (10 s) ``tick`` emits ``ReplayHints`` for each hinted target
  that is UP (failure detector) and gossips our schema version, and is not already being
  replayed. The shell fetches that target's oldest hints and calls ``on_hints_fetched``, which
  answers ``DeleteHint`` (expired) and ``DeliverHint`` (at most ``max_deliveries_in_flight``).
  A delivered hint is deleted (``on_hint_delivered``); a failed one is kept for the next round
  (``on_hint_delivery_failed``). An empty fetch means the target has no hints left.
* A target's replay goes IDLE -> FETCHING -> DELIVERING -> IDLE (``_TRANSITIONS``); any other
  step is a bug and raises ``InvalidTransition`` with the manager's story.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Protocol, final

from ringflow.cluster._messages import Verb
from ringflow.cluster._write_path import DEFAULT_STORY_LIMIT, InvalidTransition
from ringflow.errors import InternalError, InvalidRequest, invariant
from ringflow.ring import Host
from ringflow.schema import Mutation

MAX_HINT_WINDOW_MS: Final = 3 * 3600 * 1000
"""``max_hint_window: 3h``."""
HINT_DISPATCH_INTERVAL_MS: Final = 10_000
"""``HintsService`` schedules ``HintsDispatchTrigger`` every 10 s."""
DEFAULT_MAX_DELIVERIES_IN_FLIGHT: Final = 64
DEFAULT_MAX_TARGETS: Final = 4096

GcGraceLookup = Callable[[str, str], int]
"""``(keyspace, table) -> gc_grace_seconds`` under the current schema."""


class StoredHint(Protocol):
    """A hint as the store returns it (``ringflow.storage.Hint`` has this shape)."""

    @property
    def hint_id(self) -> int: ...

    @property
    def created_ms(self) -> int: ...

    @property
    def mutations(self) -> tuple[Mutation, ...]: ...


def hint_ttl_s(mutations: Iterable[Mutation], gc_grace_s_of: GcGraceLookup) -> int:
    """The hint's time to live: the smallest gc_grace_seconds of the tables it touches."""
    graces = [gc_grace_s_of(m.keyspace, m.table) for m in mutations]
    if not graces:
        raise InvalidRequest("a hint needs at least one mutation")
    return min(graces)


def is_hint_live(
    created_ms: int, mutations: Iterable[Mutation], now_ms: int, gc_grace_s_of: GcGraceLookup
) -> bool:
    """Whether a hint written at ``created_ms`` may still be replayed at ``now_ms``."""
    return now_ms < created_ms + hint_ttl_s(mutations, gc_grace_s_of) * 1000


# -- actions ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplayHints:
    """Action: fetch the oldest hints for ``target_id`` and pass them to ``on_hints_fetched``."""

    target_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class DeliverHint:
    """Action: send hint ``hint_id`` (its mutations as one unit) to the target (HINT_REQ)."""

    target_id: uuid.UUID
    hint_id: int
    mutations: tuple[Mutation, ...]

    @property
    def verb(self) -> Verb:
        return Verb.HINT_REQ


@dataclass(frozen=True, slots=True)
class DeleteHint:
    """Action: delete hint ``hint_id`` from the store: delivered, or ``expired`` (not replayed)."""

    target_id: uuid.UUID
    hint_id: int
    expired: bool = False


HintAction = ReplayHints | DeliverHint | DeleteHint


class ReplayPhase(Enum):
    IDLE = "idle"
    FETCHING = "fetching"
    DELIVERING = "delivering"


class _Step(Enum):
    DISPATCH = "dispatch"
    FETCHED = "fetched"
    NOTHING_TO_DELIVER = "nothing to deliver"
    ROUND_OVER = "round over"


_TRANSITIONS: Final[Mapping[tuple[ReplayPhase, _Step], ReplayPhase]] = {
    (ReplayPhase.IDLE, _Step.DISPATCH): ReplayPhase.FETCHING,
    (ReplayPhase.FETCHING, _Step.FETCHED): ReplayPhase.DELIVERING,
    (ReplayPhase.FETCHING, _Step.NOTHING_TO_DELIVER): ReplayPhase.IDLE,
    (ReplayPhase.DELIVERING, _Step.ROUND_OVER): ReplayPhase.IDLE,
}


@dataclass(slots=True)
class _TargetHints:
    earliest_hint_ms: int
    phase: ReplayPhase = ReplayPhase.IDLE
    in_flight: set[int] = field(default_factory=set)


@final
class HintManager:
    """The node's hint decisions (see module rules). Host liveness comes from the failure
    detector (``on_node_up``/``on_node_down``), schema versions from gossip."""

    __slots__ = (
        "_down_since_ms",
        "_local_schema_version",
        "_next_dispatch_ms",
        "_schema_versions",
        "_story",
        "_targets",
        "_up",
        "disabled_dcs",
        "dispatch_interval_ms",
        "enabled",
        "max_deliveries_in_flight",
        "max_hint_window_ms",
        "max_targets",
    )

    def __init__(
        self,
        *,
        enabled: bool = True,
        disabled_dcs: Iterable[str] = (),
        max_hint_window_ms: int = MAX_HINT_WINDOW_MS,
        dispatch_interval_ms: int = HINT_DISPATCH_INTERVAL_MS,
        max_deliveries_in_flight: int = DEFAULT_MAX_DELIVERIES_IN_FLIGHT,
        max_targets: int = DEFAULT_MAX_TARGETS,
        story_limit: int = DEFAULT_STORY_LIMIT,
    ) -> None:
        for name, value in (
            ("max_hint_window_ms", max_hint_window_ms),
            ("dispatch_interval_ms", dispatch_interval_ms),
            ("max_deliveries_in_flight", max_deliveries_in_flight),
            ("max_targets", max_targets),
        ):
            if type(value) is not int or value < 1:
                raise InvalidRequest(f"{name} must be a positive int, got {value!r}")
        self.enabled = enabled
        self.disabled_dcs = frozenset(disabled_dcs)
        self.max_hint_window_ms = max_hint_window_ms
        self.dispatch_interval_ms = dispatch_interval_ms
        self.max_deliveries_in_flight = max_deliveries_in_flight
        self.max_targets = max_targets
        self._down_since_ms: dict[uuid.UUID, int] = {}
        self._up: set[uuid.UUID] = set()
        self._schema_versions: dict[uuid.UUID, uuid.UUID] = {}
        self._local_schema_version: uuid.UUID | None = None
        self._targets: dict[uuid.UUID, _TargetHints] = {}
        self._next_dispatch_ms: int | None = None
        self._story: deque[str] = deque(maxlen=story_limit)

    # -- inspection ----------------------------------------------------------------------------

    def story(self) -> list[str]:
        return list(self._story)

    @property
    def hinted_targets(self) -> list[uuid.UUID]:
        """Hosts with hints queued, as far as this manager knows, sorted."""
        return sorted(self._targets)

    def phase_of(self, target_id: uuid.UUID) -> ReplayPhase | None:
        state = self._targets.get(target_id)
        return None if state is None else state.phase

    def is_up(self, host_id: uuid.UUID) -> bool:
        return host_id in self._up

    def downtime_ms(self, host_id: uuid.UUID, now_ms: int) -> int:
        """How long ``host_id`` has been down (0 if it is not known to be down)."""
        since = self._down_since_ms.get(host_id)
        return 0 if since is None else max(0, now_ms - since)

    def should_hint(self, host: Host, now_ms: int) -> bool:
        """Whether a write ``host`` missed should be kept as a hint (module rules)."""
        if not self.enabled or host.dc in self.disabled_dcs:
            return False
        if self.downtime_ms(host.host_id, now_ms) > self.max_hint_window_ms:
            return False
        state = self._targets.get(host.host_id)
        if state is None:
            return len(self._targets) < self.max_targets
        return now_ms - state.earliest_hint_ms <= self.max_hint_window_ms

    # -- membership and schema -----------------------------------------------------------------

    def on_node_up(self, host_id: uuid.UUID, now_ms: int) -> None:
        self._down_since_ms.pop(host_id, None)
        self._up.add(host_id)
        self._story.append(f"{now_ms}: {host_id} up")

    def on_node_down(self, host_id: uuid.UUID, now_ms: int) -> None:
        """``host_id`` was convicted; its downtime counts from the first report."""
        self._up.discard(host_id)
        self._down_since_ms.setdefault(host_id, now_ms)
        self._story.append(f"{now_ms}: {host_id} down")

    def on_schema_version(self, host_id: uuid.UUID, version: uuid.UUID) -> None:
        """Gossip said ``host_id`` runs schema ``version``."""
        self._schema_versions[host_id] = version

    def set_local_schema_version(self, version: uuid.UUID) -> None:
        self._local_schema_version = version

    def schema_agrees(self, host_id: uuid.UUID) -> bool:
        local = self._local_schema_version
        return local is not None and self._schema_versions.get(host_id) == local

    # -- hints -----------------------------------------------------------------------------

    def on_hint_stored(self, target_id: uuid.UUID, created_ms: int) -> None:
        """The store now holds a hint for ``target_id`` written at ``created_ms``."""
        state = self._targets.get(target_id)
        if state is None:
            if len(self._targets) >= self.max_targets:
                raise InvalidRequest(
                    f"hint for {target_id}: {len(self._targets)} hosts have hints already, "
                    f"the limit is {self.max_targets}"
                )
            self._targets[target_id] = _TargetHints(created_ms)
        else:
            state.earliest_hint_ms = min(state.earliest_hint_ms, created_ms)

    def tick(self, now_ms: int) -> list[HintAction]:
        """Every ``dispatch_interval_ms``: replay the hints of every target ready for them."""
        if self._next_dispatch_ms is not None and now_ms < self._next_dispatch_ms:
            return []
        self._next_dispatch_ms = now_ms + self.dispatch_interval_ms
        actions: list[HintAction] = []
        for target_id in sorted(self._targets):
            state = self._targets[target_id]
            if state.phase is not ReplayPhase.IDLE or not self._ready(target_id):
                continue
            self._step(target_id, state, _Step.DISPATCH)
            actions.append(ReplayHints(target_id))
        return actions

    def on_hints_fetched(
        self,
        target_id: uuid.UUID,
        hints: Sequence[StoredHint],
        now_ms: int,
        gc_grace_s_of: GcGraceLookup,
    ) -> list[HintAction]:
        """The oldest hints of ``target_id`` (oldest first; empty: none left)."""
        state = self._state_of(target_id)
        if state.phase is not ReplayPhase.FETCHING:
            raise InvalidTransition(
                f"hints of {target_id}", state.phase.value, "hints fetched", self.story()
            )
        if not hints:
            self._step(target_id, state, _Step.NOTHING_TO_DELIVER)
            del self._targets[target_id]
            self._story.append(f"{now_ms}: {target_id} has no hints left")
            return []
        state.earliest_hint_ms = min(hint.created_ms for hint in hints)
        actions: list[HintAction] = []
        deliverable = self._ready(target_id)
        for hint in hints:
            if not is_hint_live(hint.created_ms, hint.mutations, now_ms, gc_grace_s_of):
                actions.append(DeleteHint(target_id, hint.hint_id, expired=True))
            elif deliverable and len(state.in_flight) < self.max_deliveries_in_flight:
                state.in_flight.add(hint.hint_id)
                actions.append(DeliverHint(target_id, hint.hint_id, tuple(hint.mutations)))
        step = _Step.FETCHED if state.in_flight else _Step.NOTHING_TO_DELIVER
        self._step(target_id, state, step)
        return actions

    def on_hint_delivered(self, target_id: uuid.UUID, hint_id: int) -> list[HintAction]:
        """The target applied hint ``hint_id``: delete it."""
        state = self._take(target_id, hint_id)
        self._maybe_round_over(target_id, state)
        return [DeleteHint(target_id, hint_id)]

    def on_hint_delivery_failed(self, target_id: uuid.UUID, hint_id: int) -> list[HintAction]:
        """Hint ``hint_id`` was not applied: keep it for a later round."""
        state = self._take(target_id, hint_id)
        self._story.append(f"hint {hint_id} for {target_id} failed, kept")
        self._maybe_round_over(target_id, state)
        return []

    # -- internals -----------------------------------------------------------------------------

    def _ready(self, target_id: uuid.UUID) -> bool:
        return target_id in self._up and self.schema_agrees(target_id)

    def _state_of(self, target_id: uuid.UUID) -> _TargetHints:
        state = self._targets.get(target_id)
        if state is None:
            raise InvalidTransition(f"hints of {target_id}", "unknown", "event", self.story())
        return state

    def _take(self, target_id: uuid.UUID, hint_id: int) -> _TargetHints:
        state = self._state_of(target_id)
        if hint_id not in state.in_flight:
            raise InvalidRequest(f"hint {hint_id} for {target_id} is not being delivered")
        state.in_flight.discard(hint_id)
        return state

    def _maybe_round_over(self, target_id: uuid.UUID, state: _TargetHints) -> None:
        if not state.in_flight:
            self._step(target_id, state, _Step.ROUND_OVER)

    def _step(self, target_id: uuid.UUID, state: _TargetHints, step: _Step) -> None:
        target = _TRANSITIONS.get((state.phase, step))
        if target is None:
            raise InvalidTransition(
                f"hints of {target_id}", state.phase.value, step.value, self.story()
            )
        self._story.append(f"{target_id}: {state.phase.value} -> {target.value} on {step.value}")
        state.phase = target

    def validate(self) -> None:
        """Check the manager's invariants."""
        invariant(not self._up & self._down_since_ms.keys(), "a host both up and down")
        invariant(len(self._targets) <= self.max_targets, "more hinted hosts than the limit")
        for target_id, state in self._targets.items():
            if bool(state.in_flight) != (state.phase is ReplayPhase.DELIVERING) or (
                len(state.in_flight) > self.max_deliveries_in_flight
            ):
                raise InternalError(
                    f"hints of {target_id}: {len(state.in_flight)} in flight in "
                    f"{state.phase.value} (at most {self.max_deliveries_in_flight})"
                )
