"""The receiving side of ``AsyncioNetwork``: one accepted internode connection.

Split out of ``_asyncio_net.py`` (whose module docstring is the theory of operation: wire
format, who is speaking, read deadlines and inbound limits). ``_InboundProtocol`` reads the
hello, checks the claimed endpoint against the connection's peer address, enforces the frame
and buffer limits and deadlines, and hands each complete frame to its listener; a
``ProtocolViolation`` from the listener's handler closes this connection only (issue 16).
With internode TLS (``AsyncioNetwork(tls=...)``, issue 18) the connection is only made once
the peer's certificate chained to the cluster's CA, and the hello's claimed host must also be
one of the certificate's IP SANs: a node holding a valid certificate for one address cannot
speak for another. ``TlsAcceptor`` accepts those connections itself so it can bound the
handshakes in progress in count (``InternodeTls.max_pending_handshakes``: a connection accepted
beyond them is closed at once, ``NetworkStats.tls_handshakes_refused``) as well as in time
(``handshake_timeout_s``; a failed or timed-out handshake counts ``tls_handshake_failures``):
``asyncio``'s own TLS server hands a connection to its protocol only after the handshake, so it
could neither count nor refuse the ones still shaking hands.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
from typing import TYPE_CHECKING, Final, cast, final

from ringflow.errors import InternalError
from ringflow.runtime._interfaces import Endpoint, EndpointError, parse_endpoint
from ringflow.runtime._tls import InternodeTls, peer_addresses

if TYPE_CHECKING:
    from ringflow.runtime._asyncio_net import _AsyncioListener

_LOG: Final = logging.getLogger("ringflow.runtime.network")
HEADER: Final = struct.Struct(">I")
HELLO_MAGIC: Final = b"RFN1"
MAX_HELLO_BYTES: Final = 1024
_LOG_FIRST: Final = 20
_LOG_EVERY: Final = 1_000
_ACCEPT_ERROR_PAUSE_S: Final = 0.1
"""After an accept error (out of descriptors), wait before the next accept."""


def _same_address(claimed_host: str, peer_host: str | None) -> bool:
    """Whether the host a hello claims is the address the connection comes from."""
    if peer_host is None:
        return False
    try:
        claimed = ipaddress.ip_address(claimed_host)
        peer = ipaddress.ip_address(peer_host.split("%", 1)[0])
    except ValueError:  # a host name: a node's internode endpoint is an address
        return False
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
        return claimed == peer.ipv4_mapped
    return claimed == peer


def _certified_for(claimed_host: str, certified: frozenset[str]) -> bool:
    """Whether a certificate naming ``certified`` addresses may speak for ``claimed_host``."""
    try:
        return str(ipaddress.ip_address(claimed_host)) in certified
    except ValueError:
        return False


@final
class InboundProtocol(asyncio.Protocol):
    """One accepted connection: hello, then frames delivered to the listener."""

    def __init__(self, listener: _AsyncioListener) -> None:
        self._listener = listener
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._src: Endpoint | None = None
        self._peer_host: str | None = None
        self._certified: frozenset[str] | None = None
        """With internode TLS, the addresses the peer's verified certificate names."""
        self._paused = False
        self._deadline: asyncio.TimerHandle | None = None
        self._frame_started_at = 0.0
        self.accounted_bytes = 0
        """Bytes of ``_buffer`` counted in the listener's ``buffered_bytes``."""

    @property
    def peer_host(self) -> str | None:
        return self._peer_host

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        stream = self._transport = stream_of(transport)
        listener = self._listener
        config = listener.network.config
        peer = stream.get_extra_info("peername")
        self._peer_host = str(peer[0]) if isinstance(peer, tuple) and peer else None
        if listener.network.tls is not None:  # called once the handshake is done
            self._certified = peer_addresses(stream.get_extra_info("peercert"))
        same = sum(1 for other in listener.inbound if other.peer_host == self._peer_host)
        full = len(listener.inbound) >= config.max_inbound_connections
        if listener.closed or full or same >= config.max_inbound_connections_per_address:
            if not listener.closed:
                listener.network._counters.add("connections_refused")
            stream.close()
            return
        listener.inbound.add(self)
        set_nodelay(stream)
        self._arm(config.hello_timeout_ms / 1000.0)
        if listener.paused:
            self.pause()

    def connection_lost(self, exc: Exception | None) -> None:
        self._listener.inbound.discard(self)
        self._transport = None
        self._buffer.clear()
        self._account()
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def data_received(self, data: bytes) -> None:
        listener = self._listener
        limit = listener.network.config.max_inbound_buffered_bytes
        if listener.buffered_bytes + len(data) > limit:
            self._close_for("connections_refused", f"inbound buffers above {limit} bytes")
            return
        held = len(self._buffer)
        self._buffer += data
        self._deliver_frames()
        if not held or len(self._buffer) < held + len(data):  # a new frame began in ``data``
            self._frame_started_at = listener.network._loop.time()
        self._account()
        if self._buffer and self._deadline is None:
            self._arm(listener.network.config.frame_read_timeout_ms / 1000.0)

    def _account(self) -> None:
        self._listener.buffered_bytes += len(self._buffer) - self.accounted_bytes
        self.accounted_bytes = len(self._buffer)

    def eof_received(self) -> bool | None:
        return None

    def pause(self) -> None:
        self._paused = True
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume(self) -> None:
        self._paused = False
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
            self._listener.network._loop.call_soon(self._deliver_frames)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def _arm(self, delay_s: float) -> None:
        self._deadline = self._listener.network._loop.call_later(delay_s, self._on_deadline)

    def _on_deadline(self) -> None:
        """No hello yet, or a frame still incomplete: close (module docstring).
        While the listener is paused the bytes held are ours to read, not the peer's fault."""
        self._deadline = None
        if not self._open():
            return
        config = self._listener.network.config
        if self._src is None:
            if self._paused:
                self._arm(config.hello_timeout_ms / 1000.0)
            else:
                self._timeout(f"no hello within {config.hello_timeout_ms} ms")
            return
        if not self._buffer:
            return  # between frames: an idle connection holds nothing
        timeout_s = config.frame_read_timeout_ms / 1000.0
        now = self._listener.network._loop.time()
        if self._paused:  # the frames held may be complete: count from the resume on
            self._frame_started_at = now
        elapsed_s = now - self._frame_started_at
        if elapsed_s >= timeout_s:
            self._timeout(f"a frame incomplete {config.frame_read_timeout_ms} ms after it began")
        else:
            self._arm(max(0.001, timeout_s - elapsed_s))

    def _timeout(self, reason: str) -> None:
        self._close_for("read_timeouts", reason)

    def _deliver_frames(self) -> None:
        buffer = self._buffer
        offset = 0
        while not self._paused and self._open() and len(buffer) - offset >= HEADER.size:
            (length,) = HEADER.unpack_from(buffer, offset)
            limit = MAX_HELLO_BYTES if self._src is None else self._listener.network.max_frame_bytes
            if length > limit:
                self._violation(f"frame of {length} bytes above the limit of {limit}")
                return
            end = offset + HEADER.size + length
            if len(buffer) < end:
                break
            payload = bytes(buffer[offset + HEADER.size : end])
            offset = end
            if self._src is None:
                self._accept_hello(payload)
                continue
            refused = self._listener.deliver(self._src, payload)
            if refused is not None:
                self._violation(f"message from {self._src} refused: {refused}")
                return
        del buffer[:offset]
        self._account()

    def _accept_hello(self, payload: bytes) -> None:
        src_bytes, separator, dst_bytes = payload[len(HELLO_MAGIC) :].partition(b"\n")
        try:
            src, dst = src_bytes.decode(), dst_bytes.decode()
            ok = payload.startswith(HELLO_MAGIC) and separator == b"\n"
            ok = ok and parse_endpoint(dst)[1] == parse_endpoint(self._listener.endpoint)[1]
            src_host, src_port = parse_endpoint(src)
        except (UnicodeDecodeError, EndpointError):
            ok = False
        if not ok:
            self._violation(f"bad hello {payload[:80]!r}")
            return
        config = self._listener.network.config
        if config.verify_peer_address and not _same_address(src_host, self._peer_host):
            self._violation(f"hello claims {src!r} from address {self._peer_host}")
            return
        if self._certified is not None and not _certified_for(src_host, self._certified):
            self._violation(
                f"hello claims {src!r}; the peer's certificate names {sorted(self._certified)}"
            )
            return
        if config.same_port_peers and src_port != parse_endpoint(self._listener.endpoint)[1]:
            self._violation(f"hello claims {src!r}: peers listen on the same port as we do")
            return
        self._src = src

    def _violation(self, reason: str) -> None:
        self._close_for("protocol_violations", reason)

    def _close_for(self, counter: str, reason: str) -> None:
        """Count, log (the first few, then one in ``_LOG_EVERY``: a flood of bad connections
        cannot flood the log) and close."""
        counters = self._listener.network._counters
        counters.add(counter)
        count = counters.value(counter)
        if count <= _LOG_FIRST or count % _LOG_EVERY == 0:
            _LOG.warning(
                "closing inbound connection to %s (%s #%d): %s",
                self._listener.endpoint,
                counter,
                count,
                reason,
            )
        self._buffer.clear()
        self._account()
        self.close()


@final
class TlsAcceptor:
    """The accept loop of a TLS listener: each accepted socket runs its handshake in a task of
    its own, at most ``tls.max_pending_handshakes`` at once (module docstring); a finished
    handshake hands the connection to an ``InboundProtocol`` of ``listener``."""

    def __init__(self, listener: _AsyncioListener, sock: socket.socket, tls: InternodeTls) -> None:
        self._listener = listener
        self._socket = sock
        self._tls = tls
        self._handshakes: set[asyncio.Task[None]] = set()
        self.task = listener.network._loop.create_task(self._accept_loop())

    @property
    def pending(self) -> int:
        """Handshakes in progress."""
        return len(self._handshakes)

    async def _accept_loop(self) -> None:
        loop = self._listener.network._loop
        counters = self._listener.network._counters
        while True:
            try:
                conn, _address = await loop.sock_accept(self._socket)
            except OSError as error:
                _LOG.warning("internode accept on %s failed: %s", self._listener.endpoint, error)
                await asyncio.sleep(_ACCEPT_ERROR_PAUSE_S)
                continue
            if self._listener.closed or self.pending >= self._tls.max_pending_handshakes:
                counters.add("tls_handshakes_refused")
                conn.close()
                continue
            conn.setblocking(False)
            task = loop.create_task(self._handshake(conn))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, conn: socket.socket) -> None:
        """The handshake, bounded by ``connect_accepted_socket``'s timeout (``wait_for`` is the
        backstop); a failure closes the socket and is counted."""
        loop = self._listener.network._loop
        timeout_s = self._tls.handshake_timeout_s
        try:
            await asyncio.wait_for(
                loop.connect_accepted_socket(
                    lambda: InboundProtocol(self._listener),
                    conn,
                    ssl=self._tls.server,
                    ssl_handshake_timeout=timeout_s,
                ),
                timeout_s + 1.0,
            )
        except (OSError, TimeoutError, EOFError) as error:  # ssl.SSLError is an OSError
            self._listener.network._counters.add("tls_handshake_failures")
            _LOG.debug("internode TLS handshake on %s failed: %r", self._listener.endpoint, error)
            conn.close()

    def close(self) -> None:
        """Stop accepting and abandon the handshakes in progress."""
        self.task.cancel()
        for task in list(self._handshakes):
            task.cancel()
        self._socket.close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        for task in list(self._handshakes):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


_STREAM_METHODS = ("write", "writelines", "pause_reading", "resume_reading", "is_closing", "abort")


def stream_of(transport: asyncio.BaseTransport) -> asyncio.Transport:
    """``transport`` as a stream transport: asyncio's, or one with the same methods (uvloop's
    transports implement the API without subclassing asyncio's classes)."""
    if isinstance(transport, asyncio.Transport):
        return transport
    if not all(callable(getattr(transport, name, None)) for name in _STREAM_METHODS):
        raise InternalError(f"expected a stream transport, got {transport!r}")
    return cast(asyncio.Transport, transport)


def set_nodelay(transport: asyncio.Transport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
