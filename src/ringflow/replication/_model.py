"""The nouns of replica-side replication (seed 002; ``shared/design/REPLICATION.md`` "Words").

Value objects only: the settings of the slicing, the key of one slice, the state a node publishes
for a sealed slice, and where a captured row came from. Every other module of
``ringflow.replication`` speaks in these, and so do the storage capture and the Spark source.

Units: timestamps and slice starts in milliseconds since the epoch (``_ms``), widths in seconds
(``_s``) as users set them; tokens are Murmur3 int64. A range is one vnode range ``(start, end]``
of the CDC generation a row was captured in (wrapping when ``start >= end``).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Final

from ringflow.errors import ClientError

DEFAULT_SLICE_WIDTH_S: Final = 60
DEFAULT_SLICE_COUNT: Final = 5
SLICE_WIDTH_S_MAX: Final = 3600
SLICE_COUNT_MAX: Final = 60
ROW_DIGEST_BITS: Final = 64
SLICE_DIGEST_SIZE: Final = 16
"""Bytes of a slice digest (128 bits: REPLICATION.md decision 3)."""
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


class ReplicationArgumentError(ClientError):
    """A replication setting or value that breaks its rule (CQL 0x2200 when it reaches a client)."""


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ReplicationArgumentError(f"{name} must be an int, got {value!r}")
    if not low <= value <= high:
        raise ReplicationArgumentError(f"{name} must be in [{low}, {high}], got {value}")
    return value


@dataclass(frozen=True, slots=True)
class SliceSettings:
    """``slice_width_s`` seconds per slice; ``slice_count`` slices open at once (the window).

    A row whose timestamp falls in a slice that is no longer open when it arrives is
    out-of-sequence (seed 002 "Time slice buckets")."""

    slice_width_s: int = DEFAULT_SLICE_WIDTH_S
    slice_count: int = DEFAULT_SLICE_COUNT

    def __post_init__(self) -> None:
        _check_int("slice_width_s", self.slice_width_s, 1, SLICE_WIDTH_S_MAX)
        _check_int("slice_count", self.slice_count, 1, SLICE_COUNT_MAX)

    @property
    def slice_width_ms(self) -> int:
        return self.slice_width_s * 1000

    @property
    def window_ms(self) -> int:
        """How long a slice stays open after it starts: ``slice_count`` widths."""
        return self.slice_count * self.slice_width_ms


class Origin(enum.Enum):
    """How a CDC log row reached this replica (REPLICATION.md decision 1)."""

    WRITE = "write"
    """A coordinated write (this node a natural or pending replica)."""
    HINT = "hint"
    """A hint replayed to this node: the write path, late."""
    STREAM = "stream"
    """Bootstrap / decommission / removenode streaming: always out-of-sequence."""
    REPAIR = "repair"
    """Anti-entropy repair: always out-of-sequence."""


@dataclass(frozen=True, slots=True, order=True)
class SliceKey:
    """One slice: the captured rows of (table, range, time bucket) on one node.

    ``slice_start_ms`` is a multiple of the slice width. ``out_of_sequence`` slices hold rows that
    arrived after their slice closed (or by streaming/repair); they are bucketed by arrival time,
    sent by every node that holds them, and never compared between nodes."""

    keyspace: str
    table: str
    range_start: int
    range_end: int
    slice_start_ms: int
    out_of_sequence: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.keyspace, str) or not self.keyspace:
            raise ReplicationArgumentError(f"keyspace must be a non-empty str: {self.keyspace!r}")
        if not isinstance(self.table, str) or not self.table:
            raise ReplicationArgumentError(f"table must be a non-empty str: {self.table!r}")
        _check_int("range_start", self.range_start, _INT64_MIN, _INT64_MAX)
        _check_int("range_end", self.range_end, _INT64_MIN, _INT64_MAX)
        _check_int("slice_start_ms", self.slice_start_ms, 0, _INT64_MAX)


@dataclass(frozen=True, slots=True)
class SealedSlice:
    """What a node publishes for a slice it sealed: its digest over the rows it holds."""

    key: SliceKey
    node: uuid.UUID
    digest: bytes
    row_count: int
    sealed_at_ms: int

    def __post_init__(self) -> None:
        if not isinstance(self.digest, bytes) or len(self.digest) != SLICE_DIGEST_SIZE:
            raise ReplicationArgumentError(
                f"a slice digest is {SLICE_DIGEST_SIZE} bytes, got {self.digest!r}"
            )
        _check_int("row_count", self.row_count, 0, _INT64_MAX)
        _check_int("sealed_at_ms", self.sealed_at_ms, 0, _INT64_MAX)
