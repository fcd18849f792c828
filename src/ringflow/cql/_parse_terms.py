"""Terms: the values a statement carries (literals, bind markers, collections, function calls).

Rules (CQL.textile "Constants" and "Terms", re-expressed):

* a term is never a bare column name, so a word in term position is ``null``, ``NaN``,
  ``Infinity`` or the name of a called function (``now()``, ``ks.fn(..)``, ``token(..)``);
* unary minus applies to number, duration, ``NaN`` and ``Infinity`` literals only;
* ``{}`` is EmptyBraces; ``{name: ..}`` with a bare or quoted name before the colon is a UDT
  literal; otherwise the first element decides between a map (``:`` follows) and a set;
* ``(type) term`` is a type cast when the parenthesis holds a type spelling, else ``(..)`` is a
  tuple literal of at least one element;
* bind markers are numbered by the cursor in order of appearance.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from ringflow.cql._ast import (
    NATIVE_TYPE_SPELLINGS,
    BlobLiteral,
    BooleanLiteral,
    DurationLiteral,
    EmptyBraces,
    FloatLiteral,
    FunctionCall,
    IntegerLiteral,
    ListLiteral,
    MapLiteral,
    NullLiteral,
    SetLiteral,
    StringLiteral,
    Term,
    TupleLiteral,
    TypeCast,
    UdtLiteral,
    UuidLiteral,
)
from ringflow.cql._lexer import RESERVED_WORDS, Token, TokenKind
from ringflow.cql._parse_core import (
    Cursor,
    is_name_token,
    parse_identifier,
    parse_int_text,
    parse_type_spec,
)

_EXPECTED_TERM = "expected a value (literal, bind marker, collection, tuple or function call)"
_FUNCTION_WORDS = frozenset({"token"})  # reserved, yet callable
_PARAMETRISED_TYPE_WORDS = frozenset({"frozen", "list", "set", "map", "tuple"})


def parse_term(cursor: Cursor) -> Term:
    """One term at the cursor."""
    with cursor.nested():
        token = cursor.peek()
        by_kind = _TERM_BY_KIND.get(token.kind)
        if by_kind is not None:
            return by_kind(cursor)
        if token.kind is TokenKind.SYMBOL and token.value in _TERM_BY_SYMBOL:
            return _TERM_BY_SYMBOL[token.value](cursor)
        if token.kind is TokenKind.IDENT and token.value in _WORD_TERMS:
            cursor.advance()
            return _WORD_TERMS[token.value]
        if at_function_call(cursor):
            return _parse_function_call(cursor)
        raise cursor.fail(_EXPECTED_TERM)


def parse_terms_in_parentheses(cursor: Cursor, allow_empty: bool) -> tuple[Term, ...]:
    """``( term, ... )``; ``()`` only if ``allow_empty``."""
    cursor.expect_symbol("(")
    if allow_empty and cursor.accept_symbol(")"):
        return ()
    terms = [parse_term(cursor)]
    while cursor.accept_symbol(","):
        terms.append(parse_term(cursor))
    cursor.expect_symbol(")")
    return tuple(terms)


def parse_bind_marker_or_none(cursor: Cursor) -> Term | None:
    """A ``?`` or ``:name`` marker at the cursor, or None (nothing consumed)."""
    if cursor.peek().kind is TokenKind.QMARK:
        cursor.advance()
        return cursor.new_marker(None)
    if cursor.at_symbol(":"):
        return _parse_named_marker(cursor)
    return None


def is_function_name_token(token: Token) -> bool:
    return is_name_token(token) or (
        token.kind is TokenKind.IDENT and token.value in _FUNCTION_WORDS
    )


def at_function_call(cursor: Cursor) -> bool:
    """``name(`` or ``keyspace.name(`` at the cursor."""
    if not is_function_name_token(cursor.peek()):
        return False
    if cursor.at_symbol("(", ahead=1):
        return True
    return (
        cursor.at_symbol(".", ahead=1)
        and is_function_name_token(cursor.peek(2))
        and cursor.at_symbol("(", ahead=3)
    )


def parse_function_name(cursor: Cursor) -> tuple[str | None, str]:
    """``(keyspace, name)`` of a function call at the cursor (``at_function_call`` holds)."""
    first = cursor.advance().value
    if cursor.accept_symbol("."):
        return first, cursor.advance().value
    return None, first


def _parse_function_call(cursor: Cursor) -> FunctionCall:
    keyspace, name = parse_function_name(cursor)
    args = parse_terms_in_parentheses(cursor, allow_empty=True)
    return FunctionCall(name, args, keyspace)


# --- constants -----------------------------------------------------------------------------------


def _string(cursor: Cursor) -> Term:
    return StringLiteral(cursor.advance().value)


def _integer(cursor: Cursor) -> Term:
    return IntegerLiteral(parse_int_text(cursor, cursor.advance()))


def _float(cursor: Cursor) -> Term:
    return FloatLiteral(cursor.advance().text)


def _boolean(cursor: Cursor) -> Term:
    return BooleanLiteral(cursor.advance().value == "true")


def _uuid(cursor: Cursor) -> Term:
    return UuidLiteral(uuid.UUID(cursor.advance().text))


def _blob(cursor: Cursor) -> Term:
    token = cursor.peek()
    if len(token.value) % 2:
        raise cursor.fail("expected a blob literal with an even number of hex digits")
    cursor.advance()
    return BlobLiteral(bytes.fromhex(token.value))


def _duration(cursor: Cursor) -> Term:
    return DurationLiteral(cursor.advance().text)


def _positional_marker(cursor: Cursor) -> Term:
    cursor.advance()
    return cursor.new_marker(None)


def _parse_named_marker(cursor: Cursor) -> Term:
    cursor.expect_symbol(":")
    return cursor.new_marker(parse_identifier(cursor, "a bind marker name"))


def _negative(cursor: Cursor) -> Term:
    cursor.expect_symbol("-")
    token = cursor.peek()
    if token.kind is TokenKind.INTEGER:
        return IntegerLiteral(-parse_int_text(cursor, cursor.advance()))
    if token.kind is TokenKind.FLOAT:
        return FloatLiteral("-" + cursor.advance().text)
    if token.kind is TokenKind.DURATION:
        return DurationLiteral("-" + cursor.advance().text)
    if token.kind is TokenKind.IDENT and token.value in ("nan", "infinity"):
        cursor.advance()
        return FloatLiteral("NaN" if token.value == "nan" else "-Infinity")
    raise cursor.fail("expected a number or duration after '-'")


_WORD_TERMS: dict[str, Term] = {
    "null": NullLiteral(),
    "nan": FloatLiteral("NaN"),
    "infinity": FloatLiteral("Infinity"),
}


# --- collections, tuples, UDT literals, casts ----------------------------------------------------


def _list(cursor: Cursor) -> Term:
    cursor.expect_symbol("[")
    elements: list[Term] = []
    if not cursor.at_symbol("]"):
        elements.append(parse_term(cursor))
        while cursor.accept_symbol(","):
            elements.append(parse_term(cursor))
    cursor.expect_symbol("]")
    return ListLiteral(tuple(elements))


def _braces(cursor: Cursor) -> Term:
    cursor.expect_symbol("{")
    if cursor.accept_symbol("}"):
        return EmptyBraces()
    if is_name_token(cursor.peek()) and cursor.at_symbol(":", ahead=1):
        return _udt_fields(cursor)
    first = parse_term(cursor)
    if cursor.accept_symbol(":"):
        return _map_entries(cursor, first)
    elements = [first]
    while cursor.accept_symbol(","):
        elements.append(parse_term(cursor))
    cursor.expect_symbol("}")
    return SetLiteral(tuple(elements))


def _map_entries(cursor: Cursor, first_key: Term) -> Term:
    entries = [(first_key, parse_term(cursor))]
    while cursor.accept_symbol(","):
        key = parse_term(cursor)
        cursor.expect_symbol(":")
        entries.append((key, parse_term(cursor)))
    cursor.expect_symbol("}")
    return MapLiteral(tuple(entries))


def _udt_fields(cursor: Cursor) -> Term:
    fields: list[tuple[str, Term]] = []
    while True:
        name = parse_identifier(cursor, "a field name")
        cursor.expect_symbol(":")
        fields.append((name, parse_term(cursor)))
        if not cursor.accept_symbol(","):
            break
    cursor.expect_symbol("}")
    return UdtLiteral(tuple(fields))


def _parenthesised(cursor: Cursor) -> Term:
    if _at_type_cast(cursor):
        cursor.expect_symbol("(")
        spec = parse_type_spec(cursor)
        cursor.expect_symbol(")")
        return TypeCast(spec, parse_term(cursor))
    return TupleLiteral(parse_terms_in_parentheses(cursor, allow_empty=False))


def _at_type_cast(cursor: Cursor) -> bool:
    """``(`` then a native type name and ``)``, or a parametrised type name and ``<``."""
    word = cursor.peek(1)
    if word.kind is not TokenKind.IDENT or word.value in RESERVED_WORDS:
        return False
    if word.value in NATIVE_TYPE_SPELLINGS:
        return cursor.at_symbol(")", ahead=2)
    return word.value in _PARAMETRISED_TYPE_WORDS and cursor.at_symbol("<", ahead=2)


_TERM_BY_KIND: dict[TokenKind, Callable[[Cursor], Term]] = {
    TokenKind.STRING: _string,
    TokenKind.INTEGER: _integer,
    TokenKind.FLOAT: _float,
    TokenKind.BOOLEAN: _boolean,
    TokenKind.UUID: _uuid,
    TokenKind.HEX: _blob,
    TokenKind.DURATION: _duration,
    TokenKind.QMARK: _positional_marker,
}
_TERM_BY_SYMBOL: dict[str, Callable[[Cursor], Term]] = {
    ":": _parse_named_marker,
    "-": _negative,
    "[": _list,
    "{": _braces,
    "(": _parenthesised,
}
