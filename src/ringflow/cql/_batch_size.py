"""Batch size guardrails: Cassandra's ``batch_size_warn_threshold`` and
``batch_size_fail_threshold`` (``BatchStatement.verifyBatchSize``). Pure.

Rules (as Cassandra 4):

* Only a batch spanning more than one partition is measured (CASSANDRA-10876).
* Its size is the data size of its partition updates: per row the clustering values, the row
  marker (8 bytes, 16 if expiring) and deletion (12), per cell 16 bytes (timestamp, TTL and
  local deletion time) plus its value and element path (``Cell.dataSize``).
* Above the warn threshold (5 KiB by default) the client gets a protocol warning naming the
  tables; above the fail threshold (50 KiB) the batch is refused with InvalidRequest
  ``Batch too large`` and nothing of it is applied.
"""

from __future__ import annotations

from collections.abc import Sequence

from ringflow.errors import InvalidRequest
from ringflow.schema import Cell, ColumnData, Mutation, Row

DEFAULT_WARN_BYTES = 5 * 1024
DEFAULT_FAIL_BYTES = 50 * 1024
_CELL_OVERHEAD_BYTES = 16
_LIVENESS_BYTES = 8
_EXPIRING_LIVENESS_BYTES = 16
_DELETION_BYTES = 12


def _cell_size(cell: Cell) -> int:
    return _CELL_OVERHEAD_BYTES + len(cell.value) + len(cell.path or b"")


def _column_size(data: ColumnData) -> int:
    if isinstance(data, Cell):
        return _cell_size(data)
    deletion = 0 if data.deletion is None else _DELETION_BYTES
    return deletion + sum(_cell_size(cell) for cell in data.cells)


def _row_size(row: Row) -> int:
    size = sum(len(value) for value in row.clustering)
    if row.liveness is not None:
        size += _EXPIRING_LIVENESS_BYTES if row.liveness.ttl_s else _LIVENESS_BYTES
    if row.deletion is not None:
        size += _DELETION_BYTES
    return size + sum(_column_size(data) for data in row.cells.values())


def mutation_data_size(mutation: Mutation) -> int:
    """Cassandra's ``PartitionUpdate.dataSize`` of ``mutation``."""
    rows = (*(() if mutation.static_row is None else (mutation.static_row,)), *mutation.rows)
    return sum(_row_size(row) for row in rows)


def _pretty(size: int) -> str:
    """``FBUtilities.prettyPrintMemory``: bytes below 1 KiB, else KiB/MiB with 3 decimals."""
    if size >= 1 << 20:
        return f"{size / (1 << 20):.3f}MiB"
    if size >= 1 << 10:
        return f"{size / (1 << 10):.3f}KiB"
    return f"{size}B"


def check_batch_size(mutations: Sequence[Mutation], warn_bytes: int, fail_bytes: int) -> str | None:
    """The warning for a batch of ``mutations`` above ``warn_bytes`` (None if within it, or
    within one partition); InvalidRequest above ``fail_bytes``."""
    partitions = {(m.keyspace, m.partition_key) for m in mutations}
    if len(partitions) <= 1:
        return None
    size = sum(mutation_data_size(mutation) for mutation in mutations)
    if size <= warn_bytes:
        return None
    if size > fail_bytes:
        raise InvalidRequest("Batch too large")
    tables = sorted({f"{m.keyspace}.{m.table}" for m in mutations})
    return (
        f"Batch for [{', '.join(tables)}] is of size {_pretty(size)}, exceeding specified "
        f"threshold of {_pretty(warn_bytes)} by {_pretty(size - warn_bytes)}."
    )
