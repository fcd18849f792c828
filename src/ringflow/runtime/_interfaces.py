"""The interfaces node code is written against: ``Clock``, ``Network``, ``Disk``, ``Runtime``.

ARCHITECTURE.md "Pure cores, thin shells" and STYLE.md: sockets, files, clocks and randomness are
injected, so the same node code runs in the asyncio shell (``SystemClock``, ``AsyncioNetwork``,
``LocalDisk``) and in the deterministic simulator (``ringflow.sim``). Node code never imports
``asyncio`` or ``time``; it receives a ``Runtime`` and reacts to the callbacks it registered
(messages delivered by ``Network.listen``, timers set with ``Clock.call_later``).

Rules both implementations keep (the conformance suite in ``tests/conformance`` checks them):

* **Time.** ``now_ms``/``now_us`` are wall-clock time since the Unix epoch and may jump (NTP,
  simulated skew); ``monotonic_ms`` never goes backwards and has an arbitrary origin. Timers are
  measured on the monotonic clock; timers with distinct deadlines fire in deadline order, equal
  deadlines in an unspecified order (the simulator: scheduling order). A cancelled timer never
  fires. Callbacks run one at a time, never concurrently.
* **Messages.** ``send`` never blocks and never waits for the peer. Delivery is at most once and
  may silently fail (peer down, partition, connection lost with bytes in flight): reliability is
  the caller's business (acks, retries, hints). Between one connected pair the real TCP network
  is FIFO; the simulator is FIFO per link unless reordering is configured. No duplicates unless
  the simulator is told to duplicate.
* **Limits.** A payload above ``max_frame_bytes`` is refused with ``FrameTooLarge`` at ``send``;
  a link whose queue (real) or in-flight set (simulated) is full refuses with ``Backpressure``.
  Neither drops anything silently: the caller sees the refusal.
* **Endpoints** are strings. The real network needs ``host:port`` (``[v6]:port``); port 0 asks
  for an ephemeral port and ``Listener.endpoint`` tells which one was bound.
* **Link events** (``LinkUp``/``LinkDown``) are advisory, delivered to the sending endpoint's
  listener; they never replace a failure detector.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol, TypeAlias

from ringflow.errors import ClientError, ErrorCode, PeerError

Endpoint: TypeAlias = str
"""A network address: ``host:port`` for the real network, any non-blank name in the simulator."""
RandomSource: TypeAlias = random.Random
"""Randomness is a seeded ``random.Random`` handed in, never the module-level functions."""

DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
"""Largest payload of one message (both networks); ``send`` refuses anything larger."""
DEFAULT_MAX_QUEUED_MESSAGES: Final = 1024
"""Messages one link (``src -> dst``) may hold before ``send`` raises ``Backpressure``."""
TIMER_DELAY_MS_MAX: Final = 30 * 24 * 3600 * 1000
"""A timer further out than 30 days is a unit mistake (microseconds passed as milliseconds)."""

_ENDPOINT_RE: Final = re.compile(
    r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]\s]+)):(?P<port>\d+)$"
)


# --- errors ------------------------------------------------------------------------------------


class NetworkError(PeerError):
    """A message could not be handed to the network."""


class Backpressure(NetworkError):
    """The link ``src -> dst`` holds ``queued`` messages, its ``limit``: the peer is not keeping up.

    Nothing was queued; the caller decides whether to drop, retry later or fail the request.
    """

    code = ErrorCode.OVERLOADED

    def __init__(self, src: Endpoint, dst: Endpoint, queued: int, limit: int) -> None:
        super().__init__(f"link {src} -> {dst} is full: {queued} messages queued, limit {limit}")
        self.src = src
        self.dst = dst
        self.queued = queued
        self.limit = limit


class FrameTooLarge(ClientError):
    """A payload of ``size`` bytes exceeds the network's ``limit`` (``max_frame_bytes``)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class EndpointError(ClientError):
    """A malformed endpoint, or one that is not (or already) listening."""


class NotListening(EndpointError):
    """``send`` from an endpoint with no open listener (a node may only send as itself)."""


class ProtocolViolation(PeerError):
    """Raised by a ``MessageHandler``: the message it was given breaks the protocol.

    The real network counts it (``NetworkStats.protocol_violations``) and closes the connection
    the message came on, and only that one (Cassandra closes one inbound connection on a
    ``ProtocolException`` the same way); the simulator counts it and drops the message.
    """


class DiskError(ClientError):
    """A bad file name, or a file that does not exist."""


# --- value objects -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LinkUp:
    """The link ``src -> dst`` is connected (again); queued messages flow."""

    src: Endpoint
    dst: Endpoint


@dataclass(frozen=True, slots=True)
class LinkDown:
    """The link ``src -> dst`` lost its connection; messages in flight on it may be lost."""

    src: Endpoint
    dst: Endpoint
    reason: str


LinkEvent: TypeAlias = LinkUp | LinkDown
MessageHandler: TypeAlias = Callable[[Endpoint, bytes], object]
"""``on_message(src, payload)``: called once per delivered message; its result is ignored. It
may raise ``ProtocolViolation`` to have the connection the message came on closed."""
LinkHandler: TypeAlias = Callable[[LinkEvent], object]
TimerCallback: TypeAlias = Callable[[], object]


def parse_endpoint(endpoint: object) -> tuple[str, int]:
    """Split ``host:port`` (or ``[v6]:port``) into its parts; raise ``EndpointError`` otherwise."""
    if not isinstance(endpoint, str):
        raise EndpointError(f"an endpoint is a 'host:port' str, got {endpoint!r}")
    match = _ENDPOINT_RE.match(endpoint)
    if match is None:
        raise EndpointError(f"endpoint {endpoint!r} is not 'host:port' or '[v6]:port'")
    port = int(match["port"])
    if port > 65535:
        raise EndpointError(f"endpoint {endpoint!r}: port {port} is above 65535")
    return (match["v6"] or match["host"]), port


def format_endpoint(host: str, port: int) -> Endpoint:
    """The inverse of ``parse_endpoint``: brackets an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_delay_ms(delay_ms: object) -> int:
    """Validate a timer delay: an int of milliseconds in ``[0, TIMER_DELAY_MS_MAX]``."""
    if not isinstance(delay_ms, int) or isinstance(delay_ms, bool):
        raise ClientError(f"delay_ms must be an int of milliseconds, got {delay_ms!r}")
    if not 0 <= delay_ms <= TIMER_DELAY_MS_MAX:
        raise ClientError(f"delay_ms must be in [0, {TIMER_DELAY_MS_MAX}], got {delay_ms}")
    return delay_ms


def check_payload(payload: object, max_frame_bytes: int) -> bytes:
    """Validate a message payload: ``bytes`` no longer than ``max_frame_bytes``."""
    if not isinstance(payload, bytes):
        raise ClientError(f"a payload must be bytes, got {type(payload).__name__}")
    if len(payload) > max_frame_bytes:
        raise FrameTooLarge(len(payload), max_frame_bytes)
    return payload


def check_limit(name: str, value: object, *, minimum: int = 1) -> int:
    """Validate a limit passed to a constructor: an int no smaller than ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ClientError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


# --- protocols ---------------------------------------------------------------------------------


class TimerHandle(Protocol):
    """A pending ``call_later``; ``cancel`` is idempotent and safe after the timer fired."""

    def cancel(self) -> None: ...

    def cancelled(self) -> bool: ...


class Clock(Protocol):
    """Wall time, monotonic time and timers of one node."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the Unix epoch (may jump)."""
        ...

    def now_us(self) -> int:
        """Wall-clock microseconds since the Unix epoch (write timestamps)."""
        ...

    def monotonic_ms(self) -> int:
        """Milliseconds from an arbitrary origin; never decreases."""
        ...

    def call_later(self, delay_ms: int, callback: TimerCallback) -> TimerHandle:
        """Run ``callback()`` once, ``delay_ms`` monotonic milliseconds from now."""
        ...


class Listener(Protocol):
    """An endpoint receiving messages; also the identity its owner sends as."""

    @property
    def endpoint(self) -> Endpoint:
        """The bound endpoint (with the real port when port 0 was asked for)."""
        ...

    def pause(self) -> None:
        """Stop delivering (and reading): senders fill up and see ``Backpressure``."""
        ...

    def resume(self) -> None:
        """Deliver what was held, in order, then keep delivering."""
        ...

    def close(self) -> None:
        """Stop listening; drop inbound connections and this endpoint's outbound links."""
        ...


class Network(Protocol):
    """Message-oriented, bounded, non-blocking internode transport."""

    @property
    def max_frame_bytes(self) -> int: ...

    def listen(
        self,
        endpoint: Endpoint,
        on_message: MessageHandler,
        *,
        on_link: LinkHandler | None = None,
    ) -> Listener:
        """Receive messages sent to ``endpoint``; raise ``EndpointError`` if it is taken."""
        ...

    def send(self, src: Endpoint, dst: Endpoint, payload: bytes) -> None:
        """Queue ``payload`` for ``dst``; ``src`` must be listening.

        Raises ``FrameTooLarge``, ``Backpressure`` or ``NotListening``; never blocks.
        """
        ...


class SupportsClose(Protocol):
    def close(self) -> None: ...


class Disk(Protocol):
    """One node's durable directory: whole files, append-only files and SQLite databases.

    Names are relative paths of ``[A-Za-z0-9_.-]`` segments joined by ``/`` (no ``..``, no
    leading dot). ``write_bytes_atomic`` is durable when it returns; ``append_bytes`` is durable
    only after ``sync``. Connections from ``open_sqlite`` (and resources passed to ``adopt``) are
    closed by ``close`` — and by a simulated crash, without committing.
    """

    @property
    def root(self) -> Path: ...

    def path_of(self, name: str) -> Path: ...

    def open_sqlite(self, name: str) -> sqlite3.Connection: ...

    def adopt(self, resource: SupportsClose) -> None: ...

    def read_bytes(self, name: str) -> bytes: ...

    def write_bytes_atomic(self, name: str, data: bytes) -> None: ...

    def append_bytes(self, name: str, data: bytes) -> int: ...

    def sync(self, name: str) -> None: ...

    def exists(self, name: str) -> bool: ...

    def list_names(self) -> list[str]: ...

    def remove(self, name: str) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Runtime:
    """Everything non-deterministic a node may touch, handed to it at start."""

    clock: Clock
    network: Network
    disk: Disk
    random: RandomSource
