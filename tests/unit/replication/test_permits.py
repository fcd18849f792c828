"""The permit broker (REPLICATION.md decision 7): never more than N copies out; a free permit goes
to the highest-priority eligible channel with work, equal channels in turn, oldest (fifo) or
newest (lifo) slice first; paused or unreachable channels get nothing and hold nobody up. A
stateful test drives random offers, grants, releases, pauses and priority changes against a
model and checks every grant against the rules, including that no channel with work waits
forever among equals."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ringflow.replication import (
    Channel,
    ChannelOrder,
    Grant,
    OfferResult,
    PermitBroker,
    PlannedSend,
    ReplicationArgumentError,
    SliceKey,
)

NODE = uuid.UUID(int=1)


def send(channel: str, start_s: int, node: int = 1) -> PlannedSend:
    key = SliceKey("ks", "t", 0, 100, start_s * 1000)
    return PlannedSend(channel, key, uuid.UUID(int=node), bytes(16), 1)


def channel(name: str, priority: int = 50, order: str = "fifo", **more: object) -> Channel:
    return Channel(
        name, "ks", "t", "parquet:/l", priority=priority, order=ChannelOrder(order), **more
    )  # type: ignore[arg-type]


def granted(grants: tuple[Grant, ...]) -> list[tuple[str, int]]:
    return [(g.channel, g.send.key.slice_start_ms // 1000) for g in grants]


def test_the_higher_priority_channel_takes_the_permits_first() -> None:
    broker = PermitBroker(permits=3)
    broker.configure(channel("hub", 90))
    broker.configure(channel("lake", 10))
    broker.offer("lake", [send("lake", s) for s in (0, 60)])
    broker.offer("hub", [send("hub", s) for s in (0, 60)])
    first = broker.grant()
    assert granted(first) == [("hub", 0), ("hub", 60), ("lake", 0)]
    assert broker.grant() == ()  # every permit is out
    broker.release(first[0])
    assert granted(broker.grant()) == [("lake", 60)]
    broker.validate()


def test_fifo_sends_the_oldest_slice_first_and_lifo_the_newest() -> None:
    broker = PermitBroker(permits=1)
    broker.configure(channel("old", order="fifo"))
    broker.offer("old", [send("old", s) for s in (120, 0, 60)])
    broker.configure(channel("new", order="lifo", priority=40))
    broker.offer("new", [send("new", s) for s in (120, 0, 60)])
    order = []
    for _ in range(6):
        (grant,) = broker.grant()
        order.append((grant.channel, grant.send.key.slice_start_ms // 1000))
        broker.release(grant)
    assert order == [
        ("old", 0),
        ("old", 60),
        ("old", 120),
        ("new", 120),
        ("new", 60),
        ("new", 0),
    ]


def test_equal_channels_take_turns() -> None:
    broker = PermitBroker(permits=1)
    for name in ("c", "a", "b"):
        broker.configure(channel(name))
        broker.offer(name, [send(name, s) for s in range(0, 300, 60)])
    turns = []
    for _ in range(7):
        (grant,) = broker.grant()
        turns.append(grant.channel)
        broker.release(grant)
    assert turns == ["a", "b", "c", "a", "b", "c", "a"]


def test_paused_or_unreachable_channels_get_nothing_and_block_nobody() -> None:
    broker = PermitBroker(permits=2)
    broker.configure(channel("hub", 90, transmission_enabled=False))
    broker.configure(channel("pg", 80))
    broker.configure(channel("lake", 10))
    for name in ("hub", "pg", "lake"):
        broker.offer(name, [send(name, 0), send(name, 60)])
    broker.set_reachable("pg", False)
    grants = broker.grant()
    assert granted(grants) == [("lake", 0), ("lake", 60)]
    for grant in grants:
        broker.release(grant)
    broker.set_reachable("pg", True)
    assert granted(broker.grant()) == [("pg", 0), ("pg", 60)]
    assert broker.pending("hub") == (send("hub", 0), send("hub", 60))  # its backlog is kept


def test_an_offer_is_bounded_in_the_channel_order_and_skips_what_is_granted() -> None:
    broker = PermitBroker(permits=1, max_pending_per_channel=2)
    broker.configure(channel("lake", order="lifo"))
    result = broker.offer("lake", [send("lake", s) for s in (0, 60, 120, 180)])
    assert result == OfferResult(pending=2, left_off=2, in_flight=0)
    assert broker.pending("lake") == (send("lake", 180), send("lake", 120))
    (grant,) = broker.grant()
    again = broker.offer("lake", [send("lake", s) for s in (0, 60, 120, 180, 180)])
    assert again == OfferResult(pending=2, left_off=1, in_flight=1)
    assert grant.send not in broker.pending("lake")
    assert broker.in_flight() == (send("lake", 180),)
    broker.validate()


def test_changing_a_channel_reorders_and_reprioritises_its_work() -> None:
    broker = PermitBroker(permits=1)
    broker.configure(channel("a", 10))
    broker.configure(channel("b", 20))
    broker.offer("a", [send("a", s) for s in (0, 60)])
    broker.offer("b", [send("b", 0)])
    broker.configure(channel("a", 30, order="lifo"))
    assert granted(broker.grant()) == [("a", 60)]
    broker.validate()


def test_bad_calls_are_refused_with_the_value() -> None:
    with pytest.raises(ReplicationArgumentError, match=r"permits must be an int in \[1,"):
        PermitBroker(permits=0)
    broker = PermitBroker(permits=1, max_channels=1)
    broker.configure(channel("a"))
    with pytest.raises(ReplicationArgumentError, match="at most 1 channels"):
        broker.configure(channel("b"))
    with pytest.raises(ReplicationArgumentError, match="unknown channel 'b'"):
        broker.offer("b", [])
    with pytest.raises(ReplicationArgumentError, match="channel 'a' was offered"):
        broker.offer("a", [send("other", 0)])
    broker.offer("a", [send("a", 0)])
    (grant,) = broker.grant()
    broker.release(grant)
    with pytest.raises(ReplicationArgumentError, match="not an outstanding grant"):
        broker.release(grant)
    broker.remove("a")
    assert broker.channels() == ()


NAMES = ("a", "b", "c", "d")


class BrokerMachine(RuleBasedStateMachine):
    """Random channel settings, offers, grants and releases, checked grant by grant against a
    model of each channel's pending work (in dispatch order), eligibility and priority."""

    def __init__(self) -> None:
        super().__init__()
        self.permits = 3
        self.broker = PermitBroker(permits=self.permits, max_pending_per_channel=4)
        self.priority: dict[str, int] = {}
        self.eligible: dict[str, bool] = {}
        self.pending: dict[str, list[PlannedSend]] = {}
        self.order: dict[str, ChannelOrder] = {}
        self.out: list[Grant] = []
        self.passed_over: dict[str, int] = {}  # grants to equal channels while this one waited

    def _sort(self, name: str, sends: list[PlannedSend]) -> list[PlannedSend]:
        sign = 1 if self.order[name] is ChannelOrder.FIFO else -1
        return sorted(sends, key=lambda s: (sign * s.key.slice_start_ms, s.key, s.node))

    @rule(
        name=st.sampled_from(NAMES),
        priority=st.sampled_from([10, 50, 90]),
        order=st.sampled_from(ChannelOrder),
        enabled=st.booleans(),
        reachable=st.booleans(),
    )
    def configure(
        self, name: str, priority: int, order: ChannelOrder, enabled: bool, reachable: bool
    ) -> None:
        made = channel(name, priority, order.value, transmission_enabled=enabled)
        self.broker.configure(made, reachable=reachable)
        self.priority[name] = priority
        self.eligible[name] = enabled and reachable
        self.order[name] = order
        self.pending[name] = self._sort(name, self.pending.get(name, []))
        self.passed_over[name] = 0

    @precondition(lambda self: self.priority)
    @rule(data=st.data(), starts=st.lists(st.integers(0, 9), max_size=8))
    def offer(self, data: st.DataObject, starts: list[int]) -> None:
        name = data.draw(st.sampled_from(sorted(self.priority)))
        sends = [send(name, s * 60, node=1 + s % 2) for s in starts]
        self.broker.offer(name, sends)
        out = {(g.send.key, g.send.node) for g in self.out if g.channel == name}
        fresh = self._sort(name, [s for s in set(sends) if (s.key, s.node) not in out])
        self.pending[name] = fresh[:4]

    @rule()
    def grant(self) -> None:
        for grant in self.broker.grant():
            name = grant.channel
            assert self.eligible[name], f"{name} is paused or unreachable"
            assert self.pending[name] and self.pending[name][0] == grant.send, "order broken"
            higher = [
                n
                for n in self.priority
                if self.priority[n] > self.priority[name] and self._ready(n)
            ]
            assert not higher, f"{name} served before higher-priority {higher}"
            for other in self.priority:
                if other != name and self.priority[other] == self.priority[name]:
                    self.passed_over[other] = (
                        self.passed_over[other] + 1 if self._ready(other) else 0
                    )
            self.passed_over[name] = 0
            self.pending[name].pop(0)
            self.out.append(grant)
        assert len(self.out) == self.permits or not any(map(self._ready, self.priority))

    @precondition(lambda self: self.out)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        grant = self.out.pop(data.draw(st.integers(0, len(self.out) - 1)))
        self.broker.release(grant)

    def _ready(self, name: str) -> bool:
        return self.eligible[name] and bool(self.pending[name])

    @invariant()
    def agrees_with_the_model(self) -> None:
        self.broker.validate()
        assert len(self.broker.outstanding()) == len(self.out) <= self.permits
        for name in self.priority:
            assert list(self.broker.pending(name)) == self.pending[name]

    @invariant()
    def no_channel_waits_forever_among_equals(self) -> None:
        for name, count in self.passed_over.items():
            assert count <= len(NAMES) - 1, f"{name} passed over {count} times by equals"


TestBrokerMachine = BrokerMachine.TestCase
