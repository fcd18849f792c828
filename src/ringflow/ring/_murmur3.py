"""Cassandra's Murmur3Partitioner token of a partition key, and the partition key's bytes.

Reference: ``shared/reference/cassandra-core.md`` §1.1 (algorithm), §1.3 (the driver), §2 (key
serialization). The token is h1 of MurmurHash3 x64_128 with seed 0, read as a signed int64, with
Cassandra's one deviation from the published hash: tail bytes are Java (signed) bytes, so a tail
byte >= 0x80 is sign-extended before it is shifted into place. ``Long.MIN_VALUE`` is normalised to
``Long.MAX_VALUE`` so that every key token is strictly greater than the minimum token.

Three implementations that must agree (the tests check them against each other and the driver):

* :func:`murmur3_token_reference`: plain Python, written for reading, not speed;
* :func:`murmur3_token`: the scalar fast path, the driver's C extension ``cassandra.cmurmur3``
  when it is importable (it hashes with signed tail bytes, §1.3), else the reference;
* :func:`murmur3_tokens` / :func:`murmur3_tokens_of_matrix`: numpy, many keys at once, one
  vectorised pass per key length (see ``_murmur3_numpy``).

Keys are validated as Cassandra validates partition keys (§2): an empty key or one longer than
65535 bytes is rejected with :class:`RingError`. (The driver hashes ``b''`` to 0 and Cassandra's
partitioner to the minimum token; CQL never lets an empty key reach either.)
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from ringflow.ring._errors import RingError
from ringflow.ring._sharder import MAX_TOKEN, MIN_TOKEN

MAX_KEY_LENGTH_BYTES = 65535
_MASK64 = 2**64 - 1
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F
_FMIX_1 = 0xFF51AFD7ED558CCD
_FMIX_2 = 0xC4CEB9FE1A85EC53
_BLOCK_BYTES = 16


def _load_c_murmur3() -> Callable[[bytes], int] | None:
    try:
        from cassandra.cmurmur3 import murmur3
    except ImportError:  # pragma: no cover - the installed scylla-driver ships the extension
        return None
    c_function: Callable[[bytes], int] = murmur3
    return c_function


_c_murmur3 = _load_c_murmur3()


def check_key(key: bytes) -> bytes:
    """Return ``key`` if Cassandra accepts it as a partition key, else raise RingError."""
    if not isinstance(key, bytes | bytearray | memoryview):
        raise RingError(f"a partition key must be bytes, got {type(key).__name__}")
    length = len(key)
    if length == 0:
        raise RingError("a partition key may not be empty (Cassandra rejects empty keys)")
    if length > MAX_KEY_LENGTH_BYTES:
        raise RingError(
            f"partition key length of {length} bytes is longer than the maximum of "
            f"{MAX_KEY_LENGTH_BYTES}"
        )
    return bytes(key)


def normalise_token(hash_value: int) -> int:
    """Cassandra's ``normalize``: the minimum token is reserved, so it becomes the maximum."""
    return MAX_TOKEN if hash_value == MIN_TOKEN else hash_value


def _rotate_left(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK64


def _final_mix(value: int) -> int:
    value ^= value >> 33
    value = (value * _FMIX_1) & _MASK64
    value ^= value >> 33
    value = (value * _FMIX_2) & _MASK64
    return value ^ (value >> 33)


def _mix_k1(k1: int) -> int:
    return (_rotate_left((k1 * _C1) & _MASK64, 31) * _C2) & _MASK64


def _mix_k2(k2: int) -> int:
    return (_rotate_left((k2 * _C2) & _MASK64, 33) * _C1) & _MASK64


def _signed_tail_word(tail: bytes) -> int:
    """XOR of the tail bytes, each sign-extended as a Java byte, shifted to its lane (§1.1)."""
    word = 0
    for index, byte in enumerate(tail):
        signed_byte = byte - 256 if byte >= 0x80 else byte
        word ^= (signed_byte << (8 * index)) & _MASK64
    return word


def murmur3_h1_reference(key: bytes) -> int:
    """h1 of Cassandra's MurmurHash3 x64_128 (seed 0) as a signed int64, not normalised."""
    length = len(key)
    h1 = h2 = 0
    body_end = length - length % _BLOCK_BYTES
    for offset in range(0, body_end, _BLOCK_BYTES):
        k1, k2 = struct.unpack_from("<QQ", key, offset)
        h1 ^= _mix_k1(k1)
        h1 = (_rotate_left(h1, 27) + h2) & _MASK64
        h1 = (h1 * 5 + 0x52DCE729) & _MASK64
        h2 ^= _mix_k2(k2)
        h2 = (_rotate_left(h2, 31) + h1) & _MASK64
        h2 = (h2 * 5 + 0x38495AB5) & _MASK64
    tail = key[body_end:]
    if len(tail) > 8:
        h2 ^= _mix_k2(_signed_tail_word(tail[8:]))
    if tail:
        h1 ^= _mix_k1(_signed_tail_word(tail[:8]))
    h1 ^= length
    h2 ^= length
    h1 = (h1 + h2) & _MASK64
    h2 = (h2 + h1) & _MASK64
    h1 = _final_mix(h1)
    h2 = _final_mix(h2)
    h1 = (h1 + h2) & _MASK64
    return h1 - 2**64 if h1 > MAX_TOKEN else h1


def murmur3_token_reference(key: bytes) -> int:
    """Cassandra's Murmur3Partitioner token of ``key`` (plain-Python reference implementation)."""
    return normalise_token(murmur3_h1_reference(check_key(key)))


# The scalar hash behind murmur3_token: the driver's C function, or the reference without it.
_hash_h1: Callable[[bytes], int] = _c_murmur3 if _c_murmur3 is not None else murmur3_h1_reference


def murmur3_token(key: bytes) -> int:
    """Cassandra's Murmur3Partitioner token of ``key`` (fast path: the driver's C hash).

    The hash runs first and the key is checked after, in one condition that is cheap when all is
    well; anything unusual (not ``bytes``, empty, too long, or the one hash to normalise) takes
    the checked path. The C function also accepts ``str``, which the check then refuses.
    """
    try:
        hash_value = _hash_h1(key)
    except TypeError:  # not bytes-like, or a mutable buffer the C function refuses
        return murmur3_token_reference(key)
    if hash_value != MIN_TOKEN and type(key) is bytes and 0 < len(key) <= MAX_KEY_LENGTH_BYTES:
        return hash_value
    return normalise_token(_hash_h1(check_key(key)))


def partition_key_bytes(components: Sequence[bytes]) -> bytes:
    """The bytes Cassandra hashes for a partition key made of ``components`` (§2).

    One component is used as is. Several are packed like ``CompositeType``: for each, a 2-byte
    unsigned big-endian length, the bytes, then an end-of-component byte 0x00.
    """
    if isinstance(components, bytes | bytearray | str):
        raise RingError("partition key components must be a sequence of bytes values")
    parts = list(components)
    if not parts:
        raise RingError("a partition key needs at least one component")
    for part in parts:
        if not isinstance(part, bytes | bytearray | memoryview):
            raise RingError(f"a partition key component must be bytes, got {type(part).__name__}")
        if len(part) > MAX_KEY_LENGTH_BYTES:
            raise RingError(
                f"partition key component of {len(part)} bytes is longer than the maximum of "
                f"{MAX_KEY_LENGTH_BYTES}"
            )
    if len(parts) == 1:
        return bytes(parts[0])
    return b"".join(struct.pack(">H", len(part)) + bytes(part) + b"\x00" for part in parts)
