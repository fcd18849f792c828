"""What gossip says about the cluster, turned into the ring and into ``system.peers`` rows.

Pure functions over ``EndpointState``s (no I/O): the shell calls them after each gossip event.
A peer becomes a ring member once gossip carries its HOST_ID, DC, RACK, TOKENS and a NORMAL
STATUS (cassandra-core.md §8.1 "applying states", C41 ``StorageService.onChange``); its
``system.peers`` row is what drivers read to discover hosts and build their token map.

Encodings of our application states: TOKENS is the comma-separated decimal tokens, STATUS is
``NORMAL,<first token>``, RPC_ADDRESS the client address, SCHEMA the schema version UUID.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ringflow.cluster._gossip_state import (
    ApplicationState,
    EndpointState,
    HeartBeatState,
    VersionedValue,
)
from ringflow.cluster._topology_change import Transition, transition_of
from ringflow.errors import RingflowError
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
