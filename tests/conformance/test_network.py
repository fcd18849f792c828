"""One suite, two networks: what the simulator promises, the real asyncio/TCP network keeps.

Each test runs against ``SimNetwork`` (faults off: no drops, no duplicates, no reordering) and
against ``AsyncioNetwork`` on loopback (STYLE.md "One conformance suite runs against both").
They assert only what both implementations promise (``ringflow.runtime._interfaces``): delivery
with the sender's endpoint as ``src``, FIFO per link and no duplicates, frames up to
``max_frame_bytes`` intact and one byte more refused with ``FrameTooLarge``, ``Backpressure``
from a peer that stops reading and no loss after it resumes, and delivery resuming after the
peer restarts (the real network reconnecting with backoff). Every wait is bounded.
"""

from __future__ import annotations

import contextlib

import pytest

from ringflow.runtime import (
    Backpressure,
    EndpointError,
    FrameTooLarge,
    LinkDown,
    LinkEvent,
    LinkUp,
    NotListening,
)
from tests.conformance._harness import MAX_FRAME_BYTES, MAX_QUEUED, NetHarness

pytestmark = pytest.mark.timeout(60)

WAIT_MS = 5_000


class Inbox:
    """Collects ``(src, payload)`` deliveries of one listener."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []

    def __call__(self, src: str, payload: bytes) -> None:
        self.messages.append((src, payload))

    def payloads(self) -> list[bytes]:
        return [payload for _src, payload in self.messages]


def test_messages_arrive_with_the_senders_endpoint(net: NetHarness) -> None:
    inbox_a, inbox_b = Inbox(), Inbox()
    a = net.network.listen(net.address(0), inbox_a)
    b = net.network.listen(net.address(1), inbox_b)
    assert a.endpoint != b.endpoint and not a.endpoint.endswith(":0")
    for index in range(3):
        net.network.send(a.endpoint, b.endpoint, b"to-b %d" % index)
    net.network.send(b.endpoint, a.endpoint, b"to-a")
    net.network.send(a.endpoint, a.endpoint, b"to-self")

    assert net.wait_until(
        lambda: len(inbox_b.messages) == 3 and len(inbox_a.messages) == 2, WAIT_MS
    )
    assert inbox_b.messages == [(a.endpoint, b"to-b %d" % index) for index in range(3)]
    assert sorted(inbox_a.messages) == sorted([(b.endpoint, b"to-a"), (a.endpoint, b"to-self")])


def test_each_link_is_fifo_without_duplicates(net: NetHarness) -> None:
    inbox = Inbox()
    receiver = net.network.listen(net.address(0), inbox)
    senders = [net.network.listen(net.address(i), Inbox()) for i in (1, 2)]
    sent = 0
    for burst in range(12):
        for index in range(MAX_QUEUED // 2):
            for sender in senders:
                payload = f"{sender.endpoint}|{burst * 100 + index}".encode()
                net.network.send(sender.endpoint, receiver.endpoint, payload)
                sent += 1
        assert net.wait_until(lambda sent=sent: len(inbox.messages) == sent, WAIT_MS)
    net.pass_time(20)

    assert len(inbox.messages) == sent  # nothing duplicated, nothing late
    for sender in senders:
        numbers = [int(p.split(b"|")[1]) for src, p in inbox.messages if src == sender.endpoint]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers) == sent // 2


@pytest.mark.parametrize("size", [0, 1, 65_535, 65_536 + 3, MAX_FRAME_BYTES])
def test_frames_up_to_the_limit_arrive_intact(net: NetHarness, size: int) -> None:
    assert net.network.max_frame_bytes == MAX_FRAME_BYTES
    inbox = Inbox()
    a = net.network.listen(net.address(0), Inbox())
    b = net.network.listen(net.address(1), inbox)
    payload = bytes((index * 7 + size) % 251 for index in range(size))
    net.network.send(a.endpoint, b.endpoint, payload)
    net.network.send(a.endpoint, b.endpoint, b"after")

    assert net.wait_until(lambda: len(inbox.messages) == 2, WAIT_MS)
    assert inbox.payloads() == [payload, b"after"]


def test_a_frame_over_the_limit_is_refused_and_the_link_survives(net: NetHarness) -> None:
    inbox = Inbox()
    a = net.network.listen(net.address(0), Inbox())
    b = net.network.listen(net.address(1), inbox)
    with pytest.raises(FrameTooLarge) as refused:
        net.network.send(a.endpoint, b.endpoint, b"x" * (MAX_FRAME_BYTES + 1))
    assert (refused.value.size, refused.value.limit) == (MAX_FRAME_BYTES + 1, MAX_FRAME_BYTES)
    net.network.send(a.endpoint, b.endpoint, b"small")

    assert net.wait_until(lambda: len(inbox.messages) == 1, WAIT_MS)
    net.pass_time(20)
    assert inbox.payloads() == [b"small"]


def test_only_a_listening_endpoint_may_send_and_endpoints_are_exclusive(net: NetHarness) -> None:
    a = net.network.listen(net.address(0), Inbox())
    with pytest.raises(NotListening):
        net.network.send("127.0.0.99:1", a.endpoint, b"spoofed")
    with pytest.raises(EndpointError):
        net.network.listen(a.endpoint, Inbox())
    a.close()
    with pytest.raises(NotListening):
        net.network.send(a.endpoint, a.endpoint, b"after close")


def test_backpressure_from_a_paused_peer_then_everything_accepted_arrives(
    net: NetHarness,
) -> None:
    inbox = Inbox()
    a = net.network.listen(net.address(0), Inbox())
    b = net.network.listen(net.address(1), inbox)
    net.network.send(a.endpoint, b.endpoint, b"hello")
    assert net.wait_until(lambda: len(inbox.messages) == 1, WAIT_MS)
    b.pause()

    chunk = b"p" * (64 * 1024)
    accepted: list[bytes] = []
    refusal: Backpressure | None = None
    for index in range(2_000):  # bound: 125 MiB would be far past any buffer on the way
        payload = index.to_bytes(4, "big") + chunk
        try:
            net.network.send(a.endpoint, b.endpoint, payload)
        except Backpressure as error:
            refusal = error
            break
        accepted.append(payload)
        if index % 4 == 3:
            net.pass_time(1)
    assert refusal is not None, "a peer that does not read must push back"
    assert (refusal.src, refusal.dst, refusal.limit) == (a.endpoint, b.endpoint, MAX_QUEUED)
    net.pass_time(20)
    assert len(inbox.messages) == 1, "a paused listener delivers nothing"

    b.resume()
    assert net.wait_until(lambda: len(inbox.messages) == 1 + len(accepted), WAIT_MS)
    assert inbox.payloads() == [b"hello", *accepted]


def test_timers_fire_in_deadline_order_and_cancel_works(net: NetHarness) -> None:
    clock = net.clock
    fired: list[tuple[int, int]] = []
    start_ms = clock.monotonic_ms()

    def timer(delay_ms: int) -> None:
        fired.append((delay_ms, clock.monotonic_ms() - start_ms))

    handles = {d: clock.call_later(d, lambda d=d: timer(d)) for d in (30, 10, 50, 20, 40)}
    handles[40].cancel()
    handles[40].cancel()  # idempotent
    assert handles[40].cancelled() and not handles[10].cancelled()

    assert net.wait_until(lambda: len(fired) == 4, WAIT_MS)
    net.pass_time(30)
    assert [delay for delay, _elapsed in fired] == [10, 20, 30, 50]
    assert all(elapsed >= delay - 1 for delay, elapsed in fired)
    handles[10].cancel()  # after firing: harmless


def test_zero_delay_timers_run_and_bad_delays_are_refused(net: NetHarness) -> None:
    fired: list[str] = []
    net.clock.call_later(0, lambda: fired.append("now"))
    for bad in (-1, 1.5, True):
        with pytest.raises(Exception, match="delay_ms"):
            net.clock.call_later(bad, lambda: fired.append("bad"))  # type: ignore[arg-type]
    assert net.wait_until(lambda: fired == ["now"], WAIT_MS)


def test_wall_and_monotonic_clocks_agree_with_each_other(net: NetHarness) -> None:
    clock = net.clock
    before = clock.monotonic_ms()
    now_ms, now_us = clock.now_ms(), clock.now_us()
    assert now_ms > 1_600_000_000_000  # after 2020-09: an epoch time in milliseconds
    assert 0 <= now_us // 1000 - now_ms <= 50
    net.pass_time(15)
    assert clock.monotonic_ms() - before >= 14
    assert clock.now_ms() - now_ms >= 14


def test_delivery_resumes_after_the_peer_restarts(net: NetHarness) -> None:
    links: list[LinkEvent] = []
    first, second = Inbox(), Inbox()
    a = net.network.listen(net.address(0), Inbox(), on_link=links.append)
    b = net.network.listen(net.address(1), first)
    net.network.send(a.endpoint, b.endpoint, b"before")
    assert net.wait_until(lambda: len(first.messages) == 1, WAIT_MS)

    b.close()
    assert net.wait_until(lambda: any(isinstance(e, LinkDown) for e in links), WAIT_MS)
    net.pass_time(30)  # the real link retries with backoff meanwhile
    b2 = net.network.listen(b.endpoint, second)
    assert b2.endpoint == b.endpoint

    for attempt in range(500):  # until one probe gets through the reconnection
        with contextlib.suppress(Backpressure):
            net.network.send(a.endpoint, b.endpoint, b"probe %d" % attempt)
        if net.wait_until(lambda: bool(second.messages), 10):
            break
    assert second.messages, "no delivery after the peer restarted"
    net.pass_time(20)
    probes = len(second.messages)
    for index in range(10):
        net.network.send(a.endpoint, b.endpoint, b"after %d" % index)
    assert net.wait_until(lambda: len(second.messages) == probes + 10, WAIT_MS)
    assert second.payloads()[probes:] == [b"after %d" % index for index in range(10)]
    assert first.payloads() == [b"before"]

    kinds = [type(event) for event in links]
    assert kinds[0] is LinkUp and LinkDown in kinds
    assert kinds[kinds.index(LinkDown) :][:2] == [LinkDown, LinkUp]
    assert all((e.src, e.dst) == (a.endpoint, b.endpoint) for e in links)


def test_a_closed_listener_receives_nothing(net: NetHarness) -> None:
    inbox = Inbox()
    a = net.network.listen(net.address(0), Inbox())
    b = net.network.listen(net.address(1), inbox)
    endpoint = b.endpoint
    b.close()
    b.close()  # idempotent
    for index in range(5):
        net.network.send(a.endpoint, endpoint, b"lost %d" % index)
    net.pass_time(50)
    assert inbox.messages == []
