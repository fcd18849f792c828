"""Internode TLS handshakes are bounded in count, not only in time (issue 18).

A listener with ``InternodeTls(max_pending_handshakes=4)`` is flooded by raw TCP connections
that never send a ClientHello (a stalled handshake each, with a handshake timeout far longer
than the test). Proves: at most 4 handshakes are ever pending; every connection beyond them is
closed by the listener at once (the client reads EOF) and counted in
``NetworkStats.tls_handshakes_refused``; once the stalled clients go away their handshakes
fail (``tls_handshake_failures``), and a real peer with a cluster certificate then connects
and is served. Before the limit, every stalled connection held a socket and a TLS state until
its timeout and none was refused. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from ringflow.errors import ConfigurationError
from ringflow.runtime import (
    AsyncioNetwork,
    InternodeTls,
    ServerEncryptionOptions,
    issue_certificate,
    make_ca,
    parse_endpoint,
    write_pair,
)

pytestmark = pytest.mark.timeout(60)

LISTEN_HOST = "127.0.0.2"
PEER_HOST = "127.0.0.3"
LIMIT = 4
STALLED = 24


def _tls(directory: Path, address: str, **limits: object) -> InternodeTls:
    ca = make_ca("handshake test CA")
    ca_file, _ = write_pair(directory, "ca", ca)
    pair = issue_certificate(ca, address, ip_addresses=[LISTEN_HOST, PEER_HOST])
    certificate, key = write_pair(directory, "node", pair)
    contexts = ServerEncryptionOptions("all", certificate, key, ca_file).contexts()
    return InternodeTls(contexts.server, contexts.client, **limits)  # type: ignore[arg-type]


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    event_loop = asyncio.new_event_loop()
    try:
        yield event_loop
    finally:
        event_loop.close()


async def _eventually(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


async def _stalled(endpoint: str) -> socket.socket:
    """A TCP connection to ``endpoint`` that sends nothing: its handshake never starts."""
    host, port = parse_endpoint(endpoint)
    sock = socket.socket()
    sock.setblocking(False)
    sock.bind((PEER_HOST, 0))
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    return sock


async def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the listener closed ``sock`` (EOF or reset) within a bounded wait."""
    try:
        data = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 1), 5.0)
    except ConnectionError:
        return True
    except TimeoutError:
        return False
    return data == b""


def _run(loop: asyncio.AbstractEventLoop, scenario: Awaitable[object]) -> None:
    loop.run_until_complete(asyncio.wait_for(scenario, 45))


def test_stalled_handshakes_beyond_the_limit_are_closed_at_once_and_counted(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    tls = _tls(tmp_path, LISTEN_HOST, handshake_timeout_s=300.0, max_pending_handshakes=LIMIT)

    async def scenario() -> None:
        network = AsyncioNetwork(loop=loop, tls=tls)
        received: list[tuple[str, bytes]] = []
        listener = network.listen(f"{LISTEN_HOST}:0", lambda src, p: received.append((src, p)))
        stalled = [await _stalled(listener.endpoint) for _ in range(STALLED)]
        refused = STALLED - LIMIT
        assert await _eventually(lambda: network.stats().tls_handshakes_refused == refused)
        assert listener.pending_handshakes == LIMIT  # type: ignore[attr-defined]
        closed = [await _closed_by_peer(sock) for sock in stalled[LIMIT:]]
        assert all(closed), f"{closed.count(False)} connections beyond the limit stayed open"
        assert not await _closed_by_peer(stalled[0])  # within the limit: still shaking hands

        for sock in stalled:
            sock.close()
        assert await _eventually(lambda: listener.pending_handshakes == 0)  # type: ignore[attr-defined]
        assert network.stats().tls_handshake_failures == LIMIT

        peer = AsyncioNetwork(loop=loop, tls=tls)
        source = peer.listen(f"{PEER_HOST}:0", lambda src, p: None)
        peer.send(source.endpoint, listener.endpoint, b"after the flood")
        assert await _eventually(lambda: [p for _, p in received] == [b"after the flood"])
        assert network.stats().tls_handshakes_refused == refused
        await peer.aclose()
        await network.aclose()

    _run(loop, scenario())


@pytest.mark.parametrize(
    "limits",
    [{"max_pending_handshakes": 0}, {"max_pending_handshakes": 2.5}, {"handshake_timeout_s": 0}],
)
def test_bad_handshake_limits_are_refused(tmp_path: Path, limits: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        _tls(tmp_path, LISTEN_HOST, **limits)
