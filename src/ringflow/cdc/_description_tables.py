"""CDC description tables: their schemas, typed rows, and description <-> rows conversion.

Implements ``shared/reference/scylla-cdc.md`` §6 (schemas of Scylla 4.3 (v1) and 4.4+ (v2)),
seed 000 ("cdc_generation_descriptions_v2", "Streams description tables", "system.cdc_local") and
seed 001 (v1 tables). The ``CREATE TABLE`` constants follow §6 exactly; where seed 001 shows
older types (``utf8`` range ends, ``set<tuple<bigint, bigint>>`` streams) the 4.3 code wins.

Row values are Python values: ints in ms for timestamps (``*_ms`` fields; ``to_columns()`` gives
``datetime`` in UTC), ``bytes`` for blobs, ``uuid.UUID``, and tuples for collections. A
``set<blob>`` field holds its elements in CQL order: distinct, ascending unsigned (blob order).

Reading a generation back from ``cdc_generation_descriptions_v2``: a set loses shard order, so
``streams[j]`` is recovered by recomputing, from the range ``(previous end, end]``, ``ignore_msb``
and the shard count (= set size), the token the generator gives shard j, and matching streams by
token. Streams sharing a token (the range end, for shards the range is too small for) are handed
out in blob order by ascending shard, the order ringflow's generator draws them in, so its
generations round-trip bit for bit; for other writers the choice among equal-token streams is
arbitrary but equally colocated (same token).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import numpy as np

from ringflow.cdc._errors import InvalidDescriptionRows
from ringflow.cdc._generation_id import GenerationId, GenerationIdV1, GenerationIdV2
from ringflow.cdc._generator import stream_tokens_for_ranges
from ringflow.cdc._stream_id import STREAM_ID_SIZE
from ringflow.cdc._topology import (
    TopologyDescription,
    check_range_end,
    check_shard_parameters,
)

GENERATION_DESCRIPTIONS_V2_CQL = """\
CREATE TABLE system_distributed_everywhere.cdc_generation_descriptions_v2 (
    id uuid,
    range_end bigint,
    ignore_msb tinyint,
    num_ranges int static,
    streams frozen<set<blob>>,
    PRIMARY KEY (id, range_end)
)"""

STREAMS_DESCRIPTIONS_V2_CQL = """\
CREATE TABLE system_distributed.cdc_streams_descriptions_v2 (
    time timestamp,
    range_end bigint,
    streams frozen<set<blob>>,
    PRIMARY KEY (time, range_end)
)"""

GENERATION_TIMESTAMPS_CQL = """\
CREATE TABLE system_distributed.cdc_generation_timestamps (
    key text,
    time timestamp,
    expired timestamp,
    PRIMARY KEY (key, time)
) WITH CLUSTERING ORDER BY (time DESC)"""

GENERATION_DESCRIPTIONS_V1_CQL = """\
CREATE TABLE system_distributed.cdc_generation_descriptions (
    time timestamp PRIMARY KEY,
    description frozen<list<frozen<tuple<bigint, frozen<list<blob>>, tinyint>>>>,
    expired timestamp
)"""

STREAMS_DESCRIPTIONS_V1_CQL = """\
CREATE TABLE system_distributed.cdc_streams_descriptions (
    time timestamp PRIMARY KEY,
    streams frozen<set<blob>>,
    expired timestamp
)"""

CDC_LOCAL_CQL = """\
CREATE TABLE system.cdc_local (
    key text PRIMARY KEY,
    streams_timestamp timestamp,
    uuid uuid
)"""

TIMESTAMPS_PARTITION_KEY = "timestamps"
CDC_LOCAL_GENERATION_KEY = "cdc_local"
CDC_LOCAL_REWRITTEN_KEY = "rewritten"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

BlobSet = tuple[bytes, ...]
V1RangeDescription = tuple[int, tuple[bytes, ...], int]
"""One v1 description entry: ``(range_end, streams in shard order, ignore_msb)``."""


def datetime_from_ms(timestamp_ms: int) -> datetime:
    """A CQL ``timestamp`` (ms since epoch) as an aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=timestamp_ms)


def _blob_set(blobs: Iterable[bytes], table: str) -> BlobSet:
    items = tuple(blobs)
    if not all(first < second for first, second in pairwise(items)):
        items = tuple(sorted(set(items)))
    _check_stream_blobs(items, table)
    return items


def _check_stream_blobs(blobs: Sequence[bytes], table: str) -> None:
    for blob in blobs:
        if not isinstance(blob, bytes) or len(blob) != STREAM_ID_SIZE:
            raise InvalidDescriptionRows(f"{table}: a stream id is 16 bytes, got {blob!r}")


def _optional_datetime(timestamp_ms: int | None) -> datetime | None:
    return None if timestamp_ms is None else datetime_from_ms(timestamp_ms)


@dataclass(frozen=True, slots=True)
class GenerationDescriptionV2Row:
    """A row of ``system_distributed_everywhere.cdc_generation_descriptions_v2`` (internal)."""

    id: uuid.UUID
    range_end: int
    ignore_msb: int
    num_ranges: int
    streams: BlobSet

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "streams", _blob_set(self.streams, "cdc_generation_descriptions_v2")
        )

    def to_columns(self) -> dict[str, object]:
        return {
            "id": self.id,
            "range_end": self.range_end,
            "ignore_msb": self.ignore_msb,
            "num_ranges": self.num_ranges,
            "streams": frozenset(self.streams),
        }


@dataclass(frozen=True, slots=True)
class StreamsDescriptionV2Row:
    """A row of ``system_distributed.cdc_streams_descriptions_v2`` (user-facing)."""

    time_ms: int
    range_end: int
    streams: BlobSet

    def __post_init__(self) -> None:
        object.__setattr__(self, "streams", _blob_set(self.streams, "cdc_streams_descriptions_v2"))

    def to_columns(self) -> dict[str, object]:
        return {
            "time": datetime_from_ms(self.time_ms),
            "range_end": self.range_end,
            "streams": frozenset(self.streams),
        }


@dataclass(frozen=True, slots=True)
class GenerationTimestampRow:
    """A row of ``system_distributed.cdc_generation_timestamps``: the publication "commit"."""

    time_ms: int
    expired_ms: int | None = None
    key: str = TIMESTAMPS_PARTITION_KEY

    def to_columns(self) -> dict[str, object]:
        return {
            "key": self.key,
            "time": datetime_from_ms(self.time_ms),
            "expired": _optional_datetime(self.expired_ms),
        }


@dataclass(frozen=True, slots=True)
class GenerationDescriptionV1Row:
    """A row of ``system_distributed.cdc_generation_descriptions`` (v1 internal, one cell)."""

    time_ms: int
    description: tuple[V1RangeDescription, ...]
    expired_ms: int | None = None

    def __post_init__(self) -> None:
        for _, streams, _ in self.description:
            _check_stream_blobs(streams, "cdc_generation_descriptions")

    def to_columns(self) -> dict[str, object]:
        return {
            "time": datetime_from_ms(self.time_ms),
            "description": self.description,
            "expired": _optional_datetime(self.expired_ms),
        }


@dataclass(frozen=True, slots=True)
class StreamsDescriptionV1Row:
    """A row of ``system_distributed.cdc_streams_descriptions`` (v1 user-facing, one cell)."""

    time_ms: int
    streams: BlobSet
    expired_ms: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "streams", _blob_set(self.streams, "cdc_streams_descriptions"))

    def to_columns(self) -> dict[str, object]:
        return {
            "time": datetime_from_ms(self.time_ms),
            "streams": frozenset(self.streams),
            "expired": _optional_datetime(self.expired_ms),
        }


@dataclass(frozen=True, slots=True)
class CdcLocalRow:
    """A row of ``system.cdc_local``: key ``'cdc_local'`` (gossiped id) or ``'rewritten'``."""

    key: str
    streams_timestamp_ms: int | None = None
    uuid: uuid.UUID | None = None

    def to_columns(self) -> dict[str, object]:
        return {
            "key": self.key,
            "streams_timestamp": _optional_datetime(self.streams_timestamp_ms),
            "uuid": self.uuid,
        }


# -- description -> rows ---------------------------------------------------------------------


def _blob_sets_by_range(description: TopologyDescription) -> list[BlobSet]:
    """Each entry's streams as 16-byte blobs in blob (unsigned) order, computed column-wise."""
    entry_of_stream = np.repeat(np.arange(len(description)), description.shard_counts)
    order = np.lexsort(
        (description.stream_lows, description.stream_tokens.view(np.uint64), entry_of_stream)
    )
    data = description.stream_bytes(order).tobytes()
    offsets = description.stream_offsets.tolist()
    return [
        tuple(data[position : position + STREAM_ID_SIZE] for position in range(start, stop, 16))
        for start, stop in zip(
            [offset * STREAM_ID_SIZE for offset in offsets[:-1]],
            [offset * STREAM_ID_SIZE for offset in offsets[1:]],
            strict=True,
        )
    ]


def generation_description_v2_rows(
    generation_uuid: uuid.UUID, description: TopologyDescription
) -> list[GenerationDescriptionV2Row]:
    """The internal v2 rows of a generation, one per range (range_end order)."""
    ends = description.range_ends.tolist()
    msbs = description.ignore_msbs.tolist()
    return [
        GenerationDescriptionV2Row(generation_uuid, end, msb, len(ends), streams)
        for end, msb, streams in zip(ends, msbs, _blob_sets_by_range(description), strict=True)
    ]


def streams_description_v2_rows(
    time_ms: int, description: TopologyDescription
) -> list[StreamsDescriptionV2Row]:
    """The user-facing v2 rows of a generation starting at ``time_ms``, one per range."""
    ends = description.range_ends.tolist()
    return [
        StreamsDescriptionV2Row(time_ms, end, streams)
        for end, streams in zip(ends, _blob_sets_by_range(description), strict=True)
    ]


def generation_timestamp_row(time_ms: int) -> GenerationTimestampRow:
    return GenerationTimestampRow(time_ms)


def generation_description_v1_row(
    time_ms: int, description: TopologyDescription
) -> GenerationDescriptionV1Row:
    """The single v1 internal row: every range with its streams in shard order."""
    data = description.stream_bytes().tobytes()
    offsets = description.stream_offsets.tolist()
    entries = tuple(
        (
            end,
            tuple(data[16 * flat : 16 * flat + 16] for flat in range(start, stop)),
            msb,
        )
        for end, msb, start, stop in zip(
            description.range_ends.tolist(),
            description.ignore_msbs.tolist(),
            offsets[:-1],
            offsets[1:],
            strict=True,
        )
    )
    return GenerationDescriptionV1Row(time_ms, entries)


def streams_description_v1_row(
    time_ms: int, description: TopologyDescription
) -> StreamsDescriptionV1Row:
    """The single v1 user-facing row: the set of every stream of the generation."""
    tokens = description.stream_tokens.view(np.uint64)
    order = np.lexsort((description.stream_lows, tokens))
    data = description.stream_bytes(order).tobytes()
    streams = tuple(data[position : position + 16] for position in range(0, len(data), 16))
    return StreamsDescriptionV1Row(time_ms, streams)


def cdc_local_generation_row(generation_id: GenerationId) -> CdcLocalRow:
    """The ``system.cdc_local`` row persisting the generation id this node gossips."""
    generation_uuid = generation_id.uuid if isinstance(generation_id, GenerationIdV2) else None
    return CdcLocalRow(CDC_LOCAL_GENERATION_KEY, generation_id.timestamp_ms, generation_uuid)


def rewritten_marker_row() -> CdcLocalRow:
    """The ``system.cdc_local`` row saying the v1 -> v2 streams rewrite is done (or not needed)."""
    return CdcLocalRow(CDC_LOCAL_REWRITTEN_KEY)


def generation_id_from_cdc_local(rows: Iterable[CdcLocalRow]) -> GenerationId | None:
    """The persisted generation id, if the ``'cdc_local'`` row exists and has a timestamp."""
    for row in rows:
        if row.key == CDC_LOCAL_GENERATION_KEY and row.streams_timestamp_ms is not None:
            if row.uuid is None:
                return GenerationIdV1(row.streams_timestamp_ms)
            return GenerationIdV2(row.streams_timestamp_ms, row.uuid)
    return None


def has_rewritten_marker(rows: Iterable[CdcLocalRow]) -> bool:
    return any(row.key == CDC_LOCAL_REWRITTEN_KEY for row in rows)


# -- rows -> description ---------------------------------------------------------------------


def description_from_generation_v1_row(row: GenerationDescriptionV1Row) -> TopologyDescription:
    """Rebuild a description from the v1 internal row (shard order is kept by the list)."""
    if not row.description:
        raise InvalidDescriptionRows(f"generation {row.time_ms} has an empty v1 description")
    entries = sorted(row.description, key=lambda entry: entry[0])
    data = b"".join(b"".join(streams) for _, streams, _ in entries)
    qwords = np.frombuffer(data, dtype=">u8").reshape(-1, 2).astype(np.uint64)
    return TopologyDescription.from_arrays(
        range_ends=[end for end, _, _ in entries],
        shard_counts=[len(streams) for _, streams, _ in entries],
        ignore_msbs=[msb for _, _, msb in entries],
        stream_tokens=qwords[:, 0].view(np.int64),
        stream_lows=qwords[:, 1],
    )


def description_from_generation_v2_rows(
    rows: Iterable[GenerationDescriptionV2Row],
) -> TopologyDescription:
    """Rebuild a description from all internal v2 rows of one generation.

    Raises InvalidDescriptionRows for rows of several generations, a partial generation
    (``num_ranges`` differs from the number of rows) or streams that do not match the tokens
    the ranges' sharding gives.
    """
    ordered = _whole_generation(rows)
    ends = [row.range_end for row in ordered]
    counts = [len(row.streams) for row in ordered]
    msbs = [row.ignore_msb for row in ordered]
    expected_tokens = stream_tokens_for_ranges(ends, counts, msbs)
    data = b"".join(b"".join(row.streams) for row in ordered)
    qwords = np.frombuffer(data, dtype=">u8").reshape(-1, 2).astype(np.uint64)
    actual_tokens = qwords[:, 0].view(np.int64)
    lows = qwords[:, 1]
    entry_of_stream = np.repeat(np.arange(len(ordered)), counts)
    expected_order = np.lexsort((expected_tokens, entry_of_stream))
    actual_order = np.lexsort((lows, actual_tokens, entry_of_stream))
    mismatched = np.flatnonzero(expected_tokens[expected_order] != actual_tokens[actual_order])
    if mismatched.size:
        entry = int(entry_of_stream[expected_order[mismatched[0]]])
        raise InvalidDescriptionRows(
            f"generation {ordered[0].id}: the streams of range {ends[entry]} do not carry the "
            f"tokens of its {counts[entry]} shards with ignore_msb {msbs[entry]}"
        )
    shard_ordered_lows = np.empty_like(lows)
    shard_ordered_lows[expected_order] = lows[actual_order]
    return TopologyDescription.from_arrays(
        range_ends=ends,
        shard_counts=counts,
        ignore_msbs=msbs,
        stream_tokens=expected_tokens,
        stream_lows=shard_ordered_lows,
    )


def _whole_generation(
    rows: Iterable[GenerationDescriptionV2Row],
) -> list[GenerationDescriptionV2Row]:
    ordered = sorted(rows, key=lambda row: row.range_end)
    if not ordered:
        raise InvalidDescriptionRows("no cdc_generation_descriptions_v2 rows")
    ids = {row.id for row in ordered}
    if len(ids) != 1:
        raise InvalidDescriptionRows(f"rows of several generations: {sorted(map(str, ids))}")
    if any(first.range_end == second.range_end for first, second in pairwise(ordered)):
        raise InvalidDescriptionRows(f"generation {ordered[0].id}: duplicate range_end rows")
    for row in ordered:
        check_range_end(row.range_end)
        check_shard_parameters(len(row.streams), row.ignore_msb, f"range {row.range_end}")
    declared = {row.num_ranges for row in ordered}
    if declared != {len(ordered)}:
        raise InvalidDescriptionRows(
            f"generation {ordered[0].id} is partial: {len(ordered)} rows, num_ranges {declared}"
        )
    return ordered
