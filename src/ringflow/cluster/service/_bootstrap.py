"""Topology changes of a running node: joining the ring (bootstrap) and leaving it (decommission).

The pure plans (the future ring, stream plans, tokens) are in
``ringflow.cluster._topology_change``; the change's state machine (when to announce, withdraw,
make the generation, stream, finish) is ``TopologyChange`` (``_topology_state``), a core of the
node state, which runs it after each gossip round and on the outcomes this shell reports.
``TopologyService`` carries out its actions (write the generation, stream, persist a finished
join, save ``bootstrap.json``, exit) on the ``ClusterNode``'s thread (cassandra-core.md §8;
scylla-cdc.md §2, §9).

Bootstrap (``discover_ring`` then ``TopologyService`` with ``joining=True``):

1. Before the node opens, ``discover_ring`` gossips with the seeds as a member without STATUS
   (nobody counts it) until the NORMAL members are known and unchanged for a few rounds; the
   node's tokens are then chosen with the balanced allocator (``choose_tokens``, RF 3) and saved
   in its record. The node starts gossiping STATUS=``STARTING`` (no ring role yet).
2. Once it has the cluster's schema (schema agreement with the live members), it gossips
   STATUS=``BOOT,<token>`` with its TOKENS: every node now treats it as a pending replica of the
   ranges it gains. It waits ``ring_delay`` and until every live member has shown (in its gossip
   digests, ``Gossiper.seen_by``) that it holds that STATUS: a coordinator that has not would
   leave the joiner out of writes made while streaming reads their sources (issue 22, topology
   seed 71). Leaving and removenode announcements wait the same way.
3. It makes the new CDC generation: the description of the future ring (current + its tokens;
   shard counts of all owners from gossip), its rows written at CL=ALL to
   ``system_distributed_everywhere.cdc_generation_descriptions_v2`` (natural + pending replicas:
   every node, itself included), then the timestamp now + 2 ring_delay + leeway. The generation
   service adopts it (``on_proposed``: gossip ``CDC_GENERATION_ID``, load); the other nodes
   learn it through gossip and publish it. A joiner neither persists it in ``system.cdc_local``
   nor publishes it before step 5 (``CdcGenerationService.joining``): killed before any peer
   heard it, it comes back without it (and makes another), as Scylla's joiner does, rather
   than announce it again once its start has passed (wide topology seed 428).
4. Streaming (``Streamer``): every keyspace but the local ones, every table (CDC logs included),
   each gained piece from one live current replica (``join_plan``), one session per source at
   once. A failed run is planned again (the sources live then) and retried; after
   ``STREAM_ATTEMPTS`` failed runs the join is given up and starts again from step 2, as a
   joiner restarted before it was done does: STARTING again (no coordinator counts it pending
   any more), a new announcement after a random back-off, a new generation, a new plan.
5. When the generation operates and the leeway has passed (clock >= its timestamp + leeway: no
   coordinator accepts a write for the previous generation any more, whose vnodes do not refine
   the new ring; ``CdcMetadata`` rule 3 still takes writes up to a leeway old into the previous
   generation) and it is loaded here, it is persisted in ``system.cdc_local`` and published,
   then STATUS=``NORMAL,<token>``; ``bootstrap.json`` in the data dir records it (a node
   restarted before that bootstraps again with its saved tokens).

Decommission (``TopologyService.decommission``: ``Decommission`` to the core; asked through the
node's request channel, ``decommission_request``, see ``ringflow node decommission``):
STATUS=``LEAVING,<token>``, wait ``ring_delay``, a new generation for the ring without this
node (made the same way), push every piece it holds to the hosts gaining it (``leave_plan``),
wait until the generation operates, STATUS=``LEFT,<token>``, wait ``ring_delay`` for gossip to
spread it, then the process exits.
One change at a time: a node announces BOOT or starts leaving only when gossip shows no other
node joining or leaving.

Removenode (``TopologyService.removenode``, asked through the request channel with the dead
node's host id, ``removenode_request``): this node gossips REMOVAL_COORDINATOR
``removing:<host id>`` (every node then treats the dead node as leaving: writes also go to the
replicas gaining its ranges), waits ``ring_delay``, has every live member (itself too) pull what
it gains from surviving replicas (STREAM_REQ ``restream``, ``restream_plan``), gossips
``removed:<host id>`` (every node drops it from the ring and ``system.peers``), then makes the
generation without its tokens. Here the generation comes last: while the dead node is a member
its CL=ALL write could not succeed, and the previous generation, finer than the smaller ring,
stays colocated in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ringflow.cdc import (
    GenerationIdV1,
    GenerationIdV2,
    generate_topology_description,
    new_generation_timestamp,
)
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster._failure_detector import FailureDetector
from ringflow.cluster._gossip import Gossiper, GossipEvent, Send
from ringflow.cluster._gossip_state import ApplicationState
from ringflow.cluster._messages import Envelope, decode_frame, encode_envelope
from ringflow.cluster._topology_change import (
    StreamTask,
    choose_tokens,
    future_ring,
    join_plan,
    leave_plan,
    restream_plan,
    sharding_of,
)
from ringflow.cluster.service._cdc_decider import (
    generation_version,
    member_views,
)
from ringflow.cluster.service._cdc_generations import (
    CdcGenerationService,
    internal_mutations,
)
from ringflow.cluster.service._cdc_tables import v1_generation_mutations, write_in_order
from ringflow.cluster.service._executor import ActionExecutor
from ringflow.cluster.service._membership import (
    gossip_transitions,
    local_endpoint_state,
    ring_members,
)
from ringflow.cluster.service._node import ClusterNode
from ringflow.cluster.service._streaming import LOCAL_KEYSPACES, Streamer, StreamStats
from ringflow.cluster.service._topology_state import (
    ALIVE,
    BUSY,
    STARTING_STATUS,
    Decommission,
    ExitNode,
    GenerationFailed,
    GenerationMade,
    JoinPersisted,
    MakeGeneration,
    PersistJoin,
    Refused,
    RemoveNode,
    Restreamed,
    RestreamEverywhere,
    SaveBootstrapState,
    StartStreaming,
    Streamed,
    TopologyEvent,
)
from ringflow.errors import RingflowError
from ringflow.ring import Host, ReplicationStrategy, TokenMetadata
from ringflow.runtime import Clock, Network, ProtocolViolation, TimerHandle

_log = logging.getLogger(__name__)

BOOTSTRAP_FILE = "bootstrap.json"
DISCOVERY_STABLE_ROUNDS = 4
DISCOVERY_TIMEOUT_S = 120.0
DISCOVERY_GOSSIP_INTERVAL_MS = 200


# --- before the node opens: learn the ring through gossip -----------------------------------------


class RingDiscovery:
    """A joining node learning the ring before it opens: it gossips as a member without STATUS
    (an empty SYN each round, which the seeds answer with every state) until the NORMAL
    members, and the tokens of the nodes still joining or leaving, are known and have not
    changed for ``DISCOVERY_STABLE_ROUNDS`` rounds with every seed among the members; the ring
    is then the ring once those changes are done (``future_ring``: a node still joining owns
    its tokens already, and the allocator would pick the same ones). After
    ``DISCOVERY_TIMEOUT_S`` without that, it fails.

    Runs on a ``Clock`` and a ``Network`` (the node process's or the simulator's, alike); its
    gossiper's actions go through an ``ActionExecutor`` as a node's do: its messages are sent,
    its events (who is up, what changed) are not needed, the ring being read from its states
    once a round."""

    def __init__(
        self,
        network: Network,
        clock: Clock,
        *,
        endpoint: str,
        seeds: Sequence[str],
        cluster_name: str,
        states: dict[ApplicationState, str],
        gossip_interval_ms: int,
        rng: random.Random,
        timeout_ms: int = int(DISCOVERY_TIMEOUT_S * 1000),
    ) -> None:
        self._network = network
        self._clock = clock
        self._endpoint = endpoint
        self._seeds = tuple(seeds)
        self._interval_ms = gossip_interval_ms
        self._origin_ms = clock.now_ms() - clock.monotonic_ms()
        state = local_endpoint_state(clock.now_ms() // 1000, states)
        self.gossiper = Gossiper(endpoint, state, self._seeds, cluster_name, rng, FailureDetector())
        self._executor = ActionExecutor()
        self._executor.register(Send, self._send)
        for event in typing.get_args(GossipEvent):
            self._executor.register(event, self._read_from_the_states)
        self._deadline_ms = self._now_ms() + timeout_ms
        self._signature: object = None
        self._stable = 0
        self._listener: object | None = None
        self._timer: TimerHandle | None = None
        self._done: Callable[[TokenMetadata | None, RingflowError | None], None] | None = None

    def start(self, done: Callable[[TokenMetadata | None, RingflowError | None], None]) -> None:
        """Begin; ``done(ring, None)`` once it is known, ``done(None, error)`` at the timeout."""
        self._done = done
        self._listener = self._network.listen(self._endpoint, self._on_message)
        self._round()

    def stop(self) -> None:
        """Stop gossiping and listening (done or not)."""
        self._done = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        close = getattr(self._listener, "close", None)
        if close is not None:
            close()
        self._listener = None

    def _now_ms(self) -> int:  # monotonic (never back, which the gossiper refuses), from wall time
        return self._origin_ms + self._clock.monotonic_ms()

    def _send(self, action: Send) -> None:
        envelope = Envelope.of_gossip(action.message, 0, self._endpoint, 0)
        with contextlib.suppress(RingflowError):  # gossip is retried next round
            self._network.send(self._endpoint, action.to, encode_envelope(envelope))

    def _read_from_the_states(self, _action: GossipEvent) -> None:
        """The ring is read from the gossiper's states once a round (``_check``)."""

    def _on_message(self, source: str, payload: bytes) -> None:
        """Gossip only, one envelope per message (``_dispatch`` rules); the rest is ignored."""
        try:
            envelope = decode_frame(payload)
        except RingflowError as error:
            _log.warning("discovery: bad message from %s: %s", source, error)
            raise ProtocolViolation(str(error)) from None
        if envelope.from_endpoint != source:
            raise ProtocolViolation(f"discovery: {source} sent as {envelope.from_endpoint!r:.80}")
        if self._done is not None and not isinstance(envelope.payload, bytes):
            self._executor.run(self.gossiper.receive(source, envelope.payload, self._now_ms()))

    def _round(self) -> None:
        self._executor.run(self.gossiper.shadow_round(self._now_ms()))  # the seeds answer all
        self._timer = self._clock.call_later(self._interval_ms, self._check)

    def _check(self) -> None:
        self._timer = None
        done = self._done
        if done is None:
            return
        states = self.gossiper.endpoint_states()
        members = ring_members(states)
        transitions = gossip_transitions(states)
        current = frozenset(
            [(e, info.tokens) for e, info in members.items()]
            + [(e, t.tokens) for e, t in transitions.items()]
        )
        seeds_known = all(seed in members for seed in self._seeds)
        settled = current == self._signature and members and seeds_known
        self._stable = self._stable + 1 if settled else 0
        self._signature = current
        if self._stable >= DISCOVERY_STABLE_ROUNDS:
            ring = TokenMetadata({info.host: info.tokens for info in members.values()})
            self.stop()
            done(future_ring(ring, transitions.values()), None)
        elif self._now_ms() >= self._deadline_ms:
            self.stop()
            seeds = list(self._seeds)
            done(None, RingflowError(f"could not learn the ring from the seeds {seeds}"))
        else:
            self._round()


async def discover_ring(discovery: RingDiscovery) -> TokenMetadata:
    """Run ``discovery`` on the running event loop: the ring, or its ``RingflowError``."""
    learnt: asyncio.Future[TokenMetadata] = asyncio.get_running_loop().create_future()

    def done(ring: TokenMetadata | None, error: RingflowError | None) -> None:
        if learnt.done():
            return
        if ring is not None:
            learnt.set_result(ring)
        else:
            learnt.set_exception(error or RingflowError("ring discovery ended without a ring"))

    discovery.start(done)
    try:
        return await learnt
    finally:
        discovery.stop()


def pick_tokens(ring: TokenMetadata, host: Host, num_tokens: int, rng: random.Random) -> list[int]:
    """The joining node's tokens: balanced for RF 3 (or the DC's size when smaller)."""
    in_dc = len(ring.datacenters().get(host.dc, ()))
    return list(choose_tokens(ring, host, num_tokens, max(1, min(3, in_dc + 1)), rng))


def bootstrap_state(data_dir: Path) -> str | None:
    """``joining`` / ``done`` from ``bootstrap.json``; None for a node that never bootstrapped."""
    try:
        document = json.loads((data_dir / BOOTSTRAP_FILE).read_text())
    except (OSError, ValueError):
        return None
    value = document.get("state") if isinstance(document, dict) else None
    return value if isinstance(value, str) else None


def save_bootstrap_state(data_dir: Path, state: str) -> None:
    path = data_dir / BOOTSTRAP_FILE
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"state": state}))
    temporary.replace(path)


# --- a running node -------------------------------------------------------------------------------


class TopologyService:
    """The shell of this node's topology change (module docstring): it carries out the
    actions of the change's core (``TopologyChange``, held by the node state) and tells the
    node state their outcomes; it answers the operator's requests and ``status.json``."""

    def __init__(
        self,
        cluster: ClusterNode,
        generations: CdcGenerationService,
        data_dir: Path,
        *,
        rng: random.Random,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.state = cluster.state.topology
        """The change's core (``_topology_state``), in the node state."""
        self.generations = generations
        self.streamer = Streamer(cluster, on_restream=self._restream_for_removal)
        self.data_dir = data_dir
        self.rng = rng
        self.on_exit = on_exit
        self._refused: list[Refused] = []
        """The refusals of the event being told (``_tell``)."""
        self.stats = StreamStats()
        self.stream_started_ms = 0
        self.stream_ms = 0

    def action_handlers(self) -> dict[type, Callable[[Any], None]]:
        """What the change's actions do here (``TopologyAction``): a retry's back-off first."""

        def later(delay_ms: int, callback: Callable[[], None]) -> None:
            if delay_ms <= 0:
                callback()
            else:
                self.cluster.clock.call_later(delay_ms, callback)

        def restream(action: RestreamEverywhere) -> None:
            later(action.delay_ms, lambda: self._restream_everywhere(action.host_id))

        def exit_node(_action: ExitNode) -> None:
            if self.on_exit is not None:
                self.on_exit()

        return {
            MakeGeneration: lambda action: later(action.delay_ms, self._propose),
            StartStreaming: lambda action: later(action.delay_ms, self._start_streaming),
            RestreamEverywhere: restream,
            PersistJoin: lambda _action: self._persist_join(),
            SaveBootstrapState: lambda action: save_bootstrap_state(self.data_dir, action.state),
            ExitNode: exit_node,
            Refused: self._refused.append,
        }

    def start(self) -> None:
        """Once the node's generation service has started: a joiner's generations wait for
        the join (nothing persisted or published until done, ``joining``); the change then
        runs in the node's rounds (``Tick``)."""
        if self.state.change == "join":
            self.generations.joining()

    def _tell(self, event: TopologyEvent) -> list[Refused]:
        """``event`` to the node state and its actions carried out; an operator's request
        turned down (``Refused``) is returned."""
        clock = self.cluster.clock
        self.cluster.executor.run(
            self.cluster.state.topology_event(event, clock.now_ms(), clock.now_us())
        )
        refused = list(self._refused)
        self._refused.clear()
        return refused

    def decommission(self) -> bool:
        """Start leaving the ring; False when a change is in progress here or elsewhere."""
        return not self._tell(Decommission())

    def removenode(self, host_id: uuid.UUID) -> str | None:
        """Start removing the dead node ``host_id`` (``removenode``): None, or why not."""
        refused = self._tell(RemoveNode(host_id))
        return refused[0].reason if refused else None

    def _persist_join(self) -> None:
        self.generations.joined()  # system.cdc_local first, as Scylla's bootstrap
        _log.info(
            "bootstrap done: %d partitions streamed in %d ms",
            self.stats.partitions,
            self.stream_ms,
        )
        self._tell(JoinPersisted())

    def _restream_everywhere(self, host_id: uuid.UUID) -> None:
        """Every live member (this one too) pulls what it gains from the removal of
        ``host_id``; then ``Restreamed``."""
        cluster = self.cluster
        endpoints = [e for e in cluster.membership.members if e != cluster.settings.endpoint]
        endpoints = [e for e in endpoints if cluster.gossiper.is_alive(e)]
        waiting = {"count": len(endpoints) + 1, "failed": 0}

        def one_done(error: BaseException | None) -> None:
            if error is not None:
                _log.warning("restreaming for removenode %s: %s", host_id, error)
                waiting["failed"] += 1
            waiting["count"] -= 1
            if waiting["count"] > 0:
                return
            if not waiting["failed"]:
                self.stream_ms = cluster.clock.now_ms() - self.stream_started_ms
            self._tell(Restreamed(ok=not waiting["failed"]))

        self.stream_started_ms = cluster.clock.now_ms()
        self._restream_for_removal(host_id, one_done)
        for endpoint in endpoints:
            self.streamer.request_restream(endpoint, host_id, one_done)

    def _restream_for_removal(
        self, host_id: uuid.UUID, done: Callable[[BaseException | None], None]
    ) -> None:
        """Pull, from surviving replicas, every range this node gains from removing
        ``host_id`` (``restream_plan``)."""
        cluster = self.cluster
        dead = cluster.placement.host_of(host_id)
        if dead is None:  # already dropped: nothing left to gain
            done(None)
            return
        current = cluster.membership.token_metadata
        future = current.without_host(dead)
        tasks: list[StreamTask] = []
        try:
            for keyspace in sorted({t.keyspace for t in cluster.store.tables()} - LOCAL_KEYSPACES):

                def strategy_of(
                    ring: TokenMetadata, keyspace: str = keyspace
                ) -> ReplicationStrategy:
                    return cluster.placement.strategy_of(keyspace, ring)

                plan = restream_plan(
                    keyspace, dead, current, future, strategy_of, cluster.placement.live
                )
                tasks += [task for task in plan if task.target == cluster.host]
        except RingflowError as error:
            done(error)
            return

        def streamed(stats: StreamStats, error: BaseException | None) -> None:
            self.stats.partitions += stats.partitions
            self.stats.bytes += stats.bytes
            done(error)

        self.streamer.run(tasks, streamed)

    # -- the generation of the changed ring ---------------------------------------------------

    def _future_sharding(self) -> dict[int, tuple[int, int]]:
        cluster = self.cluster
        sharding: dict[Host, tuple[int, int]] = {}
        hosts = {info.host.endpoint: info.host for info in cluster.membership.members.values()}
        hosts.update({e: t.host for e, t in cluster.membership.transitions.items()})
        for endpoint, host in hosts.items():
            state = cluster.gossiper.endpoint_state(endpoint)
            shards = None if state is None else state.get(ApplicationState.SHARD_COUNT)
            msb = None if state is None else state.get(ApplicationState.IGNORE_MSB)
            if shards is not None and msb is not None:
                sharding[host] = (max(1, int(shards.value)), int(msb.value))
        return sharding_of(cluster.membership.future_metadata, sharding)

    def _propose(self) -> None:
        """Generate the future ring's description, write it at CL=ALL, pick the timestamp,
        tell the node state (``GenerationMade``: the decider adopts it). A cluster where some
        node lacks ``CDC_GENERATIONS_V2`` gets a v1 generation (``_propose_v1``)."""
        cluster = self.cluster
        gossiper = cluster.gossiper
        if generation_version(member_views(gossiper.endpoint_states(), gossiper.is_alive)) == 1:
            self._propose_v1()
            return
        generation_uuid = uuid.UUID(int=self.rng.getrandbits(128), version=4)
        try:
            sharding = self._future_sharding()
            description = generate_topology_description(sharding.keys(), sharding, self.rng)
            mutations = internal_mutations(
                cluster.store, generation_uuid, description, cluster.clock.now_us()
            )
        except RingflowError:
            _log.exception("building the CDC generation of the changed ring failed")
            self._tell(GenerationFailed())
            return

        def written(error: BaseException | None) -> None:
            if error is not None:
                _log.warning("writing CDC generation %s failed: %s", generation_uuid, error)
                self._tell(GenerationFailed())
                return
            now_ms = cluster.clock.now_ms()
            timestamp = new_generation_timestamp(now_ms, self.state.ring_delay_ms)
            self._tell(GenerationMade(GenerationIdV2(timestamp, generation_uuid)))

        write_in_order(cluster, mutations, ConsistencyLevel.ALL, written)

    def _propose_v1(self) -> None:
        """A v1 generation: its timestamp is its key, chosen first; the one-row description is
        written at QUORUM in ``system_distributed`` (seed 000 "V1 IDs", as the generation
        service's ``_propose_v1``)."""
        cluster = self.cluster
        now_us = cluster.clock.now_us()
        timestamp = new_generation_timestamp(now_us // 1000, self.state.ring_delay_ms)
        generation = GenerationIdV1(timestamp)
        try:
            sharding = self._future_sharding()
            description = generate_topology_description(sharding.keys(), sharding, self.rng)
            mutations = v1_generation_mutations(cluster.store, generation, description, now_us)
        except RingflowError:
            _log.exception("building the v1 CDC generation of the changed ring failed")
            self._tell(GenerationFailed())
            return

        def written(error: BaseException | None) -> None:
            if error is not None:
                _log.warning("writing v1 CDC generation %s failed: %s", generation, error)
                self._tell(GenerationFailed())
            else:
                self._tell(GenerationMade(generation))

        write_in_order(cluster, mutations, ConsistencyLevel.QUORUM, written)

    # -- streaming ------------------------------------------------------------------------------

    def plan(self) -> list[StreamTask]:
        cluster = self.cluster
        keyspaces = sorted({t.keyspace for t in cluster.store.tables()} - LOCAL_KEYSPACES)
        current, future = cluster.membership.token_metadata, cluster.membership.future_metadata
        tasks: list[StreamTask] = []
        for keyspace in keyspaces:

            def strategy_of(ring: TokenMetadata, keyspace: str = keyspace) -> ReplicationStrategy:
                return cluster.placement.strategy_of(keyspace, ring)

            if self.state.change == "join":
                tasks += join_plan(
                    keyspace, cluster.host, current, future, strategy_of, cluster.placement.live
                )
            else:
                tasks += leave_plan(keyspace, cluster.host, current, future, strategy_of)
        return tasks

    def _start_streaming(self) -> None:
        self.stream_started_ms = self.cluster.clock.now_ms()
        try:
            tasks = self.plan()
        except RingflowError as error:
            self._streamed(StreamStats(), error)
            return
        _log.info("streaming %d ranges for the %s", len(tasks), self.state.change)
        self.streamer.run(tasks, self._streamed)

    def _streamed(self, stats: StreamStats, error: BaseException | None) -> None:
        self.stats.partitions += stats.partitions
        self.stats.pages += stats.pages
        self.stats.bytes += stats.bytes
        if error is None:
            self.stream_ms = self.cluster.clock.now_ms() - self.stream_started_ms
        else:
            _log.warning("streaming failed: %s", error)
        self._tell(Streamed(ok=error is None))

    def decommission_request(self, _request: Mapping[str, object]) -> dict[str, object]:
        """The operator's ``decommission`` (over the node's request channel): accepted, or to
        be asked again while another topology change runs."""
        if not self.decommission():
            return {"accepted": False, "refused": BUSY, "retry": True}
        save_bootstrap_state(self.data_dir, "leaving")
        return {"accepted": True}

    def removenode_request(self, request: Mapping[str, object]) -> dict[str, object]:
        """The operator's ``removenode`` of ``request["host_id"]``: accepted, refused (not a
        member, not a host id), or to be asked again (the node is not convicted dead yet, a
        killed node takes a few seconds; another change runs)."""
        text = str(request.get("host_id", ""))
        try:
            refused = self.removenode(uuid.UUID(text))
        except ValueError:
            refused = f"not a host id: {text!r}"
        if refused is None:
            return {"accepted": True}
        retry = refused in (ALIVE, BUSY)
        if not retry:
            _log.warning("removenode refused: %s", refused)
        return {"accepted": False, "refused": refused, "retry": retry}

    def status(self) -> dict[str, object]:
        """For ``status.json`` (what streamed so far, the sessions in progress included)."""
        moving = self.streamer.progress()
        state = self.state
        return {
            "change": state.change,
            "removing": None if state.removing is None else str(state.removing),
            "phase": state.phase.value,
            "generation": None if state.generation is None else state.generation.to_gossip(),
            "streamed_partitions": self.stats.partitions + moving.partitions,
            "streamed_bytes": self.stats.bytes + moving.bytes,
            "stream_ms": self.stream_ms,
            "refused": state.refused,
        }


# --- process hooks --------------------------------------------------------------------------------


def joining_states(data_dir: Path) -> dict[ApplicationState, str]:
    """The first STATUS of a node that has not finished bootstrapping (no ring role yet)."""
    if bootstrap_state(data_dir) == "joining":
        return {ApplicationState.STATUS: STARTING_STATUS}
    return {}
