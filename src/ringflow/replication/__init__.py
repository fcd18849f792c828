"""Replica-side capture and transmission (seed 002, DSE Advanced Replication v2).

Pure cores, no I/O (``shared/design/REPLICATION.md`` holds the decisions): the slicing settings
and keys (``_model``), row and slice digests (``_digest``). The node wires capture into its
store; the pipeline transmits sealed slices with Spark.
"""

from ringflow.replication._digest import canonical_row_bytes, row_digest, slice_digest
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
from ringflow.replication._ranks import (
    RangeRanks,
    RankedRange,
    ReplicasOf,
    range_of,
    rank_ranges,
)

__all__ = [
    "DEFAULT_SLICE_COUNT",
    "DEFAULT_SLICE_WIDTH_S",
    "ROW_DIGEST_BITS",
    "SLICE_COUNT_MAX",
    "SLICE_DIGEST_SIZE",
    "SLICE_WIDTH_S_MAX",
    "Origin",
    "RangeRanks",
    "RankedRange",
    "ReplicasOf",
    "ReplicationArgumentError",
    "SealedSlice",
    "SliceKey",
    "SliceSettings",
    "canonical_row_bytes",
    "range_of",
    "rank_ranges",
    "row_digest",
    "slice_digest",
]
