"""The v1 -> v2 streams-description rewrite, as a pure planner.

Implements seed 000 "Streams description table V1 and rewriting" (steps 1-7) and
``shared/reference/scylla-cdc.md`` §6 (gossip-era upgrade). On restart a node that was upgraded
from Scylla 4.3 copies the generations of ``system_distributed.cdc_streams_descriptions`` that
may still hold data into the v2 tables, so clients reading only v2 find them:

1. no v1 ``cdc_streams_descriptions`` table: nothing to do;
2. ``system.cdc_local`` has the ``'rewritten'`` row: done before, nothing to do;
3. no CDC-enabled table: only write the ``'rewritten'`` row (old generations are not needed);
4. (the caller scans the v1 timestamps, in the background; ``rewrite_candidates`` tells it which
   descriptions step 6.2 needs);
5. drop "too old" timestamps: t is too old if some greater v1 timestamp T satisfies
   ``now - ttl > T`` for every CDC table (so no table can still hold data of t). A TTL of 0
   means the table's CDC data never expires, so nothing is too old;
6. for each remaining timestamp, ascending: skip it if ``cdc_generation_timestamps`` has it;
   else take its description from v1 ``cdc_generation_descriptions`` (skip and report it when
   missing, as Scylla logs and continues) and publish it: streams rows, then the timestamp row;
7. write the ``'rewritten'`` row.

The planner gets every table's contents and ``now`` as arguments and returns typed actions; the
shell executes them in order (each must succeed before the next).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ringflow.cdc._description_tables import (
    CdcLocalRow,
    GenerationDescriptionV1Row,
    GenerationTimestampRow,
    StreamsDescriptionV2Row,
    generation_timestamp_row,
    has_rewritten_marker,
    rewritten_marker_row,
)
from ringflow.cdc._errors import CdcArgumentError


class RewriteStart(enum.Enum):
    """Outcome of steps 1-3, decided before the expensive scan of step 4."""

    NO_V1_TABLE = "no system_distributed.cdc_streams_descriptions table: nothing to rewrite"
    ALREADY_REWRITTEN = "system.cdc_local has the 'rewritten' row: rewrite done before"
    NO_CDC_TABLES = "no CDC-enabled table: mark as rewritten without copying"
    PROCEED = "scan the v1 timestamps and rewrite what may still hold data"


class SkipReason(enum.Enum):
    TOO_OLD = "too old: every CDC table's TTL has expired its data"
    ALREADY_IN_V2 = "already present in cdc_generation_timestamps"
    DESCRIPTION_MISSING = "no row in v1 cdc_generation_descriptions"


@dataclass(frozen=True, slots=True)
class NothingToDo:
    reason: RewriteStart


@dataclass(frozen=True, slots=True)
class WriteStreamsRows:
    """Insert a generation's ``cdc_streams_descriptions_v2`` rows."""

    time_ms: int
    rows: tuple[StreamsDescriptionV2Row, ...]


@dataclass(frozen=True, slots=True)
class WriteTimestampRow:
    """Insert the ``cdc_generation_timestamps`` row; only after its streams rows succeeded."""

    row: GenerationTimestampRow


@dataclass(frozen=True, slots=True)
class WriteRewrittenMarker:
    """Insert ``key = 'rewritten'`` into ``system.cdc_local``; the last action."""

    row: CdcLocalRow


RewriteAction = NothingToDo | WriteStreamsRows | WriteTimestampRow | WriteRewrittenMarker


@dataclass(frozen=True, slots=True)
class SkippedRewrite:
    time_ms: int
    reason: SkipReason


@dataclass(frozen=True, slots=True)
class RewritePlan:
    start: RewriteStart
    actions: tuple[RewriteAction, ...]
    skipped: tuple[SkippedRewrite, ...] = ()


def rewrite_start(
    *,
    v1_streams_table_exists: bool,
    cdc_local_rows: Iterable[CdcLocalRow],
    cdc_table_ttls_s: Iterable[int],
) -> RewriteStart:
    """Steps 1-3: whether to stop, only mark, or scan and rewrite."""
    if not v1_streams_table_exists:
        return RewriteStart.NO_V1_TABLE
    if has_rewritten_marker(cdc_local_rows):
        return RewriteStart.ALREADY_REWRITTEN
    if not list(cdc_table_ttls_s):
        return RewriteStart.NO_CDC_TABLES
    return RewriteStart.PROCEED


def plan_streams_rewrite(
    *,
    v1_streams_table_exists: bool,
    cdc_local_rows: Iterable[CdcLocalRow],
    cdc_table_ttls_s: Iterable[int],
    v1_timestamps_ms: Iterable[int],
    v2_timestamps_ms: Iterable[int],
    v1_descriptions: Mapping[int, GenerationDescriptionV1Row],
    now_ms: int,
) -> RewritePlan:
    """Steps 1-7 as an ordered list of actions (see the module docstring)."""
    ttls_s = list(cdc_table_ttls_s)
    if any(not isinstance(ttl, int) or ttl < 0 for ttl in ttls_s):
        raise CdcArgumentError(f"CDC TTLs must be ints >= 0 (seconds), got {ttls_s}")
    start = rewrite_start(
        v1_streams_table_exists=v1_streams_table_exists,
        cdc_local_rows=cdc_local_rows,
        cdc_table_ttls_s=ttls_s,
    )
    if start in (RewriteStart.NO_V1_TABLE, RewriteStart.ALREADY_REWRITTEN):
        return RewritePlan(start, (NothingToDo(start),))
    marker = WriteRewrittenMarker(rewritten_marker_row())
    if start is RewriteStart.NO_CDC_TABLES:
        return RewritePlan(start, (marker,))
    actions: list[RewriteAction] = []
    skipped: list[SkippedRewrite] = []
    timestamps = sorted(set(v1_timestamps_ms))
    too_old = _too_old(timestamps, ttls_s, now_ms)
    present = set(v2_timestamps_ms)
    for time_ms in timestamps:
        reason = _skip_reason(time_ms, too_old, present, v1_descriptions)
        if reason is not None:
            skipped.append(SkippedRewrite(time_ms, reason))
            continue
        actions.append(WriteStreamsRows(time_ms, _v2_rows(v1_descriptions[time_ms])))
        actions.append(WriteTimestampRow(generation_timestamp_row(time_ms)))
    actions.append(marker)
    return RewritePlan(start, tuple(actions), tuple(skipped))


def rewrite_candidates(
    *,
    cdc_table_ttls_s: Iterable[int],
    v1_timestamps_ms: Iterable[int],
    v2_timestamps_ms: Iterable[int],
    now_ms: int,
) -> tuple[int, ...]:
    """Steps 5 and 6.1: the v1 timestamps whose descriptions must be fetched (step 6.2),
    ascending: neither too old nor already in ``cdc_generation_timestamps``. The shell reads
    only these descriptions, then plans with :func:`plan_streams_rewrite`."""
    ttls_s = list(cdc_table_ttls_s)
    if not ttls_s:
        return ()
    timestamps = sorted(set(v1_timestamps_ms))
    too_old = _too_old(timestamps, ttls_s, now_ms)
    present = set(v2_timestamps_ms)
    return tuple(t for t in timestamps if t not in too_old and t not in present)


def _too_old(timestamps: list[int], ttls_s: list[int], now_ms: int) -> set[int]:
    """Step 5: timestamps below the last one that every table's TTL has passed."""
    if any(ttl == 0 for ttl in ttls_s):
        return set()
    cutoff_ms = min(now_ms - 1000 * ttl for ttl in ttls_s)
    expired = [time_ms for time_ms in timestamps if time_ms < cutoff_ms]
    if not expired:
        return set()
    last_expired = max(expired)
    return {time_ms for time_ms in timestamps if time_ms < last_expired}


def _skip_reason(
    time_ms: int,
    too_old: set[int],
    present: set[int],
    v1_descriptions: Mapping[int, GenerationDescriptionV1Row],
) -> SkipReason | None:
    if time_ms in too_old:
        return SkipReason.TOO_OLD
    if time_ms in present:
        return SkipReason.ALREADY_IN_V2
    if v1_descriptions.get(time_ms) is None:
        return SkipReason.DESCRIPTION_MISSING
    return None


def _v2_rows(row: GenerationDescriptionV1Row) -> tuple[StreamsDescriptionV2Row, ...]:
    """The v1 description's ranges as user-facing v2 rows (sets in blob order)."""
    return tuple(
        StreamsDescriptionV2Row(row.time_ms, range_end, streams)
        for range_end, streams, _ in sorted(row.description, key=lambda entry: entry[0])
    )
