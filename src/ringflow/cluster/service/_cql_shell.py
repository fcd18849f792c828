"""The CQL native protocol served over a runtime ``Network``: the simulator's CQL endpoint.

A node process serves CQL with the asyncio ``CqlServer`` over TCP. Inside ``ringflow.sim``
there are no sockets and no asyncio, so a simulated node serves the same protocol with this
shell over its ``ProcessNetwork``: the same sans-IO ``ServerConnection`` per client (framing,
states, protocol errors, per-connection in-flight limit), the same ``Backend`` (the node's
``ClusterBackend`` and ``QueryProcessor``, its ``ClusterDataPlane`` and coordinator), the same
statement execution and error mapping (``execute_statement``) and the same wait for pending
work (``when_answered``). What differs is the transport only.

Theory of operation:

* **One message is one frame**, both ways. A client's endpoint is its connection: the first
  frame from an endpoint opens a ``ServerConnection`` (so STARTUP comes first, as on TCP). A
  lost message is a lost frame, never a torn stream; a message the network reorders is a
  frame answered in another order, which the protocol allows (stream ids).
* **Statements run on ``worker``** (in the simulator a ``ClockExecutor``: a 0 ms timer, the
  hand-off to the statement thread), at most ``max_statements_in_flight`` started and not
  answered; the others wait in a queue of at most ``max_pending_requests`` (beyond it a
  statement is answered Overloaded). Answers go out as their work is done.
* **A crash forgets every connection** (the shell lives in the incarnation's memory): a client
  that sends a statement to the restarted node gets the protocol error of a connection that
  never sent STARTUP, and starts again, as a driver reconnects.
* An answer the network refuses (``Backpressure``, the client gone) is dropped and counted in
  ``unsent_answers``: the client times out, as over a broken TCP connection.

No authentication (AUTH_RESPONSE is refused) and no pushed events: what the simulated clients
of the simulator's checker use. Not thread-safe: for a runtime whose callbacks run one at a
time (the ``Clock`` contract).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from ringflow.cluster.service._build import BuiltNode
from ringflow.cql import (
    NEED_DATA,
    Backend,
    ConnectionClosed,
    ErrorResponse,
    Handled,
    Options,
    ProtocolErrorEvent,
    Ready,
    Register,
    RequestEvent,
    Response,
    ServerConnection,
    ServerLimits,
    ServerStats,
    SessionState,
    Startup,
    StatementRequest,
    Supported,
    execute_statement,
    when_answered,
)
from ringflow.errors import ErrorCode, RingflowError, invariant
from ringflow.runtime import Endpoint, Listener, Network

_log = logging.getLogger(__name__)
SessionT = TypeVar("SessionT")


@dataclass(slots=True)
class _Connection(Generic[SessionT]):
    connection: ServerConnection
    session: SessionT


@dataclass(frozen=True, slots=True)
class _Queued:
    client: Endpoint
    statement: StatementRequest
    stream_id: int


class NetworkCqlShell(Generic[SessionT]):
    """Serves ``backend`` on ``endpoint`` of ``network`` (module docstring). ``start``, then
    ``close``."""

    def __init__(
        self,
        backend: Backend[SessionT],
        network: Network,
        endpoint: Endpoint,
        worker: concurrent.futures.Executor,
        limits: ServerLimits | None = None,
    ) -> None:
        self._backend = backend
        self._network = network
        self.endpoint = endpoint
        self._worker = worker
        self.limits = limits or ServerLimits()
        self._connections: dict[Endpoint, _Connection[SessionT]] = {}
        self._queued: deque[_Queued] = deque()
        self._listener: Listener | None = None
        self.in_flight = 0
        """Statements started and not yet answered (``max_statements_in_flight``)."""
        self.most_in_flight = 0
        self.unsent_answers = 0
        self.stats = ServerStats()

    def start(self) -> None:
        self._listener = self._network.listen(self.endpoint, self._received)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._connections.clear()
        self._queued.clear()

    def validate(self) -> None:
        """The bounds hold and every connection's own invariants (``ServerConnection``)."""
        limits = self.limits
        invariant(0 <= self.in_flight <= limits.max_statements_in_flight, "in flight")
        invariant(len(self._queued) <= limits.max_pending_requests, "queued beyond the bound")
        invariant(
            not self._queued or self.in_flight == limits.max_statements_in_flight,
            "a statement queued while a slot is free",
        )
        for found in self._connections.values():
            found.connection.validate()

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def _received(self, src: Endpoint, payload: bytes) -> None:
        found = self._connections.get(src)
        if found is None:
            if len(self._connections) >= self.limits.max_concurrent_connections:
                return  # not answered: the client times out, as a refused TCP connect
            found = _Connection(
                ServerConnection(
                    max_frame_size=self.limits.max_frame_size,
                    max_in_flight=self.limits.max_in_flight_per_connection,
                ),
                self._backend.open_session(),
            )
            self._connections[src] = found
        connection = found.connection
        connection.receive_data(payload)
        while True:
            event = connection.next_event()
            if event is NEED_DATA:
                return
            if isinstance(event, ConnectionClosed):
                self._connections.pop(src, None)
                return
            if isinstance(event, ProtocolErrorEvent):
                self._send(src, connection, event.error, event.stream_id)
                if event.fatal:
                    self._connections.pop(src, None)
                    return
                continue
            self._dispatch(src, found, event)

    def _dispatch(self, src: Endpoint, found: _Connection[SessionT], event: RequestEvent) -> None:
        self.stats.requests += 1
        request, connection = event.request, found.connection
        if isinstance(request, Options):
            self._send(src, connection, Supported.for_node(), event.stream_id)
        elif isinstance(request, Startup | Register):
            self._send(src, connection, Ready(), event.stream_id)
        elif isinstance(request, StatementRequest):
            self._admit(_Queued(src, request, event.stream_id))
        else:
            message = f"{type(request).__name__} is not supported by this server"
            error = ErrorResponse(ErrorCode.PROTOCOL_ERROR, message)
            self._send(src, connection, error, event.stream_id)

    def _admit(self, queued: _Queued) -> None:
        if self.in_flight < self.limits.max_statements_in_flight:
            self._start(queued)
        elif len(self._queued) < self.limits.max_pending_requests:
            self._queued.append(queued)
        else:
            self._answer(queued, Handled(self._overloaded()))

    def _overloaded(self) -> ErrorResponse:
        limit = self.limits.max_pending_requests
        return ErrorResponse(ErrorCode.OVERLOADED, f"more than {limit} statements pending")

    def _start(self, queued: _Queued) -> None:
        found = self._connections.get(queued.client)
        if found is None:  # the client's connection is gone: nothing to answer
            self._next()
            return
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        session = found.session

        def run() -> Handled:
            return execute_statement(self._backend, session, queued.statement, self.stats)

        def bug(error: BaseException) -> None:
            self.stats.server_errors += 1
            _log.error("bug: a statement's pending work failed outside its answer", exc_info=error)

        def executed(future: concurrent.futures.Future[Handled]) -> None:
            try:
                handled = future.result()
            except BaseException as error:
                bug(error)
                handled = Handled(ErrorResponse(ErrorCode.SERVER_ERROR, str(error)))
            when_answered(handled, answered, bug)

        def answered(handled: Handled) -> None:
            self.in_flight -= 1
            self._answer(queued, handled)
            self._next()

        try:
            self._worker.submit(run).add_done_callback(executed)
        except RuntimeError as refused:  # the worker is shut down
            answered(Handled(ErrorResponse(ErrorCode.SERVER_ERROR, str(refused))))

    def _next(self) -> None:
        while self._queued and self.in_flight < self.limits.max_statements_in_flight:
            self._start(self._queued.popleft())

    def _answer(self, queued: _Queued, handled: Handled) -> None:
        found = self._connections.get(queued.client)
        if found is None:  # a crash of the client's connection since: nobody to answer
            self.unsent_answers += 1
            return
        self._send(
            queued.client, found.connection, handled.response, queued.stream_id, handled.warnings
        )

    def _send(
        self,
        dst: Endpoint,
        connection: ServerConnection,
        response: Response,
        stream_id: int,
        warnings: tuple[str, ...] = (),
    ) -> None:
        try:
            frame = connection.send(response, stream_id, warnings=warnings)
        except RingflowError as error:  # no encodable answer: the connection is closed
            self.stats.unsendable_answers += 1
            _log.error("closing %s: no answer for stream %d: %s", dst, stream_id, error)
            self._connections.pop(dst, None)
            return
        try:
            self._network.send(self.endpoint, dst, frame)
        except RingflowError:  # backpressure, a frame too large, the listener closed
            self.unsent_answers += 1


def serve_cql(
    node: BuiltNode, endpoint: Endpoint, limits: ServerLimits | None = None
) -> NetworkCqlShell[SessionState]:
    """Serve CQL for ``node`` on ``endpoint`` of its own network: the statement path of a node
    process (``build_node`` wired it: ``ClusterBackend`` over a ``ClusterDataPlane``) on a
    runtime with one thread (the simulator), its statements going on on the runtime's
    ``statements`` executor. Started; the caller closes it with the node's incarnation."""
    shell = NetworkCqlShell(
        node.backend, node.cluster.network, endpoint, node.runtime.statements, limits
    )
    shell.start()
    return shell
