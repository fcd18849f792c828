"""Expired CDC generations: which superseded generations can no longer have data, as a pure plan.

Implements seed 000/001 "TODO: expired generations" (the ``expired`` column of
``cdc_generation_timestamps``, ``cdc_streams_descriptions`` and ``cdc_generation_descriptions``)
and ``shared/reference/scylla-cdc.md`` §8 pain point #3 (description tables must be collected):

- generation ``g`` starting at ``t`` is *superseded* at the next generation's start ``t'``; no
  CDC log row of ``g`` is written after ``t'``, and each lives at most the table's CDC TTL;
- so ``g`` is *expired* at ``t' + max_ttl`` (the longest CDC log TTL over the CDC tables, 24 h
  when there is no CDC table, Scylla's default ``ttl``); a table with ``ttl = 0`` keeps its log
  forever, so then nothing expires;
- an expired generation gets ``expired = t' + max_ttl`` in the user-facing rows that do not have it
  yet (the newest generation is never superseded, so never expired), and its internal
  description (v1 ``cdc_generation_descriptions`` partition, v2
  ``cdc_generation_descriptions_v2`` partition) is deleted: no node needs it any more (a node
  only loads the generation operating now or later, and ``CdcMetadata`` forgets superseded ones).

The rule agrees with the rewrite's "too old" filter (``_rewrite``): a timestamp is too old there
exactly when the generation it starts is expired here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise

from ringflow.cdc._errors import CdcArgumentError

DEFAULT_CDC_LOG_TTL_S = 86_400
"""Scylla's default CDC ``ttl`` (24 h): used when no table has CDC enabled."""


def max_cdc_log_ttl_s(ttls_s: Iterable[int]) -> int | None:
    """The longest CDC log TTL (s) over the CDC tables; None when one keeps its log forever
    (``ttl = 0``); :data:`DEFAULT_CDC_LOG_TTL_S` when there is no CDC table."""
    values = list(ttls_s)
    if any(not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0 for ttl in values):
        raise CdcArgumentError(f"CDC TTLs must be ints >= 0 (seconds), got {values}")
    if not values:
        return DEFAULT_CDC_LOG_TTL_S
    if 0 in values:
        return None
    return max(values)


@dataclass(frozen=True, slots=True, order=True)
class Expired:
    """Generation starting at ``time_ms`` cannot have CDC data after ``expired_ms``."""

    time_ms: int
    expired_ms: int


def expired_generations(
    timestamps_ms: Iterable[int], ttls_s: Iterable[int], now_ms: int
) -> tuple[Expired, ...]:
    """Every generation superseded by its successor at ``t'`` with ``t' + max_ttl < now``."""
    ttl_s = max_cdc_log_ttl_s(ttls_s)
    if ttl_s is None:
        return ()
    ordered = sorted(set(timestamps_ms))
    found = []
    for time_ms, superseded_ms in pairwise(ordered):
        expired_ms = superseded_ms + 1000 * ttl_s
        if expired_ms < now_ms:
            found.append(Expired(time_ms, expired_ms))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class ExpiryPlan:
    """What to write: ``expired`` values per table (only rows lacking them), internal
    descriptions to delete (v1 by time, v2 by id)."""

    expired: tuple[Expired, ...]
    mark_timestamps: tuple[Expired, ...]
    mark_v1_streams: tuple[Expired, ...]
    delete_v1_descriptions: tuple[int, ...]
    delete_v2_descriptions: tuple[uuid.UUID, ...]

    @property
    def empty(self) -> bool:
        return not (
            self.mark_timestamps
            or self.mark_v1_streams
            or self.delete_v1_descriptions
            or self.delete_v2_descriptions
        )


def plan_expiry(
    *,
    timestamps_rows: Mapping[int, int | None],
    v1_streams_rows: Mapping[int, int | None],
    v1_descriptions: Iterable[int],
    v2_descriptions: Mapping[uuid.UUID, int],
    ttls_s: Iterable[int],
    now_ms: int,
) -> ExpiryPlan:
    """The expiry work.

    ``timestamps_rows``/``v1_streams_rows``: each user-facing row's time -> its ``expired``
    value (None if unset); ``v1_descriptions``: times of the v1 internal rows;
    ``v2_descriptions``: v2 internal generation id -> its generation's timestamp (for the ids
    whose timestamp is known). Every one of these times counts in the generations' timeline.
    """
    timeline = {
        *timestamps_rows,
        *v1_streams_rows,
        *v1_descriptions,
        *v2_descriptions.values(),
    }
    expired = expired_generations(timeline, ttls_s, now_ms)
    by_time = {entry.time_ms: entry for entry in expired}
    v1_internal = sorted(set(v1_descriptions))
    return ExpiryPlan(
        expired=expired,
        mark_timestamps=_unmarked(timestamps_rows, by_time),
        mark_v1_streams=_unmarked(v1_streams_rows, by_time),
        delete_v1_descriptions=tuple(time for time in v1_internal if time in by_time),
        delete_v2_descriptions=tuple(
            sorted(
                (ident for ident, time in v2_descriptions.items() if time in by_time),
                key=lambda ident: (v2_descriptions[ident], ident.int),
            )
        ),
    )


def _unmarked(
    rows: Mapping[int, int | None], by_time: Mapping[int, Expired]
) -> tuple[Expired, ...]:
    return tuple(
        by_time[time_ms] for time_ms in sorted(rows) if time_ms in by_time and rows[time_ms] is None
    )
