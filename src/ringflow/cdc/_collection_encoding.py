"""Native-protocol (v4) serialization of the description tables' collection cells.

Used to measure and compare row sizes (``shared/reference/scylla-cdc.md`` §6, seed 000
"Internal generation descriptions table V1": a whole generation in one cell is ~32 MB for 100
nodes x 256 vnodes x 64 shards, one v2 row is ~1 KB). Formats (``native_protocol_v4.spec`` §6):

- ``frozen<set<blob>>``: int32 element count, then per element int32 length + bytes; a set's
  elements are distinct and in the type's order, unsigned byte order for ``blob``;
- ``frozen<list<blob>>``: the same, in list order, duplicates kept;
- ``frozen<tuple<...>>``: each component as int32 length + bytes;
- ``bigint``: 8 bytes big-endian signed; ``tinyint``: 1 byte signed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from itertools import pairwise

_INT32 = struct.Struct(">i")
_BIGINT = struct.Struct(">q")
_TINYINT = struct.Struct(">b")


def encode_blob_set(blobs: Iterable[bytes]) -> bytes:
    """Serialize a ``set<blob>``: elements deduplicated and sorted unsigned."""
    items = list(blobs)
    if not all(first < second for first, second in pairwise(items)):
        items = sorted(set(items))
    return _encode_elements(items)


def encode_blob_list(blobs: Sequence[bytes]) -> bytes:
    """Serialize a ``list<blob>`` in the given order."""
    return _encode_elements(blobs)


def encoded_blob_set_size(element_count: int, element_size: int = 16) -> int:
    """Size in bytes of a serialized ``set<blob>`` of equally sized elements."""
    return _INT32.size + element_count * (_INT32.size + element_size)


def encode_range_description_tuple(
    range_end: int, streams: Sequence[bytes], ignore_msb: int
) -> bytes:
    """Serialize ``tuple<bigint, frozen<list<blob>>, tinyint>`` (one v1 description entry)."""
    return b"".join(
        _with_length(component)
        for component in (
            _BIGINT.pack(range_end),
            encode_blob_list(streams),
            _TINYINT.pack(ignore_msb),
        )
    )


def encode_v1_description(entries: Iterable[tuple[int, Sequence[bytes], int]]) -> bytes:
    """Serialize the v1 ``description`` cell: ``list<tuple<bigint, list<blob>, tinyint>>``."""
    return _encode_elements(
        [encode_range_description_tuple(end, streams, msb) for end, streams, msb in entries]
    )


def _encode_elements(items: Sequence[bytes]) -> bytes:
    return _INT32.pack(len(items)) + b"".join(_with_length(item) for item in items)


def _with_length(item: bytes) -> bytes:
    return _INT32.pack(len(item)) + item
