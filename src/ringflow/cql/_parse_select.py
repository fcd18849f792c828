"""SELECT: the select clause (selectors, aliases), FROM, WHERE and the trailing clauses.

Rules (CQL.textile "SELECT", plus Scylla's ``BYPASS CACHE`` and ``USING TIMEOUT``):

* clause order is fixed: ``SELECT [JSON] [DISTINCT] sel FROM t [WHERE ..] [GROUP BY ..]
  [ORDER BY ..] [PER PARTITION LIMIT n] [LIMIT n] [ALLOW FILTERING] [BYPASS CACHE]
  [USING TIMEOUT d]``;
* ``JSON`` and ``DISTINCT`` are also valid column names: they are modifiers only when a selector
  follows (``SELECT json FROM t`` selects the column ``json``);
* ``COUNT(*)`` and ``COUNT(1)`` count rows; ``WRITETIME(c)``, ``TTL(c)`` and ``CAST(x AS t)`` are
  their own nodes; any other ``name(args)`` is a FunctionSelector whose arguments are selectors
  (columns, literals, markers or nested calls).
"""

from __future__ import annotations

from collections.abc import Callable

from ringflow.cql._ast import (
    CastSelector,
    ColumnSelector,
    CountRows,
    ElementSelector,
    FieldSelector,
    FunctionSelector,
    SelectItem,
    Selector,
    SelectStatement,
    TermSelector,
    TtlOf,
    WritetimeOf,
)
from ringflow.cql._lexer import TokenKind
from ringflow.cql._parse_clauses import (
    parse_duration_value,
    parse_int_value,
    parse_order_by_items,
    parse_where,
)
from ringflow.cql._parse_core import (
    Cursor,
    is_name_token,
    parse_identifier,
    parse_qualified_name,
    parse_type_spec,
)
from ringflow.cql._parse_terms import at_function_call, parse_function_name, parse_term


def parse_select(cursor: Cursor) -> SelectStatement:
    start = cursor.marker_count()
    cursor.expect_word("select")
    json = _accept_modifier(cursor, "json")
    distinct = _accept_modifier(cursor, "distinct")
    selection = _parse_selection(cursor)
    cursor.expect_word("from")
    table = parse_qualified_name(cursor, "a table name")
    where = parse_where(cursor) if cursor.accept_word("where") else ()
    group_by: tuple[str, ...] = ()
    if _accept_words(cursor, "group", "by"):
        group_by = _parse_group_by(cursor)
    order_by = parse_order_by_items(cursor) if _accept_words(cursor, "order", "by") else ()
    per_partition_limit = None
    if _accept_words(cursor, "per", "partition", "limit"):
        per_partition_limit = parse_int_value(cursor)
    limit = parse_int_value(cursor) if cursor.accept_word("limit") else None
    allow_filtering = _accept_words(cursor, "allow", "filtering")
    bypass_cache = _accept_words(cursor, "bypass", "cache")
    timeout = parse_duration_value(cursor) if _accept_words(cursor, "using", "timeout") else None
    return SelectStatement(
        table=table,
        selection=selection,
        where=where,
        distinct=distinct,
        json=json,
        group_by=group_by,
        order_by=order_by,
        per_partition_limit=per_partition_limit,
        limit=limit,
        allow_filtering=allow_filtering,
        bypass_cache=bypass_cache,
        timeout=timeout,
        bind_markers=cursor.markers_since(start),
    )


def _accept_words(cursor: Cursor, first: str, *rest: str) -> bool:
    """Consume ``first rest...`` if ``first`` is next; once ``first`` matched, the rest must."""
    if not cursor.accept_word(first):
        return False
    for word in rest:
        cursor.expect_word(word)
    return True


def _accept_modifier(cursor: Cursor, word: str) -> bool:
    """``JSON``/``DISTINCT`` as a modifier, unless the word is the selected column itself."""
    if not cursor.at_word(word):
        return False
    if cursor.at_word("from", "as", ahead=1) or cursor.at_symbol(",", "(", ".", ahead=1):
        return False
    cursor.advance()
    return True


def _parse_selection(cursor: Cursor) -> tuple[SelectItem, ...]:
    if cursor.accept_symbol("*"):
        return ()
    items = [_parse_select_item(cursor)]
    while cursor.accept_symbol(","):
        items.append(_parse_select_item(cursor))
    return tuple(items)


def _parse_select_item(cursor: Cursor) -> SelectItem:
    selector = parse_selector(cursor)
    alias = parse_identifier(cursor, "an alias") if cursor.accept_word("as") else None
    return SelectItem(selector, alias)


def _parse_group_by(cursor: Cursor) -> tuple[str, ...]:
    columns = [parse_identifier(cursor, "a column name")]
    while cursor.accept_symbol(","):
        columns.append(parse_identifier(cursor, "a column name"))
    return tuple(columns)


def parse_selector(cursor: Cursor) -> Selector:
    """One selector, with any ``.field`` accesses and ``[element]`` / ``[start..end]``
    selections after it."""
    with cursor.nested():
        selector = _parse_selector_base(cursor)
        while True:
            if cursor.accept_symbol("."):
                selector = FieldSelector(selector, parse_identifier(cursor, "a field name"))
            elif cursor.accept_symbol("["):
                selector = _parse_element(cursor, selector)
            else:
                return selector


def _parse_element(cursor: Cursor, selector: Selector) -> Selector:
    """After ``[``: ``element]``, ``start..end]``, ``start..]`` or ``..end]``."""
    start = None if cursor.at_symbol("..") else parse_term(cursor)
    if not cursor.accept_symbol(".."):
        cursor.expect_symbol("]")
        return ElementSelector(selector, start)
    end = None if cursor.at_symbol("]") else parse_term(cursor)
    cursor.expect_symbol("]")
    return ElementSelector(selector, start, end, is_slice=True)


def _parse_selector_base(cursor: Cursor) -> Selector:
    token = cursor.peek()
    if at_function_call(cursor):
        special = _SPECIAL_FUNCTIONS.get(token.value) if token.kind is TokenKind.IDENT else None
        if special is not None and cursor.at_symbol("(", ahead=1):
            return special(cursor)
        keyspace, name = parse_function_name(cursor)
        return FunctionSelector(name, _parse_selector_arguments(cursor), keyspace)
    if is_name_token(token):
        cursor.advance()
        return ColumnSelector(token.value)
    return TermSelector(parse_term(cursor))


def _parse_selector_arguments(cursor: Cursor) -> tuple[Selector, ...]:
    cursor.expect_symbol("(")
    if cursor.accept_symbol(")"):
        return ()
    args = [parse_selector(cursor)]
    while cursor.accept_symbol(","):
        args.append(parse_selector(cursor))
    cursor.expect_symbol(")")
    return tuple(args)


def _parse_count(cursor: Cursor) -> Selector:
    """``COUNT(*)`` / ``COUNT(1)`` count rows; ``COUNT(x)`` is the aggregate on ``x``."""
    cursor.advance()
    star = cursor.at_symbol("*", ahead=1)
    one = cursor.peek(1).kind is TokenKind.INTEGER and cursor.peek(1).text == "1"
    if (star or one) and cursor.at_symbol(")", ahead=2):
        cursor.expect_symbol("(")
        cursor.advance()
        cursor.expect_symbol(")")
        return CountRows()
    return FunctionSelector("count", _parse_selector_arguments(cursor))


def _parse_writetime(cursor: Cursor) -> Selector:
    cursor.advance()
    return WritetimeOf(_parse_single_column_argument(cursor))


def _parse_ttl(cursor: Cursor) -> Selector:
    cursor.advance()
    return TtlOf(_parse_single_column_argument(cursor))


def _parse_single_column_argument(cursor: Cursor) -> str:
    cursor.expect_symbol("(")
    column = parse_identifier(cursor, "a column name")
    cursor.expect_symbol(")")
    return column


def _parse_cast(cursor: Cursor) -> Selector:
    cursor.advance()
    cursor.expect_symbol("(")
    selector = parse_selector(cursor)
    cursor.expect_word("as")
    spec = parse_type_spec(cursor)
    cursor.expect_symbol(")")
    return CastSelector(selector, spec)


_SPECIAL_FUNCTIONS: dict[str, Callable[[Cursor], Selector]] = {
    "count": _parse_count,
    "writetime": _parse_writetime,
    "ttl": _parse_ttl,
    "cast": _parse_cast,
}
