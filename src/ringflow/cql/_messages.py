"""Message <-> frame codec: one entry point each way, for requests and responses alike.

Owns the part of ``doc/native_protocol_v4.spec`` §2.2 that shapes a body: the tracing id
(responses, flag 0x02), the warnings [string list] (responses, 0x08), the custom payload
[bytes map] (0x04) in that order before the message body, and §5's compressed body (0x01).
The message classes live in ``_requests``, ``_responses``, ``_results`` and
``_error_responses``; this module picks the reader by direction and opcode from their tables.

Rules:

* ``decode_message`` raises ``ProtocolViolation`` and nothing else, whatever the bytes.
  A value object that refuses its fields while being decoded (``LocalProtocolError`` from a
  constructor) is the peer's fault here and is re-raised as ``ProtocolViolation``.
* Bodies are compressed only when a compression is given and the body is not empty, as the
  drivers do; an empty body with the compression flag would not be valid LZ4.
* For requests the tracing flag only asks for tracing (no id in the body); for responses it
  announces a [uuid] tracing id at the start of the body.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from uuid import UUID

from ringflow.cql._frame import (
    DEFAULT_MAX_FRAME_SIZE,
    PROTOCOL_VERSION,
    REQUEST_OPCODES,
    Frame,
    FrameFlag,
    FrameHeader,
    Opcode,
    compress_lz4,
    decompress_lz4,
)
from ringflow.cql._requests import REQUEST_READERS, Request
from ringflow.cql._responses import RESPONSE_READERS, Response
from ringflow.cql._wire import LocalProtocolError, Reader, Writer
from ringflow.errors import ProtocolViolation

Message = Request | Response

# The header flags as plain ints: ``int & FrameFlag.X`` would build a FrameFlag each time.
_COMPRESSION = int(FrameFlag.COMPRESSION)
_TRACING = int(FrameFlag.TRACING)
_CUSTOM_PAYLOAD = int(FrameFlag.CUSTOM_PAYLOAD)
_WARNING = int(FrameFlag.WARNING)


class Compression(StrEnum):
    """Body compressions ringflow speaks (spec §5); snappy is deliberately absent."""

    LZ4 = "lz4"


@dataclass(frozen=True, slots=True)
class DecodedMessage:
    """A decoded frame: the message plus what the header flags carried around it.

    ``tracing`` is the tracing flag (for a request: tracing requested); ``tracing_id`` is the
    [uuid] a response carries when the flag is set.
    """

    message: Message
    stream_id: int
    version: int
    tracing: bool = False
    tracing_id: UUID | None = None
    warnings: tuple[str, ...] = ()
    custom_payload: Mapping[str, bytes | None] | None = None


def encode_body(message: Message) -> bytes:
    """The message's body alone, without prefixes or compression."""
    out = Writer()
    message.write_body(out)
    return out.getvalue()


def encode_message(
    message: Message,
    stream_id: int,
    *,
    version: int = PROTOCOL_VERSION,
    compression: Compression | None = None,
    tracing: bool = False,
    tracing_id: UUID | None = None,
    warnings: Sequence[str] = (),
    custom_payload: Mapping[str, bytes | None] | None = None,
) -> bytes:
    """One whole frame (header and body) carrying ``message`` on ``stream_id``."""
    is_response = message.opcode not in REQUEST_OPCODES
    if not is_response and (tracing_id is not None or warnings):
        raise LocalProtocolError("tracing ids and warnings are only carried by responses")
    if is_response and tracing:
        raise LocalProtocolError("a response announces tracing by carrying its tracing_id")
    flags = 0
    out = Writer()
    if tracing_id is not None or tracing:
        flags |= _TRACING
    if tracing_id is not None:
        out.write_uuid(tracing_id)
    if warnings:
        flags |= _WARNING
        out.write_string_list(warnings)
    if custom_payload is not None:
        flags |= _CUSTOM_PAYLOAD
        out.write_bytes_map(custom_payload)
    message.write_body(out)
    body = out.getvalue()
    if compression is not None and body:
        flags |= _COMPRESSION
        body = compress_lz4(body)
    header = FrameHeader(version, flags, stream_id, int(message.opcode), len(body), is_response)
    return header.encode() + body


def decode_message(
    frame: Frame,
    *,
    compression: Compression | None = None,
    max_body_size: int = DEFAULT_MAX_FRAME_SIZE,
) -> DecodedMessage:
    """Decode ``frame`` (either direction); ``max_body_size`` bounds a decompressed body."""
    header = frame.header
    body = frame.body
    if header.flags & _COMPRESSION:
        if compression is None:
            raise ProtocolViolation("compressed frame but no compression was negotiated")
        body = decompress_lz4(body, max_body_size)
    reader = Reader(body)
    flags = header.flags
    tracing_id = None
    warnings: tuple[str, ...] = ()
    if header.is_response and flags & _TRACING:
        tracing_id = reader.read_uuid()
    if header.is_response and flags & _WARNING:
        warnings = reader.read_string_list()
    payload = reader.read_bytes_map() if flags & _CUSTOM_PAYLOAD else None
    try:
        message = _read_body(header, reader)
    except LocalProtocolError as error:
        raise ProtocolViolation(str(error)) from None
    return DecodedMessage(
        message,
        header.stream_id,
        header.version,
        bool(flags & _TRACING),
        tracing_id,
        warnings,
        payload,
    )


def opcode_name(opcode: int) -> str:
    """The spec's name for ``opcode`` ("QUERY"), or its hex value if it has none."""
    try:
        return Opcode(opcode).name
    except ValueError:
        return f"0x{opcode:02x}"


def _read_body(header: FrameHeader, reader: Reader) -> Message:
    readers = RESPONSE_READERS if header.is_response else REQUEST_READERS
    try:
        opcode = Opcode(header.opcode)
    except ValueError:
        raise ProtocolViolation(f"unknown opcode 0x{header.opcode:02x}") from None
    body_reader = readers.get(opcode)
    if body_reader is None:
        direction = "response" if header.is_response else "request"
        raise ProtocolViolation(f"{opcode.name} is not a {direction} message")
    message: Message = body_reader(reader)
    return message
