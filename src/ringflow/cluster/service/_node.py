"""A cluster node's service: gossip, membership, the ring and replica placement, wired to a
``Clock``, a ``Network`` and the local store, with the helpers that serve the internode verbs.

The shell around the pure cores (STYLE.md "pure cores, thin shells"), composed in one
``NodeState`` (``_node_state``): ``Gossiper`` and its ``FailureDetector``, the ``Membership``
it feeds, ``Coordinator`` (``WriteHandler``/``ReadHandler``/``BlockingRepair``) and
``HintManager`` decide, and the state settles what one's decision means for another; this
class only turns their actions into messages, timers and store calls, and turns messages,
timers and store results back into their events. Every action goes through the node's one
``ActionExecutor`` (``_executor``): the node state's handlers are this class's, the
coordinator's and the hint manager's its helpers', registered when it is built.
Everything here runs on one thread (the event loop, or the simulator); store work goes through
``Offload``, whose ``done`` callback comes back on that thread.

``ClusterNode`` owns the lifecycle (start, a gossip round, stop), gossip and membership
(``system.peers``, removals, joining and leaving nodes) and the routing of FAILURE_RSP. Its
parts: ``placement`` (``_placement.ReplicaPlacement``: ``strategy_of``, ``replicas_of``,
``check_colocation``, ``host_at``, ``live``), ``messenger`` (``_messenger.Messenger``:
``send``, ``fail``) and the helpers below, which are given the node's parts
(``_parts.NodeParts``), not the node:

* ``_point_requests.PointRequests``: point writes and reads (``write``, ``read``), read repair,
  and the MUTATION_REQ/HINT_REQ/READ_REQ replica verbs.
* ``_range_read.RangeReads``: range reads (``read_range``) and the RANGE_READ verb.
* ``_hint_delivery.HintDelivery``: storing, replaying and deleting hints.
* ``_schema_sync.SchemaSync``: schema announce/push/pull/merge and schema agreement.
* ``_dispatch.MessageDispatcher``: decoding internode bytes and routing verbs to handlers.

Rules:

* Internode endpoints are ``address:7000``; a ring ``Host.endpoint`` is that endpoint.
* A failure answer is FAILURE_RSP carrying ``[verb, reason]``; it goes to the failure handler
  of the service that serves the verb (``serve``) when there is one, else to the helper that
  sent the request.
* A joining or leaving node answers as a pending replica (``ReplicaPlacement.host_at``).
* Internode admission (issue 16, ``_dispatch``): what a sender may ask depends on
  ``standing_of``. Gossip itself stays open, states relayed by anyone included, as
  Cassandra's: what a forged state can do is bounded by ``ring_members`` (values that do not
  parse, or a member's tokens or host id, make no member).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ringflow.cdc import CdcCapture
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster._coordinator import Coordinator
from ringflow.cluster._failure_detector import FailureDetector
from ringflow.cluster._gossip import (
    Gossiper,
    Send,
)
from ringflow.cluster._gossip_state import (
    ApplicationState,
    GossipDigestSyn,
    GossipMessage,
)
from ringflow.cluster._hints import HintManager
from ringflow.cluster._messages import Envelope, Verb
from ringflow.cluster._topology_change import (
    LEFT_STATUS,
    status_word,
)
from ringflow.cluster.service._cdc_decider import BackgroundJob, GenerationDecider
from ringflow.cluster.service._codec import decode_failure
from ringflow.cluster.service._dispatch import Handler, Holding, MessageDispatcher, Standing
from ringflow.cluster.service._executor import ActionExecutor
from ringflow.cluster.service._hint_delivery import HINT_FETCH_LIMIT, HintDelivery
from ringflow.cluster.service._membership import (
    ClientEvent,
    Membership,
    PeerRefused,
    WritePeers,
    local_endpoint_state,
    saved_peer_endpoints,
)
from ringflow.cluster.service._messenger import Messenger
from ringflow.cluster.service._node_state import NodeState, SettleAgreement
from ringflow.cluster.service._parts import NodeParts, log_failure
from ringflow.cluster.service._placement import (
    EVERYWHERE_KEYSPACE,
    INTERNODE_PORT,
    ReplicaPlacement,
)
from ringflow.cluster.service._point_requests import PointRequests
from ringflow.cluster.service._range_read import (
    RANGE_ANSWER_MAX_BYTES,
    RangeDone,
    RangeReads,
    join_pieces,
    reconcile_range,
    split_range,
)
from ringflow.cluster.service._schema_sync import (
    SCHEMA_PULL_INTERVAL_MS,
    SchemaObserver,
    SchemaStep,
    SchemaSync,
)
from ringflow.cluster.service._schema_versions import PullSchema, SchemaVersions
from ringflow.cluster.service._settings import (
    ClusterSettings,
    EventSink,
    Offload,
    ReadDone,
    WriteDone,
)
from ringflow.cluster.service._topology_state import Tick, TopologyChange
from ringflow.cql import QueryProcessor
from ringflow.errors import InternalError
from ringflow.ring import Host
from ringflow.runtime import Clock, Network
from ringflow.schema import ClusteringBound, Mutation
from ringflow.storage import Store

__all__ = [
    "EVERYWHERE_KEYSPACE",
    "HINT_FETCH_LIMIT",
    "INTERNODE_PORT",
    "RANGE_ANSWER_MAX_BYTES",
    "SCHEMA_PULL_INTERVAL_MS",
    "ClusterNode",
    "RangeDone",
    "SchemaObserver",
    "SchemaStep",
    "join_pieces",
    "reconcile_range",
    "split_range",
]
"""``ClusterNode`` and the names other modules and tests import from here (some now live in
the helper modules and are re-exported)."""

_log = logging.getLogger(__name__)

TICK = Tick()

FailureHandler = Callable[[str, int, str], None]
"""Hears a FAILURE_RSP: ``(source, request_id, reason)``."""

_NO_BOUND = ClusteringBound()


def _local_gossiper(
    settings: ClusterSettings,
    host: Host,
    tokens: Sequence[int],
    schema_version: uuid.UUID,
    now_ms: int,
    rng: random.Random,
    extra_states: dict[ApplicationState, str] | None,
) -> Gossiper:
    """The node's gossiper, announcing this node NORMAL with its tokens and schema version."""
    values = {
        ApplicationState.STATUS: f"NORMAL,{min(tokens)}",
        ApplicationState.TOKENS: ",".join(str(t) for t in sorted(tokens)),
        ApplicationState.HOST_ID: str(host.host_id),
        ApplicationState.DC: host.dc,
        ApplicationState.RACK: host.rack,
        ApplicationState.RPC_ADDRESS: settings.rpc_address,
        ApplicationState.SCHEMA: str(schema_version),
        **(extra_states or {}),
    }
    state = local_endpoint_state(now_ms // 1000, values)
    return Gossiper(
        settings.endpoint,
        state,
        settings.seeds,
        settings.cluster_name,
        rng,
        FailureDetector(settings.phi_convict_threshold),
    )


def _hint_manager(settings: ClusterSettings, schema_version: uuid.UUID) -> HintManager:
    hints = HintManager(
        dispatch_interval_ms=settings.hint_dispatch_interval_ms,
        max_hint_window_ms=settings.max_hint_window_ms,
    )
    hints.set_local_schema_version(schema_version)
    return hints


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
        generations: GenerationDecider,
        topology: TopologyChange,
        jobs: Sequence[BackgroundJob] = (),
        schema_offload: Offload | None = None,
        events: EventSink | None = None,
        extra_states: dict[ApplicationState, str] | None = None,
        on_schema_merged: Callable[[], None] | None = None,
        schema_observer: SchemaObserver | None = None,
    ) -> None:
        self.settings = settings
        self.host = host
        self.store = store
        self.processor = processor
        self.clock = clock
        self.network = network
        self._offload = offload
        self._events = events
        self._rng = random.Random(rng_seed)
        gossiper = _local_gossiper(
            settings,
            host,
            tokens,
            processor.schema_version,
            clock.now_ms(),
            self._rng,
            extra_states,
        )
        self._gossip_origin_ms = clock.now_ms() - clock.monotonic_ms()
        """The gossiper's time is the monotonic clock from the wall time at start
        (``gossip_now_ms``)."""
        hints = _hint_manager(settings, processor.schema_version)
        coordinator = Coordinator(
            host,
            hints,
            max_outstanding_requests=settings.max_outstanding_requests,
            write_timeout_ms=settings.write_timeout_ms,
            read_timeout_ms=settings.read_timeout_ms,
        )
        membership = Membership(
            settings.endpoint, host, tokens, saved_peer_endpoints(store, INTERNODE_PORT)
        )
        schema = SchemaVersions(settings.endpoint, processor.schema_version)
        self.state = NodeState(
            gossiper, membership, hints, coordinator, schema, generations, topology, jobs
        )
        """The node's pure cores composed (``_node_state``): gossip, membership, hints, the
        coordinator, the schema versions, the CDC generation decider, the background CDC
        jobs' schedules, the topology change. What they decide, this shell carries out
        through ``executor``."""
        self.placement = ReplicaPlacement(host, membership, processor, gossiper.is_alive)
        """Replica placement on the state's ring (``_placement``)."""
        self.messenger = Messenger(settings.endpoint, network)
        """Sends this node's messages (``_messenger``)."""
        self._failure_handlers: dict[Verb, FailureHandler] = {}
        """Who hears a FAILURE_RSP for a verb served outside this class (``serve``)."""
        self.started_ms = clock.now_ms()
        self._listener: object | None = None
        self._verbs: dict[Verb, Handler] = {}
        """The handler of every verb this node serves: its own and those of the services
        built on it (``serve``)."""
        self._dispatcher = MessageDispatcher(
            self._on_gossip,
            self._verbs,
            standing_of=self.standing_of,
            fail=self.messenger.fail,
            holding=Holding(self._call_later, self._learn),
        )
        self.executor = ActionExecutor()
        """Carries out every action of the node's cores (``_executor``): the node state's,
        registered here, the coordinator's and the hint manager's by their helpers, the CDC
        generations' by their service."""
        parts = NodeParts(
            host=host,
            settings=settings,
            store=store,
            processor=processor,
            clock=clock,
            offload=offload,
            executor=self.executor,
            state=self.state,
            placement=self.placement,
            messenger=self.messenger,
            refuse=self._dispatcher.refuse,
        )
        self.requests = PointRequests(parts)
        self.range_reads = RangeReads(parts)
        self.hint_delivery = HintDelivery(parts, self.requests.handle)
        self.executor.register_all(self.requests.action_handlers())
        self.executor.register_all(self.hint_delivery.action_handlers())
        schema_offload = offload if schema_offload is None else schema_offload
        self.schema_sync = SchemaSync(
            self.state,
            self.executor.run,
            processor=processor,
            store=store,
            clock=clock,
            send=self.messenger.send,
            refuse=self._dispatcher.refuse,
            offload=offload,
            schema_offload=schema_offload,
            on_schema_merged=on_schema_merged,
            observer=schema_observer,
        )
        self.executor.register_all(self._state_handlers())
        self._verbs.update(self._verb_handlers())
        self.refresh_ring()

    @property
    def offload(self) -> Offload:
        return self._offload

    @property
    def gossiper(self) -> Gossiper:
        return self.state.gossiper

    @property
    def membership(self) -> Membership:
        return self.state.membership

    @property
    def hints(self) -> HintManager:
        return self.state.hints

    @property
    def coordinator(self) -> Coordinator:
        return self.state.coordinator

    @property
    def protocol_errors(self) -> int:
        """Malformed internode messages received so far (each closed its connection)."""
        return self._dispatcher.protocol_errors

    @property
    def refused_messages(self) -> int:
        """Internode messages refused so far: a sender without the standing its verb needs,
        or a mutation for a local system keyspace or an unknown table (``_dispatch``)."""
        return self._dispatcher.refused_messages

    def refuse(self, source: str, request_id: int, verb: Verb, reason: str) -> None:
        """Refuse request ``request_id`` of ``verb`` from ``source``: counted, logged, and
        answered with FAILURE_RSP when ``source`` is known (``MessageDispatcher.refuse``)."""
        self._dispatcher.refuse(source, request_id, verb, reason)

    def standing_of(self, endpoint: str) -> Standing:
        """What this node knows of ``endpoint`` (``_dispatch.Standing``): a saved peer is a
        member until gossip shows it left (a restarted node hears from its peers before
        gossip has told it who they are)."""
        if self.placement.host_at(endpoint) is not None:
            return Standing.MEMBER
        state = self.gossiper.endpoint_state(endpoint)
        if endpoint in self.membership.saved_peers:
            status = None if state is None else state.get(ApplicationState.STATUS)
            if status is None or status_word(status.value) != LEFT_STATUS:
                return Standing.MEMBER
        if state is not None:
            return Standing.KNOWN
        return Standing.STRANGER

    def serve(
        self,
        handlers: Mapping[Verb, Handler],
        *,
        on_failure: Mapping[Verb, FailureHandler] | None = None,
        replace: bool = False,
    ) -> None:
        """Serve the verbs of a service built on this node (streaming, repair) with
        ``handlers``, and hand the FAILURE_RSP answers to its requests of a verb to that verb's
        ``on_failure`` handler. A verb already served is a wiring fault (``InternalError``)
        unless ``replace`` (a test standing in for a service)."""
        failures = on_failure or {}
        taken = {verb.name for verb in handlers if verb in self._verbs}
        taken |= {verb.name for verb in failures if verb in self._failure_handlers}
        if taken and not replace:
            raise InternalError(f"verbs already served: {', '.join(sorted(taken))}")
        self._verbs.update(handlers)
        self._failure_handlers.update(failures)

    def verb_handler(self, verb: Verb) -> Handler | None:
        """The handler serving ``verb``, or None."""
        return self._verbs.get(verb)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._listener = self.network.listen(self.settings.endpoint, self._dispatcher.on_message)
        self._offload(self.store.hint_targets, self.hint_delivery.on_stored_hint_targets)

    def validate(self) -> None:
        """The node's invariants: its state's (gossip and failure detector, membership, the
        coordinator with every request and hint it holds) and the statements' requests
        waiting on them. The simulator checks them after every event
        (``Simulation.add_invariant``)."""
        self.state.validate()
        self.requests.validate()

    def stop(self) -> None:
        self.requests.stop()
        close = getattr(self._listener, "close", None)
        if close is not None:
            close()

    def gossip_now_ms(self) -> int:
        """The time the gossiper and its failure detector are given: it must never go back
        (the gossiper refuses a round whose time does), so it runs on the monotonic clock,
        from the wall-clock time at start (a peer's generation is still compared with a
        wall time, within the year ``MAX_GENERATION_DIFFERENCE_S`` allows). The wall clock
        may jump back (NTP, a skewed clock corrected): fed to the gossiper, every round
        would fail until it caught up again."""
        return self._gossip_origin_ms + self.clock.monotonic_ms()

    def round(self, now_ms: int) -> None:
        """One gossip round at ``now_ms`` (every ``gossip_interval_ms``, driven by the node
        that composes this one, ``BuiltNode``): gossip, hint delivery, the schema pulls
        due, the CDC generations' round, the background jobs due (``NodeState.round``); then,
        once those actions are carried out, the topology change's round (``Tick``: it reads
        what they did, e.g. the generation loaded). A failed topology round is logged and the
        next one runs: it must never stop the node's rounds."""
        now_us = self.clock.now_us()
        self.executor.run(self.state.round(self.gossip_now_ms(), now_ms, now_us))
        try:
            self.executor.run(self.state.topology_event(TICK, now_ms, self.clock.now_us()))
        except Exception:
            _log.exception("topology change round failed")

    # -- gossip and membership -------------------------------------------------------------

    def _on_gossip(self, source: str, message: GossipMessage) -> None:
        now_ms, now_us = self.clock.now_ms(), self.clock.now_us()
        self.executor.run(
            self.state.received(source, message, self.gossip_now_ms(), now_ms, now_us)
        )

    def _learn(self, endpoint: str) -> None:
        """Ask ``endpoint`` for its gossip state: an empty SYN, answered with an ACK of every
        state it has."""
        syn = GossipDigestSyn(self.settings.cluster_name, self.gossiper.partitioner, ())
        envelope = Envelope.of_gossip(syn, 0, self.settings.endpoint, 0)
        self.messenger.send_envelope(endpoint, envelope)

    def _call_later(self, delay_ms: int, callback: Callable[[], None]) -> object:
        return self.clock.call_later(delay_ms, callback)

    def _emit(self, event_type: str, change: str, address: str) -> None:
        if self._events is not None:
            self._events(event_type, change, address)

    def _state_handlers(self) -> dict[type, Callable[[Any], None]]:
        """What the node state's actions do here (``_node_state``): send gossip, the drivers'
        events, ``system.peers`` rows on the store's thread, a refused peer logged, a pull of
        a peer's schema by the schema sync and, once a batch changed liveness or versions,
        schema agreement settled."""

        def send(action: Send) -> None:
            envelope = Envelope.of_gossip(action.message, 0, self.settings.endpoint, 0)
            self.messenger.send_envelope(action.to, envelope)

        def write_peers(action: WritePeers) -> None:
            rows = list(action.rows)
            self._offload(lambda: self._apply_system(rows), log_failure("system.peers"))

        def client_event(action: ClientEvent) -> None:
            self._emit(action.event_type, action.change, action.address)

        def peer_refused(action: PeerRefused) -> None:
            _log.error(
                "refusing node %s: its authentication is %s, this node's is %s; nodes of "
                "one cluster must use the same authenticator and authorizer",
                action.endpoint,
                action.mode,
                action.own_mode or "?",
            )

        return {
            Send: send,
            ClientEvent: client_event,
            WritePeers: write_peers,
            PeerRefused: peer_refused,
            PullSchema: self.schema_sync.pull,
            SettleAgreement: lambda _action: self.schema_sync.settle(),
        }

    def refresh_ring(self) -> None:
        """Rebuild the ring from gossip, once built."""
        self.executor.run(self.state.ring_changed(self.clock.now_ms(), self.clock.now_us()))

    def _apply_system(self, rows: list[Mutation]) -> None:
        self.store.apply(rows, now_s=self.clock.now_ms() // 1000)

    def await_schema_agreement(
        self, timeout_ms: int, done: Callable[[dict[str, str | None]], None]
    ) -> None:
        """Tell ``done`` the live nodes still disagreeing (empty: agreement) as soon as every
        live node gossips our schema version, or after ``timeout_ms`` (``SchemaSync``)."""
        self.schema_sync.await_agreement(timeout_ms, done)

    def on_local_schema_change(self) -> None:
        """After a DDL here: gossip the new version and push our schema to every live peer."""
        self.schema_sync.on_local_schema_change()

    # -- the coordinator -------------------------------------------------------------------

    def write(
        self,
        batch: Sequence[Mutation],
        captures: dict[int, CdcCapture],
        consistency: ConsistencyLevel,
        done: WriteDone,
    ) -> None:
        """Coordinate ``batch`` at ``consistency``; ``done(error)`` once every unit settled
        (``_point_requests``)."""
        self.requests.write(batch, captures, consistency, done)

    def read(
        self,
        keyspace: str,
        table: str,
        partition_key: tuple[bytes, ...],
        consistency: ConsistencyLevel,
        done: ReadDone,
        start: ClusteringBound = _NO_BOUND,
        end: ClusteringBound = _NO_BOUND,
        columns: tuple[str, ...] | None = None,
    ) -> None:
        """Coordinate a read of one raw partition, or of its clustering slice ``start`` ..
        ``end``, of its static and regular ``columns`` only when given; ``done(partition,
        error)`` (``_point_requests``)."""
        self.requests.read(keyspace, table, partition_key, consistency, done, start, end, columns)

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
        when ``left >= right``), in token order; ``done(partitions, covered, error)``
        (``_range_read``)."""
        self.range_reads.read_range(keyspace, table, left, right, consistency, limit, done)

    # -- receiving -------------------------------------------------------------------------

    def _on_hint_rsp(self, source: str, request_id: int, payload: bytes) -> None:
        self.hint_delivery.on_hint_answer(source, request_id, True)

    def _on_failure_rsp(self, source: str, request_id: int, payload: bytes) -> None:
        verb, reason = decode_failure(payload)
        host = self.placement.host_at(source)
        _log.info("%s %s failed on %s: %s", verb.name, request_id, source, reason)
        on_failure = self._failure_handlers.get(verb)
        if on_failure is not None:
            on_failure(source, request_id, reason)
        elif verb == Verb.HINT_REQ:
            self.hint_delivery.on_hint_answer(source, request_id, False)
        elif host is None:
            return
        elif verb == Verb.RANGE_READ:
            self.range_reads.on_range_answer(request_id, host, None)
        elif verb in (Verb.READ_REQ, Verb.MUTATION_REQ):
            self.requests.on_failure(request_id, host, verb)

    def _verb_handlers(self) -> dict[Verb, Handler]:
        return {
            Verb.MUTATION_REQ: self.requests.on_mutation_req,
            Verb.MUTATION_RSP: self.requests.on_mutation_rsp,
            Verb.READ_REQ: self.requests.on_read_req,
            Verb.READ_RSP: self.requests.on_read_rsp,
            Verb.HINT_REQ: self.requests.on_hint_req,
            Verb.HINT_RSP: self._on_hint_rsp,
            Verb.FAILURE_RSP: self._on_failure_rsp,
            Verb.RANGE_READ: self.range_reads.on_range_read,
            Verb.SCHEMA_PUSH_REQ: self.schema_sync.on_schema_push,
            Verb.SCHEMA_PULL_REQ: self.schema_sync.on_schema_pull,
            Verb.SCHEMA_PULL_RSP: self.schema_sync.on_schema_pull_rsp,
        }
