"""``AsyncioNetwork`` details the conformance suite cannot state for both implementations:
the backoff schedule, the receiving side's frame limit and hello check (peer protocol
violations), clean shutdown, and ``SystemClock``. Every wait is bounded; sockets are on
127.0.0.x with ephemeral ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import socket
from collections.abc import Awaitable, Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.errors import ClientError, InternalError
from ringflow.runtime import (
    AsyncioNetwork,
    AsyncioNetworkConfig,
    Backpressure,
    EndpointError,
    NetworkError,
    ProtocolViolation,
    SystemClock,
    encode_frame,
    encode_hello,
    parse_endpoint,
    reconnect_delay_ms,
)

pytestmark = pytest.mark.timeout(60)


@settings(max_examples=60)
@given(
    attempt=st.integers(1, 200),
    delay_ms_min=st.integers(1, 1_000),
    extra_ms=st.integers(0, 100_000),
    seed=st.integers(0, 1_000),
)
def test_backoff_is_capped_exponential_with_equal_jitter(
    attempt: int, delay_ms_min: int, extra_ms: int, seed: int
) -> None:
    delay_ms_max = delay_ms_min + extra_ms
    base = min(delay_ms_max, delay_ms_min * 2 ** (attempt - 1))
    delay = reconnect_delay_ms(
        attempt, delay_ms_min=delay_ms_min, delay_ms_max=delay_ms_max, rng=random.Random(seed)
    )
    assert (base + 1) // 2 <= delay <= base <= delay_ms_max


def test_backoff_grows_then_plateaus() -> None:
    rng = random.Random(0)
    delays = [
        reconnect_delay_ms(a, delay_ms_min=10, delay_ms_max=1_000, rng=rng) for a in range(1, 12)
    ]
    assert delays[0] <= 10 and delays[4] >= 80 and all(500 <= d <= 1_000 for d in delays[7:])
    with pytest.raises(InternalError):
        reconnect_delay_ms(0, delay_ms_min=10, delay_ms_max=1_000, rng=rng)


@pytest.mark.parametrize(
    "change",
    [
        {"max_frame_bytes": 0},
        {"reconnect_delay_ms_min": 100, "reconnect_delay_ms_max": 10},
        {"socket_buffer_bytes": 10},
        {"max_queued_messages": -1},
    ],
)
def test_bad_configs_are_refused(change: dict[str, int]) -> None:
    with pytest.raises(ClientError):
        AsyncioNetworkConfig(**change)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    event_loop = asyncio.new_event_loop()
    try:
        yield event_loop
    finally:
        event_loop.close()


def run(loop: asyncio.AbstractEventLoop, coroutine: Awaitable[object]) -> object:
    return loop.run_until_complete(asyncio.wait_for(coroutine, 10))


async def eventually(predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.002)
    return True


async def raw_client(endpoint: str, data: bytes, *, bind_host: str = "127.0.0.3") -> bytes:
    """Connect from ``bind_host`` (the host the hellos below claim), write ``data``, and return
    what arrives until the listener closes on us."""
    host, port = parse_endpoint(endpoint)
    reader, writer = await asyncio.open_connection(host, port, local_addr=(bind_host, 0))
    writer.write(data)
    await writer.drain()
    received = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return received


@pytest.mark.parametrize(
    "case",
    ["oversized frame", "bad magic", "wrong port", "oversized hello", "not utf-8"],
)
def test_a_peer_breaking_the_protocol_is_disconnected_and_counted(
    loop: asyncio.AbstractEventLoop, case: str
) -> None:
    async def scenario() -> None:
        network = AsyncioNetwork(AsyncioNetworkConfig(max_frame_bytes=100), loop=loop)
        received: list[bytes] = []
        listener = network.listen("127.0.0.2:0", lambda src, payload: received.append(payload))
        endpoint = listener.endpoint
        hello = encode_hello("127.0.0.3:1", endpoint)
        data = {
            "oversized frame": hello + encode_frame(b"ok") + (101).to_bytes(4, "big") + b"x",
            "bad magic": encode_frame(b"XXXX127.0.0.3:1\n" + endpoint.encode()),
            "wrong port": encode_hello("127.0.0.3:1", "127.0.0.2:1"),
            "oversized hello": (5_000).to_bytes(4, "big"),
            "not utf-8": encode_frame(b"RFN1\xff\xfe\n" + endpoint.encode()),
        }[case]
        assert await raw_client(endpoint, data) == b""  # closed by the listener, nothing sent
        assert network.stats().protocol_violations == 1
        assert received == ([b"ok"] if case == "oversized frame" else [])
        await network.aclose()

    run(loop, scenario())


@pytest.mark.parametrize("claimed", ["127.0.0.2", "127.0.0.9", "localhost"])
def test_a_hello_claiming_another_address_than_its_own_is_refused(
    loop: asyncio.AbstractEventLoop, claimed: str
) -> None:
    """Issue 16: the hello's source must be where the connection comes from (here 127.0.0.3),
    so a connection cannot speak as a member from another address."""

    async def scenario() -> None:
        network = AsyncioNetwork(loop=loop)
        received: list[tuple[str, bytes]] = []
        listener = network.listen("127.0.0.2:0", lambda src, p: received.append((src, p)))
        spoof = encode_hello(f"{claimed}:{parse_endpoint(listener.endpoint)[1]}", listener.endpoint)
        assert await raw_client(listener.endpoint, spoof + encode_frame(b"forged")) == b""
        honest = encode_hello("127.0.0.3:7000", listener.endpoint) + encode_frame(b"ok")
        writer_task = asyncio.ensure_future(raw_client(listener.endpoint, honest))
        assert await eventually(lambda: received == [("127.0.0.3:7000", b"ok")])
        assert network.stats().protocol_violations == 1
        writer_task.cancel()
        await network.aclose()

    run(loop, scenario())


@pytest.mark.parametrize("case", ["no hello", "header without its body"])
def test_a_connection_that_stops_mid_frame_is_closed_after_the_read_timeout(
    loop: asyncio.AbstractEventLoop, case: str
) -> None:
    async def scenario() -> None:
        config = AsyncioNetworkConfig(hello_timeout_ms=100, frame_read_timeout_ms=150)
        network = AsyncioNetwork(config, loop=loop)
        listener = network.listen("127.0.0.2:0", lambda src, payload: None)
        hello = encode_hello("127.0.0.3:1", listener.endpoint)
        data = {
            "no hello": b"RF",
            "header without its body": hello + (16_000_000).to_bytes(4, "big") + b"abc",
        }[case]
        assert await raw_client(listener.endpoint, data) == b""  # closed by the listener
        assert network.stats().read_timeouts == 1
        assert not listener.inbound  # type: ignore[attr-defined]
        await network.aclose()

    run(loop, scenario())


async def _open_raw(endpoint: str, bind_host: str, data: bytes) -> asyncio.StreamWriter:
    host, port = parse_endpoint(endpoint)
    _reader, writer = await asyncio.open_connection(host, port, local_addr=(bind_host, 0))
    writer.write(data)
    return writer


@pytest.mark.parametrize("limit", ["per address", "buffered bytes"])
def test_one_host_cannot_take_the_inbound_slots_or_buffers_of_the_real_peers(
    loop: asyncio.AbstractEventLoop, limit: str
) -> None:
    async def scenario() -> None:
        config = AsyncioNetworkConfig(
            max_inbound_connections_per_address=2, max_inbound_buffered_bytes=1_000
        )
        network = AsyncioNetwork(config, loop=loop)
        received: list[bytes] = []
        a = network.listen("127.0.0.2:0", lambda src, payload: received.append(payload))
        peer = network.listen("127.0.0.4:0", lambda src, payload: None)
        hello = encode_hello("127.0.0.3:1", a.endpoint)
        if limit == "per address":  # three idle connections from 127.0.0.3: one too many
            writers = [await _open_raw(a.endpoint, "127.0.0.3", hello) for _ in range(3)]
        else:  # two incomplete frames of 600 bytes: the second passes the 1,000-byte limit
            partial = (900).to_bytes(4, "big") + b"x" * 600
            writers = [await _open_raw(a.endpoint, "127.0.0.3", hello + partial)]
            await asyncio.sleep(0.05)
            other = encode_hello("127.0.0.5:1", a.endpoint)
            writers.append(await _open_raw(a.endpoint, "127.0.0.5", other + partial))
        assert await eventually(lambda: network.stats().connections_refused == 1)
        network.send(peer.endpoint, a.endpoint, b"the real peer")
        assert await eventually(lambda: received == [b"the real peer"])
        expected = 0 if limit == "per address" else 604
        assert a.buffered_bytes == expected  # type: ignore[attr-defined]
        network.validate()
        for writer in writers:
            writer.close()
        await network.aclose()

    run(loop, scenario())


def test_a_protocol_violation_closes_that_connection_only(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def scenario() -> None:
        network = AsyncioNetwork(loop=loop)
        received: list[bytes] = []

        def handler(src: str, payload: bytes) -> None:
            if payload == b"bad":
                raise ProtocolViolation("not a message")
            received.append(payload)

        a = network.listen("127.0.0.2:0", handler)
        b = network.listen("127.0.0.4:0", lambda src, payload: None)
        hello = encode_hello("127.0.0.3:1", a.endpoint)
        frames = hello + encode_frame(b"one") + encode_frame(b"bad") + encode_frame(b"lost")
        assert await raw_client(a.endpoint, frames) == b""
        network.send(b.endpoint, a.endpoint, b"other connection")
        assert await eventually(lambda: received == [b"one", b"other connection"])
        assert network.stats().protocol_violations == 1
        assert network.stats().handler_errors == 0
        await network.aclose()

    run(loop, scenario())


def test_links_past_the_limit_evict_idle_ones_instead_of_refusing(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def scenario() -> None:
        network = AsyncioNetwork(AsyncioNetworkConfig(max_links=2), loop=loop)
        received: list[bytes] = []
        a = network.listen("127.0.0.2:0", lambda src, payload: None)
        b = network.listen("127.0.0.3:0", lambda src, payload: received.append(payload))
        network.send(a.endpoint, b.endpoint, b"first")
        assert await eventually(lambda: received == [b"first"])
        for port in (1, 2, 3):  # strangers nobody listens at: queued, never connected
            network.send(a.endpoint, f"127.0.0.9:{port}", b"x")
        network.send(a.endpoint, b.endpoint, b"again")
        assert await eventually(lambda: received == [b"first", b"again"])
        assert network.stats().links_evicted >= 2
        network.validate()
        await network.aclose()

    run(loop, scenario())


def test_a_handler_exception_is_counted_and_delivery_continues(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def scenario() -> None:
        network = AsyncioNetwork(loop=loop)
        received: list[bytes] = []

        def handler(src: str, payload: bytes) -> None:
            if payload == b"boom":
                raise ValueError("node bug")
            received.append(payload)

        a = network.listen("127.0.0.2:0", handler)
        for payload in (b"one", b"boom", b"two"):
            network.send(a.endpoint, a.endpoint, payload)
        assert await eventually(lambda: len(received) == 2)
        assert received == [b"one", b"two"] and network.stats().handler_errors == 1
        await network.aclose()

    run(loop, scenario())


def test_an_unreachable_peer_is_retried_with_backoff_and_reached_later(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def scenario() -> None:
        config = AsyncioNetworkConfig(reconnect_delay_ms_min=5, reconnect_delay_ms_max=40)
        network = AsyncioNetwork(config, loop=loop, rng=random.Random(1))
        received: list[bytes] = []
        a = network.listen("127.0.0.2:0", lambda src, payload: None)
        probe = socket.socket()
        probe.bind(("127.0.0.4", 0))
        target = f"127.0.0.4:{probe.getsockname()[1]}"
        probe.close()  # nobody listens there now
        network.send(a.endpoint, target, b"queued while down")
        assert await eventually(lambda: network.stats().connect_failures >= 3)
        assert network.queued(a.endpoint, target) == 1
        network.listen(target, lambda src, payload: received.append(payload))
        assert await eventually(lambda: received == [b"queued while down"])
        assert network.link_connected(a.endpoint, target)
        network.validate()
        await network.aclose()

    run(loop, scenario())


def test_a_peer_that_drops_every_connection_at_once_gets_escalating_backoff(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def scenario() -> None:
        accepts: list[float] = []

        def on_accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepts.append(loop.time())
            writer.close()

        server = await asyncio.start_server(on_accept, "127.0.0.5", 0)
        port = server.sockets[0].getsockname()[1]
        config = AsyncioNetworkConfig(reconnect_delay_ms_min=5, reconnect_delay_ms_max=1_000)
        network = AsyncioNetwork(config, loop=loop, rng=random.Random(2))
        a = network.listen("127.0.0.2:0", lambda src, payload: None)
        for _ in range(60):  # 300 ms of traffic towards the flapping peer
            with contextlib.suppress(Backpressure):
                network.send(a.endpoint, f"127.0.0.5:{port}", b"x")
            await asyncio.sleep(0.005)
        # Without escalation a 5 ms backoff would reconnect ~60 times; doubling allows ~7.
        assert 2 <= len(accepts) <= 12
        gaps = [later - earlier for earlier, later in itertools.pairwise(accepts)]
        assert gaps[-1] > gaps[0]
        await network.aclose()
        server.close()
        await server.wait_closed()

    run(loop, scenario())


def test_close_releases_everything_and_refuses_further_use(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def scenario() -> None:
        network = AsyncioNetwork(loop=loop)
        a = network.listen("127.0.0.2:0", lambda src, payload: None)
        b = network.listen("127.0.0.3:0", lambda src, payload: None)
        network.send(a.endpoint, b.endpoint, b"x")
        assert await eventually(lambda: network.link_connected(a.endpoint, b.endpoint))
        await network.aclose()
        link_tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("link ")]
        assert link_tasks == []
        with pytest.raises(NetworkError):
            network.send(a.endpoint, b.endpoint, b"y")
        with pytest.raises(NetworkError):
            network.listen("127.0.0.2:0", lambda src, payload: None)
        again = socket.socket()
        again.bind(("127.0.0.3", int(b.endpoint.rsplit(":", 1)[1])))  # the port is free again
        again.close()

    run(loop, scenario())


def test_listening_on_a_taken_or_bad_address_fails_at_once(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def scenario() -> None:
        network = AsyncioNetwork(loop=loop)
        a = network.listen("127.0.0.2:0", lambda src, payload: None)
        with pytest.raises(EndpointError):
            network.listen(a.endpoint, lambda src, payload: None)
        with pytest.raises(EndpointError):
            network.listen("no-port", lambda src, payload: None)
        with pytest.raises(EndpointError):
            network.listen("192.0.2.1:0", lambda src, payload: None)  # not our address
        await network.aclose()

    run(loop, scenario())


def test_system_clock_reads_and_timers(loop: asyncio.AbstractEventLoop) -> None:
    clock = SystemClock(loop)
    fired: list[int] = []
    start = clock.monotonic_ms()
    clock.call_later(20, lambda: fired.append(clock.monotonic_ms() - start))
    cancelled = clock.call_later(5, lambda: fired.append(-1))
    cancelled.cancel()
    loop.run_until_complete(asyncio.sleep(0.05))
    assert len(fired) == 1 and fired[0] >= 19 and cancelled.cancelled()
    assert abs(clock.now_us() // 1000 - clock.now_ms()) <= 1
    clock.validate()
