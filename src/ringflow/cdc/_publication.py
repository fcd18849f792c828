"""Publishing generations to the user-facing description tables, and reading them back safely.

Implements ``shared/reference/scylla-cdc.md`` §6 "Write protocol for user tables" (Scylla
``create_cdc_desc``) and §8 pain point #6 (scylla-cdc-java#144); seed 000 "Streams description
tables":

- writer: every ``cdc_streams_descriptions_v2`` row of the generation first, in batches of
  bounded estimated size (Scylla: ~1 MB mutations, 20 B per stream), **then** the
  ``cdc_generation_timestamps`` row, which acts as the commit;
- reader: a generation counts only once its timestamp row is visible. A visible timestamp whose
  streams rows are missing or visibly incomplete (replication trouble, or a writer that died
  half-way after a bug) is reported as skipped, never raised.

Incompleteness is detected when the caller knows the number of ranges (``num_ranges`` of the
internal table) and otherwise heuristically: streams of version 1 carry the position of their
range, so rows whose streams' indices differ from their row position reveal missing ranges
(except missing trailing ranges, which user-facing rows alone cannot reveal). Generations with
unversioned (pre-4.3) streams are not checked this way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from ringflow.cdc._description_tables import (
    TIMESTAMPS_PARTITION_KEY,
    GenerationTimestampRow,
    StreamsDescriptionV2Row,
    generation_timestamp_row,
    streams_description_v2_rows,
)
from ringflow.cdc._errors import CdcArgumentError
from ringflow.cdc._stream_id import INDEX_MASK, STREAM_ID_VERSION, StreamId
from ringflow.cdc._topology import TopologyDescription

DEFAULT_BATCH_BYTES_MAX = 1_000_000
STREAM_SIZE_ESTIMATE_BYTES = 20

PublicationRow = StreamsDescriptionV2Row | GenerationTimestampRow


def publication_rows(time_ms: int, description: TopologyDescription) -> Iterator[PublicationRow]:
    """Rows to write to publish a generation, in order: all streams rows, then the timestamp."""
    yield from streams_description_v2_rows(time_ms, description)
    yield generation_timestamp_row(time_ms)


def publication_batches(
    time_ms: int,
    description: TopologyDescription,
    batch_bytes_max: int = DEFAULT_BATCH_BYTES_MAX,
) -> Iterator[tuple[PublicationRow, ...]]:
    """Publication rows grouped into writes of at most ``batch_bytes_max`` estimated bytes.

    Each batch must be written (acknowledged) before the next; the last batch is the timestamp
    row alone. A single range larger than the limit still gets its own batch.
    """
    if batch_bytes_max < STREAM_SIZE_ESTIMATE_BYTES:
        raise CdcArgumentError(f"batch_bytes_max must be >= 20, got {batch_bytes_max}")
    batch: list[PublicationRow] = []
    batch_bytes = 0
    for row in streams_description_v2_rows(time_ms, description):
        row_bytes = STREAM_SIZE_ESTIMATE_BYTES * len(row.streams)
        if batch and batch_bytes + row_bytes > batch_bytes_max:
            yield tuple(batch)
            batch, batch_bytes = [], 0
        batch.append(row)
        batch_bytes += row_bytes
    if batch:
        yield tuple(batch)
    yield (generation_timestamp_row(time_ms),)


@dataclass(frozen=True, slots=True)
class PublishedGeneration:
    """A committed generation as clients see it: its start and its rows by range end."""

    time_ms: int
    ranges: tuple[StreamsDescriptionV2Row, ...]

    def streams(self) -> tuple[StreamId, ...]:
        """Every stream of the generation, range by range, blob order within a range."""
        return tuple(
            StreamId.from_bytes(blob, accept_any_version=True)
            for row in self.ranges
            for blob in row.streams
        )


@dataclass(frozen=True, slots=True)
class SkippedGeneration:
    """A committed timestamp whose streams cannot be trusted, and why."""

    time_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class GenerationListing:
    """What a client may use (``complete``), what it must skip, and rows not committed yet."""

    complete: tuple[PublishedGeneration, ...]
    skipped: tuple[SkippedGeneration, ...]
    uncommitted_ms: tuple[int, ...]


def complete_generations(
    timestamps_rows: Iterable[GenerationTimestampRow],
    streams_rows: Iterable[StreamsDescriptionV2Row],
    expected_range_counts: Mapping[int, int] | None = None,
) -> GenerationListing:
    """Generations whose timestamp row is visible and whose streams rows look whole.

    ``expected_range_counts`` maps a generation's time (ms) to its number of ranges when
    known (e.g. ``num_ranges`` of the internal table).
    """
    committed = sorted(
        {row.time_ms for row in timestamps_rows if row.key == TIMESTAMPS_PARTITION_KEY}
    )
    by_time: dict[int, dict[int, StreamsDescriptionV2Row]] = {}
    conflicting: set[int] = set()
    for row in streams_rows:
        ranges = by_time.setdefault(row.time_ms, {})
        if ranges.get(row.range_end, row) != row:
            conflicting.add(row.time_ms)
        ranges[row.range_end] = row
    complete: list[PublishedGeneration] = []
    skipped: list[SkippedGeneration] = []
    for time_ms in committed:
        rows = tuple(row for _, row in sorted(by_time.get(time_ms, {}).items()))
        expected = None if expected_range_counts is None else expected_range_counts.get(time_ms)
        reason = _why_incomplete(rows, expected, time_ms in conflicting)
        if reason is None:
            complete.append(PublishedGeneration(time_ms, rows))
        else:
            skipped.append(SkippedGeneration(time_ms, reason))
    uncommitted = tuple(sorted(set(by_time) - set(committed)))
    return GenerationListing(tuple(complete), tuple(skipped), uncommitted)


def _why_incomplete(
    rows: tuple[StreamsDescriptionV2Row, ...], expected: int | None, conflicting: bool
) -> str | None:
    if not rows:
        return "timestamp published but no cdc_streams_descriptions_v2 rows are visible"
    if conflicting:
        return "several different rows for the same range_end"
    if expected is not None and expected != len(rows):
        return f"partial: {len(rows)} of {expected} ranges visible"
    if any(not row.streams for row in rows):
        return "a range without streams"
    return _index_gap(rows)


def _index_gap(rows: tuple[StreamsDescriptionV2Row, ...]) -> str | None:
    """Version-1 streams carry their range's position: a mismatch means missing ranges."""
    lows = [int.from_bytes(blob[8:], "big") for row in rows for blob in row.streams]
    if any(low & 0xF != STREAM_ID_VERSION for low in lows):
        return None
    for position, row in enumerate(rows):
        for blob in row.streams:
            index = (int.from_bytes(blob[8:], "big") >> 4) & INDEX_MASK
            if index != position & INDEX_MASK:
                return (
                    f"partial: range {row.range_end} at position {position} holds streams of "
                    f"vnode index {index}, so earlier ranges are missing"
                )
    return None
