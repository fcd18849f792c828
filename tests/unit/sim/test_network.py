"""``SimNetwork``: each fault does what it says, only when configured, and limits hold.

The conformance suite covers what the simulator shares with TCP; these tests cover what only
the simulator does (delays, drops, duplicates, reordering, partitions) and its bookkeeping.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.errors import ClientError
from ringflow.runtime import Backpressure, EndpointError, FrameTooLarge, LinkDown, LinkEvent, LinkUp
from ringflow.sim import (
    MessageDelivered,
    MessageDropped,
    MessageDuplicated,
    MessageSent,
    NetworkConfig,
    Simulation,
)


class Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []

    def __call__(self, src: str, payload: bytes) -> None:
        self.messages.append((src, payload))


def make(seed: int = 1, **config: object) -> Simulation:
    return Simulation(seed, network=NetworkConfig(**config))  # type: ignore[arg-type]


def send_numbers(sim: Simulation, src: str, dst: str, count: int) -> None:
    for index in range(count):
        sim.network.send(src, dst, index.to_bytes(4, "big"))


def numbers(inbox: Inbox) -> list[int]:
    return [int.from_bytes(payload, "big") for _src, payload in inbox.messages]


def test_delays_stay_within_the_configured_bounds() -> None:
    for distribution in ("uniform", "exponential"):
        sim = make(delay_us_min=1_000, delay_us_max=9_000, delay_distribution=distribution)
        sim.network.listen("a", Inbox())
        sim.network.listen("b", Inbox())
        for _ in range(20):
            send_numbers(sim, "a", "b", 10)
            sim.run_for(20)
        sent = {event.message_id: t for t, event in sim.trace.timed(MessageSent)}
        delays = [t - sent[event.message_id] for t, event in sim.trace.timed(MessageDelivered)]
        assert len(delays) == 200
        assert min(delays) >= 1_000 and max(delays) <= 9_000
        assert len(set(delays)) > 20, f"{distribution} delays barely vary"


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), spread_us=st.integers(0, 50_000))
def test_without_reordering_every_link_is_fifo(seed: int, spread_us: int) -> None:
    sim = make(seed, delay_us_min=0, delay_us_max=spread_us, duplicate_probability=0.2)
    inbox = Inbox()
    sim.network.listen("a", Inbox())
    sim.network.listen("b", inbox)
    sent = 0
    for _ in range(10):
        for _ in range(5):
            sim.network.send("a", "b", sent.to_bytes(4, "big"))
            sent += 1
        sim.run_for(sim.rng.randint(0, 30))
    sim.run_until_quiet()
    received = numbers(inbox)
    assert set(received) == set(range(sent))
    assert received == sorted(received), "a duplicate may repeat a message, never reorder it"


def test_reordering_lets_messages_overtake() -> None:
    sim = make(3, delay_us_min=0, delay_us_max=50_000, reorder=True)
    inbox = Inbox()
    sim.network.listen("a", Inbox())
    sim.network.listen("b", inbox)
    send_numbers(sim, "a", "b", 50)
    sim.run_until_quiet()
    assert sorted(numbers(inbox)) == list(range(50))
    assert numbers(inbox) != list(range(50))


def test_drop_probability_drops_about_that_share() -> None:
    sim = make(4, drop_probability=0.3, max_in_flight_per_link=2_000)
    inbox = Inbox()
    sim.network.listen("a", Inbox())
    sim.network.listen("b", inbox)
    send_numbers(sim, "a", "b", 1_000)
    sim.run_until_quiet()
    dropped = sim.trace.timed(MessageDropped)
    assert all(event.reason == "random" for _t, event in dropped)
    assert len(dropped) + len(inbox.messages) == 1_000
    assert 230 < len(dropped) < 370


def test_duplicates_are_delivered_twice_and_marked() -> None:
    sim = make(5, duplicate_probability=1.0)
    inbox = Inbox()
    sim.network.listen("a", Inbox())
    sim.network.listen("b", inbox)
    send_numbers(sim, "a", "b", 3)
    sim.run_until_quiet()
    assert numbers(inbox) == [0, 0, 1, 1, 2, 2]
    assert len(sim.trace.timed(MessageDuplicated)) == 3
    copies = [event.copy for _t, event in sim.trace.timed(MessageDelivered)]
    assert copies == [0, 1, 0, 1, 0, 1]


def test_a_partition_cuts_both_ways_and_heal_restores() -> None:
    sim = make(6)
    inboxes = {name: Inbox() for name in "abc"}
    for name, inbox in inboxes.items():
        sim.network.listen(name, inbox)
    sim.network.partition(["a"], ["b"])
    for src, dst in [("a", "b"), ("b", "a"), ("a", "c"), ("c", "b")]:
        sim.network.send(src, dst, f"{src}>{dst}".encode())
    sim.run_until_quiet()
    assert inboxes["b"].messages == [("c", b"c>b")]
    assert inboxes["a"].messages == [] and inboxes["c"].messages == [("a", b"a>c")]
    sim.network.heal()
    sim.network.send("a", "b", b"healed")
    sim.run_until_quiet()
    assert inboxes["b"].messages[-1] == ("a", b"healed")


def test_a_partition_starting_mid_flight_drops_what_is_in_the_air() -> None:
    sim = make(7, delay_us_min=10_000, delay_us_max=10_000)
    inbox = Inbox()
    sim.network.listen("a", Inbox())
    sim.network.listen("b", inbox)
    sim.network.send("a", "b", b"in the air")
    sim.run_for(5)
    sim.network.block([("a", "b")])
    sim.run_until_quiet()
    assert inbox.messages == []
    assert [event.reason for _t, event in sim.trace.timed(MessageDropped)] == ["partition"]


def test_isolate_cuts_a_host_from_everyone() -> None:
    sim = make(8)
    inboxes = {name: Inbox() for name in "abc"}
    for name, inbox in inboxes.items():
        sim.network.listen(name, inbox)
    sim.network.isolate("a")
    for src, dst in [("a", "b"), ("c", "a"), ("b", "c"), ("a", "a")]:
        sim.network.send(src, dst, b".")
    sim.run_until_quiet()
    assert inboxes["a"].messages == [("a", b".")]  # a host still reaches itself
    assert inboxes["b"].messages == [] and inboxes["c"].messages == [("b", b".")]


def test_the_in_flight_limit_counts_held_messages_and_frees_on_delivery() -> None:
    sim = make(9, max_in_flight_per_link=4)
    inbox = Inbox()
    sim.network.listen("a", Inbox())
    sim.network.listen("b", inbox).pause()
    send_numbers(sim, "a", "b", 4)
    with pytest.raises(Backpressure) as error:
        sim.network.send("a", "b", b"fifth")
    assert (error.value.queued, error.value.limit) == (4, 4)
    sim.run_for(50)
    assert inbox.messages == [] and sim.network.in_flight("a", "b") == 4
    sim.network.send("a", "c", b"another link is not affected")
    listener = sim.network.listener("b")
    assert listener is not None
    listener.resume()
    sim.run_until_quiet()
    assert numbers(inbox) == [0, 1, 2, 3] and sim.network.in_flight("a", "b") == 0


def test_resume_keeps_fifo_with_messages_arriving_at_the_same_instant() -> None:
    sim = make(10, delay_us_min=1_000, delay_us_max=1_000)
    inbox = Inbox()
    sim.network.listen("a", Inbox())
    b = sim.network.listen("b", inbox)
    b.pause()
    send_numbers(sim, "a", "b", 3)
    sim.run_for(2)
    sim.network.send("a", "b", (3).to_bytes(4, "big"))
    sim.at(3, b.resume)  # resume exactly when message 3 arrives
    sim.run_until_quiet()
    assert numbers(inbox) == [0, 1, 2, 3]


def test_a_handler_pausing_its_listener_stops_the_next_delivery() -> None:
    sim = make(11)
    received: list[bytes] = []

    def handler(src: str, payload: bytes) -> None:
        received.append(payload)
        listener.pause()

    sim.network.listen("a", Inbox())
    listener = sim.network.listen("b", handler)
    send_numbers(sim, "a", "b", 3)
    sim.run_until_quiet()
    assert len(received) == 1
    listener.resume()
    sim.run_until_quiet()
    assert len(received) == 2


def test_closing_a_listener_drops_what_is_in_flight_to_it_and_tells_the_sender() -> None:
    sim = make(12, delay_us_min=5_000, delay_us_max=5_000)
    events: list[LinkEvent] = []
    inbox = Inbox()
    sim.network.listen("a", Inbox(), on_link=events.append)
    b = sim.network.listen("b", inbox)
    sim.network.send("a", "b", b"first")
    sim.run_until_quiet()
    send_numbers(sim, "a", "b", 3)
    b.close()
    sim.network.listen("b", inbox)
    sim.run_until_quiet()
    assert inbox.messages == [("a", b"first")]
    reasons = [event.reason for _t, event in sim.trace.timed(MessageDropped)]
    assert reasons == ["closed"] * 3
    assert events == [LinkUp("a", "b"), LinkDown("a", "b", "closed by peer")]


def test_sending_to_nobody_is_dropped_silently_on_a_fresh_link() -> None:
    sim = make(13)
    events: list[LinkEvent] = []
    sim.network.listen("a", Inbox(), on_link=events.append)
    sim.network.send("a", "nobody", b"?")
    sim.run_until_quiet()
    assert [event.reason for _t, event in sim.trace.timed(MessageDropped)] == ["no-listener"]
    assert events == []


def test_refusals_are_typed() -> None:
    sim = make(14, max_frame_bytes=10)
    sim.network.listen("a", Inbox())
    with pytest.raises(FrameTooLarge):
        sim.network.send("a", "a", b"x" * 11)
    with pytest.raises(EndpointError):
        sim.network.listen(" a", Inbox())
    with pytest.raises(EndpointError):
        sim.network.send("a", "", b"")
    with pytest.raises(ClientError):
        sim.network.send("a", "a", "text")  # type: ignore[arg-type]


def test_port_zero_gets_distinct_ephemeral_ports() -> None:
    sim = make(15)
    first = sim.network.listen("10.0.0.1:0", Inbox()).endpoint
    second = sim.network.listen("10.0.0.1:0", Inbox()).endpoint
    assert first != second and first.startswith("10.0.0.1:") and not first.endswith(":0")


@pytest.mark.parametrize(
    "change",
    [
        {"delay_us_min": -1},
        {"delay_us_min": 10, "delay_us_max": 5},
        {"drop_probability": 1.5},
        {"duplicate_probability": -0.1},
        {"delay_distribution": "pareto"},
        {"max_in_flight_per_link": 0},
    ],
)
def test_bad_configs_are_refused(change: dict[str, object]) -> None:
    with pytest.raises(ClientError):
        dataclasses.replace(NetworkConfig(), **change)  # type: ignore[arg-type]
