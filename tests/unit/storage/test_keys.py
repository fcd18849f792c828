"""Key encoding: range-tombstone intervals on encoded keys agree with typed bound coverage.

The store decides "range tombstone covers row" with ``low <= ck < high`` on encoded keys
(``_keys``); the schema layer decides it with ``covering_deletions`` and the typed clustering
order. Hypothesis draws bounds (prefixes of 0-2 components, inclusive or not, over an ASC int
and a DESC text column) and full keys, and both must agree. Also: token-range unwrapping and
composite partition key splitting.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.ring import MAX_TOKEN, MIN_TOKEN, TokenRange, partition_key_bytes
from ringflow.schema import (
    INT,
    TEXT,
    ClusteringBound,
    ClusteringOrder,
    DeletionTime,
    RangeTombstone,
    covering_deletions,
)
from ringflow.schema._codec import clustering_encoder, compare, serialize
from ringflow.storage._keys import end_key, row_key, split_partition_key, start_key, token_segments

TYPES = ((INT, ClusteringOrder.ASC), (TEXT, ClusteringOrder.DESC))
ENCODE = clustering_encoder(TYPES)
ints = st.integers(-3, 3).map(lambda n: serialize(INT, n))
texts = st.sampled_from(["", "a", "a\x00", "ab", "b"]).map(lambda s: serialize(TEXT, s))
keys = st.tuples(ints, texts)
prefixes = st.one_of(st.just(()), st.tuples(ints), st.tuples(ints, texts))
bounds = st.builds(ClusteringBound, prefixes, st.booleans())


def _typed_compare(left: tuple[bytes, ...], right: tuple[bytes, ...]) -> int:
    for (cql_type, order), a, b in zip(TYPES, left, right, strict=False):
        result = compare(cql_type, a, b)
        if result:
            return -result if order is ClusteringOrder.DESC else result
    return 0


@settings(max_examples=500, deadline=None)
@given(start=bounds, end=bounds, key=keys)
def test_encoded_interval_is_typed_coverage(
    start: ClusteringBound, end: ClusteringBound, key: tuple[bytes, bytes]
) -> None:
    deletion = DeletionTime(1, 1)
    typed = covering_deletions(key, [RangeTombstone(start, end, deletion)], _typed_compare)
    encoded = start_key(ENCODE, start) <= row_key(ENCODE, key) < end_key(ENCODE, end)
    assert encoded == bool(typed)


@settings(max_examples=300, deadline=None)
@given(a=keys, b=keys)
def test_row_keys_sort_in_clustering_order(a: tuple[bytes, bytes], b: tuple[bytes, bytes]) -> None:
    ordering = _typed_compare(a, b)
    encoded_a, encoded_b = row_key(ENCODE, a), row_key(ENCODE, b)
    assert (encoded_a > encoded_b) - (encoded_a < encoded_b) == (ordering > 0) - (ordering < 0)


tokens = st.one_of(
    st.integers(MIN_TOKEN, MAX_TOKEN), st.sampled_from([MIN_TOKEN, MIN_TOKEN + 1, -1, 0, MAX_TOKEN])
)


@settings(max_examples=300, deadline=None)
@given(start=tokens, end=tokens, probe=tokens)
def test_token_segments_cover_exactly_the_range(start: int, end: int, probe: int) -> None:
    segments = token_segments(start, end)
    inside = [low < probe <= high for low, high in segments]
    assert sum(inside) <= 1
    if probe != MIN_TOKEN:  # never a key token
        assert any(inside) == TokenRange(start, end).contains(probe)
    assert all(low < high for low, high in segments)


@given(parts=st.lists(st.binary(max_size=5), min_size=1, max_size=4))
def test_split_partition_key_inverts_partition_key_bytes(parts: list[bytes]) -> None:
    assert split_partition_key(partition_key_bytes(parts), len(parts)) == tuple(parts)
