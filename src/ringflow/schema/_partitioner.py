"""Which partitioner places a table's partitions: Murmur3 for every table, except CDC log tables.

A CDC log table (``<table>_scylla_cdc_log``) uses Scylla's ``CDCPartitioner``
(``cdc/cdc_partitioner.cc``, reference scylla-cdc.md §1): the token of a log partition is the
stream id's first 8 bytes read as a signed big-endian int64 (normalised like ``dht::token``:
INT64_MIN becomes INT64_MAX), and a key that is not 16 bytes long maps to the minimum token.
That puts the log partition of a stream inside the base partition's vnode, so the store, the
coordinator's replica choice and ``token()`` must all use it for log tables, or reads ask the
wrong replicas.

Every one of them decides from the table's name and the partition key's bytes alone, so they
agree: a table named like a log whose key is not one 16-byte stream id cannot be a CDC log (a
user may create ``x_scylla_cdc_log`` when no CDC table claims the name, as Scylla allows) and is
placed by Murmur3 (Scylla marks its logs with the partitioner itself; ringflow's tables carry no
partitioner).
"""

from __future__ import annotations

from collections.abc import Sequence

from ringflow.ring import MIN_TOKEN, murmur3_token, normalise_token, partition_key_bytes
from ringflow.schema._table import CDC_LOG_SUFFIX

STREAM_ID_SIZE = 16


def is_cdc_log_table_name(table_name: str) -> bool:
    return table_name.endswith(CDC_LOG_SUFFIX)


def cdc_partitioner_token(key: bytes) -> int:
    """Scylla's CDCPartitioner token of a stream id."""
    if len(key) != STREAM_ID_SIZE:
        return MIN_TOKEN
    return normalise_token(int.from_bytes(key[:8], "big", signed=True))


def partition_token(table_name: str, partition_key: Sequence[bytes]) -> int:
    """The token of a partition of table ``table_name`` (RingError for keys Murmur3 refuses)."""
    return token_of_key_bytes(table_name, partition_key_bytes(partition_key))


def token_of_key_bytes(table_name: str, key: bytes) -> int:
    """The token of already-packed partition key bytes (one component is used as is)."""
    if is_cdc_log_table_name(table_name) and len(key) == STREAM_ID_SIZE:
        return cdc_partitioner_token(key)
    return murmur3_token(key)
