"""The token ring: Murmur3 tokens, ranges, token metadata, allocation, strategies, the sharder.

Pure code, no I/O. Reference: ``shared/reference/cassandra-core.md`` §1-4 and
``shared/reference/scylla-cdc.md`` §3.
"""

from ringflow.ring._errors import RingError
from ringflow.ring._sharder import (
    AFTER_ALL_KEYS,
    MAX_TOKEN,
    MIN_TOKEN,
    bias,
    check_sharding,
    check_token,
    first_token_for_shard,
    shard_of,
    token_for_next_shard,
    unbias,
)

__all__ = [
    "AFTER_ALL_KEYS",
    "MAX_TOKEN",
    "MIN_TOKEN",
    "RingError",
    "bias",
    "check_sharding",
    "check_token",
    "first_token_for_shard",
    "shard_of",
    "token_for_next_shard",
    "unbias",
]
