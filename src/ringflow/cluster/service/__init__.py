"""The cluster service: the shell that runs the cluster cores over a ``runtime`` (or the
simulator). Its modules are private; the names below are what tests and fuzzers may use
without reaching into them (issue 16: a valid message of every internode verb), and what the
node's start-up shares with it (a node's own CDC generation rows, ``_cdc_local``)."""

from ringflow.cluster.service._cdc_local import (
    CDC_LOCAL_TABLE,
    GENERATION_TABLE,
    ROWS_PER_WRITE_MAX,
    STREAMS_TABLE,
    STREAMS_V1_TABLE,
    TIMESTAMPS_KEY,
    TIMESTAMPS_TABLE,
    V1_GENERATION_TABLE,
    CdcGeneration,
    internal_rows_mutation,
    is_published,
    load_local_generation,
    local_generation_id,
    publish_generation,
    read_generation_v2_rows,
    store_first_generation,
)
from ringflow.cluster.service._codec import (
    decode_failure,
    encode_failure,
    encode_mutations_payload,
    encode_unit,
)
from ringflow.cluster.service._dispatch import (
    ANSWERED_WHEN_REFUSED,
    MEMBER_VERBS,
    OPEN_VERBS,
    VERB_STANDING,
    Standing,
)
from ringflow.cluster.service._wire_samples import encode_internode_message, sample_envelopes

__all__ = [
    "ANSWERED_WHEN_REFUSED",
    "CDC_LOCAL_TABLE",
    "GENERATION_TABLE",
    "MEMBER_VERBS",
    "OPEN_VERBS",
    "ROWS_PER_WRITE_MAX",
    "STREAMS_TABLE",
    "STREAMS_V1_TABLE",
    "TIMESTAMPS_KEY",
    "TIMESTAMPS_TABLE",
    "V1_GENERATION_TABLE",
    "VERB_STANDING",
    "CdcGeneration",
    "Standing",
    "decode_failure",
    "encode_failure",
    "encode_internode_message",
    "encode_mutations_payload",
    "encode_unit",
    "internal_rows_mutation",
    "is_published",
    "load_local_generation",
    "local_generation_id",
    "publish_generation",
    "read_generation_v2_rows",
    "sample_envelopes",
    "store_first_generation",
]
