"""The token range of a captured row: the vnode range of its CDC stream's generation. Pure.

REPLICATION.md "Words" (a slice's range is one vnode range ``(a, b]`` of the CDC generation the
row was captured in) and decision 9 (slices stay keyed by that range after a topology change).
A CDC log row lives in partition ``cdc$stream_id``; Scylla's stream ids carry their token in the
first 8 bytes, and each stream of a generation belongs to exactly one vnode of that generation's
``TopologyDescription`` (the entry whose range ``(previous end, end]`` holds the stream's
token; scylla-cdc.md §2-3). Stream ids of different generations differ (their low qword holds
random bits), so the stream alone names its generation and therefore its range.

``StreamRanges`` indexes the streams of the descriptions it is given: ``range_of(stream_id)``
is one dict lookup (it runs for every captured row, on the write path). A description with a
single vnode has the whole ring as its range, ``(end, end]``. The index is bounded: past
``max_streams`` the oldest descriptions are forgotten (a forgotten stream resolves to None, and
the caller applies its documented fallback).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from ringflow.cdc import TopologyDescription
from ringflow.errors import invariant
from ringflow.replication._model import ReplicationArgumentError

STREAM_ID_SIZE: Final = 16
DEFAULT_MAX_STREAMS: Final = 4_000_000
"""Streams indexed at most (about 64 bytes each): thousands of generations of a large ring."""

RangeBounds = tuple[int, int]
"""``(start, end]``, exclusive start, inclusive end, wrapping when ``start >= end``."""


def description_ranges(description: TopologyDescription) -> dict[bytes, RangeBounds]:
    """Every stream id of ``description`` with the vnode range it belongs to."""
    ends: list[int] = description.range_ends.tolist()
    offsets: list[int] = description.stream_offsets.tolist()
    blob = description.stream_bytes().tobytes()
    ranges: dict[bytes, RangeBounds] = {}
    for index, end in enumerate(ends):
        token_range = (ends[index - 1], end)  # index 0: the last end, the wrapping range
        for flat in range(offsets[index], offsets[index + 1]):
            at = flat * STREAM_ID_SIZE
            ranges[blob[at : at + STREAM_ID_SIZE]] = token_range
    return ranges


class StreamRanges:
    """An index of stream id -> vnode range over the descriptions added (module docstring)."""

    def __init__(self, *, max_streams: int = DEFAULT_MAX_STREAMS) -> None:
        if type(max_streams) is not int or max_streams <= 0:
            raise ReplicationArgumentError(f"max_streams must be a positive int: {max_streams!r}")
        self._max_streams = max_streams
        self._ranges: dict[bytes, RangeBounds] = {}
        self._descriptions: OrderedDict[int, tuple[TopologyDescription, tuple[bytes, ...]]]
        self._descriptions = OrderedDict()
        """Indexed descriptions by ``id`` (each kept alive here, so an id is not reused), with
        their streams, oldest first."""

    def __len__(self) -> int:
        return len(self._ranges)

    def add(self, description: TopologyDescription) -> bool:
        """Index the streams of ``description``; False if that object was indexed already."""
        if not isinstance(description, TopologyDescription):
            raise ReplicationArgumentError(f"not a TopologyDescription: {description!r:.80}")
        if id(description) in self._descriptions:
            return False
        ranges = description_ranges(description)
        self._ranges.update(ranges)
        self._descriptions[id(description)] = (description, tuple(ranges))
        while len(self._ranges) > self._max_streams and len(self._descriptions) > 1:
            _, (_, streams) = self._descriptions.popitem(last=False)
            for stream in streams:
                self._ranges.pop(stream, None)
        return True

    def range_of(self, stream_id: bytes) -> RangeBounds | None:
        """The vnode range of ``stream_id``'s generation, or None for a stream not indexed."""
        return self._ranges.get(stream_id)

    def validate(self) -> None:
        """Every indexed stream's token lies in its range (the description's own rule)."""
        for stream, (start, end) in self._ranges.items():
            token = int.from_bytes(stream[:8], "big", signed=True)
            inside = start < token <= end if start < end else token > start or token <= end
            invariant(
                inside, f"stream {stream.hex()} (token {token}) outside its range ({start}, {end}]"
            )
