"""ERROR messages with every code's extra fields, both directions.

Owns ``doc/native_protocol_v4.spec`` §4.2.1 (<code><message>...) and §9 (error codes and the
fields that follow the message), reliability-and-style.md §A5.2.

Rules:

* One dataclass per body shape. Codes whose body is only the message share ``ErrorResponse``;
  it refuses a code that needs extra fields, so a response the driver would misread cannot be
  built. Codes this module does not know (0x1700, vendor codes) decode as ``ErrorResponse``.
* Read_failure and Write_failure use the v4 form (<numfailures> [int]), not v5's reason map.
* The code-to-reader table is the dispatch; there is no if-chain on codes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from ringflow.cql._frame import Opcode
from ringflow.cql._wire import LocalProtocolError, Reader, Writer
from ringflow.errors import Consistency, ErrorCode, ProtocolViolation, WriteType


def _read_write_type(reader: Reader) -> WriteType:
    name = reader.read_string()
    try:
        return WriteType(name)
    except ValueError:
        raise ProtocolViolation(f"unknown write type {name!r}") from None


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """An error whose body is only <code><message> (Protocol, Invalid, Syntax, Overloaded...)."""

    opcode: ClassVar[Opcode] = Opcode.ERROR
    code: int
    message: str

    def __post_init__(self) -> None:
        if self.code in _DETAILED_CODES:
            raise LocalProtocolError(
                f"error code 0x{self.code:04x} needs its extra fields; use its own response class"
            )

    def write_body(self, out: Writer) -> None:
        out.write_int(self.code)
        out.write_string(self.message)


@dataclass(frozen=True, slots=True)
class UnavailableResponse:
    """0x1000: <cl><required><alive>."""

    opcode: ClassVar[Opcode] = Opcode.ERROR
    code: ClassVar[ErrorCode] = ErrorCode.UNAVAILABLE
    message: str
    consistency: Consistency
    required: int
    alive: int

    def write_body(self, out: Writer) -> None:
        out.write_int(self.code)
        out.write_string(self.message)
        out.write_consistency(self.consistency)
        out.write_int(self.required)
        out.write_int(self.alive)


@dataclass(frozen=True, slots=True)
class WriteTimeoutResponse:
    """0x1100: <cl><received><blockfor><writeType>."""

    opcode: ClassVar[Opcode] = Opcode.ERROR
    code: ClassVar[ErrorCode] = ErrorCode.WRITE_TIMEOUT
    message: str
    consistency: Consistency
    received: int
    block_for: int
    write_type: WriteType

    def write_body(self, out: Writer) -> None:
        out.write_int(self.code)
        out.write_string(self.message)
        out.write_consistency(self.consistency)
        out.write_int(self.received)
        out.write_int(self.block_for)
        out.write_string(self.write_type)


@dataclass(frozen=True, slots=True)
class ReadTimeoutResponse:
    """0x1200: <cl><received><blockfor><data_present>."""

    opcode: ClassVar[Opcode] = Opcode.ERROR
    code: ClassVar[ErrorCode] = ErrorCode.READ_TIMEOUT
    message: str
    consistency: Consistency
    received: int
    block_for: int
    data_present: bool

    def write_body(self, out: Writer) -> None:
        out.write_int(self.code)
        out.write_string(self.message)
        out.write_consistency(self.consistency)
        out.write_int(self.received)
        out.write_int(self.block_for)
        out.write_byte(1 if self.data_present else 0)


@dataclass(frozen=True, slots=True)
class ReadFailureResponse:
    """0x1300 (v4 form): <cl><received><blockfor><numfailures><data_present>."""

    opcode: ClassVar[Opcode] = Opcode.ERROR
    code: ClassVar[ErrorCode] = ErrorCode.READ_FAILURE
    message: str
    consistency: Consistency
    received: int
    block_for: int
    failure_count: int
    data_present: bool

    def write_body(self, out: Writer) -> None:
        out.write_int(self.code)
        out.write_string(self.message)
        out.write_consistency(self.consistency)
        out.write_int(self.received)
        out.write_int(self.block_for)
        out.write_int(self.failure_count)
        out.write_byte(1 if self.data_present else 0)


@dataclass(frozen=True, slots=True)
class WriteFailureResponse:
    """0x1500 (v4 form): <cl><received><blockfor><numfailures><writeType>."""

    opcode: ClassVar[Opcode] = Opcode.ERROR
    code: ClassVar[ErrorCode] = ErrorCode.WRITE_FAILURE
    message: str
    consistency: Consistency
    received: int
    block_for: int
    failure_count: int
    write_type: WriteType

    def write_body(self, out: Writer) -> None:
        out.write_int(self.code)
        out.write_string(self.message)
        out.write_consistency(self.consistency)
        out.write_int(self.received)
        out.write_int(self.block_for)
        out.write_int(self.failure_count)
        out.write_string(self.write_type)


@dataclass(frozen=True, slots=True)
class FunctionFailureResponse:
    """0x1400: <keyspace><function><arg_types>."""

    opcode: ClassVar[Opcode] = Opcode.ERROR
    code: ClassVar[ErrorCode] = ErrorCode.FUNCTION_FAILURE
    message: str
    keyspace: str
    function: str
    argument_types: tuple[str, ...]

    def write_body(self, out: Writer) -> None:
        out.write_int(self.code)
        out.write_string(self.message)
        out.write_string(self.keyspace)
        out.write_string(self.function)
        out.write_string_list(self.argument_types)


@dataclass(frozen=True, slots=True)
class AlreadyExistsResponse:
    """0x2400: <ks><table>; ``table`` is empty when the keyspace itself exists."""

    opcode: ClassVar[Opcode] = Opcode.ERROR
    code: ClassVar[ErrorCode] = ErrorCode.ALREADY_EXISTS
    message: str
    keyspace: str
    table: str = ""

    def write_body(self, out: Writer) -> None:
        out.write_int(self.code)
        out.write_string(self.message)
        out.write_string(self.keyspace)
        out.write_string(self.table)


@dataclass(frozen=True, slots=True)
class UnpreparedResponse:
    """0x2500: the unknown prepared statement id, [short bytes]."""

    opcode: ClassVar[Opcode] = Opcode.ERROR
    code: ClassVar[ErrorCode] = ErrorCode.UNPREPARED
    message: str
    statement_id: bytes

    def write_body(self, out: Writer) -> None:
        out.write_int(self.code)
        out.write_string(self.message)
        out.write_short_bytes(self.statement_id)


AnyErrorResponse = (
    ErrorResponse
    | UnavailableResponse
    | WriteTimeoutResponse
    | ReadTimeoutResponse
    | ReadFailureResponse
    | WriteFailureResponse
    | FunctionFailureResponse
    | AlreadyExistsResponse
    | UnpreparedResponse
)


def _read_unavailable(reader: Reader, message: str) -> AnyErrorResponse:
    consistency = reader.read_consistency()
    required = reader.read_int()
    return UnavailableResponse(message, consistency, required, reader.read_int())


def _read_write_timeout(reader: Reader, message: str) -> AnyErrorResponse:
    consistency = reader.read_consistency()
    received = reader.read_int()
    block_for = reader.read_int()
    return WriteTimeoutResponse(message, consistency, received, block_for, _read_write_type(reader))


def _read_read_timeout(reader: Reader, message: str) -> AnyErrorResponse:
    consistency = reader.read_consistency()
    received = reader.read_int()
    block_for = reader.read_int()
    return ReadTimeoutResponse(message, consistency, received, block_for, reader.read_byte() != 0)


def _read_read_failure(reader: Reader, message: str) -> AnyErrorResponse:
    consistency = reader.read_consistency()
    received = reader.read_int()
    block_for = reader.read_int()
    failures = reader.read_int()
    return ReadFailureResponse(
        message, consistency, received, block_for, failures, reader.read_byte() != 0
    )


def _read_write_failure(reader: Reader, message: str) -> AnyErrorResponse:
    consistency = reader.read_consistency()
    received = reader.read_int()
    block_for = reader.read_int()
    failures = reader.read_int()
    return WriteFailureResponse(
        message, consistency, received, block_for, failures, _read_write_type(reader)
    )


def _read_function_failure(reader: Reader, message: str) -> AnyErrorResponse:
    keyspace = reader.read_string()
    function = reader.read_string()
    return FunctionFailureResponse(message, keyspace, function, reader.read_string_list())


def _read_already_exists(reader: Reader, message: str) -> AnyErrorResponse:
    keyspace = reader.read_string()
    return AlreadyExistsResponse(message, keyspace, reader.read_string())


_DETAILED_READERS: dict[int, Callable[[Reader, str], AnyErrorResponse]] = {
    ErrorCode.UNAVAILABLE: _read_unavailable,
    ErrorCode.WRITE_TIMEOUT: _read_write_timeout,
    ErrorCode.READ_TIMEOUT: _read_read_timeout,
    ErrorCode.READ_FAILURE: _read_read_failure,
    ErrorCode.WRITE_FAILURE: _read_write_failure,
    ErrorCode.FUNCTION_FAILURE: _read_function_failure,
    ErrorCode.ALREADY_EXISTS: _read_already_exists,
    ErrorCode.UNPREPARED: lambda reader, message: UnpreparedResponse(
        message, reader.read_short_bytes()
    ),
}
_DETAILED_CODES = frozenset(_DETAILED_READERS)


def read_error(reader: Reader) -> AnyErrorResponse:
    code = reader.read_int()
    message = reader.read_string()
    detailed_reader = _DETAILED_READERS.get(code)
    if detailed_reader is not None:
        return detailed_reader(reader, message)
    try:
        return ErrorResponse(ErrorCode(code), message)
    except ValueError:
        return ErrorResponse(code, message)
