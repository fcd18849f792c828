"""Checking a base mutation against its table and putting it into Scylla's canonical order.

The CDC log builder (``shared/reference/scylla-cdc.md`` §5 "How one base mutation becomes log
rows") walks a mutation the way Scylla's ``cdc/change_visitor.hh`` does, which assumes the
coordinator's order: clustered rows by the table's clustering order (typed, ASC/DESC per column),
range tombstones by start bound (Scylla's ``range_tombstone_list``; overlapping ones are not
merged here) and each collection's cells by their key type. ringflow's reconcile keeps raw-byte
orders, so this module sorts with the codec (order-preserving clustering encoding, typed
comparison). It also refuses what a coordinator never builds (a row of another table, a static
column in a clustered row, a cell path on an atomic column, ...) with InvalidRequest naming the
rule, and drops what carries no change (empty rows, empty complex columns), since "a row with no
changes produces nothing".
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise

from ringflow.cdc._log_values import (
    Clustering,
    ClusteringKey,
    base_plan,
    path_type,
    sorted_by_type,
)
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    Cell,
    ClusteringBound,
    Column,
    ColumnData,
    ColumnKind,
    ComplexColumn,
    Mutation,
    RangeTombstone,
    Row,
    Table,
    prefix_upper_bound,
)


def is_static_key(base: Table, clustering: Clustering) -> bool:
    """Whether an image key names the static row (``()`` in a table with clustering columns)."""
    return not clustering and bool(base.clustering_columns)


def _fail(base: Table, message: str) -> InvalidRequest:
    return InvalidRequest(f"CDC log of {base.keyspace}.{base.name}: {message}")


def _checked_column(base: Table, name: str, kind: ColumnKind) -> Column:
    if not base.has_column(name):
        raise _fail(base, f"mutation writes unknown column {name!r}")
    column = base.column(name)
    if column.kind is not kind:
        raise _fail(base, f"column {name!r} is {column.kind.value}, written as {kind.value}")
    return column


def _normal_complex(base: Table, column: Column, data: ComplexColumn) -> ComplexColumn | None:
    if not column.type.is_multicell:
        raise _fail(base, f"atomic column {column.name!r} written as a collection")
    if any(cell.path is None for cell in data.cells):
        raise _fail(base, f"a cell of collection {column.name!r} has no path")
    if not data.cells and data.deletion is None:
        return None
    by_path = {cell.path: cell for cell in data.cells if cell.path is not None}
    if len(by_path) != len(data.cells):
        raise _fail(base, f"collection {column.name!r} has two cells with one path")
    order = sorted_by_type(path_type(column.type), by_path)
    return ComplexColumn(tuple(by_path[path] for path in order), data.deletion)


def _normal_cells(
    base: Table, cells: Mapping[str, ColumnData], kind: ColumnKind
) -> dict[str, ColumnData]:
    normal: dict[str, ColumnData] = {}
    for name, data in cells.items():
        column = _checked_column(base, name, kind)
        if isinstance(data, Cell):
            if column.type.is_multicell or data.path is not None:
                raise _fail(base, f"column {name!r} written as an atomic cell")
            normal[name] = data
            continue
        complex_data = _normal_complex(base, column, data)
        if complex_data is not None:
            normal[name] = complex_data
    return normal


def _normal_static(base: Table, row: Row | None) -> Row | None:
    if row is None:
        return None
    if row.clustering or row.liveness is not None or row.deletion is not None:
        raise _fail(base, "the static row has a clustering key, a row marker or a deletion")
    cells = _normal_cells(base, row.cells, ColumnKind.STATIC)
    return Row((), None, None, cells) if cells else None


def _normal_row(base: Table, row: Row) -> Row | None:
    if len(row.clustering) != len(base.clustering_columns):
        raise _fail(
            base,
            f"clustered row has {len(row.clustering)} clustering values, "
            f"the table has {len(base.clustering_columns)} clustering columns",
        )
    cells = _normal_cells(base, row.cells, ColumnKind.REGULAR)
    if not cells and row.liveness is None and row.deletion is None:
        return None
    return Row(row.clustering, row.liveness, row.deletion, cells)


def _check_bound(base: Table, bound: ClusteringBound) -> None:
    if not base.clustering_columns:
        raise _fail(base, "range tombstone in a table without clustering columns")
    if len(bound.prefix) > len(base.clustering_columns):
        raise _fail(base, f"range tombstone bound longer than the clustering key: {bound}")


def _is_normal(base: Table, mutation: Mutation, key: ClusteringKey) -> bool:
    """Whether ``mutation`` is already what :func:`normalize_mutation` would return (the common
    write: clustered rows of atomic cells, in order): checked without building anything."""
    rows = mutation.rows
    if (
        mutation.static_row is not None
        or type(rows) is not tuple
        or type(mutation.range_tombstones) is not tuple
        or mutation.range_tombstones
    ):
        return False
    plan = base_plan(base)
    arity, atomic = len(plan.clustering_names), plan.atomic_regular
    for row in rows:
        cells = row.cells
        if len(row.clustering) != arity:
            return False
        if not cells and row.liveness is None and row.deletion is None:
            return False
        for name, data in cells.items():
            if type(data) is not Cell or data.path is not None or name not in atomic:
                return False
    if len(rows) > 1:
        keys = [key(row.clustering) for row in rows]
        return all(low < high for low, high in pairwise(keys))
    return True


def normalize_mutation(base: Table, mutation: Mutation, key: ClusteringKey) -> Mutation:
    """``mutation`` checked against ``base``, in canonical order, without empty parts."""
    if (mutation.keyspace, mutation.table) != (base.keyspace, base.name):
        raise _fail(base, f"mutation is for {mutation.keyspace}.{mutation.table}")
    if len(mutation.partition_key) != len(base.partition_key_columns):
        raise _fail(base, f"partition key has {len(mutation.partition_key)} values")
    if _is_normal(base, mutation, key):
        return mutation
    return _normalized(base, mutation, key)


def _normalized(base: Table, mutation: Mutation, key: ClusteringKey) -> Mutation:
    """:func:`normalize_mutation` in general, once the table and key arity are checked."""
    rows = [normal for row in mutation.rows if (normal := _normal_row(base, row)) is not None]
    if len({row.clustering for row in rows}) != len(rows):
        raise _fail(base, "two rows of the mutation share one clustering key")
    rows.sort(key=lambda row: key(row.clustering))
    for tombstone in mutation.range_tombstones:
        _check_bound(base, tombstone.start)
        _check_bound(base, tombstone.end)
    tombstones = sorted(mutation.range_tombstones, key=lambda t: _range_position(key, t))
    return Mutation(
        mutation.keyspace,
        mutation.table,
        mutation.partition_key,
        mutation.partition_deletion,
        _normal_static(base, mutation.static_row),
        tuple(rows),
        tuple(tombstones),
    )


def _range_position(key: ClusteringKey, tombstone: RangeTombstone) -> tuple[bytes, bool, bytes]:
    """Where a range tombstone sits in Scylla's ``range_tombstone_list``: by start, then end."""
    start, end = tombstone.start, tombstone.end
    start_at = key(start.prefix)
    if start.prefix and not start.inclusive:
        start_at = prefix_upper_bound(start_at)
    end_at = key(end.prefix)
    if end.inclusive:
        end_at = prefix_upper_bound(end_at)
    return start_at, end.is_unbounded, end_at


def key_in_range(
    key: ClusteringKey, start: ClusteringBound, end: ClusteringBound, clustering: Clustering
) -> bool:
    """Whether a full clustering key lies between ``start`` and ``end`` (Scylla #6900).

    Bounds compare in the codec's order-preserving encoding: keys extending a prefix ``P`` sort
    from ``encode(P)`` up to ``prefix_upper_bound(encode(P))``.
    """
    encoded = key(clustering)
    if start.prefix:
        lowest = key(start.prefix)
        if encoded < (lowest if start.inclusive else prefix_upper_bound(lowest)):
            return False
    if end.prefix:
        highest = key(end.prefix)
        if encoded >= (prefix_upper_bound(highest) if end.inclusive else highest):
            return False
    return True
