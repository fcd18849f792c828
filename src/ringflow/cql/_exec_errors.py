"""The protocol error a statement's exception becomes. Pure.

Rules (native protocol v4 §9; ``ringflow.errors`` codes): each ``RingflowError`` answers its
code's ERROR body, with the extra fields of AlreadyExists (keyspace, table), Unprepared (the id),
FunctionFailure (keyspace, function, argument types), and of Unavailable, the timeouts and the
failures a coordinator raises (``ringflow.errors`` types with their figures, answered by type); a
local read failure (too many tombstones, a storage error with that code alone) is a ReadFailure
of one replica. Anything else is a ServerError (0x0000) and is reported as internal:
a bug, counted by the processor.
"""

from __future__ import annotations

from ringflow.cql._error_responses import (
    AlreadyExistsResponse,
    ErrorResponse,
    FunctionFailureResponse,
    ReadFailureResponse,
    ReadTimeoutResponse,
    UnavailableResponse,
    UnpreparedResponse,
    WriteFailureResponse,
    WriteTimeoutResponse,
)
from ringflow.cql._exec_common import UnpreparedStatement
from ringflow.cql._responses import Response
from ringflow.errors import (
    AlreadyExists,
    Consistency,
    ErrorCode,
    FunctionFailure,
    ReadFailure,
    ReadTimeout,
    RingflowError,
    Unavailable,
    WriteFailure,
    WriteTimeout,
)
from ringflow.schema import SchemaAlreadyExists

_SIMPLE_ERROR_CODES = frozenset(
    {
        ErrorCode.PROTOCOL_ERROR,
        ErrorCode.SYNTAX_ERROR,
        ErrorCode.UNAUTHORIZED,
        ErrorCode.INVALID,
        ErrorCode.CONFIG_ERROR,
        ErrorCode.OVERLOADED,
        ErrorCode.IS_BOOTSTRAPPING,
        ErrorCode.TRUNCATE_ERROR,
        ErrorCode.AUTHENTICATION_ERROR,
    }
)


def response_for_error(
    error: BaseException, consistency: Consistency = Consistency.ONE
) -> tuple[Response, bool]:
    """The protocol error for ``error``, and whether it is an internal error (a bug)."""
    if isinstance(error, UnpreparedStatement):
        return UnpreparedResponse(str(error), error.statement_id), False
    if isinstance(error, SchemaAlreadyExists):
        return AlreadyExistsResponse(str(error), error.keyspace, error.table), False
    if isinstance(error, AlreadyExists):
        return AlreadyExistsResponse(str(error), "", ""), False
    if isinstance(error, FunctionFailure):
        failure = FunctionFailureResponse(
            str(error), error.keyspace, error.function, error.argument_types
        )
        return failure, False
    if isinstance(error, RingflowError):
        if error.code in _SIMPLE_ERROR_CODES:
            return ErrorResponse(error.code, str(error)), False
        coordinated = _coordinator_error_response(error)
        if coordinated is not None:
            return coordinated, False
        if error.code == ErrorCode.READ_FAILURE:  # a local read failure (e.g. too many tombstones)
            return ReadFailureResponse(str(error), consistency, 0, 1, 1, False), False
    return ErrorResponse(ErrorCode.SERVER_ERROR, f"{type(error).__name__}: {error}"), True


def _coordinator_error_response(error: RingflowError) -> Response | None:
    """Unavailable, timeouts and failures raised by a coordinator, with their fields."""
    if isinstance(error, Unavailable):
        return UnavailableResponse(str(error), error.consistency, error.required, error.alive)
    if isinstance(error, WriteTimeout):
        return WriteTimeoutResponse(
            str(error), error.consistency, error.received, error.block_for, error.write_type
        )
    if isinstance(error, ReadTimeout):
        return ReadTimeoutResponse(
            str(error), error.consistency, error.received, error.block_for, error.data_present
        )
    if isinstance(error, WriteFailure):
        return WriteFailureResponse(
            str(error),
            error.consistency,
            error.received,
            error.block_for,
            error.failure_count,
            error.write_type,
        )
    if isinstance(error, ReadFailure):
        return ReadFailureResponse(
            str(error),
            error.consistency,
            error.received,
            error.block_for,
            error.failure_count,
            error.data_present,
        )
    return None
