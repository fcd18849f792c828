"""Triage of captured rows into time slices (seed 002 "Time slice buckets"; REPLICATION.md
decisions 1-2): a row never lands in a slice that was due to seal when it arrived, so a node
that seals every due slice never reopens one; in-sequence placement depends on the write
timestamp alone, so replicas agree whatever order rows arrive in; late rows, and streamed or
repaired ones, go to the out-of-sequence bucket of their arrival."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.replication import (
    IN_SEQUENCE_ORIGINS,
    Origin,
    ReplicationArgumentError,
    SliceSettings,
    due_ms,
    place,
    slice_start_ms,
)

settings_strategy = st.builds(
    SliceSettings, slice_width_s=st.integers(1, 120), slice_count=st.integers(1, 8)
)
times = st.integers(0, 10**13)
origins = st.sampled_from(list(Origin))


@given(settings_strategy, times, times, origins)
def test_a_row_goes_to_a_slice_not_yet_due_at_its_arrival(
    settings: SliceSettings, timestamp_ms: int, now_ms: int, origin: Origin
) -> None:
    placement = place(timestamp_ms, now_ms, origin, settings)
    assert placement.due_ms > now_ms
    assert placement.slice_start_ms % settings.slice_width_ms == 0
    assert placement.due_ms == due_ms(placement.slice_start_ms, placement.out_of_sequence, settings)
    if placement.out_of_sequence:  # bucketed by arrival
        start = placement.slice_start_ms
        assert start <= now_ms < start + settings.slice_width_ms
    else:  # bucketed by the write timestamp
        start = placement.slice_start_ms
        assert start <= timestamp_ms < start + settings.slice_width_ms


arrivals = st.tuples(st.integers(0, 600_000), st.integers(-200_000, 50_000), origins)


@given(settings_strategy, st.lists(arrivals, max_size=60))
def test_a_node_sealing_every_due_slice_never_sees_a_row_for_a_sealed_slice(
    settings: SliceSettings, events: list[tuple[int, int, Origin]]
) -> None:
    """A node's life: rows arrive (clock ticking forward, timestamps around the clock: late,
    current and from the future); before each arrival the node seals every slice due by then."""
    now_ms = 1_000_000
    open_slices: dict[tuple[int, bool], int] = {}  # key -> due
    sealed: set[tuple[int, bool]] = set()
    for advance_ms, skew_ms, origin in events:
        now_ms += advance_ms
        for key, due in list(open_slices.items()):
            if due <= now_ms:
                sealed.add(key)
                del open_slices[key]
        placement = place(now_ms + skew_ms, now_ms, origin, settings)
        key = (placement.slice_start_ms, placement.out_of_sequence)
        assert key not in sealed
        assert open_slices.setdefault(key, placement.due_ms) == placement.due_ms


@given(settings_strategy, st.lists(times, min_size=1, max_size=30), times, st.randoms())
def test_in_sequence_placement_is_the_same_on_every_node_whatever_the_arrival_order(
    settings: SliceSettings, timestamps: list[int], now_ms: int, rng: random.Random
) -> None:
    """Two nodes with the same clock, the same rows in different orders and origins WRITE or
    HINT: the same rows in sequence, each in the same slice."""

    def node(order: list[int], origin: Origin) -> dict[int, int]:
        placed = {}
        for timestamp in order:
            placement = place(timestamp, now_ms, origin, settings)
            if not placement.out_of_sequence:
                placed[timestamp] = placement.slice_start_ms
        return placed

    shuffled = list(timestamps)
    rng.shuffle(shuffled)
    assert node(timestamps, Origin.WRITE) == node(shuffled, Origin.HINT)


@given(settings_strategy, times, times, st.integers(0, 10**7))
def test_a_row_in_sequence_at_some_arrival_was_in_sequence_at_every_earlier_one(
    settings: SliceSettings, timestamp_ms: int, now_ms: int, earlier_ms: int
) -> None:
    later = place(timestamp_ms, now_ms + earlier_ms, Origin.WRITE, settings)
    earlier = place(timestamp_ms, now_ms, Origin.WRITE, settings)
    if not later.out_of_sequence:
        assert earlier == later


@given(settings_strategy, times, times, st.sampled_from([Origin.STREAM, Origin.REPAIR]))
def test_streamed_and_repaired_rows_are_always_out_of_sequence(
    settings: SliceSettings, timestamp_ms: int, now_ms: int, origin: Origin
) -> None:
    placement = place(timestamp_ms, now_ms, origin, settings)
    assert placement.out_of_sequence
    assert placement.slice_start_ms == slice_start_ms(now_ms, settings)


def test_the_window_edges_with_two_slices_of_one_second() -> None:
    """width 1 s, count 2: a slice is open until its start + 2 s; a row from the future goes
    to its own slice; at or past the window's end a row goes out of sequence."""
    settings = SliceSettings(slice_width_s=1, slice_count=2)
    assert place(10_500, 11_999, Origin.WRITE, settings) == (10_000, False, 12_000)
    assert place(10_500, 12_000, Origin.WRITE, settings) == (12_000, True, 13_000)
    assert place(10_500, 12_000, Origin.HINT, settings) == (12_000, True, 13_000)
    assert place(15_250, 12_000, Origin.WRITE, settings) == (15_000, False, 17_000)
    assert place(0, 5_000, Origin.WRITE, settings) == (5_000, True, 6_000)
    assert sorted(IN_SEQUENCE_ORIGINS, key=str) == [Origin.HINT, Origin.WRITE]


def test_bad_arguments_are_refused_with_the_rule() -> None:
    settings = SliceSettings()
    with pytest.raises(ReplicationArgumentError, match="ints"):
        place(1.5, 2, Origin.WRITE, settings)  # type: ignore[arg-type]
    with pytest.raises(ReplicationArgumentError, match=">= 0"):
        place(1, -1, Origin.WRITE, settings)
    with pytest.raises(ReplicationArgumentError, match="Origin"):
        place(1, 2, "stream", settings)  # type: ignore[arg-type]
