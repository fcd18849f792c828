"""Token ranges ``(left, right]`` on the Murmur3 ring, with wrap-around.

Reference: ``shared/reference/cassandra-core.md`` §1.1 (``LongToken.size``, split with wrap) and
§1.2 (``Range``). Rules:

* the ring is the 2**64 int64 values in order, MIN_TOKEN .. MAX_TOKEN, then back to MIN_TOKEN;
* ``(left, right]`` holds the tokens after ``left`` up to and including ``right``, going round;
* ``left >= right`` wraps past MAX_TOKEN; ``(t, t]`` is the full ring (Cassandra's convention);
* :meth:`TokenRange.unwrap` cuts a wrapping range at the minimum token into ``(left, MIN]`` and
  ``(MIN, right]``, as Cassandra's ``Range.unwrap`` does. ``(x, MIN]`` counts as not wrapping:
  it runs to the end of the ring (MIN_TOKEN itself is never a key token).

The arithmetic works on "offsets": ``(token - MIN_TOKEN - 1) mod 2**64`` puts MIN_TOKEN + 1 at 0
and MIN_TOKEN at 2**64 - 1, so every range that does not wrap is a plain interval of offsets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ringflow.ring._errors import RingError
from ringflow.ring._sharder import MAX_TOKEN, MIN_TOKEN, check_token

RING_SIZE_TOKENS = 2**64
_LAST_OFFSET = RING_SIZE_TOKENS - 1


def _offset_of(token: int) -> int:
    return (token - MIN_TOKEN - 1) % RING_SIZE_TOKENS


def _token_at(offset: int) -> int:
    return (offset + 1) % RING_SIZE_TOKENS + MIN_TOKEN


def _signed64(value: int) -> int:
    value %= RING_SIZE_TOKENS
    return value - RING_SIZE_TOKENS if value > MAX_TOKEN else value


@dataclass(frozen=True, slots=True)
class TokenRange:
    """The tokens in ``(left, right]``; wraps when ``left >= right``; ``(t, t]`` is the ring."""

    left: int
    right: int

    def __post_init__(self) -> None:
        check_token(self.left)
        check_token(self.right)

    @classmethod
    def full_ring(cls, token: int = MIN_TOKEN) -> TokenRange:
        """The whole ring, written ``(token, token]``."""
        return cls(token, token)

    @property
    def is_full_ring(self) -> bool:
        return self.left == self.right

    @property
    def is_wrap_around(self) -> bool:
        """Cassandra's ``isWrapAround``: ``left >= right`` (so the full ring wraps too)."""
        return self.left >= self.right

    @property
    def token_count(self) -> int:
        """How many tokens the range holds (2**64 for the full ring)."""
        return (self.right - self.left - 1) % RING_SIZE_TOKENS + 1

    @property
    def size(self) -> float:
        """Fraction of the ring covered, as Cassandra's ``LongToken.size``: the full ring is 1.0.

        Cassandra computes ``scalb((double)(right - left), -64)`` on the wrapped 64-bit
        difference and adds 1.0 when that is not positive; this does the same arithmetic.
        """
        fraction = math.ldexp(float(_signed64(self.right - self.left)), -64)
        return fraction if fraction > 0.0 else fraction + 1.0

    def contains(self, token: int) -> bool:
        """Whether ``token`` is in ``(left, right]`` (going round when the range wraps)."""
        check_token(token)
        if self.left < self.right:
            return self.left < token <= self.right
        if self.left == self.right:
            return True
        return token > self.left or token <= self.right

    def __contains__(self, token: object) -> bool:
        return isinstance(token, int) and self.contains(token)

    def unwrap(self) -> list[TokenRange]:
        """At most two ranges that do not wrap, covering exactly this range (``Range.unwrap``)."""
        if not self.is_wrap_around or self.right == MIN_TOKEN:
            return [self]
        return [TokenRange(self.left, MIN_TOKEN), TokenRange(MIN_TOKEN, self.right)]

    def _offset_intervals(self) -> list[tuple[int, int]]:
        """The range as offset intervals ``(low, high]``, low in -1..2**64-2 (see module doc)."""
        intervals = []
        for piece in self.unwrap():
            low = -1 if piece.left == MIN_TOKEN else _offset_of(piece.left)
            intervals.append((low, _offset_of(piece.right)))
        return intervals

    def intersect(self, other: TokenRange) -> list[TokenRange]:
        """The tokens in both ranges, as disjoint ranges in ring order (empty list: none).

        A piece that crosses the minimum token is returned as one wrapping range, so the result
        has at most two ranges (two wrapping ranges can overlap at both of their ends).
        """
        if other.is_full_ring:
            return [self]
        if self.is_full_ring:
            return [other]
        pieces = []
        for low_a, high_a in self._offset_intervals():
            for low_b, high_b in other._offset_intervals():
                low, high = max(low_a, low_b), min(high_a, high_b)
                if low < high:
                    pieces.append((low, high))
        pieces.sort()
        if len(pieces) >= 2 and pieces[0][0] == -1 and pieces[-1][1] == _LAST_OFFSET:
            wrapped = (pieces[-1][0], pieces[0][1])
            pieces = [*pieces[1:-1], wrapped]
        return [_range_of_offsets(low, high) for low, high in pieces]

    def split(self, parts: int) -> list[TokenRange]:
        """``parts`` consecutive ranges of (nearly) equal token counts covering this range.

        Boundaries are ``left + floor(i * token_count / parts)`` in exact integer arithmetic,
        going round the ring (Cassandra splits with BigInteger for the same reason).
        """
        if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
            raise RingError(f"a range splits into at least 1 part, got {parts!r}")
        count = self.token_count
        if parts > count:
            raise RingError(
                f"range {self} holds {count} tokens, cannot split it into {parts} parts"
            )
        boundaries = [_signed64(self.left + index * count // parts) for index in range(parts)]
        boundaries.append(self.right)
        return [TokenRange(boundaries[i], boundaries[i + 1]) for i in range(parts)]

    def midpoint(self) -> int:
        """The token halfway through the range, going round (``Murmur3Partitioner.midpoint``)."""
        return _signed64(self.left + self.token_count // 2)

    def __str__(self) -> str:
        return f"({self.left}, {self.right}]"


def _range_of_offsets(low: int, high: int) -> TokenRange:
    left = MIN_TOKEN if low == -1 else _token_at(low)
    return TokenRange(left, _token_at(high))
