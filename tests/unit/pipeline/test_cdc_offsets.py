"""The ringflow-cdc offset and window planning (pure): the consumer rules of scylla-cdc.md §7.

Proves: a batch never reads past now - confidence; a batch never crosses a generation boundary
and the switch happens only once the old generation is read up to the new one's start; the
max-window and row-budget throttles; windows tile a span exactly; offsets round-trip as JSON and
bad ones are rejected; the starting point honours the log TTL and the earliest generation.
"""

from __future__ import annotations

import random

import pytest

from ringflow.pipeline._cdc_offsets import (
    CdcOffset,
    GenerationSpan,
    generation_of,
    generation_spans,
    initial_offset,
    latest_offset,
    next_generation,
    plan_row_limited,
    query_windows,
)
from ringflow.pipeline._errors import PipelineConfigError

G1, G2, G3 = 1_000_000, 1_060_000, 1_200_000
GENERATIONS = [G2, G1, G3]  # order does not matter


def test_initial_offset_defaults_to_earliest_generation() -> None:
    assert initial_offset(GENERATIONS, now_ms=G3 + 10, log_ttl_s=0) == CdcOffset(G1, G1 - 1)


def test_initial_offset_is_bounded_by_log_ttl_and_first_generation() -> None:
    now = G3 + 5_000
    assert initial_offset(GENERATIONS, now, log_ttl_s=10) == CdcOffset(G2, now - 10_000 - 1)
    assert initial_offset(GENERATIONS, now, 0, starting_ms=G2 + 7) == CdcOffset(G2, G2 + 6)
    assert initial_offset(GENERATIONS, now, 0, starting_ms=5) == CdcOffset(G1, G1 - 1)
    # startingTime older than the TTL allows: the TTL wins
    assert initial_offset(GENERATIONS, now, 100, starting_ms=G1).watermark_ms == now - 100_001


def test_no_generation_is_a_config_error() -> None:
    with pytest.raises(PipelineConfigError, match="no CDC generation"):
        initial_offset([], 10, 0)


def test_latest_never_passes_now_minus_confidence() -> None:
    start = CdcOffset(G3, G3 + 100)
    assert latest_offset(start, GENERATIONS, G3 + 50_000, 30_000) == CdcOffset(G3, G3 + 20_000)
    # nothing new yet: the start itself
    assert latest_offset(start, GENERATIONS, G3 + 30_050, 30_000) == start


def test_batch_stops_at_next_generation_start_then_switches() -> None:
    now = G3 + 100_000
    first = latest_offset(CdcOffset(G1, G1 - 1), GENERATIONS, now, 1_000)
    assert first == CdcOffset(G1, G2 - 1)
    second = latest_offset(first, GENERATIONS, now, 1_000)
    assert second == CdcOffset(G2, G3 - 1)
    third = latest_offset(second, GENERATIONS, now, 1_000)
    assert third == CdcOffset(G3, now - 1_000)
    assert generation_spans(first, second, GENERATIONS) == [GenerationSpan(G2, G2 - 1, G3 - 1)]


def test_no_switch_before_old_generation_is_read_to_the_new_start() -> None:
    # now - confidence is before G2: the old generation is not finished, no switch
    start = CdcOffset(G1, G1 + 10)
    end = latest_offset(start, GENERATIONS, G2 + 500, 1_000)
    assert end == CdcOffset(G1, G2 - 500)
    # even with the clock far ahead, an unfinished old generation ends the batch at G2 - 1
    end = latest_offset(start, GENERATIONS, G3 * 10, 1_000, max_window_ms=10**9)
    assert end == CdcOffset(G1, G2 - 1)


def test_max_window_throttles() -> None:
    start = CdcOffset(G1, G1 - 1)
    end = latest_offset(start, GENERATIONS, G3, 0, max_window_ms=5_000)
    assert end == CdcOffset(G1, G1 + 4_999)
    with pytest.raises(PipelineConfigError):
        latest_offset(start, GENERATIONS, G3, 0, max_window_ms=0)


def test_random_walk_reads_every_millisecond_once_in_order() -> None:
    """Any sequence of clocks and limits: batches tile time with no gap, no overlap, each span
    inside one generation, never past now - confidence."""
    rng = random.Random(5)
    offset = initial_offset(GENERATIONS, G1, 0)
    now = G1
    covered: list[GenerationSpan] = []
    for _ in range(300):
        now += rng.randint(0, 20_000)
        window = rng.choice([None, 1, 999, 30_000])
        end = latest_offset(offset, GENERATIONS, now, 2_000, window)
        assert end.watermark_ms <= max(offset.watermark_ms, now - 2_000)
        covered += generation_spans(offset, end, GENERATIONS)
        offset = end
    position = G1 - 1
    for span in covered:
        assert span.after_ms == position
        assert generation_of(GENERATIONS, span.after_ms + 1) == span.generation_ms
        assert generation_of(GENERATIONS, span.until_ms) == span.generation_ms
        position = span.until_ms
    assert position > G3


def test_query_windows_tile_the_span() -> None:
    assert query_windows(10, 75, 30) == [(10, 40), (40, 70), (70, 75)]
    assert query_windows(10, 10, 30) == []
    with pytest.raises(PipelineConfigError):
        query_windows(0, 1, 0)


def test_row_limited_cuts_at_a_window_but_always_advances() -> None:
    start, candidate = CdcOffset(G1, G1), CdcOffset(G1, G1 + 100)
    counts = {G1 + 10 * i: 4 for i in range(10)}  # 4 rows per 10 ms window

    def count(after: int, until: int) -> int:
        return counts[after]

    assert plan_row_limited(start, candidate, 10, 10, count) == CdcOffset(G1, G1 + 20)
    assert plan_row_limited(start, candidate, 10, 1, count) == CdcOffset(G1, G1 + 10)
    assert plan_row_limited(start, candidate, 10, 1000, count) == candidate


def test_offset_json_round_trip_and_rejects() -> None:
    offset = CdcOffset(G2, G2 + 123)
    assert CdcOffset.from_json(offset.to_json()) == offset
    assert CdcOffset.from_dict(offset.to_dict()) == offset
    assert offset.to_dict() == {"generation": G2, "watermark_ms": G2 + 123}
    for bad in ['{"generation": 1}', "[1, 2]", "nope", '{"generation": "1", "watermark_ms": 2}']:
        with pytest.raises(PipelineConfigError):
            CdcOffset.from_json(bad)
    with pytest.raises(PipelineConfigError):
        CdcOffset.from_dict({"generation": 100, "watermark_ms": 5})


def test_spans_reject_backwards_offsets() -> None:
    with pytest.raises(PipelineConfigError):
        generation_spans(CdcOffset(G2, G2 + 5), CdcOffset(G1, G1 + 5), GENERATIONS)
    assert next_generation(GENERATIONS, G3) is None
