"""The digest of a read response: MD5 over a canonical encoding of one partition's stored state.

Owns ``shared/reference/cassandra-core.md`` §7.2 "digest = MD5, ``Digest.forReadResponse``": the
coordinator asks one replica for data and the others for digests, and compares the digest of the
data response with theirs. Every replica and the coordinator must compute byte-identical digests
for equal data, so the encoding is ringflow's own canonical one (Cassandra's bytes are not
reproducible without its serializers, and no peer ever compares our digests with its own).

Rules:

* The input is a partition's raw stored state (tombstones and expired cells included, as the
  storage layer's ``read_mutation`` returns it), or ``None`` for "nothing stored". ``None`` and a
  mutation with no content digest alike: an empty partition adds no input bytes, as in Cassandra
  (CASSANDRA-8979), so the digest is MD5 of nothing.
* The partition is canonicalised first with ``merge_mutations`` against an empty update of the
  same partition: rows sorted by clustering bytes, each shadowed by its own deletion, empty rows
  dropped, range tombstones sorted and deduplicated. Two replicas that applied the same writes in
  any order therefore digest alike.
* Deletions (partition, range, row, collection) contribute their ``marked_for_delete_at`` only,
  as in Cassandra (``DeletionTime.digest``): the local deletion time is node-local metadata.
  Cells contribute timestamp, TTL, local deletion time, path and value; liveness its timestamp,
  TTL and expiration time. Column data is taken in column-name order.
* Every variable-length field is length-prefixed and every optional part is tagged, so distinct
  partitions cannot encode to the same bytes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from typing import Final

from ringflow.schema import (
    Cell,
    ClusteringBound,
    ColumnData,
    ComplexColumn,
    DeletionTime,
    LivenessInfo,
    Mutation,
    Row,
    merge_mutations,
)

DIGEST_SIZE_BYTES: Final = 16
"""MD5, as Cassandra's ``Digest.forReadResponse``."""
EMPTY_PARTITION_DIGEST: Final = hashlib.md5(b"").digest()
"""The digest of a partition with no content (or of no partition at all)."""

_INT64: Final = struct.Struct(">q")
_LENGTH: Final = struct.Struct(">I")
_ABSENT: Final = b"\x00"
_PRESENT: Final = b"\x01"


def canonical_partition(partition: Mutation | None) -> Mutation | None:
    """``partition`` in canonical form (see the module rules); ``None`` if it has no content."""
    if partition is None or partition.is_empty:
        return None
    empty = Mutation(partition.keyspace, partition.table, partition.partition_key)
    merged = merge_mutations(partition, empty)
    return None if merged.is_empty else merged


def partition_digest(partition: Mutation | None) -> bytes:
    """MD5 of the canonical encoding of ``partition`` (16 bytes)."""
    hasher = hashlib.md5()
    canonical = canonical_partition(partition)
    if canonical is not None:
        for chunk in _encode_partition(canonical):
            hasher.update(chunk)
    return hasher.digest()


def validation_digest(partition: Mutation) -> bytes:
    """:func:`partition_digest`, computed without the canonical merge when nothing in the
    partition can shadow or empty anything (no partition, range, row or collection deletion and
    no empty row): the stored state is then its own canonical form, so the digest is the same
    bytes, at a third of the cost (Merkle validation hashes every partition of a range)."""
    if partition.partition_deletion is not None or partition.range_tombstones:
        return partition_digest(partition)
    rows = (
        partition.rows if partition.static_row is None else (partition.static_row, *partition.rows)
    )
    for row in rows:
        if row.deletion is not None or (row.liveness is None and not row.cells):
            return partition_digest(partition)
        for data in row.cells.values():
            if isinstance(data, ComplexColumn) and (data.deletion is not None or not data.cells):
                return partition_digest(partition)
    if not partition.rows and partition.static_row is None:
        return EMPTY_PARTITION_DIGEST
    hasher = hashlib.md5()
    for chunk in _encode_partition(partition):
        hasher.update(chunk)
    return hasher.digest()


def _blob(value: bytes) -> bytes:
    return _LENGTH.pack(len(value)) + value


def _text(value: str) -> bytes:
    return _blob(value.encode("utf-8"))


def _int(value: int) -> bytes:
    return _INT64.pack(value)


def _deletion(deletion: DeletionTime | None) -> bytes:
    if deletion is None:
        return _ABSENT
    return _PRESENT + _int(deletion.marked_for_delete_at_us)


def _liveness(liveness: LivenessInfo | None) -> bytes:
    if liveness is None:
        return _ABSENT
    return (
        _PRESENT
        + _int(liveness.timestamp_us)
        + _int(liveness.ttl_s)
        + _int(liveness.local_expiration_time_s)
    )


def _cell(cell: Cell) -> bytes:
    path = _ABSENT if cell.path is None else _PRESENT + _blob(cell.path)
    return (
        _int(cell.timestamp_us)
        + _int(cell.ttl_s)
        + _int(cell.local_deletion_time_s)
        + path
        + _blob(cell.value)
    )


def _column(name: str, data: ColumnData) -> bytes:
    if isinstance(data, Cell):
        return _text(name) + b"s" + _cell(data)
    parts = [_text(name), b"c", _deletion(data.deletion), _LENGTH.pack(len(data.cells))]
    parts += [_cell(cell) for cell in data.cells]
    return b"".join(parts)


def _clustering(values: tuple[bytes, ...]) -> bytes:
    return _LENGTH.pack(len(values)) + b"".join(_blob(value) for value in values)


def _row(row: Row) -> bytes:
    parts = [
        _clustering(row.clustering),
        _liveness(row.liveness),
        _deletion(row.deletion),
        _LENGTH.pack(len(row.cells)),
    ]
    parts += [_column(name, row.cells[name]) for name in sorted(row.cells)]
    return b"".join(parts)


def _bound(bound: ClusteringBound) -> bytes:
    return _clustering(bound.prefix) + (_PRESENT if bound.inclusive else _ABSENT)


def _encode_partition(partition: Mutation) -> Iterator[bytes]:
    yield _text(partition.keyspace) + _text(partition.table)
    yield _clustering(partition.partition_key)
    yield _deletion(partition.partition_deletion)
    yield _LENGTH.pack(len(partition.range_tombstones))
    for tombstone in partition.range_tombstones:
        yield _bound(tombstone.start) + _bound(tombstone.end) + _deletion(tombstone.deletion)
    yield _ABSENT if partition.static_row is None else _PRESENT + _row(partition.static_row)
    yield _LENGTH.pack(len(partition.rows))
    for row in partition.rows:
        yield _row(row)
