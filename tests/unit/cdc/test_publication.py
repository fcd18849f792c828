"""Publishing generations (streams rows, then the timestamp commit) and reading them back safely.

scylla-cdc.md §6 "Write protocol for user tables"; §8 pain point #6 (a timestamp without streams).
"""

from __future__ import annotations

import random

import pytest

from ringflow.cdc import (
    CdcArgumentError,
    GenerationTimestampRow,
    StreamId,
    StreamsDescriptionV2Row,
    TopologyDescription,
    complete_generations,
    generate_topology_description,
    generation_timestamp_row,
    publication_batches,
    publication_rows,
    streams_description_v2_rows,
)

RING = list(range(-(10**18), 10**18, 10**17))


def description(seed: int = 0) -> TopologyDescription:
    return generate_topology_description(RING, lambda token: (8, 12), random.Random(seed))


def test_streams_rows_come_before_the_timestamp_row() -> None:
    rows = list(publication_rows(1000, description()))
    assert all(isinstance(row, StreamsDescriptionV2Row) for row in rows[:-1])
    assert rows[-1] == GenerationTimestampRow(1000)
    assert len(rows) == len(RING) + 1


@pytest.mark.parametrize("limit", [20, 160, 500, 1_000_000])
def test_batches_respect_the_size_limit_and_end_with_the_commit(limit: int) -> None:
    batches = list(publication_batches(1000, description(), batch_bytes_max=limit))
    assert batches[-1] == (generation_timestamp_row(1000),)
    flattened = [row for batch in batches for row in batch]
    assert flattened == list(publication_rows(1000, description()))
    for batch in batches[:-1]:
        size = sum(
            20 * len(row.streams) for row in batch if isinstance(row, StreamsDescriptionV2Row)
        )
        assert size <= limit or len(batch) == 1


def test_batch_limit_is_validated() -> None:
    with pytest.raises(CdcArgumentError):
        list(publication_batches(1000, description(), batch_bytes_max=0))


def test_only_committed_generations_are_returned_in_time_order() -> None:
    streams = streams_description_v2_rows(2000, description(2)) + streams_description_v2_rows(
        1000, description(1)
    )
    streams += streams_description_v2_rows(3000, description(3))  # no timestamp row yet
    listing = complete_generations(
        [GenerationTimestampRow(2000), GenerationTimestampRow(1000)], streams
    )
    assert [generation.time_ms for generation in listing.complete] == [1000, 2000]
    assert listing.uncommitted_ms == (3000,)
    assert listing.skipped == ()
    first = listing.complete[0]
    assert set(first.streams()) == set(description(1).all_streams())
    assert [row.range_end for row in first.ranges] == sorted(RING)


def test_timestamp_without_streams_rows_is_skipped_not_raised() -> None:
    listing = complete_generations(
        [GenerationTimestampRow(1000), GenerationTimestampRow(2000)],
        streams_description_v2_rows(2000, description()),
    )
    assert [generation.time_ms for generation in listing.complete] == [2000]
    assert [skipped.time_ms for skipped in listing.skipped] == [1000]
    assert "no cdc_streams_descriptions_v2 rows" in listing.skipped[0].reason


def test_missing_middle_range_is_detected_by_vnode_indices() -> None:
    rows = streams_description_v2_rows(1000, description())
    listing = complete_generations([GenerationTimestampRow(1000)], rows[:3] + rows[4:])
    assert listing.complete == ()
    assert "partial" in listing.skipped[0].reason


def test_missing_trailing_range_needs_the_expected_count() -> None:
    rows = streams_description_v2_rows(1000, description())[:-1]
    blind = complete_generations([GenerationTimestampRow(1000)], rows)
    assert [generation.time_ms for generation in blind.complete] == [1000]  # undetectable
    informed = complete_generations([GenerationTimestampRow(1000)], rows, {1000: len(RING)})
    assert informed.complete == ()
    assert informed.skipped[0].reason == f"partial: {len(RING) - 1} of {len(RING)} ranges visible"


def test_legacy_unversioned_streams_are_not_index_checked() -> None:
    legacy = [
        StreamsDescriptionV2Row(
            1000,
            end,
            (
                StreamId.from_bytes(
                    end.to_bytes(8, "big", signed=True) + b"\x12" * 7 + b"\x37",
                    accept_any_version=True,
                ).to_bytes(),
            ),
        )
        for end in (-5, 5, 50)
    ]
    listing = complete_generations([GenerationTimestampRow(1000)], legacy)
    assert [generation.time_ms for generation in listing.complete] == [1000]
    assert [stream.version for stream in listing.complete[0].streams()] == [7, 7, 7]


def test_conflicting_rows_are_skipped() -> None:
    rows = streams_description_v2_rows(1000, description(1))
    other = streams_description_v2_rows(1000, description(2))
    listing = complete_generations([GenerationTimestampRow(1000)], rows + other[:1])
    assert listing.complete == ()
    assert "several different rows" in listing.skipped[0].reason


def test_duplicate_identical_rows_are_harmless() -> None:
    rows = streams_description_v2_rows(1000, description())
    listing = complete_generations([GenerationTimestampRow(1000)] * 2, rows + rows)
    assert len(listing.complete) == 1
    assert listing.complete[0].ranges == tuple(rows)


def test_timestamp_rows_of_other_partitions_are_ignored() -> None:
    rows = streams_description_v2_rows(1000, description())
    listing = complete_generations([GenerationTimestampRow(1000, key="other")], rows)
    assert listing.complete == ()
    assert listing.uncommitted_ms == (1000,)
