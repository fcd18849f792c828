"""Scylla's token sharder: which shard (CPU) of a node owns a token, and the next token of a shard.

Reference: ``shared/reference/scylla-cdc.md`` §3 (Scylla ``dht/token.cc``: ``zero_based_shard_of``,
``init_zero_based_shard_start``, ``token_for_next_shard``; algorithm "biased-token-round-robin").

Tokens are Python ints in the signed int64 range. Two kinds besides key tokens matter here:
``MIN_TOKEN`` (INT64_MIN, Scylla's ``minimum_token()`` / Cassandra's MINIMUM, before every key)
and ``AFTER_ALL_KEYS`` (2**63, Scylla's ``maximum_token()``), a sentinel one past INT64_MAX that
compares greater than every key token and never leaves this package as a real token.
"""

from __future__ import annotations

from functools import lru_cache

from ringflow.ring._errors import RingError

MIN_TOKEN = -(2**63)
MAX_TOKEN = 2**63 - 1
AFTER_ALL_KEYS = 2**63
_MASK64 = 2**64 - 1
_MAX_SHARDS = 2**16


def check_token(token: int) -> int:
    """Return ``token`` if it is a signed int64, else raise RingError naming it."""
    if not isinstance(token, int) or isinstance(token, bool):
        raise RingError(f"token must be an int, got {token!r}")
    if not MIN_TOKEN <= token <= MAX_TOKEN:
        raise RingError(f"token {token} is outside the int64 range [{MIN_TOKEN}, {MAX_TOKEN}]")
    return token


def check_sharding(shard_count: int, ignore_msb: int) -> None:
    """Validate sharding: 1 <= shard_count <= 65536, 0 <= ignore_msb <= 63, no shard empty."""
    if not isinstance(shard_count, int) or isinstance(shard_count, bool):
        raise RingError(f"shard_count must be an int, got {shard_count!r}")
    if not 1 <= shard_count <= _MAX_SHARDS:
        raise RingError(f"shard_count must be in 1..{_MAX_SHARDS}, got {shard_count}")
    if not isinstance(ignore_msb, int) or isinstance(ignore_msb, bool):
        raise RingError(f"ignore_msb must be an int, got {ignore_msb!r}")
    if not 0 <= ignore_msb <= 63:
        raise RingError(f"ignore_msb must be in 0..63, got {ignore_msb}")
    # Ignoring the top ignore_msb bits leaves 2**(64 - ignore_msb) distinct positions; with more
    # shards than that, some shard would own no token at all.
    if shard_count > 2 ** (64 - ignore_msb):
        raise RingError(
            f"shard_count {shard_count} exceeds 2**(64 - ignore_msb) = {2 ** (64 - ignore_msb)}"
            f" for ignore_msb {ignore_msb}: some shard would own no token"
        )


def unbias(token: int) -> int:
    """Map a signed token to an unsigned 64-bit position: INT64_MIN -> 0, INT64_MAX -> 2**64-1."""
    return (token + 2**63) & _MASK64


def bias(position: int) -> int:
    """Inverse of :func:`unbias`."""
    return position - 2**63


def _zero_based_shard_of(position: int, shard_count: int, ignore_msb: int) -> int:
    return (((position << ignore_msb) & _MASK64) * shard_count) >> 64


@lru_cache(maxsize=1024)
def _shard_starts(shard_count: int, ignore_msb: int) -> tuple[int, ...]:
    """Unsigned position where each shard's first run starts.

    Scylla's ``init_zero_based_shard_start``.
    """
    if shard_count == 1:
        return (0,)
    starts = []
    for shard in range(shard_count):
        position = ((shard << 64) // shard_count) >> ignore_msb
        while _zero_based_shard_of(position, shard_count, ignore_msb) != shard:
            position += 1
        starts.append(position)
    return tuple(starts)


def shard_of(token: int, shard_count: int, ignore_msb: int = 0) -> int:
    """The shard owning ``token`` on a node with ``shard_count`` shards (Scylla ``shard_of``).

    ``MIN_TOKEN`` maps to shard 0 and ``AFTER_ALL_KEYS`` to the last shard, as Scylla's minimum
    and maximum token kinds do.
    """
    check_sharding(shard_count, ignore_msb)
    if token == AFTER_ALL_KEYS:
        return shard_count - 1
    check_token(token)
    if token == MIN_TOKEN:
        return 0
    return _zero_based_shard_of(unbias(token), shard_count, ignore_msb)


def token_for_next_shard(
    token: int, shard: int, shard_count: int, ignore_msb: int = 0, spans: int = 1
) -> int:
    """First token greater than ``token`` that starts a run of ``shard``; AFTER_ALL_KEYS if none.

    ``spans`` > 1 skips that many runs of the shard (Scylla's ``token_for_next_shard``).
    """
    check_sharding(shard_count, ignore_msb)
    if not 0 <= shard < shard_count:
        raise RingError(f"shard must be in 0..{shard_count - 1}, got {shard}")
    if spans < 1:
        raise RingError(f"spans must be >= 1, got {spans}")
    if token == AFTER_ALL_KEYS:
        return AFTER_ALL_KEYS
    check_token(token)
    position = 0 if token == MIN_TOKEN else unbias(token)
    current = _zero_based_shard_of(position, shard_count, ignore_msb)
    starts = _shard_starts(shard_count, ignore_msb)
    if ignore_msb == 0:
        if spans > 1 or shard <= current:
            return AFTER_ALL_KEYS
        position = starts[shard]
    else:
        left = (position >> (64 - ignore_msb)) + spans - (1 if shard > current else 0)
        if left >= 2**ignore_msb:
            return AFTER_ALL_KEYS
        position = (left << (64 - ignore_msb)) | starts[shard]
    return bias(position)


def _first_token_for_shard_nowrap(start: int, end: int, shard: int, count: int, msb: int) -> int:
    candidate = start + 1
    if shard_of(candidate, count, msb) != shard:
        candidate = token_for_next_shard(candidate, shard, count, msb)
    return min(candidate, end)


def first_token_for_shard(
    start: int, end: int, shard: int, shard_count: int, ignore_msb: int = 0
) -> int:
    """First token of ``shard`` in the range ``(start, end]``, in ring order from ``start``.

    Scylla's ``find_first_token_for_shard``: when the range holds no token of ``shard`` the answer
    is ``end`` (a range too small for every shard). A wrapping range (start >= end) is searched
    from ``start`` to the end of the ring, then from the beginning. ``end`` may be AFTER_ALL_KEYS
    and ``start`` may be MIN_TOKEN.
    """
    check_sharding(shard_count, ignore_msb)
    if start < end:
        return _first_token_for_shard_nowrap(start, end, shard, shard_count, ignore_msb)
    if start != MAX_TOKEN:
        found = _first_token_for_shard_nowrap(start, AFTER_ALL_KEYS, shard, shard_count, ignore_msb)
        if found != AFTER_ALL_KEYS:
            return found
    return _first_token_for_shard_nowrap(MIN_TOKEN, end, shard, shard_count, ignore_msb)
