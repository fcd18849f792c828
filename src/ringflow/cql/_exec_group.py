"""``GROUP BY``: which rows form a group, and one answer row per group (Cassandra 4's
``SelectStatement.getAggregationSpecification`` and ``GroupMaker``). Pure.

Rules:

* The columns named are primary key columns in their declared order; a key column left out
  before a named one must be restricted by ``=`` in the WHERE clause; the whole partition key is
  grouped on (directly or through ``=``), never a part of it. A group is the rows sharing the
  values of the key columns up to the last one named (``width`` key components).
* Rows arrive in primary key order, so a group's rows are consecutive. Each group answers one
  row: aggregates over its rows, any other selector the value of its first row.
* ``LIMIT`` counts groups; ``PER PARTITION LIMIT`` counts groups within a partition.
  ``DISTINCT`` may group on the partition key only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ringflow.cql._exec_selectors import Selection
from ringflow.cql._exec_where import Restrictions
from ringflow.errors import InvalidRequest
from ringflow.schema import Column, ColumnKind, Table
from ringflow.storage import ResultRow

_ORDER = (
    "Group by currently only support groups of columns following their declared order in the "
    "PRIMARY KEY"
)


def _restricted_by_eq(column: Column, restrictions: Restrictions) -> bool:
    if column.kind is ColumnKind.PARTITION_KEY:
        keys = restrictions.partition_keys
        return bool(keys) and len({key[column.position] for key in keys or ()}) == 1
    prefixes = restrictions.clustering_prefixes
    return (
        bool(prefixes)
        and all(len(p) > column.position for p in prefixes)
        and (len({p[column.position] for p in prefixes}) == 1)
    )


def group_width(
    group_by: Sequence[str], table: Table, restrictions: Restrictions, *, distinct: bool
) -> int:
    """How many primary key components make a group's key (module rules); InvalidRequest with
    Cassandra's messages otherwise."""
    key_columns = list(table.primary_key_columns)
    position = 0
    for name in group_by:
        column = table.column(name)
        if not column.is_primary_key:
            raise InvalidRequest(
                "Group by is currently only supported on the columns of the PRIMARY KEY, got "
                + name
            )
        while True:
            if position >= len(key_columns):
                raise InvalidRequest(_ORDER)
            current = key_columns[position]
            position += 1
            if current.name == column.name:
                break
            if not _restricted_by_eq(current, restrictions):
                raise InvalidRequest(_ORDER)
    if position < len(table.partition_key_columns):
        raise InvalidRequest("Group by is not supported on only a part of the partition key")
    if distinct and position > len(table.partition_key_columns):
        raise InvalidRequest(
            "Grouping on clustering columns is not allowed for SELECT DISTINCT queries"
        )
    return position


def grouped_rows(
    rows: Iterable[ResultRow],
    width: int,
    selection: Selection,
    limit: int | None,
    per_partition_limit: int | None,
) -> list[tuple[bytes | None, ...]]:
    """One answer row per group of ``rows`` (module rules)."""
    grouping = GroupedRows(width, selection, limit, per_partition_limit)
    for row in rows:
        if not grouping.add(row):
            break
    return grouping.answers()


class GroupedRows:
    """``grouped_rows`` of rows given one at a time (rows read in steps: ``_exec_select``)."""

    def __init__(
        self, width: int, selection: Selection, limit: int | None, per_partition_limit: int | None
    ) -> None:
        self._width, self._selection = width, selection
        self._limit, self._per_partition_limit = limit, per_partition_limit
        self._answers: list[tuple[bytes | None, ...]] = []
        self._group: list[ResultRow] = []
        self._group_key: tuple[bytes, ...] | None = None
        self._partition: tuple[bytes, ...] | None = None
        self._in_partition = 0
        self._skipping = False

    def add(self, row: ResultRow) -> bool:
        """Take ``row``; False once the answer is complete (``LIMIT`` groups): no more rows
        are wanted, ``row`` included."""
        key = (*row.partition_key, *row.clustering)[: self._width]
        if key == self._group_key:
            if not self._skipping:
                self._group.append(row)
            return True
        if self._group:
            self._answers.append(self._selection.fold(self._group))
            self._group = []
        limit = self._limit
        if limit is not None and len(self._answers) >= limit:
            return False
        self._group_key = key
        if row.partition_key != self._partition:
            self._partition, self._in_partition = row.partition_key, 0
        self._in_partition += 1
        per_partition = self._per_partition_limit
        self._skipping = per_partition is not None and self._in_partition > per_partition
        if not self._skipping:
            self._group.append(row)
        return True

    def answers(self) -> list[tuple[bytes | None, ...]]:
        """The answer rows (the last group folded in, unless ``LIMIT`` stopped before it)."""
        limit = self._limit
        if self._group and (limit is None or len(self._answers) < limit):
            self._answers.append(self._selection.fold(self._group))
            self._group = []
        return self._answers
