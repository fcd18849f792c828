"""Phi-accrual failure detector (cassandra-core.md §8.2).

Proves: the ArrivalWindowTest vector (phi 1.0 and 22.03, convicting at threshold 8); the first
sample is the initial value and over-long intervals are ignored; the running mean equals a plain
model's mean over any arrival sequence; 1 s heartbeats are convicted after 8·ln10·mean of
silence (≈ 18.4 s); the local-pause guard holds convictions for 5 s; thresholds outside 5..16
are configuration errors.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cluster import PHI_FACTOR, ArrivalWindow, FailureDetector
from ringflow.errors import ConfigurationError, InvalidRequest


def test_arrival_window_test_vector_from_cassandra() -> None:
    window = ArrivalWindow(sample_size=4)
    for arrival_ms in (111, 222, 333, 444, 555):
        window.add(arrival_ms)
        window.validate()
    # The initial 2000 ms sample was pushed out of the 4-slot buffer by four 111 ms intervals.
    assert window.intervals_ms() == [111, 111, 111, 111]
    assert window.phi(666) == pytest.approx(1.0)
    assert window.phi(3000) == pytest.approx(22.03, abs=0.005)
    assert PHI_FACTOR * window.phi(3000) > 8
    assert abs(PHI_FACTOR - 0.4343) < 1e-4


def test_first_sample_is_the_initial_value_and_long_intervals_are_ignored() -> None:
    window = ArrivalWindow(sample_size=10, initial_value_ms=2000, max_interval_ms=2000)
    window.add(1_000)
    assert window.intervals_ms() == [2000]
    window.add(3_000)  # exactly the maximum: kept
    window.add(8_000)  # 5 s gap: ignored, but it is the new last arrival
    window.validate()
    assert window.intervals_ms() == [2000, 2000]
    assert window.last_arrival_ms == 8_000
    assert window.phi(9_000) == pytest.approx(0.5)


def test_arrival_window_refuses_time_going_backwards() -> None:
    window = ArrivalWindow()
    window.add(500)
    with pytest.raises(InvalidRequest):
        window.add(499)
    with pytest.raises(InvalidRequest):
        ArrivalWindow().phi(10)


@settings(max_examples=60, deadline=None)
@given(
    sample_size=st.integers(1, 6),
    gaps=st.lists(st.integers(0, 3000), min_size=1, max_size=40),
)
def test_running_mean_matches_a_plain_model(sample_size: int, gaps: list[int]) -> None:
    window = ArrivalWindow(sample_size=sample_size, initial_value_ms=2000, max_interval_ms=2000)
    model: list[int] = []
    now_ms = 10_000
    window.add(now_ms)
    model.append(2000)
    for gap in gaps:
        now_ms += gap
        window.add(now_ms)
        if gap <= 2000:
            model.append(gap)
        window.validate()
        kept = model[-sample_size:]
        assert window.intervals_ms() == kept
        assert window.mean_ms() == pytest.approx(sum(kept) / len(kept))


def _steady_heartbeats(fd: FailureDetector, count: int, start_ms: int = 0) -> int:
    now_ms = start_ms
    for _ in range(count):
        fd.report("10.0.0.2", now_ms)
        assert not fd.interpret("10.0.0.2", now_ms)
        fd.validate()
        now_ms += 1000
    return now_ms - 1000


def test_one_second_heartbeats_are_convicted_after_about_18_4_means_of_silence() -> None:
    fd = FailureDetector(sample_size=10)
    last_ms = _steady_heartbeats(fd, 30)
    window = fd.window("10.0.0.2")
    assert window is not None and window.mean_ms() == 1000
    silence_limit_ms = 8 * math.log(10) * 1000  # 18420.68 ms
    convicted_at = None
    for now_ms in range(last_ms + 1000, last_ms + 30_000, 1000):
        if fd.interpret("10.0.0.2", now_ms):
            convicted_at = now_ms
            break
        assert fd.is_alive("10.0.0.2")
    assert convicted_at == last_ms + 19_000
    assert convicted_at - last_ms > silence_limit_ms > convicted_at - last_ms - 1000
    assert not fd.is_alive("10.0.0.2")
    fd.validate()
    fd.report("10.0.0.2", convicted_at + 500)  # heartbeats resume: no longer convicted
    assert fd.is_alive("10.0.0.2")


def test_local_pause_holds_convictions_for_five_seconds() -> None:
    fd = FailureDetector(sample_size=10)
    last_ms = _steady_heartbeats(fd, 30)
    for now_ms in range(last_ms + 1000, last_ms + 11_000, 1000):
        assert not fd.interpret("10.0.0.2", now_ms)
    # We were paused for 15 s: phi is far above the threshold, but that is our fault.
    paused_until = last_ms + 25_000
    assert fd.phi("10.0.0.2", paused_until) is not None
    assert (fd.phi("10.0.0.2", paused_until) or 0) > 8
    assert not fd.interpret("10.0.0.2", paused_until)
    for now_ms in range(paused_until + 1000, paused_until + 5000, 1000):
        assert not fd.interpret("10.0.0.2", now_ms), now_ms
    assert fd.interpret("10.0.0.2", paused_until + 5000)
    fd.validate()


def test_unknown_endpoint_is_never_convicted() -> None:
    fd = FailureDetector()
    assert not fd.interpret("10.0.0.9", 1_000_000)
    assert not fd.is_alive("10.0.0.9")
    assert fd.phi("10.0.0.9", 5) is None


def test_force_conviction_and_remove() -> None:
    fd = FailureDetector()
    fd.report("a", 0)
    assert fd.is_alive("a")
    fd.force_conviction("a")
    assert not fd.is_alive("a")
    fd.validate()
    fd.remove("a")
    assert fd.window("a") is None and fd.endpoints() == []
    fd.force_conviction("a")  # unknown: nothing to convict
    fd.validate()


@pytest.mark.parametrize("threshold", [4.9, 16.5, 0, -8, True, "8", float("nan")])
def test_threshold_outside_5_to_16_is_a_configuration_error(threshold: object) -> None:
    with pytest.raises(ConfigurationError, match="phi_convict_threshold"):
        FailureDetector(threshold)  # type: ignore[arg-type]


@pytest.mark.parametrize("threshold", [5, 8.0, 12.5, 16])
def test_thresholds_inside_the_range_are_accepted(threshold: float) -> None:
    assert FailureDetector(threshold).phi_convict_threshold == float(threshold)
