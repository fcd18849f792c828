"""A destination's backoff (REPLICATION.md decision 8): retries 1 s doubling to 60 s, forever;
failures of copies already in flight do not count as attempts; a success makes it reachable;
``status`` says since when, which attempt is next and in how long."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.replication import (
    BackoffPolicy,
    DestinationBackoff,
    DestinationState,
    ReplicationArgumentError,
    format_utc,
)

T0 = int(datetime.datetime(2026, 11, 26, 4, 20, tzinfo=datetime.UTC).timestamp() * 1000)


def fail_attempts(backoff: DestinationBackoff, count: int, start_ms: int = T0) -> int:
    """Fail ``count`` attempts, each exactly when its retry is due; the time of the last."""
    now = start_ms
    for _ in range(count):
        now = max(now, backoff.next_attempt_ms or now)
        assert backoff.may_attempt(now)
        backoff.failed(now, "connection refused")
        backoff.validate()
    return now


def test_retry_delays_double_from_1_s_to_a_60_s_cap_forever() -> None:
    backoff = DestinationBackoff()
    delays = []
    for _ in range(9):
        now = fail_attempts(backoff, 1, backoff.next_attempt_ms or T0)
        delays.append((backoff.next_attempt_ms or 0) - now)
    assert delays == [1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000]
    assert BackoffPolicy().delay_ms(10**9) == 60_000  # attempt a billion: still trying


def test_status_says_since_when_which_attempt_and_how_long() -> None:
    backoff = DestinationBackoff()
    assert backoff.status(T0) == "reachable"
    last = fail_attempts(backoff, 6)
    assert backoff.unreachable_since_ms == T0
    assert backoff.status(last) == (
        "unreachable since 2026-11-26T04:20:00Z (attempt 7, next in 32 s)"
    )
    assert backoff.status(last + 31_500) == (
        "unreachable since 2026-11-26T04:20:00Z (attempt 7, next in 1 s)"
    )
    assert backoff.status(last + 40_000).endswith("(attempt 7, next in 0 s)")
    assert backoff.last_error == "connection refused"


def test_an_unreachable_destination_may_be_tried_only_when_due() -> None:
    backoff = DestinationBackoff()
    backoff.failed(T0)
    assert backoff.state is DestinationState.UNREACHABLE
    assert not backoff.may_attempt(T0 + 999)
    assert backoff.may_attempt(T0 + 1000)
    assert backoff.next_in_ms(T0 + 250) == 750


def test_failures_of_copies_in_flight_are_the_same_attempt() -> None:
    backoff = DestinationBackoff()
    backoff.failed(T0)
    backoff.failed(T0 + 10)  # two more copies that were on their way fail too
    backoff.failed(T0 + 20)
    assert (backoff.failed_attempts, backoff.next_attempt_ms) == (1, T0 + 1000)
    assert "same attempt" in backoff.story()[-1]
    backoff.failed(T0 + 1000)
    assert (backoff.failed_attempts, backoff.next_attempt_ms) == (2, T0 + 3000)


def test_a_success_makes_it_reachable_again() -> None:
    backoff = DestinationBackoff()
    last = fail_attempts(backoff, 4)
    backoff.succeeded(last + 8000)
    backoff.validate()
    assert backoff.state is DestinationState.REACHABLE
    assert backoff.may_attempt(last + 8000)
    assert (backoff.failed_attempts, backoff.next_in_ms(last + 8000)) == (0, None)
    backoff.failed(last + 9000)  # a new outage starts from 1 s and a new "since"
    assert backoff.next_attempt_ms == last + 10_000
    assert backoff.unreachable_since_ms == last + 9000


def test_bad_values_are_refused_with_the_rule() -> None:
    with pytest.raises(ReplicationArgumentError, match="first_delay_s must be in"):
        BackoffPolicy(first_delay_s=0)
    with pytest.raises(ReplicationArgumentError, match="must not exceed max_delay_s"):
        BackoffPolicy(first_delay_s=10, max_delay_s=5)
    backoff = DestinationBackoff()
    backoff.failed(T0)
    with pytest.raises(ReplicationArgumentError, match="before the last event") as error:
        backoff.succeeded(T0 - 1)
    assert "reachable -> unreachable" in str(error.value)  # the story comes with it
    with pytest.raises(ReplicationArgumentError, match="now_ms"):
        backoff.failed(-5)


@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 90_000)), max_size=40),
    st.integers(1, 5),
    st.integers(5, 120),
)
def test_any_history_keeps_the_schedule_bounded(
    events: list[tuple[bool, int]], first_s: int, max_s: int
) -> None:
    """Whatever succeeds or fails when: the next retry is never more than ``max_delay_s``
    after the latest event, attempts only count failures at or after the due time, and the
    state says unreachable exactly when a failure came after the latest success."""
    backoff = DestinationBackoff(BackoffPolicy(first_s, max_s), story_length=4)
    now, attempts, last_ok = T0, 0, True
    for succeeded, step_ms in events:
        now += step_ms
        if succeeded:
            backoff.succeeded(now)
            attempts, last_ok = 0, True
        else:
            due = backoff.may_attempt(now)
            backoff.failed(now)
            attempts += 1 if due else 0
            last_ok = False
        backoff.validate()
        assert backoff.failed_attempts == attempts
        assert (backoff.state is DestinationState.REACHABLE) == last_ok
        if backoff.next_attempt_ms is not None:
            assert backoff.next_attempt_ms - now <= max_s * 1000
        assert len(backoff.story()) <= 4


def test_utc_format() -> None:
    assert format_utc(T0 + 999) == "2026-11-26T04:20:00Z"
