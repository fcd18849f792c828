"""The write path of one client write: send to every replica, count acks, hint the missing ones.

Owns ``shared/reference/cassandra-core.md`` §5.2 (Unavailable before sending, WriteTimeout after;
C41 ``locator/ReplicaPlans.java``, ``service/AbstractWriteResponseHandler.java``) and §7.1 "When
hints are written" (C41 ``service/StorageProxy.java``); seed 003 "Tunable Consistency" ("write
operations are always sent to all replicas, regardless of consistency level") and seed 000 "each
replica either receives both writes or none of them" (ARCHITECTURE.md "A write, end to end").

Shape: an event-in / actions-out core (STYLE.md "pure cores, thin shells"). ``WriteHandler.start``
returns the first actions; ``on_ack``, ``on_failure``, ``on_hint_stored`` and ``on_timeout`` feed
it what the shell observed. No socket, clock or thread: the shell arms the write timeout and
calls ``on_timeout`` when it fires.

Rules:

* The unit of a write is a ``WriteUnit``: the base mutation(s) and, for a CDC-enabled table, the
  CDC capture of each base mutation (stream id and ``cdc$time`` low bits chosen once by the
  coordinator). Every replica gets the whole unit in one message and applies it in one
  transaction, building the log rows itself (``Store.apply(batch, cdc=...)``), so base and log
  are never split. A hint carries the same whole unit. Its targets are the base token's natural
  and pending replicas plus the pending replicas of each log token
  (``TokenReplicas.with_pending``): a joining node can split a vnode so that only the log
  token's range moves to it, and it must get the log row like any pending replica.
* The liveness check runs in the constructor, before anything is sent: too few live replicas for
  the level (natural plus pending, pending replicas raising blockFor) raises ``Unavailable``.
* ``start`` sends the unit to every live replica, natural and pending, whatever the level, and
  emits ``StoreHint`` for each replica known down that may be hinted (the caller's
  ``should_hint``: hints enabled, inside the 3 h window, ... see ``HintManager.should_hint``).
  Transient replicas are never hinted.
* The client gets exactly one ``Complete``: success as soon as the ``ResponseTracker`` is
  satisfied (per DC for EACH_QUORUM, local DC for LOCAL_*); ``WriteFailure`` (0x1500) as soon as
  enough replicas failed that the level is out of reach; ``WriteTimeout`` (0x1100) if the
  deadline passes first. With CL ANY a stored hint counts as the ack (``on_hint_stored``).
* A replica that fails, or has not answered when the deadline passes, is hinted (Cassandra hints
  failed and timed-out writes), also after the client has its answer. Counter writes are not.
  The handler is ``FINISHED`` once every replica it sent to has answered, or at the deadline.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, final

from ringflow.cdc import CdcCapture
from ringflow.cluster._consistency import (
    ConsistencyLevel,
    ResponseTracker,
    assure_sufficient_live_replicas,
)
from ringflow.cluster._messages import Verb
from ringflow.errors import (
    InternalError,
    InvalidRequest,
    WriteFailure,
    WriteTimeout,
    WriteType,
    invariant,
)
from ringflow.replication import Origin
from ringflow.ring import Host, ReplicationStrategy, TokenMetadata
from ringflow.schema import Mutation

DEFAULT_STORY_LIMIT: Final = 200
"""Lines of causal history a handler keeps for error messages (dask ``story``)."""


class InvalidTransition(InternalError):
    """A coordinator core was driven through a transition its table does not allow (a bug)."""

    def __init__(self, what: str, state: str, step: str, story: Sequence[str]) -> None:
        history = "\n  ".join(story) if story else "(empty)"
        super().__init__(f"{what}: no transition from {state} on {step}; story:\n  {history}")
        self.state = state
        self.step = step
        self.story = tuple(story)


# -- value objects ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenReplicas:
    """The replicas of one token for one request: natural (strategy order), pending, transient.

    ``pending`` are the hosts gaining the token's range (a joining node); writes go to them and
    wait for them, reads ignore them. ``local_dc`` is the coordinator's DC (LOCAL_* levels).
    """

    token: int
    natural: tuple[Host, ...]
    strategy: ReplicationStrategy
    local_dc: str
    pending: tuple[Host, ...] = ()
    transient: frozenset[Host] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.natural:
            raise InvalidRequest(f"token {self.token} has no natural replicas")
        everyone = (*self.natural, *self.pending)
        if len(set(everyone)) != len(everyone):
            raise InvalidRequest(f"a host is listed twice among replicas and pending: {everyone}")
        if not self.transient <= set(everyone):
            raise InvalidRequest(f"transient replicas {self.transient} are not replicas")
        if not isinstance(self.local_dc, str) or not self.local_dc:
            raise InvalidRequest(f"local_dc must be a non-empty string, got {self.local_dc!r}")

    @classmethod
    def of(
        cls,
        token: int,
        token_metadata: TokenMetadata,
        strategy: ReplicationStrategy,
        local_dc: str,
        pending: Iterable[Host] = (),
    ) -> TokenReplicas:
        """The natural replicas of ``token`` under ``strategy``, plus ``pending`` hosts."""
        plan = strategy.replica_plan(token, token_metadata)
        natural = tuple(replica.host for replica in plan)
        transient = frozenset(replica.host for replica in plan if not replica.is_full)
        extra = tuple(host for host in pending if host not in natural)
        return cls(token, natural, strategy, local_dc, extra, transient)

    def with_pending(self, hosts: Iterable[Host]) -> TokenReplicas:
        """These replicas plus ``hosts`` as pending (those not already natural or pending): a
        CDC unit's targets also take its log tokens' pending replicas, so a log row reaches a
        joining node gaining the stream's range even when the base token's range stays put."""
        known = set(self.all)
        extra = tuple(dict.fromkeys(host for host in hosts if host not in known))
        if not extra:
            return self
        return TokenReplicas(
            self.token,
            self.natural,
            self.strategy,
            self.local_dc,
            (*self.pending, *extra),
            self.transient,
        )

    @property
    def all(self) -> tuple[Host, ...]:
        """Natural then pending replicas: every host a write goes to."""
        return (*self.natural, *self.pending)


@dataclass(frozen=True, slots=True)
class WriteUnit:
    """What each replica applies in one transaction: mutations, and CDC captures by index.

    ``cdc_captures`` pairs the index of a base mutation of a CDC-enabled table with its capture;
    ``captures`` gives them as the ``{index: capture}`` map ``Store.apply(cdc=...)`` takes.
    """

    mutations: tuple[Mutation, ...]
    cdc_captures: tuple[tuple[int, CdcCapture], ...] = ()
    origin: Origin = Origin.WRITE
    """How the applying replica received the unit, for its replica-side capture (a hint
    replayed to it: HINT); local to that replica, never sent."""

    def __post_init__(self) -> None:
        if not isinstance(self.mutations, tuple) or not self.mutations:
            raise InvalidRequest("a write unit needs a non-empty tuple of mutations")
        for mutation in self.mutations:
            if not isinstance(mutation, Mutation):
                raise InvalidRequest(f"a write unit holds Mutation objects, got {mutation!r:.80}")
        indices = [index for index, _ in self.cdc_captures]
        if len(set(indices)) != len(indices):
            raise InvalidRequest(f"a mutation has two CDC captures: indices {indices}")
        for index, capture in self.cdc_captures:
            if type(index) is not int or not 0 <= index < len(self.mutations):
                raise InvalidRequest(
                    f"CDC capture for mutation {index!r} of a unit of {len(self.mutations)}"
                )
            if not isinstance(capture, CdcCapture):
                raise InvalidRequest(f"not a CdcCapture: {capture!r}")

    @classmethod
    def of(
        cls, mutations: Iterable[Mutation], captures: Mapping[int, CdcCapture] | None = None
    ) -> WriteUnit:
        return cls(tuple(mutations), tuple(sorted((captures or {}).items())))

    @property
    def captures(self) -> dict[int, CdcCapture]:
        return dict(self.cdc_captures)

    @property
    def tables(self) -> list[tuple[str, str]]:
        """The ``(keyspace, table)`` of every mutation, each once, in order."""
        return list(dict.fromkeys((m.keyspace, m.table) for m in self.mutations))


# -- actions ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendMutation:
    """Action: send ``unit`` to ``replica`` (MUTATION_REQ), answered by on_ack/on_failure."""

    replica: Host
    request_id: int
    unit: WriteUnit

    @property
    def verb(self) -> Verb:
        return Verb.MUTATION_REQ


@dataclass(frozen=True, slots=True)
class StoreHint:
    """Action: store ``unit`` locally as a hint for ``target``, to replay when it is back."""

    target: Host
    request_id: int
    unit: WriteUnit

    @property
    def mutations(self) -> tuple[Mutation, ...]:
        return self.unit.mutations


@dataclass(frozen=True, slots=True)
class Complete:
    """Action: answer the client; ``error`` is None on success."""

    request_id: int
    error: WriteTimeout | WriteFailure | None = None

    @property
    def success(self) -> bool:
        return self.error is None


WriteAction = SendMutation | StoreHint | Complete


# -- the handler -----------------------------------------------------------------------------


class WriteState(Enum):
    NEW = "new"
    WAITING = "waiting"
    """Sent; the client has no answer yet."""
    ANSWERED = "answered"
    """The client has its answer; stragglers may still ack, fail or be hinted at the deadline."""
    FINISHED = "finished"
    """Every replica sent to answered, or the deadline passed: the handler can be dropped."""


class _Step(Enum):
    START = "start"
    SATISFIED = "satisfied"
    FAILED = "failed"
    TIMEOUT = "timeout"
    SETTLED = "settled"


_TRANSITIONS: Final[Mapping[tuple[WriteState, _Step], WriteState]] = {
    (WriteState.NEW, _Step.START): WriteState.WAITING,
    (WriteState.WAITING, _Step.SATISFIED): WriteState.ANSWERED,
    (WriteState.WAITING, _Step.FAILED): WriteState.ANSWERED,
    (WriteState.WAITING, _Step.TIMEOUT): WriteState.FINISHED,
    (WriteState.ANSWERED, _Step.SETTLED): WriteState.FINISHED,
    (WriteState.ANSWERED, _Step.TIMEOUT): WriteState.FINISHED,
}


def _always(_: Host) -> bool:
    return True


@final
class WriteHandler:
    """Coordinates one write of ``unit`` to ``replicas`` at ``consistency`` (see module rules).

    ``live`` is the failure detector's opinion, ``should_hint`` the hint policy (window, enabled
    DCs). Raises ``Unavailable`` from the constructor when too few replicas are live.
    """

    __slots__ = (
        "_acked",
        "_answer",
        "_failed",
        "_hinted",
        "_live",
        "_sent",
        "_should_hint",
        "_state",
        "_story",
        "_tracker",
        "consistency",
        "replicas",
        "request_id",
        "unit",
        "write_type",
    )

    def __init__(
        self,
        request_id: int,
        unit: WriteUnit,
        replicas: TokenReplicas,
        consistency: ConsistencyLevel,
        live: Callable[[Host], bool],
        *,
        write_type: WriteType = WriteType.SIMPLE,
        should_hint: Callable[[Host], bool] = _always,
        story_limit: int = DEFAULT_STORY_LIMIT,
    ) -> None:
        if type(request_id) is not int or request_id < 0:
            raise InvalidRequest(f"request_id must be a non-negative int, got {request_id!r}")
        if not isinstance(unit, WriteUnit) or not isinstance(replicas, TokenReplicas):
            raise InvalidRequest("a write needs a WriteUnit and TokenReplicas")
        alive = assure_sufficient_live_replicas(
            consistency,
            replicas.strategy,
            replicas.natural,
            live,
            local_dc=replicas.local_dc,
            for_write=True,
            pending=replicas.pending,
        )
        self.request_id = request_id
        self.unit = unit
        self.replicas = replicas
        self.consistency = consistency
        self.write_type = write_type
        self._should_hint = should_hint
        self._live = frozenset(alive)
        self._tracker = ResponseTracker(
            consistency,
            replicas.strategy,
            replicas.natural,
            local_dc=replicas.local_dc,
            for_write=True,
            pending=replicas.pending,
        )
        self._state = WriteState.NEW
        self._sent: set[Host] = set()
        self._acked: set[Host] = set()
        self._failed: set[Host] = set()
        self._hinted: set[Host] = set()
        self._answer: Complete | None = None
        self._story: deque[str] = deque(maxlen=story_limit)

    # -- inspection ----------------------------------------------------------------------------

    @property
    def state(self) -> WriteState:
        return self._state

    @property
    def block_for(self) -> int:
        return self._tracker.block_for

    @property
    def answer(self) -> Complete | None:
        return self._answer

    @property
    def acked(self) -> frozenset[Host]:
        return frozenset(self._acked)

    @property
    def hinted(self) -> frozenset[Host]:
        return frozenset(self._hinted)

    def story(self) -> list[str]:
        return list(self._story)

    # -- stimuli -------------------------------------------------------------------------------

    def start(self) -> list[WriteAction]:
        """Send to every live replica; hint the ones known down."""
        self._step(_Step.START)
        actions: list[WriteAction] = []
        for host in self.replicas.all:
            if host in self._live:
                self._sent.add(host)
                actions.append(SendMutation(host, self.request_id, self.unit))
            else:
                actions.extend(self._hint(host, "down at start"))
        self._story.append(f"start: sent to {len(self._sent)}, hinted {len(self._hinted)}")
        return actions + self._progress()

    def on_ack(self, replica: Host) -> list[WriteAction]:
        """``replica`` applied the unit."""
        if not self._accepts(replica, "ack"):
            return []
        self._acked.add(replica)
        counted = self._tracker.on_response(replica)
        self._story.append(f"ack from {replica} (counted: {counted})")
        return self._progress()

    def on_failure(self, replica: Host) -> list[WriteAction]:
        """``replica`` answered with an error, or the messaging layer gave up on it."""
        if not self._accepts(replica, "failure"):
            return []
        self._failed.add(replica)
        self._tracker.on_failure(replica)
        self._story.append(f"failure from {replica}")
        return self._hint_after_failure(replica, "failed") + self._progress()

    def on_hint_stored(self, target: Host) -> list[WriteAction]:
        """The shell stored the hint for ``target``; with CL ANY that is the ack."""
        self._require_started("hint stored")
        if target not in self._hinted:
            raise InvalidRequest(f"write {self.request_id} asked for no hint for {target}")
        self._story.append(f"hint stored for {target}")
        if self._state is not WriteState.WAITING or self.consistency is not ConsistencyLevel.ANY:
            return []
        self._tracker.on_hint_stored()
        return self._progress()

    def on_timeout(self) -> list[WriteAction]:
        """The write deadline passed: hint every replica that did not answer; answer if needed."""
        self._require_started("timeout")
        if self._state is WriteState.FINISHED:
            return []
        actions: list[WriteAction] = []
        for host in self.replicas.all:
            if host in self._sent and host not in self._acked and host not in self._failed:
                actions.extend(self._hint_after_failure(host, "timed out"))
        if self._state is WriteState.WAITING:
            timeout = self._tracker.write_timeout(self.write_type)
            actions.append(self._complete(_Step.TIMEOUT, timeout))
        else:
            self._step(_Step.TIMEOUT)
        return actions

    # -- internals -----------------------------------------------------------------------------

    def _step(self, step: _Step) -> None:
        target = _TRANSITIONS.get((self._state, step))
        if target is None:
            raise InvalidTransition(
                f"write {self.request_id}", self._state.value, step.value, self.story()
            )
        self._story.append(f"{self._state.value} -> {target.value} on {step.value}")
        self._state = target

    def _require_started(self, what: str) -> None:
        if self._state is WriteState.NEW:
            raise InvalidTransition(f"write {self.request_id}", "new", what, self.story())

    def _accepts(self, replica: Host, what: str) -> bool:
        self._require_started(what)
        if self._state is WriteState.FINISHED:
            self._story.append(f"late {what} from {replica} ignored")
            return False
        if replica not in self._sent or replica in self._acked or replica in self._failed:
            self._story.append(f"{what} from {replica} ignored (not outstanding)")
            return False
        return True

    def _hint(self, host: Host, why: str) -> list[WriteAction]:
        if host in self._hinted or host in self.replicas.transient or not self._should_hint(host):
            self._story.append(f"no hint for {host} ({why})")
            return []
        self._hinted.add(host)
        self._story.append(f"hint for {host} ({why})")
        return [StoreHint(host, self.request_id, self.unit)]

    def _hint_after_failure(self, host: Host, why: str) -> list[WriteAction]:
        if self.write_type is WriteType.COUNTER:
            return []
        return self._hint(host, why)

    def _complete(self, step: _Step, error: WriteTimeout | WriteFailure | None) -> Complete:
        self._step(step)
        invariant(self._answer is None, f"write {self.request_id} answered twice")
        self._answer = Complete(self.request_id, error)
        return self._answer

    def _progress(self) -> list[WriteAction]:
        actions: list[WriteAction] = []
        if self._state is WriteState.WAITING:
            if self._tracker.is_satisfied:
                actions.append(self._complete(_Step.SATISFIED, None))
            elif self._tracker.is_failed:
                failure = WriteFailure(
                    self.consistency,
                    self._tracker.received,
                    self._tracker.block_for,
                    len(self._failed),
                    self.write_type,
                )
                actions.append(self._complete(_Step.FAILED, failure))
        if self._state is WriteState.ANSWERED and self._sent <= self._acked | self._failed:
            self._step(_Step.SETTLED)
        return actions

    def validate(self) -> None:
        """Check the handler's invariants (run after every test step and simulated step)."""
        self._tracker.validate()
        everyone = set(self.replicas.all)
        invariant(not self._acked & self._failed, "a replica both acked and failed")
        invariant(self._acked | self._failed <= self._sent, "an answer from a replica not sent to")
        invariant(self._sent <= self._live, "sent to a replica that was not live")
        invariant(self._sent | self._hinted <= everyone, "sent or hinted outside the plan")
        invariant(not self._hinted & self.replicas.transient, "hinted a transient replica")
        answered = self._state in (WriteState.ANSWERED, WriteState.FINISHED)
        invariant(
            (self._answer is not None) == answered,
            lambda: f"write {self.request_id} in state {self._state.value} with {self._answer}",
        )
        if self._state is WriteState.NEW:
            invariant(not self._sent and not self._hinted, "a new write already sent")
        if self._answer is not None and self._answer.success:
            invariant(self._tracker.is_satisfied, "answered success without the level met")
