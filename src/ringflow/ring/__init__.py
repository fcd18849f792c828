"""The token ring: Murmur3 tokens, ranges, token metadata, allocation, strategies, the sharder.

Pure code, no I/O. Reference: ``shared/reference/cassandra-core.md`` §1-4 and
``shared/reference/scylla-cdc.md`` §3. Everything public is re-exported here; the ``_`` modules
are private.
"""

from ringflow.ring._allocation import (
    MAX_TOKENS_PER_HOST,
    AllocatorName,
    allocate_balanced,
    allocate_random,
    grow_ring,
    random_token,
)
from ringflow.ring._errors import RingError
from ringflow.ring._murmur3 import (
    MAX_KEY_LENGTH_BYTES,
    check_key,
    murmur3_h1_reference,
    murmur3_token,
    murmur3_token_reference,
    normalise_token,
    partition_key_bytes,
)
from ringflow.ring._murmur3_numpy import murmur3_tokens, murmur3_tokens_of_matrix
from ringflow.ring._ownership import (
    HostOwnership,
    OwnershipReport,
    OwnershipSummary,
    ownership_report,
    summarise,
)
from ringflow.ring._replica_map import NO_HOST, ReplicaMap
from ringflow.ring._replication import (
    NetworkTopologyStrategy,
    Replica,
    ReplicationFactor,
    ReplicationStrategy,
    SimpleStrategy,
    replication_strategy,
)
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
from ringflow.ring._token_metadata import Host, TokenMetadata, as_token_array
from ringflow.ring._token_range import RING_SIZE_TOKENS, TokenRange

__all__ = [
    "AFTER_ALL_KEYS",
    "MAX_KEY_LENGTH_BYTES",
    "MAX_TOKEN",
    "MAX_TOKENS_PER_HOST",
    "MIN_TOKEN",
    "NO_HOST",
    "RING_SIZE_TOKENS",
    "AllocatorName",
    "Host",
    "HostOwnership",
    "NetworkTopologyStrategy",
    "OwnershipReport",
    "OwnershipSummary",
    "Replica",
    "ReplicaMap",
    "ReplicationFactor",
    "ReplicationStrategy",
    "RingError",
    "SimpleStrategy",
    "TokenMetadata",
    "TokenRange",
    "allocate_balanced",
    "allocate_random",
    "as_token_array",
    "bias",
    "check_key",
    "check_sharding",
    "check_token",
    "first_token_for_shard",
    "grow_ring",
    "murmur3_h1_reference",
    "murmur3_token",
    "murmur3_token_reference",
    "murmur3_tokens",
    "murmur3_tokens_of_matrix",
    "normalise_token",
    "ownership_report",
    "partition_key_bytes",
    "random_token",
    "replication_strategy",
    "shard_of",
    "summarise",
    "token_for_next_shard",
    "unbias",
]
