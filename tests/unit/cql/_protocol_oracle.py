"""The installed Scylla Python driver as the peer: it encodes requests and decodes responses.

Thin wrappers over ``cassandra.protocol.ProtocolHandler.encode_message`` /
``decode_message`` (signatures checked against scylla-driver 3.29) so that tests read as
"the driver sent X" and "the driver understood Y".
"""

from __future__ import annotations

import struct
from typing import Any

from cassandra.connection import locally_supported_compressions
from cassandra.protocol import ProtocolHandler
from cassandra.protocol_features import ProtocolFeatures

from ringflow.cql import (
    Compression,
    Ready,
    RequestEvent,
    ServerConnection,
    Startup,
    encode_message,
)

FEATURES = ProtocolFeatures()
DRIVER_LZ4_COMPRESS, DRIVER_LZ4_DECOMPRESS = locally_supported_compressions["lz4"]
_HEADER_AFTER_VERSION = struct.Struct(">BhBi")


def driver_frame(
    message: Any,
    stream_id: int = 0,
    *,
    version: int = 4,
    compress: bool = False,
    beta: bool = False,
) -> bytes:
    """The bytes the driver puts on the wire for ``message``."""
    compressor = DRIVER_LZ4_COMPRESS if compress else None
    frame: bytes = ProtocolHandler.encode_message(
        message, stream_id, version, compressor, beta, FEATURES
    )
    return frame


def driver_decode(frame: bytes, *, decompress: bool = False, result_metadata: Any = None) -> Any:
    """What the driver makes of one whole response frame, exactly as its connection does."""
    version = frame[0] & 0x7F
    flags, stream_id, opcode, length = _HEADER_AFTER_VERSION.unpack_from(frame, 1)
    assert frame[0] & 0x80, "not a response frame"
    assert len(frame) == 9 + length, "frame length does not match its header"
    decompressor = DRIVER_LZ4_DECOMPRESS if decompress else None
    return ProtocolHandler.decode_message(
        version, FEATURES, {}, stream_id, flags, opcode, frame[9:], decompressor, result_metadata
    )


def driver_round_trip(response: Any, stream_id: int = 1, **options: Any) -> Any:
    """Encode ``response`` with ringflow, decode it with the driver."""
    return driver_decode(encode_message(response, stream_id, **options))


def ready_connection(*, compression: Compression | None = None, **limits: Any) -> ServerConnection:
    """A ServerConnection past STARTUP (its READY already sent)."""
    connection = ServerConnection(**limits)
    options = {"CQL_VERSION": "3.4.5"}
    if compression is not None:
        options["COMPRESSION"] = compression.value
    connection.receive_data(encode_message(Startup(options), 0))
    event = connection.next_event()
    assert isinstance(event, RequestEvent), event
    connection.send(Ready(), 0)
    return connection
