"""Native protocol v4 frames: the 9-byte header, the incremental decoder, LZ4 bodies.

Owns ``doc/native_protocol_v4.spec`` §1-2 (frame layout, version/direction byte, flags, stream,
opcode, length) and §5 (compression), reliability-and-style.md §A5.1.

Rules:

* A body of ``LARGE_BODY_SIZE`` or more is gathered in a buffer of its own and handed out as
  that ``bytearray`` (``Frame.body``), never copied whole: a 100 MB copy holds the GIL long
  enough to stall every other client of the node (issue 16).
* The decoder buffers at most one header plus ``max_frame_size`` body bytes. A header that
  announces a longer body is refused at once (``FrameTooLarge``) and its body is skipped as it
  arrives, never buffered, so the connection keeps its frame boundary and can go on.
* A header the decoder cannot trust (negative length, a version whose layout is not v4's)
  raises a *fatal* ``FrameError``: there is no frame boundary left to resynchronise on.
* A request in any version but 4 is refused with Cassandra's message, "Invalid or unsupported
  protocol version (5); supported versions are (4/v4)". The Python driver looks for the words
  "unsupported protocol version" in a 0x000A error to downgrade from v5 to v4
  (``cassandra/connection.py`` ``process_msg``), and the reply must be framed in the client's
  own version, which it checks before reading the body.
* LZ4 bodies are Cassandra's: a 4-byte big-endian uncompressed length, then one LZ4 block. The
  announced length is checked against the frame limit *before* decompressing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum, IntFlag

import lz4.block  # type: ignore[import-untyped]  # lz4 ships no type information

from ringflow.cql._wire import LocalProtocolError
from ringflow.errors import ProtocolViolation

PROTOCOL_VERSION = 4
SUPPORTED_PROTOCOL_VERSIONS = (4,)
HEADER_SIZE = 9
DEFAULT_MAX_FRAME_SIZE = 256 * 1024 * 1024
"""Cassandra's hard limit on a frame body (spec §2.5: "currently a frame is limited to 256MB")."""

_DIRECTION_RESPONSE = 0x80
_VERSION_MASK = 0x7F
_FIRST_NINE_BYTE_HEADER_VERSION = 3
_LEGACY_HEADER_SIZE = 8

_HEADER = struct.Struct(">BBhBi")
_LEGACY_HEADER = struct.Struct(">BBbBi")
_LZ4_LENGTH = struct.Struct(">i")
_LZ4_MAX_RATIO = 255
LARGE_BODY_SIZE = 1024 * 1024


class Opcode(IntEnum):
    """Message opcodes (spec §2.4)."""

    ERROR = 0x00
    STARTUP = 0x01
    READY = 0x02
    AUTHENTICATE = 0x03
    OPTIONS = 0x05
    SUPPORTED = 0x06
    QUERY = 0x07
    RESULT = 0x08
    PREPARE = 0x09
    EXECUTE = 0x0A
    REGISTER = 0x0B
    EVENT = 0x0C
    BATCH = 0x0D
    AUTH_CHALLENGE = 0x0E
    AUTH_RESPONSE = 0x0F
    AUTH_SUCCESS = 0x10


REQUEST_OPCODES = frozenset(
    {
        Opcode.STARTUP,
        Opcode.OPTIONS,
        Opcode.QUERY,
        Opcode.PREPARE,
        Opcode.EXECUTE,
        Opcode.REGISTER,
        Opcode.BATCH,
        Opcode.AUTH_RESPONSE,
    }
)


class FrameFlag(IntFlag):
    """Header flags (spec §2.2; BETA is v5's "use beta" bit, ignored on v4 frames)."""

    NONE = 0x00
    COMPRESSION = 0x01
    TRACING = 0x02
    CUSTOM_PAYLOAD = 0x04
    WARNING = 0x08
    BETA = 0x10


def unsupported_version_message(version: int) -> str:
    """Cassandra's wording; drivers match "unsupported protocol version" to downgrade."""
    supported = ", ".join(f"{number}/v{number}" for number in SUPPORTED_PROTOCOL_VERSIONS)
    return (
        f"Invalid or unsupported protocol version ({version}); supported versions are ({supported})"
    )


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """One frame header. ``version`` excludes the direction bit, kept in ``is_response``."""

    version: int
    flags: int
    stream_id: int
    opcode: int
    body_length: int
    is_response: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.version <= _VERSION_MASK:
            raise LocalProtocolError(f"protocol version {self.version} is outside [0, 127]")
        if not 0 <= self.flags <= 0xFF or not 0 <= self.opcode <= 0xFF:
            raise LocalProtocolError(f"flags {self.flags} or opcode {self.opcode} not a byte")
        low, high = (-128, 127) if self._is_legacy_layout else (-32768, 32767)
        if not low <= self.stream_id <= high:
            raise LocalProtocolError(f"stream id {self.stream_id} is outside [{low}, {high}]")
        if not 0 <= self.body_length <= 2**31 - 1:
            raise LocalProtocolError(f"body length {self.body_length} does not fit an [int]")

    @property
    def _is_legacy_layout(self) -> bool:
        return self.version < _FIRST_NINE_BYTE_HEADER_VERSION

    @property
    def size(self) -> int:
        return _LEGACY_HEADER_SIZE if self._is_legacy_layout else HEADER_SIZE

    def encode(self) -> bytes:
        """The header bytes; versions 1-2 (only ever used to refuse them) have a 1-byte stream."""
        version_byte = self.version | (_DIRECTION_RESPONSE if self.is_response else 0)
        packer = _LEGACY_HEADER if self._is_legacy_layout else _HEADER
        return packer.pack(version_byte, self.flags, self.stream_id, self.opcode, self.body_length)


@dataclass(frozen=True, slots=True)
class Frame:
    """A header and its body exactly as received (still compressed if the flag says so); a
    large body is the decoder's own ``bytearray`` (read it, do not keep it around)."""

    header: FrameHeader
    body: bytes | bytearray


class FrameError(ProtocolViolation):
    """The decoder refused a frame; carries what the ERROR reply needs.

    ``fatal`` means the byte stream can no longer be split into frames: reply, then close.
    ``version`` is the version to frame the reply in (the client's own).
    """

    def __init__(self, message: str, *, stream_id: int, version: int, fatal: bool) -> None:
        super().__init__(message)
        self.message = message
        self.stream_id = stream_id
        self.version = version
        self.fatal = fatal


class UnsupportedProtocolVersion(FrameError):
    """A frame in a protocol version other than the one(s) this decoder accepts."""


class FrameTooLarge(FrameError):
    """A header announcing a body over ``max_frame_size``; the body is skipped."""


class FrameDecoder:
    """Incremental splitter of a byte stream into frames: ``feed`` bytes, then ``next_frame``.

    ``expected_version`` (4 by default) makes any other version a fatal
    ``UnsupportedProtocolVersion``; ``None`` accepts any version with the v3+ header layout.
    Consumed bytes are dropped lazily (a read offset, compacted once it passes half the
    buffer), so many small pipelined frames cost linear, not quadratic, copying.
    """

    __slots__ = (
        "_broken",
        "_buffer",
        "_discard_remaining",
        "_large_body",
        "_large_header",
        "_start",
        "expected_version",
        "max_frame_size",
    )

    def __init__(
        self,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        *,
        expected_version: int | None = PROTOCOL_VERSION,
    ) -> None:
        if not 0 < max_frame_size <= 2**31 - 1:
            raise LocalProtocolError(f"max_frame_size {max_frame_size} is outside [1, 2**31-1]")
        self.max_frame_size = max_frame_size
        self.expected_version = expected_version
        self._buffer = bytearray()
        self._start = 0
        self._discard_remaining = 0
        self._broken: FrameError | None = None
        self._large_header: FrameHeader | None = None
        self._large_body = bytearray()

    @property
    def buffered_size(self) -> int:
        """Bytes held and not yet returned as frames."""
        return len(self._large_body) + len(self._buffer) - self._start

    @property
    def wanted_size(self) -> int:
        """Bytes the buffer will hold once the frame at its head is complete: the buffered
        bytes, or more when a header announces a body not yet all here (budgets reserve it)."""
        buffered = self.buffered_size
        large = self._large_header
        if large is not None:
            return large.size + large.body_length + len(self._buffer) - self._start
        if self._broken is not None or self._discard_remaining or buffered < HEADER_SIZE:
            return buffered
        first = self._buffer[self._start]
        if first & _VERSION_MASK < _FIRST_NINE_BYTE_HEADER_VERSION:
            return buffered
        length: int = _HEADER.unpack_from(self._buffer, self._start)[4]
        if not 0 <= length <= self.max_frame_size:
            return buffered
        return max(buffered, HEADER_SIZE + length)

    @property
    def frame_in_progress(self) -> bool:
        """Whether part of a frame has arrived and the rest has not (a body timeout runs)."""
        return (
            self.buffered_size > 0 or self._discard_remaining > 0 or self._large_header is not None
        )

    def feed(self, data: bytes) -> None:
        if self._broken is not None:
            return
        if self._discard_remaining:
            skipped = min(self._discard_remaining, len(data))
            self._discard_remaining -= skipped
            data = data[skipped:]
        large = self._large_header
        if large is not None:
            missing = large.body_length - len(self._large_body)
            with memoryview(data) as view:
                self._large_body += view[:missing]
            data = data[missing:]
        if data:
            self._buffer += data

    def next_frame(self) -> Frame | None:
        """The next complete frame, ``None`` if more bytes are needed, or raise ``FrameError``."""
        if self._broken is not None:
            raise self._broken
        large = self._large_header
        if large is not None:
            if len(self._large_body) < large.body_length:
                return None
            frame = Frame(large, self._large_body)  # handed out, not copied
            self._large_header, self._large_body = None, bytearray()
            return frame
        if self._discard_remaining:
            return None
        header = self._peek_header()
        if header is None:
            return None
        body_start = self._start + header.size
        end = body_start + header.body_length
        if len(self._buffer) < end:
            if header.body_length >= LARGE_BODY_SIZE:
                self._large_header = header
                self._large_body = bytearray(self._buffer[body_start:])
                self._consume(len(self._buffer) - self._start)
            return None
        with memoryview(self._buffer) as view:
            body = bytes(view[body_start:end])  # one copy: a slice of the bytearray is another
        self._consume(end - self._start)
        return Frame(header, body)

    def skip_head_frame(self) -> FrameHeader | None:
        """Drop the incomplete frame at the head, its body as it arrives (never buffered), and
        return its header; ``None`` when no header is waiting for its body."""
        large = self._large_header
        if large is not None:
            self._discard_remaining = large.body_length - len(self._large_body)
            self._large_header, self._large_body = None, bytearray()
            return large
        if self._broken is not None or self._discard_remaining:
            return None
        header = self._peek_header()
        if header is None or self.buffered_size >= header.size + header.body_length:
            return None
        self._skip_body(header.size, header.body_length)
        return header

    def _consume(self, size: int) -> None:
        self._start += size
        if self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        elif self._start > len(self._buffer) // 2:
            del self._buffer[: self._start]
            self._start = 0

    def _peek_header(self) -> FrameHeader | None:
        if self.buffered_size == 0:
            return None
        first = self._buffer[self._start]
        version = first & _VERSION_MASK
        legacy = version < _FIRST_NINE_BYTE_HEADER_VERSION
        size = _LEGACY_HEADER_SIZE if legacy else HEADER_SIZE
        if self.buffered_size < size:
            return None
        packer = _LEGACY_HEADER if legacy else _HEADER
        _, flags, stream_id, opcode, length = packer.unpack_from(self._buffer, self._start)
        if legacy or (self.expected_version is not None and version != self.expected_version):
            self._fail(
                UnsupportedProtocolVersion(
                    unsupported_version_message(version),
                    stream_id=stream_id,
                    version=version,
                    fatal=True,
                )
            )
        if length < 0:
            self._fail(
                FrameError(
                    f"Invalid frame body length {length}",
                    stream_id=stream_id,
                    version=version,
                    fatal=True,
                )
            )
        if length > self.max_frame_size:
            self._skip_body(size, length)
            raise FrameTooLarge(
                f"Request is too big: length {length} exceeds maximum allowed length "
                f"{self.max_frame_size}",
                stream_id=stream_id,
                version=version,
                fatal=False,
            )
        is_response = bool(first & _DIRECTION_RESPONSE)
        return FrameHeader(version, flags, stream_id, opcode, length, is_response)

    def _fail(self, error: FrameError) -> None:
        self._broken = error
        self._buffer.clear()
        self._start = 0
        raise error

    def _skip_body(self, header_size: int, body_length: int) -> None:
        skipped = min(self.buffered_size - header_size, body_length)
        self._consume(header_size + skipped)
        self._discard_remaining = body_length - skipped


def compress_lz4(body: bytes) -> bytes:
    """Cassandra's LZ4 body: 4-byte big-endian uncompressed length, then one LZ4 block."""
    block: bytes = lz4.block.compress(body, store_size=False)
    return _LZ4_LENGTH.pack(len(body)) + block


def decompress_lz4(body: bytes | bytearray, max_size: int) -> bytes:
    """Inverse of ``compress_lz4``; refuses an announced size over ``max_size`` before inflating."""
    if len(body) < _LZ4_LENGTH.size:
        raise ProtocolViolation(f"LZ4 body of {len(body)} bytes has no length prefix")
    (size,) = _LZ4_LENGTH.unpack_from(body)
    if not 0 <= size <= max_size:
        raise ProtocolViolation(f"LZ4 body announces {size} uncompressed bytes (limit {max_size})")
    block = body[_LZ4_LENGTH.size :]
    if size > len(block) * _LZ4_MAX_RATIO + _LZ4_MAX_RATIO:
        # LZ4 cannot expand a block more than ~255 times; a larger claim would only make us
        # allocate the announced size for nothing.
        raise ProtocolViolation(
            f"LZ4 body announces {size} uncompressed bytes from a {len(block)}-byte block"
        )
    if size == 0:
        if len(block) > 1:
            raise ProtocolViolation("LZ4 body announces 0 bytes but carries more")
        return b""
    try:
        inflated = lz4.block.decompress(block, uncompressed_size=size)
    except lz4.block.LZ4BlockError as error:
        raise ProtocolViolation(f"corrupt LZ4 body: {error}") from None
    if len(inflated) != size:
        raise ProtocolViolation(f"LZ4 body inflated to {len(inflated)} bytes, announced {size}")
    return bytes(inflated)
