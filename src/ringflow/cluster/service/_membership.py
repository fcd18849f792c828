"""What gossip says about the cluster, turned into the ring and into ``system.peers`` rows.

Pure functions over ``EndpointState``s (no I/O): the shell calls them after each gossip event.
A peer becomes a ring member once gossip carries its HOST_ID, DC, RACK, TOKENS and a NORMAL
STATUS (cassandra-core.md §8.1 "applying states", C41 ``StorageService.onChange``); its
``system.peers`` row is what drivers read to discover hosts and build their token map.

Encodings of our application states: TOKENS is the comma-separated decimal tokens, STATUS is
``NORMAL,<first token>``, RPC_ADDRESS the client address, SCHEMA the schema version UUID.

``Membership`` is the node's view of the ring as gossip shows it (members, the ring, nodes
being removed, joining and leaving nodes, the ring after them), a pure core: ``refresh`` after
gossip changed states updates it and returns what the shell is to do (``system.peers`` rows,
the drivers' events, what the hints learn of a peer, peers refused), carried out by the node's
one ``ActionExecutor``.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ringflow.cluster._gossip_state import (
    ApplicationState,
    EndpointState,
    HeartBeatState,
    VersionedValue,
)
from ringflow.cluster._topology_change import (
    LEFT_STATUS,
    REMOVED,
    REMOVING,
    Change,
    Transition,
    decode_removals,
    future_ring,
    status_word,
    transition_of,
)
from ringflow.errors import RingflowError, invariant
from ringflow.ring import MAX_TOKENS_PER_HOST, Host, TokenMetadata, check_token
from ringflow.runtime import format_endpoint
from ringflow.schema import Mutation, NodeRow, peer_removal, peer_row
from ringflow.storage import Store

NORMAL_STATUS = "NORMAL"
_MIN_TOKEN = -(2**63)
RING_STATUSES = (NORMAL_STATUS, "LEAVING")
"""A LEAVING node stays a ring member (a natural replica) until it announces LEFT."""


TRANSITION_STATES = (
    ApplicationState.STATUS,
    ApplicationState.HOST_ID,
    ApplicationState.DC,
    ApplicationState.RACK,
    ApplicationState.TOKENS,
)
"""The states a joining or leaving endpoint is read from (``_topology_change.transition_of``)."""


def gossip_transitions(states: Mapping[str, EndpointState]) -> dict[str, Transition]:
    """Every endpoint gossip shows joining (BOOT) or leaving (LEAVING), by endpoint."""
    transitions = {}
    for endpoint, state in states.items():
        values = [state.get(key) for key in TRANSITION_STATES]
        found = transition_of(endpoint, *(v.value if v else None for v in values))
        if found is not None:
            transitions[endpoint] = found
    return transitions


def encode_tokens(tokens: Iterable[int]) -> str:
    return ",".join(str(token) for token in sorted(tokens))


def decode_tokens(value: str) -> tuple[int, ...]:
    return tuple(int(part) for part in value.split(",") if part)


def local_endpoint_state(
    generation_s: int, values: Mapping[ApplicationState, str]
) -> EndpointState:
    """Our own first state: each value at its own version, the heartbeat after them."""
    states = {
        state: VersionedValue(value, version)
        for version, (state, value) in enumerate(sorted(values.items()), start=1)
    }
    return EndpointState(HeartBeatState(generation_s, len(states)), states)


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """One endpoint's complete, NORMAL gossip state."""

    host: Host
    tokens: tuple[int, ...]
    rpc_address: str
    schema_version: uuid.UUID | None
    cdc_generation: str | None


def _value(state: EndpointState, key: ApplicationState) -> str | None:
    versioned = state.get(key)
    return None if versioned is None else versioned.value


def peer_info(endpoint: str, state: EndpointState) -> PeerInfo | None:
    """The ring member ``state`` describes, or None while it is incomplete or not NORMAL, or
    when a value does not parse (gossip comes from peers: a bad value is theirs, issue 16)."""
    status = _value(state, ApplicationState.STATUS)
    host_id = _value(state, ApplicationState.HOST_ID)
    dc = _value(state, ApplicationState.DC)
    rack = _value(state, ApplicationState.RACK)
    tokens = _value(state, ApplicationState.TOKENS)
    if status is None or not status.startswith(RING_STATUSES):
        return None
    if host_id is None or dc is None or rack is None or not tokens:
        return None
    schema = _value(state, ApplicationState.SCHEMA)
    rpc_address = _value(state, ApplicationState.RPC_ADDRESS) or endpoint.rsplit(":", 1)[0]
    try:
        parsed = tuple(check_token(token) for token in decode_tokens(tokens))
        if not 0 < len(parsed) == len(set(parsed)) <= MAX_TOKENS_PER_HOST:
            return None
        return PeerInfo(
            Host(uuid.UUID(host_id), endpoint, dc, rack),
            parsed,
            rpc_address,
            None if schema is None else uuid.UUID(schema),
            _value(state, ApplicationState.CDC_GENERATION_ID),
        )
    except (ValueError, RingflowError):
        return None


def ring_members(
    states: Mapping[str, EndpointState], prefer: Iterable[str] = ()
) -> dict[str, PeerInfo]:
    """Every complete NORMAL endpoint, by endpoint. One whose tokens or host id another one
    already holds is left out: the endpoints of ``prefer`` (the members so far) are taken
    first, then the others in endpoint order, so a newcomer cannot take over a member's
    tokens or identity (a ``TokenMetadata`` with a token twice cannot be built at all)."""
    preferred = [endpoint for endpoint in dict.fromkeys(prefer) if endpoint in states]
    others = sorted(endpoint for endpoint in states if endpoint not in set(preferred))
    members: dict[str, PeerInfo] = {}
    tokens_taken: set[int] = set()
    host_ids_taken: set[uuid.UUID] = set()
    for endpoint in (*preferred, *others):
        info = peer_info(endpoint, states[endpoint])
        if info is None:
            continue
        if info.host.host_id in host_ids_taken or not tokens_taken.isdisjoint(info.tokens):
            continue
        tokens_taken.update(info.tokens)
        host_ids_taken.add(info.host.host_id)
        members[endpoint] = info
    return members


def auth_mismatches(states: Mapping[str, EndpointState], own_mode: str | None) -> dict[str, str]:
    """The endpoints gossiping an AUTH_MODE other than ``own_mode`` (a node gossiping none, an
    older one, is not refused), with the mode they gossip."""
    if own_mode is None:
        return {}
    found = {}
    for endpoint, state in states.items():
        mode = _value(state, ApplicationState.AUTH_MODE)
        if mode is not None and mode != own_mode:
            found[endpoint] = mode
    return found


def saved_peer_endpoints(store: Store, port: int) -> set[str]:
    """The internode endpoints of the ``system.peers`` rows (the members an earlier run of this
    node knew): a restarted node counts them as members before gossip has told it anything, as
    Cassandra's ``StorageService`` loads its ring from ``system.peers`` at start."""
    endpoints: set[str] = set()
    state: bytes | None = None
    while True:
        page = store.scan(
            ("system", "peers"), _MIN_TOKEN, _MIN_TOKEN, page_size=256, paging_state=state, now_s=0
        )
        for row in page.rows:
            try:
                address = ipaddress.ip_address(row.partition_key[0])
            except (ValueError, IndexError):
                continue
            endpoints.add(format_endpoint(str(address), port))
        state = page.paging_state
        if state is None:
            return endpoints


def token_metadata_of(members: Iterable[PeerInfo]) -> TokenMetadata:
    return TokenMetadata({info.host: info.tokens for info in members})


def peer_mutation(info: PeerInfo, timestamp_us: int) -> Mutation:
    """The ``system.peers`` row drivers read for ``info``."""
    row = NodeRow(
        host_id=info.host.host_id,
        broadcast_address=info.rpc_address,
        rpc_address=info.rpc_address,
        data_center=info.host.dc,
        rack=info.host.rack,
        tokens=info.tokens,
        schema_version=info.schema_version or uuid.UUID(int=0),
    )
    return peer_row(row, timestamp_us=timestamp_us)


def peer_removal_mutation(info: PeerInfo, timestamp_us: int) -> Mutation:
    """Delete ``info``'s ``system.peers`` row (the node left the ring)."""
    return peer_removal(info.rpc_address, timestamp_us=timestamp_us)


# --- the node's membership: a pure core with its actions ----------------------------------------


@dataclass(frozen=True, slots=True)
class WritePeers:
    """Write these ``system.peers`` rows (members new or changed, or gone: deletions)."""

    rows: tuple[Mutation, ...]


@dataclass(frozen=True, slots=True)
class ClientEvent:
    """A native protocol event for the drivers (``TOPOLOGY_CHANGE`` NEW_NODE / REMOVED_NODE)."""

    event_type: str
    change: str
    address: str


@dataclass(frozen=True, slots=True)
class PeerSeen:
    """A member new or changed: the hints learn its schema version (when it gossips one) and,
    when ``alive``, that it is up."""

    host_id: uuid.UUID
    schema_version: uuid.UUID | None
    alive: bool


@dataclass(frozen=True, slots=True)
class PeerRefused:
    """A peer newly kept out of the ring: it gossips another AUTH_MODE than ``own_mode``."""

    endpoint: str
    mode: str
    own_mode: str | None


MembershipAction = WritePeers | ClientEvent | PeerSeen | PeerRefused


class Membership:
    """The ring as this node's gossip shows it (module docstring). Its fields are replaced
    whole when they change (never mutated in place), so a reader may keep one as a key."""

    def __init__(
        self, endpoint: str, host: Host, tokens: Sequence[int], saved_peers: set[str]
    ) -> None:
        self.endpoint = endpoint
        """This node's internode endpoint."""
        self.members: dict[str, PeerInfo] = {}
        """The ring members (complete, NORMAL or LEAVING, not removed), by endpoint."""
        self.auth_refused: dict[str, str] = {}
        """Peers kept out of the ring: their AUTH_MODE differs from ours (endpoint: mode)."""
        self.saved_peers = saved_peers
        """Members an earlier run knew (``system.peers``), until they are seen leaving."""
        self.token_metadata = TokenMetadata({host: tuple(tokens)})
        self.removals: dict[uuid.UUID, str] = {}
        """Host ids being removed (``removenode``) or removed, as gossiped by anyone."""
        self.transitions: dict[str, Transition] = {}
        """Endpoints joining (STATUS=BOOT) or leaving (LEAVING) the ring, by endpoint."""
        self.future_metadata = self.token_metadata
        """The ring once every transition completed (``_topology_change.future_ring``)."""

    def refresh(
        self,
        states: Mapping[str, EndpointState],
        is_alive: Callable[[str], bool],
        now_us: int,
    ) -> list[MembershipAction]:
        """The membership after gossip changed ``states`` (every endpoint's, ours included),
        and what to do about it, in order: peers newly refused; for members that announced
        LEFT or were removed, their rows deleted and REMOVED_NODE events; the hints' news of
        the members new or changed, their rows, NEW_NODE events."""
        actions: list[MembershipAction] = []
        self.removals = _removals(states)
        refused = self._refusals(states, actions)
        own = self.endpoint
        members = {
            endpoint: info
            for endpoint, info in ring_members(
                {e: s for e, s in states.items() if e not in refused}, (own, *self.members)
            ).items()
            if self.removals.get(info.host.host_id) != REMOVED
        }
        changed = [
            info
            for endpoint, info in members.items()
            if endpoint != own and self.members.get(endpoint) != info
        ]
        new_nodes = [info for info in changed if info.host.endpoint not in self.members]
        gone = [info for endpoint, info in self.members.items() if endpoint not in members]
        self.members = members
        self.token_metadata = token_metadata_of(members.values())
        self._refresh_transitions(states)
        left = self._left(states, gone)
        if left:
            actions.append(WritePeers(tuple(peer_removal_mutation(i, now_us) for i in left)))
            actions.extend(
                ClientEvent("TOPOLOGY_CHANGE", "REMOVED_NODE", i.rpc_address) for i in left
            )
        actions.extend(
            PeerSeen(info.host.host_id, info.schema_version, is_alive(info.host.endpoint))
            for info in changed
        )
        if changed:
            actions.append(WritePeers(tuple(peer_mutation(info, now_us) for info in changed)))
        actions.extend(ClientEvent("TOPOLOGY_CHANGE", "NEW_NODE", i.rpc_address) for i in new_nodes)
        return actions

    def validate(self) -> None:
        """The ring's hosts are the members', none of them refused or removed, and the
        future ring is the ring when nothing is in transition."""
        invariant(
            len(self.token_metadata.hosts) == len(self.members)
            and all(i.host in self.token_metadata for i in self.members.values()),
            lambda: f"the ring {self.token_metadata.hosts} is not the members' {self.members}",
        )
        invariant(
            not any(e in self.auth_refused for e in self.members),
            lambda: (
                f"refused peers are members: {sorted(set(self.auth_refused) & set(self.members))}"
            ),
        )
        invariant(
            not any(self.removals.get(i.host.host_id) == REMOVED for i in self.members.values()),
            "a removed node is a member",
        )
        invariant(
            bool(self.transitions) or self.future_metadata is self.token_metadata,
            "a future ring differs from the ring with no transition",
        )

    def _refusals(
        self, states: Mapping[str, EndpointState], actions: list[MembershipAction]
    ) -> dict[str, str]:
        """Peers whose authentication differs from ours: kept out of the ring (nodes of one
        cluster must agree: a login would depend on the coordinator); a newly refused one is
        a ``PeerRefused``."""
        own = states.get(self.endpoint)
        own_mode = None if own is None else _value(own, ApplicationState.AUTH_MODE)
        refused = auth_mismatches(states, own_mode)
        actions.extend(
            PeerRefused(endpoint, mode, own_mode)
            for endpoint, mode in refused.items()
            if endpoint not in self.auth_refused
        )
        self.auth_refused = dict(refused)
        return refused

    def _refresh_transitions(self, states: Mapping[str, EndpointState]) -> None:
        """Joining and leaving endpoints, and the ring after them (``_topology_change``)."""
        transitions = {}
        for endpoint, info in self.members.items():  # dead nodes being removed: leaving
            if self.removals.get(info.host.host_id) == REMOVING:
                transitions[endpoint] = Transition(info.host, info.tokens, Change.LEAVE)
        transitions.update(gossip_transitions(states))
        self.transitions = transitions
        self.future_metadata = (
            future_ring(self.token_metadata, transitions.values())
            if transitions
            else self.token_metadata
        )

    def _left(
        self, states: Mapping[str, EndpointState], gone: Sequence[PeerInfo]
    ) -> list[PeerInfo]:
        """The members gone from the ring that announced LEFT (decommissioned, removed): no
        longer saved peers. A member that only went down stays a member."""
        left = []
        for info in gone:
            state = states.get(info.host.endpoint)
            status = None if state is None else _value(state, ApplicationState.STATUS)
            removed = self.removals.get(info.host.host_id) == REMOVED
            if removed or (status is not None and status_word(status) == LEFT_STATUS):
                left.append(info)
        self.saved_peers.difference_update(info.host.endpoint for info in left)
        return left


def _removals(states: Mapping[str, EndpointState]) -> dict[uuid.UUID, str]:
    """Dead nodes being removed (``removenode``), from every REMOVAL_COORDINATOR."""
    removals: dict[uuid.UUID, str] = {}
    for state in states.values():
        value = _value(state, ApplicationState.REMOVAL_COORDINATOR)
        for host_id, word in decode_removals(value).items():
            if removals.get(host_id) != REMOVED:
                removals[host_id] = word
    return removals
