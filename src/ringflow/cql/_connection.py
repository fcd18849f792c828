"""The server side of one CQL connection as a sans-IO state machine (h11 style).

Three verbs (reliability-and-style.md §B1): ``receive_data(bytes)`` (``b""`` means EOF),
``next_event()`` returning ``RequestEvent | ProtocolErrorEvent | ConnectionClosed | NEED_DATA``,
and ``send(response, stream_id) -> bytes``. No socket, no clock, no asyncio: a shell moves the
bytes and hands requests to an executor.

Theory of operation (``doc/native_protocol_v4.spec`` §2.1, §2.3, §4.1.1, §5):

* A connection starts in ``EXPECTING_STARTUP``; only OPTIONS and STARTUP are accepted there.
  With ``authenticate``, STARTUP leads to ``AUTHENTICATING`` instead of ``READY``: only
  AUTH_RESPONSE is accepted, one at a time (each costs a bcrypt check), until the shell calls
  ``authenticated`` (a login succeeded).
  A valid STARTUP (CQL 3, compression absent or ``lz4``) moves it to ``READY`` at once and
  turns compression on for every later non-empty body in both directions; the shell answers
  it with ``Ready()``. Which opcodes a state accepts and where they lead are the tables
  ``_ACCEPTED`` and ``_TRANSITIONS``.
* Every frame whose boundary is known gets an answer on its own stream: a malformed body, an
  unexpected message or a refused STARTUP becomes a non-fatal ``ProtocolErrorEvent`` (ERROR
  0x000A) and the connection carries on. Too many requests in flight (``max_in_flight``)
  gives an Overloaded (0x1001) event for that stream.
* A header announcing a body over ``max_frame_size`` gives a *fatal* ``ProtocolErrorEvent``
  ("Request is too big ..."): answered, then the connection closed; the body is never
  buffered (issue 16).
* A header that cannot be trusted (garbage length, any version but 4) gives a *fatal*
  ``ProtocolErrorEvent``: the shell sends ``send(event.error, event.stream_id)`` (framed in the
  client's own version, which is what drivers need to downgrade from v5 to v4) and closes;
  ``next_event`` then only returns ``ConnectionClosed``.
* A request is "in flight" from its ``RequestEvent`` until ``send`` answers its stream;
  ``held_bytes`` counts its frame until then, plus the frame being read (its announced size
  from the header on), for the shell's request-data budget.
* ``send`` always produces a frame for a request: an answer the wire cannot carry (a [string]
  over 65,535 bytes) is refitted (``_refit``: texts truncated, or InvalidRequest) and counted
  in ``refitted_answers``; only when nothing encodes (an EVENT) does it raise
  ``AnswerNotEncodable``.

Rule: everything that decides a transition lives in this file; the codec modules only
turn bytes into messages and back.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from uuid import UUID

from ringflow.cql._error_responses import ErrorResponse
from ringflow.cql._frame import (
    DEFAULT_MAX_FRAME_SIZE,
    PROTOCOL_VERSION,
    REQUEST_OPCODES,
    Frame,
    FrameDecoder,
    FrameError,
    FrameTooLarge,
    Opcode,
)
from ringflow.cql._messages import Compression, decode_message, encode_message, opcode_name
from ringflow.cql._refit import refit, truncate_text, truncate_texts
from ringflow.cql._requests import Request, Startup
from ringflow.cql._responses import Response
from ringflow.cql._wire import LocalProtocolError
from ringflow.errors import ErrorCode, InternalError, ProtocolViolation, invariant

DEFAULT_MAX_IN_FLIGHT = 2048
"""Requests one connection may have in flight; the Python driver's pool opens a new
connection well before one reaches this many."""

_STORY_LENGTH = 32
_CQL3_VERSION = re.compile(r"3(\.\d+){0,2}")


class ConnectionState(Enum):
    EXPECTING_STARTUP = "EXPECTING_STARTUP"
    AUTHENTICATING = "AUTHENTICATING"
    READY = "READY"
    CLOSED = "CLOSED"


_ACCEPTED: dict[ConnectionState, frozenset[Opcode]] = {
    ConnectionState.EXPECTING_STARTUP: frozenset({Opcode.STARTUP, Opcode.OPTIONS}),
    ConnectionState.AUTHENTICATING: frozenset({Opcode.AUTH_RESPONSE}),
    ConnectionState.READY: frozenset(
        {
            Opcode.OPTIONS,
            Opcode.QUERY,
            Opcode.PREPARE,
            Opcode.EXECUTE,
            Opcode.BATCH,
            Opcode.REGISTER,
        }
    ),
    ConnectionState.CLOSED: frozenset(),
}
_EXPECTATION: dict[ConnectionState, str] = {
    ConnectionState.EXPECTING_STARTUP: "expecting STARTUP or OPTIONS",
    ConnectionState.AUTHENTICATING: "expecting SASL_RESPONSE",
    ConnectionState.READY: "the connection is already initialized",
    ConnectionState.CLOSED: "the connection is closed",
}
_TRANSITIONS: dict[tuple[ConnectionState, Opcode], ConnectionState] = {
    (ConnectionState.EXPECTING_STARTUP, Opcode.STARTUP): ConnectionState.READY,
}
_AUTHENTICATING_TRANSITIONS: dict[tuple[ConnectionState, Opcode], ConnectionState] = {
    (ConnectionState.EXPECTING_STARTUP, Opcode.STARTUP): ConnectionState.AUTHENTICATING,
}
"""With ``authenticate``: STARTUP leads to AUTHENTICATING, answered with AUTHENTICATE; only
AUTH_RESPONSE is accepted there (Cassandra's ``ServerConnection``: "Unexpected message X,
expecting SASL_RESPONSE", OPTIONS included) until the shell reports a login
(``authenticated``)."""


class NeedData(Enum):
    """``next_event`` has nothing until more bytes arrive."""

    NEED_DATA = "NEED_DATA"


NEED_DATA = NeedData.NEED_DATA


class AnswerNotEncodable(LocalProtocolError):
    """``send`` found no answer the wire can carry (an EVENT too large to push, or a bug):
    the shell drops a push, and closes the connection for an answer to a request."""


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """A decoded request for the executor; answer it with ``send(response, stream_id)``."""

    stream_id: int
    request: Request
    tracing: bool = False
    custom_payload: Mapping[str, bytes | None] | None = None


@dataclass(frozen=True, slots=True)
class ProtocolErrorEvent:
    """A frame the connection answers itself with ``error`` on ``stream_id``.

    ``fatal``: the byte stream is lost; send the error, then close the transport.
    """

    stream_id: int
    error: ErrorResponse
    fatal: bool = False


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed (EOF) or a fatal error was reported; nothing more will come."""


ConnectionEvent = RequestEvent | ProtocolErrorEvent | ConnectionClosed | NeedData


class ServerConnection:
    """One client connection, server side. Limits are constructor arguments."""

    def __init__(
        self,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        authenticate: bool = False,
    ) -> None:
        if max_in_flight < 1:
            raise LocalProtocolError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.max_frame_size = max_frame_size
        self.max_in_flight = max_in_flight
        self._decoder = FrameDecoder(max_frame_size, expected_version=PROTOCOL_VERSION)
        self._state = ConnectionState.EXPECTING_STARTUP
        self._transitions = _AUTHENTICATING_TRANSITIONS if authenticate else _TRANSITIONS
        self._login_stream: int | None = None
        """The stream of the AUTH_RESPONSE being checked (one at a time)."""
        self._compression: Compression | None = None
        self._in_flight: set[int] = set()
        self._request_sizes: dict[int, int] = {}
        self._request_bytes = 0
        self._reply_versions: dict[int, int] = {}
        self._eof = False
        self._story: deque[str] = deque(maxlen=_STORY_LENGTH)
        self.protocol_error_count = 0
        self.refitted_answers = 0
        """Answers the wire could not carry as built, sent refitted (``_refit``)."""

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def compression(self) -> Compression | None:
        return self._compression

    @property
    def in_flight(self) -> frozenset[int]:
        return frozenset(self._in_flight)

    @property
    def held_bytes(self) -> int:
        """Request bytes this connection holds: the frame being read (its announced size once
        its header is here) plus the frames of requests not yet answered."""
        return self._decoder.wanted_size + self._request_bytes

    @property
    def missing_bytes(self) -> int:
        """Bytes the frame being read still needs (0 when no header announces more)."""
        return self._decoder.wanted_size - self._decoder.buffered_size

    @property
    def frame_in_progress(self) -> bool:
        """Part of a frame is here and the rest is not."""
        return self._decoder.frame_in_progress

    def story(self) -> tuple[str, ...]:
        """The last transitions and refusals, oldest first, for error messages and debugging."""
        return tuple(self._story)

    def receive_data(self, data: bytes) -> None:
        """Bytes from the peer; ``b""`` means the peer closed its side."""
        if self._eof and data:
            raise LocalProtocolError("receive_data after EOF")
        if not data:
            self._eof = True
            return
        if self._state is not ConnectionState.CLOSED:
            self._decoder.feed(data)

    def next_event(self) -> ConnectionEvent:
        if self._state is ConnectionState.CLOSED:
            return ConnectionClosed()
        try:
            frame = self._decoder.next_frame()
        except FrameError as error:
            return self._refuse_frame(error)
        if frame is None:
            if self._eof:
                self._move(ConnectionState.CLOSED, "EOF")
                return ConnectionClosed()
            return NEED_DATA
        return self._handle_frame(frame)

    def send(
        self,
        response: Response,
        stream_id: int,
        *,
        tracing_id: UUID | None = None,
        warnings: Sequence[str] = (),
        custom_payload: Mapping[str, bytes | None] | None = None,
    ) -> bytes:
        """The frame answering ``stream_id`` (or pushing an EVENT on stream -1)."""
        if response.opcode in REQUEST_OPCODES:
            raise LocalProtocolError(f"cannot send request {type(response).__name__} as a server")
        if response.opcode is Opcode.EVENT and stream_id != -1:
            raise LocalProtocolError(f"EVENT pushed on stream {stream_id}, must be -1")
        version = self._reply_versions.pop(stream_id, PROTOCOL_VERSION)
        compression = self._compression if version == PROTOCOL_VERSION else None
        self._in_flight.discard(stream_id)
        if stream_id == self._login_stream:
            self._login_stream = None
        self._release(stream_id)
        try:
            return encode_message(
                response,
                stream_id,
                version=version,
                compression=compression,
                tracing_id=tracing_id,
                warnings=warnings,
                custom_payload=custom_payload,
            )
        except LocalProtocolError as failure:
            return self._send_refitted(response, stream_id, failure, version, warnings)

    def _send_refitted(
        self,
        response: Response,
        stream_id: int,
        failure: LocalProtocolError,
        version: int,
        warnings: Sequence[str],
    ) -> bytes:
        """The answer for a ``response`` the wire cannot carry (``_refit``), or
        ``AnswerNotEncodable`` when there is none: the shell then closes the connection."""
        self.refitted_answers += 1
        self._story.append(f"{self._state.value}: stream {stream_id} refitted: {failure}")
        compression = self._compression if version == PROTOCOL_VERSION else None
        kept_warnings = truncate_texts(warnings)
        candidates: list[tuple[Response, Sequence[str]]] = []
        if kept_warnings != tuple(warnings):
            candidates.append((response, kept_warnings))  # the warnings were what did not fit
        fitted = refit(response, failure)
        if fitted is not None:
            fallback = ErrorResponse(
                ErrorCode.SERVER_ERROR, truncate_text(f"Cannot encode the answer: {failure}")
            )
            candidates += [(fitted, kept_warnings), (fallback, ())]
        for candidate, candidate_warnings in candidates:
            try:
                return encode_message(
                    candidate,
                    stream_id,
                    version=version,
                    compression=compression,
                    warnings=candidate_warnings,
                )
            except LocalProtocolError:
                continue
        raise AnswerNotEncodable(f"{type(response).__name__} on stream {stream_id}: {failure}")

    def authenticated(self) -> None:
        """The shell logged the client in (its AUTH_RESPONSE was answered AUTH_SUCCESS)."""
        if self._state is not ConnectionState.AUTHENTICATING:
            raise LocalProtocolError(f"authenticated in state {self._state.value}")
        self._move(ConnectionState.READY, "AUTH_SUCCESS")

    def refuse_head_frame(self, message: str) -> ProtocolErrorEvent | None:
        """Refuse the frame being read with Overloaded (0x1001) and skip its body (Cassandra's
        ``native_transport_throw_on_overload``); ``None`` when no frame is being read."""
        header = self._decoder.skip_head_frame()
        if header is None:
            return None
        self._story.append(f"{self._state.value}: overloaded on stream {header.stream_id}")
        return ProtocolErrorEvent(header.stream_id, ErrorResponse(ErrorCode.OVERLOADED, message))

    def validate(self) -> None:
        """Check the connection's invariants (run after every test step)."""
        invariant(
            len(self._in_flight) <= self.max_in_flight,
            lambda: f"{len(self._in_flight)} requests in flight, limit {self.max_in_flight}",
        )
        invariant(
            self._compression is None or self._state is not ConnectionState.EXPECTING_STARTUP,
            "compression negotiated before STARTUP",
        )
        invariant(
            self._request_sizes.keys() <= self._in_flight
            and sum(self._request_sizes.values()) == self._request_bytes,
            lambda: f"request bytes {self._request_bytes} disagree with {self._request_sizes}",
        )
        invariant(
            self._login_stream is None or self._login_stream in self._in_flight,
            lambda: f"login stream {self._login_stream} is not in flight",
        )
        invariant(
            all(version != PROTOCOL_VERSION for version in self._reply_versions.values()),
            "a pending reply version equal to the connection's own",
        )

    def _handle_frame(self, frame: Frame) -> ConnectionEvent:
        header = frame.header
        stream_id = header.stream_id
        if header.is_response:
            return self._refuse(stream_id, "Received a response frame where a request was expected")
        if header.opcode not in _ACCEPTED[self._state]:
            return self._refuse(stream_id, self._unexpected_message(header.opcode))
        if stream_id < 0:
            return self._refuse(
                stream_id, f"Invalid stream id {stream_id}: negative ids are reserved for events"
            )
        if stream_id in self._in_flight:
            return self._refuse(stream_id, f"Stream id {stream_id} is already in use")
        if header.opcode == Opcode.AUTH_RESPONSE and self._login_stream is not None:
            # one login at a time: each costs a bcrypt check, and no client pipelines them
            return self._refuse(
                stream_id, "Unexpected message AUTH_RESPONSE, a SASL_RESPONSE is being checked"
            )
        if len(self._in_flight) >= self.max_in_flight:
            return self._overloaded(stream_id)
        opcode = Opcode(header.opcode)
        compression = None if opcode is Opcode.STARTUP else self._compression
        try:
            decoded = decode_message(
                frame, compression=compression, max_body_size=self.max_frame_size
            )
        except ProtocolViolation as error:
            return self._refuse(stream_id, f"Invalid {opcode.name} message: {error}")
        request = decoded.message
        if not isinstance(request, Request):
            raise InternalError(f"the request reader for {opcode.name} returned {request!r}")
        if isinstance(request, Startup):
            refusal = self._negotiate(request)
            if refusal is not None:
                return self._refuse(stream_id, refusal)
        self._move(self._transitions.get((self._state, opcode), self._state), opcode.name)
        if opcode is Opcode.AUTH_RESPONSE:
            self._login_stream = stream_id
        self._in_flight.add(stream_id)
        size = header.size + header.body_length
        self._request_sizes[stream_id] = size
        self._request_bytes += size
        return RequestEvent(stream_id, request, decoded.tracing, decoded.custom_payload)

    def _release(self, stream_id: int) -> None:
        self._request_bytes -= self._request_sizes.pop(stream_id, 0)

    def _negotiate(self, startup: Startup) -> str | None:
        """Check STARTUP's options and turn on compression; return a refusal or ``None``."""
        cql_version = startup.cql_version
        if cql_version is None:
            return "Missing value CQL_VERSION in STARTUP message"
        if not _CQL3_VERSION.fullmatch(cql_version):
            return f"Invalid value {cql_version!r} for CQL_VERSION: only CQL 3 is supported"
        requested = startup.compression
        if requested is None:
            return None
        try:
            self._compression = Compression(requested.lower())
        except ValueError:
            supported = ", ".join(compression.value for compression in Compression)
            return f"Unknown compression algorithm: {requested} (supported: {supported})"
        return None

    def _unexpected_message(self, opcode: int) -> str:
        try:
            known = Opcode(opcode)
        except ValueError:
            return f"Unknown opcode {opcode_name(opcode)}"
        if known not in REQUEST_OPCODES:
            return f"Unexpected message {known.name}: it is not a request"
        return f"Unexpected message {known.name}, {_EXPECTATION[self._state]}"

    def _refuse(self, stream_id: int, message: str) -> ProtocolErrorEvent:
        self.protocol_error_count += 1
        self._story.append(f"{self._state.value}: refused stream {stream_id}: {message}")
        return ProtocolErrorEvent(stream_id, ErrorResponse(ErrorCode.PROTOCOL_ERROR, message))

    def _overloaded(self, stream_id: int) -> ProtocolErrorEvent:
        message = f"Too many requests in flight on this connection (limit {self.max_in_flight})"
        self._story.append(f"{self._state.value}: overloaded on stream {stream_id}")
        return ProtocolErrorEvent(stream_id, ErrorResponse(ErrorCode.OVERLOADED, message))

    def _refuse_frame(self, error: FrameError) -> ProtocolErrorEvent:
        self.protocol_error_count += 1
        self._story.append(f"{self._state.value}: bad frame on stream {error.stream_id}: {error}")
        if error.version != PROTOCOL_VERSION:
            self._reply_versions[error.stream_id] = error.version
        # A frame over the limit is answered, then the connection closed (its body is never
        # buffered): a client that sends one is broken or hostile.
        fatal = error.fatal or isinstance(error, FrameTooLarge)
        if fatal:
            self._move(ConnectionState.CLOSED, "fatal frame error")
        reply = ErrorResponse(ErrorCode.PROTOCOL_ERROR, error.message)
        return ProtocolErrorEvent(error.stream_id, reply, fatal)

    def _move(self, state: ConnectionState, cause: str) -> None:
        if state is not self._state:
            self._story.append(f"{self._state.value} -> {state.value} on {cause}")
        self._state = state
