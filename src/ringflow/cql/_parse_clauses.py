"""Clauses shared by SELECT, UPDATE, DELETE and BATCH: WHERE, IF, USING and integer values.

Rules (CQL.textile "WHERE clause", "UPDATE", "DELETE", re-expressed):

* a relation is ``column <op> term``, ``column IN (..)`` / ``IN ?``, ``column CONTAINS [KEY]
  term``, ``column[key] <op> term``, ``token(a, b) <op> term`` or ``(c1, c2) <op> tuple`` /
  ``IN ((..), ..)``; relations are joined by ``AND`` only. Which restrictions a table can serve
  (``!=``, filtering, ranges on the partition key) is the executor's decision, not the parser's;
* ``IF EXISTS`` or ``IF cond AND cond ...`` (``column [elem | .field] <op> term``);
* ``USING TIMESTAMP n AND TTL n AND TIMEOUT d`` in any order, each at most once, with the set of
  allowed words depending on the statement; values are integer/duration literals or markers.
"""

from __future__ import annotations

from ringflow.cql._ast import (
    ColumnRelation,
    Condition,
    DurationLiteral,
    ElementRelation,
    IntegerLiteral,
    InValues,
    MultiColumnRelation,
    Operator,
    OrderBy,
    Relation,
    RelationValue,
    Term,
    TokenRelation,
    UsingClause,
)
from ringflow.cql._lexer import TokenKind
from ringflow.cql._parse_core import Cursor, parse_identifier, parse_identifier_list, parse_int_text
from ringflow.cql._parse_terms import (
    parse_bind_marker_or_none,
    parse_term,
    parse_terms_in_parentheses,
)

_COMPARISONS = {
    "=": Operator.EQ,
    "!=": Operator.NEQ,
    "<": Operator.LT,
    "<=": Operator.LTE,
    ">": Operator.GT,
    ">=": Operator.GTE,
}
_EXPECTED_OPERATOR = "expected an operator (=, !=, <, <=, >, >=, IN, NOT IN, CONTAINS)"


def parse_where(cursor: Cursor) -> tuple[Relation, ...]:
    """The relations after ``WHERE`` (the keyword already consumed)."""
    relations = [parse_relation(cursor)]
    while cursor.accept_word("and"):
        relations.append(parse_relation(cursor))
    return tuple(relations)


def parse_relation(cursor: Cursor) -> Relation:
    if cursor.at_word("token") and cursor.at_symbol("(", ahead=1):
        cursor.advance()
        columns = parse_identifier_list(cursor, "a partition key column name")
        operator = _parse_comparison(cursor)
        return TokenRelation(columns, operator, parse_term(cursor))
    if cursor.at_symbol("("):
        return _parse_multi_column_relation(cursor)
    column = parse_identifier(cursor, "a column name, token(..) or '('")
    if cursor.accept_symbol("["):
        key = parse_term(cursor)
        cursor.expect_symbol("]")
        operator = _parse_comparison(cursor)
        return ElementRelation(column, key, operator, parse_term(cursor))
    operator = _parse_operator(cursor)
    return ColumnRelation(column, operator, _parse_operand(cursor, operator))


def _parse_multi_column_relation(cursor: Cursor) -> Relation:
    columns = parse_identifier_list(cursor, "a clustering column name")
    if cursor.accept_word("in"):
        return MultiColumnRelation(columns, Operator.IN, parse_in_values(cursor))
    operator = _parse_comparison(cursor)
    marker = parse_bind_marker_or_none(cursor)
    if marker is not None:
        return MultiColumnRelation(columns, operator, marker)
    if not cursor.at_symbol("("):
        raise cursor.fail("expected a tuple '(..)' or a bind marker")
    return MultiColumnRelation(columns, operator, parse_term(cursor))


def parse_in_values(cursor: Cursor) -> RelationValue:
    """After ``IN``: ``?``/``:name`` (one marker for the whole list) or ``(term, ...)``."""
    marker = parse_bind_marker_or_none(cursor)
    if marker is not None:
        return marker
    if not cursor.at_symbol("("):
        raise cursor.fail("expected '(' or a bind marker after IN")
    return InValues(parse_terms_in_parentheses(cursor, allow_empty=True))


def _parse_comparison(cursor: Cursor) -> Operator:
    token = cursor.peek()
    if token.kind is TokenKind.SYMBOL and token.value in _COMPARISONS:
        cursor.advance()
        return _COMPARISONS[token.value]
    raise cursor.fail("expected a comparison (=, !=, <, <=, >, >=)")


def _parse_operator(cursor: Cursor) -> Operator:
    """A comparison, ``IN``, ``CONTAINS [KEY]`` or ``LIKE``."""
    if cursor.accept_word("in"):
        return Operator.IN
    if cursor.at_word("not") and cursor.at_word("in", ahead=1):
        cursor.advance()
        cursor.advance()
        return Operator.NOT_IN
    if cursor.accept_word("contains"):
        return Operator.CONTAINS_KEY if cursor.accept_word("key") else Operator.CONTAINS
    if cursor.accept_word("like"):
        return Operator.LIKE
    token = cursor.peek()
    if token.kind is TokenKind.SYMBOL and token.value in _COMPARISONS:
        cursor.advance()
        return _COMPARISONS[token.value]
    raise cursor.fail(_EXPECTED_OPERATOR)


def _parse_operand(cursor: Cursor, operator: Operator) -> RelationValue:
    if operator in (Operator.IN, Operator.NOT_IN):
        return parse_in_values(cursor)
    return parse_term(cursor)


# --- IF ------------------------------------------------------------------------------------------


def parse_if_clause(cursor: Cursor) -> tuple[bool, tuple[Condition, ...]]:
    """After ``IF``: ``(True, ())`` for ``EXISTS``, else ``(False, conditions)``."""
    if cursor.at_word("exists") and not _at_condition_operator(cursor, ahead=1):
        cursor.advance()
        return True, ()
    conditions = [_parse_condition(cursor)]
    while cursor.accept_word("and"):
        conditions.append(_parse_condition(cursor))
    return False, tuple(conditions)


def _at_condition_operator(cursor: Cursor, ahead: int) -> bool:
    return cursor.at_symbol(*_COMPARISONS, "[", ".", ahead=ahead) or cursor.at_word(
        "in", "contains", ahead=ahead
    )


def _parse_condition(cursor: Cursor) -> Condition:
    column = parse_identifier(cursor, "a column name")
    element: Term | None = None
    field: str | None = None
    if cursor.accept_symbol("["):
        element = parse_term(cursor)
        cursor.expect_symbol("]")
    elif cursor.accept_symbol("."):
        field = parse_identifier(cursor, "a field name")
    operator = _parse_operator(cursor)
    if operator is Operator.LIKE:
        raise cursor.fail(_EXPECTED_OPERATOR, cursor.tokens[cursor.position - 1])
    return Condition(column, operator, _parse_operand(cursor, operator), element, field)


# --- USING and integer values --------------------------------------------------------------------

USING_ALL = frozenset({"timestamp", "ttl", "timeout"})
USING_NO_TTL = frozenset({"timestamp", "timeout"})
USING_TIMEOUT_ONLY = frozenset({"timeout"})


def parse_using(cursor: Cursor, allowed: frozenset[str]) -> UsingClause:
    """After ``USING``: ``TIMESTAMP``/``TTL``/``TIMEOUT`` parameters joined by ``AND``."""
    values: dict[str, Term] = {}
    while True:
        token = cursor.peek()
        if token.kind is not TokenKind.IDENT or token.value not in allowed:
            raise cursor.fail("expected " + " or ".join(sorted(w.upper() for w in allowed)))
        if token.value in values:
            raise cursor.fail(f"expected {token.value.upper()} at most once")
        cursor.advance()
        values[token.value] = (
            parse_duration_value(cursor) if token.value == "timeout" else parse_int_value(cursor)
        )
        if not cursor.accept_word("and"):
            break
    return UsingClause(values.get("timestamp"), values.get("ttl"), values.get("timeout"))


def parse_int_value(cursor: Cursor) -> Term:
    """An integer literal (optionally negative) or a bind marker."""
    marker = parse_bind_marker_or_none(cursor)
    if marker is not None:
        return marker
    negative = cursor.accept_symbol("-")
    token = cursor.peek()
    if token.kind is not TokenKind.INTEGER:
        raise cursor.fail("expected an integer or a bind marker")
    cursor.advance()
    value = parse_int_text(cursor, token)
    return IntegerLiteral(-value if negative else value)


def parse_duration_value(cursor: Cursor) -> Term:
    """A duration literal (``500ms``, ``2s``) or a bind marker."""
    marker = parse_bind_marker_or_none(cursor)
    if marker is not None:
        return marker
    token = cursor.peek()
    if token.kind is not TokenKind.DURATION:
        raise cursor.fail("expected a duration (such as 500ms) or a bind marker")
    cursor.advance()
    return DurationLiteral(token.text)


def parse_order_by_items(cursor: Cursor) -> tuple[OrderBy, ...]:
    """``column [ASC|DESC], ...`` (``ORDER BY`` already consumed)."""
    items = [_parse_order_by_item(cursor)]
    while cursor.accept_symbol(","):
        items.append(_parse_order_by_item(cursor))
    return tuple(items)


def _parse_order_by_item(cursor: Cursor) -> OrderBy:
    column = parse_identifier(cursor, "a column name")
    if cursor.accept_word("desc"):
        return OrderBy(column, descending=True)
    cursor.accept_word("asc")
    return OrderBy(column)
