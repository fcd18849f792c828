"""Scylla's sharder (scylla-cdc.md §3, §2): the driver as oracle, Scylla's published vectors.

Proves: ``shard_of`` equals the scylla-driver's ``_ShardingInfo.shard_id_from_token`` (pure
Python) and ``c_shard_info.ShardingInfo`` (Cython) on random tokens, 1-128 shards and
ignore_msb 0-16; ``token_for_next_shard`` lands on a run start of the asked shard; the worked
examples, Scylla's partitioner_test vectors and the CDC generation golden vectors hold.
"""

from __future__ import annotations

import random

import pytest
from cassandra.c_shard_info import ShardingInfo
from cassandra.shard_info import _ShardingInfo
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.ring import (
    AFTER_ALL_KEYS,
    MAX_TOKEN,
    MIN_TOKEN,
    RingError,
    bias,
    first_token_for_shard,
    shard_of,
    token_for_next_shard,
    unbias,
)

key_tokens = st.one_of(
    st.integers(MIN_TOKEN + 1, MAX_TOKEN),
    st.sampled_from([MIN_TOKEN + 1, -1, 0, 1, MAX_TOKEN]),
)


def signed(value: int) -> int:
    return value - 2**64 if value >= 2**63 else value


def driver_shards(shard_count: int, ignore_msb: int) -> tuple[_ShardingInfo, ShardingInfo]:
    arguments = (0, shard_count, "Murmur3Partitioner", "biased-token-round-robin", ignore_msb)
    return _ShardingInfo(*arguments, None, None), ShardingInfo(*arguments, None, None)


def test_shard_of_matches_both_driver_implementations() -> None:
    rng = random.Random(99)
    for _ in range(300):
        shard_count, ignore_msb = rng.randint(1, 128), rng.randint(0, 16)
        pure, cython = driver_shards(shard_count, ignore_msb)
        for _ in range(30):
            token = rng.randint(MIN_TOKEN + 1, MAX_TOKEN)
            expected = pure.shard_id_from_token(token)
            assert shard_of(token, shard_count, ignore_msb) == expected
            assert cython.shard_id_from_token(token) == expected


@settings(max_examples=300, deadline=None)
@given(token=key_tokens, shard_count=st.integers(1, 128), ignore_msb=st.integers(0, 16))
def test_next_shard_token_starts_a_run_of_that_shard(
    token: int, shard_count: int, ignore_msb: int
) -> None:
    pure, _ = driver_shards(shard_count, ignore_msb)
    for shard in {0, shard_count - 1, shard_count // 2}:
        found = token_for_next_shard(token, shard, shard_count, ignore_msb)
        if found == AFTER_ALL_KEYS:
            continue
        assert found > token
        assert shard_of(found, shard_count, ignore_msb) == shard
        assert pure.shard_id_from_token(found) == shard
        if found - 1 > token and shard_count > 1:
            assert shard_of(found - 1, shard_count, ignore_msb) != shard


@pytest.mark.parametrize(
    ("token", "shard_count", "ignore_msb", "shard"),
    [
        (0, 3, 0, 1),
        (0, 3, 12, 0),
        (-1, 3, 12, 2),
        (-8839064797231613815, 12, 12, 4),
        (2739050094959918959, 12, 12, 2),
        (-4611686018427387904, 4, 0, 1),
        (-4611686018427387905, 4, 0, 0),
    ],
)
def test_worked_examples(token: int, shard_count: int, ignore_msb: int, shard: int) -> None:
    assert shard_of(token, shard_count, ignore_msb) == shard


def test_driver_unit_test_keys() -> None:
    """scylladb/python-driver test_shard_aware: 12 shards, msb 12, keys a,b,c,e,100000."""
    from cassandra.metadata import Murmur3Token

    expected = {b"a": 4, b"b": 6, b"c": 6, b"e": 4, b"100000": 2}
    for key, shard in expected.items():
        assert shard_of(Murmur3Token.from_key(key).value, 12, 12) == shard


MURMUR3_SHARDING_7 = [
    -9223372036854775807,
    -6588122883467697005,
    -3952873730080618203,
    -1317624576693539401,
    1317624576693539402,
    3952873730080618204,
    6588122883467697006,
]


def test_scylla_murmur3_sharding_seven_shards() -> None:
    for shard, first in enumerate(MURMUR3_SHARDING_7):
        assert shard_of(first, 7, 0) == shard
        if shard:
            assert shard_of(first - 1, 7, 0) == shard - 1
            assert token_for_next_shard(MIN_TOKEN, shard, 7, 0) == first
    assert [token_for_next_shard(MIN_TOKEN, 1, 2, 0)] == [0]
    assert shard_of(-9223372036854775807, 2, 0) == 0
    assert shard_of(-1, 2, 0) == 0
    assert shard_of(0, 2, 0) == 1


def test_scylla_sharding_with_ignore_bits() -> None:
    assert (shard_of(-8564559748508006107, 7, 2), shard_of(-8564559748508006108, 7, 2)) == (1, 0)
    assert (shard_of(0, 7, 2), shard_of(-1, 7, 2)) == (0, 6)
    assert (shard_of(658812288346769701, 7, 2), shard_of(658812288346769700, 7, 2)) == (1, 0)
    step = 576460752303423488
    for multiple in range(-16, 16):
        boundary = multiple * step
        assert shard_of(boundary, 2, 4) == multiple % 2
        if boundary > MIN_TOKEN + 1:
            assert shard_of(boundary - 1, 2, 4) == (multiple + 1) % 2


def test_shard_starts_three_shards_msb_12() -> None:
    starts = [0, 1501199875790166, 3002399751580331]
    for shard in (1, 2):
        assert token_for_next_shard(MIN_TOKEN, shard, 3, 12) == bias(starts[shard])
        assert unbias(token_for_next_shard(MIN_TOKEN, shard, 3, 12)) == starts[shard]


def test_special_tokens() -> None:
    assert shard_of(MIN_TOKEN, 5, 3) == 0
    assert shard_of(AFTER_ALL_KEYS, 5, 3) == 4
    assert token_for_next_shard(AFTER_ALL_KEYS, 1, 5, 3) == AFTER_ALL_KEYS
    assert token_for_next_shard(MAX_TOKEN, 0, 3, 0) == AFTER_ALL_KEYS
    assert unbias(MIN_TOKEN) == 0 and unbias(MAX_TOKEN) == 2**64 - 1 and unbias(0) == 2**63


# -- first_token_for_shard: the CDC generation golden vectors (scylla-cdc.md §2) -------------------


def test_golden_generation_vector() -> None:
    last, t0, t1 = (
        signed(0x7FFE0C687FCCE86D),
        signed(0x807AE73E07DBD411),
        signed(0x80838C6B76E19A1B),
    )
    range_0 = [first_token_for_shard(last, t0, shard, 3, 12) for shard in range(3)]
    range_1 = [first_token_for_shard(t0, t1, shard, 3, 12) for shard in range(3)]
    assert range_0 == [
        signed(v) for v in (0x8000000000000001, 0x8005555555555556, 0x7FFE0C687FCCE86E)
    ]
    assert range_1 == [
        signed(v) for v in (0x8080000000000000, 0x80838C6B76E19A1B, 0x807AE73E07DBD412)
    ]


def test_small_generation_vector() -> None:
    six = 6 * 10**18
    assert [first_token_for_shard(six, -six, s, 2, 0) for s in (0, 1)] == [MIN_TOKEN + 1, six + 1]
    assert [first_token_for_shard(-six, 0, s, 2, 0) for s in (0, 1)] == [-six + 1, 0]
    assert [first_token_for_shard(0, six, s, 2, 0) for s in (0, 1)] == [six, 1]


def test_range_too_small_for_every_shard_gives_its_end() -> None:
    ends = [first_token_for_shard(MAX_TOKEN - 1, MAX_TOKEN, s, 3, 0) for s in range(3)]
    assert ends == [MAX_TOKEN] * 3


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: shard_of(0, 0, 0), "shard_count must be in 1..65536, got 0"),
        (lambda: shard_of(0, -3, 0), "shard_count must be in 1..65536, got -3"),
        (lambda: shard_of(0, 3, -1), "ignore_msb must be in 0..63, got -1"),
        (lambda: shard_of(0, 3, 64), "ignore_msb must be in 0..63, got 64"),
        (lambda: shard_of(2**63 + 1, 3, 0), "outside the int64 range"),
        (lambda: shard_of(MIN_TOKEN - 1, 3, 0), "outside the int64 range"),
        (lambda: token_for_next_shard(0, 3, 3, 0), "shard must be in 0..2, got 3"),
        (lambda: token_for_next_shard(0, 1, 3, 0, spans=0), "spans must be >= 1"),
        # 64 shards but only 2 distinct positions once 63 top bits are ignored: a shard would
        # own no token (this used to loop forever building the shard start table).
        (lambda: token_for_next_shard(0, 1, 64, 63), "some shard would own no token"),
        (lambda: shard_of(0, 3, 63), "exceeds 2\\*\\*\\(64 - ignore_msb\\) = 2"),
    ],
)
def test_bad_sharding_input_is_refused(call: object, message: str) -> None:
    with pytest.raises(RingError, match=message):
        call()  # type: ignore[operator]
