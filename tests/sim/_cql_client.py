"""A simulated CQL client: ringflow's own codec over a simulated process's network.

The client is a simulated process of its own (it never crashes) that speaks the native protocol
to the nodes' ``NetworkCqlShell``: one message per frame, one connection per node (its
endpoint), STARTUP before the first statement and again after the node answers that the
connection never started (it restarted and forgot it, as a driver reconnects), prepared
statements per node (prepared again when the node answers UNPREPARED), a stream id per request
and a timeout per request (no answer in time: the outcome is unknown, as a driver's client
timeout). Every request gets exactly one call of its ``done``: the response, or None when it
timed out.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from ringflow.cql import (
    Batch,
    BatchStatement,
    BatchType,
    Consistency,
    ErrorResponse,
    Execute,
    FrameDecoder,
    Prepare,
    PreparedResult,
    Query,
    QueryParameters,
    Ready,
    Response,
    Startup,
    UnpreparedResponse,
    decode_message,
    encode_message,
)
from ringflow.errors import ErrorCode, RingflowError
from ringflow.runtime import Runtime, TimerHandle

Done = Callable[[Response | None], None]
MAX_STREAMS = 32_000
MAX_WAITING = 1_000
"""Requests one connection holds while its STARTUP is answered."""


def int_value(value: int) -> bytes:
    return struct.pack(">i", value)


def bigint_value(value: int) -> bytes:
    return struct.pack(">q", value)


def int_of(cell: bytes | None) -> int | None:
    return None if cell is None else int(struct.unpack(">i", cell)[0])


def bigint_of(cell: bytes | None) -> int | None:
    return None if cell is None else int(struct.unpack(">q", cell)[0])


@dataclass
class _Node:
    ready: bool = False
    starting: bool = False
    waiting: list[Callable[[bool], None]] = field(default_factory=list)
    prepared: dict[str, bytes] = field(default_factory=dict)


class SimCqlClient:
    """CQL requests from ``endpoint`` to the nodes' CQL endpoints (module docstring)."""

    def __init__(self, runtime: Runtime, endpoint: str, timeout_ms: int = 12_000) -> None:
        self._runtime = runtime
        self.endpoint = endpoint
        self.timeout_ms = timeout_ms
        self._nodes: dict[str, _Node] = {}
        self._pending: dict[int, tuple[Done, TimerHandle]] = {}
        self._next_stream = 0
        self._decoder = FrameDecoder(expected_version=None)
        self.timeouts = 0
        self.restarts_seen = 0
        runtime.network.listen(endpoint, self._received)

    # --- requests ----------------------------------------------------------------------------

    def call(self, node: str, request: object, done: Done) -> None:
        """Send ``request`` to ``node`` once its connection is started; ``done`` gets the
        answer or None (timed out, or the connection could not be started)."""
        state = self._nodes.setdefault(node, _Node())
        if state.ready:
            self._send(node, request, done)
            return

        def started(ready: bool) -> None:
            if ready:
                self._send(node, request, done)
            else:
                done(None)

        if len(state.waiting) >= MAX_WAITING:
            done(None)
            return
        state.waiting.append(started)
        if not state.starting:
            state.starting = True
            self._send(node, Startup({"CQL_VERSION": "3.4.5"}), self._on_started(node))

    def execute(
        self, node: str, text: str, parameters: QueryParameters, done: Done, retried: bool = False
    ) -> None:
        """EXECUTE the prepared ``text`` on ``node`` (prepared there first if need be; once
        more when the node answers UNPREPARED)."""
        state = self._nodes.setdefault(node, _Node())
        statement_id = state.prepared.get(text)
        if statement_id is None:
            self._prepare_then(
                node, [text], done, lambda: self.execute(node, text, parameters, done, retried)
            )
            return

        def answered(response: Response | None) -> None:
            if isinstance(response, UnpreparedResponse) and not retried:
                state.prepared.pop(text, None)
                self.execute(node, text, parameters, done, retried=True)
                return
            done(response)

        self.call(node, Execute(statement_id, parameters), answered)

    def batch(
        self,
        node: str,
        statements: list[tuple[str, tuple[bytes, ...]]],
        consistency: Consistency,
        timestamp: int,
        done: Done,
    ) -> None:
        """A LOGGED batch of prepared ``(text, values)`` statements."""
        state = self._nodes.setdefault(node, _Node())
        missing = [text for text, _ in statements if text not in state.prepared]
        if missing:
            again = lambda: self.batch(node, statements, consistency, timestamp, done)  # noqa: E731
            self._prepare_then(node, missing, done, again)
            return
        batch = Batch(
            BatchType.LOGGED,
            tuple(BatchStatement(state.prepared[text], values) for text, values in statements),
            consistency,
            default_timestamp=timestamp,
        )
        self.call(node, batch, done)

    def _prepare_then(
        self, node: str, texts: list[str], done: Done, then: Callable[[], None]
    ) -> None:
        """Prepare the first of ``texts`` on ``node``, then ``then()`` (which prepares the
        others in turn); ``done(None)`` if the node does not prepare it."""

        def prepared(ok: bool) -> None:
            if ok:
                then()
            else:
                done(None)

        self.prepare(node, texts[0], prepared)

    def prepare(self, node: str, text: str, done: Callable[[bool], None]) -> None:
        state = self._nodes.setdefault(node, _Node())

        def answered(response: Response | None) -> None:
            if isinstance(response, PreparedResult):
                state.prepared[text] = response.statement_id
                done(True)
            else:
                done(False)

        self.call(node, Prepare(text), answered)

    def query(self, node: str, text: str, parameters: QueryParameters, done: Done) -> None:
        self.call(node, Query(text, parameters), done)

    # --- the connection ----------------------------------------------------------------------

    def _on_started(self, node: str) -> Done:
        def answered(response: Response | None) -> None:
            state = self._nodes[node]
            state.starting = False
            state.ready = isinstance(response, Ready) or (  # a STARTUP whose Ready was lost
                isinstance(response, ErrorResponse) and "already initialized" in response.message
            )
            waiting, state.waiting = state.waiting, []
            for started in waiting:
                started(state.ready)

        return answered

    def _send(self, node: str, request: object, done: Done) -> None:
        stream_id = self._stream_id()
        if stream_id is None:
            done(None)
            return
        frame = encode_message(request, stream_id)  # type: ignore[arg-type]

        def expire() -> None:
            found = self._pending.pop(stream_id, None)
            if found is not None:
                self.timeouts += 1
                found[0](None)

        timer = self._runtime.clock.call_later(self.timeout_ms, expire)
        self._pending[stream_id] = (self._forgetting(node, done), timer)
        with contextlib.suppress(RingflowError):  # backpressure: lost, it times out
            self._runtime.network.send(self.endpoint, node, frame)

    def _forgetting(self, node: str, done: Done) -> Done:
        """``done``, after noting a node that answered as if the connection never started."""

        def answered(response: Response | None) -> None:
            if (
                isinstance(response, ErrorResponse)
                and response.code == ErrorCode.PROTOCOL_ERROR
                and "expecting STARTUP" in response.message
            ):
                state = self._nodes[node]
                if state.ready:
                    self.restarts_seen += 1
                state.ready = False
                state.prepared.clear()
            done(response)

        return answered

    def _stream_id(self) -> int | None:
        for _ in range(MAX_STREAMS):
            self._next_stream = self._next_stream % MAX_STREAMS + 1
            if self._next_stream not in self._pending:
                return self._next_stream
        return None

    def _received(self, _src: str, payload: bytes) -> None:
        self._decoder.feed(payload)
        while (frame := self._decoder.next_frame()) is not None:
            decoded = decode_message(frame)
            found = self._pending.pop(decoded.stream_id, None)
            if found is None:  # answered after its timeout: the caller was told None
                continue
            done, timer = found
            timer.cancel()
            message = decoded.message
            done(message)  # type: ignore[arg-type]
