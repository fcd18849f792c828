"""How partition keys, clustering keys and clustering bounds become SQLite keys. Pure.

Rules (the layout module relies on all of them):

* A partition is stored under ``(token, pk)``: its Murmur3 token as a signed int64 INTEGER and the
  bytes Cassandra hashes (``partition_key_bytes``, cassandra-core.md §2). SQLite orders INTEGER as
  signed int64 and BLOB as memcmp-then-length, so ``ORDER BY token, pk`` is ring order, then key
  bytes, exactly like Python's ``(int, bytes)`` tuples.
* A row is stored under ``ck``: ``b""`` for the static row, ``b"\\x01" + encode_clustering(...)``
  for a clustered row. The codec promises that memcmp order of ``encode_clustering`` is the
  table's clustering order (DESC included), so ``ORDER BY ck`` is static row first, then rows in
  clustering order. ``b"\\x02"`` is greater than every clustered key: the unbounded end.
* A clustering bound becomes a half-open interval ``[low, high)`` of ``ck``: an inclusive start
  of prefix P is ``enc(P)``, an exclusive one ``prefix_upper_bound(enc(P))`` (after every key
  extending P); an inclusive end is ``prefix_upper_bound(enc(P))``, an exclusive one ``enc(P)``.
  A range tombstone covers ``ck`` iff ``low <= ck < high``, which is Cassandra's bound semantics
  (a key extending an inclusive bound's prefix is inside it). The static row is never covered.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from ringflow.errors import invariant
from ringflow.schema import ClusteringBound, prefix_upper_bound

STATIC_CK = b""
CLUSTERED_TAG = b"\x01"
CLUSTERED_END = b"\x02"
"""Greater than every clustered ``ck``; the high end of an unbounded interval."""

MIN_TOKEN = -(2**63)
MAX_TOKEN = 2**63 - 1

ClusteringEncoder = Callable[[Sequence[bytes]], bytes]
"""A table's compiled ``encode_clustering`` (``ringflow.schema._codec.clustering_encoder``)."""


def row_key(encode: ClusteringEncoder, clustering: Sequence[bytes]) -> bytes:
    """The ``ck`` of a clustered row (never the static row)."""
    return CLUSTERED_TAG + encode(clustering)


def start_key(encode: ClusteringEncoder, bound: ClusteringBound) -> bytes:
    """The inclusive low ``ck`` of the interval starting at ``bound``."""
    if bound.is_unbounded:
        return CLUSTERED_TAG
    encoded = encode(bound.prefix)
    return CLUSTERED_TAG + (encoded if bound.inclusive else prefix_upper_bound(encoded))


def end_key(encode: ClusteringEncoder, bound: ClusteringBound) -> bytes:
    """The exclusive high ``ck`` of the interval ending at ``bound``."""
    if bound.is_unbounded:
        return CLUSTERED_END
    encoded = encode(bound.prefix)
    return CLUSTERED_TAG + (prefix_upper_bound(encoded) if bound.inclusive else encoded)


def split_partition_key(key: bytes, arity: int) -> tuple[bytes, ...]:
    """The components of a partition key's hashed bytes (inverse of ``partition_key_bytes``)."""
    if arity == 1:
        return (key,)
    components: list[bytes] = []
    offset = 0
    for _ in range(arity):
        invariant(offset + 2 <= len(key), f"composite partition key {key!r} is truncated")
        (length,) = struct.unpack_from(">H", key, offset)
        end = offset + 2 + length
        invariant(end < len(key) and key[end] == 0, f"bad composite key component in {key!r}")
        components.append(key[offset + 2 : end])
        offset = end + 1
    invariant(offset == len(key), f"composite partition key {key!r} has trailing bytes")
    return tuple(components)


def token_segments(start_exclusive: int, end_inclusive: int) -> list[tuple[int, int]]:
    """The token range ``(start, end]`` as non-wrapping ``(low_exclusive, high_inclusive]``
    segments in scan order (Cassandra ``Range.unwrap``): ``start >= end`` wraps past MAX_TOKEN,
    ``(t, t]`` is the whole ring, and ``(x, MIN_TOKEN]`` runs to the end of the ring."""
    if end_inclusive == MIN_TOKEN:
        segments = [(start_exclusive, MAX_TOKEN)]
    elif start_exclusive < end_inclusive:
        segments = [(start_exclusive, end_inclusive)]
    else:
        segments = [(start_exclusive, MAX_TOKEN), (MIN_TOKEN, end_inclusive)]
    return [(low, high) for low, high in segments if low < high]
