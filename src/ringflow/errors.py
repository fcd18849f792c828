"""The package's exceptions: one root, subclasses saying who is at fault, each with its CQL code.

STYLE.md "Errors": a client mistake, a peer's failure, an operator's bad configuration and our own
bug are different things to the person reading the message. Each class carries the native-protocol
error code (``doc/native_protocol_v4.spec`` §9) it maps to when it crosses the wire, so the CQL
layer never guesses. An exception reaching the wire as 0x0000 (ServerError) is a bug.

A coordinator's errors (Unavailable, the timeouts, the failures) carry the fields of their ERROR
bodies, so they live here with the two enums those bodies name (the protocol's consistency levels
and write types): the cluster raises them, the CQL layer answers them by type.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum, StrEnum


class ErrorCode(IntEnum):
    """Native protocol v4 error codes (``native_protocol_v4.spec`` §9)."""

    SERVER_ERROR = 0x0000
    PROTOCOL_ERROR = 0x000A
    AUTHENTICATION_ERROR = 0x0100
    UNAVAILABLE = 0x1000
    OVERLOADED = 0x1001
    IS_BOOTSTRAPPING = 0x1002
    TRUNCATE_ERROR = 0x1003
    WRITE_TIMEOUT = 0x1100
    READ_TIMEOUT = 0x1200
    READ_FAILURE = 0x1300
    FUNCTION_FAILURE = 0x1400
    WRITE_FAILURE = 0x1500
    CDC_WRITE_FAILURE = 0x1600
    SYNTAX_ERROR = 0x2000
    UNAUTHORIZED = 0x2100
    INVALID = 0x2200
    CONFIG_ERROR = 0x2300
    ALREADY_EXISTS = 0x2400
    UNPREPARED = 0x2500


class Consistency(IntEnum):
    """[consistency] codes (spec §3)."""

    ANY = 0x0000
    ONE = 0x0001
    TWO = 0x0002
    THREE = 0x0003
    QUORUM = 0x0004
    ALL = 0x0005
    LOCAL_QUORUM = 0x0006
    EACH_QUORUM = 0x0007
    SERIAL = 0x0008
    LOCAL_SERIAL = 0x0009
    LOCAL_ONE = 0x000A


class WriteType(StrEnum):
    """<writeType> of Write_timeout and Write_failure (spec §9, plus CAS/VIEW/CDC of v5)."""

    SIMPLE = "SIMPLE"
    BATCH = "BATCH"
    UNLOGGED_BATCH = "UNLOGGED_BATCH"
    COUNTER = "COUNTER"
    BATCH_LOG = "BATCH_LOG"
    CAS = "CAS"
    VIEW = "VIEW"
    CDC = "CDC"


class RingflowError(Exception):
    """Root of every exception ringflow raises on purpose."""

    code: ErrorCode = ErrorCode.SERVER_ERROR


class ClientError(RingflowError):
    """The caller asked for something invalid: bad argument, bad value, bad statement."""

    code = ErrorCode.INVALID


class InvalidRequest(ClientError):
    """A well-formed request that cannot be honoured (CQL 0x2200 Invalid)."""

    code = ErrorCode.INVALID


class ProtocolViolation(ClientError):
    """Bytes on the wire that do not follow the protocol (CQL 0x000A)."""

    code = ErrorCode.PROTOCOL_ERROR


class SyntaxProblem(ClientError):
    """A statement that does not parse (CQL 0x2000)."""

    code = ErrorCode.SYNTAX_ERROR


class AlreadyExists(ClientError):
    """A keyspace or table that exists already (CQL 0x2400)."""

    code = ErrorCode.ALREADY_EXISTS


class FunctionFailure(ClientError):
    """A function failed on the values it was given (CQL 0x1400), e.g. ``fromJson('[')``;
    the response names the function and its argument types."""

    code = ErrorCode.FUNCTION_FAILURE

    def __init__(
        self, message: str, keyspace: str, function: str, argument_types: tuple[str, ...]
    ) -> None:
        super().__init__(message)
        self.keyspace = keyspace
        self.function = function
        self.argument_types = argument_types


class Overloaded(RingflowError):
    """The node has too much of this work in hand already: try later (CQL 0x1001)."""

    code = ErrorCode.OVERLOADED


class ConfigurationError(RingflowError):
    """The operator's configuration is wrong (bad replication map, bad node settings)."""

    code = ErrorCode.CONFIG_ERROR


class PeerError(RingflowError):
    """Another node failed us: unavailable, timed out, or answered nonsense."""

    code = ErrorCode.SERVER_ERROR


class Unavailable(PeerError):
    """Too few replicas are alive to even try (0x1000 ``<cl><required><alive>``)."""

    code = ErrorCode.UNAVAILABLE

    def __init__(
        self, consistency: Consistency, required: int, alive: int, *, datacenter: str | None = None
    ) -> None:
        where = "" if datacenter is None else f" in DC {datacenter}"
        super().__init__(f"Cannot achieve consistency level {consistency.name}{where}")
        self.consistency = consistency
        self.required = required
        self.alive = alive
        self.datacenter = datacenter


class _ReplicaShortfall(PeerError):
    """Fewer replicas answered than the level needs: the fields every timeout and failure body
    starts with (``<cl><received><blockfor>``)."""

    def __init__(
        self, message: str, consistency: Consistency, received: int, block_for: int
    ) -> None:
        super().__init__(message)
        self.consistency = consistency
        self.received = received
        self.block_for = block_for


class WriteTimeout(_ReplicaShortfall):
    """Too few replicas acknowledged a write in time (0x1100 ``<cl><received><blockfor><type>``)."""

    code = ErrorCode.WRITE_TIMEOUT

    def __init__(
        self, consistency: Consistency, received: int, block_for: int, write_type: WriteType
    ) -> None:
        message = f"Operation timed out - received only {received} responses."
        super().__init__(message, consistency, received, block_for)
        self.write_type = write_type


class ReadTimeout(_ReplicaShortfall):
    """Too few replicas answered a read in time (0x1200 ``<cl><received><blockfor><data>``)."""

    code = ErrorCode.READ_TIMEOUT

    def __init__(
        self, consistency: Consistency, received: int, block_for: int, data_present: bool
    ) -> None:
        message = f"Operation timed out - received only {received} responses."
        super().__init__(message, consistency, received, block_for)
        self.data_present = data_present


def _failed(received: int, failure_count: int) -> str:
    return f"Operation failed - received {received} responses and {failure_count} failures"


class WriteFailure(_ReplicaShortfall):
    """Too many replicas failed for the level to be met (0x1500 ``<cl><received><blockfor>
    <numfailures><writeType>``)."""

    code = ErrorCode.WRITE_FAILURE

    def __init__(
        self,
        consistency: Consistency,
        received: int,
        block_for: int,
        failure_count: int,
        write_type: WriteType,
    ) -> None:
        super().__init__(_failed(received, failure_count), consistency, received, block_for)
        self.failure_count = failure_count
        self.write_type = write_type


class ReadFailure(_ReplicaShortfall):
    """Too many replicas failed for the level to be met (0x1300 ``<cl><received><blockfor>
    <numfailures><data_present>``)."""

    code = ErrorCode.READ_FAILURE

    def __init__(
        self,
        consistency: Consistency,
        received: int,
        block_for: int,
        failure_count: int,
        data_present: bool,
    ) -> None:
        super().__init__(_failed(received, failure_count), consistency, received, block_for)
        self.failure_count = failure_count
        self.data_present = data_present


class InternalError(RingflowError):
    """An invariant of our own broke. Always a bug."""

    code = ErrorCode.SERVER_ERROR


def invariant(condition: bool, message: str | Callable[[], str]) -> None:
    """Always-on check (a bare ``assert`` vanishes under ``python -O``); raises InternalError.
    ``message`` may be a function that makes it, called only when the check fails: checks run
    after every simulated event, where formatting a message that is not needed (a window of
    samples, the story of a gossiper) cost more than the checks themselves."""
    if not condition:
        raise InternalError(message if isinstance(message, str) else message())
