"""The read path of one single-partition read: one data read, digests, reconcile, repair, answer.

Owns ``shared/reference/cassandra-core.md`` §5.2 (Unavailable before sending, ReadTimeout after)
and §7.2 "Read path" (C41 ``service/reads/AbstractReadExecutor.java``, ``DigestResolver``,
``DataResolver``, ``ReadCallback``); seed 003 "Tunable Consistency" ("for read operations, the
coordinator generally only issues read commands to enough replicas to satisfy the consistency
level") and "Replica Synchronization". The repair half lives in ``_read_repair``.

Shape: an event-in / actions-out core, like the write path. The shell turns ``SendRead`` into a
READ_REQ for the command it holds, answers with ``on_data`` (the replica's raw partition: the
storage layer's ``read_mutation``, tombstones included) or ``on_digest`` (``partition_digest`` of
the same, computed on the replica), and calls ``on_timeout`` at the read deadline.

Rules:

* The liveness check runs in the constructor: too few live replicas is ``Unavailable``.
* Live replicas are ordered by the shell's ``proximity`` list when given, else local DC first
  in the strategy's order. Contacts are the first ``blockFor`` of them: local-DC replicas only
  for LOCAL_* levels, a quorum of each DC for EACH_QUORUM under NetworkTopologyStrategy. The
  first contact gets the data request, the others digest requests; ONE and LOCAL_ONE therefore
  read one replica, compare nothing and never repair.
* Once the level's ``ResponseTracker`` is satisfied *and* the data response is in, every digest
  received is compared with the data's digest. All equal: ``Respond`` with the caller's
  ``resolve`` of the data. Any mismatch: full data reads go to the other contacts, and once the
  level is met again (the first data response counts), the versions are merged (LWW, §6),
  per-replica repairs are computed and sent, and the answer waits for the repair acks
  (``BlockingRepair``): monotonic quorum reads.
* Failures that put the level out of reach answer ``ReadFailure`` (0x1300) at once; the deadline
  answers ``ReadTimeout`` (0x1200) with the phase's received/blockFor and whether data arrived.
  Responses after the answer, and from hosts not asked, are ignored (and told in the story).
* Not modelled: speculative retries and extra reads (``maybeSendAdditionalReads``), speculative
  repair writes on a slow repair, range reads and short-read protection.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final, Generic, TypeVar, final

from ringflow.cluster._consistency import (
    DATACENTER_LOCAL,
    ConsistencyLevel,
    ResponseTracker,
    assure_sufficient_live_replicas,
    block_for,
    local_quorum_for,
)
from ringflow.cluster._digest import DIGEST_SIZE_BYTES, partition_digest
from ringflow.cluster._messages import Verb
from ringflow.cluster._read_repair import (
    BlockingRepair,
    ReadRepairMode,
    SendRepair,
    reconcile_versions,
    repair_mutations,
)
from ringflow.cluster._write_path import DEFAULT_STORY_LIMIT, InvalidTransition, TokenReplicas
from ringflow.errors import (
    InternalError,
    InvalidRequest,
    ReadFailure,
    ReadTimeout,
    invariant,
)
from ringflow.ring import Host, NetworkTopologyStrategy, ReplicationStrategy
from ringflow.schema import Mutation

ResultT = TypeVar("ResultT", covariant=True)


class ReadKind(Enum):
    DATA = "data"
    DIGEST = "digest"


@dataclass(frozen=True, slots=True)
class SendRead:
    """Action: ask ``replica`` for the partition's data or its digest (READ_REQ)."""

    replica: Host
    request_id: int
    kind: ReadKind

    @property
    def verb(self) -> Verb:
        return Verb.READ_REQ


@dataclass(frozen=True, slots=True)
class Respond(Generic[ResultT]):
    """Action: answer the client with ``result``, or with ``error``."""

    request_id: int
    result: ResultT | None = None
    error: ReadTimeout | ReadFailure | None = None

    @property
    def success(self) -> bool:
        return self.error is None


ReadAction = SendRead | SendRepair | Respond[ResultT]


class ReadState(Enum):
    NEW = "new"
    DIGESTS = "digests"
    """Waiting for the data response and the digests."""
    DATA = "data"
    """Digests disagreed; waiting for full data from the contacts."""
    REPAIRING = "repairing"
    """Repairs sent; waiting for enough of them to be applied."""
    DONE = "done"
    """The client has its answer."""


class _Step(Enum):
    START = "start"
    MATCH = "digests match"
    MISMATCH = "digest mismatch"
    RECONCILED = "reconciled, nothing to wait for"
    REPAIR = "repairs sent"
    REPAIRED = "repairs acknowledged"
    TIMEOUT = "timeout"
    FAILED = "failed"


_TRANSITIONS: Final[Mapping[tuple[ReadState, _Step], ReadState]] = {
    (ReadState.NEW, _Step.START): ReadState.DIGESTS,
    (ReadState.DIGESTS, _Step.MATCH): ReadState.DONE,
    (ReadState.DIGESTS, _Step.MISMATCH): ReadState.DATA,
    (ReadState.DATA, _Step.RECONCILED): ReadState.DONE,
    (ReadState.DATA, _Step.REPAIR): ReadState.REPAIRING,
    (ReadState.REPAIRING, _Step.REPAIRED): ReadState.DONE,
    (ReadState.DIGESTS, _Step.TIMEOUT): ReadState.DONE,
    (ReadState.DATA, _Step.TIMEOUT): ReadState.DONE,
    (ReadState.REPAIRING, _Step.TIMEOUT): ReadState.DONE,
    (ReadState.DIGESTS, _Step.FAILED): ReadState.DONE,
    (ReadState.DATA, _Step.FAILED): ReadState.DONE,
}


def order_by_proximity(
    hosts: Sequence[Host], local_dc: str, proximity: Sequence[Host] | None = None
) -> list[Host]:
    """``hosts`` in the shell's ``proximity`` order (unlisted last), else local DC first."""
    if proximity is None:
        return sorted(hosts, key=lambda host: host.dc != local_dc)
    rank = {host: index for index, host in enumerate(proximity)}
    return sorted(hosts, key=lambda host: rank.get(host, len(rank)))


def select_contacts(
    consistency: ConsistencyLevel,
    strategy: ReplicationStrategy,
    ordered_live: Sequence[Host],
    local_dc: str,
) -> list[Host]:
    """The replicas a read asks (Cassandra ``ReplicaPlans.contactForRead``), in ``ordered_live``
    order: the first blockFor (local DC only for LOCAL_*), or each DC's quorum for EACH_QUORUM."""
    if consistency is ConsistencyLevel.EACH_QUORUM and isinstance(
        strategy, NetworkTopologyStrategy
    ):
        wanted = {dc: local_quorum_for(strategy, dc) for dc, _ in strategy.factors_by_dc}
        chosen: list[Host] = []
        for host in ordered_live:
            if wanted.get(host.dc, 0) > 0:
                wanted[host.dc] -= 1
                chosen.append(host)
        return chosen
    candidates = list(ordered_live)
    if consistency in DATACENTER_LOCAL:
        candidates = [host for host in candidates if host.dc == local_dc]
    return candidates[: block_for(consistency, strategy, local_dc)]


@final
class ReadHandler(Generic[ResultT]):
    """Coordinates one read of one partition at ``consistency`` (see module rules).

    ``resolve`` turns the reconciled raw partition (``None``: nothing stored) into the client's
    result (shadowing, expiry, the query's selection). Raises ``Unavailable`` from the
    constructor when too few replicas are live.
    """

    __slots__ = (
        "_answer",
        "_data",
        "_data_tracker",
        "_digests",
        "_failed",
        "_merged",
        "_repair",
        "_resolve",
        "_state",
        "_story",
        "_tracker",
        "_versions",
        "consistency",
        "contacts",
        "read_repair",
        "replicas",
        "request_id",
    )

    def __init__(
        self,
        request_id: int,
        replicas: TokenReplicas,
        consistency: ConsistencyLevel,
        live: Callable[[Host], bool],
        resolve: Callable[[Mutation | None], ResultT],
        *,
        proximity: Sequence[Host] | None = None,
        read_repair: ReadRepairMode = ReadRepairMode.BLOCKING,
        story_limit: int = DEFAULT_STORY_LIMIT,
    ) -> None:
        if type(request_id) is not int or request_id < 0:
            raise InvalidRequest(f"request_id must be a non-negative int, got {request_id!r}")
        alive = assure_sufficient_live_replicas(
            consistency,
            replicas.strategy,
            replicas.natural,
            live,
            local_dc=replicas.local_dc,
            for_write=False,
        )
        ordered = order_by_proximity(alive, replicas.local_dc, proximity)
        self.contacts = tuple(
            select_contacts(consistency, replicas.strategy, ordered, replicas.local_dc)
        )
        invariant(bool(self.contacts), f"read {request_id}: live replicas but no contact")
        self.request_id = request_id
        self.replicas = replicas
        self.consistency = consistency
        self.read_repair = read_repair
        self._resolve = resolve
        self._tracker = self._new_tracker()
        self._data_tracker: ResponseTracker | None = None
        self._state = ReadState.NEW
        self._data: Mutation | None = None
        self._versions: dict[Host, Mutation | None] = {}
        self._digests: dict[Host, bytes] = {}
        self._failed: set[Host] = set()
        self._merged: Mutation | None = None
        self._repair: BlockingRepair | None = None
        self._answer: Respond[ResultT] | None = None
        self._story: deque[str] = deque(maxlen=story_limit)

    def _new_tracker(self) -> ResponseTracker:
        return ResponseTracker(
            self.consistency,
            self.replicas.strategy,
            self.contacts,
            local_dc=self.replicas.local_dc,
            for_write=False,
        )

    # -- inspection ----------------------------------------------------------------------------

    @property
    def state(self) -> ReadState:
        return self._state

    @property
    def data_replica(self) -> Host:
        return self.contacts[0]

    @property
    def block_for(self) -> int:
        return self._tracker.block_for

    @property
    def answer(self) -> Respond[ResultT] | None:
        return self._answer

    @property
    def repair(self) -> BlockingRepair | None:
        return self._repair

    def story(self) -> list[str]:
        return list(self._story)

    # -- stimuli -------------------------------------------------------------------------------

    def start(self) -> list[ReadAction[ResultT]]:
        """Data request to the closest contact, digest requests to the others."""
        self._step(_Step.START)
        actions: list[ReadAction[ResultT]] = [
            SendRead(self.data_replica, self.request_id, ReadKind.DATA)
        ]
        actions += [SendRead(h, self.request_id, ReadKind.DIGEST) for h in self.contacts[1:]]
        self._story.append(f"start: data from {self.data_replica}, {len(actions) - 1} digests")
        return actions

    def on_data(self, replica: Host, partition: Mutation | None) -> list[ReadAction[ResultT]]:
        """``replica`` sent its raw partition (``None``: it holds nothing)."""
        self._require_started("data")
        if partition is not None and not isinstance(partition, Mutation):
            raise InvalidRequest(f"a data response is a Mutation or None, got {partition!r:.80}")
        if self._state is ReadState.DIGESTS and replica == self.data_replica:
            if replica in self._versions or not self._tracker.on_response(replica):
                return self._ignored("data", replica)
            self._versions[replica] = partition
            self._data = partition
            self._story.append(f"data from {replica}")
            return self._check_digests()
        if self._state is ReadState.DATA and replica in self.contacts:
            tracker = self._active_tracker()
            if replica in self._versions or not tracker.on_response(replica):
                return self._ignored("data", replica)
            self._versions[replica] = partition
            self._story.append(f"full data from {replica}")
            return self._check_data()
        return self._ignored("data", replica)

    def on_digest(self, replica: Host, digest: bytes) -> list[ReadAction[ResultT]]:
        """``replica`` sent the digest of its partition."""
        self._require_started("digest")
        if not isinstance(digest, bytes) or len(digest) != DIGEST_SIZE_BYTES:
            raise InvalidRequest(f"a digest is {DIGEST_SIZE_BYTES} bytes, got {digest!r:.80}")
        if self._state is not ReadState.DIGESTS or replica not in self.contacts[1:]:
            return self._ignored("digest", replica)
        if replica in self._digests or not self._tracker.on_response(replica):
            return self._ignored("digest", replica)
        self._digests[replica] = digest
        self._story.append(f"digest from {replica}")
        return self._check_digests()

    def on_failure(self, replica: Host) -> list[ReadAction[ResultT]]:
        """``replica`` answered a read with an error, or the messaging layer gave up."""
        self._require_started("failure")
        if self._state not in (ReadState.DIGESTS, ReadState.DATA):
            return self._ignored("failure", replica)
        tracker = self._active_tracker()
        if not tracker.on_failure(replica):
            return self._ignored("failure", replica)
        self._failed.add(replica)
        self._story.append(f"read failure from {replica}")
        if not tracker.is_failed:
            return []
        failure = ReadFailure(
            self.consistency,
            tracker.received,
            tracker.block_for,
            len(self._failed),
            bool(self._versions),
        )
        return [self._finish(_Step.FAILED, error=failure)]

    def on_repair_ack(self, replica: Host) -> list[ReadAction[ResultT]]:
        """``replica`` applied its read-repair mutation."""
        self._require_started("repair ack")
        repair = self._repair
        if self._state is not ReadState.REPAIRING or repair is None or not repair.on_ack(replica):
            return self._ignored("repair ack", replica)
        self._story.append(f"repair ack from {replica}")
        return self._check_repair()

    def on_repair_failure(self, replica: Host) -> list[ReadAction[ResultT]]:
        """``replica`` failed to apply its repair: it does not count; the deadline decides."""
        self._require_started("repair failure")
        repair = self._repair
        if repair is not None and repair.on_failure(replica):
            self._story.append(f"repair failure from {replica}")
            return []
        return self._ignored("repair failure", replica)

    def on_timeout(self) -> list[ReadAction[ResultT]]:
        """The read deadline passed: answer ReadTimeout unless the client has its answer."""
        self._require_started("timeout")
        if self._state is ReadState.DONE:
            return []
        if self._state is ReadState.REPAIRING and self._repair is not None:
            error = ReadTimeout(
                self.consistency, self._repair.received, self._repair.block_for, True
            )
        else:
            error = self._active_tracker().read_timeout(bool(self._versions))
        return [self._finish(_Step.TIMEOUT, error=error)]

    # -- internals -----------------------------------------------------------------------------

    def _step(self, step: _Step) -> None:
        target = _TRANSITIONS.get((self._state, step))
        if target is None:
            raise InvalidTransition(
                f"read {self.request_id}", self._state.value, step.value, self.story()
            )
        self._story.append(f"{self._state.value} -> {target.value} on {step.value}")
        self._state = target

    def _require_started(self, what: str) -> None:
        if self._state is ReadState.NEW:
            raise InvalidTransition(f"read {self.request_id}", "new", what, self.story())

    def _ignored(self, what: str, replica: Host) -> list[ReadAction[ResultT]]:
        self._story.append(f"{what} from {replica} ignored in {self._state.value}")
        return []

    def _active_tracker(self) -> ResponseTracker:
        """The tracker of the phase: digests, or full data after a mismatch."""
        tracker = self._tracker if self._state is ReadState.DIGESTS else self._data_tracker
        if tracker is None or self._state not in (ReadState.DIGESTS, ReadState.DATA):
            raise InternalError(f"read {self.request_id} has no tracker in {self._state.value}")
        return tracker

    def _finish(
        self,
        step: _Step,
        *,
        partition: Mutation | None = None,
        error: ReadTimeout | ReadFailure | None = None,
    ) -> Respond[ResultT]:
        self._step(step)
        invariant(self._answer is None, f"read {self.request_id} answered twice")
        result = None if error is not None else self._resolve(partition)
        self._answer = Respond(self.request_id, result, error)
        return self._answer

    def _check_digests(self) -> list[ReadAction[ResultT]]:
        if not self._tracker.is_satisfied or self.data_replica not in self._versions:
            return []
        expected = partition_digest(self._data)
        stale = [host for host, digest in self._digests.items() if digest != expected]
        if not stale:
            return [self._finish(_Step.MATCH, partition=self._data)]
        self._step(_Step.MISMATCH)
        self._story.append(f"digest mismatch from {', '.join(map(str, stale))}")
        self._data_tracker = self._new_tracker()
        self._data_tracker.on_response(self.data_replica)
        return [SendRead(h, self.request_id, ReadKind.DATA) for h in self.contacts[1:]]

    def _check_data(self) -> list[ReadAction[ResultT]]:
        tracker = self._data_tracker
        if tracker is None or not tracker.is_satisfied:
            return []
        participants = [host for host in self.contacts if host in self._versions]
        self._merged = reconcile_versions([self._versions[host] for host in participants])
        repairs = repair_mutations(self._merged, {h: self._versions[h] for h in participants})
        if self.read_repair is ReadRepairMode.NONE or not repairs:
            return [self._finish(_Step.RECONCILED, partition=self._merged)]
        self._repair = BlockingRepair(
            self.request_id,
            self.consistency,
            self.replicas.strategy,
            self.replicas.local_dc,
            participants,
            repairs,
        )
        self._step(_Step.REPAIR)
        sends: list[ReadAction[ResultT]] = list(self._repair.start())
        self._story.append(f"{len(sends)} repairs sent, waiting for {self._repair.block_for}")
        return sends + self._check_repair()

    def _check_repair(self) -> list[ReadAction[ResultT]]:
        if self._repair is None or not self._repair.is_complete:
            return []
        return [self._finish(_Step.REPAIRED, partition=self._merged)]

    def validate(self) -> None:
        """Check the handler's invariants (run after every test step and simulated step)."""
        self._tracker.validate()
        if self._data_tracker is not None:
            self._data_tracker.validate()
        if self._repair is not None:
            self._repair.validate()
        contacts = set(self.contacts)
        invariant(len(contacts) == len(self.contacts), "a replica contacted twice")
        invariant(contacts <= set(self.replicas.natural), "contacted a non-replica")
        invariant(set(self._versions) <= contacts, "data from a host not contacted")
        invariant(self.data_replica not in self._digests, "a digest from the data replica")
        done = self._state is ReadState.DONE
        invariant((self._answer is not None) == done, lambda: f"read {self.request_id} state")
        if self._state in (ReadState.DATA, ReadState.REPAIRING):
            invariant(self._data_tracker is not None, "data phase without its tracker")
        if self._state is ReadState.REPAIRING:
            invariant(self._repair is not None, "repairing without repairs")
