"""Vectorised ``firstToken``: the ring index of the first ring token >= each of many tokens.

Reference: ``shared/reference/cassandra-core.md`` §1.2 (``TokenMetadata.firstTokenIndex``: exact
match is that index, past the end wraps to 0). ``np.searchsorted`` does this, but for millions of
unsorted tokens its binary search misses the cache on every step. This index cuts the ring into
``2**bits`` equal buckets by the top bits of the unbiased token (about two buckets per ring
token) and records each bucket's first ring index; a lookup reads that entry, then steps over
the few ring tokens of the bucket that are still smaller. Rings whose tokens crowd into a few
buckets (a bucket with more than ``MAX_STEPS`` tokens) fall back to ``np.searchsorted``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ringflow.ring._sharder import MAX_TOKEN

Int64Array = npt.NDArray[np.int64]
IndexArray = npt.NDArray[np.intp]

MAX_STEPS = 16
_MIN_BITS = 4
_MAX_BITS = 22
_SIGN_BIT = np.uint64(2**63)


def _unbiased(tokens: Int64Array) -> npt.NDArray[np.uint64]:
    unbiased: npt.NDArray[np.uint64] = tokens.view(np.uint64) ^ _SIGN_BIT
    return unbiased


class TokenIndex:
    """First-token lookups over one sorted ring (immutable)."""

    __slots__ = ("_bucket_first", "_padded_ring", "_ring", "_shift", "_use_buckets")

    def __init__(self, sorted_ring: Int64Array) -> None:
        self._ring = sorted_ring
        # A sentinel equal to MAX_TOKEN ends every step loop: no token is greater.
        self._padded_ring: Int64Array = np.append(sorted_ring, np.int64(MAX_TOKEN))
        bits = min(max(len(sorted_ring).bit_length() + 1, _MIN_BITS), _MAX_BITS)
        self._shift = np.uint64(64 - bits)
        ring_buckets = (_unbiased(sorted_ring) >> self._shift).astype(np.intp)
        bucket_starts = np.arange(2**bits + 1, dtype=np.intp)
        self._bucket_first: IndexArray = np.searchsorted(ring_buckets, bucket_starts, "left")
        crowding = int(np.max(np.diff(self._bucket_first))) if len(sorted_ring) else 0
        self._use_buckets = crowding <= MAX_STEPS

    def first_indices(self, tokens: Int64Array) -> IndexArray:
        """Ring index of the first ring token ``>= token`` for each token, wrapping to 0."""
        flat = tokens.reshape(-1)
        if self._use_buckets:
            positions = self._bucketed(flat)
        else:
            positions = np.searchsorted(self._ring, flat, side="left")
        positions[positions == len(self._ring)] = 0
        return positions.reshape(tokens.shape)

    def _bucketed(self, tokens: Int64Array) -> IndexArray:
        buckets = (_unbiased(tokens) >> self._shift).astype(np.intp)
        positions: IndexArray = self._bucket_first[buckets]
        padded = self._padded_ring
        behind = np.flatnonzero(padded[positions] < tokens)
        while behind.size:
            positions[behind] += 1
            behind = behind[padded[positions[behind]] < tokens[behind]]
        return positions
