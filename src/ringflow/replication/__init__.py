"""Replica-side capture and transmission (seed 002, DSE Advanced Replication v2).

Pure cores, no I/O (``shared/design/REPLICATION.md`` holds the decisions): the slicing settings
and keys (``_model``), row and slice digests (``_digest``). The node wires capture into its
store; the pipeline transmits sealed slices with Spark.
"""

from ringflow.replication._channels import (
    CHANNEL_COLUMNS,
    CHANNEL_NAME_MAX,
    CHANNELS_TABLE,
    CHANNELS_TABLE_CQL,
    DEFAULT_PRIORITY,
    PRIORITY_MAX,
    PRIORITY_MIN,
    REPLICATION_KEYSPACE,
    Channel,
    ChannelOrder,
    DestinationKind,
    DestinationUrl,
    channel_from_row,
    channel_to_row,
    parse_destination,
    redact,
    table_slice_settings,
)
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
    "CHANNELS_TABLE",
    "CHANNELS_TABLE_CQL",
    "CHANNEL_COLUMNS",
    "CHANNEL_NAME_MAX",
    "DEFAULT_PRIORITY",
    "DEFAULT_SLICE_COUNT",
    "DEFAULT_SLICE_WIDTH_S",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "REPLICATION_KEYSPACE",
    "ROW_DIGEST_BITS",
    "SLICE_COUNT_MAX",
    "SLICE_DIGEST_SIZE",
    "SLICE_WIDTH_S_MAX",
    "Channel",
    "ChannelOrder",
    "DestinationKind",
    "DestinationUrl",
    "Origin",
    "RangeRanks",
    "RankedRange",
    "ReplicasOf",
    "ReplicationArgumentError",
    "SealedSlice",
    "SliceKey",
    "SliceSettings",
    "canonical_row_bytes",
    "channel_from_row",
    "channel_to_row",
    "parse_destination",
    "range_of",
    "rank_ranges",
    "redact",
    "row_digest",
    "slice_digest",
    "table_slice_settings",
]
