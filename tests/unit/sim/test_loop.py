"""``SimLoop``: time order with FIFO ties, cancellation, dead owners, and limits that fail fast."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.errors import ClientError
from ringflow.sim import EventLimitExceeded, Owner, PendingLimitExceeded, SimLoop, derive_seed


def test_calls_run_in_time_order_and_in_scheduling_order_on_ties() -> None:
    loop = SimLoop()
    ran: list[tuple[int, str]] = []
    for time_us, label in [(30, "c"), (10, "a1"), (20, "b"), (10, "a2"), (10, "a3")]:
        loop.call_at(time_us, lambda t=time_us, x=label: ran.append((loop.now_us, x)))
    assert loop.run_until_quiet() == 5
    assert ran == [(10, "a1"), (10, "a2"), (10, "a3"), (20, "b"), (30, "c")]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), max_size=40))
def test_any_schedule_runs_sorted_by_time_then_sequence(times: list[int]) -> None:
    loop = SimLoop()
    ran: list[tuple[int, int]] = []
    for index, time_us in enumerate(times):
        loop.call_at(time_us, lambda i=index, t=time_us: ran.append((t, i)))
    loop.run_until_quiet()
    assert ran == sorted((t, i) for i, t in enumerate(times))
    loop.validate()


def test_run_until_stops_at_the_time_and_sets_the_clock() -> None:
    loop = SimLoop()
    ran: list[int] = []
    for time_us in (5, 10, 15):
        loop.call_at(time_us, lambda t=time_us: ran.append(t))
    assert loop.run_until(10) == 2
    assert ran == [5, 10] and loop.now_us == 10
    assert loop.run_until(12) == 0 and loop.now_us == 12
    assert loop.next_time_us() == 15


def test_calls_scheduled_from_calls_run_in_the_same_run() -> None:
    loop = SimLoop()
    ran: list[int] = []

    def first() -> None:
        ran.append(loop.now_us)
        loop.call_later(0, lambda: ran.append(loop.now_us))
        loop.call_later(5, lambda: ran.append(loop.now_us))

    loop.call_at(1, first)
    loop.run_until(6)
    assert ran == [1, 1, 6]


def test_cancelled_calls_and_calls_of_dead_owners_never_run() -> None:
    loop = SimLoop()
    owner = Owner("n1", 1)
    ran: list[str] = []
    cancelled = loop.call_at(1, lambda: ran.append("cancelled"))
    loop.call_at(2, lambda: ran.append("owned"), owner=owner)
    loop.call_at(3, lambda: ran.append("free"))
    cancelled.cancel()
    owner.alive = False
    assert cancelled.cancelled()
    assert loop.run_until_quiet() == 1
    assert ran == ["free"]
    assert loop.events_run == 1


def test_cancel_after_running_is_harmless() -> None:
    loop = SimLoop()
    call = loop.call_at(1, lambda: None)
    loop.run_until_quiet()
    call.cancel()
    assert not call.cancelled()


def test_a_livelock_hits_the_event_limit_with_the_time_it_reached() -> None:
    loop = SimLoop(max_events_per_run=100)

    def rearm() -> None:
        loop.call_later(10, rearm)

    loop.call_at(0, rearm)
    with pytest.raises(EventLimitExceeded) as error:
        loop.run_until_quiet()
    assert error.value.limit == 100 and error.value.time_us == 990
    with pytest.raises(EventLimitExceeded):
        loop.run_until(10**9, max_events=5)
    assert loop.run_until(loop.now_us + 100, max_events=50) == 10


def test_the_pending_limit_counts_only_live_calls() -> None:
    loop = SimLoop(max_pending=3)
    calls = [loop.call_at(1, lambda: None) for _ in range(3)]
    with pytest.raises(PendingLimitExceeded):
        loop.call_at(1, lambda: None)
    calls[0].cancel()
    loop.call_at(1, lambda: None)  # the cancelled one is compacted away
    assert loop.pending == 3


def test_bad_schedules_are_refused() -> None:
    loop = SimLoop()
    loop.run_until(100)
    with pytest.raises(ClientError):
        loop.call_at(99, lambda: None)
    with pytest.raises(ClientError):
        loop.call_later(-1, lambda: None)
    with pytest.raises(ClientError):
        loop.run_until_quiet(max_events=0)


def test_the_loop_is_not_reentrant() -> None:
    loop = SimLoop()
    loop.call_at(1, lambda: loop.run_until(5))
    with pytest.raises(ClientError, match="re-entrant"):
        loop.run_until_quiet()


def test_run_until_true_stops_at_the_predicate_or_the_deadline() -> None:
    loop = SimLoop()
    hits: list[int] = []
    for time_us in (10, 20, 30):
        loop.call_at(time_us, lambda t=time_us: hits.append(t))
    assert loop.run_until_true(lambda: len(hits) == 2, deadline_us=100)
    assert loop.now_us == 20
    assert not loop.run_until_true(lambda: len(hits) == 5, deadline_us=50)
    assert loop.now_us == 50 and hits == [10, 20, 30]


def test_hooks_run_after_every_event() -> None:
    loop = SimLoop()
    seen: list[int] = []
    loop.add_hook(lambda: seen.append(loop.now_us))
    for time_us in (1, 2, 3):
        loop.call_at(time_us, lambda: None)
    loop.run_until_quiet()
    assert seen == [1, 2, 3]


def test_an_exception_in_a_call_propagates() -> None:
    loop = SimLoop()

    def boom() -> None:
        raise ValueError("node bug")

    loop.call_at(1, boom)
    with pytest.raises(ValueError, match="node bug"):
        loop.run_until_quiet()
    assert loop.run_until_quiet() == 0  # the loop is usable afterwards


def test_derived_seeds_are_stable_and_distinct() -> None:
    # Pinned: a seed printed by CI must replay the same streams on any machine and version.
    assert derive_seed(1, "network") == 0x38E10307398376A8
    seeds = {derive_seed(seed, label) for seed in range(20) for label in ("a", "b", "c")}
    assert len(seeds) == 60
    assert all(0 <= seed < 2**64 for seed in seeds)
