"""Answers that do not fit the wire, made into answers that do (issue 16, part 1).

A [string] carries at most 65,535 bytes (``doc/native_protocol_v4.spec`` §3). A server that
echoes a client's long literal into an error message, or a long alias into result metadata,
builds a response the notation cannot carry; ``Writer`` refuses it with ``LocalProtocolError``.
Such a request must still get an answer (every request is answered or its connection closed),
so ``refit`` turns the response into one that fits:

* An ERROR of any class keeps its class and code; every text field (the message, and the
  keyspace, table, function and argument types some codes carry) is cut to fit and ends with
  ``"... [truncated N bytes]"``; a list of texts longer than a [short] count is cut too.
* A RESULT (rows or prepared metadata, SET_KEYSPACE, SCHEMA_CHANGE) that cannot be encoded
  becomes an InvalidRequest (0x2200) naming the reason: the client asked for a name the
  protocol cannot carry (Cassandra refuses such identifiers earlier, at parse time).
* Any other response the server builds itself (SUPPORTED, AUTHENTICATE, AUTH_*) becomes a
  ServerError (0x0000): that is our bug, reported on the wire and counted by the shell.
* An EVENT (stream -1) has nobody to answer: ``refit`` returns ``None`` and the shell drops
  the push (and counts it).

Warnings are texts too: each is cut to fit, and at most ``SHORT_MAX`` are kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ringflow.cql._error_responses import (
    AlreadyExistsResponse,
    AnyErrorResponse,
    ErrorResponse,
    FunctionFailureResponse,
    ReadFailureResponse,
    ReadTimeoutResponse,
    UnavailableResponse,
    UnpreparedResponse,
    WriteFailureResponse,
    WriteTimeoutResponse,
)
from ringflow.cql._frame import Opcode
from ringflow.cql._responses import Response
from ringflow.cql._results import (
    PreparedResult,
    RowsResult,
    SchemaChangeResult,
    SetKeyspaceResult,
)
from ringflow.cql._wire import SHORT_MAX
from ringflow.errors import ErrorCode

_ERROR_CLASSES = (
    ErrorResponse,
    UnavailableResponse,
    WriteTimeoutResponse,
    ReadTimeoutResponse,
    ReadFailureResponse,
    WriteFailureResponse,
    FunctionFailureResponse,
    AlreadyExistsResponse,
    UnpreparedResponse,
)
_RESULTS_REFUSED_AS_INVALID = (RowsResult, PreparedResult, SetKeyspaceResult, SchemaChangeResult)


def _marker(dropped: int) -> str:
    return f"... [truncated {dropped} bytes]"


def truncate_text(text: str, limit: int = SHORT_MAX) -> str:
    """``text`` if its UTF-8 form fits ``limit`` bytes, else its head plus a marker saying
    how many bytes were dropped; the result always fits (cut on a character boundary)."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    # The marker for len(encoded) dropped bytes is at least as long as the real one.
    keep = max(0, limit - len(_marker(len(encoded))))
    head = encoded[:keep].decode("utf-8", "ignore")
    return head + _marker(len(encoded) - len(head.encode("utf-8")))


def truncate_texts(texts: Sequence[str], limit: int = SHORT_MAX) -> tuple[str, ...]:
    """Each of ``texts`` cut to fit a [string], and at most ``SHORT_MAX`` of them."""
    return tuple(truncate_text(text, limit) for text in texts[:SHORT_MAX])


def _fitted_error(error: AnyErrorResponse) -> AnyErrorResponse:
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(error):
        value = getattr(error, field.name)
        if isinstance(value, str):
            changes[field.name] = truncate_text(value)
        elif isinstance(value, tuple) and all(isinstance(item, str) for item in value):
            changes[field.name] = truncate_texts(value)
    fitted: AnyErrorResponse = dataclasses.replace(error, **changes)
    return fitted


def refit(response: Response, failure: Exception) -> Response | None:
    """A response that says what ``response`` meant and fits the wire, given the
    ``failure`` encoding it raised; ``None`` for an EVENT, which answers nobody."""
    if isinstance(response, _ERROR_CLASSES):
        return _fitted_error(response)
    if response.opcode is Opcode.EVENT:
        return None
    if isinstance(response, _RESULTS_REFUSED_AS_INVALID):
        message = (
            f"The {type(response).__name__} answer cannot be encoded: a name in it is longer "
            f"than the protocol's {SHORT_MAX}-byte [string] ({failure})"
        )
        return ErrorResponse(ErrorCode.INVALID, truncate_text(message))
    message = f"Cannot encode {type(response).__name__}: {failure}"
    return ErrorResponse(ErrorCode.SERVER_ERROR, truncate_text(message))
