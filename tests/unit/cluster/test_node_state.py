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

from ringflow.cdc import GenerationIdV2
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
from ringflow.ring import Host
from tests.unit.cluster._gossip_harness import ring_values

START_MS = 1_700_000_000_000
SCHEMA = uuid.UUID(int=5)
NEWER = uuid.UUID(int=6)
CLUSTER = "c"


def _host(index: int) -> Host:
    return Host(uuid.UUID(int=index), f"127.0.0.{index}:7000", "dc1", "r1")


def _gossiper(index: int, seed: str, schema: uuid.UUID = SCHEMA) -> Gossiper:
    host = _host(index)
    values = ring_values(host, (index * 100, index * 100 + 50), schema)
    values[ApplicationState.SHARD_COUNT] = "1"  # complete for the CDC generations
    values[ApplicationState.IGNORE_MSB] = "0"
    state = local_endpoint_state(START_MS // 1000, values)
    return Gossiper(host.endpoint, state, [seed], CLUSTER, random.Random(index), FailureDetector())


def _node_state(jobs: tuple[BackgroundJob, ...] = ()) -> NodeState:
    host = _host(1)
    hints = HintManager()
    hints.set_local_schema_version(SCHEMA)
    membership = Membership(host.endpoint, host, (100, 150), set())
    schema = SchemaVersions(host.endpoint, SCHEMA)
    coordinator = Coordinator(host, hints)
    generations = GenerationDecider(host.host_id, settle_ms=0, wait_for_peers=True)
    gossiper = _gossiper(1, host.endpoint)
    state = NodeState(gossiper, membership, hints, coordinator, schema, generations, jobs)
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
