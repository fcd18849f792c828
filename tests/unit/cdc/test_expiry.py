"""Expired generations (``ringflow.cdc._expiry``; issue 7 §3; seeds 000/001 "expired").

Proves the rule: a generation superseded at ``t'`` expires at ``t' + max CDC log TTL`` and is
expired strictly after that; the newest generation never expires; ``ttl = 0`` on any table means
nothing expires; 24 h without CDC tables; only rows lacking ``expired`` are marked; internal
descriptions of expired generations (v1 by time, v2 by id) are deleted, others kept; and the
rule agrees with the rewrite's "too old" filter.
"""

from __future__ import annotations

import uuid

import pytest

from ringflow.cdc._errors import CdcArgumentError
from ringflow.cdc._expiry import (
    DEFAULT_CDC_LOG_TTL_S,
    Expired,
    expired_generations,
    max_cdc_log_ttl_s,
    plan_expiry,
)
from ringflow.cdc._rewrite import rewrite_candidates

HOUR_MS = 3_600_000


def test_max_ttl_is_the_longest_default_without_tables_and_none_with_ttl_zero() -> None:
    assert max_cdc_log_ttl_s([60, 3600, 120]) == 3600
    assert max_cdc_log_ttl_s([]) == DEFAULT_CDC_LOG_TTL_S == 86_400
    assert max_cdc_log_ttl_s([60, 0]) is None
    with pytest.raises(CdcArgumentError):
        max_cdc_log_ttl_s([-1])


def test_a_generation_expires_ttl_after_it_was_superseded() -> None:
    times = [0, 10 * HOUR_MS, 20 * HOUR_MS]
    ttl_s = 3600
    # at 11 h + 1 ms: gen 0 superseded at 10 h, + 1 h = 11 h < now -> expired; gen 10 h not
    assert expired_generations(times, [ttl_s], 11 * HOUR_MS + 1) == (Expired(0, 11 * HOUR_MS),)
    # exactly at the expiry instant it is not expired yet (data may still be there)
    assert expired_generations(times, [ttl_s], 11 * HOUR_MS) == ()
    # long after, every superseded generation is expired, the newest never
    late = expired_generations(times, [ttl_s], 1000 * HOUR_MS)
    assert [entry.time_ms for entry in late] == [0, 10 * HOUR_MS]


def test_the_longest_ttl_decides_and_ttl_zero_keeps_everything() -> None:
    times = [0, HOUR_MS]
    now = HOUR_MS + 2 * 60_000
    assert expired_generations(times, [60], now) == (Expired(0, HOUR_MS + 60_000),)
    assert expired_generations(times, [60, 3600], now) == ()
    assert expired_generations(times, [60, 0], 10**12) == ()


def test_no_cdc_table_means_the_24h_default() -> None:
    times = [0, HOUR_MS]
    assert expired_generations(times, [], 24 * HOUR_MS) == ()
    assert expired_generations(times, [], 25 * HOUR_MS + 1) == (Expired(0, 25 * HOUR_MS),)


def test_plan_marks_only_unmarked_rows_and_deletes_expired_internal_data() -> None:
    old_v2, live_v2 = uuid.UUID(int=1), uuid.UUID(int=2)
    now = 100 * HOUR_MS
    plan = plan_expiry(
        timestamps_rows={10 * HOUR_MS: None, 20 * HOUR_MS: 999, 90 * HOUR_MS: None},
        v1_streams_rows={0: None, 10 * HOUR_MS: None},
        v1_descriptions=[0, 10 * HOUR_MS],
        v2_descriptions={old_v2: 20 * HOUR_MS, live_v2: 90 * HOUR_MS},
        ttls_s=[3600],
        now_ms=now,
    )
    assert [e.time_ms for e in plan.expired] == [0, 10 * HOUR_MS, 20 * HOUR_MS]
    # 20 h already carries an expired value: not rewritten; the newest (90 h) is never marked
    assert plan.mark_timestamps == (Expired(10 * HOUR_MS, 21 * HOUR_MS),)
    assert plan.mark_v1_streams == (Expired(0, 11 * HOUR_MS), Expired(10 * HOUR_MS, 21 * HOUR_MS))
    assert plan.delete_v1_descriptions == (0, 10 * HOUR_MS)
    assert plan.delete_v2_descriptions == (old_v2,)
    assert not plan.empty


def test_plan_is_empty_when_nothing_expired() -> None:
    plan = plan_expiry(
        timestamps_rows={0: None, HOUR_MS: None},
        v1_streams_rows={},
        v1_descriptions=[],
        v2_descriptions={},
        ttls_s=[86_400],
        now_ms=2 * HOUR_MS,
    )
    assert plan.empty and plan.expired == ()


@pytest.mark.parametrize("now_h", [1, 2, 3, 5, 12, 30])
def test_expiry_agrees_with_the_rewrite_too_old_filter(now_h: int) -> None:
    times = [0, HOUR_MS, 2 * HOUR_MS, 4 * HOUR_MS, 10 * HOUR_MS]
    ttls = [1800, 3600]
    now = now_h * HOUR_MS + 1
    expired = {entry.time_ms for entry in expired_generations(times, ttls, now)}
    kept = set(
        rewrite_candidates(
            cdc_table_ttls_s=ttls, v1_timestamps_ms=times, v2_timestamps_ms=[], now_ms=now
        )
    )
    assert kept == set(times) - expired
