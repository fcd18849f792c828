"""The node's membership as a pure core (issue 21 §2): ``Membership.refresh`` turns gossip
states into the ring and returns what the shell does about it, with no I/O.

Proves: complete NORMAL peers become members and the ring, each new or changed one once
(its ``system.peers`` row, what the hints learn, a NEW_NODE event for a new one), nothing
again for the same states; a LEAVING member stays in the ring and leaves the future ring; a
member that announced LEFT, or that a ``removenode`` removed, leaves the ring, its row is
deleted, drivers are told REMOVED_NODE and it is no longer a saved peer; a peer with another
AUTH_MODE is kept out and reported once; ``validate`` holds after each refresh.
"""

from __future__ import annotations

import uuid

from ringflow.cluster._gossip_state import (
    ApplicationState,
    EndpointState,
    HeartBeatState,
    VersionedValue,
)
from ringflow.cluster._topology_change import REMOVED, REMOVING, encode_removals
from ringflow.cluster.service._membership import (
    ClientEvent,
    Membership,
    MembershipAction,
    PeerRefused,
    PeerSeen,
    WritePeers,
)
from ringflow.ring import Host
from tests.unit.cluster._gossip_harness import ring_values

OWN = "127.0.0.1:7000"
SCHEMA = uuid.UUID(int=77)
NOW_US = 1_700_000_000_000_000


def _host(index: int) -> Host:
    return Host(uuid.UUID(int=index), f"127.0.0.{index}:7000", "dc1", "r1")


def _tokens(index: int) -> tuple[int, ...]:
    return (index * 1000, index * 1000 + 500)


def _state(index: int, status: str = "NORMAL", **extra: str) -> EndpointState:
    values = ring_values(_host(index), _tokens(index), SCHEMA, status)
    values.update({ApplicationState[key]: value for key, value in extra.items()})
    versioned = {key: VersionedValue(value, 1) for key, value in values.items()}
    return EndpointState(HeartBeatState(1, 1), versioned)


def _membership(saved: set[str] | None = None) -> Membership:
    return Membership(OWN, _host(1), _tokens(1), set() if saved is None else saved)


def _refresh(
    membership: Membership, states: dict[str, EndpointState], alive: set[str] | None = None
) -> list[MembershipAction]:
    live = set(states) if alive is None else alive
    actions = membership.refresh(states, live.__contains__, NOW_US)
    membership.validate()
    return actions


def _states(*indexes: int) -> dict[str, EndpointState]:
    return {_host(i).endpoint: _state(i) for i in indexes}


def _peer_rows(actions: list[MembershipAction]) -> list[int]:
    return [len(a.rows) for a in actions if isinstance(a, WritePeers)]


def test_complete_normal_peers_become_the_ring_once() -> None:
    membership = _membership()
    actions = _refresh(membership, _states(1, 2, 3), alive={OWN, _host(2).endpoint})
    assert set(membership.members) == {_host(i).endpoint for i in (1, 2, 3)}
    assert set(membership.token_metadata.hosts) == {_host(i) for i in (1, 2, 3)}
    assert membership.token_metadata.tokens_of(_host(3)) == _tokens(3)
    assert [a for a in actions if isinstance(a, PeerSeen)] == [
        PeerSeen(_host(2).host_id, SCHEMA, True),
        PeerSeen(_host(3).host_id, SCHEMA, False),  # not alive: the hints wait for it
    ]
    assert _peer_rows(actions) == [2]  # the peers' rows, not our own
    assert [a for a in actions if isinstance(a, ClientEvent)] == [
        ClientEvent("TOPOLOGY_CHANGE", "NEW_NODE", "127.0.0.2"),
        ClientEvent("TOPOLOGY_CHANGE", "NEW_NODE", "127.0.0.3"),
    ]
    assert _refresh(membership, _states(1, 2, 3)) == []  # nothing changed: nothing to do


def test_a_changed_member_is_rewritten_and_told_to_the_hints_but_is_not_new() -> None:
    membership = _membership()
    _refresh(membership, _states(1, 2))
    other = uuid.UUID(int=78)
    states = {**_states(1), _host(2).endpoint: _state(2, SCHEMA=str(other))}
    actions = _refresh(membership, states)
    assert actions[0] == PeerSeen(_host(2).host_id, other, True)
    assert _peer_rows(actions) == [1]
    assert not any(isinstance(a, ClientEvent) for a in actions)


def test_a_leaving_member_stays_in_the_ring_and_leaves_the_future_ring() -> None:
    membership = _membership()
    _refresh(membership, _states(1, 2, 3))
    states = {**_states(1, 2), _host(3).endpoint: _state(3, "LEAVING")}
    _refresh(membership, states)
    assert _host(3) in membership.token_metadata
    assert set(membership.transitions) == {_host(3).endpoint}
    assert _host(3) not in membership.future_metadata
    assert _refresh(membership, _states(1, 2, 3)) == []  # back to NORMAL: the same member
    assert membership.transitions == {}
    assert membership.future_metadata is membership.token_metadata


def test_a_member_that_left_is_forgotten_and_reported() -> None:
    endpoint = _host(3).endpoint
    membership = _membership(saved={endpoint})
    _refresh(membership, _states(1, 2, 3))
    states = {**_states(1, 2), endpoint: _state(3, "LEFT")}
    actions = _refresh(membership, states)
    assert endpoint not in membership.members and _host(3) not in membership.token_metadata
    assert _peer_rows(actions) == [1]  # its row deleted
    assert ClientEvent("TOPOLOGY_CHANGE", "REMOVED_NODE", "127.0.0.3") in actions
    assert membership.saved_peers == set()


def test_a_member_that_only_disappears_from_gossip_is_not_reported_as_left() -> None:
    endpoint = _host(3).endpoint
    membership = _membership(saved={endpoint})
    _refresh(membership, _states(1, 2, 3))
    actions = _refresh(membership, _states(1, 2))  # no LEFT, no removal: not forgotten
    assert endpoint not in membership.members
    assert actions == [] and membership.saved_peers == {endpoint}


def test_a_removed_node_is_leaving_while_removing_then_gone() -> None:
    membership = _membership(saved={_host(3).endpoint})
    _refresh(membership, _states(1, 2, 3))
    removing = encode_removals({_host(3).host_id: REMOVING})
    states = {**_states(2, 3), OWN: _state(1, REMOVAL_COORDINATOR=removing)}
    _refresh(membership, states)
    assert membership.removals == {_host(3).host_id: REMOVING}
    assert set(membership.transitions) == {_host(3).endpoint}
    assert _host(3) in membership.token_metadata and _host(3) not in membership.future_metadata
    removed = encode_removals({_host(3).host_id: REMOVED})
    states = {**_states(2, 3), OWN: _state(1, REMOVAL_COORDINATOR=removed)}
    actions = _refresh(membership, states)
    assert _host(3) not in membership.token_metadata
    assert ClientEvent("TOPOLOGY_CHANGE", "REMOVED_NODE", "127.0.0.3") in actions
    assert membership.saved_peers == set()


def test_a_peer_with_another_auth_mode_is_kept_out_and_reported_once() -> None:
    membership = _membership()
    secured, open_mode = "PasswordAuthenticator/CassandraAuthorizer", "AllowAll/AllowAll"
    states = {
        OWN: _state(1, AUTH_MODE=secured),
        _host(2).endpoint: _state(2, AUTH_MODE=open_mode),
        _host(3).endpoint: _state(3),  # an older node gossiping no mode: not refused
    }
    actions = _refresh(membership, states)
    assert actions[0] == PeerRefused(_host(2).endpoint, open_mode, secured)
    assert set(membership.members) == {OWN, _host(3).endpoint}
    assert membership.auth_refused == {_host(2).endpoint: open_mode}
    assert not any(isinstance(a, PeerRefused) for a in _refresh(membership, states))
