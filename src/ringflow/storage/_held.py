"""Reads of partitions held in memory, answered as the store answers its own. Pure.

A coordinated read (``ringflow.cluster.service``) ends with the reconciled raw partitions of
the replicas as :class:`Mutation` values: every row merged, every tombstone and expired cell
still there (what :meth:`Store.read_mutation` gives). :class:`HeldTable` answers CQL reads from
them with the functions the store reads its own rows with (``_read``: shadowing by partition,
range and row deletions, TTLs at ``now_s``, static rows, the static-only row, column
projection; ``_scan``: ring order and paging states), so a coordinated SELECT costs no store
round trip and returns exactly what the store would after applying the same partitions:
``tests/unit/storage/test_store_stateful.py`` checks that after every step of its model.

The limits are the store's: ``max_result_rows`` for a partition read, ``max_page_size_rows``
for a scan page, ``max_tombstones_per_read`` counted as a store read counts them.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass

from ringflow.schema import ClusteringBound, Mutation, Row, Table, merge_rows
from ringflow.storage._catalog import TableInfo
from ringflow.storage._keys import STATIC_CK, end_key, row_key, start_key
from ringflow.storage._limits import StoreLimits
from ringflow.storage._read import (
    PartitionTombstones,
    ResultRow,
    RowRequest,
    StoredRangeTombstone,
    StoredRow,
    TombstoneBudget,
    checked_page_size,
    checked_result,
    result_rows,
    row_cap,
    row_request,
    row_tombstones,
    stored_live_rows,
    stored_row_of,
)
from ringflow.storage._scan import (
    ROWS_KIND,
    Position,
    ScanPage,
    ScanRange,
    decode_paging_state,
    paged_rows,
    resumed_request,
)
from ringflow.storage._write import partition_position

_NO_BOUND = ClusteringBound()


@dataclass(frozen=True, slots=True)
class HeldPartition:
    """One partition's raw state as the store would hold it: its ring position, its static
    row, its clustered rows in clustering order (by ``ck``) and its tombstones."""

    token: int
    pk: bytes
    static: StoredRow | None
    rows: tuple[StoredRow, ...]
    tombstones: PartitionTombstones


class HeldTable:
    """Reads of one table's partitions held in memory (the module docstring)."""

    def __init__(self, table: Table, limits: StoreLimits) -> None:
        self.table = table
        self.limits = limits
        self.info = TableInfo.of(0, table)

    def hold(self, mutation: Mutation) -> HeldPartition:
        """``mutation`` (a raw partition of this table) as the store would hold it: cells of
        columns the table does not have, or had dropped when they were written, left out."""
        info = self.info
        token, pk = partition_position(info, mutation.partition_key)
        static = None
        if mutation.static_row is not None:
            static = stored_row_of(info, STATIC_CK, mutation.static_row)
        by_ck: dict[bytes, Row] = {}
        for row in mutation.rows:
            ck = row_key(info.encode_clustering, row.clustering)
            prior = by_ck.get(ck)
            by_ck[ck] = row if prior is None else merge_rows(prior, row)
        rows = tuple(stored_row_of(info, ck, by_ck[ck]) for ck in sorted(by_ck))
        ranges = tuple(
            StoredRangeTombstone(
                start_key(info.encode_clustering, tombstone.start),
                end_key(info.encode_clustering, tombstone.end),
                tombstone.deletion,
                b"",
            )
            for tombstone in mutation.range_tombstones
        )
        return HeldPartition(
            token, pk, static, rows, PartitionTombstones(mutation.partition_deletion, ranges)
        )

    def interval(self, start: ClusteringBound, end: ClusteringBound) -> tuple[bytes, bytes]:
        """The rows ``start`` .. ``end`` as a half-open interval ``[low, high)`` of ``ck`` (a
        partition held for one interval answers the reads of any interval inside it)."""
        encode = self.info.encode_clustering
        return start_key(encode, start), end_key(encode, end)

    def read_partition(
        self,
        partition: HeldPartition | None,
        *,
        start: ClusteringBound = _NO_BOUND,
        end: ClusteringBound = _NO_BOUND,
        columns: Sequence[str] | None = None,
        reverse: bool = False,
        limit: int | None = None,
        now_s: int,
    ) -> list[ResultRow]:
        """:meth:`Store.read_partition` of ``partition`` (None: nothing stored)."""
        info = self.info
        cap = row_cap(self.limits, limit)
        unrestricted = start.is_unbounded and end.is_unbounded
        request = row_request(info, columns, now_s, unrestricted)
        if partition is None:
            return []
        low = start_key(info.encode_clustering, start)
        high = end_key(info.encode_clustering, end)
        budget = TombstoneBudget(self.limits.max_tombstones_per_read)
        tombstones = partition.tombstones
        budget.add(len(tombstones.ranges) + (tombstones.partition_deletion is not None))
        static = partition.static if info.static_columns else None
        if static is not None:
            budget.add(row_tombstones(static.row, now_s))
        sliced = [stored for stored in partition.rows if low <= stored.ck < high]
        if reverse:
            sliced.reverse()
        live = stored_live_rows(info, _counted(sliced, budget, now_s), tombstones, now_s)
        rows: list[ResultRow] = []
        position = (partition.token, partition.pk)
        for _ck, row in result_rows(info, position, static, live, tombstones, request):
            rows.append(row)
            if len(rows) >= cap:
                break
        return checked_result(info, rows, self.limits)

    def scan(
        self,
        partitions: Sequence[HeldPartition],
        start_token_exclusive: int,
        end_token_inclusive: int,
        *,
        page_size: int,
        paging_state: bytes | None = None,
        columns: Sequence[str] | None = None,
        now_s: int,
    ) -> ScanPage:
        """:meth:`Store.scan` of ``partitions`` (in any order; those outside the range are
        skipped): one page of rows in ring order, and the state of the next."""
        page_size = checked_page_size(self.limits, page_size)
        scan = ScanRange(self.table.id, start_token_exclusive, end_token_inclusive)
        resume = None
        if paging_state is not None:
            resume = decode_paging_state(ROWS_KIND, scan, paging_state)
        request = row_request(self.info, columns, now_s, True)
        budget = TombstoneBudget(self.limits.max_tombstones_per_read)
        ordered = sorted(partitions, key=lambda held: (held.token, held.pk))

        def segment_rows(high: int, after: Position) -> Generator[tuple[Position, ResultRow]]:
            return self._segment_rows(ordered, high, after, resume, request, budget)

        return paged_rows(scan, page_size, resume, segment_rows)

    def _segment_rows(
        self,
        ordered: Sequence[HeldPartition],
        high: int,
        after: Position,
        resume: Position | None,
        request: RowRequest,
        budget: TombstoneBudget,
    ) -> Generator[tuple[Position, ResultRow]]:
        """The rows of ``ordered`` after ``after`` up to token ``high``, as ``_scan`` reads
        them: a resumed partition's rows past the position, with its static values and no
        static-only row."""
        info, now_s = self.info, request.now_s
        for held in ordered:
            if (held.token, held.pk) < after[:2] or held.token > high:
                continue
            tombstones = held.tombstones
            budget.add(len(tombstones.ranges) + (tombstones.partition_deletion is not None))
            stored: Iterable[StoredRow] = held.rows
            if (held.token, held.pk) == after[:2]:
                stored = [row for row in held.rows if row.ck > after[2]]
            partition_request = resumed_request(request, resume, (held.token, held.pk))
            static = held.static
            if static is not None:
                budget.add(row_tombstones(static.row, now_s))
            live = stored_live_rows(info, _counted(stored, budget, now_s), tombstones, now_s)
            position = (held.token, held.pk)
            for ck, row in result_rows(info, position, static, live, tombstones, partition_request):
                yield (held.token, held.pk, ck), row


def _counted(rows: Iterable[StoredRow], budget: TombstoneBudget, now_s: int) -> Iterator[StoredRow]:
    """``rows``, each one's tombstones added to ``budget`` as it is read (a read that stops
    early counts no further, as the store's does)."""
    for stored in rows:
        count = row_tombstones(stored.row, now_s)
        if count:
            budget.add(count)
        yield stored
