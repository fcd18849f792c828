"""Request messages (client to server), both directions of their body codec.

Owns ``doc/native_protocol_v4.spec`` §4.1: STARTUP (4.1.1), AUTH_RESPONSE (4.1.2), OPTIONS
(4.1.3), QUERY with its <query_parameters> (4.1.4), PREPARE (4.1.5), EXECUTE (4.1.6), BATCH
(4.1.7) and REGISTER (4.1.8).

Rules:

* Every message is a frozen, slotted dataclass with an ``opcode`` and ``write_body``; reading is
  a plain function per opcode, collected in ``REQUEST_READERS`` (opcode -> reader).
* Readers follow Cassandra where the spec is loose: unknown query-flag bits (v5's keyspace flag
  0x80 and above) are refused, a default timestamp of Long.MIN_VALUE is refused, a null paging
  state means "no paging state", and BATCH refuses the names-for-values flag (the spec itself
  says it cannot work, CASSANDRA-10246) and the four low flag bits. Semantic checks (which
  STARTUP options are acceptable, serial consistency levels) belong to the connection and the
  executor, not here.
* Bodies may carry bytes past what the spec describes; readers ignore them (spec §1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag, StrEnum
from typing import ClassVar

from ringflow.cql._frame import Opcode
from ringflow.cql._wire import LONG_MIN, CqlValue, LocalProtocolError, Reader, Writer
from ringflow.errors import Consistency, ProtocolViolation

CQL_VERSION_OPTION = "CQL_VERSION"
COMPRESSION_OPTION = "COMPRESSION"


class QueryFlag(IntFlag):
    """<flags> of <query_parameters> (spec §4.1.4) and of BATCH (§4.1.7)."""

    NONE = 0x00
    VALUES = 0x01
    SKIP_METADATA = 0x02
    PAGE_SIZE = 0x04
    WITH_PAGING_STATE = 0x08
    WITH_SERIAL_CONSISTENCY = 0x10
    WITH_DEFAULT_TIMESTAMP = 0x20
    WITH_NAMES_FOR_VALUES = 0x40


_KNOWN_QUERY_FLAGS = 0x7F
# The flags as plain ints for the decoder: ``int & QueryFlag.X`` builds a QueryFlag each time
# (IntFlag's reflected ``&``), about a tenth of the event loop's CPU per EXECUTE.
_VALUES = int(QueryFlag.VALUES)
_SKIP_METADATA = int(QueryFlag.SKIP_METADATA)
_PAGE_SIZE = int(QueryFlag.PAGE_SIZE)
_WITH_PAGING_STATE = int(QueryFlag.WITH_PAGING_STATE)
_WITH_SERIAL_CONSISTENCY = int(QueryFlag.WITH_SERIAL_CONSISTENCY)
_WITH_DEFAULT_TIMESTAMP = int(QueryFlag.WITH_DEFAULT_TIMESTAMP)
_WITH_NAMES_FOR_VALUES = int(QueryFlag.WITH_NAMES_FOR_VALUES)
_BATCH_FLAGS = QueryFlag.WITH_SERIAL_CONSISTENCY | QueryFlag.WITH_DEFAULT_TIMESTAMP


@dataclass(frozen=True, slots=True)
class Startup:
    """STARTUP: the connection's options, a [string map] (CQL_VERSION, COMPRESSION, ...)."""

    opcode: ClassVar[Opcode] = Opcode.STARTUP
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def cql_version(self) -> str | None:
        return self.options.get(CQL_VERSION_OPTION)

    @property
    def compression(self) -> str | None:
        return self.options.get(COMPRESSION_OPTION)

    def write_body(self, out: Writer) -> None:
        out.write_string_map(self.options)


@dataclass(frozen=True, slots=True)
class AuthResponse:
    """AUTH_RESPONSE: one SASL token, a [bytes] (null allowed)."""

    opcode: ClassVar[Opcode] = Opcode.AUTH_RESPONSE
    token: bytes | None = None

    def write_body(self, out: Writer) -> None:
        out.write_bytes(self.token)


@dataclass(frozen=True, slots=True)
class Options:
    """OPTIONS: asks which STARTUP options are supported; empty body."""

    opcode: ClassVar[Opcode] = Opcode.OPTIONS

    def write_body(self, out: Writer) -> None:
        return None


@dataclass(frozen=True, slots=True)
class QueryParameters:
    """<query_parameters> shared by QUERY and EXECUTE.

    ``values`` are the bound [value]s; ``names`` (same length) are set when the client bound
    them by name (flag 0x40). ``page_size``, ``paging_state``, ``serial_consistency`` and
    ``default_timestamp`` (microseconds) are ``None`` when their flag is absent.
    """

    consistency: Consistency
    values: tuple[CqlValue, ...] = ()
    names: tuple[str, ...] | None = None
    skip_metadata: bool = False
    page_size: int | None = None
    paging_state: bytes | None = None
    serial_consistency: Consistency | None = None
    default_timestamp: int | None = None

    def __post_init__(self) -> None:
        if self.names is not None and len(self.names) != len(self.values):
            raise LocalProtocolError(f"{len(self.names)} value names for {len(self.values)} values")

    @property
    def flags(self) -> QueryFlag:
        flags = QueryFlag.NONE
        for present, flag in (
            (bool(self.values), QueryFlag.VALUES),
            (self.skip_metadata, QueryFlag.SKIP_METADATA),
            (self.page_size is not None, QueryFlag.PAGE_SIZE),
            (self.paging_state is not None, QueryFlag.WITH_PAGING_STATE),
            (self.serial_consistency is not None, QueryFlag.WITH_SERIAL_CONSISTENCY),
            (self.default_timestamp is not None, QueryFlag.WITH_DEFAULT_TIMESTAMP),
            (bool(self.values) and self.names is not None, QueryFlag.WITH_NAMES_FOR_VALUES),
        ):
            if present:
                flags |= flag
        return flags

    def write(self, out: Writer) -> None:
        flags = self.flags
        out.write_consistency(self.consistency)
        out.write_byte(int(flags))
        if flags & QueryFlag.VALUES:
            out.write_short(len(self.values))
            names = self.names if flags & QueryFlag.WITH_NAMES_FOR_VALUES else None
            for position, value in enumerate(self.values):
                if names is not None:
                    out.write_string(names[position])
                out.write_value(value)
        if self.page_size is not None:
            out.write_int(self.page_size)
        if self.paging_state is not None:
            out.write_bytes(self.paging_state)
        if self.serial_consistency is not None:
            out.write_consistency(self.serial_consistency)
        if self.default_timestamp is not None:
            out.write_long(self.default_timestamp)


def read_query_parameters(reader: Reader) -> QueryParameters:
    consistency = reader.read_consistency()
    flags = reader.read_byte()
    if flags & ~_KNOWN_QUERY_FLAGS:
        raise ProtocolViolation(f"unknown query flags 0x{flags & ~_KNOWN_QUERY_FLAGS:02x}")
    values: tuple[CqlValue, ...] = ()
    names: tuple[str, ...] | None = None
    if flags & _VALUES:
        values, names = _read_values(reader, bool(flags & _WITH_NAMES_FOR_VALUES))
    page_size = reader.read_int() if flags & _PAGE_SIZE else None
    paging_state = reader.read_bytes() if flags & _WITH_PAGING_STATE else None
    serial = reader.read_consistency() if flags & _WITH_SERIAL_CONSISTENCY else None
    timestamp = _read_timestamp(reader) if flags & _WITH_DEFAULT_TIMESTAMP else None
    return QueryParameters(
        consistency=consistency,
        values=values,
        names=names,
        skip_metadata=bool(flags & _SKIP_METADATA),
        page_size=page_size,
        paging_state=paging_state,
        serial_consistency=serial,
        default_timestamp=timestamp,
    )


def _read_values(
    reader: Reader, named: bool
) -> tuple[tuple[CqlValue, ...], tuple[str, ...] | None]:
    values: list[CqlValue] = []
    names: list[str] = []
    for _ in range(reader.read_short()):
        if named:
            names.append(reader.read_string())
        values.append(reader.read_value())
    return tuple(values), (tuple(names) if named else None)


def _read_timestamp(reader: Reader) -> int:
    timestamp = reader.read_long()
    if timestamp == LONG_MIN:
        raise ProtocolViolation(f"out of bound default timestamp {timestamp}")
    return timestamp


@dataclass(frozen=True, slots=True)
class Query:
    """QUERY: a [long string] statement and its <query_parameters>."""

    opcode: ClassVar[Opcode] = Opcode.QUERY
    query: str
    parameters: QueryParameters

    def write_body(self, out: Writer) -> None:
        out.write_long_string(self.query)
        self.parameters.write(out)


@dataclass(frozen=True, slots=True)
class Prepare:
    """PREPARE: a [long string] statement to prepare."""

    opcode: ClassVar[Opcode] = Opcode.PREPARE
    query: str

    def write_body(self, out: Writer) -> None:
        out.write_long_string(self.query)


@dataclass(frozen=True, slots=True)
class Execute:
    """EXECUTE: a prepared statement id ([short bytes]) and its <query_parameters>."""

    opcode: ClassVar[Opcode] = Opcode.EXECUTE
    statement_id: bytes
    parameters: QueryParameters

    def write_body(self, out: Writer) -> None:
        out.write_short_bytes(self.statement_id)
        self.parameters.write(out)


class BatchType(IntEnum):
    LOGGED = 0
    UNLOGGED = 1
    COUNTER = 2


@dataclass(frozen=True, slots=True)
class BatchStatement:
    """One <query_i> of a BATCH: query text (kind 0) or a prepared id (kind 1), and values."""

    statement: str | bytes
    values: tuple[CqlValue, ...] = ()

    @property
    def is_prepared(self) -> bool:
        return isinstance(self.statement, bytes)

    def write(self, out: Writer) -> None:
        if isinstance(self.statement, bytes):
            out.write_byte(1)
            out.write_short_bytes(self.statement)
        else:
            out.write_byte(0)
            out.write_long_string(self.statement)
        out.write_short(len(self.values))
        out.write_values(self.values)


def _read_batch_statement(reader: Reader) -> BatchStatement:
    kind = reader.read_byte()
    statement: str | bytes
    if kind == 0:
        statement = reader.read_long_string()
    elif kind == 1:
        statement = reader.read_short_bytes()
    else:
        raise ProtocolViolation(f"invalid BATCH statement kind {kind} (must be 0 or 1)")
    values = tuple(reader.read_value() for _ in range(reader.read_short()))
    return BatchStatement(statement, values)


@dataclass(frozen=True, slots=True)
class Batch:
    """BATCH: statements, consistency, optional serial consistency and default timestamp."""

    opcode: ClassVar[Opcode] = Opcode.BATCH
    batch_type: BatchType
    statements: tuple[BatchStatement, ...]
    consistency: Consistency
    serial_consistency: Consistency | None = None
    default_timestamp: int | None = None

    def write_body(self, out: Writer) -> None:
        out.write_byte(int(self.batch_type))
        out.write_short(len(self.statements))
        for statement in self.statements:
            statement.write(out)
        out.write_consistency(self.consistency)
        flags = QueryFlag.NONE
        if self.serial_consistency is not None:
            flags |= QueryFlag.WITH_SERIAL_CONSISTENCY
        if self.default_timestamp is not None:
            flags |= QueryFlag.WITH_DEFAULT_TIMESTAMP
        out.write_byte(int(flags))
        if self.serial_consistency is not None:
            out.write_consistency(self.serial_consistency)
        if self.default_timestamp is not None:
            out.write_long(self.default_timestamp)


def _read_batch(reader: Reader) -> Batch:
    type_code = reader.read_byte()
    try:
        batch_type = BatchType(type_code)
    except ValueError:
        raise ProtocolViolation(f"invalid BATCH type {type_code} (must be 0, 1 or 2)") from None
    statements = tuple(_read_batch_statement(reader) for _ in range(reader.read_short()))
    consistency = reader.read_consistency()
    flags = reader.read_byte()
    if flags & ~_BATCH_FLAGS:
        raise ProtocolViolation(
            f"BATCH flags 0x{flags & ~_BATCH_FLAGS:02x} are not supported "
            "(only serial consistency 0x10 and default timestamp 0x20)"
        )
    serial = reader.read_consistency() if flags & _WITH_SERIAL_CONSISTENCY else None
    timestamp = _read_timestamp(reader) if flags & _WITH_DEFAULT_TIMESTAMP else None
    return Batch(batch_type, statements, consistency, serial, timestamp)


class EventType(StrEnum):
    """Event types a client may REGISTER for (spec §4.2.6)."""

    TOPOLOGY_CHANGE = "TOPOLOGY_CHANGE"
    STATUS_CHANGE = "STATUS_CHANGE"
    SCHEMA_CHANGE = "SCHEMA_CHANGE"


@dataclass(frozen=True, slots=True)
class Register:
    """REGISTER: the event types this connection wants pushed, a [string list]."""

    opcode: ClassVar[Opcode] = Opcode.REGISTER
    event_types: tuple[EventType, ...]

    def write_body(self, out: Writer) -> None:
        out.write_string_list([str(event_type) for event_type in self.event_types])


def _read_register(reader: Reader) -> Register:
    event_types: list[EventType] = []
    for name in reader.read_string_list():
        try:
            event_types.append(EventType(name))
        except ValueError:
            known = ", ".join(event_type.value for event_type in EventType)
            raise ProtocolViolation(
                f"invalid event type {name!r} in REGISTER (known: {known})"
            ) from None
    return Register(tuple(event_types))


Request = Startup | AuthResponse | Options | Query | Prepare | Execute | Batch | Register

REQUEST_READERS: dict[Opcode, Callable[[Reader], Request]] = {
    Opcode.STARTUP: lambda reader: Startup(reader.read_string_map()),
    Opcode.AUTH_RESPONSE: lambda reader: AuthResponse(reader.read_bytes()),
    Opcode.OPTIONS: lambda reader: Options(),
    Opcode.QUERY: lambda reader: Query(reader.read_long_string(), read_query_parameters(reader)),
    Opcode.PREPARE: lambda reader: Prepare(reader.read_long_string()),
    Opcode.EXECUTE: lambda reader: Execute(
        reader.read_short_bytes(), read_query_parameters(reader)
    ),
    Opcode.BATCH: _read_batch,
    Opcode.REGISTER: _read_register,
}
