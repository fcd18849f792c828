"""INSERT, UPDATE, DELETE and BATCH.

Rules (CQL.textile "INSERT", "UPDATE", "DELETE", "BATCH", re-expressed):

* ``INSERT INTO t (cols) VALUES (terms) [IF NOT EXISTS] [USING ..]``; as many values as columns;
  or ``INSERT INTO t JSON 'text'|marker [DEFAULT NULL|UNSET] ...``;
* ``UPDATE t [USING ..] SET ops WHERE rels [IF EXISTS | IF conds]`` where an op is ``c = v``,
  ``c[k] = v``, ``c.f = v``, ``c = c + v``, ``c = c - v``, ``c = v + c``, ``c += v``, ``c -= v``
  (the column on the right must be the one assigned);
* ``DELETE [c, c[k], c.f, ..] FROM t [USING TIMESTAMP n] WHERE rels [IF ..]``;
* ``BEGIN [LOGGED|UNLOGGED|COUNTER] BATCH [USING TIMESTAMP n] stmt [;] .. APPLY BATCH``; bind
  markers are numbered across the whole batch and each child lists its own.
"""

from __future__ import annotations

from collections.abc import Callable

from ringflow.cql._ast import (
    AddTo,
    Assignment,
    BeginBatchStatement,
    BindMarker,
    DeleteColumn,
    DeleteElement,
    DeleteField,
    DeleteStatement,
    DeleteTarget,
    InsertStatement,
    ModificationStatement,
    Prepend,
    RemoveFrom,
    SetElement,
    SetField,
    SetValue,
    StringLiteral,
    Term,
    UpdateStatement,
    UsingClause,
)
from ringflow.cql._lexer import Token
from ringflow.cql._parse_clauses import (
    USING_ALL,
    USING_NO_TTL,
    parse_if_clause,
    parse_using,
    parse_where,
)
from ringflow.cql._parse_core import (
    Cursor,
    is_name_token,
    parse_identifier,
    parse_identifier_list,
    parse_if_not_exists,
    parse_qualified_name,
)
from ringflow.cql._parse_terms import parse_term, parse_terms_in_parentheses
from ringflow.cql._requests import BatchType


def parse_insert(cursor: Cursor) -> InsertStatement:
    start = cursor.marker_count()
    cursor.expect_word("insert")
    cursor.expect_word("into")
    table = parse_qualified_name(cursor, "a table name")
    if cursor.accept_word("json"):
        json, default_unset = _parse_json_source(cursor)
        columns: tuple[str, ...] = ()
        values: tuple[Term, ...] = ()
    else:
        json, default_unset = None, False
        columns, values = _parse_columns_and_values(cursor)
    if_not_exists = parse_if_not_exists(cursor)
    using = parse_using(cursor, USING_ALL) if cursor.accept_word("using") else UsingClause()
    return InsertStatement(
        table=table,
        columns=columns,
        values=values,
        json=json,
        json_default_unset=default_unset,
        if_not_exists=if_not_exists,
        using=using,
        bind_markers=cursor.markers_since(start),
    )


def _parse_json_source(cursor: Cursor) -> tuple[Term, bool]:
    token = cursor.peek()
    json = parse_term(cursor)
    if not isinstance(json, StringLiteral | BindMarker):
        raise cursor.fail("expected a JSON string or a bind marker", token)
    if not cursor.accept_word("default"):
        return json, False
    if cursor.accept_word("unset"):
        return json, True
    cursor.expect_word("null")
    return json, False


def _parse_columns_and_values(cursor: Cursor) -> tuple[tuple[str, ...], tuple[Term, ...]]:
    columns = parse_identifier_list(cursor, "a column name")
    cursor.expect_word("values")
    values_token = cursor.peek()
    values = parse_terms_in_parentheses(cursor, allow_empty=False)
    if len(values) != len(columns):
        raise cursor.fail(
            f"expected as many values as columns ({len(columns)}), not {len(values)}",
            values_token,
        )
    return columns, values


def parse_update(cursor: Cursor) -> UpdateStatement:
    start = cursor.marker_count()
    cursor.expect_word("update")
    table = parse_qualified_name(cursor, "a table name")
    using = parse_using(cursor, USING_ALL) if cursor.accept_word("using") else UsingClause()
    cursor.expect_word("set")
    assignments = [_parse_assignment(cursor)]
    while cursor.accept_symbol(","):
        assignments.append(_parse_assignment(cursor))
    cursor.expect_word("where")
    where = parse_where(cursor)
    if_exists, conditions = parse_if_clause(cursor) if cursor.accept_word("if") else (False, ())
    return UpdateStatement(
        table=table,
        assignments=tuple(assignments),
        where=where,
        using=using,
        if_exists=if_exists,
        conditions=conditions,
        bind_markers=cursor.markers_since(start),
    )


def _parse_assignment(cursor: Cursor) -> Assignment:
    column = parse_identifier(cursor, "a column name")
    if cursor.accept_symbol("["):
        key = parse_term(cursor)
        cursor.expect_symbol("]")
        cursor.expect_symbol("=")
        return SetElement(column, key, parse_term(cursor))
    if cursor.accept_symbol("."):
        field = parse_identifier(cursor, "a field name")
        cursor.expect_symbol("=")
        return SetField(column, field, parse_term(cursor))
    if cursor.accept_symbol("+="):
        return AddTo(column, parse_term(cursor))
    if cursor.accept_symbol("-="):
        return RemoveFrom(column, parse_term(cursor))
    if not cursor.accept_symbol("="):
        raise cursor.fail("expected '=', '+=', '-=', '[' or '.'")
    if is_name_token(cursor.peek()) and cursor.at_symbol("+", "-", ahead=1):
        _expect_same_column(cursor, column)
        sign = cursor.advance().value
        value = parse_term(cursor)
        return AddTo(column, value) if sign == "+" else RemoveFrom(column, value)
    value = parse_term(cursor)
    if cursor.accept_symbol("+"):
        _expect_same_column(cursor, column)
        return Prepend(column, value)
    return SetValue(column, value)


def _expect_same_column(cursor: Cursor, column: str) -> None:
    token: Token = cursor.peek()
    if parse_identifier(cursor, "a column name") != column:
        raise cursor.fail(
            f"expected the assigned column {column!r} (only {column} = {column} + v, "
            f"{column} = {column} - v and {column} = v + {column} are supported)",
            token,
        )


def parse_delete(cursor: Cursor) -> DeleteStatement:
    start = cursor.marker_count()
    cursor.expect_word("delete")
    targets: list[DeleteTarget] = []
    if not cursor.at_word("from"):
        targets.append(_parse_delete_target(cursor))
        while cursor.accept_symbol(","):
            targets.append(_parse_delete_target(cursor))
    cursor.expect_word("from")
    table = parse_qualified_name(cursor, "a table name")
    using = parse_using(cursor, USING_NO_TTL) if cursor.accept_word("using") else UsingClause()
    cursor.expect_word("where")
    where = parse_where(cursor)
    if_exists, conditions = parse_if_clause(cursor) if cursor.accept_word("if") else (False, ())
    return DeleteStatement(
        table=table,
        where=where,
        targets=tuple(targets),
        using=using,
        if_exists=if_exists,
        conditions=conditions,
        bind_markers=cursor.markers_since(start),
    )


def _parse_delete_target(cursor: Cursor) -> DeleteTarget:
    column = parse_identifier(cursor, "a column name or FROM")
    if cursor.accept_symbol("["):
        key = parse_term(cursor)
        cursor.expect_symbol("]")
        return DeleteElement(column, key)
    if cursor.accept_symbol("."):
        return DeleteField(column, parse_identifier(cursor, "a field name"))
    return DeleteColumn(column)


_BATCH_KINDS = {
    "logged": BatchType.LOGGED,
    "unlogged": BatchType.UNLOGGED,
    "counter": BatchType.COUNTER,
}
_BATCH_CHILDREN: dict[str, Callable[[Cursor], ModificationStatement]] = {
    "insert": parse_insert,
    "update": parse_update,
    "delete": parse_delete,
}


def parse_batch(cursor: Cursor) -> BeginBatchStatement:
    start = cursor.marker_count()
    cursor.expect_word("begin")
    kind = BatchType.LOGGED
    if cursor.at_word(*_BATCH_KINDS):
        kind = _BATCH_KINDS[cursor.advance().value]
    cursor.expect_word("batch")
    using = parse_using(cursor, USING_NO_TTL) if cursor.accept_word("using") else UsingClause()
    children: list[ModificationStatement] = []
    while not cursor.at_word("apply"):
        if not cursor.at_word(*_BATCH_CHILDREN):
            raise cursor.fail("expected INSERT, UPDATE, DELETE or APPLY BATCH")
        children.append(_BATCH_CHILDREN[cursor.peek().value](cursor))
        while cursor.accept_symbol(";"):
            pass
    cursor.expect_word("apply")
    cursor.expect_word("batch")
    return BeginBatchStatement(
        statements=tuple(children),
        kind=kind,
        using=using,
        bind_markers=cursor.markers_since(start),
    )
