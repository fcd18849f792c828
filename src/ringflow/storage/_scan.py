"""Token-range scans: CQL rows in ring order, and raw partitions for streaming and repair.

A scan covers ``(start, end]`` on the ring, wrap-around included (split with
``_keys.token_segments``), in token order, then partition key bytes, then clustering order, and
returns one bounded page at a time with an opaque paging state naming the last row returned.
Resuming reads strictly after that row, so a page never repeats a row; rows written behind the
position between pages are not seen (Cassandra paging gives no snapshot either).

The row scan is one index range read of ``atoms`` merged with one of ``partition_atoms`` (a
merge join on ``(token, pk)``), so it costs no query per partition. A page resumed in the middle
of a partition reads that partition's static row again, so static values appear on every row.

Paging state (version 1): ``0x01`` + msgpack ``[kind, table uuid bytes, start, end, token, pk,
ck]``; it is checked against the table and range it is used with.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

import msgpack

from ringflow.errors import InvalidRequest
from ringflow.schema import Mutation
from ringflow.storage._catalog import TableInfo
from ringflow.storage._keys import MAX_TOKEN, MIN_TOKEN, token_segments
from ringflow.storage._read import (
    PartitionAtomTuple,
    PartitionTombstones,
    ResultRow,
    RowRequest,
    TombstoneBudget,
    assemble_rows,
    partition_groups,
    result_rows,
    split_static,
    stored_live_rows,
)
from ringflow.storage._sqlite_layout import (
    SELECT_ATOMS_AFTER,
    SELECT_PARTITION_ATOMS_AFTER,
    SELECT_PARTITIONS_AFTER,
    SELECT_STATIC_ROW,
)

PAGING_STATE_VERSION = 1
_ROWS, _PARTITIONS = "rows", "partitions"

Position = tuple[int, bytes, bytes]
"""(token, partition key bytes, ck) of the last row returned."""


@dataclass(frozen=True, slots=True)
class ScanPage:
    """One page of a row scan; ``paging_state`` is None when the range is exhausted."""

    rows: list[ResultRow]
    paging_state: bytes | None


@dataclass(frozen=True, slots=True)
class MutationPage:
    """One page of a raw scan: each partition's stored state, with its tombstones."""

    mutations: list[Mutation]
    paging_state: bytes | None
    tokens: list[int] = field(default_factory=list)
    """The token of each partition of ``mutations`` (as stored: a log table's is its stream
    id's), so a Merkle validation need not hash the keys again."""


@dataclass(frozen=True, slots=True)
class ScanRange:
    """The validated arguments every page of one scan shares."""

    table_id: uuid.UUID
    start_exclusive: int
    end_inclusive: int

    def __post_init__(self) -> None:
        for token in (self.start_exclusive, self.end_inclusive):
            if type(token) is not int or not MIN_TOKEN <= token <= MAX_TOKEN:
                raise InvalidRequest(f"token {token!r} is not a signed 64-bit integer")

    def segments(self) -> list[tuple[int, int]]:
        return token_segments(self.start_exclusive, self.end_inclusive)


def encode_paging_state(kind: str, scan: ScanRange, position: Position) -> bytes:
    body = [kind, scan.table_id.bytes, scan.start_exclusive, scan.end_inclusive, *position]
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return bytes([PAGING_STATE_VERSION]) + packed


def decode_paging_state(kind: str, scan: ScanRange, data: bytes) -> Position:
    """The position in ``data``; InvalidRequest unless it was made by this kind of scan of the
    same table and range."""
    problem = f"paging state {data[:40]!r} does not belong to this {kind} scan"
    if not isinstance(data, bytes) or not data or data[0] != PAGING_STATE_VERSION:
        raise InvalidRequest(problem)
    try:
        fields = msgpack.unpackb(data[1:], raw=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        raise InvalidRequest(problem) from None
    expected = [kind, scan.table_id.bytes, scan.start_exclusive, scan.end_inclusive]
    if type(fields) is not list or len(fields) != 7 or fields[:4] != expected:
        raise InvalidRequest(problem)
    token, pk, ck = fields[4:]
    if type(token) is not int or type(pk) is not bytes or type(ck) is not bytes:
        raise InvalidRequest(problem)
    return token, pk, ck


def first_segment(segments: list[tuple[int, int]], resume: Position | None) -> int:
    if resume is None:
        return 0
    for index, (low, high) in enumerate(segments):
        if low < resume[0] <= high:
            return index
    raise InvalidRequest(f"paging state token {resume[0]} is outside the scanned range")


class _TombstoneCursor:
    """Walks ``partition_atoms`` in (token, pk) order alongside the atoms of a scan."""

    def __init__(self, rows: Iterator[PartitionAtomTuple], budget: TombstoneBudget) -> None:
        self._rows = rows
        self._budget = budget
        self._next = next(rows, None)

    def take(self, key: tuple[int, bytes]) -> PartitionTombstones:
        found: list[PartitionAtomTuple] = []
        skipped = 0
        while self._next is not None and (self._next[0], self._next[1]) <= key:
            if (self._next[0], self._next[1]) == key:
                found.append(self._next)
            else:
                skipped += 1  # a partition holding only tombstones: nothing to return
            self._next = next(self._rows, None)
        if skipped or found:
            self._budget.add(skipped + len(found))
        return PartitionTombstones.of(found)


def _segment_rows(
    connection: sqlite3.Connection,
    info: TableInfo,
    segment_high: int,
    after: Position,
    resume: Position | None,
    request: RowRequest,
    budget: TombstoneBudget,
) -> Generator[tuple[Position, ResultRow], None, None]:
    atoms = connection.execute(SELECT_ATOMS_AFTER, (info.tid, segment_high, *after))
    partition_atoms = connection.execute(
        SELECT_PARTITION_ATOMS_AFTER, (info.tid, segment_high, after[0], after[1])
    )
    try:
        tombstone_cursor = _TombstoneCursor(partition_atoms, budget)
        for (token, pk), group in partition_groups(atoms):
            tombstones = tombstone_cursor.take((token, pk))
            stored = assemble_rows(info, group, budget, request.now_s)
            partition_request = resumed_request(request, resume, (token, pk))
            if partition_request is not request:
                static_atoms = connection.execute(SELECT_STATIC_ROW, (info.tid, token, pk))
                static = next(assemble_rows(info, static_atoms, budget, request.now_s), None)
            else:
                static, stored = split_static(stored)
            live = stored_live_rows(info, stored, tombstones, request.now_s)
            found = result_rows(info, (token, pk), static, live, tombstones, partition_request)
            for ck, row in found:
                yield (token, pk, ck), row
    finally:
        atoms.close()
        partition_atoms.close()


def resumed_request(
    request: RowRequest, resume: Position | None, partition: tuple[int, bytes]
) -> RowRequest:
    """How a scan page reads ``partition``: a partition the page resumes inside shows its
    static values on the rows past the position, but never its static-only row (the page
    before answered it, or the partition's first rows)."""
    if resume is not None and partition == resume[:2]:
        return RowRequest(request.columns, request.now_s, False)
    return request


SegmentRows = Callable[[int, Position], Generator[tuple[Position, ResultRow], None, None]]
"""The rows of one non-wrapping segment up to its high token, strictly after a position, each
with its position."""


def paged_rows(
    scan: ScanRange, page_size: int, resume: Position | None, segment_rows: SegmentRows
) -> ScanPage:
    """One page of at most ``page_size`` rows of ``scan`` after ``resume`` (or from the start),
    the segments read by ``segment_rows``."""
    segments = scan.segments()
    first = first_segment(segments, resume)
    rows: list[ResultRow] = []
    for index in range(first, len(segments)):
        low, high = segments[index]
        after = resume if index == first and resume is not None else (low + 1, b"", b"")
        found = segment_rows(high, after)
        for position, row in found:
            rows.append(row)
            if len(rows) >= page_size:
                found.close()
                return ScanPage(rows, encode_paging_state(_ROWS, scan, position))
    return ScanPage(rows, None)


def scan_rows(
    connection: sqlite3.Connection,
    info: TableInfo,
    scan: ScanRange,
    page_size: int,
    resume: Position | None,
    request: RowRequest,
    budget: TombstoneBudget,
) -> ScanPage:
    """One page of at most ``page_size`` live rows after ``resume`` (or from the start)."""

    def segment_rows(high: int, after: Position) -> Generator[tuple[Position, ResultRow]]:
        return _segment_rows(connection, info, high, after, resume, request, budget)

    return paged_rows(scan, page_size, resume, segment_rows)


def scan_partitions(
    connection: sqlite3.Connection,
    info: TableInfo,
    scan: ScanRange,
    page_size: int,
    resume: Position | None,
) -> tuple[list[tuple[int, bytes]], bytes | None]:
    """The ``(token, pk)`` of at most ``page_size`` stored partitions after ``resume``, and the
    paging state of the page (None when the range is exhausted)."""
    segments = scan.segments()
    first = first_segment(segments, resume)
    found: list[tuple[int, bytes]] = []
    for index in range(first, len(segments)):
        low, high = segments[index]
        token, pk = (resume[0], resume[1]) if index == first and resume else (low + 1, b"")
        wanted = page_size - len(found)
        params = (info.tid, high, token, pk, wanted) * 2 + (wanted,)
        found.extend(connection.execute(SELECT_PARTITIONS_AFTER, params).fetchall())
        if len(found) >= page_size:
            last_token, last_pk = found[-1]
            state = encode_paging_state(_PARTITIONS, scan, (last_token, last_pk, b""))
            return found, state
    return found, None


ROWS_KIND = _ROWS
PARTITIONS_KIND = _PARTITIONS
