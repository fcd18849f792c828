"""Schema evolution of the change pipeline: what an ``ALTER TABLE`` of the source changed, and
the table a destination holds once it has followed several versions of the source (issue 15).

Rules, as Debezium and Scylla CDC users expect them:

- A destination never loses a column: its table is the **union** of the source versions it took
  (:func:`union_table`): the newest version's columns, then the value columns older versions
  had and the newest lacks (dropped at the source: kept, with their values as they were; no
  new value arrives for them).
- A column dropped at the source and added back is the same column at the destination, still
  holding its values from before the drop; the source no longer shows them (Cassandra never
  reads a cell written before its column's drop, ``system_schema.dropped_columns``). Rows
  written since agree; the older values stay at the destination until overwritten.
- A same-named column with another type or kind, or another primary key, cannot be followed:
  :class:`~ringflow.pipeline._errors.SchemaConflict` names it and says what to do.
- Only the columns matter here (names, types, kinds, key positions); a change of table options
  (``WITH cdc = {...}``: pre/post-images, TTL) changes what the log holds, not how it reads.
"""

from __future__ import annotations

import dataclasses

from ringflow.pipeline._errors import SchemaConflict
from ringflow.schema import Column, Table


def value_columns(table: Table) -> tuple[Column, ...]:
    """The static and regular columns of ``table``."""
    return table.static_columns + table.regular_columns


def same_columns(first: Table, second: Table) -> bool:
    """The two tables have the same columns (names, types, kinds, key positions and order),
    in any order."""
    return sorted(first.columns, key=_column_key) == sorted(second.columns, key=_column_key)


def _column_key(column: Column) -> tuple[str, str, int]:
    return (column.name, column.kind.value, column.position)


def column_changes(old: Table, new: Table) -> tuple[list[Column], list[Column]]:
    """(the value columns ``new`` has and ``old`` has not, those ``old`` has and ``new`` has
    not), each in table order; a column with another type counts in both."""
    added = [c for c in value_columns(new) if _changed(old, c)]
    dropped = [c for c in value_columns(old) if _changed(new, c)]
    return added, dropped


def _changed(table: Table, column: Column) -> bool:
    return not table.has_column(column.name) or table.column(column.name) != column


def describe_change(old: Table, new: Table) -> str:
    """``added c (int), d (set<text>); dropped b (text)`` (or ``no column changed``)."""
    added, dropped = column_changes(old, new)
    parts = []
    if added:
        parts.append("added " + ", ".join(f"{c.name} ({c.type.cql_name()})" for c in added))
    if dropped:
        parts.append("dropped " + ", ".join(f"{c.name} ({c.type.cql_name()})" for c in dropped))
    return "; ".join(parts) or "no column changed"


def union_table(kept: Table, current: Table, where: str) -> Table:
    """``current`` plus the value columns of ``kept`` it lacks (module rules), with
    ``current``'s name, options and id; SchemaConflict naming ``where`` (the destination) when
    a column of both differs in type or kind, or the primary keys differ."""
    keys = [c for c in kept.columns if c.is_primary_key]
    if keys != [c for c in current.columns if c.is_primary_key]:
        raise SchemaConflict(
            f"{where} holds {kept.keyspace}.{kept.name} with primary key "
            f"{[(c.name, c.type.cql_name()) for c in keys]}, the source table now has "
            f"{[(c.name, c.type.cql_name()) for c in current.primary_key_columns]}: "
            "replicate it to another destination table"
        )
    extra = []
    for column in value_columns(kept):
        if not current.has_column(column.name):
            extra.append(column)
            continue
        now = current.column(column.name)
        if (now.type, now.kind) != (column.type, column.kind):
            raise SchemaConflict(
                f"{where} holds column {column.name!r} as {column.kind.value} "
                f"{column.type.cql_name()}, the source table now has it as {now.kind.value} "
                f"{now.type.cql_name()}: drop or rename it at the destination, or replicate "
                "to another destination table"
            )
    if not extra:
        return current
    return dataclasses.replace(current, columns=(*current.columns, *extra))
