"""The CQL text ``DESCRIBE`` answers for a keyspace, a user type and a table. Pure.

Rules (Scylla ``schema::get_create_statement`` / ``schema_properties``,
``keyspace_metadata::describe``, ``user_type_impl::describe``; Cassandra 4
``TableMetadata.toCqlString`` for the virtual-table warning), re-expressed:

* A keyspace: ``CREATE KEYSPACE k WITH replication = {'class': '...', ...} AND
  durable_writes = true;`` (the class first, then the options by name).
* A user type: ``CREATE TYPE k.t (`` one field per line ``);``.
* A table: ``CREATE TABLE k.t (`` the columns (partition key, clustering, static, regular, each
  ``name type [STATIC]``), ``PRIMARY KEY ((p1, p2), c1)``, ``) WITH`` [``ID = ...`` with
  internals] ``CLUSTERING ORDER BY (...)`` when there are clustering columns, then every property
  of the table's ``system_schema.tables`` row by name, then ``cdc = {...}`` when the table has
  the extension. Maps are written ``{'k': 'v'}`` (``class`` first), texts single-quoted.
* ``WITH INTERNALS`` also shows the table's dropped columns as Cassandra 4's
  ``TableMetadata.appendCqlTo`` does: each is declared (with the type
  ``system_schema.dropped_columns`` keeps, user types expanded to tuples) after the current
  columns, where a dropped-then-added column is left out; the CREATE statement is followed by
  ``ALTER TABLE k.t DROP c USING TIMESTAMP <µs>;`` per dropped column, by name, each followed by
  ``ALTER TABLE k.t ADD c <type>;`` when the column was added again. Run again, this recreates
  ``system_schema.dropped_columns``, so old cells stay hidden.
* The statements are valid CQL ringflow accepts, so a described schema can be run again.
* A CDC log table described on its own is wrapped in Scylla's "Do NOT execute" comment; with
  its base it is ``ALTER TABLE k.t_scylla_cdc_log WITH <properties>;``
  (``describe_alter_with_properties``). A virtual table is wrapped in Cassandra's warning.
* Names are quoted when they would not read back as themselves (``quote_name``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ringflow.cql._ast import quote_name
from ringflow.schema import (
    CdcOptions,
    ClusteringOrder,
    Column,
    ColumnKind,
    DroppedColumn,
    Keyspace,
    Table,
    UserType,
    expand_user_types,
    table_properties,
)

CompactionFor = Callable[[Table], Mapping[str, str]]
"""The ``compaction`` map a table shows (a CDC log's follows its base)."""

__all__ = [
    "keyspace_cql",
    "log_alter_cql",
    "quoted",
    "table_cql",
    "type_cql",
]

_INDENT = "\n    "
_LOG_COMMENT = (
    "/* Do NOT execute this statement! It's only for informational purposes.\n"
    "   A CDC log table is created automatically when creating the base with CDC\n"
    "   enabled option.\n\n{}\n*/"
)
_VIRTUAL_COMMENT = (
    "/*\nWarning: Table {} is a virtual table and cannot be recreated with CQL.\n"
    "Structure, for reference:\n{}\n*/"
)


def quoted(text: str) -> str:
    """``text`` as a CQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _map(values: Mapping[str, object], *, class_first: bool = False) -> str:
    keys = sorted(values)
    if class_first and "class" in values:
        keys = ["class", *(key for key in keys if key != "class")]
    return "{" + ", ".join(f"{quoted(key)}: {quoted(str(values[key]))}" for key in keys) + "}"


def _value(name: str, value: object) -> str:
    if isinstance(value, Mapping):
        return _map(value, class_first=name == "compaction")
    if isinstance(value, str):
        return quoted(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _name(keyspace: str, name: str) -> str:
    return f"{quote_name(keyspace)}.{quote_name(name)}"


def keyspace_cql(keyspace: Keyspace) -> str:
    replication = dict(keyspace.replication)
    durable = "true" if keyspace.durable_writes else "false"
    return (
        f"CREATE KEYSPACE {quote_name(keyspace.name)} WITH replication = "
        f"{_map(replication, class_first=True)} AND durable_writes = {durable};"
    )


def type_cql(user_type: UserType) -> str:
    fields = [
        f"    {quote_name(name)} {field_type.cql_name()}"
        for name, field_type in zip(user_type.field_names, user_type.field_types, strict=True)
    ]
    body = ",\n".join(fields)
    return f"CREATE TYPE {_name(user_type.keyspace, user_type.name)} (\n{body}\n);"


def properties_cql(table: Table, compaction: CompactionFor) -> str:
    """The ``name = value`` of every table property, joined by ``AND`` (module rules)."""
    shown = table_properties(table, compaction)
    parts = [f"{name} = {_value(name, shown[name])}" for name in sorted(shown)]
    if table.options.cdc != CdcOptions():
        parts.append(f"cdc = {_map(table.options.cdc.to_map())}")
    return (_INDENT + "AND ").join(parts)


def _column(column: Column) -> str:
    static = " STATIC" if column.kind is ColumnKind.STATIC else ""
    return f"{quote_name(column.name)} {column.type.cql_name()}{static}"


def _primary_key(table: Table) -> str:
    partition = [quote_name(c.name) for c in table.partition_key_columns]
    first = partition[0] if len(partition) == 1 else "(" + ", ".join(partition) + ")"
    return ", ".join([first, *(quote_name(c.name) for c in table.clustering_columns)])


def create_table_cql(
    table: Table,
    compaction: CompactionFor,
    *,
    with_internals: bool,
    dropped: Sequence[DroppedColumn] = (),
) -> str:
    """The bare ``CREATE TABLE`` statement, followed by the ``DROP``/``ADD`` of ``dropped``
    (module rules)."""
    gone = {column.name for column in dropped}
    ordered = [
        column
        for column in (
            table.partition_key_columns
            + table.clustering_columns
            + table.static_columns
            + table.regular_columns
        )
        if column.name not in gone
    ]
    definitions = [_column(column) for column in ordered] + [
        f"{quote_name(column.name)} {expand_user_types(column.type).cql_name()}"
        for column in dropped
    ]
    columns = "".join(f"{_INDENT}{definition}," for definition in definitions)
    head = (
        f"CREATE TABLE {_name(table.keyspace, table.name)} ({columns}"
        f"{_INDENT}PRIMARY KEY ({_primary_key(table)})\n) WITH "
    )
    clauses = []
    if with_internals:
        clauses.append(f"ID = {table.id}")
    if table.clustering_columns:
        orders = ", ".join(
            f"{quote_name(c.name)} {'DESC' if c.order is ClusteringOrder.DESC else 'ASC'}"
            for c in table.clustering_columns
        )
        clauses.append(f"CLUSTERING ORDER BY ({orders})")
    clauses.append(properties_cql(table, compaction))
    return head + (_INDENT + "AND ").join(clauses) + ";" + _dropped_cql(table, dropped)


def _dropped_cql(table: Table, dropped: Sequence[DroppedColumn]) -> str:
    alter = f"\nALTER TABLE {_name(table.keyspace, table.name)}"
    lines = []
    for column in dropped:
        name = quote_name(column.name)
        lines.append(f"{alter} DROP {name} USING TIMESTAMP {column.dropped_at_us};")
        if table.has_column(column.name):
            lines.append(f"{alter} ADD {_column(table.column(column.name))};")
    return "".join(lines)


def table_cql(
    table: Table,
    compaction: CompactionFor,
    *,
    with_internals: bool,
    cdc_log: bool = False,
    virtual: bool = False,
    dropped: Sequence[DroppedColumn] = (),
) -> str:
    """What ``DESCRIBE TABLE`` shows for ``table``: its CREATE statement (with ``dropped``, the
    dropped columns shown with internals), commented out for a CDC log table (``cdc_log``) or a
    virtual table (``virtual``)."""
    statement = create_table_cql(table, compaction, with_internals=with_internals, dropped=dropped)
    if virtual:
        return _VIRTUAL_COMMENT.format(_name(table.keyspace, table.name), statement)
    if cdc_log:
        return _LOG_COMMENT.format(statement)
    return statement


def log_alter_cql(log: Table, compaction: CompactionFor) -> str:
    """``ALTER TABLE k.t_scylla_cdc_log WITH <properties>;``: a CDC log table's properties,
    described after its base (recreating the base recreates the log)."""
    return f"ALTER TABLE {_name(log.keyspace, log.name)} WITH {properties_cql(log, compaction)};"
