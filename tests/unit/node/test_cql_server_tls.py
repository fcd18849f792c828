"""TLS on the native port (issue 18): ``CqlServer(tls=NativeTls(...))`` over real loopback sockets.

Proves, with certificates made by ``ringflow.runtime`` (a cluster CA and a foreign one):

* required TLS serves a client that trusts the CA; a plaintext client gets a protocol error
  saying TLS is required and its connection closed (a refusal, not a hang);
* optional TLS serves TLS and plaintext clients on the same port (the first byte sniffed);
* ``require_client_auth``: no client certificate, or one from a foreign CA, is refused; one
  from the cluster CA is served;
* bad input: garbage after a 0x16 byte, a ClientHello cut in half then closed, a handshake
  that stalls (closed by ``handshake_timeout_s``), garbage on a required port; no crash, the
  failures counted, and a good client is served afterwards.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from ringflow.cql import ErrorResponse, NativeTls, Ready, ServerLimits, Startup, VoidResult
from ringflow.cql._server import CqlServer
from ringflow.errors import ErrorCode
from ringflow.runtime import (
    ClientEncryptionOptions,
    PemPair,
    client_context,
    issue_certificate,
    make_ca,
    write_pair,
)
from tests.unit.node.test_cql_server import TIMEOUT_S, Client, FakeBackend, FakeSession, query

STALL_TIMEOUT_S = 0.5


class Pki:
    """A cluster CA with a server certificate for 127.0.0.1 and a client one, and a foreign CA
    with its own client certificate, as PEM files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        ca = make_ca("cluster CA")
        foreign = make_ca("foreign CA")
        write_pair(directory, "ca", ca)
        write_pair(directory, "server", issue_certificate(ca, "node", ip_addresses=["127.0.0.1"]))
        write_pair(directory, "client", issue_certificate(ca, "client"))
        write_pair(directory, "foreign", issue_certificate(foreign, "mallory"))
        self.ca: PemPair = ca

    def path(self, name: str) -> Path:
        return self.directory / name

    def server(self, *, optional: bool = False, client_auth: bool = False) -> NativeTls:
        options = ClientEncryptionOptions(
            enabled=True,
            optional=optional,
            certificate=self.path("server.crt"),
            keyfile=self.path("server.key"),
            truststore=self.path("ca.crt"),
            require_client_auth=client_auth,
        )
        return NativeTls(
            options.server_context(), optional=optional, handshake_timeout_s=STALL_TIMEOUT_S
        )

    def client(self, identity: str | None = None) -> ssl.SSLContext:
        if identity is None:
            return client_context(self.path("ca.crt"))
        return client_context(
            self.path("ca.crt"),
            certificate=self.path(f"{identity}.crt"),
            keyfile=self.path(f"{identity}.key"),
        )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def run_tls_server(
    tls: NativeTls, body: Callable[[CqlServer[FakeSession]], Awaitable[None]]
) -> CqlServer[FakeSession]:
    worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="storage")
    server = CqlServer(
        FakeBackend(), worker, host="127.0.0.1", port=0, limits=ServerLimits(), tls=tls
    )

    async def main() -> None:
        await server.start()
        try:
            await asyncio.wait_for(body(server), TIMEOUT_S * 3)
        finally:
            await server.close()

    try:
        asyncio.run(main())
    finally:
        worker.shutdown(wait=True)
    return server


async def tls_client(port: int, context: ssl.SSLContext) -> Client:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context), TIMEOUT_S
    )
    return Client(reader, writer)


async def served(client: Client) -> bool:
    """STARTUP then a query, both answered as the fake backend answers them."""
    await client.start()
    answer = await client.request(query("x"), 2)
    client.close()
    return answer == VoidResult()


async def refused(port: int, context: ssl.SSLContext) -> bool:
    """True when the server refuses this client during or right after the handshake (with
    TLS 1.3 a client learns that its certificate was refused on its first read)."""
    try:
        client = await tls_client(port, context)
        client.send(Startup({"CQL_VERSION": "3.4.5"}), 0)
        return await client.closed()
    except (ssl.SSLError, ConnectionError):
        return True


def test_required_tls_serves_tls_and_refuses_plaintext_with_an_error(pki: Pki) -> None:
    async def body(server: CqlServer[FakeSession]) -> None:
        assert await served(await tls_client(server.port, pki.client()))
        plain = await Client.connect(server.port)
        answer = await plain.request(Startup({"CQL_VERSION": "3.4.5"}), 0)
        assert isinstance(answer, ErrorResponse)
        assert answer.code == ErrorCode.PROTOCOL_ERROR
        assert "requires TLS" in answer.message
        assert await plain.closed()

    server = run_tls_server(pki.server(), body)
    assert server.stats.tls_connections == 1
    assert server.stats.plaintext_refused == 1


def test_optional_tls_serves_both_on_one_port(pki: Pki) -> None:
    async def body(server: CqlServer[FakeSession]) -> None:
        assert await served(await tls_client(server.port, pki.client()))
        assert await served(await Client.connect(server.port))

    server = run_tls_server(pki.server(optional=True), body)
    assert server.stats.tls_connections == 1
    assert server.stats.plaintext_refused == 0


def test_client_auth_refuses_a_missing_or_foreign_certificate(pki: Pki) -> None:
    async def body(server: CqlServer[FakeSession]) -> None:
        assert await refused(server.port, pki.client())
        assert await refused(server.port, pki.client("foreign"))
        assert await served(await tls_client(server.port, pki.client("client")))

    server = run_tls_server(pki.server(client_auth=True), body)
    assert server.stats.tls_handshake_failures >= 2
    assert server.stats.tls_connections == 1


def client_hello(pki: Pki) -> bytes:
    """The first flight of a real TLS client: a ClientHello record."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = pki.client().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[0] == 0x16
    return hello


async def send_raw(port: int, data: bytes, *, then_close: bool) -> bytes:
    """Send ``data`` on a raw socket; read what comes back until the server closes (or, with
    ``then_close``, close at once). The server must close within its handshake timeout."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    if then_close:
        writer.close()
        return b""
    received = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(4096), TIMEOUT_S):
            received += chunk
    except ConnectionError:
        pass
    writer.close()
    return received


def test_bad_handshakes_are_closed_and_counted_and_others_still_served(pki: Pki) -> None:
    hello = client_hello(pki)

    async def body(server: CqlServer[FakeSession]) -> None:
        port = server.port
        await send_raw(port, b"\x16" + bytes(range(256)) * 4, then_close=False)  # garbage
        await send_raw(port, hello[: len(hello) // 2], then_close=True)  # truncated
        await send_raw(port, hello[: len(hello) // 2], then_close=False)  # stalls: timeout
        await send_raw(port, b"\x16", then_close=False)  # stalls after one byte
        garbage = await send_raw(port, b"GET / HTTP/1.1\r\n\r\n" * 3, then_close=False)
        assert garbage == b"" or garbage[4] == 0x00  # an ERROR frame at most, then closed
        assert await send_raw(port, b"", then_close=False) == b""  # silent: timed out
        assert await served(await tls_client(port, pki.client()))

    server = run_tls_server(pki.server(), body)
    assert server.stats.tls_handshake_failures >= 5
    assert server.stats.connection_failures == 0
    assert server.stats.tls_connections == 1


def test_a_server_certificate_for_another_address_is_refused_by_the_client(pki: Pki) -> None:
    other = issue_certificate(pki.ca, "elsewhere", ip_addresses=["127.0.0.2"])
    write_pair(pki.directory, "elsewhere", other)
    options = ClientEncryptionOptions(
        enabled=True, certificate=pki.path("elsewhere.crt"), keyfile=pki.path("elsewhere.key")
    )
    tls = NativeTls(options.server_context(), handshake_timeout_s=STALL_TIMEOUT_S)

    async def body(server: CqlServer[FakeSession]) -> None:
        with pytest.raises(ssl.SSLCertVerificationError):
            await tls_client(server.port, pki.client())

    run_tls_server(tls, body)


def test_ready_answers_over_tls(pki: Pki) -> None:
    async def body(server: CqlServer[FakeSession]) -> None:
        client = await tls_client(server.port, pki.client())
        assert await client.request(Startup({"CQL_VERSION": "3.4.5"}), 0) == Ready()
        client.close()

    run_tls_server(pki.server(optional=True), body)
