"""Row and slice digests (REPLICATION.md decision 3; seed 002 "Comparing Time slices").

A captured row is the CDC log row as its columns' serialized values (``None`` for null). Its
canonical bytes list the columns sorted by name, each as length-prefixed UTF-8 name, a presence
byte and the length-prefixed value, so every replica holding the same row computes the same
bytes whatever order the columns came in. The row digest is BLAKE2b-64 of them. A slice digest
is BLAKE2b-128 of the row count and the row digests sorted, so the order rows arrived in does
not matter. Seed 002 says "CRC"; at 32 bits two different slices would collide often enough
at scale to hide a missing row, so both digests are wider and cryptographic (cheap in C).
A store keeps a captured row as its canonical bytes (``decode_canonical_row`` gives the columns
back, ``canonical_digest`` the digest without encoding again).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping

from ringflow.replication._model import SLICE_DIGEST_SIZE, ReplicationArgumentError

_LENGTH = struct.Struct(">I")
_COUNT = struct.Struct(">Q")
_ROW_DIGEST = struct.Struct(">q")


def canonical_row_bytes(columns: Mapping[str, bytes | None]) -> bytes:
    """The canonical encoding of one captured row (module docstring). It runs for every row a
    replica captures, so each column name's encoded head is made once (``_heads``)."""
    parts: list[bytes] = []
    heads = _HEADS
    for name in sorted(columns):
        value = columns[name]
        found = heads.get(name)
        if found is None:
            found = _heads(name)
        if value is None:
            parts.append(found[0])
        elif type(value) is bytes:
            parts += (found[1], _LENGTH.pack(len(value)), value)
        else:
            raise ReplicationArgumentError(f"column {name!r}: a value is bytes or None: {value!r}")
    return b"".join(parts)


_HEADS: dict[str, tuple[bytes, bytes]] = {}
"""Column name -> its encoded name followed by the absent and the present marker."""
_HEADS_MAX = 4096


def _heads(name: str) -> tuple[bytes, bytes]:
    encoded = name.encode("utf-8")
    head = _LENGTH.pack(len(encoded)) + encoded
    found = (head + b"\x00", head + b"\x01")
    if len(_HEADS) < _HEADS_MAX:
        _HEADS[name] = found
    return found


def decode_canonical_row(data: bytes) -> dict[str, bytes | None]:
    """The columns :func:`canonical_row_bytes` encoded (a store keeps a captured row as its
    canonical bytes). ReplicationArgumentError on bytes that are not such an encoding."""
    if not isinstance(data, bytes):
        raise ReplicationArgumentError(f"a canonical row is bytes, got {type(data).__name__}")
    columns: dict[str, bytes | None] = {}
    at, size, previous = 0, len(data), ""
    try:
        while at < size:
            (length,) = _LENGTH.unpack_from(data, at)
            name = data[at + 4 : at + 4 + length].decode("utf-8")
            if columns and name <= previous:
                raise ValueError(f"column {name!r} out of order")
            previous = name
            at += 4 + length
            present = data[at]
            at += 1
            if present == 0:
                columns[name] = None
                continue
            (length,) = _LENGTH.unpack_from(data, at)
            value = data[at + 4 : at + 4 + length]
            if present != 1 or len(value) != length:
                raise ValueError(f"column {name!r} is cut short or has presence byte {present}")
            columns[name] = value
            at += 4 + length
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as error:
        raise ReplicationArgumentError(f"not a canonical row ({error}): {data[:40]!r}") from None
    return columns


def canonical_digest(canonical: bytes) -> int:
    """:func:`row_digest` of a row given as its canonical bytes (computed once by a caller that
    keeps them)."""
    raw = hashlib.blake2b(canonical, digest_size=8).digest()
    value: int = _ROW_DIGEST.unpack(raw)[0]
    return value


def row_digest(columns: Mapping[str, bytes | None]) -> int:
    """64-bit digest of one captured row, as a signed int64 (it is stored in SQLite/CQL bigint)."""
    return canonical_digest(canonical_row_bytes(columns))


def slice_digest(row_digests: Iterable[int]) -> bytes:
    """128-bit digest of a slice: its row count and its rows' digests, sorted."""
    ordered = sorted(row_digests)
    hasher = hashlib.blake2b(digest_size=SLICE_DIGEST_SIZE)
    hasher.update(_COUNT.pack(len(ordered)))
    for digest in ordered:
        hasher.update(_ROW_DIGEST.pack(digest))
    return hasher.digest()
