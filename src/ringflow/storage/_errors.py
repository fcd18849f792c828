"""The storage layer's error types: who is at fault, and the CQL code each maps to.

Client mistakes (unknown table, wrong key arity, a mutation over the size limit) are
``InvalidRequest`` subclasses (0x2200), raised before anything is written. A read that meets more
tombstones than the limit is a read failure (0x1300), as Cassandra's
``TombstoneOverwhelmingException`` is. Bytes that do not decode as a stored or transmitted mutation
are a protocol violation (0x000A). A table registered twice under different ids is AlreadyExists.
A CDC write refused because the replica's capture is full is a CDC write failure (0x1600).
"""

from __future__ import annotations

from ringflow.errors import (
    AlreadyExists,
    ErrorCode,
    InvalidRequest,
    ProtocolViolation,
    RingflowError,
)


class UnknownTable(InvalidRequest):
    """The mutation or read names a table the store does not know."""


class InvalidMutation(InvalidRequest):
    """A mutation that does not fit its table: key arity, unknown column, bad cell shape."""


class MutationTooLarge(InvalidRequest):
    """One mutation is larger than ``StoreLimits.max_mutation_size_bytes``."""


class BatchTooLarge(InvalidRequest):
    """A batch holds more cells or mutations than ``StoreLimits`` allows."""


class ResultTooLarge(InvalidRequest):
    """A read would return more rows than ``StoreLimits.max_result_rows``; page it."""


class TableAlreadyRegistered(AlreadyExists):
    """``keyspace.table`` is registered already under another table id."""


class TooManyTombstones(RingflowError):
    """A read scanned more tombstones than ``StoreLimits.max_tombstones_per_read`` (0x1300)."""

    code = ErrorCode.READ_FAILURE


class HintBacklogFull(RingflowError):
    """A target host has ``StoreLimits.max_hints_per_target`` hints already (0x1001)."""

    code = ErrorCode.OVERLOADED


class StorageFailure(RingflowError):
    """SQLite failed under us (disk full, I/O error); the transaction was rolled back."""

    code = ErrorCode.SERVER_ERROR


class CaptureFull(RingflowError):
    """The replica's capture is over its cap (bytes or age) and the operator chose ``refuse``:
    CDC writes to this replica fail before anything is written (Cassandra 4's
    ``CDCWriteException`` when ``cdc_block_writes`` is on; the Python driver raises
    ``cassandra.protocol.CDCWriteException`` for 0x1600)."""

    code = ErrorCode.CDC_WRITE_FAILURE


class MutationDecodeError(ProtocolViolation):
    """Bytes that are not a valid encoding of a mutation (wrong version, shape or types)."""
