"""A cluster node's service: gossip, the ring, the coordinator and the replica verbs, wired to a
``Clock``, a ``Network`` and the local store.

The shell around the pure cores (STYLE.md "pure cores, thin shells"): ``Gossiper`` and its
``FailureDetector``, ``Coordinator`` (``WriteHandler``/``ReadHandler``/``BlockingRepair``) and
``HintManager`` decide; this class only turns their actions into messages, timers and store
calls, and turns messages, timers and store results back into their events. Everything here runs
on one thread (the event loop, or the simulator); store work goes through ``Offload``, whose
``done`` callback comes back on that thread.

Rules:

* Internode endpoints are ``address:7000``; a ring ``Host.endpoint`` is that endpoint.
* A coordinator request id travels in the envelope; the replica answers with the same id.
  A MUTATION_RSP for a read request is a read-repair ack (``SendRepair`` is a MUTATION_REQ).
  A failure answer is FAILURE_RSP carrying ``[verb, reason]``.
* Writes are split into one ``WriteUnit`` per partition (base mutation + its CDC capture, sent
  together to each replica); every CDC capture is checked with ``check_cdc_colocation`` first.
* Hints keep the CDC captures (``Store.store_hint(captures=)``) and are replayed as HINT_REQ
  when the ``HintManager`` says the target is up and agrees on the schema.
* Schema (seed 004 "announce/push"): after a local DDL the node gossips its new SCHEMA version
  and pushes its ``system_schema`` partitions to every live peer; a node that sees a peer
  gossip a different version pulls that peer's partitions. Partitions merge by timestamp, so
  pushes from several nodes commute; the processor then reloads its schema from the store.
  ``schema_disagreement`` names the live nodes gossiping another version (a DDL answer waits
  until there are none, ``ClusterDataPlane.await_schema_agreement``). Each migration stays in
  the chain of the node that ran it (``system.schema_migrations``); peers take its rows.
  ``schema_observer`` (optional) is told of every ``SchemaStep`` as it is reached: the seam
  crash-point tests use (seed 004 "a node can fail during any step").
* Range reads (``read_range``, cassandra-core.md §5, §7.2): the requested token range is cut at
  every ring token (wrap-around unwrapped), neighbouring pieces with the same replicas are joined,
  and the pieces are read one after the other in token order: each from blockFor live replicas
  (``Unavailable`` before sending otherwise) with a RANGE_READ (this node reads its own store),
  the answers merged per partition with ``merge_mutations``. Every replica sends at most the
  partitions still wanted; when one stops short, the result stops before the first token that
  replica did not cover and the caller resumes from there. A failed replica is ``ReadFailure``,
  no answer by the deadline (``range_timeout_ms`` for the whole range read, Cassandra's
  ``range_request_timeout``) ``ReadTimeout``. No read repair and no digests for range reads (yet).
"""

from __future__ import annotations

import bisect
import enum
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

import msgpack

from ringflow.cdc import CdcCapture, StreamId
from ringflow.cluster._consistency import (
    ConsistencyLevel,
    ReadTimeout,
    assure_sufficient_live_replicas,
)
from ringflow.cluster._coordinator import (
    ArmTimeout,
    Coordinator,
    CoordinatorAction,
    CoordinatorEvent,
    DataReceived,
    DigestReceived,
    HintStored,
    MutationAcked,
    MutationFailed,
    ReadReplicaFailed,
    RepairAcked,
    RepairFailed,
    RequestTimedOut,
    base_token,
    log_token,
)
from ringflow.cluster._digest import partition_digest
from ringflow.cluster._failure_detector import FailureDetector
from ringflow.cluster._gossip import (
    GossipAction,
    Gossiper,
    NodeDown,
    NodeUp,
    Send,
    StateChanged,
)
from ringflow.cluster._gossip_state import ApplicationState
from ringflow.cluster._hints import DeleteHint, DeliverHint, HintAction, HintManager, ReplayHints
from ringflow.cluster._messages import (
    GOSSIP_VERBS,
    Envelope,
    EnvelopeDecoder,
    Verb,
    encode_envelope,
)
from ringflow.cluster._read_path import ReadFailure, ReadKind, Respond, SendRead, select_contacts
from ringflow.cluster._read_repair import SendRepair
from ringflow.cluster._topology_change import (
    LEFT_STATUS,
    REMOVED,
    REMOVING,
    Change,
    Transition,
    colocated,
    decode_removals,
    future_ring,
    pending_replicas,
    status_word,
    transition_of,
)
from ringflow.cluster._write_path import Complete, SendMutation, StoreHint, TokenReplicas, WriteUnit
from ringflow.cluster.service import _codec
from ringflow.cluster.service._membership import (
    PeerInfo,
    local_endpoint_state,
    peer_mutation,
    peer_removal_mutation,
    ring_members,
    token_metadata_of,
)
from ringflow.cluster.service._settings import (
    ClusterSettings,
    EventSink,
    Offload,
    PendingRead,
    ReadDone,
    WriteDone,
    WriteGroup,
)
from ringflow.cql._executor import QueryProcessor
from ringflow.errors import RingflowError, invariant
from ringflow.ring import (
    MAX_TOKEN,
    MIN_TOKEN,
    Host,
    ReplicationStrategy,
    TokenMetadata,
    replication_strategy,
)
from ringflow.runtime import Clock, Network, TimerHandle
from ringflow.schema import (
    SYSTEM_SCHEMA_KEYSPACE_NAME,
    SYSTEM_SCHEMA_TABLE_NAMES,
    Mutation,
    merge_mutations,
)
from ringflow.storage import Store
from ringflow.storage._hints import Hint

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

INTERNODE_PORT = 7000
HINT_FETCH_LIMIT = 64
SCHEMA_PULL_INTERVAL_MS = 2_000
_MIN_TOKEN = -(2**63)
EVERYWHERE_KEYSPACE = "system_distributed_everywhere"
_TRANSITION_STATES = (
    ApplicationState.STATUS,
    ApplicationState.HOST_ID,
    ApplicationState.DC,
    ApplicationState.RACK,
    ApplicationState.TOKENS,
)
RANGE_ANSWER_MAX_BYTES = 4 * 1024 * 1024
"""A replica stops its RANGE_READ answer after the partition that reaches this size."""
_RANGE_REQUEST_IDS = 1 << 62
"""Range read request ids start here, far from the coordinator's own ids."""

RangeDone = Callable[[list[Mutation] | None, int | None, BaseException | None], None]
"""``done(partitions, covered, error)``: ``covered`` is None when the whole range was read,
else the last token read (resume from ``(covered, right]``)."""
Piece = tuple[int, int, tuple[Host, ...]]
"""A range read's piece: ``(low, high]`` with ``low < high`` and its natural replicas."""


def split_range(left: int, right: int, ring_tokens: Sequence[int]) -> list[tuple[int, int]]:
    """``(left, right]`` (wrapping when ``left >= right``; ``(t, t]`` is the whole ring) as
    pieces ``(low, high]`` with ``low < high`` that do not wrap, cut at every ring token, in the
    order a scan from ``left`` meets them. MIN_TOKEN is never a key's token: ``(x, MIN]`` is read
    as ``(x, MAX]``."""
    if left < right:
        halves = [(left, right)]
    elif right == MIN_TOKEN:
        halves = [(left, MAX_TOKEN)]
    else:
        halves = [(left, MAX_TOKEN), (MIN_TOKEN, right)]
    tokens = sorted(set(ring_tokens))
    pieces: list[tuple[int, int]] = []
    for low, high in halves:
        if low >= high:
            continue
        cursor = low
        for token in tokens[bisect.bisect_right(tokens, low) :]:
            if token >= high:
                break
            pieces.append((cursor, token))
            cursor = token
        pieces.append((cursor, high))
    return pieces


def join_pieces(
    pieces: Sequence[tuple[int, int]], replicas_of: Callable[[int], Sequence[Host]]
) -> list[Piece]:
    """``pieces`` with their natural replicas, neighbours with the same replicas joined."""
    joined: list[Piece] = []
    for low, high in pieces:
        natural = tuple(replicas_of(high))
        if joined and joined[-1][1] == low and set(joined[-1][2]) == set(natural):
            joined[-1] = (joined[-1][0], high, joined[-1][2])
        else:
            joined.append((low, high, natural))
    return joined


def reconcile_range(
    answers: Sequence[_codec.RangeAnswer],
) -> tuple[list[Mutation], int | None]:
    """The replicas' partitions of one piece merged per key, in token order, and the last
    token they cover together (None: the whole piece).

    When an answer stopped short, only tokens before its last partition's token are kept (that
    replica may hold more partitions of the same token); if that keeps nothing, its last token
    is included (only identical tokens of different keys could then be missed)."""
    merged: dict[tuple[bytes, ...], Mutation] = {}
    cut: int | None = None
    for answer in answers:
        for partition in answer.partitions:
            key = tuple(partition.partition_key)
            known = merged.get(key)
            merged[key] = partition if known is None else merge_mutations(known, partition)
        if answer.more and answer.partitions:
            last = base_token(answer.partitions[-1])
            cut = last if cut is None else min(cut, last)
    ordered = sorted(merged.values(), key=lambda m: (base_token(m), tuple(m.partition_key)))
    if cut is None:
        return ordered, None
    kept = [m for m in ordered if base_token(m) < cut]
    if kept:
        return kept, cut - 1
    return [m for m in ordered if base_token(m) <= cut], cut


@dataclass(slots=True)
class RangeRead:
    """A range read in flight on the coordinator (see the module docstring)."""

    keyspace: str
    table: str
    consistency: ConsistencyLevel
    limit: int
    pieces: list[Piece]
    deadline_ms: int
    done: RangeDone
    index: int = 0
    collected: list[Mutation] = field(default_factory=list)
    request_id: int = 0
    contacts: tuple[Host, ...] = ()
    answers: dict[Host, _codec.RangeAnswer] = field(default_factory=dict)
    timer: TimerHandle | None = None


class SchemaStep(enum.Enum):
    """The steps of a schema change between nodes (seed 004), in the order they are reached."""

    ANNOUNCE = "announce"
    """A local DDL is persisted (rows and migration); its version is not gossiped yet."""
    PUSH = "push"
    """Announced; the push to one peer (the detail) is about to be sent."""
    PULL = "pull"
    """A peer (the detail) gossips another version: asking it for its schema."""
    RECEIVE = "receive"
    """A peer's (the detail) schema rows arrived (push or pull answer), not merged yet."""
    MERGED = "merged"
    """The merged rows are persisted; the schema is not reloaded nor gossiped yet."""


SchemaObserver = Callable[[SchemaStep, str], None]
"""Told ``(step, detail)`` at every ``SchemaStep``, on the node's thread (or its schema
offload, for MERGED)."""


class ClusterNode:
    """One node's cluster service (see the module docstring). ``start``, then ``stop``."""

    def __init__(
        self,
        settings: ClusterSettings,
        *,
        host: Host,
        tokens: Sequence[int],
        store: Store,
        processor: QueryProcessor,
        clock: Clock,
        network: Network,
        rng_seed: int,
        offload: Offload,
        schema_offload: Offload | None = None,
        events: EventSink | None = None,
        extra_states: dict[ApplicationState, str] | None = None,
        on_schema_merged: Callable[[], None] | None = None,
        schema_observer: SchemaObserver | None = None,
    ) -> None:
        import random

        self.settings = settings
        self.host = host
        self.store = store
        self.processor = processor
        self.clock = clock
        self.network = network
        self._offload = offload
        self._schema_offload = offload if schema_offload is None else schema_offload
        self._on_schema_merged = on_schema_merged
        self._schema_observer = schema_observer
        self._events = events
        self._rng = random.Random(rng_seed)
        values = {
            ApplicationState.STATUS: f"NORMAL,{min(tokens)}",
            ApplicationState.TOKENS: ",".join(str(t) for t in sorted(tokens)),
            ApplicationState.HOST_ID: str(host.host_id),
            ApplicationState.DC: host.dc,
            ApplicationState.RACK: host.rack,
            ApplicationState.RPC_ADDRESS: settings.rpc_address,
            ApplicationState.SCHEMA: str(processor.schema_version),
            **(extra_states or {}),
        }
        state = local_endpoint_state(clock.now_ms() // 1000, values)
        self.gossiper = Gossiper(
            settings.endpoint,
            state,
            settings.seeds,
            settings.cluster_name,
            self._rng,
            FailureDetector(settings.phi_convict_threshold),
        )
        self.hints = HintManager(
            dispatch_interval_ms=settings.hint_dispatch_interval_ms,
            max_hint_window_ms=settings.max_hint_window_ms,
        )
        self.hints.set_local_schema_version(processor.schema_version)
        self.coordinator = Coordinator(
            host,
            self.hints,
            max_outstanding_requests=settings.max_outstanding_requests,
            write_timeout_ms=settings.write_timeout_ms,
            read_timeout_ms=settings.read_timeout_ms,
        )
        self.members: dict[str, PeerInfo] = {}
        self.token_metadata = TokenMetadata({host: tuple(tokens)})
        self.removals: dict[uuid.UUID, str] = {}
        """Host ids being removed (``removenode``) or removed, as gossiped by anyone."""
        self.transitions: dict[str, Transition] = {}
        """Endpoints joining (STATUS=BOOT) or leaving (LEAVING) the ring, by endpoint."""
        self.future_metadata = self.token_metadata
        """The ring once every transition completed (``_topology_change.future_ring``)."""
        self.extra_handlers: dict[Verb, Callable[[str, int, bytes], None]] = {}
        """Handlers of verbs served outside this class (streaming), by verb."""
        self.failure_listeners: dict[Verb, Callable[[str, int, str], None]] = {}
        """Who hears a FAILURE_RSP for a verb served outside this class."""
        self.started_ms = clock.now_ms()
        self._writes: dict[int, WriteGroup] = {}
        self._reads: dict[int, PendingRead] = {}
        self._ranges: dict[int, RangeRead] = {}
        self._next_range_id = _RANGE_REQUEST_IDS
        self._fetched: dict[int, Hint] = {}
        self._timers: dict[int, TimerHandle] = {}
        self._decoders: dict[str, EnvelopeDecoder] = {}
        self._tick_timer: TimerHandle | None = None
        self._last_pull_ms: dict[str, int] = {}
        self._listener: object | None = None
        self._stopped = False
        self.protocol_errors = 0
        self.tick_listeners: list[Callable[[int], None]] = []
        """Called with ``now_ms`` after each gossip round (the CDC generation service)."""
        self._refresh_ring()

    @property
    def offload(self) -> Offload:
        return self._offload

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._listener = self.network.listen(self.settings.endpoint, self._on_message)
        self._offload(self.store.hint_targets, self._on_stored_hint_targets)
        self._schedule_tick()

    def _on_stored_hint_targets(
        self, targets: list[uuid.UUID] | None, error: BaseException | None
    ) -> None:
        """Hints survive a restart: tell the manager about every target still holding some
        (their exact age is unknown here, so the window counts from now)."""
        if error is not None:
            _log.error("reading the stored hint targets failed", exc_info=error)
        now_ms = self.clock.now_ms()
        for target_id in targets or []:
            self.hints.on_hint_stored(target_id, now_ms)

    def stop(self) -> None:
        self._stopped = True
        if self._tick_timer is not None:
            self._tick_timer.cancel()
        for timer in self._timers.values():
            timer.cancel()
        close = getattr(self._listener, "close", None)
        if close is not None:
            close()

    def _schedule_tick(self) -> None:
        if not self._stopped:
            self._tick_timer = self.clock.call_later(self.settings.gossip_interval_ms, self._tick)

    def _tick(self) -> None:
        now_ms = self.clock.now_ms()
        try:
            self._run_gossip(self.gossiper.tick(now_ms))
            self._run_hints(self.hints.tick(now_ms))
            self._recheck_schema()
            for listener in self.tick_listeners:
                listener(now_ms)
        except RingflowError:
            _log.exception("gossip round failed")
        self._schedule_tick()

    # -- sending ---------------------------------------------------------------------------

    def _send(self, to: str, verb: Verb, request_id: int, payload: bytes) -> bool:
        envelope = Envelope(verb, request_id, self.settings.endpoint, payload, 0)
        return self._send_envelope(to, envelope)

    def _send_envelope(self, to: str, envelope: Envelope) -> bool:
        try:
            self.network.send(self.settings.endpoint, to, encode_envelope(envelope))
        except RingflowError as error:  # Backpressure, FrameTooLarge, NetworkError
            _log.debug("send %s to %s failed: %s", envelope.verb.name, to, error)
            return False
        return True

    def _fail(self, to: str, request_id: int, verb: Verb, reason: str) -> None:
        body: bytes = msgpack.packb([int(verb), reason[:500]], use_bin_type=True)
        self._send(to, Verb.FAILURE_RSP, request_id, body)

    # -- gossip and membership -------------------------------------------------------------

    def _run_gossip(self, actions: Sequence[GossipAction]) -> None:
        now_ms = self.clock.now_ms()
        ring_changed = False
        for action in actions:
            if isinstance(action, Send):
                envelope = Envelope.of_gossip(action.message, 0, self.settings.endpoint, 0)
                self._send_envelope(action.to, envelope)
            elif isinstance(action, NodeUp | NodeDown):
                self._on_liveness(action.endpoint, isinstance(action, NodeUp), now_ms)
            elif isinstance(action, StateChanged):
                ring_changed = True
                if action.app_state is ApplicationState.SCHEMA:
                    self._on_peer_schema(action.endpoint, action.value, now_ms)
        if ring_changed:
            self._refresh_ring()

    def _on_liveness(self, endpoint: str, up: bool, now_ms: int) -> None:
        info = self.members.get(endpoint)
        if info is None:
            return
        if up:
            self.hints.on_node_up(info.host.host_id, now_ms)
        else:
            self.hints.on_node_down(info.host.host_id, now_ms)
        self._emit("STATUS_CHANGE", "UP" if up else "DOWN", info.rpc_address)

    def _emit(self, event_type: str, change: str, address: str) -> None:
        if self._events is not None:
            self._events(event_type, change, address)

    def _refresh_ring(self) -> None:
        self._refresh_removals()
        members = {
            endpoint: info
            for endpoint, info in ring_members(self.gossiper.endpoint_states()).items()
            if self.removals.get(info.host.host_id) != REMOVED
        }
        changed = [
            info
            for endpoint, info in members.items()
            if endpoint != self.settings.endpoint and self.members.get(endpoint) != info
        ]
        new_nodes = [info for info in changed if info.host.endpoint not in self.members]
        gone = [info for endpoint, info in self.members.items() if endpoint not in members]
        self.members = members
        self.token_metadata = token_metadata_of(members.values())
        self._refresh_transitions()
        self._forget_left(gone)
        for info in changed:
            if info.schema_version is not None:
                self.hints.on_schema_version(info.host.host_id, info.schema_version)
            if self.gossiper.is_alive(info.host.endpoint):
                self.hints.on_node_up(info.host.host_id, self.clock.now_ms())
        if changed:
            rows = [peer_mutation(info, self.clock.now_us()) for info in changed]
            self._offload(lambda: self._apply_system(rows), self._log_failure("system.peers"))
        for info in new_nodes:
            self._emit("TOPOLOGY_CHANGE", "NEW_NODE", info.rpc_address)

    def refresh_ring(self) -> None:
        """Rebuild the ring after a local STATUS change (a topology change of this node)."""
        self._refresh_ring()

    def _refresh_removals(self) -> None:
        """Dead nodes being removed (``removenode``), from every REMOVAL_COORDINATOR."""
        removals: dict[uuid.UUID, str] = {}
        for state in self.gossiper.endpoint_states().values():
            value = state.get(ApplicationState.REMOVAL_COORDINATOR)
            for host_id, word in decode_removals(None if value is None else value.value).items():
                if removals.get(host_id) != REMOVED:
                    removals[host_id] = word
        self.removals = removals

    def _refresh_transitions(self) -> None:
        """Joining and leaving endpoints, and the ring after them (``_topology_change``)."""
        transitions = {}
        for endpoint, info in self.members.items():  # dead nodes being removed: leaving
            if self.removals.get(info.host.host_id) == REMOVING:
                transitions[endpoint] = Transition(info.host, info.tokens, Change.LEAVE)
        for endpoint, state in self.gossiper.endpoint_states().items():
            values = {key: state.get(key) for key in _TRANSITION_STATES}
            found = transition_of(endpoint, *(v.value if v else None for v in values.values()))
            if found is not None:
                transitions[endpoint] = found
        self.transitions = transitions
        self.future_metadata = future_ring(self.token_metadata, transitions.values())

    def _forget_left(self, gone: Sequence[PeerInfo]) -> None:
        """Members that announced LEFT (decommissioned, removed): drop their ``system.peers``
        row and tell the drivers. A member that only went down stays a member."""
        left = []
        for info in gone:
            state = self.gossiper.endpoint_state(info.host.endpoint)
            status = None if state is None else state.get(ApplicationState.STATUS)
            removed = self.removals.get(info.host.host_id) == REMOVED
            if removed or (status is not None and status_word(status.value) == LEFT_STATUS):
                left.append(info)
        if not left:
            return
        rows = [peer_removal_mutation(info, self.clock.now_us()) for info in left]
        self._offload(lambda: self._apply_system(rows), self._log_failure("system.peers"))
        for info in left:
            self._emit("TOPOLOGY_CHANGE", "REMOVED_NODE", info.rpc_address)

    def _apply_system(self, rows: list[Mutation]) -> None:
        self.store.apply(rows, now_s=self.clock.now_ms() // 1000)

    @staticmethod
    def _log_failure(what: str) -> Callable[[object, BaseException | None], None]:
        def done(_result: object, error: BaseException | None) -> None:
            if error is not None:
                _log.error("%s failed", what, exc_info=error)

        return done

    def live(self, host: Host) -> bool:
        return host == self.host or self.gossiper.is_alive(host.endpoint)

    def schema_agreement(self) -> bool:
        """Every live ring member gossips our schema version."""
        return not self.schema_disagreement()

    def schema_disagreement(self) -> dict[str, str | None]:
        """The live nodes gossiping another schema version than ours (or none yet): their
        address (RPC address when known) and the version they gossip."""
        ours = str(self.processor.schema_version)
        found: dict[str, str | None] = {}
        for endpoint in self.gossiper.live_endpoints():  # the others: we are not listed
            state = self.gossiper.endpoint_state(endpoint)
            versioned = None if state is None else state.get(ApplicationState.SCHEMA)
            if versioned is None or versioned.value != ours:
                info = self.members.get(endpoint)
                address = endpoint.rsplit(":", 1)[0] if info is None else info.rpc_address
                found[address] = None if versioned is None else versioned.value
        return found

    # -- schema ------------------------------------------------------------------------------

    def _observe(self, step: SchemaStep, detail: str = "") -> None:
        if self._schema_observer is not None:
            self._schema_observer(step, detail)

    def on_local_schema_change(self) -> None:
        """After a DDL here: gossip the new version and push our schema to every live peer."""
        self._observe(SchemaStep.ANNOUNCE)
        version = self.processor.schema_version
        self.gossiper.set_application_state(ApplicationState.SCHEMA, str(version))
        self.hints.set_local_schema_version(version)
        targets = self.gossiper.live_endpoints()

        def send(mutations: list[Mutation] | None, error: BaseException | None) -> None:
            if error is not None or mutations is None:
                _log.error("schema push failed", exc_info=error)
                return
            payload = _codec.encode_mutations_payload(mutations)
            for endpoint in targets:
                self._observe(SchemaStep.PUSH, endpoint)
                self._send(endpoint, Verb.SCHEMA_PUSH_REQ, 0, payload)

        self._offload(self._schema_mutations, send)

    def _schema_mutations(self) -> list[Mutation]:
        mutations: list[Mutation] = []
        for name in SYSTEM_SCHEMA_TABLE_NAMES:
            state: bytes | None = None
            while True:
                page = self.store.scan_mutations(
                    (SYSTEM_SCHEMA_KEYSPACE_NAME, name),
                    _MIN_TOKEN,
                    _MIN_TOKEN,
                    page_size=256,
                    paging_state=state,
                )
                mutations.extend(page.mutations)
                state = page.paging_state
                if state is None:
                    break
        return mutations

    def _on_peer_schema(self, endpoint: str, version: str, now_ms: int) -> None:
        if endpoint == self.settings.endpoint or version == str(self.processor.schema_version):
            return
        if now_ms - self._last_pull_ms.get(endpoint, -SCHEMA_PULL_INTERVAL_MS) < 500:
            return
        self._last_pull_ms[endpoint] = now_ms
        self._observe(SchemaStep.PULL, endpoint)
        self._send(endpoint, Verb.SCHEMA_PULL_REQ, 0, b"")

    def _merge_schema(self, source: str, mutations: list[Mutation]) -> None:
        self._observe(SchemaStep.RECEIVE, source)

        def work() -> bool:
            if mutations:
                self.store.apply(mutations, now_s=self.clock.now_ms() // 1000)
            self._observe(SchemaStep.MERGED, source)
            changed = self.processor.reload_schema()
            if changed and self._on_schema_merged is not None:
                self._on_schema_merged()
            return changed

        def done(changed: bool | None, error: BaseException | None) -> None:
            if error is not None:
                _log.error("schema merge failed", exc_info=error)
            elif changed:
                version = self.processor.schema_version
                self.gossiper.set_application_state(ApplicationState.SCHEMA, str(version))
                self.hints.set_local_schema_version(version)

        self._schema_offload(work, done)

    def _recheck_schema(self) -> None:
        """Pull from any live peer still gossiping another version (periodic safety net)."""
        now_ms = self.clock.now_ms()
        for endpoint in self.gossiper.live_endpoints():
            state = self.gossiper.endpoint_state(endpoint)
            versioned = None if state is None else state.get(ApplicationState.SCHEMA)
            if versioned is not None:
                last = self._last_pull_ms.get(endpoint, -SCHEMA_PULL_INTERVAL_MS)
                if now_ms - last >= SCHEMA_PULL_INTERVAL_MS:
                    self._on_peer_schema(endpoint, versioned.value, now_ms)

    # -- the coordinator -------------------------------------------------------------------

    def strategy_of(self, keyspace: str, ring: TokenMetadata | None = None) -> ReplicationStrategy:
        """``keyspace``'s strategy on ``ring`` (default: the current ring)."""
        ring = self.token_metadata if ring is None else ring
        replication = self.processor.schema.keyspaces.get(keyspace)
        if keyspace == EVERYWHERE_KEYSPACE:  # EverywhereStrategy: every ring member
            factor = max(1, len(ring.hosts))
            return replication_strategy({"class": "SimpleStrategy", "replication_factor": factor})
        if replication is None:  # system_distributed*: everywhere / local-style keyspaces
            factor = max(1, min(3, len(ring)))
            return replication_strategy({"class": "SimpleStrategy", "replication_factor": factor})
        dcs = sorted({info.host.dc for info in self.members.values()} | set(ring.datacenters()))
        return replication_strategy(dict(replication.replication), dcs)

    def replicas_of(self, keyspace: str, token: int, *, for_write: bool = False) -> TokenReplicas:
        """The natural replicas of ``token``; for a write during a topology change also the
        pending ones (``_topology_change.pending_replicas``)."""
        strategy = self.strategy_of(keyspace)
        pending: tuple[Host, ...] = ()
        if for_write and self.transitions:
            future = self.future_metadata
            pending = pending_replicas(
                token, self.token_metadata, strategy, future, self.strategy_of(keyspace, future)
            )
        return TokenReplicas.of(token, self.token_metadata, strategy, self.host.dc, pending)

    def check_colocation(self, keyspace: str, base: int, stream: StreamId) -> None:
        """Raise ``InternalError`` unless the CDC stream's replicas are the base's, in the
        current ring or, during a topology change, in the future ring (``_topology_change``)."""
        log = log_token(stream)
        strategy = self.strategy_of(keyspace)
        future = self.future_metadata if self.transitions else None
        future_strategy = None if future is None else self.strategy_of(keyspace, future)
        invariant(
            colocated(base, log, self.token_metadata, strategy, future, future_strategy),
            f"CDC stream {stream} (token {log}) is not colocated with base token {base}: "
            "the generation refines neither the current ring nor the ring being changed to",
        )

    def write(
        self,
        batch: Sequence[Mutation],
        captures: dict[int, CdcCapture],
        consistency: ConsistencyLevel,
        done: WriteDone,
    ) -> None:
        """Coordinate ``batch`` at ``consistency``; ``done(error)`` once every unit settled."""
        try:
            plans = []
            for index, mutation in enumerate(batch):
                token = base_token(mutation)
                replicas = self.replicas_of(mutation.keyspace, token, for_write=True)
                capture = captures.get(index)
                if capture is not None:
                    stream = StreamId.from_bytes(capture.stream_id)
                    self.check_colocation(mutation.keyspace, token, stream)
                unit = WriteUnit((mutation,), () if capture is None else ((0, capture),))
                plans.append((unit, replicas))
        except Exception as error:
            done(error)
            return
        group = WriteGroup(len(plans), done)
        for unit, replicas in plans:
            try:
                request_id, actions = self.coordinator.begin_write(
                    unit, replicas, consistency, self.live, self.clock.now_ms()
                )
            except Exception as error:
                group.complete(error)
                continue
            self._writes[request_id] = group
            self._execute(actions)

    def read(
        self,
        keyspace: str,
        table: str,
        partition_key: tuple[bytes, ...],
        consistency: ConsistencyLevel,
        done: ReadDone,
    ) -> None:
        """Coordinate a read of one raw partition; ``done(partition, error)``."""
        command = _codec.ReadCommand(keyspace, table, partition_key, ReadKind.DATA)
        try:
            mutation = Mutation(keyspace, table, partition_key)
            replicas = self.replicas_of(keyspace, base_token(mutation))
            request_id, actions = self.coordinator.begin_read(
                replicas,
                consistency,
                self.live,
                lambda partition: partition,
                proximity=self._read_proximity(replicas.natural),
            )
        except Exception as error:
            done(None, error)
            return
        self._reads[request_id] = PendingRead(command, done)
        self._execute(actions)

    def read_range(
        self,
        keyspace: str,
        table: str,
        left: int,
        right: int,
        consistency: ConsistencyLevel,
        limit: int,
        done: RangeDone,
    ) -> None:
        """Coordinate a read of at most ``limit`` raw partitions of ``(left, right]`` (wrapping
        when ``left >= right``), in token order; ``done(partitions, covered, error)``."""
        try:
            if limit < 1:
                raise ValueError(f"a range read wants at least one partition, got {limit}")
            pieces = join_pieces(
                split_range(left, right, self.token_metadata.sorted_tokens),
                lambda token: self.replicas_of(keyspace, token).natural,
            )
        except Exception as error:
            done(None, None, error)
            return
        deadline_ms = self.clock.now_ms() + self.settings.range_timeout_ms
        state = RangeRead(keyspace, table, consistency, limit, pieces, deadline_ms, done)
        self._next_range_piece(state)

    def _finish_range(
        self, state: RangeRead, covered: int | None, error: BaseException | None
    ) -> None:
        self._ranges.pop(state.request_id, None)
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        if error is not None:
            state.done(None, None, error)
        else:
            state.done(state.collected, covered, None)

    def _next_range_piece(self, state: RangeRead) -> None:
        if state.index >= len(state.pieces):
            self._finish_range(state, None, None)
            return
        low, high, natural = state.pieces[state.index]
        try:
            strategy = self.strategy_of(state.keyspace)
            alive = assure_sufficient_live_replicas(
                state.consistency,
                strategy,
                natural,
                self.live,
                local_dc=self.host.dc,
                for_write=False,
            )
            contacts = select_contacts(
                state.consistency, strategy, self._read_proximity(alive), self.host.dc
            )
        except Exception as error:
            self._finish_range(state, None, error)
            return
        request_id = self._next_range_id
        self._next_range_id += 1
        state.request_id, state.contacts, state.answers = request_id, tuple(contacts), {}
        self._ranges[request_id] = state
        delay_ms = max(1, state.deadline_ms - self.clock.now_ms())
        state.timer = self.clock.call_later(delay_ms, lambda: self._range_timed_out(request_id))
        wanted = state.limit - len(state.collected)
        command = _codec.RangeCommand(state.keyspace, state.table, low, high, wanted)
        payload = _codec.encode_range_read(command)
        for replica in sorted(contacts, key=lambda host: host == self.host):  # local last
            if replica == self.host:

                def served(answer: _codec.RangeAnswer | None, error: BaseException | None) -> None:
                    self._on_range_answer(request_id, self.host, None if error else answer)

                self._offload(lambda: self._serve_range(command), served)
            elif not self._send(replica.endpoint, Verb.RANGE_READ, request_id, payload):
                self._on_range_answer(request_id, replica, None)

    def _serve_range(self, command: _codec.RangeCommand) -> _codec.RangeAnswer:
        limit = max(1, min(command.limit, self.store.limits.max_page_size_rows))
        page = self.store.scan_mutations(
            (command.keyspace, command.table), command.low, command.high, page_size=limit
        )
        return _codec.RangeAnswer(tuple(page.mutations), page.paging_state is not None)

    def _on_range_answer(
        self, request_id: int, replica: Host, answer: _codec.RangeAnswer | None
    ) -> None:
        state = self._ranges.get(request_id)
        if state is None or replica not in state.contacts or replica in state.answers:
            return
        if answer is None:  # the contacts are exactly blockFor: one failure is fatal
            error = ReadFailure(
                state.consistency,
                len(state.answers),
                len(state.contacts),
                1,
                bool(state.answers),
            )
            self._finish_range(state, None, error)
            return
        state.answers[replica] = answer
        if len(state.answers) < len(state.contacts):
            return
        self._ranges.pop(request_id, None)
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        partitions, covered = reconcile_range(list(state.answers.values()))
        state.collected.extend(partitions)
        high = state.pieces[state.index][1]
        state.index += 1
        if covered is not None and covered != high:
            self._finish_range(state, covered, None)
        elif len(state.collected) >= state.limit and state.index < len(state.pieces):
            self._finish_range(state, high, None)
        else:
            self._next_range_piece(state)

    def _range_timed_out(self, request_id: int) -> None:
        state = self._ranges.get(request_id)
        if state is None:
            return
        state.timer = None
        error = ReadTimeout(
            state.consistency, len(state.answers), len(state.contacts), bool(state.answers)
        )
        self._finish_range(state, None, error)

    def _read_proximity(self, replicas: Sequence[Host]) -> list[Host]:
        """Replicas nearest first: this node when it is one (a local read costs no message,
        as Cassandra reads locally), then its DC, then the others in ring order."""
        return sorted(replicas, key=lambda host: (host != self.host, host.dc != self.host.dc))

    def _handle(self, event: CoordinatorEvent) -> None:
        try:
            actions = self.coordinator.handle(event)
        except RingflowError:
            _log.exception("coordinator refused %s", event)
            return
        self._execute(actions)

    def _execute(self, actions: Sequence[CoordinatorAction]) -> None:
        for action in actions:
            if isinstance(action, SendMutation):
                self._send_unit(action.replica, action.request_id, action.unit, repair=False)
            elif isinstance(action, SendRepair):
                unit = WriteUnit((action.mutation,))
                self._send_unit(action.replica, action.request_id, unit, repair=True)
            elif isinstance(action, SendRead):
                self._send_read(action)
            elif isinstance(action, StoreHint):
                self._store_hint(action)
            elif isinstance(action, ArmTimeout):
                self._arm(action)
            elif isinstance(action, Complete):
                self._complete_write(action)
            elif isinstance(action, Respond):
                self._respond(action)

    def _arm(self, action: ArmTimeout) -> None:
        request_id = action.request_id

        def fire() -> None:
            self._timers.pop(request_id, None)
            self._handle(RequestTimedOut(request_id))

        self._timers[request_id] = self.clock.call_later(action.delay_ms, fire)

    def _complete_write(self, action: Complete) -> None:
        group = self._writes.pop(action.request_id, None)
        if group is not None:
            group.complete(action.error)

    def _respond(self, action: Respond[object]) -> None:
        pending = self._reads.pop(action.request_id, None)
        timer = self._timers.pop(action.request_id, None)
        if timer is not None:
            timer.cancel()
        if pending is None:
            return
        result = action.result
        pending.done(result if isinstance(result, Mutation) else None, action.error)

    def _send_unit(self, replica: Host, request_id: int, unit: WriteUnit, *, repair: bool) -> None:
        acked: CoordinatorEvent = (
            RepairAcked(request_id, replica) if repair else MutationAcked(request_id, replica)
        )
        failed: CoordinatorEvent = (
            RepairFailed(request_id, replica) if repair else MutationFailed(request_id, replica)
        )
        if replica == self.host:

            def done(_result: object, error: BaseException | None) -> None:
                self._handle(failed if error is not None else acked)

            self._offload(lambda: self._apply_unit(unit), done)
        elif not self._send(
            replica.endpoint, Verb.MUTATION_REQ, request_id, _codec.encode_unit(unit)
        ):
            self._handle(failed)

    def _apply_unit(self, unit: WriteUnit) -> None:
        self.store.apply(unit.mutations, now_s=self.clock.now_ms() // 1000, cdc=unit.captures)

    def _send_read(self, action: SendRead) -> None:
        pending = self._reads.get(action.request_id)
        if pending is None:
            return
        command = _codec.ReadCommand(
            pending.command.keyspace,
            pending.command.table,
            pending.command.partition_key,
            action.kind,
        )
        replica, request_id = action.replica, action.request_id
        if replica == self.host:

            def done(result: bytes | None, error: BaseException | None) -> None:
                if error is not None or result is None:
                    self._handle(ReadReplicaFailed(request_id, replica))
                else:
                    self._on_read_response(request_id, replica, result)

            self._offload(lambda: self._serve_read(command), done)
        elif not self._send(
            replica.endpoint, Verb.READ_REQ, request_id, _codec.encode_read(command)
        ):
            self._handle(ReadReplicaFailed(request_id, replica))

    def _serve_read(self, command: _codec.ReadCommand) -> bytes:
        partition = self.store.read_mutation(
            (command.keyspace, command.table), command.partition_key
        )
        digest = partition_digest(partition) if command.kind is ReadKind.DIGEST else b""
        return _codec.encode_read_response(command.kind, partition, digest)

    def _on_read_response(self, request_id: int, replica: Host, payload: bytes) -> None:
        kind, partition, digest = _codec.decode_read_response(payload)
        if kind is ReadKind.DIGEST:
            self._handle(DigestReceived(request_id, replica, digest))
        else:
            self._handle(DataReceived(request_id, replica, partition))

    # -- hints -----------------------------------------------------------------------------

    def _store_hint(self, action: StoreHint) -> None:
        created_ms = self.clock.now_ms()
        unit, target, request_id = action.unit, action.target, action.request_id

        def work() -> int:
            return self.store.store_hint(
                target.host_id, unit.mutations, created_ms, captures=unit.captures
            )

        def done(_hint_id: int | None, error: BaseException | None) -> None:
            if error is not None:
                _log.error("storing a hint for %s failed", target, exc_info=error)
                return
            self._handle(HintStored(request_id, target, created_ms))

        self._offload(work, done)

    def _run_hints(self, actions: Sequence[HintAction]) -> None:
        for action in actions:
            if isinstance(action, ReplayHints):
                self._fetch_hints(action.target_id)
            elif isinstance(action, DeliverHint):
                self._deliver_hint(action)
            elif isinstance(action, DeleteHint):
                self._fetched.pop(action.hint_id, None)
                self._delete_hint(action.hint_id)

    def _delete_hint(self, hint_id: int) -> None:
        self._offload(lambda: self.store.delete_hint(hint_id), self._log_failure("hint delete"))

    def _fetch_hints(self, target_id: uuid.UUID) -> None:
        def done(hints: list[Hint] | None, error: BaseException | None) -> None:
            if error is not None or hints is None:
                hints = []
            for hint in hints:
                self._fetched[hint.hint_id] = hint
            actions = self.hints.on_hints_fetched(
                target_id, hints, self.clock.now_ms(), self._gc_grace_s
            )
            self._run_hints(actions)

        self._offload(lambda: self.store.hints_for(target_id, HINT_FETCH_LIMIT), done)

    def _gc_grace_s(self, keyspace: str, table: str) -> int:
        found = self.processor.schema.tables.get((keyspace, table))
        return 864_000 if found is None else found.options.gc_grace_seconds

    def _deliver_hint(self, action: DeliverHint) -> None:
        hint = self._fetched.get(action.hint_id)
        captures = () if hint is None else hint.captures
        unit = WriteUnit(action.mutations, captures)
        target = next(
            (i.host for i in self.members.values() if i.host.host_id == action.target_id), None
        )
        sent = target is not None and self._send(
            target.endpoint, Verb.HINT_REQ, action.hint_id, _codec.encode_unit(unit)
        )
        if not sent:
            self._run_hints(self.hints.on_hint_delivery_failed(action.target_id, action.hint_id))
            return
        # An answer lost with the connection (or a target that crashed mid-delivery) must not
        # leave the target's replay stuck in flight: give up on it after the write timeout.
        self.clock.call_later(
            self.settings.write_timeout_ms,
            lambda: self._hint_unanswered(action.target_id, action.hint_id),
        )

    def _hint_unanswered(self, target_id: uuid.UUID, hint_id: int) -> None:
        try:
            actions = self.hints.on_hint_delivery_failed(target_id, hint_id)
        except RingflowError:
            return  # answered in time: nothing in flight any more
        self._run_hints(actions)

    def _on_hint_answer(self, source: str, hint_id: int, delivered: bool) -> None:
        info = self.members.get(source)
        if info is None:
            return
        target_id = info.host.host_id
        try:
            if delivered:
                actions = self.hints.on_hint_delivered(target_id, hint_id)
            else:
                actions = self.hints.on_hint_delivery_failed(target_id, hint_id)
        except RingflowError:
            _log.debug("late hint answer %s from %s ignored", hint_id, source)
            return
        self._run_hints(actions)

    # -- receiving -------------------------------------------------------------------------

    def _on_message(self, source: str, payload: bytes) -> None:
        decoder = self._decoders.setdefault(source, EnvelopeDecoder())
        try:
            decoder.feed(payload)
            while (envelope := decoder.next_envelope()) is not None:
                self._dispatch(envelope)
        except RingflowError as error:
            self.protocol_errors += 1
            self._decoders.pop(source, None)
            _log.warning("bad message from %s: %s", source, error)

    def _dispatch(self, envelope: Envelope) -> None:
        verb, source = envelope.verb, envelope.from_endpoint
        if type(envelope.payload) in GOSSIP_VERBS:
            now_ms = self.clock.now_ms()
            message = envelope.payload
            assert not isinstance(message, bytes)
            self._run_gossip(self.gossiper.receive(source, message, now_ms))
            return
        payload = envelope.payload
        assert isinstance(payload, bytes)
        extra = self.extra_handlers.get(verb)
        if extra is not None:
            extra(source, envelope.request_id, payload)
            return
        handler = self._HANDLERS.get(verb)
        if handler is None:
            _log.warning("unexpected verb %s from %s", verb.name, source)
            return
        handler(self, source, envelope.request_id, payload)

    def _on_mutation_req(self, source: str, request_id: int, payload: bytes) -> None:
        self._replica_write(source, request_id, payload, Verb.MUTATION_REQ, Verb.MUTATION_RSP)

    def _on_hint_req(self, source: str, request_id: int, payload: bytes) -> None:
        self._replica_write(source, request_id, payload, Verb.HINT_REQ, Verb.HINT_RSP)

    def _replica_write(
        self, source: str, request_id: int, payload: bytes, verb: Verb, answer: Verb
    ) -> None:
        unit = _codec.decode_unit(payload)

        def done(_result: object, error: BaseException | None) -> None:
            if error is None:
                self._send(source, answer, request_id, b"")
            else:
                self._fail(source, request_id, verb, f"{type(error).__name__}: {error}")

        self._offload(lambda: self._apply_unit(unit), done)

    def _on_mutation_rsp(self, source: str, request_id: int, payload: bytes) -> None:
        host = self._host_at(source)
        if host is None:
            return
        if request_id in self._reads:
            self._handle(RepairAcked(request_id, host))
        else:
            self._handle(MutationAcked(request_id, host))

    def _on_read_req(self, source: str, request_id: int, payload: bytes) -> None:
        command = _codec.decode_read(payload)

        def done(result: bytes | None, error: BaseException | None) -> None:
            if error is None and result is not None:
                self._send(source, Verb.READ_RSP, request_id, result)
            else:
                self._fail(source, request_id, Verb.READ_REQ, f"{error}")

        self._offload(lambda: self._serve_read(command), done)

    def _on_read_rsp(self, source: str, request_id: int, payload: bytes) -> None:
        host = self._host_at(source)
        if host is not None:
            self._on_read_response(request_id, host, payload)

    def _on_hint_rsp(self, source: str, request_id: int, payload: bytes) -> None:
        self._on_hint_answer(source, request_id, True)

    def _on_failure_rsp(self, source: str, request_id: int, payload: bytes) -> None:
        verb_value, reason = msgpack.unpackb(payload, raw=False)
        host = self._host_at(source)
        _log.info("%s %s failed on %s: %s", Verb(verb_value).name, request_id, source, reason)
        listener = self.failure_listeners.get(Verb(verb_value))
        if listener is not None:
            listener(source, request_id, str(reason))
        elif verb_value == Verb.HINT_REQ:
            self._on_hint_answer(source, request_id, False)
        elif host is None:
            return
        elif verb_value == Verb.RANGE_READ:
            self._on_range_answer(request_id, host, None)
        elif verb_value == Verb.READ_REQ:
            self._handle(ReadReplicaFailed(request_id, host))
        elif request_id in self._reads:
            self._handle(RepairFailed(request_id, host))
        else:
            self._handle(MutationFailed(request_id, host))

    def _on_range_read(self, source: str, request_id: int, payload: bytes) -> None:
        message = _codec.decode_range_message(payload)
        if isinstance(message, _codec.RangeAnswer):
            host = self._host_at(source)
            if host is not None:
                self._on_range_answer(request_id, host, message)
            return
        command = message

        def done(answer: _codec.RangeAnswer | None, error: BaseException | None) -> None:
            if error is None and answer is not None:
                body = _codec.encode_range_answer(answer, RANGE_ANSWER_MAX_BYTES)
                if self._send(source, Verb.RANGE_READ, request_id, body):
                    return
                error = RuntimeError("the answer could not be sent")
            self._fail(source, request_id, Verb.RANGE_READ, f"{type(error).__name__}: {error}")

        self._offload(lambda: self._serve_range(command), done)

    def _on_schema_push(self, source: str, request_id: int, payload: bytes) -> None:
        self._merge_schema(source, _codec.decode_mutations_payload(payload))

    def _on_schema_pull(self, source: str, request_id: int, payload: bytes) -> None:
        def done(mutations: list[Mutation] | None, error: BaseException | None) -> None:
            if error is None and mutations is not None:
                body = _codec.encode_mutations_payload(mutations)
                self._send(source, Verb.SCHEMA_PULL_RSP, request_id, body)

        self._offload(self._schema_mutations, done)

    def _on_schema_pull_rsp(self, source: str, request_id: int, payload: bytes) -> None:
        self._merge_schema(source, _codec.decode_mutations_payload(payload))

    def _host_at(self, endpoint: str) -> Host | None:
        info = self.members.get(endpoint)
        if info is None:  # a joining or leaving node answers as a pending replica
            transition = self.transitions.get(endpoint)
            return None if transition is None else transition.host
        return info.host

    _HANDLERS: ClassVar[dict[Verb, Callable[[ClusterNode, str, int, bytes], None]]] = {
        Verb.MUTATION_REQ: _on_mutation_req,
        Verb.MUTATION_RSP: _on_mutation_rsp,
        Verb.READ_REQ: _on_read_req,
        Verb.READ_RSP: _on_read_rsp,
        Verb.HINT_REQ: _on_hint_req,
        Verb.HINT_RSP: _on_hint_rsp,
        Verb.FAILURE_RSP: _on_failure_rsp,
        Verb.RANGE_READ: _on_range_read,
        Verb.SCHEMA_PUSH_REQ: _on_schema_push,
        Verb.SCHEMA_PULL_REQ: _on_schema_pull,
        Verb.SCHEMA_PULL_RSP: _on_schema_pull_rsp,
    }
