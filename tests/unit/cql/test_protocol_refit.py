"""Issue 16, part 1: every answer gets onto the wire, whatever the size of its texts.

Each response type is built with a field over the 65,535-byte [string] limit and sent
through ``ServerConnection.send``; the Scylla Python driver decodes what went out. Errors
keep their class and code with every text truncated and marked; results whose metadata
cannot be encoded become InvalidRequest (0x2200); server-built messages become ServerError;
an EVENT raises ``AnswerNotEncodable`` (nobody to answer). Before the fix every one of these
``send`` calls raised ``LocalProtocolError`` ("[short] value ... is outside [0, 65535]").
"""

from __future__ import annotations

from typing import Any

import pytest
from cassandra import (
    AlreadyExists,
    FunctionFailure,
    ReadFailure,
    ReadTimeout,
    Unavailable,
    WriteFailure,
    WriteTimeout,
)
from cassandra.protocol import ErrorMessage, PreparedQueryNotFound, ResultMessage

from ringflow.cql import (
    AlreadyExistsResponse,
    AnswerNotEncodable,
    Authenticate,
    ColumnSpec,
    Compression,
    Consistency,
    ErrorResponse,
    FunctionFailureResponse,
    PreparedMetadata,
    PreparedResult,
    ReadFailureResponse,
    ReadTimeoutResponse,
    RowsMetadata,
    RowsResult,
    SchemaChange,
    SchemaChangeEvent,
    SchemaChangeResult,
    SchemaChangeTarget,
    SchemaChangeType,
    SetKeyspaceResult,
    Supported,
    UnavailableResponse,
    UnpreparedResponse,
    VoidResult,
    WriteFailureResponse,
    WriteTimeoutResponse,
    WriteType,
    truncate_text,
)
from ringflow.errors import ErrorCode
from ringflow.schema import TEXT

from ._protocol_oracle import driver_decode, ready_connection

LONG = "x" * 1_000_046
"""The issue's size: ``[short] value 1000046 is outside [0, 65535]``."""
STRING_MAX = 65_535
TRUNCATED = "[truncated "


def sent(response: Any, *, compression: Compression | None = None, **options: Any) -> Any:
    """What the driver decodes from the frame ``send`` produced for ``response``."""
    connection = ready_connection(compression=compression)
    frame = connection.send(response, 7, **options)
    assert connection.refitted_answers == 1
    assert connection.in_flight == frozenset()
    connection.validate()
    return driver_decode(frame, decompress=compression is not None)


def assert_truncated(text: str) -> None:
    assert len(text.encode("utf-8")) <= STRING_MAX
    assert text.endswith(" bytes]") and TRUNCATED in text


def test_truncate_text_fits_marks_and_cuts_on_a_character_boundary() -> None:
    assert truncate_text("short") == "short"
    exact = "y" * STRING_MAX
    assert truncate_text(exact) == exact
    wide = "é" * 40_000  # 80,000 bytes of two-byte characters
    cut = truncate_text(wide)
    assert_truncated(cut)
    head = cut.split("...")[0]
    assert set(head) == {"é"}
    dropped = int(cut.rsplit(TRUNCATED, 1)[1].split()[0])
    assert len(head.encode()) + dropped == 80_000


PLAIN_CODES = sorted(
    {
        ErrorCode.SERVER_ERROR,
        ErrorCode.PROTOCOL_ERROR,
        ErrorCode.AUTHENTICATION_ERROR,
        ErrorCode.OVERLOADED,
        ErrorCode.IS_BOOTSTRAPPING,
        ErrorCode.TRUNCATE_ERROR,
        ErrorCode.CDC_WRITE_FAILURE,
        ErrorCode.SYNTAX_ERROR,
        ErrorCode.UNAUTHORIZED,
        ErrorCode.INVALID,
        ErrorCode.CONFIG_ERROR,
    }
)


@pytest.mark.parametrize("code", PLAIN_CODES, ids=lambda code: code.name)
def test_plain_errors_keep_their_code_with_the_message_truncated(code: ErrorCode) -> None:
    decoded = sent(ErrorResponse(code, "Unknown literal 0x" + LONG))
    assert isinstance(decoded, ErrorMessage)
    assert decoded.code == code
    assert decoded.message.startswith("Unknown literal 0xxxx")
    assert_truncated(decoded.message)


DETAILED: list[tuple[Any, type[Exception] | type[ErrorMessage]]] = [
    (UnavailableResponse(LONG, Consistency.QUORUM, 2, 1), Unavailable),
    (WriteTimeoutResponse(LONG, Consistency.ONE, 0, 1, WriteType.SIMPLE), WriteTimeout),
    (ReadTimeoutResponse(LONG, Consistency.ONE, 0, 1, True), ReadTimeout),
    (ReadFailureResponse(LONG, Consistency.ALL, 1, 3, 2, False), ReadFailure),
    (WriteFailureResponse(LONG, Consistency.ALL, 1, 3, 2, WriteType.BATCH), WriteFailure),
    (FunctionFailureResponse(LONG, LONG, LONG, (LONG, "int")), FunctionFailure),
    (AlreadyExistsResponse(LONG, LONG, LONG), AlreadyExists),
    (UnpreparedResponse(LONG, b"\x01\x02"), PreparedQueryNotFound),
]


@pytest.mark.parametrize("response,driver_class", DETAILED, ids=lambda r: type(r).__name__)
def test_errors_with_extra_fields_keep_them_and_truncate_every_text(
    response: Any, driver_class: type[Any]
) -> None:
    decoded = sent(response)
    assert isinstance(decoded, ErrorMessage)
    assert decoded.code == response.code
    assert_truncated(decoded.message)
    info = decoded.info
    exception = decoded.to_exception()
    if isinstance(response, UnavailableResponse):
        assert isinstance(exception, driver_class)
        assert (info["required_replicas"], info["alive_replicas"]) == (2, 1)
    elif isinstance(response, WriteTimeoutResponse | ReadTimeoutResponse):
        assert isinstance(exception, driver_class)
        assert info["required_responses"] == 1
    elif isinstance(response, ReadFailureResponse | WriteFailureResponse):
        assert isinstance(exception, driver_class)
        assert info["failures"] == 2
    elif isinstance(response, FunctionFailureResponse):
        assert isinstance(exception, driver_class)
        assert_truncated(info["keyspace"])
        assert_truncated(info["function"])
        assert_truncated(info["arg_types"][0]) and info["arg_types"][1] == "int"
    elif isinstance(response, AlreadyExistsResponse):
        assert isinstance(exception, driver_class)
        assert_truncated(info["keyspace"])
        assert_truncated(info["table"])
    else:
        assert isinstance(decoded, driver_class)
        assert info == b"\x01\x02"


def spec(keyspace: str = "ks", table: str = "t", name: str = "c") -> ColumnSpec:
    return ColumnSpec(keyspace, table, name, TEXT)


RESULTS = [
    RowsResult(RowsMetadata.describing([spec(name=LONG)]), ((b"v",),)),
    RowsResult(RowsMetadata.describing([spec(keyspace=LONG)]), ()),
    RowsResult(RowsMetadata.describing([spec(table=LONG), spec(keyspace="other")]), ()),
    PreparedResult(
        b"id", PreparedMetadata((spec(name=LONG),), (0,)), RowsMetadata.describing([spec()])
    ),
    PreparedResult(b"id", PreparedMetadata(), RowsMetadata.describing([spec(table=LONG)])),
    SetKeyspaceResult(LONG),
    SchemaChangeResult(SchemaChange(SchemaChangeType.CREATED, SchemaChangeTarget.KEYSPACE, LONG)),
    SchemaChangeResult(
        SchemaChange(SchemaChangeType.DROPPED, SchemaChangeTarget.TABLE, "ks", LONG)
    ),
    SchemaChangeResult(
        SchemaChange(SchemaChangeType.CREATED, SchemaChangeTarget.FUNCTION, "ks", "f", (LONG,))
    ),
]


@pytest.mark.parametrize("result", RESULTS, ids=lambda r: type(r).__name__)
@pytest.mark.parametrize("compression", [None, Compression.LZ4], ids=["plain", "lz4"])
def test_results_that_cannot_be_encoded_become_invalid_request(
    result: Any, compression: Compression | None
) -> None:
    decoded = sent(result, compression=compression)
    assert isinstance(decoded, ErrorMessage)
    assert decoded.code == ErrorCode.INVALID
    assert type(result).__name__ in decoded.message
    assert "65535" in decoded.message
    assert len(decoded.message.encode()) <= STRING_MAX


@pytest.mark.parametrize(
    "response",
    [Supported({"CQL_VERSION": (LONG,)}), Supported({LONG: ("1",)}), Authenticate(LONG)],
    ids=["supported-value", "supported-key", "authenticate"],
)
def test_server_built_messages_that_cannot_be_encoded_become_server_errors(
    response: Any,
) -> None:
    decoded = sent(response)
    assert isinstance(decoded, ErrorMessage)
    assert decoded.code == ErrorCode.SERVER_ERROR
    assert f"Cannot encode {type(response).__name__}" in decoded.message


def test_warnings_are_truncated_and_the_answer_kept() -> None:
    decoded = sent(VoidResult(), warnings=("fine", LONG))
    assert isinstance(decoded, ResultMessage)
    assert decoded.warnings[0] == "fine"
    assert_truncated(decoded.warnings[1])


def test_an_event_that_cannot_be_encoded_is_not_sent() -> None:
    connection = ready_connection()
    change = SchemaChange(SchemaChangeType.CREATED, SchemaChangeTarget.KEYSPACE, LONG)
    with pytest.raises(AnswerNotEncodable):
        connection.send(SchemaChangeEvent(change), -1)
    connection.validate()


def test_answers_that_fit_are_sent_as_built() -> None:
    connection = ready_connection()
    frame = connection.send(ErrorResponse(ErrorCode.INVALID, "y" * STRING_MAX), 3)
    assert connection.refitted_answers == 0
    assert driver_decode(frame).message == "y" * STRING_MAX
