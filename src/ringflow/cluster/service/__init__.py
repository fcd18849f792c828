"""The cluster service: the shell that runs the cluster cores over a ``runtime`` (or the
simulator). Its modules are private; the names below are what tests and fuzzers may use
without reaching into them (issue 16: a valid message of every internode verb)."""

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
    "MEMBER_VERBS",
    "OPEN_VERBS",
    "VERB_STANDING",
    "Standing",
    "decode_failure",
    "encode_failure",
    "encode_internode_message",
    "encode_mutations_payload",
    "encode_unit",
    "sample_envelopes",
]
