"""Primitive readers and writers of the native protocol v4 body notation.

Owns the spec's §3 "Notations": [byte], [short] (unsigned), [int], [long], [string],
[long string], [uuid], [string list], [bytes], [value], [short bytes], [inet], [consistency],
[string map], [string multimap] and [bytes map] (``doc/native_protocol_v4.spec`` §3).

Rules:

* ``Reader`` never raises anything but ``ProtocolViolation``: truncation, a negative length,
  bad UTF-8, an unknown consistency or an address of the wrong size all become one with the
  offset and the primitive's name, so a fuzzed body cannot escape as ``struct.error`` or
  ``IndexError`` (reliability-and-style.md §A5.3, h11's "parse or raise" invariant).
* ``Writer`` refuses values the notation cannot carry (a [string] over 65535 bytes, an [int]
  out of range) with ``LocalProtocolError``: that is our bug, not the peer's.
* Lengths are checked against the bytes actually present before anything is allocated, so a
  lying length prefix cannot make us allocate more than the frame we already hold.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from ipaddress import IPv4Address, IPv6Address, ip_address
from uuid import UUID

from ringflow.errors import Consistency, InternalError, ProtocolViolation

_BYTE = struct.Struct(">B")
_SIGNED_BYTE = struct.Struct(">b")
_SHORT = struct.Struct(">H")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")

SHORT_MAX = 0xFFFF
INT_MIN = -(2**31)
INT_MAX = 2**31 - 1
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1
_NULL_LENGTH = _INT.pack(-1)


class LocalProtocolError(InternalError):
    """We were asked to put on the wire something the protocol cannot carry (our bug)."""


class Unset(Enum):
    """The [value] "not set" marker (length -2): leave the bound column unchanged."""

    UNSET = "unset"


UNSET = Unset.UNSET

CqlValue = bytes | None | Unset
"""A bound [value]: serialized bytes, ``None`` for null (-1) or ``UNSET`` (-2)."""


@dataclass(frozen=True, slots=True)
class Inet:
    """An [inet]: a node's IP address and port."""

    address: IPv4Address | IPv6Address
    port: int

    def __post_init__(self) -> None:
        if not INT_MIN <= self.port <= INT_MAX:
            raise LocalProtocolError(f"[inet] port {self.port} does not fit an [int]")


class Reader:
    """Sequential reader over one message body; every failure is a ``ProtocolViolation``."""

    __slots__ = ("_data", "_offset")

    def __init__(self, data: bytes | bytearray | memoryview, offset: int = 0) -> None:
        # A large frame body arrives as a bytearray (``FrameDecoder``): read it through a
        # memoryview, so only the parts taken are copied (into ``bytes``).
        self._data: bytes | memoryview = data if isinstance(data, bytes) else memoryview(data)
        self._offset = offset

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def remaining(self) -> int:
        return len(self._data) - self._offset

    def _truncated(self, size: int, what: str) -> ProtocolViolation:
        return ProtocolViolation(
            f"truncated body: {what} needs {size} bytes at offset {self._offset}, "
            f"{self.remaining} remain"
        )

    def _take(self, size: int, what: str) -> bytes:
        data = self._data
        start = self._offset
        end = start + size
        if size < 0 or end > len(data):
            raise self._truncated(size, what)
        self._offset = end
        taken = data[start:end]
        return taken if isinstance(taken, bytes) else bytes(taken)

    def _unpack(self, packer: struct.Struct, what: str) -> int:
        # Unpacked in place (no slice copied): every [short], [int] and [long] of a request.
        start = self._offset
        end = start + packer.size
        if end > len(self._data):
            raise self._truncated(packer.size, what)
        self._offset = end
        value: int = packer.unpack_from(self._data, start)[0]
        return value

    def read_byte(self) -> int:
        return self._unpack(_BYTE, "[byte]")

    def read_short(self) -> int:
        return self._unpack(_SHORT, "[short]")

    def read_int(self) -> int:
        return self._unpack(_INT, "[int]")

    def read_long(self) -> int:
        return self._unpack(_LONG, "[long]")

    def read_count(self, what: str, min_item_size: int) -> int:
        """An [int] element count, refused when the rest of the body cannot hold that many."""
        number = self.read_int()
        if number < 0 or number * min_item_size > self.remaining:
            raise ProtocolViolation(
                f"{what} count {number} at offset {self._offset - 4} does not fit the "
                f"{self.remaining} bytes left in the body"
            )
        return number

    def read_raw(self, size: int, what: str) -> bytes:
        return self._take(size, what)

    def read_rest(self) -> bytes:
        return self._take(self.remaining, "rest of body")

    def _utf8(self, raw: bytes, what: str) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ProtocolViolation(
                f"{what} ending at offset {self._offset} is not valid UTF-8: {error.reason}"
            ) from None

    def read_string(self) -> str:
        return self._utf8(self._take(self.read_short(), "[string]"), "[string]")

    def read_long_string(self) -> str:
        size = self.read_int()
        if size < 0:
            raise ProtocolViolation(f"negative [long string] length {size}")
        return self._utf8(self._take(size, "[long string]"), "[long string]")

    def read_uuid(self) -> UUID:
        return UUID(bytes=self._take(16, "[uuid]"))

    def read_string_list(self) -> tuple[str, ...]:
        return tuple(self.read_string() for _ in range(self.read_short()))

    def read_bytes(self) -> bytes | None:
        size = self.read_int()
        if size < 0:
            return None
        return self._take(size, "[bytes]")

    def read_value(self) -> CqlValue:
        size = self.read_int()
        if size >= 0:
            return self._take(size, "[value]")
        if size == -1:
            return None
        if size == -2:
            return UNSET
        raise ProtocolViolation(f"invalid [value] length {size} (must be >= -2)")

    def read_short_bytes(self) -> bytes:
        return self._take(self.read_short(), "[short bytes]")

    def read_inet(self) -> Inet:
        size = self.read_byte()
        if size not in (4, 16):
            raise ProtocolViolation(f"[inet] address size {size} (must be 4 or 16)")
        address = ip_address(self._take(size, "[inet] address"))
        return Inet(address, self.read_int())

    def read_consistency(self) -> Consistency:
        code = self.read_short()
        try:
            return Consistency(code)
        except ValueError:
            raise ProtocolViolation(f"unknown consistency level 0x{code:04x}") from None

    def read_string_map(self) -> dict[str, str]:
        pairs: dict[str, str] = {}
        for _ in range(self.read_short()):
            key = self.read_string()
            pairs[key] = self.read_string()
        return pairs

    def read_string_multimap(self) -> dict[str, tuple[str, ...]]:
        pairs: dict[str, tuple[str, ...]] = {}
        for _ in range(self.read_short()):
            key = self.read_string()
            pairs[key] = self.read_string_list()
        return pairs

    def read_bytes_map(self) -> dict[str, bytes | None]:
        pairs: dict[str, bytes | None] = {}
        for _ in range(self.read_short()):
            key = self.read_string()
            pairs[key] = self.read_bytes()
        return pairs


def _checked(packer: struct.Struct, value: int, low: int, high: int, what: str) -> bytes:
    if not low <= value <= high:
        raise LocalProtocolError(f"{what} value {value} is outside [{low}, {high}]")
    return packer.pack(value)


class Writer:
    """Appends the §3 primitives to one growing body."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self._buffer)

    def write_raw(self, data: bytes) -> None:
        self._buffer += data

    def write_byte(self, value: int) -> None:
        self._buffer += _checked(_BYTE, value, 0, 0xFF, "[byte]")

    def write_short(self, value: int) -> None:
        self._buffer += _checked(_SHORT, value, 0, SHORT_MAX, "[short]")

    def write_int(self, value: int) -> None:
        self._buffer += _checked(_INT, value, INT_MIN, INT_MAX, "[int]")

    def write_long(self, value: int) -> None:
        self._buffer += _checked(_LONG, value, LONG_MIN, LONG_MAX, "[long]")

    def write_string(self, text: str) -> None:
        encoded = text.encode("utf-8")
        self.write_short_bytes(encoded)

    def write_long_string(self, text: str) -> None:
        encoded = text.encode("utf-8")
        self.write_int(len(encoded))
        self._buffer += encoded

    def write_uuid(self, value: UUID) -> None:
        self._buffer += value.bytes

    def write_string_list(self, strings: Sequence[str]) -> None:
        self.write_short(len(strings))
        for text in strings:
            self.write_string(text)

    def write_bytes(self, data: bytes | None) -> None:
        # The hot path of a rows result (one call per cell): checks inlined.
        if data is None:
            self._buffer += _NULL_LENGTH
            return
        if len(data) > INT_MAX:
            raise LocalProtocolError(f"[bytes] of {len(data)} bytes does not fit an [int] length")
        self._buffer += _INT.pack(len(data))
        self._buffer += data

    def write_bytes_rows(self, rows: Iterable[Sequence[bytes | None]]) -> None:
        """:meth:`write_bytes` of each cell of each of ``rows`` (a rows result's body: one
        join instead of two appends per cell)."""
        pack = _INT.pack
        parts: list[bytes] = []
        append = parts.append
        for row in rows:
            for data in row:
                if data is None:
                    append(_NULL_LENGTH)
                    continue
                if len(data) > INT_MAX:
                    raise LocalProtocolError(
                        f"[bytes] of {len(data)} bytes does not fit an [int] length"
                    )
                append(pack(len(data)))
                append(data)
        self._buffer += b"".join(parts)

    def write_value(self, data: CqlValue) -> None:
        if data is UNSET:
            self.write_int(-2)
            return
        self.write_bytes(data)

    def write_values(self, values: Iterable[CqlValue]) -> None:
        for data in values:
            self.write_value(data)

    def write_short_bytes(self, data: bytes) -> None:
        self.write_short(len(data))
        self._buffer += data

    def write_inet(self, node: Inet) -> None:
        packed = node.address.packed
        self.write_byte(len(packed))
        self._buffer += packed
        self.write_int(node.port)

    def write_consistency(self, level: Consistency) -> None:
        self.write_short(int(level))

    def write_string_map(self, pairs: Mapping[str, str]) -> None:
        self.write_short(len(pairs))
        for key, text in pairs.items():
            self.write_string(key)
            self.write_string(text)

    def write_string_multimap(self, pairs: Mapping[str, Sequence[str]]) -> None:
        self.write_short(len(pairs))
        for key, strings in pairs.items():
            self.write_string(key)
            self.write_string_list(strings)

    def write_bytes_map(self, pairs: Mapping[str, bytes | None]) -> None:
        self.write_short(len(pairs))
        for key, data in pairs.items():
            self.write_string(key)
            self.write_bytes(data)
