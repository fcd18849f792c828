"""The coordinator facade: request ids, a bounded table of requests in flight, and the CDC step.

Ties the write path, the read path and the hint bookkeeping together for the shells (asyncio and
the simulator). References: ``shared/reference/cassandra-core.md`` §5.2 and §7 (via the cores it
drives), ARCHITECTURE.md "A write, end to end" steps 2-4, seed 000 "Vnode-colocation" ("when the
base write goes to the same set of replicas as the log write, it is possible to make sure that
each replica either receives both writes or none of them") and ``shared/reference/scylla-cdc.md``
§4 (``get_stream``) and §5 (``cdc$time``).

Rules:

* ``begin_write`` / ``begin_read`` allocate a request id (increasing from 1), build the handler
  (which may raise ``Unavailable``) and return its first actions plus ``ArmTimeout`` (write
  2000 ms, read 5000 ms, §5.2). More than ``max_outstanding_requests`` handlers held at once is
  ``Overloaded`` (0x1001), raised before anything is sent.
* Every answer from a replica or the shell is a typed event passed to ``handle``; the event's
  class picks the handler method (``_EVENT_METHODS``). Events for request ids no longer held
  (the request finished) are ignored and told in the story. A handler is dropped once it is
  finished: a write when every replica it sent to answered or its deadline passed (late acks
  still prevent hints), a read once the client has its answer.
* CDC step (``prepare_cdc_write``): the base partition's token picks the stream of the CDC
  generation operating at the write timestamp (``CdcMetadata.get_stream``; its rejections
  propagate as ``CdcWriteRejected`` subclasses, CQL Invalid), and ``cdc$time``'s low 64 bits
  are drawn from the injected ``random.Random``. With the ring given, the log partition's
  replicas must equal the base partition's (the stream token lies in the base token's vnode);
  anything else is a bug and raises ``InternalError`` through ``invariant``.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar, final

from ringflow.cdc import CdcCapture, CdcMetadata, StreamId
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster._hints import HintManager
from ringflow.cluster._read_path import ReadAction, ReadHandler, ReadState
from ringflow.cluster._read_repair import ReadRepairMode
from ringflow.cluster._write_path import (
    DEFAULT_STORY_LIMIT,
    TokenReplicas,
    WriteAction,
    WriteHandler,
    WriteState,
    WriteUnit,
)
from ringflow.cql import WriteType
from ringflow.errors import ErrorCode, InternalError, InvalidRequest, PeerError, invariant
from ringflow.ring import (
    Host,
    ReplicationStrategy,
    TokenMetadata,
    normalise_token,
)
from ringflow.schema import Mutation, Table, partition_token

ResultT = TypeVar("ResultT")

DEFAULT_MAX_OUTSTANDING_REQUESTS: Final = 1024
WRITE_TIMEOUT_MS: Final = 2000
"""``write_request_timeout`` (C41 ``conf/cassandra.yaml``)."""
READ_TIMEOUT_MS: Final = 5000
"""``read_request_timeout``."""
_MAX_REQUEST_ID: Final = 2**63 - 1


class Overloaded(PeerError):
    """This coordinator holds too many requests already (0x1001 Overloaded)."""

    code = ErrorCode.OVERLOADED

    def __init__(self, outstanding: int, limit: int) -> None:
        super().__init__(
            f"coordinator overloaded: {outstanding} requests in flight, the limit is {limit}"
        )
        self.outstanding = outstanding
        self.limit = limit


# -- events and actions ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MutationAcked:
    request_id: int
    replica: Host


@dataclass(frozen=True, slots=True)
class MutationFailed:
    request_id: int
    replica: Host


@dataclass(frozen=True, slots=True)
class HintStored:
    """The shell stored the hint a ``StoreHint`` asked for, at ``created_ms``."""

    request_id: int
    target: Host
    created_ms: int


@dataclass(frozen=True, slots=True)
class DataReceived:
    request_id: int
    replica: Host
    partition: Mutation | None


@dataclass(frozen=True, slots=True)
class DigestReceived:
    request_id: int
    replica: Host
    digest: bytes


@dataclass(frozen=True, slots=True)
class ReadReplicaFailed:
    request_id: int
    replica: Host


@dataclass(frozen=True, slots=True)
class RepairAcked:
    request_id: int
    replica: Host


@dataclass(frozen=True, slots=True)
class RepairFailed:
    request_id: int
    replica: Host


@dataclass(frozen=True, slots=True)
class RequestTimedOut:
    """The deadline an ``ArmTimeout`` asked for has passed."""

    request_id: int


CoordinatorEvent = (
    MutationAcked
    | MutationFailed
    | HintStored
    | DataReceived
    | DigestReceived
    | ReadReplicaFailed
    | RepairAcked
    | RepairFailed
    | RequestTimedOut
)


@dataclass(frozen=True, slots=True)
class ArmTimeout:
    """Action: deliver ``RequestTimedOut(request_id)`` after ``delay_ms``."""

    request_id: int
    delay_ms: int


CoordinatorAction = WriteAction | ReadAction[object] | ArmTimeout
_Handler = WriteHandler | ReadHandler[object]
_Actions = Sequence[WriteAction] | Sequence[ReadAction[object]]


def _write_event(event: CoordinatorEvent, handler: WriteHandler) -> _Actions:
    if isinstance(event, MutationAcked):
        return handler.on_ack(event.replica)
    if isinstance(event, MutationFailed):
        return handler.on_failure(event.replica)
    if isinstance(event, HintStored):
        return handler.on_hint_stored(event.target)
    invariant(isinstance(event, RequestTimedOut), f"not a write event: {event!r}")
    return handler.on_timeout()


def _read_event(event: CoordinatorEvent, handler: ReadHandler[object]) -> _Actions:
    if isinstance(event, DataReceived):
        return handler.on_data(event.replica, event.partition)
    if isinstance(event, DigestReceived):
        return handler.on_digest(event.replica, event.digest)
    if isinstance(event, ReadReplicaFailed):
        return handler.on_failure(event.replica)
    if isinstance(event, RepairAcked):
        return handler.on_repair_ack(event.replica)
    if isinstance(event, RepairFailed):
        return handler.on_repair_failure(event.replica)
    invariant(isinstance(event, RequestTimedOut), f"not a read event: {event!r}")
    return handler.on_timeout()


_WRITE_EVENTS: Final = (MutationAcked, MutationFailed, HintStored, RequestTimedOut)
_READ_EVENTS: Final = (
    DataReceived,
    DigestReceived,
    ReadReplicaFailed,
    RepairAcked,
    RepairFailed,
    RequestTimedOut,
)


@final
class Coordinator:
    """One node's coordinator bookkeeping (see module rules)."""

    __slots__ = (
        "_handlers",
        "_next_request_id",
        "_story",
        "hints",
        "local",
        "max_outstanding_requests",
        "read_timeout_ms",
        "write_timeout_ms",
    )

    def __init__(
        self,
        local: Host,
        hints: HintManager | None = None,
        *,
        max_outstanding_requests: int = DEFAULT_MAX_OUTSTANDING_REQUESTS,
        write_timeout_ms: int = WRITE_TIMEOUT_MS,
        read_timeout_ms: int = READ_TIMEOUT_MS,
        story_limit: int = DEFAULT_STORY_LIMIT,
    ) -> None:
        for name, value in (
            ("max_outstanding_requests", max_outstanding_requests),
            ("write_timeout_ms", write_timeout_ms),
            ("read_timeout_ms", read_timeout_ms),
        ):
            if type(value) is not int or value < 1:
                raise InvalidRequest(f"{name} must be a positive int, got {value!r}")
        self.local = local
        self.hints = HintManager() if hints is None else hints
        self.max_outstanding_requests = max_outstanding_requests
        self.write_timeout_ms = write_timeout_ms
        self.read_timeout_ms = read_timeout_ms
        self._handlers: dict[int, _Handler] = {}
        self._next_request_id = 1
        self._story: deque[str] = deque(maxlen=story_limit)

    @property
    def outstanding(self) -> int:
        """Requests held: writes until settled or timed out, reads until answered."""
        return len(self._handlers)

    def handler(self, request_id: int) -> _Handler | None:
        return self._handlers.get(request_id)

    def story(self) -> list[str]:
        return list(self._story)

    def _allocate(self) -> int:
        if len(self._handlers) >= self.max_outstanding_requests:
            raise Overloaded(len(self._handlers), self.max_outstanding_requests)
        request_id = self._next_request_id
        invariant(request_id <= _MAX_REQUEST_ID, "request ids exhausted")
        self._next_request_id += 1
        return request_id

    def begin_write(
        self,
        unit: WriteUnit,
        replicas: TokenReplicas,
        consistency: ConsistencyLevel,
        live: Callable[[Host], bool],
        now_ms: int,
        *,
        write_type: WriteType = WriteType.SIMPLE,
    ) -> tuple[int, list[CoordinatorAction]]:
        """Start a write; returns its request id and first actions. Unavailable, Overloaded."""
        request_id = self._allocate()
        hints = self.hints

        def should_hint(host: Host) -> bool:
            return host != self.local and hints.should_hint(host, now_ms)

        handler = WriteHandler(
            request_id,
            unit,
            replicas,
            consistency,
            live,
            write_type=write_type,
            should_hint=should_hint,
        )
        self._handlers[request_id] = handler
        actions: list[CoordinatorAction] = [*handler.start()]
        actions.append(ArmTimeout(request_id, self.write_timeout_ms))
        self._story.append(f"write {request_id} at {consistency.name} began")
        self._retire(request_id)
        return request_id, actions

    def begin_read(
        self,
        replicas: TokenReplicas,
        consistency: ConsistencyLevel,
        live: Callable[[Host], bool],
        resolve: Callable[[Mutation | None], ResultT],
        *,
        proximity: Sequence[Host] | None = None,
        read_repair: ReadRepairMode = ReadRepairMode.BLOCKING,
    ) -> tuple[int, list[CoordinatorAction]]:
        """Start a read; returns its request id and first actions. Unavailable, Overloaded."""
        request_id = self._allocate()
        handler: ReadHandler[object] = ReadHandler(
            request_id,
            replicas,
            consistency,
            live,
            resolve,
            proximity=proximity,
            read_repair=read_repair,
        )
        self._handlers[request_id] = handler
        actions: list[CoordinatorAction] = [*handler.start()]
        actions.append(ArmTimeout(request_id, self.read_timeout_ms))
        self._story.append(f"read {request_id} at {consistency.name} began")
        return request_id, actions

    def handle(self, event: CoordinatorEvent) -> list[CoordinatorAction]:
        """Feed one event to the request it belongs to; returns the resulting actions."""
        if isinstance(event, HintStored):
            self.hints.on_hint_stored(event.target.host_id, event.created_ms)
        handler = self._handlers.get(event.request_id)
        if handler is None:
            self._story.append(f"{type(event).__name__} for finished request ignored: {event}")
            return []
        actions: list[CoordinatorAction] = []
        if isinstance(handler, WriteHandler):
            if not isinstance(event, _WRITE_EVENTS):
                raise InvalidRequest(f"{type(event).__name__} for write {event.request_id}")
            actions.extend(_write_event(event, handler))
        else:
            if not isinstance(event, _READ_EVENTS):
                raise InvalidRequest(f"{type(event).__name__} for read {event.request_id}")
            actions.extend(_read_event(event, handler))
        self._retire(event.request_id)
        return actions

    def _retire(self, request_id: int) -> None:
        handler = self._handlers[request_id]
        finished = (
            handler.state is WriteState.FINISHED
            if isinstance(handler, WriteHandler)
            else handler.state is ReadState.DONE
        )
        if finished:
            del self._handlers[request_id]
            self._story.append(f"request {request_id} finished")

    def validate(self) -> None:
        """Check the facade's and every held handler's invariants."""
        invariant(
            len(self._handlers) <= self.max_outstanding_requests,
            lambda: f"{len(self._handlers)} requests held, limit {self.max_outstanding_requests}",
        )
        for request_id, handler in self._handlers.items():
            if handler.request_id != request_id or request_id >= self._next_request_id:
                raise InternalError(f"request {request_id} filed wrongly or from the future")
            handler.validate()
        self.hints.validate()


# -- the CDC step ----------------------------------------------------------------------------


def base_token(mutation: Mutation) -> int:
    """The token of the mutation's partition: Murmur3, or the CDC partitioner for log tables."""
    return partition_token(mutation.table, mutation.partition_key)


def log_token(stream_id: StreamId) -> int:
    """Where the log partition of ``stream_id`` lives: the CDC partitioner's token of the stream
    (its first 8 bytes, signed, normalised like ``dht::token``; scylla-cdc.md §1)."""
    return normalise_token(stream_id.token)


def check_cdc_colocation(
    base: int,
    stream_id: StreamId,
    token_metadata: TokenMetadata,
    strategy: ReplicationStrategy,
) -> None:
    """Raise ``InternalError`` unless the log partition has the base partition's replicas."""
    log = log_token(stream_id)
    base_replicas = strategy.replicas(base, token_metadata)
    log_replicas = strategy.replicas(log, token_metadata)
    invariant(
        set(base_replicas) == set(log_replicas),
        f"CDC stream {stream_id} (token {log}) is not colocated with base token {base}: "
        f"log replicas {[str(h) for h in log_replicas]} != base replicas "
        f"{[str(h) for h in base_replicas]}; the generation does not refine the current ring",
    )


def prepare_cdc_write(
    base_mutation: Mutation,
    table: Table,
    write_ts_us: int,
    now_us: int,
    cdc_metadata: CdcMetadata,
    rng: random.Random,
    *,
    token_metadata: TokenMetadata | None = None,
    strategy: ReplicationStrategy | None = None,
) -> CdcCapture:
    """The capture of a base write to a CDC-enabled table (module rules)."""
    if not table.options.cdc.enabled:
        raise InvalidRequest(f"CDC is not enabled on {table.keyspace}.{table.name}")
    if (base_mutation.keyspace, base_mutation.table) != (table.keyspace, table.name):
        raise InvalidRequest(
            f"mutation of {base_mutation.keyspace}.{base_mutation.table} is not for "
            f"{table.keyspace}.{table.name}"
        )
    if (token_metadata is None) != (strategy is None):
        raise InvalidRequest("the colocation check needs both token_metadata and strategy")
    token = base_token(base_mutation)
    stream = cdc_metadata.get_stream(write_ts_us, token, now_us)
    if token_metadata is not None and strategy is not None:
        check_cdc_colocation(token, stream, token_metadata, strategy)
    return CdcCapture(stream.to_bytes(), rng.getrandbits(64), now_us // 1_000_000)
