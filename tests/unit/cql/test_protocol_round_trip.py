"""Property: every message ringflow encodes decodes back to an equal message, in any framing.

Covers both directions of every message type (requests and responses), with and without
LZ4, with tracing, warnings and custom payloads, and frames split into arbitrary chunks.
"""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cql import (
    Compression,
    DecodedMessage,
    FrameDecoder,
    LocalProtocolError,
    Message,
    Options,
    VoidResult,
    decode_message,
    encode_message,
)

from ._protocol_strategies import requests, responses

_SETTINGS = settings(max_examples=150, deadline=None)
payloads = st.none() | st.dictionaries(st.text(max_size=6), st.none() | st.binary(max_size=6))


def _decode_all(
    data: bytes, cut_points: list[int], compression: Compression | None
) -> list[DecodedMessage]:
    decoder = FrameDecoder()
    decoded: list[DecodedMessage] = []
    start = 0
    for cut in [*sorted(cut_points), len(data)]:
        decoder.feed(data[start:cut])
        start = max(start, cut)
        while (frame := decoder.next_frame()) is not None:
            decoded.append(decode_message(frame, compression=compression))
    assert decoder.buffered_size == 0
    return decoded


@_SETTINGS
@given(
    st.lists(requests, min_size=1, max_size=4),
    st.lists(st.integers(0, 400), max_size=5),
    st.none() | st.just(Compression.LZ4),
    st.booleans(),
    payloads,
)
def test_requests_round_trip_in_any_chunking(
    messages: list[Message],
    cuts: list[int],
    compression: Compression | None,
    tracing: bool,
    custom_payload: dict[str, bytes | None] | None,
) -> None:
    data = b"".join(
        encode_message(
            message,
            stream_id,
            compression=compression,
            tracing=tracing,
            custom_payload=custom_payload,
        )
        for stream_id, message in enumerate(messages)
    )
    decoded = _decode_all(data, cuts, compression)
    assert [item.message for item in decoded] == messages
    assert [item.stream_id for item in decoded] == list(range(len(messages)))
    assert all(item.tracing is tracing and item.tracing_id is None for item in decoded)
    assert all(item.custom_payload == custom_payload for item in decoded)


@_SETTINGS
@given(
    responses,
    st.integers(-32768, 32767),
    st.none() | st.uuids(),
    st.lists(st.text(max_size=10), max_size=3),
    payloads,
    st.none() | st.just(Compression.LZ4),
)
def test_responses_round_trip_with_flags(
    message: Message,
    stream_id: int,
    tracing_id: UUID | None,
    warnings: list[str],
    custom_payload: dict[str, bytes | None] | None,
    compression: Compression | None,
) -> None:
    frame_bytes = encode_message(
        message,
        stream_id,
        compression=compression,
        tracing_id=tracing_id,
        warnings=warnings,
        custom_payload=custom_payload,
    )
    decoder = FrameDecoder()
    decoder.feed(frame_bytes)
    frame = decoder.next_frame()
    assert frame is not None
    assert frame.header.is_response
    decoded = decode_message(frame, compression=compression)
    assert decoded.message == message
    assert decoded.stream_id == stream_id
    assert decoded.tracing_id == tracing_id
    assert decoded.warnings == tuple(warnings)
    assert decoded.custom_payload == custom_payload


def test_a_response_cannot_ask_for_tracing_without_an_id() -> None:
    with pytest.raises(LocalProtocolError, match="tracing_id"):
        encode_message(VoidResult(), 1, tracing=True)


def test_many_pipelined_frames_in_one_chunk() -> None:
    """The decoder's lazy compaction keeps a 10 000-frame chunk linear and exact."""
    frames = [encode_message(Options(), stream_id % 32768) for stream_id in range(10_000)]
    decoder = FrameDecoder()
    decoder.feed(b"".join(frames))
    count = 0
    while (frame := decoder.next_frame()) is not None:
        assert frame.header.stream_id == count % 32768
        count += 1
    assert count == 10_000
    assert decoder.buffered_size == 0
