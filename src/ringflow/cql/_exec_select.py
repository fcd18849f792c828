"""SELECT execution: the read plan, row sources over the store, limits, ordering and paging.

Rules:

* Partition keys restricted by ``=``/``IN`` are read partition by partition, in the order of their
  values (sorted by type and de-duplicated, as Cassandra does), each over its clustering slices in
  clustering order (reversed for an ``ORDER BY`` against the table's order); anything else is a
  token-range scan in ring order.
* A page holds at most ``page_size`` rows (capped by ``ExecutorLimits.max_page_size_rows``);
  no page size means one unpaged answer, refused past ``max_unpaged_rows``. Each page examines at
  most ``max_rows_examined_per_page`` stored rows (filtering, per-partition limits), so a page
  may come back short, with a paging state, as Cassandra's may.
* The paging state is opaque to clients: ``0x01`` + msgpack ``[fingerprint, rows returned so
  far, partition index, slice index, last clustering, store scan state, last partition key, rows
  of it returned, last group key]``. The fingerprint (8 bytes of the statement's id) must
  match, so a state cannot be replayed against another query. Row sources never stop inside a
  batch, so the state always names a position the store can resume from.
* ``LIMIT`` counts rows over all pages; ``PER PARTITION LIMIT`` and ``DISTINCT`` (a per-partition
  limit of 1) skip the rest of a partition when reading by key; aggregates read every row (up to
  ``max_aggregate_rows``) and answer one unpaged row.
* ``GROUP BY`` pages count groups, as Cassandra's ``GroupByPagingState``: a page holds up to
  ``page_size`` groups, each folded whole (at most ``max_aggregate_rows`` rows read per page); it
  ends at a group boundary, the position put back to just after the last row of its last group
  (the batch that crossed the boundary is read again up to there) and the state naming that
  group, whose rows a resumed page skips; ``LIMIT`` and ``PER PARTITION LIMIT`` count groups
  across pages.
* ``ORDER BY`` needs the partition key restricted by ``=``/``IN`` and follows the clustering
  columns in key order; across several partitions the rows are sorted by clustering, which cannot
  be paged (Cassandra's message).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import msgpack

from ringflow.cql._ast import SelectStatement, Term
from ringflow.cql._exec_common import ExecutorLimits, StatementContext
from ringflow.cql._exec_group import GroupedRows
from ringflow.cql._exec_group import group_width as _group_width
from ringflow.cql._exec_selectors import Selection, compile_selection, value_getter
from ringflow.cql._exec_terms import partition_token, term_value
from ringflow.cql._exec_where import (
    Key,
    Restrictions,
    RowFilter,
    Slice,
    TokenBounds,
    analyze_where,
    filter_matches,
    require_no_filtering,
)
from ringflow.cql._json_values import json_object
from ringflow.cql._results import ColumnSpec, RowsMetadata, RowsResult
from ringflow.cql._wire import UNSET
from ringflow.errors import InternalError, InvalidRequest
from ringflow.ring import MIN_TOKEN
from ringflow.schema import (
    INT,
    TEXT,
    ClusteringBound,
    ClusteringOrder,
    ColumnKind,
    Table,
    compare,
    encode_clustering,
    serialize,
)
from ringflow.storage import ResultRow, ScanPage, StoreLimits

PAGING_STATE_VERSION = 1
ORDER_BY_PAGING_MESSAGE = (
    "Cannot page queries with both ORDER BY and a IN restriction on the partition key; you must "
    "either remove the ORDER BY or the IN and sort client side, or disable paging for this query"
)


class RowReader(Protocol):
    """Where a SELECT's rows come from: a ``Store`` (the local one), a cluster node's reader of
    the coordinator's reconciled partitions, or the node-local virtual tables
    (``_exec_virtual``)."""

    @property
    def limits(self) -> StoreLimits: ...

    def read_partition(
        self,
        table: Table,
        partition_key: Sequence[bytes],
        *,
        start: ClusteringBound = ...,
        end: ClusteringBound = ...,
        columns: Sequence[str] | None = ...,
        reverse: bool = ...,
        limit: int | None = ...,
        now_s: int,
    ) -> list[ResultRow]: ...

    def scan(
        self,
        table: Table,
        start_token_exclusive: int,
        end_token_inclusive: int,
        *,
        page_size: int,
        paging_state: bytes | None = ...,
        columns: Sequence[str] | None = ...,
        now_s: int,
    ) -> ScanPage: ...


_T = TypeVar("_T")
Steps = Generator["Sequence[object]", None, _T]
"""A SELECT run in steps (``select_steps``): each step yields the reads its reader lacks
(``RowsNotHeld.reads``) and is resumed once the reader holds them; it returns the answer."""


class RowsNotHeld(Exception):
    """A reader lacks rows it must read first (a cluster node's coordinated reader: slices and
    range chunks not held yet). ``reads`` are the reader's own descriptions of them; a SELECT
    in steps yields them, and calls the reader again once they are held."""

    def __init__(self, reads: Sequence[object]) -> None:
        super().__init__(f"{len(reads)} reads not held yet")
        self.reads = reads


def _held(read: Callable[[], _T]) -> Steps[_T]:
    """``read()``, once its reader holds what it needs."""
    while True:
        try:
            return read()
        except RowsNotHeld as lacking:
            yield lacking.reads


def run_steps(steps: Steps[_T]) -> _T:
    """The answer of steps whose reader reads at once (a store): no step may yield."""
    try:
        lacking = next(steps)
    except StopIteration as done:
        answer: _T = done.value
        return answer
    steps.close()
    raise InternalError(f"a reader that reads at once lacked {len(lacking)} reads")


@dataclass(frozen=True, slots=True)
class PageRequest:
    page_size: int | None
    paging_state: bytes | None
    skip_metadata: bool
    fingerprint: bytes


@dataclass(slots=True)
class _Position:
    returned: int = 0
    partition_index: int = 0
    slice_index: int = 0
    last_clustering: Key | None = None
    scan_state: bytes | None = None
    last_partition: Key | None = None
    partition_rows: int = 0
    last_group: Key | None = None
    """``GROUP BY``: the key of the last group answered (its rows are not read again)."""


def _encode_state(fingerprint: bytes, position: _Position) -> bytes:
    body = [
        fingerprint,
        position.returned,
        position.partition_index,
        position.slice_index,
        None if position.last_clustering is None else list(position.last_clustering),
        position.scan_state,
        None if position.last_partition is None else list(position.last_partition),
        position.partition_rows,
        None if position.last_group is None else list(position.last_group),
    ]
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return bytes([PAGING_STATE_VERSION]) + packed


def _decode_state(fingerprint: bytes, data: bytes) -> _Position:
    problem = InvalidRequest("Invalid value for the paging state")
    if not data or data[0] != PAGING_STATE_VERSION:
        raise problem
    try:
        fields = msgpack.unpackb(data[1:], raw=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        raise problem from None
    if type(fields) is not list or len(fields) != 9 or fields[0] != fingerprint:
        raise problem
    _, returned, partition_index, slice_index, last_ck, scan_state, last_pk, rows, group = fields
    ints = (returned, partition_index, slice_index, rows)
    if any(type(value) is not int or value < 0 for value in ints):
        raise problem
    if scan_state is not None and type(scan_state) is not bytes:
        raise problem
    for key in (last_ck, last_pk, group):
        if key is not None and (type(key) is not list or any(type(p) is not bytes for p in key)):
            raise problem
    return _Position(
        returned,
        partition_index,
        slice_index,
        None if last_ck is None else tuple(last_ck),
        scan_state,
        None if last_pk is None else tuple(last_pk),
        rows,
        None if group is None else tuple(group),
    )


# --- row sources ---------------------------------------------------------------------------------


class _PartitionSource:
    """Rows of listed partitions, slice by slice; stops only between store reads."""

    def __init__(
        self,
        store: RowReader,
        table: Table,
        keys: Sequence[Key],
        slices: Sequence[Slice],
        reverse: bool,
        columns: Sequence[str] | None,
        now_s: int,
        position: _Position,
    ) -> None:
        self.store, self.table, self.keys = store, table, keys
        self.slices = list(reversed(slices)) if reverse else list(slices)
        self.reverse, self.columns, self.now_s = reverse, columns, now_s
        self.position = position

    @property
    def exhausted(self) -> bool:
        return self.position.partition_index >= len(self.keys) or not self.slices

    def _advance_slice(self) -> None:
        position = self.position
        position.last_clustering = None
        position.slice_index += 1
        if position.slice_index >= len(self.slices):
            position.slice_index = 0
            position.partition_index += 1

    def skip_partition(self, key: Key) -> None:
        position = self.position
        if not self.exhausted and self.keys[position.partition_index] == key:
            position.last_clustering = None
            position.slice_index = 0
            position.partition_index += 1

    def next_batch(self, count: int) -> Steps[list[ResultRow]]:
        rows: list[ResultRow] = []
        position = self.position
        while len(rows) < count and not self.exhausted:
            piece = self.slices[position.slice_index]
            start, end = piece.start, piece.end
            if position.last_clustering is not None:
                resume = ClusteringBound(position.last_clustering, False)
                start, end = (start, resume) if self.reverse else (resume, end)
            wanted = count - len(rows)
            read = functools.partial(
                self.store.read_partition,
                self.table,
                self.keys[position.partition_index],
                start=start,
                end=end,
                columns=self.columns,
                reverse=self.reverse,
                limit=wanted,
                now_s=self.now_s,
            )
            found = yield from _held(read)
            rows.extend(found)
            last = found[-1] if found else None
            if (
                last is not None
                and len(found) == wanted
                and last.clustering
                and not last.static_only
            ):
                position.last_clustering = last.clustering
                break
            self._advance_slice()
        return rows


class _ScanSource:
    """Rows of a token range, through the store's own paging."""

    def __init__(
        self,
        store: RowReader,
        table: Table,
        tokens: TokenBounds,
        columns: Sequence[str] | None,
        now_s: int,
        position: _Position,
    ) -> None:
        self.store, self.table, self.tokens = store, table, tokens
        self.columns, self.now_s, self.position = columns, now_s, position
        self._exhausted = tokens.is_empty

    @property
    def exhausted(self) -> bool:
        return self._exhausted

    def skip_partition(self, key: Key) -> None:
        return None

    def next_batch(self, count: int) -> Steps[list[ResultRow]]:
        size = min(count, self.store.limits.max_page_size_rows)
        high = MIN_TOKEN if self.tokens.high is None else self.tokens.high
        scan = functools.partial(
            self.store.scan,
            self.table,
            self.tokens.low,
            high,
            page_size=size,
            paging_state=self.position.scan_state,
            columns=self.columns,
            now_s=self.now_s,
        )
        page = yield from _held(scan)
        self.position.scan_state = page.paging_state
        self._exhausted = page.paging_state is None
        return page.rows


_Source = _PartitionSource | _ScanSource


# --- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SelectPlan:
    """A SELECT planned (:func:`plan_select`): its statement, its context and its plan."""

    statement: SelectStatement
    context: StatementContext
    plan: _Plan


@dataclass(frozen=True, slots=True)
class _Plan:
    table: Table
    selection: Selection
    restrictions: Restrictions
    filters: tuple[RowFilter, ...]
    reverse: bool
    limit: int | None
    per_partition_limit: int | None
    keys: tuple[Key, ...] | None
    group_width: int | None = None
    """``GROUP BY``: the primary key components a group shares (``_exec_group``)."""
    json: bool = False
    """``SELECT JSON``: each row answered as one ``[json]`` text (``_json_values``)."""

    def accepts(self, row: ResultRow) -> bool:
        return all(
            filter_matches(f, lambda column: value_getter(column)(row)) for f in self.filters
        )


def _positive(term: Term | None, name: str, context: StatementContext) -> int | None:
    if term is None:
        return None
    value = term_value(term, INT, name, context)
    if value is None or value is UNSET:
        return None
    assert isinstance(value, int)
    if value <= 0:
        label = "LIMIT" if name == "[limit]" else "PER PARTITION LIMIT"
        raise InvalidRequest(f"{label} must be strictly positive")
    return value


def _reverse(statement: SelectStatement, table: Table, restrictions: Restrictions) -> bool:
    if not statement.order_by:
        return False
    if restrictions.partition_keys is None:
        raise InvalidRequest(
            "ORDER BY is only supported when the partition key is restricted by an EQ or an IN."
        )
    flags = []
    for position, item in enumerate(statement.order_by):
        column = table.column(item.column)
        if column.kind is not ColumnKind.CLUSTERING:
            raise InvalidRequest(
                "Order by is currently only supported on the clustered columns of the PRIMARY "
                f"KEY, got {column.name}"
            )
        if column.position != position:
            raise InvalidRequest(
                "Order by currently only supports the ordering of columns following their "
                "declared order in the PRIMARY KEY"
            )
        flags.append(item.descending != (column.order is ClusteringOrder.DESC))
    if len(set(flags)) > 1:
        raise InvalidRequest("Unsupported order by relation")
    return flags[0]


def _sorted_keys(table: Table, restrictions: Restrictions) -> tuple[Key, ...]:
    """The restricted partition keys in Cassandra's order: sorted by the key columns' types and
    de-duplicated (``StatementRestrictions`` builds them with the table's partition key
    comparator), not in ring order; those outside a ``token()`` restriction are left out."""
    keys = restrictions.partition_keys or ()
    tokens = restrictions.token_range
    kept = [
        key
        for key in dict.fromkeys(keys)
        if tokens is None or tokens.contains(partition_token(table, key))
    ]
    columns = table.partition_key_columns

    def by_value(left: Key, right: Key) -> int:
        for column, a, b in zip(columns, left, right, strict=True):
            order = compare(column.type.frozen_form(), a, b)
            if order:
                return order
        return 0

    return tuple(sorted(kept, key=functools.cmp_to_key(by_value)))


def _plan(
    statement: SelectStatement, table: Table, context: StatementContext, limits: ExecutorLimits
) -> _Plan:
    selection = compile_selection(statement, table, context)
    restrictions = analyze_where(table, statement.where, context, limits)
    require_no_filtering(restrictions, statement.allow_filtering)
    per_partition = _positive(statement.per_partition_limit, "[per_partition_limit]", context)
    group_width = None
    if statement.group_by:
        group_width = _group_width(
            statement.group_by, table, restrictions, distinct=statement.distinct
        )
    if statement.distinct:
        if statement.per_partition_limit is not None:  # Cassandra's SelectStatement check
            raise InvalidRequest("PER PARTITION LIMIT is not allowed with SELECT DISTINCT queries")
        per_partition = 1
    keys = None if restrictions.partition_keys is None else _sorted_keys(table, restrictions)
    return _Plan(
        table=table,
        selection=selection,
        restrictions=restrictions,
        filters=restrictions.filters,
        reverse=_reverse(statement, table, restrictions),
        limit=_positive(statement.limit, "[limit]", context),
        per_partition_limit=per_partition,
        keys=keys,
        group_width=group_width,
        json=statement.json,
    )


def _read_columns(plan: _Plan) -> list[str] | None:
    wanted = plan.selection.read_columns
    if wanted is None:
        return None
    names = set(wanted)
    for row_filter in plan.filters:
        names.update(c.name for c in row_filter.columns if not c.is_primary_key)
    return sorted(names)


def _source(plan: _Plan, store: RowReader, now_s: int, position: _Position) -> _Source:
    columns = _read_columns(plan)
    if plan.keys is not None:
        slices = plan.restrictions.slices(plan.table)
        return _PartitionSource(
            store, plan.table, plan.keys, slices, plan.reverse, columns, now_s, position
        )
    tokens = plan.restrictions.token_range or TokenBounds()
    return _ScanSource(store, plan.table, tokens, columns, now_s, position)


def _collect(
    source: _Source, plan: _Plan, wanted: int, examined_cap: int, *, apply_limit: bool = True
) -> Steps[list[ResultRow]]:
    """Up to ``wanted`` accepted rows from ``source``, advancing its position."""
    position = source.position
    limit = plan.limit if apply_limit else None
    per_partition = plan.per_partition_limit
    out: list[ResultRow] = []
    examined = 0
    while len(out) < wanted and not source.exhausted:
        need = wanted - len(out)
        if limit is not None:
            need = min(need, limit - position.returned)
            if need <= 0:
                break
        batch = yield from source.next_batch(need)
        for row in batch:
            examined += 1
            if row.partition_key != position.last_partition:
                position.last_partition = row.partition_key
                position.partition_rows = 0
            if per_partition is not None and position.partition_rows >= per_partition:
                continue
            if not plan.accepts(row):
                continue
            position.partition_rows += 1
            position.returned += 1
            out.append(row)
        last = position.last_partition
        if (
            per_partition is not None
            and last is not None
            and position.partition_rows >= per_partition
        ):
            source.skip_partition(last)
        if examined >= examined_cap:
            break
    return out


def _done(source: _Source, plan: _Plan) -> bool:
    limit_reached = plan.limit is not None and source.position.returned >= plan.limit
    return source.exhausted or limit_reached


def _all_rows(
    source: _Source,
    plan: _Plan,
    limits: ExecutorLimits,
    take: Callable[[ResultRow], bool],
    *,
    apply_limit: bool,
) -> Steps[None]:
    """Every accepted row of ``source`` to ``take``, batch by batch, until ``take`` answers
    False (at most ``max_aggregate_rows``)."""
    seen = 0
    while not source.exhausted:
        batch = yield from _collect(
            source, plan, limits.max_page_size_rows, limits.max_rows_examined_per_page,
            apply_limit=apply_limit,
        )  # fmt: skip
        seen += len(batch)
        if seen > limits.max_aggregate_rows:
            raise InvalidRequest(
                f"the query reads more than {limits.max_aggregate_rows} rows; restrict it"
            )
        for row in batch:
            if not take(row):
                return
        if apply_limit and _done(source, plan):
            return


def _result(
    plan: _Plan,
    rows: Sequence[tuple[bytes | None, ...]],
    paging_state: bytes | None,
    request: PageRequest,
) -> RowsResult:
    specs = plan.selection.specs(plan.table)
    if plan.json:
        names, types = [s.name for s in specs], [s.type for s in specs]
        rows = [(serialize(TEXT, json_object(names, types, row)),) for row in rows]
        specs = json_specs(plan.table)
    if request.skip_metadata:
        metadata = RowsMetadata.skipped(len(specs), paging_state)
    else:
        metadata = RowsMetadata.describing(specs, paging_state)
    return RowsResult(metadata, tuple(rows))


def json_specs(table: Table) -> tuple[ColumnSpec, ...]:
    """The one result column of ``SELECT JSON``: ``[json]`` text."""
    return (ColumnSpec(table.keyspace, table.name, "[json]", TEXT),)


def plan_select(
    statement: SelectStatement, table: Table, context: StatementContext, limits: ExecutorLimits
) -> SelectPlan:
    """What ``statement`` reads and how it answers (InvalidRequest if it cannot be run): pure,
    made once for a statement whose reads are run again (``answer_select``)."""
    return SelectPlan(statement, context, _plan(statement, table, context, limits))


def answer_select(
    planned: SelectPlan, store: RowReader, limits: ExecutorLimits, request: PageRequest
) -> RowsResult:
    """One page of rows of ``planned``, read from ``store``, which reads at once."""
    return run_steps(select_steps(planned, store, limits, request))


def select_steps(
    planned: SelectPlan, store: RowReader, limits: ExecutorLimits, request: PageRequest
) -> Steps[RowsResult]:
    """``answer_select`` in steps: where ``store`` lacks rows (``RowsNotHeld``), the steps
    yield what it lacks and go on from there once it holds them."""
    statement, context, plan = planned.statement, planned.context, planned.plan
    position = _Position()
    if request.paging_state is not None:
        position = _decode_state(request.fingerprint, request.paging_state)
    source = _source(plan, store, context.now_s, position)
    page_size = request.page_size if request.page_size and request.page_size > 0 else None
    if plan.group_width is not None and page_size is not None:
        page_size = min(page_size, limits.max_page_size_rows)
        answers, done = yield from _grouped_page(source, plan, limits, page_size)
        state = None if done else _encode_state(request.fingerprint, source.position)
        return _result(plan, answers, state, request)
    if plan.group_width is not None:
        # One answer per group, unpaged (each group is folded whole; at most
        # max_aggregate_rows rows read): LIMIT and PER PARTITION LIMIT count groups.
        grouping = dataclasses.replace(plan, limit=None, per_partition_limit=None)
        groups = GroupedRows(plan.group_width, plan.selection, plan.limit, plan.per_partition_limit)
        yield from _all_rows(source, grouping, limits, groups.add, apply_limit=False)
        return _result(plan, groups.answers(), None, request)
    if plan.selection.is_aggregate:
        folding = plan.selection.folding()
        yield from _all_rows(source, plan, limits, folding.add, apply_limit=False)
        return _result(plan, [folding.result()], None, request)
    many_keys = plan.keys is not None and len(plan.keys) > 1
    if statement.order_by and many_keys:
        if page_size is not None:
            raise InvalidRequest(ORDER_BY_PAGING_MESSAGE)
        ordered = yield from _ordered_rows(plan, source, limits)
        return _result(plan, ordered, None, request)
    if page_size is None:
        rows = yield from _collect(source, plan, limits.max_unpaged_rows + 1, 2**62)
        if len(rows) > limits.max_unpaged_rows:
            raise InvalidRequest(
                f"the result has more than {limits.max_unpaged_rows} rows: page the query"
            )
        return _result(plan, [plan.selection.row(r) for r in rows], None, request)
    page_size = min(page_size, limits.max_page_size_rows)
    rows = yield from _collect(source, plan, page_size, limits.max_rows_examined_per_page)
    state = None if _done(source, plan) else _encode_state(request.fingerprint, source.position)
    return _result(plan, [plan.selection.row(r) for r in rows], state, request)


def _grouped_page(
    source: _Source, plan: _Plan, limits: ExecutorLimits, page_groups: int
) -> Steps[tuple[list[tuple[bytes | None, ...]], bool]]:
    """Up to ``page_groups`` groups (module rules), and whether nothing is left."""
    position, width = source.position, plan.group_width
    assert width is not None
    answered_before = position.last_group  # its rows open this page: skipped
    answers: list[tuple[bytes | None, ...]] = []
    group: list[ResultRow] = []
    key: Key | None = None
    read = 0
    while not source.exhausted:
        before = dataclasses.replace(position)
        batch = yield from source.next_batch(limits.max_page_size_rows)
        read += len(batch)
        if read > limits.max_aggregate_rows:
            raise InvalidRequest(
                f"the query reads more than {limits.max_aggregate_rows} rows; restrict it"
            )
        for index, row in enumerate(batch):
            row_key = (*row.partition_key, *row.clustering)[:width]
            if row_key == answered_before or not plan.accepts(row):
                continue
            if row_key != key:
                if group:
                    answers.append(plan.selection.fold(group))
                    group = []
                limit_reached = plan.limit is not None and position.returned >= plan.limit
                if limit_reached or len(answers) == page_groups:
                    yield from _rewind(source, before, index)
                    return answers, limit_reached
                key = row_key
                if row.partition_key != position.last_partition:
                    position.last_partition, position.partition_rows = row.partition_key, 0
                position.partition_rows += 1
                per_partition = plan.per_partition_limit
                if per_partition is None or position.partition_rows <= per_partition:
                    position.returned += 1
                    position.last_group = row_key
            if position.last_group == row_key:
                group.append(row)
    if group:
        answers.append(plan.selection.fold(group))
    return answers, True


def _rewind(source: _Source, before: _Position, rows: int) -> Steps[None]:
    """Put ``source`` back to just after the first ``rows`` rows read from ``before`` (the
    counters and the last group are kept); a shorter re-read leaves rows of the last group
    ahead, which the next page skips by its key."""
    counters = source.position
    kept = (counters.returned, counters.last_partition, counters.partition_rows)
    restored = dataclasses.replace(before)
    restored.returned, restored.last_partition, restored.partition_rows = kept
    restored.last_group = counters.last_group
    source.position = restored
    if isinstance(source, _ScanSource):
        source._exhausted = False
    if rows > 0:
        yield from source.next_batch(rows)


def _ordered_rows(
    plan: _Plan, source: _Source, limits: ExecutorLimits
) -> Steps[list[tuple[bytes | None, ...]]]:
    types = tuple((c.type, c.order) for c in plan.table.clustering_columns)
    rows: list[ResultRow] = []
    yield from _all_rows(source, plan, limits, _appending(rows), apply_limit=False)
    rows.sort(key=lambda row: encode_clustering(types, row.clustering), reverse=plan.reverse)
    if plan.limit is not None:
        rows = rows[: plan.limit]
    return [plan.selection.row(row) for row in rows]


def _appending(rows: list[ResultRow]) -> Callable[[ResultRow], bool]:
    def take(row: ResultRow) -> bool:
        rows.append(row)
        return True

    return take
