"""Last-write-wins reconcile, shadowing, TTL expiry and gc_grace purge over the mutation model.

Implements cassandra-core.md §6.1 (cell reconcile, rules applied in order) and §6.2 (deletions,
liveness, TTL, purge) on the value objects of the mutation module. Everything is pure: the clock
(``now_s``, ``gc_before_s``) and the typed clustering order (``clustering_compare``) are passed
in.

Rules worth knowing before calling:

* Every merge is commutative and associative with structurally equal results, so replicas that
  merge the same writes in any order hold equal values. Two tie-breaks make that total where
  Cassandra 4.1 would return whichever side came first: cells equal in everything but the TTL
  keep the lower TTL (Cassandra trunk's ``CellLivenessInfo`` rule, applied last so it never
  overrides a 4.1 decision); liveness infos likewise.
* A deletion shadows data at its own timestamp (``ts <= marked_for_delete_at``). A merged row is
  shadowed by its own deletion and each collection by its own tombstone; shadowing by partition
  deletions and range tombstones is the reader's job (:func:`shadow_row` with
  :func:`covering_deletions`, or :func:`shadow_mutation`), because range coverage needs the
  typed clustering order.
* Collection elements are kept sorted by path as unsigned bytes. That is a canonical order, not
  the collection's CQL order, which the codec applies when it serializes a value.
* Rows inside a merged mutation are sorted by their raw clustering bytes, for the same reason.
* Expiry (:func:`expire_row`) turns an expired cell into a tombstone whose local deletion time
  is its write second (``ldt - ttl``, C41 ``AbstractCell.purge``). Expired primary-key liveness
  becomes the *expired* marker (TTL :data:`EXPIRED_LIVENESS_TTL_S`, C41
  ``LivenessInfo.EXPIRED_LIVENESS_TTL``) with the write second as its expiration time: dead, still
  superseding older liveness (``supersedes``: expired beats not expired at equal timestamps), and
  purgeable at the same moment as the cells the same ``INSERT ... USING TTL`` wrote.
* Purge (:func:`purge_row`) drops tombstones, expired cells and dead liveness whose local time is
  ``< gc_before_s`` (``gcBefore = now - gc_grace_seconds``, so ``gc_before_s <= now_s``).
  Whether no older data for the key remains elsewhere is the caller's decision.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ringflow.errors import InternalError, invariant
from ringflow.schema._mutation import (
    NO_DELETION_TIME,
    Cell,
    ClusteringBound,
    ColumnData,
    ComplexColumn,
    DeletionTime,
    LivenessInfo,
    Mutation,
    RangeTombstone,
    Row,
)

EXPIRED_LIVENESS_TTL_S = 2**31 - 1
"""TTL marking primary-key liveness that has expired (Cassandra's ``EXPIRED_LIVENESS_TTL``)."""

ClusteringCompare = Callable[[tuple[bytes, ...], tuple[bytes, ...]], int]
"""Typed comparison of two clustering prefixes of equal length: negative, zero or positive."""


# --- cells ------------------------------------------------------------------------------------


def reconcile_cells(left: Cell, right: Cell) -> Cell:
    """The winner of two versions of one cell, by §6.1's rules in order.

    1. higher timestamp; 2. same timestamp: the only side that is expiring or a tombstone;
    3. both have a deletion time: the only tombstone; 4. both tombstones or both expiring: larger
    local deletion time; 5. greater value (unsigned bytes, shorter is smaller); then the lower TTL;
    complete equality returns ``left``.
    """
    invariant(left.path == right.path, f"reconcile of cells at paths {left.path!r}/{right.path!r}")
    if left.timestamp_us != right.timestamp_us:
        return left if left.timestamp_us > right.timestamp_us else right
    left_has_ldt = left.local_deletion_time_s != NO_DELETION_TIME
    right_has_ldt = right.local_deletion_time_s != NO_DELETION_TIME
    if left_has_ldt != right_has_ldt:
        return left if left_has_ldt else right
    if left_has_ldt:
        if left.is_tombstone != right.is_tombstone:
            return left if left.is_tombstone else right
        if left.local_deletion_time_s != right.local_deletion_time_s:
            return left if left.local_deletion_time_s > right.local_deletion_time_s else right
    if left.value != right.value:
        # bytes order in Python is unsigned lexicographic with a proper prefix ordered first.
        return left if left.value > right.value else right
    if left.ttl_s != right.ttl_s:
        return left if left.ttl_s < right.ttl_s else right
    return left


# --- liveness and deletions -------------------------------------------------------------------


def is_expired_liveness(liveness: LivenessInfo) -> bool:
    """True for the expired marker :func:`expire_row` leaves in place of dead liveness."""
    return liveness.ttl_s == EXPIRED_LIVENESS_TTL_S


def liveness_is_live(liveness: LivenessInfo, now_s: int) -> bool:
    """Live at ``now_s``: not the expired marker and not past its expiration second."""
    return not is_expired_liveness(liveness) and liveness.is_live(now_s)


def _liveness_supersedes(first: LivenessInfo, second: LivenessInfo) -> bool:
    """C41 ``LivenessInfo.supersedes`` (§6.2), then the lower TTL as a final tie-break."""
    if first.timestamp_us != second.timestamp_us:
        return first.timestamp_us > second.timestamp_us
    if is_expired_liveness(first) != is_expired_liveness(second):
        return is_expired_liveness(first)
    if first.is_expiring != second.is_expiring:
        return first.is_expiring
    if first.local_expiration_time_s != second.local_expiration_time_s:
        return first.local_expiration_time_s > second.local_expiration_time_s
    return first.ttl_s < second.ttl_s


def reconcile_liveness(a: LivenessInfo | None, b: LivenessInfo | None) -> LivenessInfo | None:
    """The superseding primary-key liveness of two (None means no row marker)."""
    if a is None or b is None:
        return b if a is None else a
    return b if _liveness_supersedes(b, a) else a


def merge_deletion(a: DeletionTime | None, b: DeletionTime | None) -> DeletionTime | None:
    """The superseding deletion of two (later timestamp, then later local deletion time)."""
    if a is None or b is None:
        return b if a is None else a
    return b if b.supersedes(a) else a


def _strongest(deletions: Iterable[DeletionTime | None]) -> DeletionTime | None:
    strongest: DeletionTime | None = None
    for deletion in deletions:
        strongest = merge_deletion(strongest, deletion)
    return strongest


def _deleted(deletion: DeletionTime | None, timestamp_us: int) -> bool:
    return deletion is not None and deletion.deletes(timestamp_us)


# --- complex columns and rows -----------------------------------------------------------------


def _element_path(cell: Cell) -> bytes:
    invariant(cell.path is not None, f"collection element without a path: {cell!r}")
    return cell.path or b""


def merge_complex(a: ComplexColumn, b: ComplexColumn) -> ComplexColumn:
    """Elements merged by path with :func:`reconcile_cells`; the superseding collection tombstone
    is kept and the elements it shadows are dropped."""
    by_path: dict[bytes, Cell] = {}
    for cell in (*a.cells, *b.cells):
        path = _element_path(cell)
        prior = by_path.get(path)
        by_path[path] = cell if prior is None else reconcile_cells(prior, cell)
    deletion = merge_deletion(a.deletion, b.deletion)
    merged = (by_path[path] for path in sorted(by_path))
    cells = tuple(cell for cell in merged if not _deleted(deletion, cell.timestamp_us))
    return ComplexColumn(cells, deletion)


def _merge_column(name: str, a: ColumnData | None, b: ColumnData | None) -> ColumnData:
    if a is None or b is None:
        only = a if b is None else b
        if only is None:
            raise InternalError(f"column {name!r} missing on both sides of a merge")
        return only
    if isinstance(a, Cell) and isinstance(b, Cell):
        return reconcile_cells(a, b)
    if isinstance(a, ComplexColumn) and isinstance(b, ComplexColumn):
        return merge_complex(a, b)
    raise InternalError(f"column {name!r} is a simple cell on one side, a collection on the other")


def merge_rows(a: Row, b: Row) -> Row:
    """Two versions of one row merged column by column; the row deletion shadows older data."""
    invariant(
        a.clustering == b.clustering,
        f"merge of rows with different clusterings {a.clustering!r} / {b.clustering!r}",
    )
    names = sorted(set(a.cells) | set(b.cells))
    cells = {name: _merge_column(name, a.cells.get(name), b.cells.get(name)) for name in names}
    liveness = reconcile_liveness(a.liveness, b.liveness)
    merged = Row(a.clustering, liveness, merge_deletion(a.deletion, b.deletion), cells)
    return shadow_row(merged, ())


def _shadow_column(data: ColumnData, active: DeletionTime | None) -> ColumnData | None:
    if isinstance(data, Cell):
        return None if _deleted(active, data.timestamp_us) else data
    own = data.deletion
    if own is not None and active is not None and active.supersedes(own):
        own = None  # says nothing the covering deletion does not
    effective = merge_deletion(active, data.deletion)
    cells = tuple(cell for cell in data.cells if not _deleted(effective, cell.timestamp_us))
    if not cells and own is None:
        return None
    return ComplexColumn(cells, own)


def shadow_row(row: Row, deletions: Sequence[DeletionTime]) -> Row:
    """``row`` without the data its covering deletions shadow.

    ``deletions`` are the partition deletion and covering range tombstones; the row's own deletion
    and each collection's tombstone always apply. Liveness, cells and elements written at or
    before the strongest covering deletion are dropped; a row deletion or collection tombstone
    that a covering deletion supersedes is dropped too, as it can shadow nothing more.
    """
    external = _strongest(deletions)
    active = merge_deletion(external, row.deletion)
    liveness = row.liveness
    if liveness is not None and _deleted(active, liveness.timestamp_us):
        liveness = None
    row_deletion = row.deletion
    if row_deletion is not None and external is not None and external.supersedes(row_deletion):
        row_deletion = None
    cells: dict[str, ColumnData] = {}
    for name in sorted(row.cells):
        shadowed = _shadow_column(row.cells[name], active)
        if shadowed is not None:
            cells[name] = shadowed
    return Row(row.clustering, liveness, row_deletion, cells)


def is_row_empty(row: Row) -> bool:
    """No liveness, no deletion, no cells: the row says nothing and can be dropped."""
    return row.liveness is None and row.deletion is None and not row.cells


# --- TTL expiry and gc_grace purge ------------------------------------------------------------


def _expire_cell(cell: Cell, now_s: int) -> Cell:
    if not cell.is_expiring or cell.is_live(now_s):
        return cell
    write_s = cell.local_deletion_time_s - cell.ttl_s
    return Cell(cell.timestamp_us, b"", 0, write_s, cell.path)


def _expire_column(data: ColumnData, now_s: int) -> ColumnData:
    if isinstance(data, Cell):
        return _expire_cell(data, now_s)
    return ComplexColumn(tuple(_expire_cell(cell, now_s) for cell in data.cells), data.deletion)


def _expire_liveness(liveness: LivenessInfo | None, now_s: int) -> LivenessInfo | None:
    if liveness is None or not liveness.is_expiring or is_expired_liveness(liveness):
        return liveness
    if liveness.is_live(now_s):
        return liveness
    write_s = liveness.local_expiration_time_s - liveness.ttl_s
    return LivenessInfo(liveness.timestamp_us, EXPIRED_LIVENESS_TTL_S, write_s)


def expire_row(row: Row, now_s: int) -> Row:
    """Expiring data dead at ``now_s`` (``ldt <= now_s``) turned into its dead form.

    Cells and collection elements become tombstones with ``local_deletion_time = ldt - ttl``
    (the write second); liveness becomes the expired marker ``LivenessInfo(ts,
    EXPIRED_LIVENESS_TTL_S, ldt - ttl)``. Data still live at ``now_s`` is untouched.
    """
    cells = {name: _expire_column(row.cells[name], now_s) for name in sorted(row.cells)}
    return Row(row.clustering, _expire_liveness(row.liveness, now_s), row.deletion, cells)


def _purgeable_deletion(deletion: DeletionTime | None, gc_before_s: int) -> bool:
    return deletion is not None and deletion.local_deletion_time_s < gc_before_s


def _purge_cell(cell: Cell, gc_before_s: int) -> Cell | None:
    # Expiring cells count too: ``ldt < gc_before <= now`` means expired (AbstractCell.purge).
    has_ldt = cell.local_deletion_time_s != NO_DELETION_TIME
    return None if has_ldt and cell.local_deletion_time_s < gc_before_s else cell


def _purge_column(data: ColumnData, gc_before_s: int) -> ColumnData | None:
    if isinstance(data, Cell):
        return _purge_cell(data, gc_before_s)
    deletion = None if _purgeable_deletion(data.deletion, gc_before_s) else data.deletion
    kept = (_purge_cell(cell, gc_before_s) for cell in data.cells)
    cells = tuple(cell for cell in kept if cell is not None)
    if not cells and deletion is None:
        return None
    return ComplexColumn(cells, deletion)


def _purge_liveness(liveness: LivenessInfo | None, gc_before_s: int) -> LivenessInfo | None:
    if liveness is None or not liveness.is_expiring:
        return liveness
    return None if liveness.local_expiration_time_s < gc_before_s else liveness


def purge_row(row: Row, gc_before_s: int) -> Row:
    """``row`` without tombstones (cell, collection, row), expired cells and dead liveness whose
    local time is ``< gc_before_s``; assumes ``gc_before_s <= now``.

    The row's own deletion and collection tombstones are applied first, so purging them cannot
    bring back data they shadowed.
    """
    row = shadow_row(row, ())
    cells: dict[str, ColumnData] = {}
    for name in sorted(row.cells):
        purged = _purge_column(row.cells[name], gc_before_s)
        if purged is not None:
            cells[name] = purged
    deletion = None if _purgeable_deletion(row.deletion, gc_before_s) else row.deletion
    return Row(row.clustering, _purge_liveness(row.liveness, gc_before_s), deletion, cells)


def purge_mutation(
    mutation: Mutation, gc_before_s: int, clustering_compare: ClusteringCompare | None = None
) -> Mutation:
    """:func:`purge_row` on every row, plus partition and range tombstones ``< gc_before_s``;
    rows left empty are dropped.

    The partition deletion is applied to the rows first, and with ``clustering_compare`` the range
    tombstones too (:func:`shadow_mutation`), so purging a tombstone never brings back data it
    shadowed. Without ``clustering_compare`` the caller must have applied range tombstones.
    """
    if clustering_compare is not None:
        mutation = shadow_mutation(mutation, clustering_compare)
    else:
        mutation = _shadow_by_partition_deletion(mutation)
    partition_deletion = mutation.partition_deletion
    if _purgeable_deletion(partition_deletion, gc_before_s):
        partition_deletion = None
    range_tombstones = tuple(
        tombstone
        for tombstone in mutation.range_tombstones
        if not _purgeable_deletion(tombstone.deletion, gc_before_s)
    )
    static_row = None
    if mutation.static_row is not None:
        static_row = _none_if_empty(purge_row(mutation.static_row, gc_before_s))
    rows = _non_empty(purge_row(row, gc_before_s) for row in mutation.rows)
    return _with_parts(mutation, partition_deletion, static_row, rows, range_tombstones)


# --- the read view ----------------------------------------------------------------------------


def _column_is_live(data: ColumnData, now_s: int) -> bool:
    if isinstance(data, Cell):
        return data.is_live(now_s)
    return any(cell.is_live(now_s) for cell in data.cells)


def is_row_live(row: Row, now_s: int) -> bool:
    """CQL existence: live primary-key liveness or any live cell or element at ``now_s``.

    The row's own deletion and collection tombstones are applied here; partition deletions and
    range tombstones must have been applied with :func:`shadow_row`. Static rows likewise.
    """
    shadowed = shadow_row(row, ())
    if shadowed.liveness is not None and liveness_is_live(shadowed.liveness, now_s):
        return True
    return any(_column_is_live(data, now_s) for data in shadowed.cells.values())


def live_cells(row: Row, now_s: int) -> dict[str, Cell | list[Cell]]:
    """The live simple cells, and the live elements of each collection in path order, at
    ``now_s``; a collection without live elements is absent (CQL null). Same shadowing contract
    as :func:`is_row_live`."""
    result: dict[str, Cell | list[Cell]] = {}
    for name, data in shadow_row(row, ()).cells.items():
        if isinstance(data, Cell):
            if data.is_live(now_s):
                result[name] = data
            continue
        elements = [cell for cell in data.cells if cell.is_live(now_s)]
        if elements:
            result[name] = elements
    return result


# --- range tombstone coverage -----------------------------------------------------------------


def _after_start(
    clustering: tuple[bytes, ...], bound: ClusteringBound, compare: ClusteringCompare
) -> bool:
    if bound.is_unbounded:
        return True
    order = _compare_to_prefix(clustering, bound, compare)
    return order > 0 or (order == 0 and bound.inclusive)


def _before_end(
    clustering: tuple[bytes, ...], bound: ClusteringBound, compare: ClusteringCompare
) -> bool:
    if bound.is_unbounded:
        return True
    order = _compare_to_prefix(clustering, bound, compare)
    return order < 0 or (order == 0 and bound.inclusive)


def _compare_to_prefix(
    clustering: tuple[bytes, ...], bound: ClusteringBound, compare: ClusteringCompare
) -> int:
    """Key vs bound on the bound's components only: 0 when the key extends (or is) the prefix."""
    width = len(bound.prefix)
    invariant(
        width <= len(clustering),
        f"bound prefix {bound.prefix!r} is longer than clustering {clustering!r}",
    )
    order = compare(clustering[:width], bound.prefix)
    invariant(isinstance(order, int), f"clustering_compare returned {order!r}, not an int")
    return order


def covering_deletions(
    clustering: tuple[bytes, ...],
    range_tombstones: Iterable[RangeTombstone],
    clustering_compare: ClusteringCompare,
) -> list[DeletionTime]:
    """The deletions of the range tombstones covering ``clustering``, in input order.

    A bound is a prefix of clustering values; a key that extends the prefix sits *at* the bound,
    so an inclusive bound covers every key extending it and an exclusive one none of them. An
    empty prefix is unbounded. ``clustering_compare`` gets two tuples of equal length.
    """
    return [
        tombstone.deletion
        for tombstone in range_tombstones
        if _after_start(clustering, tombstone.start, clustering_compare)
        and _before_end(clustering, tombstone.end, clustering_compare)
    ]


def shadow_mutation(mutation: Mutation, clustering_compare: ClusteringCompare) -> Mutation:
    """Every row shadowed by the partition deletion and its covering range tombstones (the static
    row by the partition deletion only); rows left empty are dropped. Tombstones are kept."""
    return _shadow_rows(mutation, clustering_compare)


def _shadow_by_partition_deletion(mutation: Mutation) -> Mutation:
    return _shadow_rows(mutation, None)


def _shadow_rows(mutation: Mutation, clustering_compare: ClusteringCompare | None) -> Mutation:
    partition = () if mutation.partition_deletion is None else (mutation.partition_deletion,)
    static_row = None
    if mutation.static_row is not None:
        static_row = _none_if_empty(shadow_row(mutation.static_row, partition))
    shadowed: list[Row] = []
    for row in mutation.rows:
        covering: list[DeletionTime] = []
        if clustering_compare is not None:
            covering = covering_deletions(
                row.clustering, mutation.range_tombstones, clustering_compare
            )
        shadowed.append(shadow_row(row, (*partition, *covering)))
    return _with_parts(
        mutation,
        mutation.partition_deletion,
        static_row,
        _non_empty(shadowed),
        mutation.range_tombstones,
    )


# --- mutations --------------------------------------------------------------------------------


def _none_if_empty(row: Row) -> Row | None:
    return None if is_row_empty(row) else row


def _non_empty(rows: Iterable[Row]) -> tuple[Row, ...]:
    return tuple(row for row in rows if not is_row_empty(row))


def _with_parts(
    mutation: Mutation,
    partition_deletion: DeletionTime | None,
    static_row: Row | None,
    rows: tuple[Row, ...],
    range_tombstones: tuple[RangeTombstone, ...],
) -> Mutation:
    return Mutation(
        mutation.keyspace,
        mutation.table,
        mutation.partition_key,
        partition_deletion,
        static_row,
        rows,
        range_tombstones,
    )


def _merge_optional(a: Row | None, b: Row | None) -> Row | None:
    if a is None or b is None:
        merged = b if a is None else a
        return None if merged is None else _none_if_empty(shadow_row(merged, ()))
    return _none_if_empty(merge_rows(a, b))


def _merge_row_groups(rows: Iterable[Row]) -> tuple[Row, ...]:
    by_clustering: dict[tuple[bytes, ...], Row] = {}
    for row in rows:
        prior = by_clustering.get(row.clustering)
        by_clustering[row.clustering] = (
            shadow_row(row, ()) if prior is None else merge_rows(prior, row)
        )
    return _non_empty(by_clustering[key] for key in sorted(by_clustering))


def _bounds_key(
    tombstone: RangeTombstone,
) -> tuple[tuple[bytes, ...], bool, tuple[bytes, ...], bool]:
    start, end = tombstone.start, tombstone.end
    return (start.prefix, start.inclusive, end.prefix, end.inclusive)


def _merge_range_tombstones(tombstones: Iterable[RangeTombstone]) -> tuple[RangeTombstone, ...]:
    """Both sides' range tombstones; for identical bounds only the superseding deletion."""
    by_bounds: dict[tuple[tuple[bytes, ...], bool, tuple[bytes, ...], bool], RangeTombstone] = {}
    for tombstone in tombstones:
        key = _bounds_key(tombstone)
        prior = by_bounds.get(key)
        if prior is None or tombstone.deletion.supersedes(prior.deletion):
            by_bounds[key] = tombstone
    return tuple(by_bounds[key] for key in sorted(by_bounds))


def merge_mutations(a: Mutation, b: Mutation) -> Mutation:
    """Two updates of one partition merged: superseding partition deletion, range tombstones of
    both (not normalised beyond identical bounds), static rows and rows merged by clustering.

    Rows come out sorted by raw clustering bytes and each shadowed by its own deletion; empty
    rows are dropped. Partition and range deletions do not shadow rows here (see
    :func:`shadow_mutation`).
    """
    invariant(
        (a.keyspace, a.table, a.partition_key) == (b.keyspace, b.table, b.partition_key),
        f"merge of mutations of different partitions: {a.keyspace}.{a.table} "
        f"{a.partition_key!r} / {b.keyspace}.{b.table} {b.partition_key!r}",
    )
    return _with_parts(
        a,
        merge_deletion(a.partition_deletion, b.partition_deletion),
        _merge_optional(a.static_row, b.static_row),
        _merge_row_groups((*a.rows, *b.rows)),
        _merge_range_tombstones((*a.range_tombstones, *b.range_tombstones)),
    )
