"""Exceptions to the protocol errors a driver expects (moved out of ``_executor``).

``response_for_error`` maps any exception a request raised to its ERROR response
(``_error_responses``): SyntaxProblem 0x2000, Invalid 0x2200, ConfigurationError 0x2300,
AlreadyExists 0x2400 with keyspace/table, Unprepared 0x2500, Unauthorized 0x2100,
AuthenticationFailed 0x0100, FunctionFailure 0x1400 with its function; Unavailable, timeouts
and failures of a cluster data plane with their fields (duck-typed: ``ringflow.cluster``
depends on this package); anything else, our own InternalError included, is ServerError
0x0000 and reported as internal (each one is a bug the caller counts).
"""

from __future__ import annotations

from collections.abc import Callable

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
from ringflow.cql._wire import Consistency
from ringflow.errors import AlreadyExists, ErrorCode, FunctionFailure, RingflowError
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


# Errors a cluster data plane raises, by code: the response type and the error's attribute
# names giving its fields, in order (duck-typed: ``ringflow.cluster`` depends on this package).
_COORDINATOR_ERRORS: dict[ErrorCode, tuple[Callable[..., Response], tuple[str, ...]]] = {
    ErrorCode.UNAVAILABLE: (UnavailableResponse, ("consistency", "required", "alive")),
    ErrorCode.WRITE_TIMEOUT: (
        WriteTimeoutResponse,
        ("consistency", "received", "block_for", "write_type"),
    ),
    ErrorCode.READ_TIMEOUT: (
        ReadTimeoutResponse,
        ("consistency", "received", "block_for", "data_present"),
    ),
    ErrorCode.WRITE_FAILURE: (
        WriteFailureResponse,
        ("consistency", "received", "block_for", "failure_count", "write_type"),
    ),
    ErrorCode.READ_FAILURE: (
        ReadFailureResponse,
        ("consistency", "received", "block_for", "failure_count", "data_present"),
    ),
}


def _coordinator_error_response(error: RingflowError) -> Response | None:
    """Unavailable, timeouts and failures raised by a cluster data plane, with their fields."""
    entry = _COORDINATOR_ERRORS.get(error.code)
    if entry is None:
        return None
    response_type, names = entry
    fields = vars(error)
    if not all(name in fields for name in names):
        return None
    return response_type(str(error), *(fields[name] for name in names))
