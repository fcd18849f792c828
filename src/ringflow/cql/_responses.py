"""Response messages other than RESULT and ERROR, and the response reader table.

Owns ``doc/native_protocol_v4.spec`` §4.2.2 READY, §4.2.3 AUTHENTICATE, §4.2.4 SUPPORTED,
§4.2.6 EVENT (TOPOLOGY_CHANGE, STATUS_CHANGE, SCHEMA_CHANGE; stream id -1), §4.2.7
AUTH_CHALLENGE and §4.2.8 AUTH_SUCCESS. RESULT lives in ``_results``, ERROR in
``_error_responses``; ``RESPONSE_READERS`` gathers all of them by opcode.

Rules:

* SUPPORTED advertises what ringflow speaks: CQL_VERSION 3.4.5, COMPRESSION lz4 only (no
  snappy), PROTOCOL_VERSIONS 4/v4, plus whatever the caller adds, notably Scylla's sharding
  keys (``ScyllaSharding``), which the Scylla driver reads in
  ``ProtocolFeatures.parse_sharding_info`` to route each request to the owning shard.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from ringflow.cql._error_responses import AnyErrorResponse, read_error
from ringflow.cql._frame import Opcode
from ringflow.cql._results import Result, SchemaChange, read_result, read_schema_change
from ringflow.cql._wire import Inet, Reader, Writer
from ringflow.errors import ProtocolViolation

CQL_VERSION = "3.4.5"
SUPPORTED_COMPRESSIONS = ("lz4",)
MURMUR3_PARTITIONER = "org.apache.cassandra.dht.Murmur3Partitioner"


@dataclass(frozen=True, slots=True)
class Ready:
    opcode: ClassVar[Opcode] = Opcode.READY

    def write_body(self, out: Writer) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Authenticate:
    """AUTHENTICATE: the IAuthenticator class name (ringflow does not authenticate yet)."""

    opcode: ClassVar[Opcode] = Opcode.AUTHENTICATE
    authenticator: str

    def write_body(self, out: Writer) -> None:
        out.write_string(self.authenticator)


@dataclass(frozen=True, slots=True)
class AuthChallenge:
    opcode: ClassVar[Opcode] = Opcode.AUTH_CHALLENGE
    token: bytes | None = None

    def write_body(self, out: Writer) -> None:
        out.write_bytes(self.token)


@dataclass(frozen=True, slots=True)
class AuthSuccess:
    opcode: ClassVar[Opcode] = Opcode.AUTH_SUCCESS
    token: bytes | None = None

    def write_body(self, out: Writer) -> None:
        out.write_bytes(self.token)


@dataclass(frozen=True, slots=True)
class ScyllaSharding:
    """The shard-awareness options a Scylla node puts in SUPPORTED, for this connection's shard."""

    shard: int
    shard_count: int
    ignore_msb: int = 12
    partitioner: str = MURMUR3_PARTITIONER
    algorithm: str = "biased-token-round-robin"
    shard_aware_port: int | None = None

    def as_options(self) -> dict[str, tuple[str, ...]]:
        options: dict[str, tuple[str, ...]] = {
            "SCYLLA_SHARD": (str(self.shard),),
            "SCYLLA_NR_SHARDS": (str(self.shard_count),),
            "SCYLLA_PARTITIONER": (self.partitioner,),
            "SCYLLA_SHARDING_ALGORITHM": (self.algorithm,),
            "SCYLLA_SHARDING_IGNORE_MSB": (str(self.ignore_msb),),
        }
        if self.shard_aware_port is not None:
            options["SCYLLA_SHARD_AWARE_PORT"] = (str(self.shard_aware_port),)
        return options


@dataclass(frozen=True, slots=True)
class Supported:
    """SUPPORTED: a [string multimap] of STARTUP options and their accepted values."""

    opcode: ClassVar[Opcode] = Opcode.SUPPORTED
    options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def for_node(
        cls,
        *,
        sharding: ScyllaSharding | None = None,
        extra: Mapping[str, Sequence[str]] | None = None,
    ) -> Supported:
        """What a ringflow node advertises; ``extra`` entries override the defaults."""
        options: dict[str, tuple[str, ...]] = {
            "CQL_VERSION": (CQL_VERSION,),
            "COMPRESSION": SUPPORTED_COMPRESSIONS,
            "PROTOCOL_VERSIONS": ("4/v4",),
        }
        if sharding is not None:
            options.update(sharding.as_options())
        for key, values in (extra or {}).items():
            options[key] = tuple(values)
        return cls(options)

    def write_body(self, out: Writer) -> None:
        out.write_string_multimap(self.options)


class TopologyChangeType(StrEnum):
    NEW_NODE = "NEW_NODE"
    REMOVED_NODE = "REMOVED_NODE"


class StatusChangeType(StrEnum):
    UP = "UP"
    DOWN = "DOWN"


@dataclass(frozen=True, slots=True)
class TopologyChangeEvent:
    """EVENT TOPOLOGY_CHANGE: a node joined or left (its client address)."""

    opcode: ClassVar[Opcode] = Opcode.EVENT
    change: TopologyChangeType
    node: Inet

    def write_body(self, out: Writer) -> None:
        out.write_string("TOPOLOGY_CHANGE")
        out.write_string(self.change)
        out.write_inet(self.node)


@dataclass(frozen=True, slots=True)
class StatusChangeEvent:
    """EVENT STATUS_CHANGE: a node went up or down."""

    opcode: ClassVar[Opcode] = Opcode.EVENT
    change: StatusChangeType
    node: Inet

    def write_body(self, out: Writer) -> None:
        out.write_string("STATUS_CHANGE")
        out.write_string(self.change)
        out.write_inet(self.node)


@dataclass(frozen=True, slots=True)
class SchemaChangeEvent:
    """EVENT SCHEMA_CHANGE: the same triple as a Schema_change RESULT."""

    opcode: ClassVar[Opcode] = Opcode.EVENT
    change: SchemaChange

    def write_body(self, out: Writer) -> None:
        out.write_string("SCHEMA_CHANGE")
        self.change.write(out)


PushEvent = TopologyChangeEvent | StatusChangeEvent | SchemaChangeEvent


def _read_topology_change(reader: Reader) -> PushEvent:
    name = reader.read_string()
    try:
        change = TopologyChangeType(name)
    except ValueError:
        raise ProtocolViolation(f"unknown topology change {name!r}") from None
    return TopologyChangeEvent(change, reader.read_inet())


def _read_status_change(reader: Reader) -> PushEvent:
    name = reader.read_string()
    try:
        change = StatusChangeType(name)
    except ValueError:
        raise ProtocolViolation(f"unknown status change {name!r}") from None
    return StatusChangeEvent(change, reader.read_inet())


_EVENT_READERS: dict[str, Callable[[Reader], PushEvent]] = {
    "TOPOLOGY_CHANGE": _read_topology_change,
    "STATUS_CHANGE": _read_status_change,
    "SCHEMA_CHANGE": lambda reader: SchemaChangeEvent(read_schema_change(reader)),
}


def _read_event(reader: Reader) -> PushEvent:
    event_type = reader.read_string()
    event_reader = _EVENT_READERS.get(event_type)
    if event_reader is None:
        raise ProtocolViolation(f"unknown event type {event_type!r}")
    return event_reader(reader)


Response = (
    AnyErrorResponse
    | Ready
    | Authenticate
    | Supported
    | Result
    | PushEvent
    | AuthChallenge
    | AuthSuccess
)

RESPONSE_READERS: dict[Opcode, Callable[[Reader], Response]] = {
    Opcode.ERROR: read_error,
    Opcode.READY: lambda reader: Ready(),
    Opcode.AUTHENTICATE: lambda reader: Authenticate(reader.read_string()),
    Opcode.SUPPORTED: lambda reader: Supported(reader.read_string_multimap()),
    Opcode.RESULT: read_result,
    Opcode.EVENT: _read_event,
    Opcode.AUTH_CHALLENGE: lambda reader: AuthChallenge(reader.read_bytes()),
    Opcode.AUTH_SUCCESS: lambda reader: AuthSuccess(reader.read_bytes()),
}
