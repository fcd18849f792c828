"""The node's cores composed into one state (issue 21 §2), driven with no I/O: ``NodeState``
takes gossip rounds and messages and returns what the shell is to do.

Proves, with a real second ``Gossiper`` exchanging messages with the state's: a peer heard of
becomes a member (its ``system.peers`` row, NEW_NODE), its schema version goes to the schema
sync and to the hints, its coming up to the hints and the drivers (STATUS_CHANGE UP), and
schema agreement is settled once per batch that changed liveness or versions; a peer that
falls silent is convicted (STATUS_CHANGE DOWN, its downtime counted by the hints); the
actions a batch of gossip leaves are only the shell's (``NodeAction``); ``validate`` holds
after every step.
"""

from __future__ import annotations

import random
import typing
import uuid

from ringflow.cluster import FailureDetector, Gossiper
from ringflow.cluster._coordinator import Coordinator
from ringflow.cluster._gossip import Send
from ringflow.cluster._hints import HintManager
from ringflow.cluster.service._membership import (
    ClientEvent,
    Membership,
    WritePeers,
    local_endpoint_state,
)
from ringflow.cluster.service._node_state import (
    NodeAction,
    NodeState,
    PeerSchema,
    SettleAgreement,
)
from ringflow.ring import Host
from tests.unit.cluster._gossip_harness import ring_values

START_MS = 1_700_000_000_000
SCHEMA = uuid.UUID(int=5)
CLUSTER = "c"


def _host(index: int) -> Host:
    return Host(uuid.UUID(int=index), f"127.0.0.{index}:7000", "dc1", "r1")


def _gossiper(index: int, seed: str) -> Gossiper:
    host = _host(index)
    values = ring_values(host, (index * 100, index * 100 + 50), SCHEMA)
    state = local_endpoint_state(START_MS // 1000, values)
    return Gossiper(host.endpoint, state, [seed], CLUSTER, random.Random(index), FailureDetector())


def _node_state() -> NodeState:
    host = _host(1)
    hints = HintManager()
    hints.set_local_schema_version(SCHEMA)
    membership = Membership(host.endpoint, host, (100, 150), set())
    state = NodeState(_gossiper(1, host.endpoint), membership, hints, Coordinator(host, hints))
    state.ring_changed(START_MS, START_MS * 1000)  # as the node does once built
    state.validate()
    return state


class _Pair:
    """The state's node and a second node, gossiping every second; ``up`` is False once the
    second one has gone silent (nothing from it, nothing to it)."""

    def __init__(self) -> None:
        self.state = _node_state()
        self.peer = _gossiper(2, _host(1).endpoint)
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
    assert PeerSchema(_host(2).endpoint, str(SCHEMA)) in actions
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
