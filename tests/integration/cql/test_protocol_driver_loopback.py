"""The real driver, over loopback, against a ServerConnection: the v5 -> v4 downgrade.

This is the end-to-end proof of the version rule in ``_frame.py``: a driver that starts in v5
(its default) gets our "Invalid or unsupported protocol version (5)" error framed in v5,
raises ``ProtocolVersionUnsupported`` and, at the cluster level, downgrades to v4 and
connects with lz4. A thread and a socket are the shell here; the connection itself is pure.
(It belongs with integration tests by cost, but it is fast: well under a second.)
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import pytest
from cassandra import ConsistencyLevel
from cassandra.cluster import Cluster, NoHostAvailable
from cassandra.connection import DefaultEndPoint, ProtocolVersionUnsupported
from cassandra.protocol import QueryMessage, ResultMessage

from ringflow.cql import (
    NEED_DATA,
    ColumnSpec,
    ConnectionClosed,
    ErrorResponse,
    Options,
    ProtocolErrorEvent,
    Query,
    Ready,
    Register,
    Response,
    RowsMetadata,
    RowsResult,
    ServerConnection,
    Startup,
    Supported,
)
from ringflow.errors import ErrorCode
from ringflow.schema import TEXT

try:
    from cassandra.io.libevreactor import LibevConnection as ReactorConnection
except ImportError:  # pragma: no cover - depends on the driver build
    from cassandra.io.asyncioreactor import AsyncioConnection as ReactorConnection


def _answer(request: object) -> Response:
    if isinstance(request, Options):
        return Supported.for_node()
    if isinstance(request, Startup | Register):
        return Ready()
    if isinstance(request, Query) and request.query == "SELECT greeting FROM hello":
        columns = [ColumnSpec("demo", "hello", "greeting", TEXT)]
        return RowsResult(RowsMetadata.describing(columns), ((b"hi",),))
    return ErrorResponse(ErrorCode.INVALID, "ringflow test shell: not implemented")


def _serve(sock: socket.socket, log: list[str]) -> None:
    connection = ServerConnection()
    with sock:
        while True:
            event = connection.next_event()
            if event is NEED_DATA:
                connection.receive_data(sock.recv(65536))
            elif isinstance(event, ConnectionClosed):
                return
            elif isinstance(event, ProtocolErrorEvent):
                log.append(event.error.message)
                sock.sendall(connection.send(event.error, event.stream_id))
                if event.fatal:
                    return
            else:
                log.append(type(event.request).__name__)
                sock.sendall(connection.send(_answer(event.request), event.stream_id))


@pytest.fixture
def server() -> Iterator[tuple[int, list[str]]]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    log: list[str] = []

    def accept() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_serve, args=(sock, log), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1], log
    listener.close()


def test_v5_connection_is_refused_as_unsupported_and_v4_with_lz4_works(
    server: tuple[int, list[str]],
) -> None:
    port, log = server
    ReactorConnection.initialize_reactor()
    endpoint = DefaultEndPoint("127.0.0.1", port)
    with pytest.raises(ProtocolVersionUnsupported):
        ReactorConnection.factory(endpoint, 5, protocol_version=5)
    assert log[0] == "Invalid or unsupported protocol version (5); supported versions are (4/v4)"
    connection = ReactorConnection.factory(endpoint, 5, protocol_version=4, compression=True)
    try:
        assert connection.compressor is not None, "lz4 negotiated"
        reply = connection.wait_for_response(
            QueryMessage("SELECT greeting FROM hello", ConsistencyLevel.ONE), timeout=5
        )
        assert isinstance(reply, ResultMessage)
        assert reply.parsed_rows == [("hi",)]
    finally:
        connection.close()


def test_cluster_downgrades_from_v5_to_v4(
    server: tuple[int, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    port, log = server
    cluster = Cluster(["127.0.0.1"], port=port, connect_timeout=3, control_connection_timeout=3)
    try:
        with (
            caplog.at_level(logging.WARNING, logger="cassandra.cluster"),
            pytest.raises(NoHostAvailable),
        ):
            cluster.connect()  # our test shell has no system tables
        assert cluster.protocol_version == 4
        assert any(
            "Downgrading core protocol version from 5 to 4" in r.message for r in caplog.records
        )
        assert log[:3] == [
            "Invalid or unsupported protocol version (5); supported versions are (4/v4)",
            "Options",
            "Startup",
        ]
    finally:
        cluster.shutdown()
