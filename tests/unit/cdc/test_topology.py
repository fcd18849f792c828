"""Topology descriptions: construction, token -> stream lookup (scalar and vectorised), colocation.

scylla-cdc.md §2 (range semantics) and §4 step 7 (lookup); seed 000 "The generation's mapping".
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringflow.cdc import (
    CdcArgumentError,
    InvalidTopologyDescription,
    StreamId,
    TokenRangeDescription,
    TopologyDescription,
    generate_topology_description,
)
from ringflow.ring import MAX_TOKEN, MIN_TOKEN, shard_of

from ._helpers import KEY_TOKENS, generate, oracle_entry, rings, sharding_maps, signed

LAST = signed(0x7FFE0C687FCCE86D)
T0 = signed(0x807AE73E07DBD411)
T1 = signed(0x80838C6B76E19A1B)


def golden_description() -> TopologyDescription:
    return generate_topology_description([LAST, T0, T1], lambda token: (3, 12), random.Random(1))


def entry(end: int, tokens: list[int], msb: int = 0) -> TokenRangeDescription:
    return TokenRangeDescription(end, tuple(StreamId.create(token, 0, 0) for token in tokens), msb)


def test_range_end_belongs_to_its_own_range_and_past_the_last_end_wraps() -> None:
    description = golden_description()
    assert description.entry_index_for(T0) == 0
    assert description.entry_index_for(T0 + 1) == 1
    assert description.entry_index_for(LAST) == 2
    assert description.entry_index_for(LAST + 1) == 0
    assert description.entry_index_for(MAX_TOKEN) == 0
    assert description.entry_index_for(MIN_TOKEN + 1) == 0


def test_lookup_picks_the_stream_of_the_tokens_shard() -> None:
    description = golden_description()
    # §3 worked example: token -1 with 3 shards, ignore_msb 12 is on shard 2.
    stream = description.stream_for(-1)
    entry_index = description.entry_index_for(-1)
    assert stream == description.entry(entry_index).streams[2]


def test_min_token_is_normalised_to_max_like_a_key_token() -> None:
    description = golden_description()
    assert description.stream_for(MIN_TOKEN) == description.stream_for(MAX_TOKEN)
    flat = description.streams_for(np.array([MIN_TOKEN, MAX_TOKEN], dtype=np.int64))
    assert flat[0] == flat[1]


def test_entries_are_sorted_on_construction() -> None:
    description = TopologyDescription([entry(10, [5]), entry(-10, [-20, -15])])
    assert description.range_ends.tolist() == [-10, 10]
    assert description.shard_counts.tolist() == [2, 1]
    assert [e.range_end for e in description] == [-10, 10]
    description.validate()


def test_entries_round_trip_through_the_columns() -> None:
    description = golden_description()
    rebuilt = TopologyDescription(description.entries)
    assert rebuilt == description
    assert rebuilt.entries == description.entries
    assert list(description.all_streams()) == [
        stream for e in description.entries for stream in e.streams
    ]


def test_stream_bytes_are_the_stream_ids() -> None:
    description = golden_description()
    matrix = description.stream_bytes()
    assert [bytes(row) for row in matrix] == [s.to_bytes() for s in description.all_streams()]
    assert bytes(description.stream_bytes([4])[0]) == description.stream_at(4).to_bytes()


@pytest.mark.parametrize(
    "entries",
    [
        [],
        [entry(1, [1]), entry(1, [1])],
    ],
)
def test_invalid_descriptions_are_rejected(entries: list[TokenRangeDescription]) -> None:
    with pytest.raises(InvalidTopologyDescription):
        TopologyDescription(entries)


@pytest.mark.parametrize(
    ("end", "streams", "msb"),
    [
        (MIN_TOKEN, (StreamId.create(0, 0, 0),), 0),
        (0, (), 0),
        (0, [StreamId.create(0, 0, 0)], 0),
        (0, (StreamId.create(0, 0, 0),) * 3, 63),
        (0, (StreamId.create(0, 0, 0),), 64),
    ],
)
def test_invalid_entries_are_rejected(end: int, streams: object, msb: int) -> None:
    with pytest.raises(InvalidTopologyDescription):
        TokenRangeDescription(end, streams, msb)  # type: ignore[arg-type]


@pytest.mark.parametrize("token", [2**63, -(2**63) - 1, "1", 1.0, True])
def test_lookup_rejects_non_tokens(token: object) -> None:
    with pytest.raises(CdcArgumentError):
        golden_description().stream_for(token)  # type: ignore[arg-type]


def test_vectorised_lookup_rejects_non_integer_arrays() -> None:
    with pytest.raises(CdcArgumentError):
        golden_description().streams_for(np.array([1.5]))
    with pytest.raises(CdcArgumentError):
        golden_description().streams_for(np.array([2**64 - 1], dtype=np.uint64))


def test_uniform_and_mixed_sharding_lookups_agree_with_scalar() -> None:
    ring = [-(10**18), -5, 7, 10**18, 2 * 10**18]
    rng = np.random.default_rng(3)
    tokens = rng.integers(MIN_TOKEN, MAX_TOKEN, 4000, dtype=np.int64, endpoint=True)
    for sharding in ({t: (12, 12) for t in ring}, {t: (1 + i, i) for i, t in enumerate(ring)}):
        description = generate(ring, sharding)
        flat = description.streams_for(tokens)
        assert flat.tolist() == [description.stream_index_for(t) for t in tokens.tolist()]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), ring=rings())
def test_vnode_and_shard_colocation(data: st.DataObject, ring: list[int]) -> None:
    """A token's stream lies in the token's range and, for the range owner, on the token's shard.

    The token itself is a token of its shard inside the range, so the range always holds one:
    shard colocation must hold for every token, also in ranges too small for other shards.
    """
    sharding = data.draw(sharding_maps(ring))
    description = generate(ring, sharding)
    near_ends = [end + delta for end in ring for delta in (-1, 0, 1)]
    tokens = data.draw(st.lists(KEY_TOKENS, max_size=20)) + [
        t for t in near_ends if MIN_TOKEN <= t <= MAX_TOKEN
    ]
    for token in tokens:
        stream = description.stream_for(token)
        position = oracle_entry(ring, token)
        count, msb = sharding[ring[position]]
        key = MAX_TOKEN if token == MIN_TOKEN else token
        assert oracle_entry(ring, stream.token) == position
        assert stream.index == position
        assert shard_of(stream.token, count, msb) == shard_of(key, count, msb)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), ring=rings(max_tokens=40))
def test_vectorised_lookup_equals_scalar_lookup(data: st.DataObject, ring: list[int]) -> None:
    sharding = data.draw(sharding_maps(ring))
    description = generate(ring, sharding)
    near_ends = [end + delta for end in ring for delta in (-1, 0, 1)]
    tokens = (
        data.draw(st.lists(KEY_TOKENS, max_size=50))
        + [t for t in near_ends if MIN_TOKEN <= t <= MAX_TOKEN]
        + [MIN_TOKEN, MAX_TOKEN]
    )
    array = np.array(tokens, dtype=np.int64)
    flat = description.streams_for(array)
    assert flat.tolist() == [description.stream_index_for(token) for token in tokens]
    assert description.entry_indices_for(array).tolist() == [
        oracle_entry(ring, token) for token in tokens
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), ring=rings())
def test_scalar_lookup_is_offset_plus_the_ring_shard(data: st.DataObject, ring: list[int]) -> None:
    """The inlined shard formula of ``stream_index_for`` equals ``ringflow.ring.shard_of``."""
    sharding = data.draw(sharding_maps(ring))
    description = generate(ring, sharding)
    for token in data.draw(st.lists(KEY_TOKENS, min_size=1, max_size=30)):
        position = oracle_entry(ring, token)
        count, msb = sharding[ring[position]]
        expected = int(description.stream_offsets[position]) + shard_of(token, count, msb)
        assert description.stream_index_for(token) == expected
        assert description.stream_index_for(np.int64(token)) == expected


def test_clustered_ring_lookup_falls_back_beyond_linear_probes() -> None:
    # 200 ends packed into one bucket of the lookup table: the bounded probe loop must hand the
    # remaining queries to the binary search and still find the lower bound.
    ring = [10**6 + 3 * i for i in range(200)]
    description = generate(ring, {t: (2, 0) for t in ring})
    tokens = np.arange(10**6 - 5, 10**6 + 610, dtype=np.int64)
    expected = [oracle_entry(ring, token) for token in tokens.tolist()]
    assert description.entry_indices_for(tokens).tolist() == expected
    flat = [description.stream_index_for(token) for token in tokens.tolist()]
    assert [int(np.searchsorted(description.stream_offsets, f, "right")) - 1 for f in flat] == (
        expected
    )


def test_descriptions_are_immutable() -> None:
    description = golden_description()
    with pytest.raises(ValueError, match="read-only"):
        description.stream_tokens[0] = 0
    with pytest.raises(TypeError):
        hash(description)
