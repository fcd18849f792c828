"""The demo scenario: four ping/pong nodes under drops, duplicates, reordering, skew, a partition,
a crash and a restart. It proves the harness: faults really happen while they are on, nothing
crosses the partition, a crash loses memory, timers and messages but not the disk, and once
the faults stop every ping sent is delivered and answered (the liveness phase of
reliability-and-style.md §A2.4).
"""

from __future__ import annotations

import pytest

from ringflow.sim import (
    MessageDelivered,
    MessageDropped,
    MessageDuplicated,
    ProcessCrashed,
    ProcessStarted,
    TimerFired,
)
from tests.unit.sim._ping_pong import (
    CRASH_MS,
    FAULTS_END_MS,
    NAMES,
    PARTITION_MS,
    RESTART_MS,
    Outcome,
    run_scenario,
)

SEEDS = [1, 2, 3, 11, 2024]


@pytest.fixture(scope="module", params=SEEDS, ids=[f"seed={seed}" for seed in SEEDS])
def outcome(request: pytest.FixtureRequest) -> Outcome:
    result = run_scenario(request.param)
    request.addfinalizer(result.sim.close)
    return result


def test_every_ping_sent_after_the_faults_stop_is_delivered_and_answered(
    outcome: Outcome,
) -> None:
    history = outcome.history
    calm = [ping for ping, sent_ms in history.sent.items() if sent_ms >= FAULTS_END_MS]
    assert len(calm) > 100
    missing = [ping for ping in calm if ping not in history.pings_delivered]
    unanswered = [ping for ping in calm if ping not in history.pongs_received]
    assert missing == [] and unanswered == [], outcome.sim.describe()


def test_nothing_is_delivered_that_was_not_sent(outcome: Outcome) -> None:
    history = outcome.history
    assert set(history.pings_delivered) <= set(history.sent)
    assert set(history.pongs_received) <= set(history.pings_delivered)
    for ping, delivered_ms in history.pings_delivered.items():
        assert delivered_ms >= history.sent[ping]


def test_faults_happened_while_they_were_on(outcome: Outcome) -> None:
    trace = outcome.sim.trace
    reasons = {event.reason for _t, event in trace.timed(MessageDropped)}
    assert {"partition", "random", "no-listener"} <= reasons
    faults_end_us = FAULTS_END_MS * 1000
    assert [e for t, e in trace.timed(MessageDropped) if t > faults_end_us] == []
    assert [e for t, e in trace.timed(MessageDuplicated) if t > faults_end_us] == []
    early = [p for p, ms in outcome.history.sent.items() if ms < PARTITION_MS[0]]
    assert any(p not in outcome.history.pings_delivered for p in early)


def test_nothing_crosses_the_partition(outcome: Outcome) -> None:
    side = {"n0": 0, "n1": 0, "n2": 1, "n3": 1}
    start_us, end_us = PARTITION_MS[0] * 1000, PARTITION_MS[1] * 1000
    crossing = [
        event
        for time_us, event in outcome.sim.trace.timed(MessageDelivered)
        if start_us < time_us < end_us
        and side[event.src.split(":")[0]] != side[event.dst.split(":")[0]]
    ]
    assert crossing == []


def test_a_crash_loses_memory_timers_and_messages_but_not_the_disk(outcome: Outcome) -> None:
    sim, history = outcome.sim, outcome.history
    crashed = [(t, event.name) for t, event in sim.trace.timed(ProcessCrashed)]
    assert crashed == [(CRASH_MS * 1000, "n3")]
    starts = [(t, e.incarnation) for t, e in sim.trace.timed(ProcessStarted) if e.name == "n3"]
    assert starts == [(0, 1), (RESTART_MS * 1000, 2)]
    first_life = [t for t, event in sim.trace.timed(TimerFired) if event.owner == "n3#1"]
    assert first_life and max(first_life) < CRASH_MS * 1000
    to_n3_while_down = [
        event
        for t, event in sim.trace.timed(MessageDelivered)
        if event.dst == "n3:7000" and CRASH_MS * 1000 <= t < RESTART_MS * 1000
    ]
    assert to_n3_while_down == []
    # The second incarnation counted from 1 again (memory lost) under boot 2 (disk kept).
    second_life = sorted(
        (int(ping.split("/")[2]), ping) for ping in history.sent if ping.startswith("n3/2/")
    )
    assert second_life[0][0] == 1
    boots = {p.name: p.disk.read_bytes("boots") for p in sim.processes}
    assert boots == {name: (b"2" if name == "n3" else b"1") for name in NAMES}


def test_the_run_ends_quiet_and_valid(outcome: Outcome) -> None:
    sim = outcome.sim
    assert sim.loop.next_time_us() is None
    assert sim.network.in_flight_total() == 0
    assert sim.trace.dropped_entries == 0
    sim.validate()
