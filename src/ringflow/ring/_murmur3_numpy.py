"""Vectorised Murmur3Partitioner tokens: many keys hashed in one numpy pass per key length.

Reference: ``shared/reference/cassandra-core.md`` §1.1. The arithmetic is the scalar algorithm of
``_murmur3`` applied column-wise to a ``(key_count, key_length)`` uint8 matrix: uint64 numpy
arithmetic wraps modulo 2**64 exactly like Java's ``long``. Tail bytes are sign-extended through an
int8 view, which is Cassandra's signed-byte quirk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from ringflow.ring import _murmur3
from ringflow.ring._errors import RingError
from ringflow.ring._murmur3 import MAX_KEY_LENGTH_BYTES, check_key, murmur3_token
from ringflow.ring._sharder import MAX_TOKEN, MIN_TOKEN

Uint64Array = npt.NDArray[np.uint64]
Int64Array = npt.NDArray[np.int64]

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_FMIX_1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
_FIVE = np.uint64(5)
_H1_ADD = np.uint64(0x52DCE729)
_H2_ADD = np.uint64(0x38495AB5)
_SHIFT_33 = np.uint64(33)
_BLOCK_BYTES = 16
# Below this many keys of one length, the scalar C path beats numpy's per-call overhead.
_VECTOR_GROUP_MIN_KEYS = 64
# Rows per vectorised pass: the uint64 temporaries (32 KiB each) stay in the L1/L2 cache.
_CHUNK_ROWS = 4096


def _rotate_left(values: Uint64Array, bits: int) -> Uint64Array:
    left = np.left_shift(values, np.uint64(bits))
    return np.bitwise_or(left, np.right_shift(values, np.uint64(64 - bits)), out=left)


def _final_mix(values: Uint64Array) -> Uint64Array:
    values = values ^ (values >> _SHIFT_33)
    values *= _FMIX_1
    values ^= values >> _SHIFT_33
    values *= _FMIX_2
    values ^= values >> _SHIFT_33
    return values


def _mix_k1(k1: Uint64Array) -> Uint64Array:
    k1 = k1 * _C1
    k1 = _rotate_left(k1, 31)
    k1 *= _C2
    return k1


def _mix_k2(k2: Uint64Array) -> Uint64Array:
    k2 = k2 * _C2
    k2 = _rotate_left(k2, 33)
    k2 *= _C1
    return k2


def _signed_tail_word(tail: npt.NDArray[np.uint8]) -> Uint64Array:
    """Per row: XOR of the tail bytes sign-extended as Java bytes, shifted to their lane."""
    word = np.zeros(tail.shape[0], dtype=np.uint64)
    signed = tail.view(np.int8).astype(np.int64).view(np.uint64)
    for lane in range(tail.shape[1]):
        word ^= signed[:, lane] << np.uint64(8 * lane)
    return word


def _hash_body(matrix: npt.NDArray[np.uint8]) -> tuple[Uint64Array, Uint64Array]:
    row_count, length = matrix.shape
    h1 = np.zeros(row_count, dtype=np.uint64)
    h2 = np.zeros(row_count, dtype=np.uint64)
    block_count = length // _BLOCK_BYTES
    if block_count == 0:
        return h1, h2
    body = np.ascontiguousarray(matrix[:, : block_count * _BLOCK_BYTES])
    words = body.view("<u8").astype(np.uint64, copy=False).reshape(row_count, block_count, 2)
    for block in range(block_count):
        h1 ^= _mix_k1(words[:, block, 0])
        h1 = _rotate_left(h1, 27)
        h1 += h2
        h1 = h1 * _FIVE + _H1_ADD
        h2 ^= _mix_k2(words[:, block, 1])
        h2 = _rotate_left(h2, 31)
        h2 += h1
        h2 = h2 * _FIVE + _H2_ADD
    return h1, h2


def murmur3_h1_of_matrix(matrix: npt.NDArray[np.uint8]) -> Int64Array:
    """Raw h1 (not normalised) for each row of a ``(key_count, key_length)`` uint8 matrix."""
    length = matrix.shape[1]
    h1, h2 = _hash_body(matrix)
    tail = matrix[:, length - length % _BLOCK_BYTES :]
    if tail.shape[1] > 8:
        h2 ^= _mix_k2(_signed_tail_word(tail[:, 8:]))
    if tail.shape[1] > 0:
        h1 ^= _mix_k1(_signed_tail_word(tail[:, :8]))
    length_word = np.uint64(length)
    h1 ^= length_word
    h2 ^= length_word
    h1 += h2
    h2 += h1
    h1 = _final_mix(h1)
    h2 = _final_mix(h2)
    h1 += h2
    return h1.view(np.int64)


def _check_matrix(matrix: npt.NDArray[np.uint8]) -> None:
    if matrix.ndim != 2 or matrix.dtype != np.uint8:
        raise RingError(
            f"keys matrix must be a 2-D uint8 array, got {matrix.ndim}-D {matrix.dtype}"
        )
    length = matrix.shape[1]
    if length == 0 and matrix.shape[0] > 0:
        raise RingError("a partition key may not be empty (Cassandra rejects empty keys)")
    if length > MAX_KEY_LENGTH_BYTES:
        raise RingError(
            f"partition key length of {length} bytes is longer than the maximum of "
            f"{MAX_KEY_LENGTH_BYTES}"
        )


def murmur3_tokens_of_matrix(matrix: npt.NDArray[np.uint8]) -> Int64Array:
    """Tokens of equal-length keys, one key per row of a 2-D uint8 array.

    Rows are hashed in chunks small enough for the temporaries to stay in the CPU cache, which
    is several times faster than one pass over millions of rows.
    """
    _check_matrix(matrix)
    row_count = matrix.shape[0]
    tokens = np.empty(row_count, dtype=np.int64)
    for start in range(0, row_count, _CHUNK_ROWS):
        stop = min(start + _CHUNK_ROWS, row_count)
        tokens[start:stop] = murmur3_h1_of_matrix(matrix[start:stop])
    tokens[tokens == MIN_TOKEN] = MAX_TOKEN
    return tokens


def _key_lengths(key_list: list[bytes]) -> Int64Array:
    if set(map(type, key_list)) - {bytes}:
        bad = next(key for key in key_list if type(key) is not bytes)
        raise RingError(f"partition keys must be bytes values, got {type(bad).__name__}")
    lengths = np.fromiter(map(len, key_list), dtype=np.int64, count=len(key_list))
    if int(lengths.min()) == 0:
        check_key(b"")
    if int(lengths.max()) > MAX_KEY_LENGTH_BYTES:
        check_key(key_list[int(np.argmax(lengths))])
    return lengths


def _c_tokens(key_list: list[bytes], c_murmur3: Callable[[bytes], int]) -> Int64Array:
    """Keys of many lengths: copying them into a padded matrix costs more than hashing them,
    so ``map`` the driver's C hash over them (no Python call per key) and normalise after."""
    tokens = np.fromiter(map(c_murmur3, key_list), dtype=np.int64, count=len(key_list))
    tokens[tokens == MIN_TOKEN] = MAX_TOKEN
    return tokens


def murmur3_tokens(keys: Sequence[bytes]) -> Int64Array:
    """Tokens of many keys as an int64 array, in the order given.

    Keys of one length are copied into a matrix and hashed in vectorised passes. Keys of many
    lengths go through the driver's C hash when it is importable; otherwise through one
    vectorised pass per length (few keys of a length take the scalar path). Every key is
    validated as :func:`murmur3_token` does.
    """
    key_list = keys if isinstance(keys, list) else list(keys)
    count = len(key_list)
    if count == 0:
        return np.empty(0, dtype=np.int64)
    lengths = _key_lengths(key_list)
    longest = int(lengths.max())
    if int(lengths.min()) < longest and _murmur3._c_murmur3 is not None:
        return _c_tokens(key_list, _murmur3._c_murmur3)
    padded = np.array(key_list, dtype=f"S{longest}").view(np.uint8).reshape(count, longest)
    if int(lengths.min()) == longest:
        return murmur3_tokens_of_matrix(padded)
    tokens = np.empty(count, dtype=np.int64)
    for length in np.unique(lengths).tolist():
        positions = np.flatnonzero(lengths == length)
        if len(positions) < _VECTOR_GROUP_MIN_KEYS:
            for position in positions.tolist():
                tokens[position] = murmur3_token(key_list[position])
        else:
            tokens[positions] = murmur3_tokens_of_matrix(padded[positions, :length])
    return tokens
