"""Murmur3Partitioner tokens (cassandra-core.md §1, §2): the driver as oracle, published vectors.

Proves: our reference, C fast path, numpy batch and matrix paths give Cassandra's tokens
(sign-extended tail bytes, MIN normalised to MAX); empty and over-long keys are refused; composite
keys are packed byte-for-byte like the driver's routing key.
"""

from __future__ import annotations

import random
import uuid

import numpy as np
import pytest
from cassandra import cqltypes
from cassandra.metadata import Murmur3Token
from cassandra.query import SimpleStatement
from hypothesis import given, settings
from hypothesis import strategies as st

import ringflow.ring._murmur3 as murmur3_module
from ringflow.ring import (
    MAX_TOKEN,
    RingError,
    check_key,
    murmur3_h1_reference,
    murmur3_token,
    murmur3_token_reference,
    murmur3_tokens,
    murmur3_tokens_of_matrix,
    partition_key_bytes,
)

from ._keys import keys, random_key

ORACLE_KEY_COUNT = 10_000


def driver_token(key: bytes) -> int:
    token: int = Murmur3Token.from_key(key).value
    return token


def int32(value: int) -> bytes:
    encoded: bytes = cqltypes.Int32Type.serialize(value, 4)
    return encoded


def text(value: str) -> bytes:
    encoded: bytes = cqltypes.UTF8Type.serialize(value, 4)
    return encoded


# cassandra-core.md §1.4: measured three ways (driver, pure-Python driver, Cassandra's Java).
PUBLISHED_VECTORS = [
    (b"a", -8839064797231613815),
    (b"hello", -3758069500696749310),
    (b"key1", 1573573083296714675),
    (bytes.fromhex("00000001"), -4069959284402364209),
    (bytes.fromhex("00000000"), -3485513579396041028),
    (bytes.fromhex("ffffffff"), 7297452126230313552),
    (bytes.fromhex("0000002a"), -7160136740246525330),
    (bytes.fromhex("0000000000000001"), 6292367497774912474),
    (bytes.fromhex("000000000000002a"), 8623491988607824794),
    (uuid.UUID("00000000-0000-0000-0000-000000000001").bytes, 2589554819249504804),
    (bytes(range(16)), 4920504430128807728),
    (b"The quick brown fox jumps over the lazy dog", -2068352364225029268),
    (b"\x80", -5284281814142962636),
    (b"\xff\xff\xff", -9154616442117352147),
    ("é".encode(), 5461403030378599040),
    (bytes.fromhex("0004000000010000016100"), 6516349416904725244),
    (bytes.fromhex("00016100000162 00".replace(" ", "")), 7470152180878494447),
    (bytes.fromhex("653cbefb85ec3111b4e38fa9bc7cbcae"), MAX_TOKEN),
    (bytes.fromhex("5ed0b893f10c088ccf0e007bf6edbf61"), 0),
    (bytes.fromhex("7892b8c173924a0bbe96aa099d7c8c1a"), -1),
    # PD tests/unit/test_metadata.py Murmur3TokensTest._verify_hash
    (b"123", -7468325962851647638),
    (b"\x00\xff\x10\xfa\x99" * 10, 5837342703291459765),
    (b"\xfe" * 8, -8927430733708461935),
    (b"\x10" * 8, 1446172840243228796),
    (str(2**63 - 1).encode(), 7162290910810015547),
]

# cassandra-dtest replication_test.py murmur3_hashes: int32 keys, computed by the dtest authors.
DTEST_INT_KEYS = {
    1: -4069959284402364209,
    2: -3248873570005575792,
    3: 9010454139840013625,
    5: -7509452495886106294,
    20: 1388667306199997068,
}


@pytest.mark.parametrize(("key", "expected"), PUBLISHED_VECTORS)
def test_published_vectors_hold_for_every_implementation(key: bytes, expected: int) -> None:
    assert murmur3_token_reference(key) == expected
    assert murmur3_token(key) == expected
    assert murmur3_tokens([key]).tolist() == [expected]
    assert murmur3_tokens([key] * 100).tolist() == [expected] * 100


def test_normalisation_key_hashes_raw_to_the_minimum() -> None:
    key = bytes.fromhex("653cbefb85ec3111b4e38fa9bc7cbcae")
    assert murmur3_h1_reference(key) == -(2**63)
    assert murmur3_token(key) == MAX_TOKEN


@pytest.mark.parametrize(("value", "expected"), sorted(DTEST_INT_KEYS.items()))
def test_dtest_int_keys(value: int, expected: int) -> None:
    assert murmur3_token(int32(value)) == expected
    assert murmur3_token_reference(int32(value)) == expected


def test_dtest_int_keys_one_to_twenty_match_the_driver_in_one_batch() -> None:
    encoded = [int32(value) for value in range(1, 21)]
    expected = [driver_token(key) for key in encoded]
    assert murmur3_tokens(encoded).tolist() == expected
    assert [expected[value - 1] for value in DTEST_INT_KEYS] == list(DTEST_INT_KEYS.values())


def test_ten_thousand_random_keys_match_the_driver() -> None:
    rng = random.Random(20240611)
    sample = [random_key(rng) for _ in range(ORACLE_KEY_COUNT)]
    empty = [key for key in sample if not key]
    non_empty = [key for key in sample if key]
    assert empty, "the generator must produce empty keys to check their rejection"
    expected = [driver_token(key) for key in non_empty]
    assert [murmur3_token(key) for key in non_empty] == expected
    assert [murmur3_token_reference(key) for key in non_empty] == expected
    assert murmur3_tokens(non_empty).tolist() == expected
    with pytest.raises(RingError, match="empty"):
        murmur3_tokens(sample)
    for key in empty:
        with pytest.raises(RingError, match="empty"):
            murmur3_token(key)


@settings(max_examples=300, deadline=None)
@given(key=keys())
def test_hypothesis_keys_match_the_driver(key: bytes) -> None:
    expected = driver_token(key)
    assert murmur3_token_reference(key) == expected
    assert murmur3_token(key) == expected


@settings(max_examples=40, deadline=None)
@given(length=st.integers(1, 80), seed=st.integers(0, 2**32))
def test_matrix_path_matches_the_driver_for_equal_length_keys(length: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    matrix = rng.integers(0, 256, size=(200, length), dtype=np.uint8)
    expected = [driver_token(row.tobytes()) for row in matrix]
    assert murmur3_tokens_of_matrix(matrix).tolist() == expected


def test_batch_with_mixed_lengths_keeps_the_order() -> None:
    rng = random.Random(7)
    # A few lengths have >= 64 keys (vectorised), others only a handful (scalar path).
    sample = [bytes(rng.getrandbits(8) for _ in range(rng.choice([3, 16, 17]))) for _ in range(600)]
    sample += [bytes(rng.getrandbits(8) for _ in range(n)) for n in (1, 9, 33, 64, 200)]
    rng.shuffle(sample)
    assert murmur3_tokens(sample).tolist() == [driver_token(key) for key in sample]
    assert murmur3_tokens(iter(sample)).tolist() == [driver_token(key) for key in sample]


def test_batch_of_nothing_is_an_empty_int64_array() -> None:
    tokens = murmur3_tokens([])
    assert tokens.dtype == np.int64
    assert tokens.shape == (0,)


def test_pure_python_fallback_when_the_c_extension_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(murmur3_module, "_hash_h1", murmur3_h1_reference)
    monkeypatch.setattr(murmur3_module, "_c_murmur3", None)
    rng = random.Random(3)
    sample = [random_key(rng) or b"x" for _ in range(300)]
    expected = [driver_token(key) for key in sample]
    assert [murmur3_token(key) for key in sample] == expected
    assert murmur3_tokens(sample).tolist() == expected
    normalised = bytes.fromhex("653cbefb85ec3111b4e38fa9bc7cbcae")
    assert murmur3_token(normalised) == MAX_TOKEN
    with pytest.raises(RingError, match="empty"):
        murmur3_token(b"")


def test_bytes_like_keys_are_accepted() -> None:
    assert murmur3_token(bytearray(b"hello")) == -3758069500696749310
    assert murmur3_token(memoryview(b"hello")) == -3758069500696749310


@pytest.mark.parametrize(
    ("bad_key", "message"),
    [
        (b"", "may not be empty"),
        (b"x" * 65536, "65536 bytes is longer than the maximum of 65535"),
        ("text", "must be bytes"),
        (42, "must be bytes"),
    ],
)
def test_invalid_keys_are_rejected(bad_key: object, message: str) -> None:
    with pytest.raises(RingError, match=message):
        murmur3_token(bad_key)  # type: ignore[arg-type]
    with pytest.raises(RingError, match=message):
        murmur3_token_reference(bad_key)  # type: ignore[arg-type]
    with pytest.raises(RingError, match=message if bad_key != b"" else "empty"):
        murmur3_tokens([b"fine", bad_key])  # type: ignore[list-item]


def test_longest_valid_key_is_accepted() -> None:
    key = bytes(range(256)) * 255 + b"\xff" * 255
    assert len(key) == 65535
    assert check_key(key) == key
    assert murmur3_token(key) == driver_token(key) == murmur3_token_reference(key)


def test_matrix_with_bad_shape_or_width_is_rejected() -> None:
    with pytest.raises(RingError, match="2-D uint8"):
        murmur3_tokens_of_matrix(np.zeros(4, dtype=np.uint8))
    with pytest.raises(RingError, match="2-D uint8"):
        murmur3_tokens_of_matrix(np.zeros((4, 4), dtype=np.int32))  # type: ignore[arg-type]
    with pytest.raises(RingError, match="empty"):
        murmur3_tokens_of_matrix(np.zeros((4, 0), dtype=np.uint8))


# -- partition key bytes (§2) -------------------------------------------------------------------


def driver_routing_key(components: list[bytes]) -> bytes:
    statement = SimpleStatement("SELECT * FROM ks.t WHERE k = %s")
    statement.routing_key = components
    packed: bytes = statement.routing_key
    return packed


@pytest.mark.parametrize(
    ("components", "expected_token"),
    [
        ([int32(1), text("a")], 6516349416904725244),
        ([text("a"), text("b")], 7470152180878494447),
    ],
)
def test_composite_vectors_of_the_reference(components: list[bytes], expected_token: int) -> None:
    key = partition_key_bytes(components)
    assert key == driver_routing_key(components)
    assert murmur3_token(key) == expected_token


def test_single_component_is_hashed_as_is() -> None:
    assert partition_key_bytes([int32(1)]) == int32(1) == driver_routing_key([int32(1)])


def component_values() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.integers(-(2**31), 2**31 - 1).map(int32),
        st.integers(-(2**63), 2**63 - 1).map(lambda v: cqltypes.LongType.serialize(v, 4)),
        st.text(max_size=20).map(text),
        st.uuids().map(lambda u: cqltypes.UUIDType.serialize(u, 4)),
        st.binary(max_size=40),
    )


@settings(max_examples=200, deadline=None)
@given(components=st.lists(component_values(), min_size=1, max_size=4))
def test_composite_keys_pack_like_the_driver_routing_key(components: list[bytes]) -> None:
    key = partition_key_bytes(components)
    assert key == driver_routing_key(components)
    if key:
        assert murmur3_token(key) == driver_token(key)


def test_partition_key_bytes_rejects_bad_components() -> None:
    with pytest.raises(RingError, match="at least one component"):
        partition_key_bytes([])
    with pytest.raises(RingError, match="sequence of bytes"):
        partition_key_bytes(b"abc")
    with pytest.raises(RingError, match="must be bytes"):
        partition_key_bytes([b"a", "b"])  # type: ignore[list-item]
    with pytest.raises(RingError, match="65536 bytes is longer"):
        partition_key_bytes([b"a", b"x" * 65536])
