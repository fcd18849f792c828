"""CDC stream ids: the 128-bit partition key of every CDC log row.

Implements ``shared/reference/scylla-cdc.md`` §1 (seed 000 "Stream IDs"). Layout, trusting the
shifts of Scylla's constructor rather than the off-by-one diagram in ``docs/dev/cdc.md``:

- bytes 0-7: the stream's token, big-endian signed int64;
- bytes 8-15: big-endian uint64 "low qword" = version (bits 0-3, always 1)
  | vnode index (bits 4-25, 22 bits) | random (bits 26-63, 38 bits).

Ordering is unsigned byte order, the order of CQL ``blob`` values (e.g. inside the
``frozen<set<blob>>`` of the description tables). Ring order is by :attr:`StreamId.token`.

Versions. Only version 1 exists. Scylla's ``stream_id(bytes)`` constructor rejects a low nibble
greater than 1 and accepts 0 and 1, even though pre-4.3 ids (4.0: two random int64s; 4.1/4.2:
token then a fully random qword) have an arbitrary low nibble, so 15 in 16 of them are rejected.
:meth:`StreamId.from_bytes` does exactly the same; consumers that must read description tables
written before 4.3 pass ``accept_any_version=True`` (as scylla-cdc-go and -java tolerate them)
and use :attr:`StreamId.vnode_index`, which is ``None`` unless the version is 1.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Self

from ringflow.cdc._errors import InvalidStreamId

STREAM_ID_SIZE = 16
STREAM_ID_VERSION = 1
VERSION_BITS = 4
INDEX_BITS = 22
RANDOM_BITS = 38
INDEX_SHIFT = VERSION_BITS
RANDOM_SHIFT = VERSION_BITS + INDEX_BITS
VERSION_MASK = (1 << VERSION_BITS) - 1
INDEX_MASK = (1 << INDEX_BITS) - 1
RANDOM_MASK = (1 << RANDOM_BITS) - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_PACK = struct.Struct(">qQ")


def low_qword(index: int, random_bits: int) -> int:
    """The second half of a version-1 stream id (no range checks: callers mask or validate)."""
    return STREAM_ID_VERSION | (index << INDEX_SHIFT) | (random_bits << RANDOM_SHIFT)


@dataclass(frozen=True, slots=True, order=True)
class StreamId:
    """A CDC stream id; construct with :meth:`create` or :meth:`from_bytes`.

    ``StreamId(value)`` validates like :meth:`from_bytes` with default arguments.
    """

    value: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.value, bytes):
            raise InvalidStreamId(f"StreamId needs bytes, got {type(self.value).__name__}")
        _check_stream_bytes(self.value, accept_any_version=False)

    @classmethod
    def create(cls, token: int, index: int, random_bits: int) -> Self:
        """A version-1 id for ``token`` (int64), vnode ``index`` (22 bits), 38 ``random_bits``."""
        _check_range("token", token, _INT64_MIN, _INT64_MAX)
        _check_range("index", index, 0, INDEX_MASK)
        _check_range("random_bits", random_bits, 0, RANDOM_MASK)
        return cls._trusted(_PACK.pack(token, low_qword(index, random_bits)))

    @classmethod
    def from_bytes(cls, data: bytes, *, accept_any_version: bool = False) -> Self:
        """Decode 16 bytes; versions above 1 raise InvalidStreamId unless ``accept_any_version``."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidStreamId(f"a stream id is bytes, got {type(data).__name__}")
        raw = bytes(data)
        _check_stream_bytes(raw, accept_any_version=accept_any_version)
        return cls._trusted(raw)

    @classmethod
    def from_parts(cls, token: int, low: int) -> Self:
        """An id from its two qwords (token signed, low unsigned); validates the version."""
        _check_range("token", token, _INT64_MIN, _INT64_MAX)
        _check_range("low qword", low, 0, 2**64 - 1)
        return cls(_PACK.pack(token, low))

    @classmethod
    def _trusted(cls, data: bytes) -> Self:
        """Skip validation: for bytes this package built or already checked (hot paths)."""
        stream = _allocate(cls)
        _set_value(stream, data)
        return stream

    def to_bytes(self) -> bytes:
        return self.value

    @property
    def token(self) -> int:
        """The token the log partition of this stream is placed at (signed int64)."""
        return int.from_bytes(self.value[:8], "big", signed=True)

    @property
    def low(self) -> int:
        """The second qword, unsigned."""
        return int.from_bytes(self.value[8:], "big")

    @property
    def version(self) -> int:
        return self.value[15] & VERSION_MASK

    @property
    def index(self) -> int:
        """The 22 index bits, decoded whatever the version (like scylla-cdc-java)."""
        return (self.low >> INDEX_SHIFT) & INDEX_MASK

    @property
    def random_bits(self) -> int:
        return self.low >> RANDOM_SHIFT

    @property
    def vnode_index(self) -> int | None:
        """Position of the range end owning this stream; ``None`` for a pre-4.3 (unversioned) id."""
        return self.index if self.version == STREAM_ID_VERSION else None

    def __str__(self) -> str:
        return self.value.hex()

    def __repr__(self) -> str:
        return f"StreamId(0x{self.value.hex()})"


_allocate = object.__new__
_set_value = StreamId.__dict__["value"].__set__  # the slot itself: skips the frozen __setattr__


def _check_range(name: str, value: int, lowest: int, highest: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidStreamId(f"stream id {name} must be an int, got {value!r}")
    if not lowest <= value <= highest:
        raise InvalidStreamId(f"stream id {name} must be in [{lowest}, {highest}], got {value}")


def _check_stream_bytes(raw: bytes, *, accept_any_version: bool) -> None:
    if len(raw) != STREAM_ID_SIZE:
        raise InvalidStreamId(f"a stream id is {STREAM_ID_SIZE} bytes, got {len(raw)}: {raw.hex()}")
    version = raw[15] & VERSION_MASK
    if version > STREAM_ID_VERSION and not accept_any_version:
        raise InvalidStreamId(f"unknown CDC stream id version {version} in {raw.hex()}")
