"""Replica-side capture and transmission (seed 002, DSE Advanced Replication v2).

Pure cores, no I/O (``shared/design/REPLICATION.md`` holds the decisions): the slicing settings
and keys (``_model``), row and slice digests (``_digest``), the triage of a row into its slice
(``_triage``), the vnode range of a CDC stream (``_stream_ranges``). The node wires capture into
its store; the pipeline transmits sealed slices with Spark.

Layering: this package imports only ``errors``, ``ring``, ``schema`` and ``cdc``, so the storage
layer may use it (the store captures rows with ``place`` and the digests); it must never import
``storage`` or anything above it.
"""

from ringflow.replication._digest import (
    canonical_digest,
    canonical_row_bytes,
    decode_canonical_row,
    row_digest,
    slice_digest,
)
from ringflow.replication._model import (
    DEFAULT_SLICE_COUNT,
    DEFAULT_SLICE_WIDTH_S,
    ROW_DIGEST_BITS,
    SLICE_COUNT_MAX,
    SLICE_DIGEST_SIZE,
    SLICE_WIDTH_S_MAX,
    Origin,
    ReplicationArgumentError,
    SealedSlice,
    SliceKey,
    SliceSettings,
)
from ringflow.replication._stream_ranges import StreamRanges, TokenRange, description_ranges
from ringflow.replication._triage import (
    IN_SEQUENCE_ORIGINS,
    Placement,
    due_ms,
    place,
    slice_start_ms,
)

__all__ = [
    "DEFAULT_SLICE_COUNT",
    "DEFAULT_SLICE_WIDTH_S",
    "IN_SEQUENCE_ORIGINS",
    "ROW_DIGEST_BITS",
    "SLICE_COUNT_MAX",
    "SLICE_DIGEST_SIZE",
    "SLICE_WIDTH_S_MAX",
    "Origin",
    "Placement",
    "ReplicationArgumentError",
    "SealedSlice",
    "SliceKey",
    "SliceSettings",
    "StreamRanges",
    "TokenRange",
    "canonical_digest",
    "canonical_row_bytes",
    "decode_canonical_row",
    "description_ranges",
    "due_ms",
    "place",
    "row_digest",
    "slice_digest",
    "slice_start_ms",
]
