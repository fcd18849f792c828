"""The sans-IO connection with authentication on (issue 18 part 1): STARTUP leads to
AUTHENTICATING, where only AUTH_RESPONSE is accepted (Cassandra's ``ServerConnection``:
"Unexpected message X, expecting SASL_RESPONSE", OPTIONS included), until the shell reports
the login; AUTH_RESPONSE before STARTUP or after login is a protocol error. Frames are the
Python driver's own encodings (``cassandra.protocol``) where it has them."""

from __future__ import annotations

import pytest
from cassandra.auth import PlainTextAuthenticator

from ringflow.cql import (
    PASSWORD_AUTHENTICATOR,
    Authenticate,
    AuthResponse,
    ConnectionState,
    ErrorResponse,
    Options,
    ProtocolErrorEvent,
    Query,
    QueryParameters,
    RequestEvent,
    ServerConnection,
    Startup,
    encode_message,
)
from ringflow.cql._wire import Consistency, LocalProtocolError
from ringflow.errors import ErrorCode

STARTUP = encode_message(Startup({"CQL_VERSION": "3.4.5"}), 0)
DRIVER_TOKEN = PlainTextAuthenticator("alice", "pw").initial_response()


def _event(connection: ServerConnection, frame: bytes) -> object:
    connection.receive_data(frame)
    event = connection.next_event()
    connection.validate()
    return event


def _refusal(connection: ServerConnection, frame: bytes) -> str:
    event = _event(connection, frame)
    assert isinstance(event, ProtocolErrorEvent) and not event.fatal, event
    assert isinstance(event.error, ErrorResponse)
    assert event.error.code == ErrorCode.PROTOCOL_ERROR
    connection.send(event.error, event.stream_id)
    return event.error.message


def test_the_login_handshake_and_its_refusals() -> None:
    connection = ServerConnection(authenticate=True)
    message = _refusal(connection, encode_message(AuthResponse(DRIVER_TOKEN), 1))
    assert message == "Unexpected message AUTH_RESPONSE, expecting STARTUP or OPTIONS"
    event = _event(connection, STARTUP)
    assert isinstance(event, RequestEvent) and connection.state is ConnectionState.AUTHENTICATING
    connection.send(Authenticate(PASSWORD_AUTHENTICATOR), event.stream_id)
    query = encode_message(Query("SELECT 1", QueryParameters(Consistency.ONE)), 2)
    assert _refusal(connection, query) == "Unexpected message QUERY, expecting SASL_RESPONSE"
    assert _refusal(connection, encode_message(Options(), 3)) == (
        "Unexpected message OPTIONS, expecting SASL_RESPONSE"
    )
    event = _event(connection, encode_message(AuthResponse(DRIVER_TOKEN), 4))
    assert isinstance(event, RequestEvent) and event.request == AuthResponse(b"\x00alice\x00pw")
    assert connection.state is ConnectionState.AUTHENTICATING  # until the shell says so
    message = _refusal(connection, encode_message(AuthResponse(DRIVER_TOKEN), 6))
    assert message.endswith("a SASL_RESPONSE is being checked")  # one login at a time
    connection.authenticated()
    assert connection.state is ConnectionState.READY
    assert isinstance(_event(connection, query), RequestEvent)
    message = _refusal(connection, encode_message(AuthResponse(DRIVER_TOKEN), 5))
    assert message == "Unexpected message AUTH_RESPONSE, the connection is already initialized"
    with pytest.raises(LocalProtocolError):
        connection.authenticated()


def test_without_authentication_startup_is_ready_at_once() -> None:
    connection = ServerConnection()
    assert isinstance(_event(connection, STARTUP), RequestEvent)
    assert connection.state is ConnectionState.READY
