"""The node-local virtual tables of ``system_replication``: SELECTs answered from this node's
own replica capture (seed 002; REPLICATION.md decision 6: "fetched from that node alone over
CQL (a node-local virtual table; the driver targets that host)"; issue 14 §3).

``CaptureTables`` is a row reader (``_exec_select.RowReader``) over ``Store.capture``, so a
SELECT on these tables runs through the executor's own planning, selection, LIMIT and paging:

* ``captured_rows`` (partition = one slice key, clustered by arrival ``seq``): read one
  partition at a time, every partition key column restricted by ``=`` (a slice key). Its rows
  are the slice's as stored (``StoreCapture.canonical_rows``), in arrival order, between the
  query's ``seq`` bounds; a slice the store does not hold, or a key no slice can have, reads as
  no rows. A scan (no partition key, or ALLOW FILTERING over part of it) is Invalid: a node's
  capture is read slice by slice.
* ``local_slices`` (partition = (keyspace, table), clustered by slice start, range and
  out-of-sequence): partition reads and token-range scans, paged with a state of this module's
  own (the last partition's token and key and the last clustering key read).

Both are read in clustering order only (``ORDER BY ... DESC`` is Invalid). Writes never reach
here: the processor refuses them (``Modification is not supported``, Cassandra's message for a
virtual table). The reads hold the store's lock one page at a time, like any store read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgpack

from ringflow.cql._exec_terms import partition_token
from ringflow.errors import InvalidRequest
from ringflow.replication import (
    CAPTURED_ROWS_TABLE,
    LOCAL_SLICES_TABLE,
    ReplicationArgumentError,
    SliceKey,
)
from ringflow.ring import MIN_TOKEN
from ringflow.schema import ClusteringBound, Table, deserialize, serialize
from ringflow.storage import CapturedSlice, ResultRow, ResultTooLarge, ScanPage, Store, StoreLimits

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
PAGE_ROWS_MAX: Final = 10_000
"""Most rows or slices taken from the capture per call (``StoreCapture``'s own page)."""
_STATE_TAG: Final = "ringflow-local-slices-1"
_ORDER_MESSAGE = "{table} is read in clustering order only: remove ORDER BY ... DESC"


class CaptureTables:
    """Rows of ``captured_rows`` and ``local_slices`` from ``store``'s capture (module
    docstring); one per SELECT."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def limits(self) -> StoreLimits:
        return self._store.limits

    def read_partition(
        self,
        table: Table,
        partition_key: Sequence[bytes],
        *,
        start: ClusteringBound = ClusteringBound(),  # noqa: B008 - frozen value object
        end: ClusteringBound = ClusteringBound(),  # noqa: B008 - frozen value object
        columns: Sequence[str] | None = None,
        reverse: bool = False,
        limit: int | None = None,
        now_s: int,
    ) -> list[ResultRow]:
        if reverse:
            raise InvalidRequest(_ORDER_MESSAGE.format(table=_name(table)))
        wanted = self.limits.max_result_rows + 1 if limit is None else limit
        key = tuple(partition_key)
        if table.name == CAPTURED_ROWS_TABLE:
            rows = self._captured_rows(table, key, start, end, wanted)
        else:
            rows = self._slice_rows(table, key, start, end, wanted)
        if limit is None and len(rows) > self.limits.max_result_rows:
            raise ResultTooLarge(
                f"{_name(table)}: more than {self.limits.max_result_rows} rows; page the query"
            )
        return rows

    def scan(
        self,
        table: Table,
        start_token_exclusive: int,
        end_token_inclusive: int,
        *,
        page_size: int,
        paging_state: bytes | None = None,
        columns: Sequence[str] | None = None,
        now_s: int,
    ) -> ScanPage:
        if table.name != LOCAL_SLICES_TABLE:
            raise InvalidRequest(
                f"{_name(table)} is read one slice at a time: restrict every partition key "
                f"column ({', '.join(c.name for c in table.partition_key_columns)}) with ="
            )
        resume = None if paging_state is None else _decode_state(paging_state)
        partitions = []
        for keyspace, name in self._store.capture.tables():
            key = (serialize(table.partition_key_columns[0].type, keyspace, "keyspace_name"),
                   serialize(table.partition_key_columns[1].type, name, "table_name"))  # fmt: skip
            token = partition_token(table, key)
            if _in_range(token, start_token_exclusive, end_token_inclusive):
                partitions.append((token, key))
        partitions.sort()
        rows: list[ResultRow] = []
        for token, key in partitions:
            after: ClusteringBound = ClusteringBound()
            if resume is not None:
                if (token, list(key)) < (resume[0], resume[1]):
                    continue
                if (token, list(key)) == (resume[0], resume[1]):
                    after = ClusteringBound(tuple(resume[2]), False)
            found = self._slice_rows(table, key, after, ClusteringBound(), page_size - len(rows))
            rows.extend(found)
            if len(rows) >= page_size:
                last = rows[-1]
                return ScanPage(rows, _encode_state(token, key, last.clustering))
        return ScanPage(rows, None)

    # -- captured_rows ----------------------------------------------------------------------

    def _captured_rows(
        self,
        table: Table,
        partition_key: tuple[bytes, ...],
        start: ClusteringBound,
        end: ClusteringBound,
        wanted: int,
    ) -> list[ResultRow]:
        key = _slice_key(table, partition_key)
        if key is None:
            return []
        after_seq, through_seq = _seq_bounds(table, start, end)
        token = partition_token(table, partition_key)
        seq_type = table.column("seq").type
        digest_type = table.column("row_digest").type
        rows: list[ResultRow] = []
        capture = self._store.capture
        while len(rows) < wanted and after_seq < through_seq:
            page = min(wanted - len(rows), PAGE_ROWS_MAX)
            found = capture.canonical_rows(
                key, after_seq=after_seq, through_seq=through_seq, limit=page
            )
            for row in found or ():
                values = {
                    "row_digest": serialize(digest_type, row.digest, "row_digest"),
                    "origin": row.origin.value.encode(),
                    "row": row.data,
                }
                clustering = (serialize(seq_type, row.seq, "seq"),)
                rows.append(ResultRow(token, partition_key, clustering, values))
            if not found or len(found) < page:
                break
            after_seq = found[-1].seq
        return rows

    # -- local_slices -----------------------------------------------------------------------

    def _slice_rows(
        self,
        table: Table,
        partition_key: tuple[bytes, ...],
        start: ClusteringBound,
        end: ClusteringBound,
        wanted: int,
    ) -> list[ResultRow]:
        keyspace, name = (
            deserialize(column.type, raw, column.name)
            for column, raw in zip(table.partition_key_columns, partition_key, strict=True)
        )
        if not isinstance(keyspace, str) or not isinstance(name, str) or not keyspace or not name:
            return []
        token = partition_token(table, partition_key)
        low = _clustering_values(table, start.prefix)
        high = _clustering_values(table, end.prefix)
        after = None
        if len(low) == len(table.clustering_columns) and not start.inclusive and low[0] >= 0:
            start_ms, range_start, range_end, out_of_sequence = low  # resuming after a row
            after = SliceKey(
                keyspace, name, int(range_start), int(range_end), int(start_ms),
                bool(out_of_sequence),
            )  # fmt: skip
        rows: list[ResultRow] = []
        capture = self._store.capture
        while len(rows) < wanted:
            found = capture.slices(keyspace=keyspace, table=name, after=after, limit=PAGE_ROWS_MAX)
            for captured in found:
                position = _position(captured.key)
                if not _after_start(position, low, start.inclusive):
                    continue
                if not _before_end(position, high, end.inclusive):
                    return rows
                rows.append(_slice_row(table, token, partition_key, captured))
                if len(rows) >= wanted:
                    return rows
            if len(found) < PAGE_ROWS_MAX:
                break
            after = found[-1].key
        return rows


def _name(table: Table) -> str:
    return f"{table.keyspace}.{table.name}"


def _slice_key(table: Table, partition_key: tuple[bytes, ...]) -> SliceKey | None:
    """The slice a ``captured_rows`` partition key names; None for one no slice can have."""
    values = [
        deserialize(column.type, raw, column.name)
        for column, raw in zip(table.partition_key_columns, partition_key, strict=True)
    ]
    keyspace, name, start, range_start, range_end, out_of_sequence = values
    if not (
        isinstance(keyspace, str)
        and isinstance(name, str)
        and isinstance(start, int)
        and isinstance(range_start, int)
        and isinstance(range_end, int)
        and isinstance(out_of_sequence, bool)
    ):
        return None
    try:
        return SliceKey(keyspace, name, range_start, range_end, start, out_of_sequence)
    except ReplicationArgumentError:  # e.g. a negative slice start: nothing captured there
        return None


def _seq_bounds(table: Table, start: ClusteringBound, end: ClusteringBound) -> tuple[int, int]:
    """``(after, through]``: the arrival sequences a ``seq`` slice of the query covers."""
    seq_type = table.column("seq").type
    after, through = _INT64_MIN, _INT64_MAX
    if start.prefix:
        value = deserialize(seq_type, start.prefix[0], "seq")
        assert isinstance(value, int)
        after = value - 1 if start.inclusive else value
    if end.prefix:
        value = deserialize(seq_type, end.prefix[0], "seq")
        assert isinstance(value, int)
        through = value if end.inclusive else value - 1
    return after, through


Position = tuple[int, int, int, bool]
"""A slice's clustering key in ``local_slices``: slice start, range start, range end, oos."""


def _position(key: SliceKey) -> Position:
    return (key.slice_start_ms, key.range_start, key.range_end, key.out_of_sequence)


def _clustering_values(table: Table, prefix: tuple[bytes, ...]) -> tuple[int, ...]:
    """A ``local_slices`` clustering prefix as values (bigints and a boolean: all ints)."""
    values = []
    for column, raw in zip(table.clustering_columns, prefix, strict=False):
        value = deserialize(column.type, raw, column.name)
        if not isinstance(value, int):
            raise InvalidRequest(f"{_name(table)}: bad {column.name} bound {value!r}")
        values.append(value)
    return tuple(values)


def _after_start(position: Position, low: tuple[int, ...], inclusive: bool) -> bool:
    if not low:
        return True
    head = position[: len(low)]
    return head >= low if inclusive else head > low


def _before_end(position: Position, high: tuple[int, ...], inclusive: bool) -> bool:
    if not high:
        return True
    head = position[: len(high)]
    return head <= high if inclusive else head < high


def _slice_row(
    table: Table, token: int, partition_key: tuple[bytes, ...], captured: CapturedSlice
) -> ResultRow:
    key = captured.key
    clustering = tuple(
        serialize(column.type, value, column.name)
        for column, value in zip(table.clustering_columns, _position(key), strict=True)
    )
    found: dict[str, object] = {
        "row_count": captured.row_count,
        "size_bytes": captured.size_bytes,
        "opened_ms": captured.opened_ms,
        "due_ms": captured.due_ms,
        "sealed": captured.sealed,
        "sealed_at_ms": captured.sealed_ms,
        "digest": captured.digest,
        "published": captured.published,
        "published_at_ms": captured.published_ms,
    }
    values = {
        name: serialize(table.column(name).type, value, name)
        for name, value in found.items()
        if value is not None
    }
    return ResultRow(token, partition_key, clustering, values)


def _in_range(token: int, start_exclusive: int, end_inclusive: int) -> bool:
    """``token`` in ``(start, end]``, wrapping when ``start >= end`` (``end`` MIN_TOKEN: to the
    end of the ring)."""
    if end_inclusive == MIN_TOKEN:  # Murmur3 never gives MIN_TOKEN
        return token > start_exclusive
    if start_exclusive < end_inclusive:
        return start_exclusive < token <= end_inclusive
    return token > start_exclusive or token <= end_inclusive


def _encode_state(token: int, key: tuple[bytes, ...], clustering: tuple[bytes, ...]) -> bytes:
    state: bytes = msgpack.packb([_STATE_TAG, token, list(key), list(clustering)])
    return state


def _decode_state(state: bytes) -> tuple[int, list[bytes], list[bytes]]:
    problem = InvalidRequest("invalid paging state for system_replication.local_slices")
    try:
        tag, token, key, clustering = msgpack.unpackb(state, raw=False)
    except Exception:
        raise problem from None
    if (
        tag != _STATE_TAG
        or type(token) is not int
        or type(key) is not list
        or type(clustering) is not list
        or any(type(part) is not bytes for part in (*key, *clustering))
    ):
        raise problem
    return token, key, clustering
