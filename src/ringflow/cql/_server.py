"""The asyncio shell serving the CQL native protocol: sockets in, ``ServerConnection`` per client.

Thin by design (STYLE.md "pure cores, thin shells"): framing, state and protocol errors belong to
the sans-IO ``ServerConnection``; statements belong to a ``Backend`` (the executor behind an
adapter). This module only moves bytes, answers the handshake (OPTIONS, STARTUP, REGISTER),
hands statements to the backend on ONE worker thread, writes answers back and pushes events.

Rules:

* **The event loop never blocks.** Every backend call (parsing, storage, SQLite) runs on the
  ``worker`` executor, which the node creates with exactly one thread, so the store is used from
  one thread and statements of one connection run in arrival order.
* **Every queue is bounded.** A connection has at most ``max_in_flight_per_connection``
  requests in flight (beyond that ``ServerConnection`` answers Overloaded); the node has at
  most ``max_pending_requests`` statements queued for or running on the worker: when they are
  all taken, connections stop reading (TCP back-pressure) until one finishes. Frames are at most
  ``max_frame_size`` bytes. Writes wait for the transport to drain.
* **Answers in completion order**, each on its request's stream id (spec §2.3).
* **Connections beyond ``max_connections``** have their first request answered with Overloaded
  (0x1001) naming the limit, then are closed.
* **Nothing a client sends crashes the server.** Protocol errors are the connection's business;
  a backend exception that is a ``RingflowError`` becomes an ERROR with its code; any other
  exception becomes ServerError (0x0000), is logged with its traceback and counted
  (``stats.server_errors``): it is a bug. A failure inside one connection's loop closes that
  connection only.
* **Events.** REGISTER records the connection's event types. A SCHEMA_CHANGE result is pushed
  as an EVENT (stream -1) to every connection registered for SCHEMA_CHANGE, after the answer to
  the statement that caused it.
* **Shutdown** (``close``): stop accepting, let statements in flight finish (at most
  ``shutdown_grace_s``), then close every connection.

Scylla sharding: each connection is told a shard id (round-robin over ``shard_count``) in its
SUPPORTED options. No shard-aware port is advertised, so the Scylla driver opens connections on
the normal port until it has seen every shard id (``HostConnection`` in the driver's
``pool.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ringflow.cql._connection import (
    DEFAULT_MAX_IN_FLIGHT,
    NEED_DATA,
    ConnectionClosed,
    ConnectionState,
    ProtocolErrorEvent,
    RequestEvent,
    ServerConnection,
)
from ringflow.cql._error_responses import ErrorResponse
from ringflow.cql._frame import DEFAULT_MAX_FRAME_SIZE
from ringflow.cql._requests import (
    Batch,
    EventType,
    Execute,
    Options,
    Prepare,
    Query,
    Register,
    Startup,
)
from ringflow.cql._responses import (
    PushEvent,
    Ready,
    Response,
    SchemaChangeEvent,
    ScyllaSharding,
    Supported,
)
from ringflow.cql._results import SchemaChange, SchemaChangeResult
from ringflow.cql._wire import LocalProtocolError
from ringflow.errors import ConfigurationError, ErrorCode, RingflowError

_log = logging.getLogger(__name__)

Statement = Query | Prepare | Execute | Batch
"""The requests a backend executes; the shell answers every other request itself."""

SessionT = TypeVar("SessionT")

READ_CHUNK_BYTES = 64 * 1024
_FRAME_SIZE_CEILING = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Handled:
    """A backend's answer plus every schema change the statement made (a CDC table's CREATE
    changes two tables, its answer names one), to push as events after the answer, and the
    warnings to send with it (native protocol v4 WARNING flag, e.g. no schema agreement)."""

    response: Response
    schema_changes: tuple[SchemaChange, ...] = ()
    warnings: tuple[str, ...] = ()


class Backend(Protocol[SessionT]):
    """What executes statements. ``open_session`` runs on the event loop; ``handle`` on the
    worker thread, in the order statements arrived on each connection. A plain response that
    is a SCHEMA_CHANGE result counts as ``Handled(response, (response.change,))``."""

    def open_session(self) -> SessionT: ...

    def handle(self, session: SessionT, statement: Statement) -> Response | Handled: ...


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Bounds of the native-protocol server (every field positive)."""

    max_connections: int = 512
    max_in_flight_per_connection: int = DEFAULT_MAX_IN_FLIGHT
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_pending_requests: int = 1024
    startup_timeout_s: float = 30.0
    """A connection that has not sent STARTUP after this long is closed."""
    shutdown_grace_s: float = 5.0
    """How long ``close`` waits for statements in flight."""

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ConfigurationError(f"ServerLimits.{name} must be positive, got {value!r}")
            if name.startswith("max_") and not isinstance(value, int):
                raise ConfigurationError(f"ServerLimits.{name} must be an int, got {value!r}")
        if self.max_frame_size > _FRAME_SIZE_CEILING:
            raise ConfigurationError(
                f"ServerLimits.max_frame_size must be at most {_FRAME_SIZE_CEILING} (a frame "
                f"length is a signed 32-bit int), got {self.max_frame_size}"
            )


@dataclass(slots=True)
class ServerStats:
    """Counters for tests and operators."""

    connections_accepted: int = 0
    connections_refused: int = 0
    requests: int = 0
    protocol_errors: int = 0
    server_errors: int = 0
    """Statements answered with ServerError (0x0000); counted on the worker thread."""
    connection_failures: int = 0
    """Connection loops that died of an unexpected exception (a bug; the server went on)."""
    events_pushed: int = 0


@dataclass(eq=False, slots=True)
class _Client(Generic[SessionT]):
    """One open client connection: its protocol state, transport and subscriptions."""

    connection: ServerConnection
    writer: asyncio.StreamWriter
    session: SessionT
    shard: int
    events: set[EventType] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def peer(self) -> str:
        return str(self.writer.get_extra_info("peername"))


def _error_of(error: RingflowError) -> ErrorResponse:
    """The ERROR frame body for a ringflow exception (its own code when it has a plain body)."""
    try:
        return ErrorResponse(int(error.code), str(error))
    except LocalProtocolError:
        # A code whose body needs extra fields the exception does not carry.
        return ErrorResponse(ErrorCode.SERVER_ERROR, f"{type(error).__name__}: {error}")


class CqlServer(Generic[SessionT]):
    """Serves one backend on ``host:port``. Use ``start``, then ``close``."""

    def __init__(
        self,
        backend: Backend[SessionT],
        worker: concurrent.futures.Executor,
        *,
        host: str,
        port: int,
        limits: ServerLimits | None = None,
        shard_count: int = 1,
        ignore_msb: int = 12,
    ) -> None:
        self._backend = backend
        self._worker = worker
        self._host = host
        self._port = port
        self.limits = limits or ServerLimits()
        self._sharding = (shard_count, ignore_msb)
        self._clients: set[_Client[SessionT]] = set()
        self._connection_tasks: set[asyncio.Task[None]] = set()
        self._pending: asyncio.Semaphore | None = None
        self._server: asyncio.Server | None = None
        self._next_shard = 0
        self._open_connections = 0
        self.stats = ServerStats()

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        if self._server is None or not self._server.sockets:
            raise LocalProtocolError("the server is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        """Listen; ConfigurationError if the address cannot be bound (in use, not local)."""
        self._pending = asyncio.Semaphore(self.limits.max_pending_requests)
        try:
            self._server = await asyncio.start_server(
                self._accept,
                self._host,
                self._port,
                reuse_address=True,
                limit=READ_CHUNK_BYTES,
            )
        except OSError as error:
            raise ConfigurationError(
                f"cannot listen on {self._host}:{self._port}: {error.strerror or error}"
            ) from None

    async def close(self) -> None:
        """Stop accepting, let statements in flight finish (bounded), close every connection."""
        if self._server is not None:
            self._server.close()
        grace = self.limits.shutdown_grace_s
        in_flight = [task for client in self._clients for task in client.tasks]
        if in_flight:
            await asyncio.wait(in_flight, timeout=grace)
        for client in list(self._clients):
            client.writer.close()
        if self._connection_tasks:
            _done, late = await asyncio.wait(set(self._connection_tasks), timeout=grace)
            for task in late:
                task.cancel()
        if self._server is not None:
            await self._server.wait_closed()

    def push(self, event: PushEvent, event_type: EventType) -> None:
        """Push ``event`` to every connection registered for ``event_type``."""
        for client in list(self._clients):
            if event_type in client.events and not client.writer.is_closing():
                client.writer.write(client.connection.send(event, -1))
                self.stats.events_pushed += 1

    # --- connections ---------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connection_tasks.add(task)
        self._open_connections += 1
        try:
            if self._open_connections > self.limits.max_connections:
                self.stats.connections_refused += 1
                await self._refuse(reader, writer)
            else:
                self.stats.connections_accepted += 1
                await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass
        except Exception:
            self.stats.connection_failures += 1
            _log.exception("CQL connection from %s failed", writer.get_extra_info("peername"))
        finally:
            self._open_connections -= 1
            writer.close()
            if task is not None:
                self._connection_tasks.discard(task)

    def _new_client(self, writer: asyncio.StreamWriter) -> _Client[SessionT]:
        limits = self.limits
        connection = ServerConnection(
            max_frame_size=limits.max_frame_size,
            max_in_flight=limits.max_in_flight_per_connection,
        )
        shard = self._next_shard
        self._next_shard = (shard + 1) % self._sharding[0]
        return _Client(connection, writer, self._backend.open_session(), shard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = self._new_client(writer)
        self._clients.add(client)
        try:
            await self._read_loop(reader, client)
        finally:
            self._clients.discard(client)
            self.stats.protocol_errors += client.connection.protocol_error_count
            if client.tasks:
                await asyncio.wait(client.tasks, timeout=self.limits.shutdown_grace_s)

    async def _read_loop(self, reader: asyncio.StreamReader, client: _Client[SessionT]) -> None:
        connection = client.connection
        while True:
            event = connection.next_event()
            if event is NEED_DATA:
                connection.receive_data(await self._receive(reader, connection))
            elif isinstance(event, ConnectionClosed):
                return
            elif isinstance(event, ProtocolErrorEvent):
                await self._send(client, event.error, event.stream_id)
                if event.fatal:
                    return
            else:
                await self._dispatch(client, event)

    async def _receive(self, reader: asyncio.StreamReader, connection: ServerConnection) -> bytes:
        """The next bytes from the client; ``b""`` on EOF, reset or handshake timeout."""
        timeout = None
        if connection.state is ConnectionState.EXPECTING_STARTUP:
            timeout = self.limits.startup_timeout_s
        try:
            return await asyncio.wait_for(reader.read(READ_CHUNK_BYTES), timeout)
        except (ConnectionError, TimeoutError):
            return b""

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer the first request of a connection over the limit with Overloaded; close."""
        connection = ServerConnection(max_frame_size=self.limits.max_frame_size)
        message = f"Too many connections to this node (limit {self.limits.max_connections})"
        while True:
            event = connection.next_event()
            if event is NEED_DATA:
                connection.receive_data(await self._receive(reader, connection))
                continue
            if isinstance(event, RequestEvent | ProtocolErrorEvent):
                refusal = ErrorResponse(ErrorCode.OVERLOADED, message)
                if isinstance(event, ProtocolErrorEvent):
                    refusal = event.error
                writer.write(connection.send(refusal, event.stream_id))
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
            return

    # --- requests ------------------------------------------------------------------------------

    async def _dispatch(self, client: _Client[SessionT], event: RequestEvent) -> None:
        self.stats.requests += 1
        request = event.request
        if isinstance(request, Options):
            sharding = ScyllaSharding(client.shard, *self._sharding)
            await self._send(client, Supported.for_node(sharding=sharding), event.stream_id)
        elif isinstance(request, Startup):
            await self._send(client, Ready(), event.stream_id)
        elif isinstance(request, Register):
            client.events.update(request.event_types)
            await self._send(client, Ready(), event.stream_id)
        elif isinstance(request, Query | Prepare | Execute | Batch):
            await self._submit(client, request, event.stream_id)
        else:
            message = f"{type(request).__name__} is not supported by this server"
            await self._send(
                client, ErrorResponse(ErrorCode.PROTOCOL_ERROR, message), event.stream_id
            )

    async def _submit(
        self, client: _Client[SessionT], statement: Statement, stream_id: int
    ) -> None:
        """Queue ``statement`` for the worker once a pending slot is free (back-pressure)."""
        pending = self._pending
        if pending is None:
            raise LocalProtocolError("the server is not started")
        await pending.acquire()
        task = asyncio.create_task(self._run(client, statement, stream_id, pending))
        client.tasks.add(task)
        task.add_done_callback(client.tasks.discard)

    async def _run(
        self,
        client: _Client[SessionT],
        statement: Statement,
        stream_id: int,
        pending: asyncio.Semaphore,
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            handled = await loop.run_in_executor(
                self._worker, self._execute, client.session, statement
            )
        finally:
            pending.release()
        await self._send(client, handled.response, stream_id, handled.warnings)
        for change in handled.schema_changes:
            self.push(SchemaChangeEvent(change), EventType.SCHEMA_CHANGE)

    def _execute(self, session: SessionT, statement: Statement) -> Handled:
        """Runs on the worker thread: the backend's answer, or the ERROR for its exception."""
        try:
            answer = self._backend.handle(session, statement)
        except RingflowError as error:
            if error.code == ErrorCode.SERVER_ERROR:
                self.stats.server_errors += 1
                _log.error("server error on %s: %s", type(statement).__name__, error)
            return Handled(_error_of(error))
        except Exception as error:
            self.stats.server_errors += 1
            _log.exception("bug: unexpected exception executing %s", type(statement).__name__)
            return Handled(
                ErrorResponse(ErrorCode.SERVER_ERROR, f"{type(error).__name__}: {error}")
            )
        if isinstance(answer, Handled):
            return answer
        if isinstance(answer, SchemaChangeResult):
            return Handled(answer, (answer.change,))
        return Handled(answer)

    async def _send(
        self,
        client: _Client[SessionT],
        response: Response,
        stream_id: int,
        warnings: tuple[str, ...] = (),
    ) -> None:
        frame = client.connection.send(response, stream_id, warnings=warnings)
        writer = client.writer
        if writer.is_closing():
            return
        writer.write(frame)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    def clients(self) -> Iterator[tuple[str, int, frozenset[EventType]]]:
        """(peer, shard, registered events) of every open connection, for diagnostics."""
        for client in self._clients:
            yield client.peer, client.shard, frozenset(client.events)
