"""The real network: asyncio TCP with length-prefixed frames, bounded queues and reconnection.

The asyncio shell's implementation of ``Network`` (``_interfaces.py``); the receiving side of a
connection is ``_asyncio_inbound.py``. Theory of operation:

* **One connection per direction.** A link ``src -> dst`` owns one outbound TCP connection,
  opened lazily by the first ``send`` and bound to ``src``'s host, as Cassandra's outbound
  connections are; ``dst``'s listener delivers what arrives on its inbound connections. So
  messages between a pair are FIFO while one connection lasts, and lost bytes are only ever the
  tail written just before a connection broke (at most once, never duplicated).
* **Wire format.** Every frame is a 4-byte big-endian length and that many bytes. The first frame
  of a connection is the hello ``b"RFN1" + src + b"\\n" + dst``, naming the sender's listening
  endpoint (what ``on_message`` reports as ``src``). A header announcing more than
  ``max_frame_bytes`` (or a hello above 1 KiB) is a peer protocol violation: the connection is
  closed before the body is buffered, so a malicious length cannot make us allocate.
* **Who is speaking.** The listener checks that the hello's ``dst`` port is its own, that
  (``verify_peer_address``) ``src``'s host is the address the connection comes from (outbound
  sockets are bound to the sender's own host, so a node can only claim its own identity) and,
  with ``same_port_peers``, that ``src``'s port is its own too (one identity per address).
  Cassandra's ``InboundConnectionInitiator`` authenticates the remote address
  (``InternodeAuthenticator``) before reading any message, gives each connection its own frame
  decoder and arms a handshake timeout; it trusts the claimed ``from`` (a broadcast address may
  differ from the socket's behind NAT), which ringflow's nodes, always sending from their
  listen address, do not need.
* **TLS** (``tls=InternodeTls``, issue 18): listener and outbound connections run TLS with
  mutual certificates chained to the cluster's CA; the dialing side checks the peer's IP SAN
  against the address it dials, the listener that the hello's claimed host is one of the
  peer certificate's IP SANs (``_asyncio_inbound``). The handshake is bounded in time
  (``handshake_timeout_s``) and, on the listening side, in count (``max_pending_handshakes``
  at once, the excess closed at once: ``NetworkStats.tls_handshakes_refused``); a failed one is
  a failed connect (backoff) or a closed socket (``tls_handshake_failures``).
* **Read deadlines and inbound limits.** A connection must send its hello within
  ``hello_timeout_ms`` (Cassandra's ``HandshakeProtocol.TIMEOUT_MILLIS``), and a frame must be
  complete within ``frame_read_timeout_ms`` of its first bytes, however slowly they trickle
  (``NetworkStats.read_timeouts``): a header whose body never comes holds neither memory nor a
  connection for long. An idle connection between frames holds nothing and may stay open. A
  listener accepts at most ``max_inbound_connections``, at most
  ``max_inbound_connections_per_address`` from one address (so one host cannot take every slot
  from the real peers), and holds at most ``max_inbound_buffered_bytes`` of incomplete frames
  over all its connections (the connection whose bytes would pass it is closed):
  ``NetworkStats.connections_refused``.
* **Bounded, non-blocking send.** ``send`` appends to the link's queue or raises
  ``Backpressure`` when the queue holds ``max_queued_messages`` messages or
  ``max_queued_bytes`` bytes. The link's task writes while the transport is below its
  high-water mark (``pause_writing``/``resume_writing``), so memory stays bounded by queue +
  transport buffer + kernel socket buffers when the peer stops reading.
* **Reconnection.** A failed connect or a lost connection puts the link in backoff: delays grow
  as ``min * 2^(attempt-1)`` up to ``max`` with "equal jitter" (uniform in ``[d/2, d]``, AWS
  architecture blog "Exponential Backoff and Jitter"), reset once a connection has stayed up
  for ``max`` (so a peer accepting and dropping us at once still backs off). A link
  with nothing queued does not reconnect (lazy, like Cassandra's outbound connections). Queued
  messages wait for the reconnection, bounded by the queue limits.
* **Flow control on receive.** ``Listener.pause`` stops reading every inbound connection of the
  listener (TCP fills up, senders see ``Backpressure``); ``resume`` delivers buffered frames in
  order, from the event loop, never from inside ``resume``.
* Handlers (``on_message``, ``on_link``) run on the event loop; an exception from one is logged
  and counted (``NetworkStats.handler_errors``), never allowed to kill a connection, except
  ``ProtocolViolation`` from ``on_message``: the message broke the protocol, so that one
  connection is closed and the violation counted (``protocol_violations``).
* **Bounded links.** At ``max_links`` outbound links a new destination evicts an idle link (empty
  queue), else one that is not connected (its queued messages are dropped, as a lost
  connection's would be), the least recently used first; only when every link is connected and
  busy does ``send`` refuse with ``NetworkError``. So endpoints named by strangers (gossip
  answers to spoofed sources) cannot lock real peers out.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

from ringflow.errors import InternalError, invariant
from ringflow.runtime._asyncio_inbound import (
    HEADER,
    HELLO_MAGIC,
    InboundProtocol,
    TlsAcceptor,
    stream_of,
)
from ringflow.runtime._interfaces import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_QUEUED_MESSAGES,
    Backpressure,
    Endpoint,
    EndpointError,
    LinkDown,
    LinkEvent,
    LinkHandler,
    LinkUp,
    Listener,
    MessageHandler,
    Network,
    NetworkError,
    NotListening,
    ProtocolViolation,
    check_limit,
    check_payload,
    format_endpoint,
    parse_endpoint,
)
from ringflow.runtime._tls import InternodeTls

_LOG: Final = logging.getLogger("ringflow.runtime.network")
_HEADER: Final = HEADER
_LISTEN_BACKLOG: Final = 128


@dataclass(frozen=True, slots=True)
class AsyncioNetworkConfig:
    """Limits and timings of the real network; every one has a sane default."""

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_queued_messages: int = DEFAULT_MAX_QUEUED_MESSAGES
    """Per link: messages waiting to be written before ``send`` raises ``Backpressure``."""
    max_queued_bytes: int = 64 * 1024 * 1024
    """Per link: payload bytes waiting to be written."""
    reconnect_delay_ms_min: int = 50
    reconnect_delay_ms_max: int = 5_000
    connect_timeout_ms: int = 2_000
    write_buffer_bytes_high: int = 256 * 1024
    """Transport high-water mark: above it the link stops writing until it drains."""
    socket_buffer_bytes: int | None = None
    """``SO_SNDBUF``/``SO_RCVBUF`` of every socket; ``None`` leaves the kernel's autotuning."""
    max_links: int = 4096
    max_inbound_connections: int = 1024
    """Per listener."""
    max_inbound_connections_per_address: int = 16
    """Per listener and peer address (a node opens one connection to each peer)."""
    max_inbound_buffered_bytes: int = 256 * 1024 * 1024
    """Per listener: bytes of incomplete frames held over all its connections."""
    hello_timeout_ms: int = 10_000
    """An accepted connection that has not sent its hello by then is closed."""
    frame_read_timeout_ms: int = 60_000
    """A frame not complete this long after its first bytes arrived closes its connection."""
    verify_peer_address: bool = True
    """The hello's claimed host must be the address the connection comes from."""
    same_port_peers: bool = False
    """The hello's claimed port must be the listener's own: every node of a cluster listens on
    the same port (7000), so one address can claim one identity, not one per port."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        check_limit("max_frame_bytes", self.max_frame_bytes)
        check_limit("max_queued_messages", self.max_queued_messages)
        check_limit("max_queued_bytes", self.max_queued_bytes)
        check_limit("reconnect_delay_ms_min", self.reconnect_delay_ms_min)
        check_limit("reconnect_delay_ms_max", self.reconnect_delay_ms_max)
        check_limit("connect_timeout_ms", self.connect_timeout_ms)
        check_limit("write_buffer_bytes_high", self.write_buffer_bytes_high)
        check_limit("max_links", self.max_links)
        check_limit("max_inbound_connections", self.max_inbound_connections)
        check_limit("max_inbound_connections_per_address", self.max_inbound_connections_per_address)
        check_limit("max_inbound_buffered_bytes", self.max_inbound_buffered_bytes)
        check_limit("hello_timeout_ms", self.hello_timeout_ms)
        check_limit("frame_read_timeout_ms", self.frame_read_timeout_ms)
        if self.socket_buffer_bytes is not None:
            check_limit("socket_buffer_bytes", self.socket_buffer_bytes, minimum=1024)
        if self.reconnect_delay_ms_max < self.reconnect_delay_ms_min:
            raise EndpointError(
                f"reconnect_delay_ms_max {self.reconnect_delay_ms_max} is below "
                f"reconnect_delay_ms_min {self.reconnect_delay_ms_min}"
            )


@dataclass(frozen=True, slots=True)
class NetworkStats:
    """Counters of one ``AsyncioNetwork`` since it was created."""

    frames_sent: int
    frames_received: int
    connects: int
    connect_failures: int
    connections_lost: int
    protocol_violations: int
    handler_errors: int
    read_timeouts: int
    links_evicted: int
    connections_refused: int
    tls_handshake_failures: int = 0
    """Inbound TLS handshakes that failed or timed out (``InternodeTls.handshake_timeout_s``)."""
    tls_handshakes_refused: int = 0
    """Inbound connections closed at once: ``InternodeTls.max_pending_handshakes`` were
    already shaking hands."""


@final
class _Counters:
    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values = dict.fromkeys(NetworkStats.__dataclass_fields__, 0)

    def add(self, name: str, amount: int = 1) -> None:
        invariant(name in self._values, f"unknown network counter {name!r}")
        self._values[name] += amount

    def value(self, name: str) -> int:
        return self._values[name]

    def snapshot(self) -> NetworkStats:
        return NetworkStats(**self._values)


def reconnect_delay_ms(
    attempt: int, *, delay_ms_min: int, delay_ms_max: int, rng: random.Random
) -> int:
    """Backoff before reconnect ``attempt`` (1-based): capped exponential with equal jitter."""
    invariant(attempt >= 1, f"reconnect attempt {attempt} must be >= 1")
    invariant(1 <= delay_ms_min <= delay_ms_max, f"backoff {delay_ms_min}..{delay_ms_max}")
    base_ms = min(delay_ms_max, delay_ms_min << min(attempt - 1, 40))
    return rng.randint((base_ms + 1) // 2, base_ms)


def encode_frame(payload: bytes) -> bytes:
    """One wire frame: the 4-byte big-endian length, then ``payload``."""
    return _HEADER.pack(len(payload)) + payload


def encode_hello(src: Endpoint, dst: Endpoint) -> bytes:
    return encode_frame(HELLO_MAGIC + src.encode() + b"\n" + dst.encode())


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _new_socket(host: str, buffer_bytes: int | None) -> socket.socket:
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        if buffer_bytes is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
    except OSError:
        sock.close()
        raise
    return sock


def _is_ip_literal(host: str) -> bool:
    try:
        socket.inet_pton(_family(host), host)
    except OSError:
        return False
    return True


def _call_handler(network: AsyncioNetwork, handler: Callable[..., object], *args: object) -> None:
    """Run a user handler; log and count its exception instead of breaking the connection."""
    try:
        handler(*args)
    except Exception:
        network._counters.add("handler_errors")
        _LOG.exception("network handler %r raised", handler)


# --- receiving ---------------------------------------------------------------------------------


@final
class _AsyncioListener:
    """``Listener``: one listening socket and its inbound connections."""

    def __init__(
        self,
        network: AsyncioNetwork,
        endpoint: Endpoint,
        sock: socket.socket,
        on_message: MessageHandler,
        on_link: LinkHandler | None,
    ) -> None:
        self.network = network
        self._endpoint = endpoint
        self.on_message = on_message
        self.on_link = on_link
        self.inbound: set[InboundProtocol] = set()
        self.buffered_bytes = 0
        """Bytes of incomplete frames held by ``inbound`` (``max_inbound_buffered_bytes``)."""
        self.paused = False
        self.closed = False
        self._acceptor: TlsAcceptor | None = None
        self._server_task: asyncio.Task[asyncio.Server] | None = None
        if network.tls is not None:  # handshakes bounded in count too (``_asyncio_inbound``)
            self._acceptor = TlsAcceptor(self, sock, network.tls)
        else:
            self._server_task = network._loop.create_task(
                network._loop.create_server(lambda: InboundProtocol(self), sock=sock)
            )

    @property
    def endpoint(self) -> Endpoint:
        return self._endpoint

    def deliver(self, src: Endpoint, payload: bytes) -> str | None:
        """Hand one message to ``on_message``; the reason when it refused it (its connection
        is then closed), else None."""
        self.network._counters.add("frames_received")
        try:
            self.on_message(src, payload)
        except ProtocolViolation as violation:
            return str(violation)
        except Exception:
            self.network._counters.add("handler_errors")
            _LOG.exception("network handler %r raised", self.on_message)
        return None

    def notify(self, event: LinkEvent) -> None:
        if self.on_link is not None and not self.closed:
            _call_handler(self.network, self.on_link, event)

    def pause(self) -> None:
        self.paused = True
        for protocol in list(self.inbound):
            protocol.pause()

    def resume(self) -> None:
        self.paused = False
        for protocol in list(self.inbound):
            protocol.resume()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.network._forget_listener(self)
        if self._acceptor is not None:
            self._acceptor.close()
        elif self._server_task is not None and self._server_task.done():
            _close_server(self._server_task)
        elif self._server_task is not None:
            self._server_task.add_done_callback(_close_server)
        for protocol in list(self.inbound):
            protocol.close()

    async def wait_closed(self) -> None:
        if self._acceptor is not None:
            await self._acceptor.wait_closed()
        elif self._server_task is not None and not self._server_task.cancelled():
            server = await self._server_task
            await server.wait_closed()

    @property
    def pending_handshakes(self) -> int:
        """TLS handshakes in progress (0 without internode TLS)."""
        return 0 if self._acceptor is None else self._acceptor.pending


def _close_server(task: asyncio.Task[asyncio.Server]) -> None:
    if not task.cancelled() and task.exception() is None:
        task.result().close()


# --- sending -----------------------------------------------------------------------------------


@final
class _OutboundProtocol(asyncio.Protocol):
    """The sending side of one link's connection: flow control and loss detection."""

    def __init__(self, link: _OutboundLink) -> None:
        self._link = link
        self.transport: asyncio.Transport | None = None
        self.writable = True
        self.lost = False
        self.lost_reason = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = stream_of(transport)

    def data_received(self, data: bytes) -> None:
        # The listening side never writes on our outbound connection.
        self._link.network._counters.add("protocol_violations")
        if self.transport is not None:
            self.transport.close()

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        self._link.wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.lost_reason = "closed by peer" if exc is None else f"{type(exc).__name__}: {exc}"
        self._link.wake()


@final
class _OutboundLink:
    """The queue and connection of ``src -> dst``, driven by one task."""

    def __init__(self, network: AsyncioNetwork, src: Endpoint, dst: Endpoint) -> None:
        self.network = network
        self.src = src
        self.dst = dst
        self._dst_host, self._dst_port = parse_endpoint(dst)
        self._src_host = parse_endpoint(src)[0]
        self.queue: deque[bytes] = deque()
        self.queued_bytes = 0
        self.closed = False
        self.connected = False
        self.used_at = network._loop.time()
        self._wakeup = asyncio.Event()
        self._protocol: _OutboundProtocol | None = None
        self.task = network._loop.create_task(self._run(), name=f"link {src}->{dst}")

    def enqueue(self, payload: bytes) -> None:
        config = self.network.config
        full = len(self.queue) >= config.max_queued_messages
        if full or self.queued_bytes + len(payload) > config.max_queued_bytes:
            raise Backpressure(self.src, self.dst, len(self.queue), config.max_queued_messages)
        self.queue.append(payload)
        self.queued_bytes += len(payload)
        self._wakeup.set()

    def wake(self) -> None:
        self._wakeup.set()

    def close(self) -> None:
        self.closed = True
        self.queue.clear()
        self.queued_bytes = 0
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self.task.cancel()

    async def _run(self) -> None:
        loop = self.network._loop
        stable_s = self.network.config.reconnect_delay_ms_max / 1000.0
        failures = 0
        while not self.closed:
            await self._wait(lambda: bool(self.queue))
            protocol = await self._connect()
            if protocol is None:
                failures += 1
                await self._backoff(failures)
                continue
            connected_at = loop.time()
            self.connected = True
            self._notify(LinkUp(self.src, self.dst))
            try:
                await self._pump(protocol)
            finally:
                self.connected = False
                self._protocol = None
                if protocol.transport is not None:
                    protocol.transport.close()
            self.network._counters.add("connections_lost")
            self._notify(LinkDown(self.src, self.dst, protocol.lost_reason or "closed"))
            # A connection that lived a while starts the backoff over; one dropped at once (a
            # peer at its connection limit, or rejecting us) keeps escalating it.
            failures = 1 if loop.time() - connected_at >= stable_s else failures + 1
            await self._backoff(failures)

    async def _wait(self, ready: Callable[[], bool]) -> None:
        while not self.closed and not ready():
            self._wakeup.clear()
            await self._wakeup.wait()

    async def _backoff(self, attempt: int) -> None:
        config = self.network.config
        delay_ms = reconnect_delay_ms(
            attempt,
            delay_ms_min=config.reconnect_delay_ms_min,
            delay_ms_max=config.reconnect_delay_ms_max,
            rng=self.network._rng,
        )
        await asyncio.sleep(delay_ms / 1000.0)

    async def _connect(self) -> _OutboundProtocol | None:
        network = self.network
        config = network.config
        sock = _new_socket(self._dst_host, config.socket_buffer_bytes)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if _is_ip_literal(self._src_host) and _family(self._src_host) == sock.family:
                sock.bind((self._src_host, 0))
            await asyncio.wait_for(
                network._loop.sock_connect(sock, (self._dst_host, self._dst_port)),
                config.connect_timeout_ms / 1000.0,
            )
            tls = network.tls
            transport, protocol = await network._loop.create_connection(
                lambda: _OutboundProtocol(self),
                sock=sock,
                ssl=None if tls is None else tls.client,
                server_hostname=None if tls is None else self._dst_host,
                ssl_handshake_timeout=None if tls is None else tls.handshake_timeout_s,
            )
        except (OSError, TimeoutError) as error:  # ssl.SSLError is an OSError
            sock.close()
            network._counters.add("connect_failures")
            _LOG.debug("connect %s -> %s failed: %s", self.src, self.dst, error)
            return None
        except BaseException:
            sock.close()
            raise
        transport.set_write_buffer_limits(high=config.write_buffer_bytes_high)
        transport.write(encode_hello(self.src, self.dst))
        network._counters.add("connects")
        self._protocol = protocol
        return protocol

    async def _pump(self, protocol: _OutboundProtocol) -> None:
        while not self.closed and not protocol.lost:
            transport = protocol.transport
            if transport is None:
                raise InternalError(f"link {self.src}->{self.dst} has no transport")
            while self.queue and protocol.writable and not protocol.lost:
                payload = self.queue.popleft()
                self.queued_bytes -= len(payload)
                transport.write(encode_frame(payload))
                self.network._counters.add("frames_sent")
            await self._wait(lambda: protocol.lost or (bool(self.queue) and protocol.writable))

    def _notify(self, event: LinkEvent) -> None:
        listener = self.network._listeners.get(self.src)
        if listener is not None:
            listener.notify(event)


# --- the network -------------------------------------------------------------------------------


@final
class AsyncioNetwork:
    """``Network`` over asyncio TCP; one instance per node process (or per test)."""

    def __init__(
        self,
        config: AsyncioNetworkConfig | None = None,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        rng: random.Random | None = None,
        tls: InternodeTls | None = None,
    ) -> None:
        self.config = config if config is not None else AsyncioNetworkConfig()
        self.tls = tls
        """Internode TLS (``_tls``): mutual certificates, the peer's IP SAN checked."""
        self.config.validate()
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._rng = rng if rng is not None else random.Random()
        self._listeners: dict[Endpoint, _AsyncioListener] = {}
        self._links: dict[tuple[Endpoint, Endpoint], _OutboundLink] = {}
        self._retired: list[_AsyncioListener] = []
        self._counters = _Counters()
        self._closed = False

    @property
    def max_frame_bytes(self) -> int:
        return self.config.max_frame_bytes

    def listen(
        self,
        endpoint: Endpoint,
        on_message: MessageHandler,
        *,
        on_link: LinkHandler | None = None,
    ) -> _AsyncioListener:
        """Bind ``endpoint`` now (errors are immediate); accept connections on the loop."""
        if self._closed:
            raise NetworkError("the network is closed")
        host, port = parse_endpoint(endpoint)
        sock = _new_socket(host, self.config.socket_buffer_bytes)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(_LISTEN_BACKLOG)
        except OSError as error:
            sock.close()
            raise EndpointError(f"cannot listen on {endpoint}: {error}") from error
        bound = format_endpoint(host, sock.getsockname()[1])
        if bound in self._listeners:
            sock.close()
            raise EndpointError(f"{bound} is already listening")
        listener = _AsyncioListener(self, bound, sock, on_message, on_link)
        self._listeners[bound] = listener
        return listener

    def send(self, src: Endpoint, dst: Endpoint, payload: bytes) -> None:
        if self._closed:
            raise NetworkError("the network is closed")
        payload = check_payload(payload, self.config.max_frame_bytes)
        if src not in self._listeners:
            raise NotListening(f"cannot send from {src!r}: it is not listening")
        link = self._links.get((src, dst))
        if link is None:
            parse_endpoint(dst)
            if len(self._links) >= self.config.max_links:
                self._evict_link()
            link = _OutboundLink(self, src, dst)
            self._links[(src, dst)] = link
        link.enqueue(payload)
        link.used_at = self._loop.time()

    def _evict_link(self) -> None:
        """Make room for one link (module docstring): idle first, then not connected, LRU."""
        idle = [link for link in self._links.values() if not link.queue]
        candidates = idle or [link for link in self._links.values() if not link.connected]
        if not candidates:
            raise NetworkError(f"{len(self._links)} links open, limit {self.config.max_links}")
        victim = min(candidates, key=lambda link: link.used_at)
        self._links.pop((victim.src, victim.dst)).close()
        self._counters.add("links_evicted")

    def link_connected(self, src: Endpoint, dst: Endpoint) -> bool:
        """Whether ``src -> dst`` currently has a live connection (for tests and status)."""
        link = self._links.get((src, dst))
        return link is not None and link.connected

    def queued(self, src: Endpoint, dst: Endpoint) -> int:
        """Messages of ``src -> dst`` not yet written to the connection."""
        link = self._links.get((src, dst))
        return 0 if link is None else len(link.queue)

    def stats(self) -> NetworkStats:
        return self._counters.snapshot()

    def _forget_listener(self, listener: _AsyncioListener) -> None:
        self._listeners.pop(listener.endpoint, None)
        self._retired.append(listener)
        for key in [key for key in self._links if key[0] == listener.endpoint]:
            self._links.pop(key).close()

    async def aclose(self, *, timeout_ms: int = 5_000) -> None:
        """Close every listener and link and wait (bounded) until their tasks are done."""
        self._closed = True
        for listener in list(self._listeners.values()):
            listener.close()
        tasks = [link.task for link in self._links.values()]
        for link in self._links.values():
            link.close()
        self._links.clear()
        waits = [*tasks, *(listener.wait_closed() for listener in self._retired)]
        self._retired.clear()
        if waits:
            await asyncio.wait_for(
                asyncio.gather(*waits, return_exceptions=True), timeout_ms / 1000.0
            )
        await asyncio.sleep(0)

    def validate(self) -> None:
        for (src, dst), link in self._links.items():
            invariant(src in self._listeners, f"link {src}->{dst} outlived its listener")
            invariant(not link.closed, f"closed link {src}->{dst} still registered")
            invariant(
                len(link.queue) <= self.config.max_queued_messages,
                f"link {src}->{dst} holds {len(link.queue)} messages",
            )
            invariant(
                link.queued_bytes == sum(len(p) for p in link.queue),
                f"link {src}->{dst} byte count drifted",
            )
        for endpoint, listener in self._listeners.items():
            invariant(listener.endpoint == endpoint and not listener.closed, f"{endpoint}")
            held = sum(protocol.accounted_bytes for protocol in listener.inbound)
            invariant(listener.buffered_bytes == held, f"{endpoint} buffered bytes drifted")


def _conforms(network: AsyncioNetwork, listener: _AsyncioListener) -> tuple[Network, Listener]:
    """Never called: makes mypy prove the real network implements the protocols."""
    return network, listener
