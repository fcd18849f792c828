"""The node's cores composed into one state (issue 21 §2), driven with no I/O: ``NodeState``
takes gossip rounds and messages and returns what the shell is to do.

Proves, with a real second ``Gossiper`` exchanging messages with the state's: a peer heard of
becomes a member (its ``system.peers`` row, NEW_NODE), its schema version goes to the hints,
its coming up to the hints and the drivers (STATUS_CHANGE UP), and schema agreement is settled
once per batch that changed liveness or versions; a peer gossiping another schema version is
asked for its schema (at most every 500 ms, again every 2 s while it differs) and named as
disagreeing until our version is its; a peer that falls silent is convicted (STATUS_CHANGE
DOWN, its downtime counted by the hints); the round is the CDC generations' round too
(writes released once a complete peer is heard, a gossiped generation prepared and loaded)
and of the background CDC jobs (run once the cluster is ready, never twice at once);
the actions a batch of gossip leaves are only the shell's (``NodeAction``); ``validate`` holds
after every step.
"""

from __future__ import annotations

import itertools
import random
import typing
import uuid

from ringflow.cdc import GenerationIdV2, generate_topology_description
from ringflow.cluster import FailureDetector, Gossiper
from ringflow.cluster._coordinator import Coordinator
from ringflow.cluster._gossip import Send
from ringflow.cluster._gossip_state import ApplicationState
from ringflow.cluster._hints import HintManager
from ringflow.cluster.service._cdc_decider import (
    BackgroundJob,
    GenerationDecider,
    Load,
    Prepare,
    ReleaseWrites,
    RunJob,
)
from ringflow.cluster.service._membership import (
    ClientEvent,
    Membership,
    WritePeers,
    local_endpoint_state,
)
from ringflow.cluster.service._node_state import (
    NodeAction,
    NodeState,
    SettleAgreement,
)
from ringflow.cluster.service._schema_versions import PullSchema, SchemaVersions
from ringflow.cluster.service._topology_state import (
    ALIVE,
    BUSY,
    STARTING_STATUS,
    STREAM_ATTEMPTS,
    STREAM_RETRY_MAX_MS,
    STREAM_RETRY_MS,
    Decommission,
    ExitNode,
    GenerationMade,
    JoinPersisted,
    MakeGeneration,
    PersistJoin,
    Phase,
    Refused,
    RemoveNode,
    Restreamed,
    RestreamEverywhere,
    SaveBootstrapState,
    StartStreaming,
    Streamed,
    Tick,
    TopologyChange,
    TopologyEvent,
)
from ringflow.ring import Host
from tests.unit.cluster._gossip_harness import ring_values

START_MS = 1_700_000_000_000
SCHEMA = uuid.UUID(int=5)
NEWER = uuid.UUID(int=6)
CLUSTER = "c"
RING_DELAY_MS = 5_000


def _host(index: int) -> Host:
    return Host(uuid.UUID(int=index), f"127.0.0.{index}:7000", "dc1", "r1")


def _gossiper(
    index: int, seed: str, schema: uuid.UUID = SCHEMA, *, joining: bool = False
) -> Gossiper:
    host = _host(index)
    values = ring_values(host, (index * 100, index * 100 + 50), schema)
    if joining:  # no ring role yet (a joiner's first STATUS, ``joining_states``)
        values[ApplicationState.STATUS] = STARTING_STATUS
    values[ApplicationState.SHARD_COUNT] = "1"  # complete for the CDC generations
    values[ApplicationState.IGNORE_MSB] = "0"
    state = local_endpoint_state(START_MS // 1000, values)
    return Gossiper(host.endpoint, state, [seed], CLUSTER, random.Random(index), FailureDetector())


def _node_state(jobs: tuple[BackgroundJob, ...] = (), *, joining: bool = False) -> NodeState:
    host = _host(1)
    hints = HintManager()
    hints.set_local_schema_version(SCHEMA)
    membership = Membership(host.endpoint, host, (100, 150), set())
    schema = SchemaVersions(host.endpoint, SCHEMA)
    coordinator = Coordinator(host, hints)
    generations = GenerationDecider(host.host_id, settle_ms=0, wait_for_peers=True)
    gossiper = _gossiper(1, host.endpoint, joining=joining)
    topology = TopologyChange(
        host.endpoint,
        joining=joining,
        ring_delay_ms=RING_DELAY_MS,
        gossip_interval_ms=1_000,
        rng=random.Random(7),
        now_ms=START_MS,
    )
    state = NodeState(gossiper, membership, hints, coordinator, schema, generations, topology, jobs)
    state.ring_changed(START_MS, START_MS * 1000)  # as the node does once built
    state.validate()
    return state


class _Pair:
    """The state's node and a second node, gossiping every second; ``up`` is False once the
    second one has gone silent (nothing from it, nothing to it)."""

    def __init__(
        self, peer_schema: uuid.UUID = SCHEMA, jobs: tuple[BackgroundJob, ...] = ()
    ) -> None:
        self.state = _node_state(jobs)
        self.peer = _gossiper(2, _host(1).endpoint, peer_schema)
        self.now_ms = START_MS
        self.up = True
        self.batches: list[list[NodeAction]] = []

    def second(self) -> None:
        self.now_ms += 1000
        now, now_us = self.now_ms, self.now_ms * 1000
        self._take(self.state.round(now, now, now_us))
        if self.up:
            self._from_peer(self.peer.tick(now))

    def _take(self, actions: list[NodeAction]) -> None:
        self.state.validate()
        self.batches.append(actions)
        for action in actions:
            if isinstance(action, Send) and self.up:
                self._from_peer(self.peer.receive(_host(1).endpoint, action.message, self.now_ms))

    def _from_peer(self, actions: typing.Sequence[object]) -> None:
        now = self.now_ms
        for action in actions:
            if isinstance(action, Send):
                received = self.state.received(
                    _host(2).endpoint, action.message, now, now, now * 1000
                )
                self._take(received)

    def all(self) -> list[NodeAction]:
        return [action for batch in self.batches for action in batch]


def _kinds() -> set[type]:
    kinds: set[type] = set()
    for member in typing.get_args(NodeAction):
        kinds.update(typing.get_args(member) or (member,))
    return kinds


def test_a_peer_heard_of_is_a_member_up_with_its_schema_known_to_the_hints() -> None:
    pair = _Pair()
    for _ in range(10):
        pair.second()
    actions = pair.all()
    assert {type(action) for action in actions} <= _kinds()
    assert _host(2).endpoint in pair.state.membership.members
    assert [a for a in actions if isinstance(a, ClientEvent)] == [
        ClientEvent("TOPOLOGY_CHANGE", "NEW_NODE", "127.0.0.2"),
        ClientEvent("STATUS_CHANGE", "UP", "127.0.0.2"),
    ]
    assert sum(len(a.rows) for a in actions if isinstance(a, WritePeers)) == 1
    assert not [a for a in actions if isinstance(a, PullSchema)]  # it gossips our version
    assert pair.state.schema_disagreement() == {}
    assert pair.state.hints.schema_agrees(_host(2).host_id)
    assert pair.state.hints.downtime_ms(_host(2).host_id, pair.now_ms) == 0
    for batch in pair.batches:  # agreement settled once, last, in a batch that changed it
        settles = [i for i, a in enumerate(batch) if isinstance(a, SettleAgreement)]
        assert settles in ([], [len(batch) - 1])
    assert any(SettleAgreement() in batch for batch in pair.batches)


def test_a_silent_peer_is_convicted_and_its_downtime_counted() -> None:
    pair = _Pair()
    for _ in range(10):
        pair.second()
    pair.batches.clear()
    pair.up = False
    for _ in range(30):
        pair.second()
    actions = pair.all()
    assert ClientEvent("STATUS_CHANGE", "DOWN", "127.0.0.2") in actions
    assert SettleAgreement() in actions
    assert pair.state.hints.downtime_ms(_host(2).host_id, pair.now_ms) > 0
    assert _host(2).endpoint in pair.state.membership.members  # down is not gone


def test_a_peer_with_another_schema_is_pulled_from_until_our_version_is_its() -> None:
    """Pulled from when first seen with another version, then every 2 s (not every 1 s
    round) while it still differs; named as disagreeing until ``schema_changed`` makes our
    version its own, after which nothing is pulled and agreement is settled."""
    pair = _Pair(peer_schema=NEWER)
    pulls: list[int] = []
    for _ in range(10):
        before = len(pair.all())
        pair.second()
        new = pair.all()[before:]
        pulls.extend(pair.now_ms for a in new if a == PullSchema(_host(2).endpoint))
    assert len(pulls) >= 3
    assert all(later - earlier >= 2000 for earlier, later in itertools.pairwise(pulls))
    assert pair.state.schema_disagreement() == {"127.0.0.2": str(NEWER)}
    assert pair.state.schema_changed(NEWER) == [SettleAgreement()]
    pair.state.validate()  # the new version is the one gossiped
    assert pair.state.hints.schema_agrees(_host(2).host_id)
    assert pair.state.schema_disagreement() == {}
    pair.batches.clear()
    for _ in range(5):
        pair.second()
    assert not [a for a in pair.all() if isinstance(a, PullSchema)]


def test_pulls_from_one_peer_are_paced_however_often_its_version_changes() -> None:
    versions = SchemaVersions("a:7000", SCHEMA)
    assert versions.peer_version("a:7000", str(NEWER), 0) is None  # never from itself
    assert versions.peer_version("b:7000", str(SCHEMA), 0) is None  # ours
    assert versions.peer_version("b:7000", str(NEWER), 1_000) == PullSchema("b:7000")
    assert versions.peer_version("b:7000", str(uuid.UUID(int=7)), 1_499) is None
    assert versions.peer_version("b:7000", str(uuid.UUID(int=7)), 1_500) == PullSchema("b:7000")
    assert versions.recheck([("b:7000", str(NEWER))], 3_499) == []
    assert versions.recheck([("b:7000", str(NEWER)), ("c:7000", str(SCHEMA))], 3_500) == [
        PullSchema("b:7000")
    ]
    versions.forget(["b:7000"])
    assert versions.pulled() == frozenset()
    versions.validate()


def test_the_round_is_the_cdc_generations_round_too() -> None:
    """A node with peers holds CDC writes until its round sees a live, complete peer, then
    releases them once; a generation the peer gossips is prepared and loaded from the round
    that hears it."""
    pair = _Pair()
    for _ in range(10):
        pair.second()
    releases = [a for a in pair.all() if isinstance(a, ReleaseWrites)]
    assert releases == [ReleaseWrites()] and pair.state.generations.learnt
    generation = GenerationIdV2(START_MS + 60_000, uuid.UUID(int=9))
    pair.peer.set_application_state(ApplicationState.CDC_GENERATION_ID, generation.to_gossip())
    pair.batches.clear()
    for _ in range(5):
        pair.second()
    learnt = [a for a in pair.all() if isinstance(a, Prepare | Load)]
    assert learnt == [Prepare(generation), Load(generation, 0)]
    assert pair.state.generations.current == generation


def test_a_background_job_runs_once_the_cluster_is_ready_never_twice_at_once() -> None:
    """A background CDC job (expiry, rewrite) is due only once every known endpoint is complete
    and alive; while it runs it is not due again; after ``done`` not before its next time; a
    stopped job never again."""
    job = BackgroundJob("expiry")
    pair = _Pair(jobs=(job,))
    pair.second()  # the state alone: ready (no peer known yet), the job runs
    assert pair.all().count(RunJob("expiry")) == 1 and job.running
    for _ in range(5):
        pair.second()
    assert pair.all().count(RunJob("expiry")) == 1  # still running
    job.done(pair.now_ms + 3_000)
    pair.batches.clear()
    for _ in range(5):
        pair.second()
    runs = [i for i, batch in enumerate(pair.batches) if RunJob("expiry") in batch]
    assert len(runs) == 1 and job.running
    job.done(pair.now_ms + 60_000)
    pair.up = False  # the peer falls silent: not ready while it is down
    for _ in range(30):
        pair.second()
    assert not pair.state.gossiper.is_alive(_host(2).endpoint)
    job.done(pair.now_ms)
    pair.batches.clear()
    for _ in range(3):
        pair.second()
    assert RunJob("expiry") not in pair.all() and not job.running
    job.stop()
    pair.up = True
    for _ in range(10):
        pair.second()
    assert RunJob("expiry") not in pair.all()
    idle = BackgroundJob("rewrite", active=False)
    assert not idle.due(True, 0)
    idle.activate()
    assert idle.due(True, 0) and not idle.due(True, 1)
    idle.validate()


def _tell(pair: _Pair, event: TopologyEvent) -> list[NodeAction]:
    actions = pair.state.topology_event(event, pair.now_ms, pair.now_ms * 1000)
    pair._take(actions)
    return actions


def _seconds(pair: _Pair, count: int) -> list[NodeAction]:
    """``count`` rounds, each followed by the topology change's (as ``ClusterNode.round``)."""
    before = len(pair.all())
    for _ in range(count):
        pair.second()
        _tell(pair, Tick())
    return pair.all()[before:]


def _status(pair: _Pair, endpoint: str) -> str:
    state = pair.peer.endpoint_state(endpoint)
    versioned = None if state is None else state.get(ApplicationState.STATUS)
    return "" if versioned is None else versioned.value.split(",")[0]


def _operated(pair: _Pair, generation: GenerationIdV2) -> None:
    """What the generation service does with an adopted generation's ``Load``: loaded here."""
    description = generate_topology_description([100, 150], lambda _e: (1, 0), random.Random(3))
    pair._take(list(pair.state.generations.on_loaded(generation, description)))


def test_a_decommission_announces_waits_for_the_peer_streams_and_leaves() -> None:
    """LEAVING gossiped (the peer learns it: the membership shows us leaving); the generation
    made once the ring delay has passed and the peer has shown the announcement; a failed
    stream run retried after its back-off, a leave's runs never given up; the generation
    adopted by the decider; once it operates past the leeway, LEFT and then the exit."""
    pair = _Pair()
    _seconds(pair, 10)
    own = _host(1).endpoint
    assert _tell(pair, Decommission())[-1:] != [Refused(BUSY, retry=True)]
    assert pair.state.topology.phase is Phase.ANNOUNCED
    assert own in pair.state.membership.transitions
    assert _tell(pair, Decommission()) == [Refused(BUSY, retry=True)]  # one change at a time
    actions = _seconds(pair, 4)
    assert MakeGeneration() not in actions  # the ring delay (5 s) has not passed
    actions = _seconds(pair, 2)
    assert actions.count(MakeGeneration()) == 1 and pair.state.topology.phase is Phase.PROPOSING
    assert _status(pair, own) == "LEAVING"  # the peer has it
    generation = GenerationIdV2(pair.now_ms + 10_000, uuid.UUID(int=11))
    made = _tell(pair, GenerationMade(generation))
    assert Prepare(generation) in made and made[-1] == StartStreaming()
    assert pair.state.generations.current == generation
    retries = [_tell(pair, Streamed(ok=False)) for _ in range(6)]
    assert retries[:4] == [[StartStreaming(STREAM_RETRY_MS)]] * 4
    assert retries[4:] == [[StartStreaming(STREAM_RETRY_MAX_MS)]] * 2  # never given up
    assert pair.state.topology.phase is Phase.STREAMING
    assert _tell(pair, Streamed(ok=True)) == []
    assert pair.state.topology.phase is Phase.WAIT_GENERATION
    _operated(pair, generation)
    actions = _seconds(pair, 10)
    assert SaveBootstrapState("left") not in actions  # not before its timestamp + leeway
    for _ in range(10):
        actions = _seconds(pair, 1)
        if pair.state.topology.phase is not Phase.WAIT_GENERATION:
            break
    assert SaveBootstrapState("left") in actions and pair.state.topology.phase is Phase.LEFT
    assert ExitNode() not in _seconds(pair, 4)  # gossip spreads LEFT for a ring delay
    assert ExitNode() in _seconds(pair, 2) and pair.state.topology.phase is Phase.DONE
    assert _status(pair, own) == "LEFT"


def test_a_removenode_is_refused_for_a_live_or_unknown_node_and_runs_for_a_dead_one() -> None:
    """Refused while the node is alive (ask again) or not a member (do not); for a dead member:
    ``removing`` gossiped, every live member restreams (again after a failed run), then
    ``removed`` (it leaves the ring), the generation without it, done once it operates."""
    pair = _Pair()
    _seconds(pair, 10)
    dead = _host(2)
    assert _tell(pair, RemoveNode(dead.host_id)) == [Refused(ALIVE, retry=True)]
    unknown = uuid.UUID(int=77)
    assert _tell(pair, RemoveNode(unknown)) == [Refused(f"{unknown} is not a ring member", False)]
    assert pair.state.topology.phase is Phase.IDLE
    pair.up = False
    _seconds(pair, 30)
    assert not pair.state.gossiper.is_alive(dead.endpoint)
    assert _tell(pair, RemoveNode(dead.host_id))[-1:] != [Refused(ALIVE, retry=True)]
    assert pair.state.topology.phase is Phase.ANNOUNCED
    actions = _seconds(pair, 6)  # a dead member is not waited for
    assert actions.count(RestreamEverywhere(dead.host_id)) == 1
    assert _tell(pair, Restreamed(ok=False)) == [RestreamEverywhere(dead.host_id, 2_000)]
    assert dead.endpoint in pair.state.membership.members
    done = _tell(pair, Restreamed(ok=True))
    assert done[-1] == MakeGeneration() and dead.endpoint not in pair.state.membership.members
    generation = GenerationIdV2(pair.now_ms + 10_000, uuid.UUID(int=12))
    assert StartStreaming() not in _tell(pair, GenerationMade(generation))
    assert pair.state.topology.phase is Phase.WAIT_GENERATION
    _operated(pair, generation)
    _seconds(pair, 20)
    assert pair.state.topology.phase is Phase.DONE and pair.state.topology.generation == generation


def test_a_joiner_announces_once_schema_and_ring_allow_and_joins_again_after_failed_runs() -> None:
    """A joiner gossips BOOT once it knows a member and agrees on the schema; after
    ``STREAM_ATTEMPTS`` failed runs it takes the announcement back (STARTING) and announces
    again only after its random back-off; a finished join persists its generation first
    (``PersistJoin``), then gossips NORMAL."""
    pair = _Pair()
    pair.state = _node_state(joining=True)
    own = _host(1).endpoint
    topology = pair.state.topology
    for _ in range(10):
        _seconds(pair, 1)
        if topology.phase is not Phase.WAIT_SCHEMA:
            break
    assert topology.phase is Phase.ANNOUNCED
    assert _seconds(pair, 4).count(MakeGeneration()) == 0  # the ring delay (5 s)
    assert _seconds(pair, 2).count(MakeGeneration()) == 1
    assert _status(pair, own) == "BOOT"  # the peer has it
    first = GenerationIdV2(pair.now_ms + 10_000, uuid.UUID(int=13))
    _tell(pair, GenerationMade(first))
    for _ in range(STREAM_ATTEMPTS - 1):
        assert _tell(pair, Streamed(ok=False)) == [StartStreaming(STREAM_RETRY_MS)]
    _tell(pair, Streamed(ok=False))
    assert topology.phase is Phase.WAIT_SCHEMA and topology.stream_attempts == 0
    _seconds(pair, 2)
    assert _status(pair, own) == STARTING_STATUS
    waited = 0
    while topology.phase is Phase.WAIT_SCHEMA:
        _seconds(pair, 1)
        waited += 1
    assert waited >= RING_DELAY_MS // 1000 - 1  # 1-3 ring delays
    _seconds(pair, 6)
    second = GenerationIdV2(pair.now_ms + 10_000, uuid.UUID(int=14))
    _tell(pair, GenerationMade(second))
    assert topology.made == [first, second] and topology.generation == second
    _tell(pair, Streamed(ok=True))
    _operated(pair, second)
    actions = _seconds(pair, 20)
    assert PersistJoin() in actions and topology.phase is Phase.WAIT_GENERATION
    assert _tell(pair, JoinPersisted())[-1] == SaveBootstrapState("done")
    assert topology.phase is Phase.DONE
    _seconds(pair, 2)
    assert _status(pair, own) == "NORMAL"
