"""Token ranges ``(left, right]`` with wrap-around (cassandra-core.md §1.1, §1.2).

Proves: ``contains`` agrees with an independent clockwise-distance definition; ``unwrap``,
``split`` and ``intersect`` partition exactly the tokens they should (checked on probes at and
around every boundary); ``size`` follows Cassandra's ``LongToken.size``; bad input is refused.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.ring import MAX_TOKEN, MIN_TOKEN, RING_SIZE_TOKENS, RingError, TokenRange

SPECIAL_TOKENS = [MIN_TOKEN, MIN_TOKEN + 1, MIN_TOKEN + 2, -1, 0, 1, MAX_TOKEN - 1, MAX_TOKEN]
tokens = st.one_of(
    st.sampled_from(SPECIAL_TOKENS),
    st.integers(MIN_TOKEN, MAX_TOKEN),
    st.integers(-1000, 1000),
)
ranges = st.builds(TokenRange, tokens, tokens)


def wrap(value: int) -> int:
    return (value - MIN_TOKEN) % RING_SIZE_TOKENS + MIN_TOKEN


def clockwise_contains(token_range: TokenRange, token: int) -> bool:
    """Independent definition: the token is 1..n steps clockwise from ``left``."""
    steps = (token - token_range.left) % RING_SIZE_TOKENS or RING_SIZE_TOKENS
    length = (token_range.right - token_range.left) % RING_SIZE_TOKENS or RING_SIZE_TOKENS
    return steps <= length


def probes(*token_ranges: TokenRange, extra: tuple[int, ...] = ()) -> set[int]:
    points = set(SPECIAL_TOKENS) | set(extra)
    for token_range in token_ranges:
        for bound in (token_range.left, token_range.right):
            points.update(wrap(bound + delta) for delta in (-1, 0, 1))
    return points


# -- hand-checked cases (Cassandra RangeTest style) ---------------------------------------------


def test_contains_on_a_plain_range() -> None:
    token_range = TokenRange(0, 10)
    assert [token_range.contains(t) for t in (-1, 0, 1, 10, 11)] == [
        False,
        False,
        True,
        True,
        False,
    ]
    assert not token_range.is_wrap_around


def test_contains_on_a_wrapping_range() -> None:
    token_range = TokenRange(10, 1)
    assert token_range.is_wrap_around
    assert all(token_range.contains(t) for t in (11, MAX_TOKEN, MIN_TOKEN, MIN_TOKEN + 1, 0, 1))
    assert not any(token_range.contains(t) for t in (2, 5, 10))


def test_equal_bounds_are_the_full_ring() -> None:
    token_range = TokenRange(5, 5)
    assert token_range.is_full_ring
    assert all(token_range.contains(t) for t in (MIN_TOKEN, 4, 5, 6, MAX_TOKEN))
    assert token_range.size == 1.0
    assert token_range.token_count == 2**64
    assert TokenRange.full_ring() == TokenRange(MIN_TOKEN, MIN_TOKEN)


def test_unwrap_cuts_at_the_minimum_token() -> None:
    assert TokenRange(10, 1).unwrap() == [TokenRange(10, MIN_TOKEN), TokenRange(MIN_TOKEN, 1)]
    assert TokenRange(0, 10).unwrap() == [TokenRange(0, 10)]
    assert TokenRange(10, MIN_TOKEN).unwrap() == [TokenRange(10, MIN_TOKEN)]
    assert TokenRange(7, 7).unwrap() == [TokenRange(7, MIN_TOKEN), TokenRange(MIN_TOKEN, 7)]


def test_size_follows_long_token_size() -> None:
    assert TokenRange(0, 2**62).size == 0.25
    assert TokenRange(2**62, 0).size == 0.75
    assert TokenRange(MIN_TOKEN, 0).size == 0.5
    assert TokenRange(-(2**62), 2**62).size == 0.5
    # MAX - MIN wraps to -1 as a Java long: scalb(-1.0, -64) + 1.0 rounds to 1.0 in a double.
    assert TokenRange(MIN_TOKEN, MAX_TOKEN).size == 1.0
    assert TokenRange(0, 1).size == 2.0**-64


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (TokenRange(0, 10), TokenRange(5, 15), [TokenRange(5, 10)]),
        (TokenRange(0, 10), TokenRange(10, 20), []),
        (TokenRange(0, 10), TokenRange(2, 3), [TokenRange(2, 3)]),
        (TokenRange(10, 2), TokenRange(8, 5), [TokenRange(10, 2)]),
        (TokenRange(0, 10), TokenRange(8, 2), [TokenRange(0, 2), TokenRange(8, 10)]),
        (TokenRange(10, 0), TokenRange(-5, 20), [TokenRange(-5, 0), TokenRange(10, 20)]),
        (TokenRange(3, 3), TokenRange(8, 2), [TokenRange(8, 2)]),
        (TokenRange(100, MIN_TOKEN), TokenRange(50, 200), [TokenRange(100, 200)]),
    ],
)
def test_intersections(first: TokenRange, second: TokenRange, expected: list[TokenRange]) -> None:
    assert first.intersect(second) == expected
    assert sorted(second.intersect(first), key=str) == sorted(expected, key=str)


def test_split_of_a_small_range_is_even() -> None:
    assert TokenRange(0, 10).split(2) == [TokenRange(0, 5), TokenRange(5, 10)]
    assert TokenRange(0, 10).split(3) == [TokenRange(0, 3), TokenRange(3, 6), TokenRange(6, 10)]
    assert TokenRange(MAX_TOKEN - 1, MIN_TOKEN + 1).split(3) == [
        TokenRange(MAX_TOKEN - 1, MAX_TOKEN),
        TokenRange(MAX_TOKEN, MIN_TOKEN),
        TokenRange(MIN_TOKEN, MIN_TOKEN + 1),
    ]


def test_split_of_the_full_ring_into_four() -> None:
    quarters = TokenRange.full_ring().split(4)
    assert [piece.right for piece in quarters] == [-(2**62), 0, 2**62, MIN_TOKEN]
    assert all(piece.size == 0.25 for piece in quarters)


def test_midpoint() -> None:
    assert TokenRange(0, 10).midpoint() == 5
    assert TokenRange.full_ring().midpoint() == 0
    assert TokenRange(MAX_TOKEN - 1, MIN_TOKEN + 1).midpoint() == MAX_TOKEN


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: TokenRange(2**63, 0), "outside the int64 range"),
        (lambda: TokenRange(0, MIN_TOKEN - 1), "outside the int64 range"),
        (lambda: TokenRange(0, 10).contains(2**63), "outside the int64 range"),
        (lambda: TokenRange(0, 10).split(0), "at least 1 part"),
        (lambda: TokenRange(0, 10).split(11), "holds 10 tokens, cannot split it into 11"),
        (lambda: TokenRange("0", 10), "must be an int"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_is_refused(call: object, message: str) -> None:
    with pytest.raises(RingError, match=message):
        call()  # type: ignore[operator]


# -- properties ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(token_range=ranges, token=tokens)
def test_contains_agrees_with_clockwise_distance(token_range: TokenRange, token: int) -> None:
    for probe in probes(token_range, extra=(token,)):
        assert token_range.contains(probe) == clockwise_contains(token_range, probe)


@settings(max_examples=300, deadline=None)
@given(token_range=ranges)
def test_unwrap_gives_non_wrapping_pieces_with_the_same_tokens(token_range: TokenRange) -> None:
    pieces = token_range.unwrap()
    assert 1 <= len(pieces) <= 2
    for piece in pieces:
        assert piece.left < piece.right or piece.right == MIN_TOKEN
    assert sum(piece.token_count for piece in pieces) == token_range.token_count
    for probe in probes(token_range, *pieces):
        holders = [piece for piece in pieces if piece.contains(probe)]
        assert len(holders) == (1 if token_range.contains(probe) else 0)


@settings(max_examples=200, deadline=None)
@given(token_range=ranges, parts=st.integers(1, 9))
def test_split_partitions_the_range_evenly(token_range: TokenRange, parts: int) -> None:
    if parts > token_range.token_count:
        with pytest.raises(RingError):
            token_range.split(parts)
        return
    pieces = token_range.split(parts)
    assert len(pieces) == parts
    assert pieces[0].left == token_range.left
    assert pieces[-1].right == token_range.right
    assert all(a.right == b.left for a, b in itertools.pairwise(pieces))
    counts = [piece.token_count for piece in pieces]
    assert sum(counts) == token_range.token_count
    assert max(counts) - min(counts) <= 1
    assert math.isclose(sum(piece.size for piece in pieces), token_range.size, rel_tol=1e-9)
    for probe in probes(token_range, *pieces):
        holders = sum(piece.contains(probe) for piece in pieces)
        assert holders == (1 if token_range.contains(probe) else 0)


@settings(max_examples=400, deadline=None)
@given(first=ranges, second=ranges)
def test_intersect_holds_exactly_the_common_tokens(first: TokenRange, second: TokenRange) -> None:
    common = first.intersect(second)
    assert len(common) <= 2
    reverse = second.intersect(first)
    for probe in probes(first, second, *common):
        in_both = first.contains(probe) and second.contains(probe)
        assert sum(piece.contains(probe) for piece in common) == (1 if in_both else 0)
        assert any(piece.contains(probe) for piece in reverse) == in_both
    assert sum(piece.token_count for piece in common) == sum(p.token_count for p in reverse)


@settings(max_examples=200, deadline=None)
@given(token_range=ranges)
def test_size_is_the_token_count_over_the_ring(token_range: TokenRange) -> None:
    assert 0.0 < token_range.size <= 1.0
    assert math.isclose(token_range.size, token_range.token_count / 2**64, rel_tol=1e-12)
    assert token_range.intersect(token_range) == [token_range]
    assert token_range.intersect(TokenRange.full_ring(0)) == [token_range]
