"""The planner's rows in the edge cluster's replicated tables (REPLICATION.md decision 4).

Keyspace ``system_replication`` (SimpleStrategy, RF 3, like ``system_distributed``) holds the
channels (``_channels``) and these tables:

- ``slices``: one row per sealed slice per node: :class:`SealedSlice` (its digest, row count,
  when it was sealed). Partitioned by (keyspace, table, slice start), as ``sent``: a reader asks
  for the slice starts it still has to decide, one bounded partition each, never a partition
  that grows with the table's age.
- ``dead_letters``: change rows a destination refused as invalid, with the reason, kept until
  an operator replays or drops them (REPLICATION.md decision 8).

- ``seal_watermarks``: one row per (table, node): :class:`SealWatermark`. A node writes its
  sealed slices first and raises its watermark after, so a reader that sees the watermark sees
  the slices (both written and read at QUORUM).
- ``sent``: one row per copy delivered to a channel: :class:`SentRecord`. Decision 4 sketches it
  as one row per (channel, table, range, slice start); when copies mismatch several nodes'
  copies of one slice are sent, so the node is part of the key here. The partition is
  (keyspace, table, channel, slice start): a job or a node reads the records of the slice
  starts it still holds. Rows carry a TTL (``SENT_TTL_S``, 7 days): a node that comes back
  after longer resends its copies (more sends, never a loss).

Two more tables of the keyspace are **node-local and virtual** (SELECT only, answered by the
node that receives the query from its own capture, never coordinated; every write refused):

- ``captured_rows``: the rows of one slice this node holds, one CQL partition per slice key,
  clustered by arrival sequence ``seq``; ``row`` is the canonical bytes of the CDC log row
  (``decode_canonical_row`` gives its columns), ``row_digest`` its 64-bit digest (signed),
  ``origin`` the ``Origin`` value. The Spark source reads a slice from the node that sealed it,
  ``seq > ?`` a page at a time. A slice the node does not hold has no rows.
- ``local_slices``: the slices this node holds, one CQL partition per (keyspace, table), with
  counts, seal and publication state (status tools ask each node).

Column values are plain Python values as the driver gives them (str, int, bool, uuid.UUID,
bytes); ``table`` and ``order`` are CQL keywords, hence ``table_name``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Final, TypeVar

from ringflow.replication._channels import REPLICATION_KEYSPACE
from ringflow.replication._model import ReplicationArgumentError, SealedSlice, SliceKey
from ringflow.replication._planner import SealWatermark, SentRecord

WATERMARKS_TABLE: Final = "seal_watermarks"
SENT_TABLE: Final = "sent"
_WATERMARKS = f"{REPLICATION_KEYSPACE}.{WATERMARKS_TABLE}"
WATERMARKS_TABLE_CQL: Final = f"""CREATE TABLE IF NOT EXISTS {_WATERMARKS} (
    keyspace_name text,
    table_name text,
    node uuid,
    sealed_through_ms bigint,
    PRIMARY KEY ((keyspace_name, table_name), node)
)"""
SLICES_TABLE: Final = "slices"
DEAD_LETTERS_TABLE: Final = "dead_letters"
SENT_TTL_S: Final = 7 * 86_400
SENT_TABLE_CQL: Final = f"""CREATE TABLE IF NOT EXISTS {REPLICATION_KEYSPACE}.{SENT_TABLE} (
    keyspace_name text,
    table_name text,
    channel text,
    slice_start_ms bigint,
    range_start bigint,
    range_end bigint,
    out_of_sequence boolean,
    node uuid,
    digest blob,
    sent_at_ms bigint,
    PRIMARY KEY ((keyspace_name, table_name, channel, slice_start_ms), range_start, range_end,
        out_of_sequence, node)
) WITH default_time_to_live = {SENT_TTL_S}"""
SLICES_TABLE_CQL: Final = f"""CREATE TABLE IF NOT EXISTS {REPLICATION_KEYSPACE}.{SLICES_TABLE} (
    keyspace_name text,
    table_name text,
    slice_start_ms bigint,
    range_start bigint,
    range_end bigint,
    out_of_sequence boolean,
    node uuid,
    digest blob,
    row_count bigint,
    sealed_at_ms bigint,
    PRIMARY KEY ((keyspace_name, table_name, slice_start_ms), range_start, range_end,
        out_of_sequence, node)
) WITH default_time_to_live = {SENT_TTL_S}"""
CAPTURED_ROWS_TABLE: Final = "captured_rows"
_CAPTURED_ROWS = f"{REPLICATION_KEYSPACE}.{CAPTURED_ROWS_TABLE}"
CAPTURED_ROWS_TABLE_CQL: Final = f"""CREATE TABLE IF NOT EXISTS {_CAPTURED_ROWS} (
    keyspace_name text,
    table_name text,
    slice_start_ms bigint,
    range_start bigint,
    range_end bigint,
    out_of_sequence boolean,
    seq bigint,
    row_digest bigint,
    origin text,
    row blob,
    PRIMARY KEY ((keyspace_name, table_name, slice_start_ms, range_start, range_end,
        out_of_sequence), seq)
) WITH comment = 'node-local virtual table: the rows of one slice this node captured'"""
"""Node-local, virtual: the rows of one slice the receiving node holds (module docstring)."""
LOCAL_SLICES_TABLE: Final = "local_slices"
_LOCAL_SLICES = f"{REPLICATION_KEYSPACE}.{LOCAL_SLICES_TABLE}"
LOCAL_SLICES_TABLE_CQL: Final = f"""CREATE TABLE IF NOT EXISTS {_LOCAL_SLICES} (
    keyspace_name text,
    table_name text,
    slice_start_ms bigint,
    range_start bigint,
    range_end bigint,
    out_of_sequence boolean,
    row_count bigint,
    size_bytes bigint,
    opened_ms bigint,
    due_ms bigint,
    sealed boolean,
    sealed_at_ms bigint,
    digest blob,
    published boolean,
    published_at_ms bigint,
    PRIMARY KEY ((keyspace_name, table_name), slice_start_ms, range_start, range_end,
        out_of_sequence)
) WITH comment = 'node-local virtual table: the slices this node captured'"""
"""Node-local, virtual: the slices the receiving node holds; ``sealed_at_ms``, ``digest`` and
``published_at_ms`` are null until then (module docstring)."""
VIRTUAL_TABLES_CQL: Final = (CAPTURED_ROWS_TABLE_CQL, LOCAL_SLICES_TABLE_CQL)
_DEAD_LETTERS = f"{REPLICATION_KEYSPACE}.{DEAD_LETTERS_TABLE}"
DEAD_LETTERS_TABLE_CQL: Final = f"""CREATE TABLE IF NOT EXISTS {_DEAD_LETTERS} (
    channel text,
    failed_at timeuuid,
    keyspace_name text,
    table_name text,
    reason text,
    change text,
    PRIMARY KEY ((channel), failed_at)
)"""
"""``change`` is the refused change row as JSON (``pipeline`` writes and replays it)."""

_Value = TypeVar("_Value", str, int, bool, bytes, uuid.UUID)


def _column(row: Mapping[str, object], table: str, column: str, kind: type[_Value]) -> _Value:
    value = row.get(column)
    if value is None:
        raise ReplicationArgumentError(f"{table} row: column {column!r} is missing or null")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ReplicationArgumentError(
            f"{table} row: column {column!r} must be {kind.__name__}, got {value!r}"
        )
    return value


def watermark_to_row(mark: SealWatermark) -> dict[str, object]:
    """The column values of ``mark``'s row in ``system_replication.seal_watermarks``."""
    return {
        "keyspace_name": mark.keyspace,
        "table_name": mark.table,
        "node": mark.node,
        "sealed_through_ms": mark.sealed_through_ms,
    }


def watermark_from_row(row: Mapping[str, object]) -> SealWatermark:
    """A watermark from its row (unknown columns ignored; every value checked)."""
    table = WATERMARKS_TABLE
    return SealWatermark(
        node=_column(row, table, "node", uuid.UUID),
        keyspace=_column(row, table, "keyspace_name", str),
        table=_column(row, table, "table_name", str),
        sealed_through_ms=_column(row, table, "sealed_through_ms", int),
    )


def sent_to_row(record: SentRecord) -> dict[str, object]:
    """The column values of ``record``'s row in ``system_replication.sent``."""
    key = record.key
    return {
        "keyspace_name": key.keyspace,
        "table_name": key.table,
        "channel": record.channel,
        "range_start": key.range_start,
        "range_end": key.range_end,
        "slice_start_ms": key.slice_start_ms,
        "out_of_sequence": key.out_of_sequence,
        "node": record.node,
        "digest": record.digest,
        "sent_at_ms": record.sent_at_ms,
    }


def sent_from_row(row: Mapping[str, object]) -> SentRecord:
    """A sent record from its row (unknown columns ignored; every value checked)."""
    table = SENT_TABLE
    key = SliceKey(
        _column(row, table, "keyspace_name", str),
        _column(row, table, "table_name", str),
        _column(row, table, "range_start", int),
        _column(row, table, "range_end", int),
        _column(row, table, "slice_start_ms", int),
        _column(row, table, "out_of_sequence", bool),
    )
    return SentRecord(
        channel=_column(row, table, "channel", str),
        key=key,
        node=_column(row, table, "node", uuid.UUID),
        digest=_column(row, table, "digest", bytes),
        sent_at_ms=_column(row, table, "sent_at_ms", int),
    )


def sealed_slice_to_row(sealed: SealedSlice) -> dict[str, object]:
    """The column values of ``sealed``'s row in ``system_replication.slices``."""
    key = sealed.key
    return {
        "keyspace_name": key.keyspace,
        "table_name": key.table,
        "slice_start_ms": key.slice_start_ms,
        "range_start": key.range_start,
        "range_end": key.range_end,
        "out_of_sequence": key.out_of_sequence,
        "node": sealed.node,
        "digest": sealed.digest,
        "row_count": sealed.row_count,
        "sealed_at_ms": sealed.sealed_at_ms,
    }


def sealed_slice_from_row(row: Mapping[str, object]) -> SealedSlice:
    """A sealed slice from its row (unknown columns ignored; every value checked)."""
    table = SLICES_TABLE
    key = SliceKey(
        _column(row, table, "keyspace_name", str),
        _column(row, table, "table_name", str),
        _column(row, table, "range_start", int),
        _column(row, table, "range_end", int),
        _column(row, table, "slice_start_ms", int),
        _column(row, table, "out_of_sequence", bool),
    )
    return SealedSlice(
        key=key,
        node=_column(row, table, "node", uuid.UUID),
        digest=_column(row, table, "digest", bytes),
        row_count=_column(row, table, "row_count", int),
        sealed_at_ms=_column(row, table, "sealed_at_ms", int),
    )
