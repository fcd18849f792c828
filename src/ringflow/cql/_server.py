"""The asyncio shell serving the CQL native protocol: sockets in, ``ServerConnection`` per client.

Thin by design (STYLE.md "pure cores, thin shells"): framing, state and protocol errors belong to
the sans-IO ``ServerConnection``; statements belong to a ``Backend`` (the executor behind an
adapter). This module only moves bytes, answers the handshake (OPTIONS, STARTUP, REGISTER),
hands statements to the backend on ONE worker thread, writes answers back and pushes events.

Rules:

* **The event loop never blocks.** Every backend call (parsing, storage, SQLite) runs on the
  ``worker`` executor, which the node creates with exactly one thread, so the store is used from
  one thread and statements of one connection run in arrival order.
* **Every queue is bounded** (limits and their defaults: ``_server_limits``). A connection has
  at most ``max_in_flight_per_connection`` requests in flight (beyond that ``ServerConnection``
  answers Overloaded); the node has at most ``max_pending_requests`` statements queued for or
  running on the worker: when they are all taken, connections stop reading (TCP
  back-pressure) until one finishes. Of those, at most ``max_statements_in_flight`` have
  started (from their hand-off to the worker, where a write takes its timestamp, to their
  answer, pending writes and reads included); the others wait in a queue on the event loop
  (bounded: each holds a pending slot), no thread held. A statement's answer comes back to
  the loop from the thread that finished it, with the others finished meanwhile (one
  ``call_soon_threadsafe`` for them all: a group commit's answers wake the loop once), and
  they are written without waiting, one ``write`` per connection for them all; a connection
  whose client does not read its answers (its transport over the high-water mark) has no
  more statements started, and is not read, until they drain.
* **Request bytes are budgeted** (``_budget``, Cassandra's
  ``native_transport_max_request_data_in_flight[_per_ip]``): before reading more from a
  connection the shell reserves what it holds, the whole frame once its header is here; when
  the budget is full that connection is not read (the StreamReader's buffer fills and it
  pauses the transport) until answers release bytes. A header announcing more than
  ``max_frame_size`` is answered with a protocol error and the connection closed, its body
  never buffered.
* **Timeouts close a connection**: no STARTUP (and login) within ``startup_timeout_s``; a frame
  begun and not complete within ``frame_body_timeout_s``; nothing received for ``idle_timeout_s``
  (when set) while no request is in flight. A read's deadline that runs out is checked against
  the connection as it is then: a login answered meanwhile (from the login worker) leaves no
  startup timeout to apply.
* **Answers in completion order**, each on its request's stream id (spec §2.3).
* **Connections beyond ``max_concurrent_connections``, or beyond
  ``max_concurrent_connections_per_ip`` from one address,** have their first request
  answered with Overloaded (0x1001) naming the limit, then are closed; a refused connection
  waits at most ``_REFUSAL_WAIT_S`` for that request and refusals do not count against the
  limits, so one client holding its share can never lock another out.
* **Every request gets an answer or its connection is closed.** Protocol errors are the
  connection's business; a backend exception that is a ``RingflowError`` becomes an ERROR with
  its code; any other exception becomes ServerError (0x0000), is logged with its traceback
  and counted (``stats.server_errors``): it is a bug. An answer the wire cannot carry (a long
  literal echoed into an error message, a long alias in result metadata) goes refitted
  (``_refit``: truncated, or InvalidRequest) and is counted (``stats.refitted_answers``); if
  none can be encoded, the connection is closed (``stats.unsendable_answers``). A failure
  inside one connection's loop or answer task is logged and closes that connection only.
* **Events.** REGISTER records the connection's event types. A SCHEMA_CHANGE result is pushed
  as an EVENT (stream -1) to every connection registered for SCHEMA_CHANGE, after the answer to
  the statement that caused it.
* **Shutdown** (``close``): stop accepting, let statements in flight finish (at most
  ``shutdown_grace_s``), then close every connection.

TLS (issue 18): given ``tls`` (a ``NativeTls``, the node's ``client_encryption_options``), the
port is served by ``_tls_listener``: TLS required or optional (the first byte sniffed), the
handshake bounded, plaintext on a required port answered with a protocol error and closed.
Logins (an ``authenticator``) run on ``login_worker``, one AUTH_RESPONSE at a time per
connection; an address with too many failed logins in a window is refused without a password
check (``_login_throttle``, ``login_limits``; ``stats.throttled_logins``).

Scylla sharding: each connection is told a shard id (round-robin over ``shard_count``) in its
SUPPORTED options. No shard-aware port is advertised, so the Scylla driver opens connections on
the normal port until it has seen every shard id (``HostConnection`` in the driver's
``pool.py``).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ringflow.cql._budget import RequestDataBudget
from ringflow.cql._connection import (
    NEED_DATA,
    ConnectionClosed,
    ConnectionState,
    ProtocolErrorEvent,
    RequestEvent,
    ServerConnection,
)
from ringflow.cql._error_responses import ErrorResponse
from ringflow.cql._login_throttle import LoginLimits, LoginThrottle
from ringflow.cql._requests import (
    AuthResponse,
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
    Authenticate,
    AuthSuccess,
    PushEvent,
    Ready,
    Response,
    SchemaChangeEvent,
    ScyllaSharding,
    Supported,
)
from ringflow.cql._results import SchemaChange, SchemaChangeResult
from ringflow.cql._server_limits import ServerLimits, ServerStats
from ringflow.cql._tls_listener import NativeTls, TlsListener, listening_socket
from ringflow.cql._wire import LocalProtocolError
from ringflow.errors import ConfigurationError, ErrorCode, RingflowError

_log = logging.getLogger(__name__)

Statement = Query | Prepare | Execute | Batch
"""The requests a backend executes; the shell answers every other request itself."""

SessionT = TypeVar("SessionT")
SessionIn = TypeVar("SessionIn", contravariant=True)

READ_CHUNK_BYTES = 64 * 1024
_BULK_READ_BYTES = 1024 * 1024
"""Largest read while a frame's body is due: whatever the stream holds (its buffer is bounded
by ``READ_CHUNK_BYTES``), in fewer, larger steps."""
_REFUSAL_WAIT_S = 2.0
"""How long a refused connection may take to send the request its refusal answers."""
_LISTEN_BACKLOG = 128
"""The kernel's queue of connections waiting to be accepted."""
_ACCEPTS_PER_STEP = 8
"""How many waiting connections one loop step accepts. asyncio accepts up to its ``backlog``
in one callback and sets up each in the next step (a transport, a reader and a task apiece):
a storm of 2,000 connections at 1,024 a step stalled every other client for ~200 ms
(bench_hostile, p99 7.4x). The listening socket keeps the deeper kernel queue."""


@dataclass(frozen=True, slots=True)
class Handled:
    """A backend's answer plus every schema change the statement made (a CDC table's CREATE
    changes two tables, its answer names one), to push as events after the answer, and the
    warnings to send with it (native protocol v4 WARNING flag, e.g. no schema agreement)."""

    response: Response
    schema_changes: tuple[SchemaChange, ...] = ()
    warnings: tuple[str, ...] = ()
    pending: concurrent.futures.Future[Response | Handled] | None = None
    """The statement's work still in progress (a write in a group commit or at its replicas,
    a read, a DDL's schema agreement): the server waits for it with no thread waiting (on the
    event loop, or a shell's callback) and sends what it is done with instead of ``response``
    (the answer, or the error that refused the write; a ``Handled`` replaces this one whole)."""


def when_answered(
    handled: Handled, done: Callable[[Handled], None], on_bug: Callable[[BaseException], None]
) -> None:
    """Call ``done`` with ``handled`` once its pending work is over: with the answer that work
    gives, following a ``Handled`` it gives to the end of its own pending work. ``done`` runs
    on the thread that finishes the work (at once when there is none). Work that fails with
    an exception instead of an answer is a bug: ``on_bug`` is told, and ``done`` gets a
    ServerError answer."""
    pending = handled.pending
    if pending is None:
        done(handled)
        return

    def finished(future: concurrent.futures.Future[Response | Handled]) -> None:
        try:
            found = future.result()
        except BaseException as error:
            on_bug(error)
            response = ErrorResponse(ErrorCode.SERVER_ERROR, f"{type(error).__name__}: {error}")
            done(dataclasses.replace(handled, response=response, pending=None))
            return
        if isinstance(found, Handled):  # it handed on work of its own: whole, in its place
            when_answered(found, done, on_bug)
        else:
            done(dataclasses.replace(handled, response=found, pending=None))

    pending.add_done_callback(finished)


class Backend(Protocol[SessionT]):
    """What executes statements. ``open_session`` runs on the event loop; ``handle`` on the
    worker thread, in the order statements arrived on each connection. A plain response that
    is a SCHEMA_CHANGE result counts as ``Handled(response, (response.change,))``."""

    def open_session(self) -> SessionT: ...

    def handle(self, session: SessionT, statement: Statement) -> Response | Handled: ...


class Authenticator(Protocol[SessionIn]):
    """Logs a connection in (SASL, one round): ``authenticate`` runs on the login worker (a
    password check is CPU), records the role in ``session`` or raises a ``RingflowError``
    (AuthenticationFailed, 0x0100); or it answers a future that does or fails so later (the
    role read through the cluster, no thread waiting)."""

    authenticator_class: str
    """What AUTHENTICATE names, e.g. ``org.apache.cassandra.auth.PasswordAuthenticator``."""

    def authenticate(
        self, session: SessionIn, token: bytes | None
    ) -> concurrent.futures.Future[None] | None: ...


@dataclass(eq=False, slots=True)
class _Client(Generic[SessionT]):
    """One open client connection: its protocol state, transport, subscriptions and budget."""

    connection: ServerConnection
    writer: asyncio.StreamWriter
    session: SessionT
    shard: int
    address: str
    events: set[EventType] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    """Logins in progress (a task each)."""
    statements: int = 0
    """Statements of this connection queued or running, not yet answered."""
    all_answered: asyncio.Future[None] | None = None
    """Done when ``statements`` comes down to 0 while the connection's end waits for it."""
    outbox: list[bytes] = field(default_factory=list)
    """Answers taken together (``_take_answers``), written at once after them (``_flush``)."""
    reserved: int = 0
    """Bytes of the request-data budget this connection holds."""
    frame_started: float | None = None
    """Loop time the frame being read began arriving (the body timeout counts from it)."""

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


def execute_statement(
    backend: Backend[SessionT], session: SessionT, statement: Statement, stats: ServerStats
) -> Handled:
    """``backend``'s answer to ``statement``, or the ERROR for its exception: a
    ``RingflowError`` keeps its code, anything else is a ServerError (a bug: logged, counted
    in ``stats.server_errors``). A SCHEMA_CHANGE result carries its change to push."""
    try:
        answer = backend.handle(session, statement)
    except RingflowError as error:
        if error.code == ErrorCode.SERVER_ERROR:
            stats.server_errors += 1
            _log.error("server error on %s: %s", type(statement).__name__, error)
        return Handled(_error_of(error))
    except Exception as error:
        stats.server_errors += 1
        _log.exception("bug: unexpected exception executing %s", type(statement).__name__)
        return Handled(ErrorResponse(ErrorCode.SERVER_ERROR, f"{type(error).__name__}: {error}"))
    if isinstance(answer, Handled):
        return answer
    if isinstance(answer, SchemaChangeResult):
        return Handled(answer, (answer.change,))
    return Handled(answer)


def _address_of(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return str(peer)


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
        tls: NativeTls | None = None,
        authenticator: Authenticator[SessionT] | None = None,
        login_worker: concurrent.futures.Executor | None = None,
        login_limits: LoginLimits | None = None,
    ) -> None:
        self._backend = backend
        self._tls = tls
        self._tls_listener: TlsListener | None = None
        self._authenticator = authenticator
        self._login_worker = login_worker or worker
        """Where logins run (bcrypt costs ~0.1 s of CPU): a single node passes a pool of its own
        so that a flood of logins does not queue its statements behind them."""
        self.login_throttle = LoginThrottle(login_limits)
        """Failed logins per client address (``_login_throttle``)."""
        self._worker = worker
        self._host = host
        self._port = port
        self.limits = limits = limits or ServerLimits()
        self._sharding = (shard_count, ignore_msb)
        self._clients: set[_Client[SessionT]] = set()
        self._connection_tasks: set[asyncio.Task[None]] = set()
        self._pending: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: collections.deque[tuple[_Client[SessionT], Statement, int]] = (
            collections.deque()
        )
        """Statements holding a pending slot, waiting for one of ``max_statements_in_flight``
        (at most ``max_pending_requests``)."""
        self._answers: list[tuple[_Client[SessionT], int, Handled]] = []
        """Answers finished and not yet taken by the loop (under ``_answers_lock``; at most
        one per statement in flight)."""
        self._answers_lock = threading.Lock()
        self._answers_called = False
        """Whether the loop has been called to take ``_answers``."""
        self._taking = False
        """Whether the loop is taking answers: frames go to the outboxes, written after."""
        self._filled: list[_Client[SessionT]] = []
        """The connections whose outbox frames were put in while taking answers."""
        self._unanswered = 0
        """Statements queued or running, not yet answered, over every connection."""
        self._all_answered: asyncio.Future[None] | None = None
        """Done when ``_unanswered`` comes down to 0 while ``close`` waits for it."""
        self.in_flight = 0
        """Statements started and not yet answered (``max_statements_in_flight``)."""
        self.most_in_flight = 0
        """The most statements in flight at once so far (``max_statements_in_flight``)."""
        self._server: asyncio.Server | None = None
        self._next_shard = 0
        self._served: Counter[str] = Counter()
        self._refusing = 0
        self.budget = RequestDataBudget(
            limits.max_request_data_in_flight, limits.max_request_data_in_flight_per_ip
        )
        self._budget_waiters: set[asyncio.Future[None]] = set()
        self.stats = ServerStats()

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        if self._tls_listener is not None:
            return self._tls_listener.port
        if self._server is None or not self._server.sockets:
            raise LocalProtocolError("the server is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def open_connections(self) -> int:
        """Connections being served (refused ones not included)."""
        return self._served.total()

    async def start(self) -> None:
        """Listen; ConfigurationError if the address cannot be bound (in use, not local)."""
        self._pending = asyncio.Semaphore(self.limits.max_pending_requests)
        self._loop = asyncio.get_running_loop()
        try:
            if self._tls is not None:
                listener = TlsListener(
                    self._tls,
                    self._accept,
                    self._refuse_plaintext,
                    self.stats,
                    read_limit=READ_CHUNK_BYTES,
                )
                listener.start(self._host, self._port, _LISTEN_BACKLOG)
                self._tls_listener = listener
                return
            sock = listening_socket(self._host, self._port, _LISTEN_BACKLOG)
            # asyncio's backlog is both listen()'s and the accepts per step: it gets the
            # latter, then the socket is given its kernel queue back
            self._server = await asyncio.start_server(
                self._accept, sock=sock, limit=READ_CHUNK_BYTES, backlog=_ACCEPTS_PER_STEP
            )
            sock.listen(_LISTEN_BACKLOG)
        except OSError as error:
            raise ConfigurationError(
                f"cannot listen on {self._host}:{self._port}: {error.strerror or error}"
            ) from None

    async def close(self) -> None:
        """Stop accepting, let statements in flight finish (bounded), close every connection."""
        if self._server is not None:
            self._server.close()
        if self._tls_listener is not None:
            self._tls_listener.close()
        grace = self.limits.shutdown_grace_s
        logins = [task for client in self._clients for task in client.tasks]
        if self._unanswered:
            self._all_answered = asyncio.get_running_loop().create_future()
            logins.append(asyncio.ensure_future(self._all_answered))
        if logins:
            await asyncio.wait(logins, timeout=grace)
        for client in list(self._clients):
            client.writer.close()
        if self._connection_tasks:
            _done, late = await asyncio.wait(set(self._connection_tasks), timeout=grace)
            for task in late:
                task.cancel()
        if self._server is not None:
            await self._server.wait_closed()
        if self._tls_listener is not None:
            await self._tls_listener.wait_closed()

    def push(self, event: PushEvent, event_type: EventType) -> None:
        """Push ``event`` to every connection registered for ``event_type``."""
        for client in list(self._clients):
            if event_type in client.events and not client.writer.is_closing():
                try:
                    frame = client.connection.send(event, -1)
                except LocalProtocolError as error:
                    self.stats.pushes_dropped += 1
                    _log.error("event %s not pushed: %s", type(event).__name__, error)
                    return
                self._write(client, frame)
                self.stats.events_pushed += 1

    # --- connections ---------------------------------------------------------------------------

    def _refusal(self, address: str) -> str | None:
        """Why a new connection from ``address`` is refused, or ``None`` to serve it."""
        limits = self.limits
        if self._served.total() >= limits.max_concurrent_connections:
            return (
                "Too many connections to this node "
                f"(limit {limits.max_concurrent_connections}, native_transport_max_concurrent_"
                "connections)"
            )
        if self._served[address] >= limits.max_concurrent_connections_per_ip:
            return (
                f"Too many connections from {address} "
                f"(limit {limits.max_concurrent_connections_per_ip}, native_transport_max_"
                "concurrent_connections_per_ip)"
            )
        return None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connection_tasks.add(task)
        address = _address_of(writer)
        try:
            refusal = self._refusal(address)
            if refusal is not None:
                self.stats.connections_refused += 1
                await self._refuse(reader, writer, refusal)
            else:
                self.stats.connections_accepted += 1
                self._served[address] += 1
                try:
                    await self._serve(reader, writer, address)
                finally:
                    self._served[address] -= 1
                    if self._served[address] <= 0:
                        del self._served[address]
        except asyncio.CancelledError:
            pass
        except Exception:
            self.stats.connection_failures += 1
            _log.exception("CQL connection from %s failed", writer.get_extra_info("peername"))
        finally:
            writer.close()
            if task is not None:
                self._connection_tasks.discard(task)

    def _new_client(self, writer: asyncio.StreamWriter, address: str) -> _Client[SessionT]:
        limits = self.limits
        connection = ServerConnection(
            max_frame_size=limits.max_frame_size,
            max_in_flight=limits.max_in_flight_per_connection,
            authenticate=self._authenticator is not None,
        )
        shard = self._next_shard
        self._next_shard = (shard + 1) % self._sharding[0]
        return _Client(connection, writer, self._backend.open_session(), shard, address)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str
    ) -> None:
        client = self._new_client(writer, address)
        self._clients.add(client)
        try:
            await self._read_loop(reader, client)
        finally:
            self._clients.discard(client)
            self.stats.protocol_errors += client.connection.protocol_error_count
            waits: list[asyncio.Future[None]] = list(client.tasks)
            if client.statements:  # every request read gets its answer before the close
                client.all_answered = asyncio.get_running_loop().create_future()
                waits.append(client.all_answered)
            if waits:
                await asyncio.wait(waits, timeout=self.limits.shutdown_grace_s)
            self._give_back(client, client.reserved)

    async def _read_loop(self, reader: asyncio.StreamReader, client: _Client[SessionT]) -> None:
        connection = client.connection
        while True:
            self._settle(client)
            event = connection.next_event()
            if event is NEED_DATA:
                await self._admit(client)
                await self._drained(client)
                connection.receive_data(await self._receive(reader, client))
            elif isinstance(event, ConnectionClosed):
                return
            elif isinstance(event, ProtocolErrorEvent):
                await self._send(client, event.error, event.stream_id)
                if event.fatal:
                    return
            else:
                await self._dispatch(client, event)

    # --- the request-data budget ---------------------------------------------------------------

    async def _admit(self, client: _Client[SessionT]) -> None:
        """Reserve what the connection holds (the whole frame once its header is here) before
        reading more; while the budget is full, do not read it (back-pressure)."""
        need = client.connection.held_bytes - client.reserved
        if need <= 0:
            return
        paused = False
        while not self.budget.try_reserve(client.address, need):
            if self.limits.throw_on_overload:
                refusal = client.connection.refuse_head_frame(
                    "Request data in flight is over the node's budget "
                    f"(native_transport_max_request_data_in_flight "
                    f"{self.limits.max_request_data_in_flight}, per ip "
                    f"{self.limits.max_request_data_in_flight_per_ip})"
                )
                if refusal is not None:
                    self.stats.frames_overloaded += 1
                    await self._send(client, refusal.error, refusal.stream_id)
                    return
            if not paused:
                paused = True
                self.stats.reads_paused += 1
            waiter = asyncio.get_running_loop().create_future()
            self._budget_waiters.add(waiter)
            try:
                await waiter
            finally:
                self._budget_waiters.discard(waiter)
        client.reserved += need
        if paused:
            client.frame_started = None  # the wait was ours: the body timeout starts now

    def _settle(self, client: _Client[SessionT]) -> None:
        """Give back what the connection reserved and no longer holds."""
        surplus = client.reserved - client.connection.held_bytes
        if surplus > 0:
            self._give_back(client, surplus)

    def _give_back(self, client: _Client[SessionT], size: int) -> None:
        if size <= 0:
            return
        client.reserved -= size
        self.budget.release(client.address, size)
        for waiter in self._budget_waiters:
            if not waiter.done():
                waiter.set_result(None)

    # --- reading -------------------------------------------------------------------------------

    def _read_timeout(self, client: _Client[SessionT]) -> tuple[float | None, str]:
        """How long the next read may wait, and what it is called when it runs out."""
        connection = client.connection
        limits = self.limits
        if connection.frame_in_progress:
            now = asyncio.get_running_loop().time()
            if client.frame_started is None:
                client.frame_started = now
            left = client.frame_started + limits.frame_body_timeout_s - now
            return max(left, 0.0), "frame body timeout"
        client.frame_started = None
        if connection.state in (ConnectionState.EXPECTING_STARTUP, ConnectionState.AUTHENTICATING):
            return limits.startup_timeout_s, "startup timeout"
        if limits.idle_timeout_s and not connection.in_flight:
            return limits.idle_timeout_s, "idle timeout"
        return None, ""

    async def _receive(self, reader: asyncio.StreamReader, client: _Client[SessionT]) -> bytes:
        """The next bytes from the client; ``b""`` on EOF, reset or a timeout."""
        while True:
            timeout, what = self._read_timeout(client)
            try:
                size = min(max(client.connection.missing_bytes, READ_CHUNK_BYTES), _BULK_READ_BYTES)
                return await asyncio.wait_for(reader.read(size), timeout)
            except ConnectionError:
                return b""
            except TimeoutError:
                if self._read_timeout(client)[1] != what:
                    # The connection moved on while this read waited: a login answered from
                    # the login worker (READY: no startup timeout), a request became in flight
                    # (not idle). A stale deadline would close a connection that is fine.
                    continue
                self.stats.connections_timed_out += 1
                connection = client.connection
                _log.info(
                    "closing CQL connection from %s: %s (%s, %d requests in flight)",
                    client.peer,
                    what,
                    connection.state.value,
                    len(connection.in_flight),
                )
                return b""

    async def _refuse_plaintext(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """A plaintext client on a port that requires TLS: its first request is answered
        with a protocol error saying so, then the connection is closed (``_tls_listener``)."""
        message = (
            "this native port requires TLS (client_encryption_options enabled, not optional): "
            "connect with SSL"
        )
        try:
            await self._refuse(reader, writer, message, ErrorCode.PROTOCOL_ERROR)
        finally:
            writer.close()

    async def _refuse(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        message: str,
        code: ErrorCode = ErrorCode.OVERLOADED,
    ) -> None:
        """Answer the first request of a connection over a limit with Overloaded, and close.

        At most ``max_concurrent_connections`` refusals wait for their first request, each for
        at most ``_REFUSAL_WAIT_S``; beyond that a connection is closed at once (Cassandra
        always closes at once; the answer tells a driver why)."""
        if self._refusing >= self.limits.max_concurrent_connections:
            return
        self._refusing += 1
        try:
            connection = ServerConnection(max_frame_size=self.limits.max_frame_size)
            while True:
                event = connection.next_event()
                if event is NEED_DATA:
                    try:
                        data = await asyncio.wait_for(
                            reader.read(READ_CHUNK_BYTES), _REFUSAL_WAIT_S
                        )
                    except (ConnectionError, TimeoutError):
                        data = b""
                    connection.receive_data(data)
                    continue
                if isinstance(event, RequestEvent | ProtocolErrorEvent):
                    refusal = ErrorResponse(code, message)
                    if isinstance(event, ProtocolErrorEvent):
                        refusal = event.error
                    writer.write(connection.send(refusal, event.stream_id))
                    with contextlib.suppress(ConnectionError):
                        await asyncio.wait_for(writer.drain(), _REFUSAL_WAIT_S)
                return
        except TimeoutError:
            return
        finally:
            self._refusing -= 1

    # --- requests ------------------------------------------------------------------------------

    async def _dispatch(self, client: _Client[SessionT], event: RequestEvent) -> None:
        self.stats.requests += 1
        request = event.request
        if isinstance(request, Options):
            sharding = ScyllaSharding(client.shard, *self._sharding)
            await self._send(client, Supported.for_node(sharding=sharding), event.stream_id)
        elif isinstance(request, Startup):
            if self._authenticator is not None:
                answer: Response = Authenticate(self._authenticator.authenticator_class)
            else:
                answer = Ready()
            await self._send(client, answer, event.stream_id)
        elif isinstance(request, AuthResponse):
            await self._submit_login(client, request, event.stream_id)
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
        """Queue ``statement`` once a pending slot is free (back-pressure: the connection is
        not read meanwhile), and once the client has read enough of the answers it was sent
        (the transport below its high-water mark); it starts at once if fewer than
        ``max_statements_in_flight`` run, else when one of them is answered."""
        pending = self._pending
        if pending is None:
            raise LocalProtocolError("the server is not started")
        await self._drained(client)  # its client reads the answers it has before more come
        await pending.acquire()
        client.statements += 1
        self._unanswered += 1
        if self.in_flight < self.limits.max_statements_in_flight:
            self._begin(client, statement, stream_id)
        else:
            self._waiting.append((client, statement, stream_id))

    def _begin(self, client: _Client[SessionT], statement: Statement, stream_id: int) -> None:
        """Hand ``statement`` to the worker; its answer (once its pending work is over) comes
        back to the loop once, to ``_answered``, from the thread that finished it."""
        loop = self._loop
        if loop is None:
            raise LocalProtocolError("the server is not started")
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)

        def answered(handled: Handled) -> None:  # on whichever thread finished it
            with self._answers_lock:
                self._answers.append((client, stream_id, handled))
                if self._answers_called:
                    return
                self._answers_called = True
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody left to answer
                loop.call_soon_threadsafe(self._take_answers)

        def run() -> None:  # on the worker thread
            when_answered(self._execute(client.session, statement), answered, self._bug)

        try:
            self._worker.submit(run)
        except RuntimeError as error:  # the worker is shut down (the node is stopping)
            answer = ErrorResponse(ErrorCode.SERVER_ERROR, f"the node is stopping: {error}")
            # answered in a later step, not here: ``_answered`` starts the next statement
            # waiting, whose hand-off fails the same way, and so on through the whole queue
            loop.call_soon(self._answered, client, stream_id, Handled(answer))

    def _bug(self, error: BaseException) -> None:
        self.stats.server_errors += 1
        _log.error("bug: a statement's pending work failed outside its answer", exc_info=error)

    def _take_answers(self) -> None:
        """On the loop: every answer finished since the last call, each connection's written
        at once after them."""
        with self._answers_lock:
            answers, self._answers = self._answers, []
            self._answers_called = False
        self._taking = True
        try:
            for client, stream_id, handled in answers:
                self._answered(client, stream_id, handled)
        finally:
            self._taking = False
            filled, self._filled = self._filled, []
            for client in filled:
                self._flush(client)

    def _answered(self, client: _Client[SessionT], stream_id: int, handled: Handled) -> None:
        """On the loop: free the statement's slots, start the next one waiting, send its
        answer and push its schema changes. Never dies silently: an unexpected exception
        here is logged, counted, and closes the connection (its request cannot be answered)."""
        self.in_flight -= 1
        client.statements -= 1
        self._unanswered -= 1
        if self._pending is not None:
            self._pending.release()
        if self._waiting and self.in_flight < self.limits.max_statements_in_flight:
            self._begin(*self._waiting.popleft())
        for count, done in (
            (client.statements, client.all_answered),
            (self._unanswered, self._all_answered),
        ):
            if not count and done is not None and not done.done():
                done.set_result(None)
        try:
            self._reply(client, handled.response, stream_id, handled.warnings)
            for change in handled.schema_changes:
                self.push(SchemaChangeEvent(change), EventType.SCHEMA_CHANGE)
        except Exception:
            self.stats.connection_failures += 1
            _log.exception("bug: answering stream %d from %s failed", stream_id, client.peer)
            client.writer.close()

    async def _submit_login(
        self, client: _Client[SessionT], request: AuthResponse, stream_id: int
    ) -> None:
        """Check an AUTH_RESPONSE on the worker (bcrypt and role reads block) and answer
        AUTH_SUCCESS (the connection is then READY) or the login's error."""
        pending = self._pending
        if pending is None:
            raise LocalProtocolError("the server is not started")
        await pending.acquire()
        task = asyncio.create_task(self._login(client, request, stream_id, pending))
        client.tasks.add(task)
        task.add_done_callback(client.tasks.discard)

    async def _login(
        self,
        client: _Client[SessionT],
        request: AuthResponse,
        stream_id: int,
        pending: asyncio.Semaphore,
    ) -> None:
        authenticator = self._authenticator
        if authenticator is None:
            raise LocalProtocolError("AUTH_RESPONSE accepted without an authenticator")
        loop = asyncio.get_running_loop()
        answer: Response
        refusal = None
        try:
            try:
                refusal = self.login_throttle.refusal(client.address, loop.time())
                if refusal is not None:  # too many failures from there: no bcrypt check
                    self.stats.throttled_logins += 1
                    raise refusal
                started = await loop.run_in_executor(
                    self._login_worker, authenticator.authenticate, client.session, request.token
                )
                if started is not None:
                    await asyncio.wrap_future(started)
            finally:
                pending.release()
            if client.connection.state is ConnectionState.AUTHENTICATING:
                client.connection.authenticated()  # else a second AUTH_RESPONSE in flight
            answer = AuthSuccess(None)
        except RingflowError as error:
            self.stats.failed_logins += 1
            if error.code == ErrorCode.SERVER_ERROR:
                self.stats.server_errors += 1
            elif error.code == ErrorCode.AUTHENTICATION_ERROR and error is not refusal:
                self.login_throttle.failed(client.address, loop.time())  # a refusal: not one
            answer = _error_of(error)
        except Exception as error:
            self.stats.server_errors += 1
            _log.exception("bug: login of %s failed", client.peer)
            answer = ErrorResponse(ErrorCode.SERVER_ERROR, f"{type(error).__name__}: {error}")
        await self._send(client, answer, stream_id)

    def _execute(self, session: SessionT, statement: Statement) -> Handled:
        """Runs on the worker thread: the backend's answer, or the ERROR for its exception."""
        return execute_statement(self._backend, session, statement, self.stats)

    async def _send(
        self,
        client: _Client[SessionT],
        response: Response,
        stream_id: int,
        warnings: tuple[str, ...] = (),
    ) -> None:
        """``_reply``, sent at once, and wait for the transport to drain."""
        self._reply(client, response, stream_id, warnings)
        self._flush(client)
        await self._drained(client)

    def _reply(
        self,
        client: _Client[SessionT],
        response: Response,
        stream_id: int,
        warnings: tuple[str, ...] = (),
    ) -> None:
        """Answer ``stream_id``; an answer the wire cannot carry goes refitted (``_refit``),
        and one with no encodable form at all closes the connection."""
        connection = client.connection
        refitted = connection.refitted_answers
        try:
            frame = connection.send(response, stream_id, warnings=warnings)
        except LocalProtocolError as error:
            self.stats.unsendable_answers += 1
            _log.error("closing %s: no answer for stream %d: %s", client.peer, stream_id, error)
            client.writer.close()
            return
        finally:
            self._settle(client)
        if connection.refitted_answers != refitted:
            self.stats.refitted_answers += 1
            _log.warning(
                "answer to stream %d from %s did not fit the wire; sent refitted: %s",
                stream_id,
                client.peer,
                connection.story()[-1],
            )
        self._write(client, frame)

    def _write(self, client: _Client[SessionT], frame: bytes) -> None:
        """Write ``frame`` to the connection; while answers are taken together, after them."""
        if client.writer.is_closing():
            return
        if self._taking:
            if not client.outbox:
                self._filled.append(client)
            client.outbox.append(frame)
        else:
            self._flush(client)
            client.writer.write(frame)

    def _flush(self, client: _Client[SessionT]) -> None:
        outbox = client.outbox
        if not outbox:
            return
        data = outbox[0] if len(outbox) == 1 else b"".join(outbox)
        outbox.clear()
        if not client.writer.is_closing():
            client.writer.write(data)

    async def _drained(self, client: _Client[SessionT]) -> None:
        """Until the client has read enough of its answers (the transport's buffer below its
        high-water mark): at once when it has."""
        with contextlib.suppress(ConnectionError):
            await client.writer.drain()

    def clients(self) -> Iterator[tuple[str, int, frozenset[EventType]]]:
        """(peer, shard, registered events) of every open connection, for diagnostics."""
        for client in self._clients:
            yield client.peer, client.shard, frozenset(client.events)
