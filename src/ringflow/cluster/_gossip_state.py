"""Gossip values and messages: heartbeats, versioned application states, digests, SYN/ACK/ACK2.

Owns ``shared/reference/cassandra-core.md`` §8.1 (C41 ``gms/HeartBeatState``, ``VersionedValue``,
``EndpointState``, ``GossipDigest*``, ``ApplicationState``) and seed 003 "Gossip". All values are
immutable: the gossiper builds a new ``EndpointState`` whenever something changes, so a state
handed to a message can never change under it.

Rules:

* ``(generation, version)`` is the gossip clock of an endpoint. The generation is the node's
  start time in seconds since the epoch and only grows across restarts; the version comes from
  one counter per process shared by the heartbeat and every application state.
* ``ApplicationState`` values are the ordinals that travel on the wire, so they never change.
  0-19 are Cassandra 4.1's ordinals, deprecated ones included so the numbering stays Cassandra's;
  20-29 are left free as Cassandra's ``X1..X10`` padding is; ringflow's own states start at 30.
  Iterating states in ordinal order is the canonical order of notifications.
* ``EndpointState.max_version`` is ``max(heartbeat version, every application state version)``
  (Cassandra ``getMaxEndpointStateVersion``); digests carry it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

from ringflow.errors import InvalidRequest

_INT64_MAX: Final = 2**63 - 1


def _check_count(owner: str, name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _INT64_MAX:
        raise InvalidRequest(f"{owner} {name} must be an int in [0, 2^63), got {value!r}")


def _check_text(owner: str, name: str, value: object, *, allow_empty: bool = True) -> None:
    if not isinstance(value, str) or (not allow_empty and not value):
        raise InvalidRequest(f"{owner} {name} must be a {'' if allow_empty else 'non-empty '}str")


def _check_digests(owner: str, digests: object) -> None:
    if not isinstance(digests, tuple) or not all(isinstance(d, GossipDigest) for d in digests):
        raise InvalidRequest(
            f"{owner} digests must be a tuple of GossipDigest, got {digests!r:.80}"
        )


def _check_states(owner: str, states: object) -> None:
    if not isinstance(states, Mapping) or not all(
        isinstance(endpoint, str) and endpoint and isinstance(state, EndpointState)
        for endpoint, state in states.items()
    ):
        raise InvalidRequest(f"{owner} states must map endpoints to EndpointState: {states!r:.80}")


class ApplicationState(IntEnum):
    """What a node says about itself through gossip; the value is the wire ordinal."""

    STATUS = 0
    """``NORMAL,<token>``, ``BOOT,<token>``, ``LEAVING,..``, ``LEFT,..``, ``shutdown,true``..."""
    LOAD = 1
    SCHEMA = 2
    """The schema version UUID; a mismatch schedules a schema pull."""
    DC = 3
    RACK = 4
    RELEASE_VERSION = 5
    REMOVAL_COORDINATOR = 6
    INTERNAL_IP = 7
    RPC_ADDRESS = 8
    X_11_PADDING = 9
    SEVERITY = 10
    NET_VERSION = 11
    HOST_ID = 12
    TOKENS = 13
    RPC_READY = 14
    INTERNAL_ADDRESS_AND_PORT = 15
    NATIVE_ADDRESS_AND_PORT = 16
    STATUS_WITH_PORT = 17
    SSTABLE_VERSIONS = 18
    DISK_USAGE = 19
    # 20-29: reserved, mirroring Cassandra's X1..X10 padding.
    CDC_GENERATION_ID = 30
    """ringflow: the CDC generation this node operates with (Scylla ``CDC_GENERATION_ID``)."""
    SHARD_COUNT = 31
    """ringflow: shards per node, for Scylla shard-aware drivers (Scylla ``SHARD_COUNT``)."""
    IGNORE_MSB = 32
    """ringflow: the sharder's ``ignore_msb`` bits (Scylla ``IGNORE_MSB_BITS``)."""
    CDC_GENERATIONS_V2 = 33
    """Unused (kept for the numbering): features travel in ``SUPPORTED_FEATURES``."""
    SUPPORTED_FEATURES = 34
    """ringflow: the cluster features this node supports, comma-separated (Scylla
    ``SUPPORTED_FEATURES``), e.g. ``CDC_GENERATIONS_V2``."""
    AUTH_MODE = 35
    """ringflow: ``<authenticator>/<authorizer>`` (Cassandra's short class names); nodes of one
    cluster must agree, a peer gossiping another mode is kept out of the ring."""


@dataclass(frozen=True, slots=True)
class HeartBeatState:
    """An endpoint's gossip clock: ``generation`` (start time, s) and heartbeat ``version``."""

    generation: int
    version: int

    def __post_init__(self) -> None:
        _check_count("heartbeat", "generation", self.generation)
        _check_count("heartbeat", "version", self.version)


@dataclass(frozen=True, slots=True)
class VersionedValue:
    """One application state's value and the version it was set at."""

    value: str
    version: int

    def __post_init__(self) -> None:
        _check_text("versioned value", "value", self.value)
        _check_count("versioned value", "version", self.version)


@dataclass(frozen=True, slots=True)
class EndpointState:
    """Everything gossip knows about one endpoint. Never mutated: replaced."""

    heartbeat: HeartBeatState
    application_states: Mapping[ApplicationState, VersionedValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.heartbeat, HeartBeatState):
            raise InvalidRequest(f"endpoint state heartbeat must be a HeartBeatState, got {self!r}")
        for key, value in self.application_states.items():
            if not isinstance(key, ApplicationState) or not isinstance(value, VersionedValue):
                raise InvalidRequest(
                    f"application states map ApplicationState to VersionedValue, got {key!r}"
                )

    @property
    def generation(self) -> int:
        return self.heartbeat.generation

    @property
    def max_version(self) -> int:
        versions = [value.version for value in self.application_states.values()]
        return max([self.heartbeat.version, *versions])

    def get(self, state: ApplicationState) -> VersionedValue | None:
        return self.application_states.get(state)

    def newer_than(self, version: int) -> EndpointState | None:
        """The delta a peer at ``version`` lacks: the heartbeat plus every newer state.

        None when nothing is newer (Cassandra ``getStateForVersionBiggerThan``).
        """
        newer = {
            key: value
            for key, value in sorted(self.application_states.items())
            if value.version > version
        }
        if not newer and self.heartbeat.version <= version:
            return None
        return EndpointState(self.heartbeat, newer)

    def merged_with(self, delta: EndpointState) -> EndpointState:
        """This state with ``delta`` of the same generation applied: only newer versions win."""
        heartbeat = self.heartbeat
        if delta.heartbeat.version > heartbeat.version:
            heartbeat = delta.heartbeat
        merged = dict(self.application_states)
        for key, value in delta.application_states.items():
            current = merged.get(key)
            if current is None or value.version > current.version:
                merged[key] = value
        return EndpointState(heartbeat, dict(sorted(merged.items())))


@dataclass(frozen=True, slots=True)
class GossipDigest:
    """``endpoint`` is at ``(generation, max_version)`` in the sender's view."""

    endpoint: str
    generation: int
    max_version: int

    def __post_init__(self) -> None:
        _check_text("digest", "endpoint", self.endpoint, allow_empty=False)
        _check_count("digest", "generation", self.generation)
        _check_count("digest", "max_version", self.max_version)


@dataclass(frozen=True, slots=True)
class GossipDigestSyn:
    """Round opener: the sender's digest of every endpoint it knows, shuffled.

    An empty digest list is a shadow-round request: the receiver answers with its whole state.
    """

    cluster_name: str
    partitioner: str
    digests: tuple[GossipDigest, ...]

    def __post_init__(self) -> None:
        _check_text("SYN", "cluster_name", self.cluster_name)
        _check_text("SYN", "partitioner", self.partitioner)
        _check_digests("SYN", self.digests)


@dataclass(frozen=True, slots=True)
class GossipDigestAck:
    """Answer to a SYN: digests the receiver wants, and the deltas it has that the sender lacks."""

    requests: tuple[GossipDigest, ...]
    states: Mapping[str, EndpointState]

    def __post_init__(self) -> None:
        _check_digests("ACK", self.requests)
        _check_states("ACK", self.states)


@dataclass(frozen=True, slots=True)
class GossipDigestAck2:
    """Closes the round: the deltas the ACK asked for."""

    states: Mapping[str, EndpointState]

    def __post_init__(self) -> None:
        _check_states("ACK2", self.states)


@dataclass(frozen=True, slots=True)
class EchoRequest:
    """ "Can you hear me?": a node seen as down answers before it is marked up."""

    echo_id: int

    def __post_init__(self) -> None:
        _check_count("echo request", "echo_id", self.echo_id)


@dataclass(frozen=True, slots=True)
class EchoResponse:
    """Answer to the ``EchoRequest`` with the same ``echo_id``."""

    echo_id: int

    def __post_init__(self) -> None:
        _check_count("echo response", "echo_id", self.echo_id)


GossipMessage = GossipDigestSyn | GossipDigestAck | GossipDigestAck2 | EchoRequest | EchoResponse
"""Every message the gossiper sends and receives."""
