"""The native port's listener with TLS: required or optional, the handshake bounded.

``CqlServer`` uses it instead of ``asyncio.start_server`` when it is given a ``NativeTls``
(``client_encryption_options`` of the node). Each accepted socket is sniffed before any byte is
consumed (``MSG_PEEK``): a TLS record starts with 0x16 (a handshake record, RFC 8446 §5.1),
while a native protocol frame starts with its version byte (0x03..0x05 requests), so Cassandra's
``optional: true`` port (its ``PortUnificationHandler`` tells TLS from a CQL frame the same way)
serves both. Then:

* TLS: the handshake runs (``connect_accepted_socket``) within ``handshake_timeout_s``; a
  failure (untrusted client certificate under ``require_client_auth``, garbage after 0x16, a
  truncated or stalled ClientHello) closes that socket and counts
  ``ServerStats.tls_handshake_failures``;
* plaintext on an optional port: served as before;
* plaintext on a required port: ``refuse_plaintext`` answers the client's first request with
  a protocol error saying TLS is required and closes (``ServerStats.plaintext_refused``), so a
  driver reports why instead of hanging.

Limits: at most ``max_pending_handshakes`` sockets between accept and a finished handshake (the
rest are closed at once, counted in ``tls_handshake_failures``), each for at most
``handshake_timeout_s`` however slowly its bytes trickle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ringflow.cql._server_limits import ServerStats
from ringflow.errors import ConfigurationError

_log = logging.getLogger(__name__)

TLS_HANDSHAKE_RECORD = 0x16
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
DEFAULT_MAX_PENDING_HANDSHAKES = 256
_ACCEPT_ERROR_PAUSE_S = 0.1
"""After an accept error (out of descriptors), wait before the next accept."""

StreamHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class NativeTls:
    """TLS on the native port: the server ``context`` (its certificate, and the CAs client
    certificates must chain to), whether plaintext is served too (``optional``), and limits."""

    context: ssl.SSLContext
    optional: bool = False
    handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S
    max_pending_handshakes: int = DEFAULT_MAX_PENDING_HANDSHAKES

    def __post_init__(self) -> None:
        if not isinstance(self.context, ssl.SSLContext):
            raise ConfigurationError(f"NativeTls.context must be an SSLContext: {self.context!r}")
        if not self.handshake_timeout_s > 0 or self.max_pending_handshakes < 1:
            raise ConfigurationError(
                "NativeTls: handshake_timeout_s must be > 0 and max_pending_handshakes >= 1, got "
                f"{self.handshake_timeout_s}, {self.max_pending_handshakes}"
            )


async def _first_byte(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """The first byte the client sent, left in the socket (``MSG_PEEK``); ``b""`` at EOF."""
    ready: asyncio.Future[bytes] = loop.create_future()

    def readable() -> None:
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not ready.done():
            ready.set_result(data)

    loop.add_reader(sock.fileno(), readable)
    try:
        return await ready
    finally:
        loop.remove_reader(sock.fileno())


async def _streams(
    loop: asyncio.AbstractEventLoop,
    sock: socket.socket,
    context: ssl.SSLContext | None,
    timeout_s: float,
    read_limit: int,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Reader and writer over an accepted socket, after the TLS handshake when ``context``."""
    reader = asyncio.StreamReader(limit=read_limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.connect_accepted_socket(
        lambda: protocol,
        sock,
        ssl=context,
        ssl_handshake_timeout=timeout_s if context is not None else None,
    )
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A non-blocking socket bound to ``host:port`` (address reuse on) and listening with a
    kernel queue of ``backlog``; OSError when the address cannot be bound."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class TlsListener:
    """Accepts on ``host:port`` and hands each connection, TLS or (when allowed) plaintext, to
    ``serve``; plaintext on a required port goes to ``refuse_plaintext``."""

    def __init__(
        self,
        tls: NativeTls,
        serve: StreamHandler,
        refuse_plaintext: StreamHandler,
        stats: ServerStats,
        *,
        read_limit: int,
    ) -> None:
        self._tls = tls
        self._serve = serve
        self._refuse_plaintext = refuse_plaintext
        self._stats = stats
        self._read_limit = read_limit
        self._socket: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending = 0

    @property
    def port(self) -> int:
        if self._socket is None:
            raise ConfigurationError("the TLS listener is not started")
        port: int = self._socket.getsockname()[1]
        return port

    def start(self, host: str, port: int, backlog: int) -> None:
        """Bind and listen now (OSError if the address cannot be bound); accept on the loop."""
        sock = listening_socket(host, port, backlog)
        self._socket = sock
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop(sock))

    def close(self) -> None:
        """Stop accepting; connections being served are the server's to close."""
        if self._accepting is not None:
            self._accepting.cancel()
        if self._socket is not None:
            self._socket.close()

    async def wait_closed(self) -> None:
        if self._accepting is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
        for task in list(self._tasks):
            task.cancel()

    async def _accept_loop(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _address = await loop.sock_accept(listening)
            except OSError as error:
                _log.warning("accept on the native port failed: %s", error)
                await asyncio.sleep(_ACCEPT_ERROR_PAUSE_S)
                continue
            if self._pending >= self._tls.max_pending_handshakes:
                self._stats.tls_handshake_failures += 1
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._open(sock))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _open(self, sock: socket.socket) -> None:
        """Sniff, handshake (bounded), then serve; the socket is closed on any failure."""
        loop = asyncio.get_running_loop()
        tls = self._tls
        self._pending += 1
        try:
            try:
                first = await asyncio.wait_for(_first_byte(loop, sock), tls.handshake_timeout_s)
                secure = bool(first) and first[0] == TLS_HANDSHAKE_RECORD
                if not first:
                    sock.close()
                    return
                context = tls.context if secure else None
                # connect_accepted_socket bounds the handshake; wait_for is the backstop.
                reader, writer = await asyncio.wait_for(
                    _streams(loop, sock, context, tls.handshake_timeout_s, self._read_limit),
                    tls.handshake_timeout_s + 1.0,
                )
            except (OSError, TimeoutError, EOFError) as error:  # ssl.SSLError is an OSError
                self._stats.tls_handshake_failures += 1
                _log.debug("TLS handshake on the native port failed: %r", error)
                sock.close()
                return
        finally:
            self._pending -= 1
        if secure:
            self._stats.tls_connections += 1
            await self._serve(reader, writer)
        elif tls.optional:
            await self._serve(reader, writer)
        else:
            self._stats.plaintext_refused += 1
            await self._refuse_plaintext(reader, writer)
