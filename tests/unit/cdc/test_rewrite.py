"""The v1 -> v2 streams-description rewrite planner, step by step (seed 000 steps 1-7)."""

from __future__ import annotations

import random

import pytest

from ringflow.cdc import (
    CdcArgumentError,
    CdcLocalRow,
    GenerationDescriptionV1Row,
    NothingToDo,
    RewritePlan,
    RewriteStart,
    SkippedRewrite,
    SkipReason,
    WriteRewrittenMarker,
    WriteStreamsRows,
    WriteTimestampRow,
    generate_topology_description,
    generation_description_v1_row,
    plan_streams_rewrite,
    rewrite_start,
    rewritten_marker_row,
    streams_description_v2_rows,
)

DAY_MS = 86_400_000
NOW_MS = 100 * DAY_MS
RING = [-(10**18), 0, 10**18]


def v1_row(time_ms: int) -> GenerationDescriptionV1Row:
    description = generate_topology_description(RING, lambda t: (4, 12), random.Random(time_ms))
    return generation_description_v1_row(time_ms, description)


def plan(
    *,
    exists: bool = True,
    local: tuple[CdcLocalRow, ...] = (),
    ttls_s: tuple[int, ...] = (86_400,),
    v1_ms: tuple[int, ...] = (),
    v2_ms: tuple[int, ...] = (),
    descriptions: tuple[int, ...] | None = None,
) -> RewritePlan:
    known = v1_ms if descriptions is None else descriptions
    return plan_streams_rewrite(
        v1_streams_table_exists=exists,
        cdc_local_rows=local,
        cdc_table_ttls_s=ttls_s,
        v1_timestamps_ms=v1_ms,
        v2_timestamps_ms=v2_ms,
        v1_descriptions={time_ms: v1_row(time_ms) for time_ms in known},
        now_ms=NOW_MS,
    )


def written_times(result: RewritePlan) -> list[int]:
    return [
        action.row.time_ms for action in result.actions if isinstance(action, WriteTimestampRow)
    ]


MARKER = WriteRewrittenMarker(rewritten_marker_row())


def test_step1_no_v1_table_means_nothing_to_do_and_no_marker() -> None:
    result = plan(exists=False, v1_ms=(NOW_MS,))
    assert result.actions == (NothingToDo(RewriteStart.NO_V1_TABLE),)


def test_step2_marker_present_means_done_before() -> None:
    result = plan(local=(rewritten_marker_row(),), v1_ms=(NOW_MS,))
    assert result.actions == (NothingToDo(RewriteStart.ALREADY_REWRITTEN),)


def test_step2_only_the_rewritten_key_counts() -> None:
    result = plan(local=(CdcLocalRow("cdc_local", 5),), v1_ms=(NOW_MS - 1000,))
    assert result.start is RewriteStart.PROCEED
    assert written_times(result) == [NOW_MS - 1000]


def test_step3_no_cdc_table_only_writes_the_marker() -> None:
    result = plan(ttls_s=(), v1_ms=(NOW_MS - 1000,))
    assert result.start is RewriteStart.NO_CDC_TABLES
    assert result.actions == (MARKER,)


def test_steps_1_to_3_can_be_decided_before_the_scan() -> None:
    assert (
        rewrite_start(v1_streams_table_exists=True, cdc_local_rows=(), cdc_table_ttls_s=(10,))
        is RewriteStart.PROCEED
    )
    assert (
        rewrite_start(v1_streams_table_exists=True, cdc_local_rows=(), cdc_table_ttls_s=())
        is RewriteStart.NO_CDC_TABLES
    )


def test_step5_too_old_generations_are_skipped() -> None:
    # TTL one day: cutoff = now - 1 day. T = now - 2 days is below the cutoff, so every
    # generation before T is too old; T itself may still hold data (it operated until later).
    old, older, recent = NOW_MS - 3 * DAY_MS, NOW_MS - 2 * DAY_MS, NOW_MS - DAY_MS // 2
    result = plan(v1_ms=(recent, old, older))
    assert written_times(result) == [older, recent]
    assert result.skipped == (SkippedRewrite(old, SkipReason.TOO_OLD),)


def test_step5_every_table_must_have_expired_the_data() -> None:
    old, older = NOW_MS - 3 * DAY_MS, NOW_MS - 2 * DAY_MS
    # One table keeps 10 days: nothing is too old for it.
    result = plan(ttls_s=(86_400, 10 * 86_400), v1_ms=(old, older))
    assert written_times(result) == [old, older]


def test_step5_ttl_zero_means_data_never_expires() -> None:
    result = plan(ttls_s=(0, 86_400), v1_ms=(NOW_MS - 30 * DAY_MS, NOW_MS - 20 * DAY_MS))
    assert written_times(result) == [NOW_MS - 30 * DAY_MS, NOW_MS - 20 * DAY_MS]


def test_step5_boundary_is_strict() -> None:
    at_cutoff = NOW_MS - DAY_MS  # now - ttl > T is false for T == now - ttl
    result = plan(v1_ms=(at_cutoff - 5, at_cutoff))
    assert written_times(result) == [at_cutoff - 5, at_cutoff]
    result = plan(v1_ms=(at_cutoff - 5, at_cutoff - 1))
    assert written_times(result) == [at_cutoff - 1]


def test_step6_1_generations_already_in_v2_are_skipped() -> None:
    first, second = NOW_MS - 2000, NOW_MS - 1000
    result = plan(v1_ms=(first, second), v2_ms=(first,))
    assert written_times(result) == [second]
    assert result.skipped == (SkippedRewrite(first, SkipReason.ALREADY_IN_V2),)


def test_step6_2_missing_description_is_reported_and_not_fatal() -> None:
    first, second = NOW_MS - 2000, NOW_MS - 1000
    result = plan(v1_ms=(first, second), descriptions=(second,))
    assert written_times(result) == [second]
    assert result.skipped == (SkippedRewrite(first, SkipReason.DESCRIPTION_MISSING),)
    assert result.actions[-1] == MARKER


def test_step6_3_and_7_streams_then_timestamp_per_generation_then_marker() -> None:
    first, second = NOW_MS - 2000, NOW_MS - 1000
    result = plan(v1_ms=(second, first, second))
    kinds = [type(action) for action in result.actions]
    assert kinds == [
        WriteStreamsRows,
        WriteTimestampRow,
        WriteStreamsRows,
        WriteTimestampRow,
        WriteRewrittenMarker,
    ]
    streams_action = result.actions[0]
    assert isinstance(streams_action, WriteStreamsRows)
    assert streams_action.time_ms == first
    description = generate_topology_description(RING, lambda t: (4, 12), random.Random(first))
    assert list(streams_action.rows) == streams_description_v2_rows(first, description)


def test_nothing_left_still_writes_the_marker() -> None:
    result = plan(v1_ms=(NOW_MS - 1000,), v2_ms=(NOW_MS - 1000,))
    assert result.actions == (MARKER,)


def test_ttls_are_validated() -> None:
    with pytest.raises(CdcArgumentError):
        plan(ttls_s=(-1,))


def test_rewrite_candidates_are_neither_too_old_nor_already_in_v2() -> None:
    from ringflow.cdc._rewrite import rewrite_candidates

    hour = 3_600_000
    found = rewrite_candidates(
        cdc_table_ttls_s=[3600],
        v1_timestamps_ms=[3 * hour, 0, hour, 5 * hour, hour],
        v2_timestamps_ms=[3 * hour],
        now_ms=4 * hour + 1,
    )
    # 0 and 1 h are too old (3 h is greater and < now - ttl = 3 h + 1 ms); 3 h is not (no
    # greater timestamp has expired) but is already in v2; 5 h is left
    assert found == (5 * hour,)
    assert (
        rewrite_candidates(
            cdc_table_ttls_s=[], v1_timestamps_ms=[0], v2_timestamps_ms=[], now_ms=hour
        )
        == ()
    )
