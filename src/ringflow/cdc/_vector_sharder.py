"""Numpy twins of the ring's sharder, for generating and querying million-stream generations.

``shared/reference/scylla-cdc.md`` §3 (Scylla ``zero_based_shard_of``, ``token_for_next_shard``)
and §2 (``find_first_token_for_shard``), on ``np.uint64`` arrays. The 64x64-bit multiply-high is
split into 32-bit halves exactly like the python-driver's ``shard_id_from_token``: with
``x = (unbias(t) << msb) mod 2**64`` and ``n <= 2**16`` shards,
``(x * n) >> 64 == (hi(x) * n + ((lo(x) * n) >> 32)) >> 32`` with every product below 2**49.

The scalar functions of ``ringflow.ring`` stay the reference; tests check both agree.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import numpy.typing as npt

from ringflow.ring import MIN_TOKEN, token_for_next_shard, unbias

Int64Array = npt.NDArray[np.int64]
UInt64Array = npt.NDArray[np.uint64]

_SIGN_BIT = np.uint64(1 << 63)
_LOW32_MASK = np.uint64(0xFFFFFFFF)
_THIRTY_TWO = np.uint64(32)
_ONE = np.uint64(1)


def unbias_array(tokens: Int64Array) -> UInt64Array:
    """Signed tokens to unsigned ring positions: INT64_MIN -> 0, INT64_MAX -> 2**64 - 1."""
    positions: UInt64Array = (
        np.ascontiguousarray(tokens, dtype=np.int64).view(np.uint64) ^ _SIGN_BIT
    )
    return positions


def bias_array(positions: UInt64Array) -> Int64Array:
    """Inverse of :func:`unbias_array`."""
    return np.ascontiguousarray(positions ^ _SIGN_BIT).view(np.int64)


def zero_based_shard_of_array(
    positions: UInt64Array,
    shard_count: int | UInt64Array,
    ignore_msb: int | UInt64Array,
) -> UInt64Array:
    """Shard of each unsigned position; count and msb are scalars or per-element arrays.

    Works in place on two temporaries: with millions of positions, memory traffic and page
    faults of fresh arrays cost more than the arithmetic.
    """
    count = np.asarray(shard_count, dtype=np.uint64)
    low = np.left_shift(positions, np.asarray(ignore_msb, dtype=np.uint64))
    high = low >> _THIRTY_TWO
    low &= _LOW32_MASK
    low *= count
    low >>= _THIRTY_TWO
    high *= count
    high += low
    high >>= _THIRTY_TWO
    return high


@lru_cache(maxsize=256)
def shard_start_positions(shard_count: int, ignore_msb: int) -> UInt64Array:
    """Unsigned position where each shard's first run starts (Scylla's ``shard_start`` table).

    Shard 0 always starts at position 0; shard j > 0 starts at the first token after
    MIN_TOKEN that begins a run of j, which is what ``token_for_next_shard`` returns.
    """
    starts = [0] + [
        unbias(token_for_next_shard(MIN_TOKEN, shard, shard_count, ignore_msb))
        for shard in range(1, shard_count)
    ]
    table = np.array(starts, dtype=np.uint64)
    table.flags.writeable = False
    return table


def first_tokens_nowrap(
    starts: Int64Array, ends: Int64Array, shard_count: int, ignore_msb: int
) -> Int64Array:
    """For ranges ``(starts[r], ends[r]]`` (starts < ends), the first token of every shard.

    Returns an array of shape ``(len(starts), shard_count)``; where a range holds no token of a
    shard the answer is the range end, as in Scylla's ``find_first_token_for_shard``.
    """
    shards = np.arange(shard_count, dtype=np.uint64)[np.newaxis, :]
    first = starts.astype(np.int64) + 1  # start < end <= INT64_MAX: no overflow
    position = unbias_array(first)
    current = zero_based_shard_of_array(position, shard_count, ignore_msb)[:, np.newaxis]
    ahead = shards > current
    shard_starts = shard_start_positions(shard_count, ignore_msb)[np.newaxis, :]
    if ignore_msb == 0:
        found_next = ahead
        next_position = np.broadcast_to(shard_starts, ahead.shape)
    else:
        tail_bits = np.uint64(64 - ignore_msb)
        left = (position >> tail_bits)[:, np.newaxis] + _ONE - ahead.astype(np.uint64)
        found_next = left < (_ONE << np.uint64(ignore_msb))
        next_position = (left << tail_bits) | shard_starts
    candidate = np.where(current == shards, first[:, np.newaxis], bias_array(next_position))
    found = (current == shards) | found_next
    end_column = ends.astype(np.int64)[:, np.newaxis]
    result: Int64Array = np.where(found, np.minimum(candidate, end_column), end_column)
    return result
