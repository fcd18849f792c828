"""The range of a captured row: the vnode range ``(start, end]`` of its stream's generation.

Checked against the generation's own lookup (``TopologyDescription.entry_index_for`` of the
stream's token gives the entry the stream is listed under), over generated descriptions; a
single-vnode generation is the whole ring; streams of two generations keep their own ranges;
the index forgets the oldest generations past its bound."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cdc import StreamId, TopologyDescription, generate_topology_description
from ringflow.replication import ReplicationArgumentError, StreamRanges, description_ranges


def _description(tokens: list[int], shards: int, seed: int) -> TopologyDescription:
    return generate_topology_description(tokens, lambda _t: (shards, 12), random.Random(seed))


tokens_strategy = st.lists(
    st.integers(-(2**63) + 1, 2**63 - 1), min_size=1, max_size=40, unique=True
)


@settings(max_examples=60)
@given(tokens_strategy, st.integers(1, 4), st.integers(0, 2**32))
def test_every_stream_maps_to_the_range_of_the_entry_it_is_listed_under(
    tokens: list[int], shards: int, seed: int
) -> None:
    description = _description(tokens, shards, seed)
    index = StreamRanges()
    assert index.add(description)
    ends = description.range_ends.tolist()
    for position in range(len(description)):
        expected = (ends[position - 1], ends[position])
        for stream in description.streams_of_entry(position):
            assert index.range_of(stream.to_bytes()) == expected
            assert description.entry_index_for(stream.token) == position
    assert len(index) == description.stream_count
    index.validate()


def test_a_single_vnode_generation_is_the_whole_ring() -> None:
    description = _description([42], 2, 0)
    (stream, _) = description.streams_of_entry(0)
    assert StreamRanges().range_of(stream.to_bytes()) is None
    assert description_ranges(description)[stream.to_bytes()] == (42, 42)


def test_streams_of_two_generations_keep_their_own_ranges_and_the_oldest_are_forgotten() -> None:
    old = _description([-100, 100], 1, 1)
    new = _description([-50, 0, 50], 1, 2)
    index = StreamRanges(max_streams=4)
    index.add(old)
    index.add(new)
    assert not index.add(new)  # the same object: nothing to do
    old_streams = [s.to_bytes() for s in old.all_streams()]
    new_streams = [s.to_bytes() for s in new.all_streams()]
    assert all(index.range_of(s) is None for s in old_streams)  # 5 streams > 4: old forgotten
    assert [index.range_of(s) for s in new_streams] == [(50, -50), (-50, 0), (0, 50)]
    unknown = StreamId.create(7, 0, 5).to_bytes()
    assert index.range_of(unknown) is None


def test_bad_arguments() -> None:
    with pytest.raises(ReplicationArgumentError, match="max_streams"):
        StreamRanges(max_streams=0)
    with pytest.raises(ReplicationArgumentError, match="TopologyDescription"):
        StreamRanges().add("nope")  # type: ignore[arg-type]
