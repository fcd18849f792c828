"""Schema statements: USE, TRUNCATE, CREATE/ALTER/DROP of keyspaces, tables and user types.

Rules (CQL.textile "Data Definition", re-expressed):

* ``CREATE KEYSPACE [IF NOT EXISTS] ks WITH opt = v AND ..`` (``SCHEMA`` means ``KEYSPACE``);
  ``ALTER KEYSPACE [IF EXISTS] ks WITH ..``; ``DROP KEYSPACE [IF EXISTS] ks``;
* ``CREATE TABLE [IF NOT EXISTS] t (c type [STATIC] [PRIMARY KEY], .., PRIMARY KEY ((a, b), c))
  [WITH CLUSTERING ORDER BY (c DESC) AND COMPACT STORAGE AND opt = v ..]``; exactly one
  primary key definition (inline or a clause); a trailing comma before ``)`` is allowed;
* ``ALTER TABLE [IF EXISTS] t ADD [IF NOT EXISTS] c type [STATIC] | ADD (c type, ..)
  | DROP [IF EXISTS] c | DROP (c, ..) [USING TIMESTAMP n] | RENAME [IF EXISTS] a TO b AND ..
  | WITH opt = v ..``; ``DROP TABLE [IF EXISTS] t``; ``COLUMNFAMILY`` means ``TABLE``;
* ``CREATE TYPE [IF NOT EXISTS] t (f type, ..)``; ``DROP TYPE [IF EXISTS] t``;
* option names appear once; values are constants or maps of constants, never bind markers.
Statements outside this subset (indexes, views, functions) are answered with an InvalidRequest
naming the feature; roles and users are parsed by ``_parse_auth``.
"""

from __future__ import annotations

from collections.abc import Callable

from ringflow.cql._ast import (
    AddColumns,
    AlterKeyspaceStatement,
    AlterTableAction,
    AlterTableProperties,
    AlterTableStatement,
    AlterTypeStatement,
    CallStatement,
    ColumnDefinition,
    CreateKeyspaceStatement,
    CreateTableStatement,
    CreateTypeStatement,
    DropColumns,
    DropKeyspaceStatement,
    DropTableStatement,
    DropTypeStatement,
    FieldDefinition,
    OrderBy,
    Properties,
    Property,
    RenameColumns,
    Statement,
    TruncateStatement,
    UnsupportedStatement,
    UseStatement,
)
from ringflow.cql._lexer import TokenKind
from ringflow.cql._parse_auth import parse_alter_role, parse_create_role, parse_drop_role
from ringflow.cql._parse_clauses import USING_TIMEOUT_ONLY, parse_order_by_items, parse_using
from ringflow.cql._parse_core import (
    Cursor,
    parse_identifier,
    parse_identifier_list,
    parse_if_exists,
    parse_if_not_exists,
    parse_int_text,
    parse_property,
    parse_qualified_name,
    parse_type_spec,
)
from ringflow.cql._parse_terms import parse_terms_in_parentheses

_TABLE_WORDS = ("table", "columnfamily")
_KEYSPACE_WORDS = ("keyspace", "schema")


def parse_use(cursor: Cursor) -> UseStatement:
    cursor.expect_word("use")
    return UseStatement(parse_identifier(cursor, "a keyspace name"))


def parse_call(cursor: Cursor) -> CallStatement:
    """``CALL ns.procedure(term, ...)`` (the namespace is required)."""
    start = cursor.marker_count()
    cursor.expect_word("call")
    name = parse_qualified_name(cursor, "a procedure name (namespace.procedure)")
    if name.keyspace is None:
        raise cursor.fail("expected a procedure name with its namespace (e.g. NodeOps.repair)")
    arguments = parse_terms_in_parentheses(cursor, allow_empty=True)
    return CallStatement(name, arguments, cursor.markers_since(start))


def parse_truncate(cursor: Cursor) -> TruncateStatement:
    start = cursor.marker_count()
    cursor.expect_word("truncate")
    if cursor.at_word(*_TABLE_WORDS):
        cursor.advance()
    table = parse_qualified_name(cursor, "a table name")
    timeout = None
    if cursor.accept_word("using"):
        timeout = parse_using(cursor, USING_TIMEOUT_ONLY).timeout
    return TruncateStatement(table, timeout, cursor.markers_since(start))


def _dispatch(
    cursor: Cursor, verb: str, table: dict[str, Callable[[Cursor], Statement]]
) -> Statement:
    cursor.expect_word(verb)
    token = cursor.peek()
    parse = table.get(token.value) if token.kind is TokenKind.IDENT else None
    if parse is None and token.kind is TokenKind.IDENT:
        unsupported = parse_unsupported(cursor, verb, token.value)
        if unsupported is not None:
            return unsupported
    if parse is None:
        words = sorted({word.upper() for word in table} - {"SCHEMA", "COLUMNFAMILY"})
        objects = " or ".join([", ".join(words[:-1]), words[-1]])
        raise cursor.fail(f"expected {objects} after {verb.upper()}")
    cursor.advance()
    return parse(cursor)


def parse_create(cursor: Cursor) -> Statement:
    return _dispatch(cursor, "create", _CREATE)


def parse_alter(cursor: Cursor) -> Statement:
    return _dispatch(cursor, "alter", _ALTER)


def parse_drop(cursor: Cursor) -> Statement:
    return _dispatch(cursor, "drop", _DROP)


# --- keyspaces -----------------------------------------------------------------------------------


def _create_keyspace(cursor: Cursor) -> Statement:
    if_not_exists = parse_if_not_exists(cursor)
    keyspace = parse_identifier(cursor, "a keyspace name")
    cursor.expect_word("with")
    return CreateKeyspaceStatement(keyspace, _parse_properties(cursor), if_not_exists)


def _alter_keyspace(cursor: Cursor) -> Statement:
    if_exists = parse_if_exists(cursor)
    keyspace = parse_identifier(cursor, "a keyspace name")
    cursor.expect_word("with")
    return AlterKeyspaceStatement(keyspace, _parse_properties(cursor), if_exists)


def _drop_keyspace(cursor: Cursor) -> Statement:
    if_exists = parse_if_exists(cursor)
    return DropKeyspaceStatement(parse_identifier(cursor, "a keyspace name"), if_exists)


def _parse_properties(cursor: Cursor) -> Properties:
    items: list[Property] = []
    while True:
        _append_property(cursor, items)
        if not cursor.accept_word("and"):
            return Properties(tuple(items))


def _append_property(cursor: Cursor, items: list[Property]) -> None:
    token = cursor.peek()
    item = parse_property(cursor)
    if any(existing.name == item.name for existing in items):
        raise cursor.fail(f"expected each option once, but '{item.name}' is repeated", token)
    items.append(item)


# --- tables --------------------------------------------------------------------------------------


def _create_table(cursor: Cursor) -> Statement:
    if_not_exists = parse_if_not_exists(cursor)
    table = parse_qualified_name(cursor, "a table name")
    columns, partition_key, clustering_columns = _parse_table_body(cursor)
    clustering_order: tuple[OrderBy, ...] = ()
    compact_storage = False
    items: list[Property] = []
    if cursor.accept_word("with"):
        while True:
            if cursor.at_word("clustering") and cursor.at_word("order", ahead=1):
                clustering_order = _parse_clustering_order(cursor, clustering_order)
            elif cursor.at_word("compact") and cursor.at_word("storage", ahead=1):
                cursor.position += 2
                compact_storage = True
            else:
                _append_property(cursor, items)
            if not cursor.accept_word("and"):
                break
    return CreateTableStatement(
        table=table,
        columns=columns,
        partition_key=partition_key,
        clustering_columns=clustering_columns,
        clustering_order=clustering_order,
        properties=Properties(tuple(items)),
        compact_storage=compact_storage,
        if_not_exists=if_not_exists,
    )


def _parse_clustering_order(cursor: Cursor, previous: tuple[OrderBy, ...]) -> tuple[OrderBy, ...]:
    if previous:
        raise cursor.fail("expected CLUSTERING ORDER at most once")
    cursor.position += 2
    cursor.expect_word("by")
    cursor.expect_symbol("(")
    items = parse_order_by_items(cursor)
    cursor.expect_symbol(")")
    return items


_PrimaryKey = tuple[tuple[str, ...], tuple[str, ...]]


def _parse_table_body(
    cursor: Cursor,
) -> tuple[tuple[ColumnDefinition, ...], tuple[str, ...], tuple[str, ...]]:
    cursor.expect_symbol("(")
    columns: list[ColumnDefinition] = []
    primary_key: _PrimaryKey | None = None
    while True:
        token = cursor.peek()
        key: _PrimaryKey | None
        if cursor.at_word("primary"):
            key = _parse_primary_key_clause(cursor)
        else:
            column, inline_key = _parse_column_definition(cursor)
            columns.append(column)
            key = ((column.name,), ()) if inline_key else None
        if key is not None and primary_key is not None:
            raise cursor.fail("expected a single PRIMARY KEY definition", token)
        primary_key = key or primary_key
        if not cursor.accept_symbol(",") or cursor.at_symbol(")"):
            break
    if primary_key is None:
        raise cursor.fail("expected a PRIMARY KEY definition")
    cursor.expect_symbol(")")
    return tuple(columns), primary_key[0], primary_key[1]


def _parse_column_definition(cursor: Cursor) -> tuple[ColumnDefinition, bool]:
    """``name type [STATIC] [PRIMARY KEY]``; the flag says whether it was the inline key."""
    name = parse_identifier(cursor, "a column name or PRIMARY KEY")
    spec = parse_type_spec(cursor)
    static = cursor.accept_word("static")
    inline_key = cursor.accept_word("primary")
    if inline_key:
        cursor.expect_word("key")
    return ColumnDefinition(name, spec, static), inline_key


def _parse_primary_key_clause(cursor: Cursor) -> _PrimaryKey:
    cursor.expect_word("primary")
    cursor.expect_word("key")
    cursor.expect_symbol("(")
    if cursor.at_symbol("("):
        partition_key = parse_identifier_list(cursor, "a partition key column name")
    else:
        partition_key = (parse_identifier(cursor, "a partition key column name"),)
    clustering: list[str] = []
    while cursor.accept_symbol(","):
        clustering.append(parse_identifier(cursor, "a clustering column name"))
    cursor.expect_symbol(")")
    return partition_key, tuple(clustering)


def _alter_table(cursor: Cursor) -> Statement:
    if_exists = parse_if_exists(cursor)
    table = parse_qualified_name(cursor, "a table name")
    token = cursor.peek()
    action = _ALTER_TABLE_ACTIONS.get(token.value) if token.kind is TokenKind.IDENT else None
    if action is None:
        raise cursor.fail("expected ADD, DROP, RENAME or WITH")
    cursor.advance()
    return AlterTableStatement(table, action(cursor), if_exists)


def _alter_add(cursor: Cursor) -> AlterTableAction:
    if_not_exists = parse_if_not_exists(cursor)
    if not cursor.accept_symbol("("):
        return AddColumns((_parse_added_column(cursor),), if_not_exists)
    columns = [_parse_added_column(cursor)]
    while cursor.accept_symbol(","):
        columns.append(_parse_added_column(cursor))
    cursor.expect_symbol(")")
    return AddColumns(tuple(columns), if_not_exists)


def _parse_added_column(cursor: Cursor) -> ColumnDefinition:
    name = parse_identifier(cursor, "a column name")
    spec = parse_type_spec(cursor)
    return ColumnDefinition(name, spec, cursor.accept_word("static"))


def _alter_drop(cursor: Cursor) -> AlterTableAction:
    if_exists = parse_if_exists(cursor)
    if cursor.at_symbol("("):
        columns = parse_identifier_list(cursor, "a column name")
    else:
        columns = (parse_identifier(cursor, "a column name"),)
    timestamp = None
    if cursor.accept_word("using"):
        cursor.expect_word("timestamp")
        token = cursor.peek()
        if token.kind is not TokenKind.INTEGER:
            raise cursor.fail("expected an integer timestamp")
        timestamp = parse_int_text(cursor, cursor.advance())
    return DropColumns(columns, if_exists, timestamp)


def _alter_rename(cursor: Cursor) -> AlterTableAction:
    if_exists = parse_if_exists(cursor)
    renames = [_parse_rename(cursor)]
    while cursor.accept_word("and"):
        renames.append(_parse_rename(cursor))
    return RenameColumns(tuple(renames), if_exists)


def _parse_rename(cursor: Cursor) -> tuple[str, str]:
    old = parse_identifier(cursor, "a column name")
    cursor.expect_word("to")
    return old, parse_identifier(cursor, "a column name")


def _alter_with(cursor: Cursor) -> AlterTableAction:
    return AlterTableProperties(_parse_properties(cursor))


def _drop_table(cursor: Cursor) -> Statement:
    if_exists = parse_if_exists(cursor)
    return DropTableStatement(parse_qualified_name(cursor, "a table name"), if_exists)


# --- user types ----------------------------------------------------------------------------------


def _create_type(cursor: Cursor) -> Statement:
    if_not_exists = parse_if_not_exists(cursor)
    name = parse_qualified_name(cursor, "a type name")
    cursor.expect_symbol("(")
    fields: list[FieldDefinition] = []
    while True:
        field = parse_identifier(cursor, "a field name")
        fields.append(FieldDefinition(field, parse_type_spec(cursor)))
        if not cursor.accept_symbol(",") or cursor.at_symbol(")"):
            break
    cursor.expect_symbol(")")
    return CreateTypeStatement(name, tuple(fields), if_not_exists)


def _alter_type(cursor: Cursor) -> Statement:
    if_exists = parse_if_exists(cursor)
    name = parse_qualified_name(cursor, "a type name")
    if cursor.accept_word("add"):
        if_not_exists = parse_if_not_exists(cursor)
        field = parse_identifier(cursor, "a field name")
        added = FieldDefinition(field, parse_type_spec(cursor))
        return AlterTypeStatement(name, add=added, if_exists=if_exists, if_field=if_not_exists)
    if cursor.accept_word("rename"):
        if_field_exists = parse_if_exists(cursor)
        renames = [_parse_field_rename(cursor)]
        while cursor.accept_word("and"):
            renames.append(_parse_field_rename(cursor))
        return AlterTypeStatement(
            name, renames=tuple(renames), if_exists=if_exists, if_field=if_field_exists
        )
    if cursor.accept_word("alter"):
        field = parse_identifier(cursor, "a field name")
        cursor.expect_word("type")
        parse_type_spec(cursor)
        return AlterTypeStatement(name, altered_field=field, if_exists=if_exists)
    raise cursor.fail("expected ADD, RENAME or ALTER")


def _parse_field_rename(cursor: Cursor) -> tuple[str, str]:
    old = parse_identifier(cursor, "a field name")
    cursor.expect_word("to")
    return old, parse_identifier(cursor, "a field name")


def _drop_type(cursor: Cursor) -> Statement:
    if_exists = parse_if_exists(cursor)
    return DropTypeStatement(parse_qualified_name(cursor, "a type name"), if_exists)


_MATERIALIZED_VIEWS = "Materialized views are"
_INDEXES = "Secondary indexes are"
_FUNCTIONS = "User-defined functions and aggregates are"
_TRIGGERS = "Triggers are"
_UNSUPPORTED: dict[tuple[str, str], str] = {
    **{(verb, "materialized"): _MATERIALIZED_VIEWS for verb in ("create", "alter", "drop")},
    **{(verb, word): _INDEXES for verb in ("create", "drop") for word in ("index", "custom")},
    **{
        (verb, word): _FUNCTIONS
        for verb in ("create", "drop")
        for word in ("function", "aggregate", "or")
    },
    **{(verb, "trigger"): _TRIGGERS for verb in ("create", "drop")},
}
"""Cassandra statements ringflow does not implement, answered with an InvalidRequest that says
so (as issue 20 asks: never a syntax error for a statement Cassandra accepts)."""


def parse_unsupported(cursor: Cursor, verb: str, word: str) -> UnsupportedStatement | None:
    """If ``verb word ...`` starts a statement ringflow does not support, that statement (its
    tokens up to the next ``;`` skipped); else None, nothing consumed."""
    feature = _UNSUPPORTED.get((verb, word)) or _UNSUPPORTED.get((verb, ""))
    if feature is None:
        return None
    while not cursor.at_end() and not cursor.at_symbol(";"):
        cursor.advance()
    return UnsupportedStatement(f"{feature} not supported by ringflow")


_CREATE: dict[str, Callable[[Cursor], Statement]] = {
    "keyspace": _create_keyspace,
    "schema": _create_keyspace,
    "table": _create_table,
    "columnfamily": _create_table,
    "type": _create_type,
    "role": lambda cursor: parse_create_role(cursor, "role"),
    "user": lambda cursor: parse_create_role(cursor, "user"),
}
_ALTER: dict[str, Callable[[Cursor], Statement]] = {
    "keyspace": _alter_keyspace,
    "schema": _alter_keyspace,
    "table": _alter_table,
    "columnfamily": _alter_table,
    "type": _alter_type,
    "role": lambda cursor: parse_alter_role(cursor, "role"),
    "user": lambda cursor: parse_alter_role(cursor, "user"),
}
_DROP: dict[str, Callable[[Cursor], Statement]] = {
    "keyspace": _drop_keyspace,
    "schema": _drop_keyspace,
    "table": _drop_table,
    "columnfamily": _drop_table,
    "type": _drop_type,
    "role": lambda cursor: parse_drop_role(cursor, "role"),
    "user": lambda cursor: parse_drop_role(cursor, "user"),
}
_ALTER_TABLE_ACTIONS: dict[str, Callable[[Cursor], AlterTableAction]] = {
    "add": _alter_add,
    "drop": _alter_drop,
    "rename": _alter_rename,
    "with": _alter_with,
}
