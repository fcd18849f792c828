"""Shared test helpers for ringflow.cdc: Hypothesis strategies and small oracles."""

from __future__ import annotations

import random
from bisect import bisect_left

from hypothesis import strategies as st

from ringflow.cdc import TopologyDescription, generate_topology_description
from ringflow.ring import MAX_TOKEN, MIN_TOKEN

KEY_TOKENS = st.integers(MIN_TOKEN + 1, MAX_TOKEN)
EDGE_TOKENS = st.sampled_from([MIN_TOKEN + 1, MIN_TOKEN + 2, -1, 0, 1, MAX_TOKEN - 1, MAX_TOKEN])
SHARD_COUNTS = st.sampled_from([1, 2, 3, 7, 12, 64])
IGNORE_MSBS = st.sampled_from([0, 1, 4, 12])


@st.composite
def clustered_tokens(draw: st.DrawFn) -> list[int]:
    """Tokens a few apart, so ranges are too small for some shards (end-token fallback)."""
    base = draw(st.integers(MIN_TOKEN + 1, MAX_TOKEN - 1000))
    offsets = draw(st.lists(st.integers(0, 999), min_size=1, max_size=6, unique=True))
    return [base + offset for offset in offsets]


@st.composite
def rings(draw: st.DrawFn, max_tokens: int = 10) -> list[int]:
    """Unique ring tokens: random, at the edges of the int64 range, and clustered."""
    tokens = draw(st.lists(st.one_of(KEY_TOKENS, EDGE_TOKENS), max_size=max_tokens))
    tokens += draw(st.one_of(st.just([]), clustered_tokens()))
    if not tokens:
        tokens = [draw(KEY_TOKENS)]
    return sorted(set(tokens))


@st.composite
def sharding_maps(draw: st.DrawFn, tokens: list[int]) -> dict[int, tuple[int, int]]:
    """Heterogeneous ``token -> (shard_count, ignore_msb)`` of each token's owner."""
    return {token: (draw(SHARD_COUNTS), draw(IGNORE_MSBS)) for token in tokens}


def generate(
    tokens: list[int], sharding: dict[int, tuple[int, int]], seed: int = 0
) -> TopologyDescription:
    return generate_topology_description(tokens, sharding, random.Random(seed))


def oracle_entry(range_ends: list[int], token: int) -> int:
    """Entry whose range ``(previous end, end]`` holds the key token (wrap: entry 0)."""
    token = MAX_TOKEN if token == MIN_TOKEN else token
    index = bisect_left(range_ends, token)
    return 0 if index == len(range_ends) else index


def signed(value: int) -> int:
    """An unsigned 64-bit literal (as printed in hex by Scylla's docs) as a signed token."""
    return value - 2**64 if value >= 2**63 else value
