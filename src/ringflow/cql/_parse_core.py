"""The parser's shared machinery: limits, the token cursor, names, type spellings and options.

Rules: the parser is recursive descent over the token list of :mod:`ringflow.cql._lexer`, one
token of look-ahead in almost every place (two or three to tell a function call from a name).
Keywords are recognised by position (``Cursor.at_word``); a word in ``RESERVED_WORDS`` is never
taken as a name. Every failure goes through ``Cursor.fail`` and so reads
``line L:C expected ..., got '<token>'``. Nesting (collections, tuples, function arguments,
types) is counted by ``Cursor.nested`` and refused past ``ParseLimits.max_nesting_depth`` so that
no input can exhaust the interpreter stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ringflow.cql._ast import (
    BindMarker,
    OptionMap,
    OptionScalar,
    OptionValue,
    Property,
    QualifiedName,
    TypeSpec,
)
from ringflow.cql._lexer import (
    MAX_TEXT_BYTES_DEFAULT,
    RESERVED_WORDS,
    CqlSyntaxProblem,
    Token,
    TokenKind,
    near_text,
)
from ringflow.errors import ConfigurationError

NESTING_DEPTH_HARD_MAX = 200  # keeps the deepest parse far below Python's default stack limit


@dataclass(frozen=True, slots=True)
class ParseLimits:
    """Bounds on what one call to the parser accepts (STYLE.md: limits are arguments)."""

    max_text_bytes: int = MAX_TEXT_BYTES_DEFAULT
    max_nesting_depth: int = 100
    max_statements: int = 10_000

    def __post_init__(self) -> None:
        for name in ("max_text_bytes", "max_nesting_depth", "max_statements"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"ParseLimits.{name} must be a positive int, got {value!r}"
                )
        if self.max_nesting_depth > NESTING_DEPTH_HARD_MAX:
            raise ConfigurationError(
                f"ParseLimits.max_nesting_depth must be at most {NESTING_DEPTH_HARD_MAX}, "
                f"got {self.max_nesting_depth}"
            )


DEFAULT_PARSE_LIMITS = ParseLimits()


class Cursor:
    """A position in the token list plus the bind markers met so far in this statement."""

    def __init__(self, tokens: list[Token], limits: ParseLimits) -> None:
        self.tokens = tokens
        self.position = 0
        self.limits = limits
        self.depth = 0
        self.markers: list[BindMarker] = []

    # --- looking and moving ---

    def peek(self, ahead: int = 0) -> Token:
        index = self.position + ahead
        tokens = self.tokens
        return tokens[index] if index < len(tokens) else tokens[-1]

    def advance(self) -> Token:
        token = self.peek()
        if token.kind is not TokenKind.EOF:
            self.position += 1
        return token

    def at_end(self) -> bool:
        return self.peek().kind is TokenKind.EOF

    def fail(self, expected: str, token: Token | None = None) -> CqlSyntaxProblem:
        """The error to raise: ``expected`` (a phrase) at ``token`` (default: the next one)."""
        where = token if token is not None else self.peek()
        near = "<EOF>" if where.kind is TokenKind.EOF else near_text(where.text)
        return CqlSyntaxProblem(where.line, where.column, expected, near)

    def at_word(self, *words: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind is TokenKind.IDENT and token.value in words

    def accept_word(self, word: str) -> bool:
        if self.at_word(word):
            self.position += 1
            return True
        return False

    def expect_word(self, word: str) -> Token:
        if not self.at_word(word):
            raise self.fail(f"expected {word.upper()}")
        return self.advance()

    def at_symbol(self, *symbols: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind is TokenKind.SYMBOL and token.value in symbols

    def accept_symbol(self, symbol: str) -> bool:
        if self.at_symbol(symbol):
            self.position += 1
            return True
        return False

    def expect_symbol(self, symbol: str) -> Token:
        if not self.at_symbol(symbol):
            raise self.fail(f"expected '{symbol}'")
        return self.advance()

    # --- nesting and markers ---

    @contextmanager
    def nested(self) -> Iterator[None]:
        if self.depth >= self.limits.max_nesting_depth:
            raise self.fail(f"expected nesting of at most {self.limits.max_nesting_depth} levels")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def new_marker(self, name: str | None) -> BindMarker:
        marker = BindMarker(len(self.markers), name)
        self.markers.append(marker)
        return marker

    def marker_count(self) -> int:
        return len(self.markers)

    def markers_since(self, start: int) -> tuple[BindMarker, ...]:
        return tuple(self.markers[start:])


# --- names ---------------------------------------------------------------------------------------


def is_name_token(token: Token) -> bool:
    """A quoted name, or an unquoted word that is not reserved."""
    if token.kind is TokenKind.QUOTED_NAME:
        return True
    return token.kind is TokenKind.IDENT and token.value not in RESERVED_WORDS


def parse_identifier(cursor: Cursor, what: str) -> str:
    """A name (``what`` describes it for the error message, e.g. "a column name")."""
    token = cursor.peek()
    if not is_name_token(token):
        raise cursor.fail(f"expected {what}")
    cursor.advance()
    return token.value


def parse_qualified_name(cursor: Cursor, what: str) -> QualifiedName:
    """``name`` or ``keyspace.name``."""
    first = parse_identifier(cursor, what)
    if cursor.accept_symbol("."):
        return QualifiedName(first, parse_identifier(cursor, what))
    return QualifiedName(None, first)


def parse_identifier_list(cursor: Cursor, what: str) -> tuple[str, ...]:
    """``( name, name, ... )`` with at least one name."""
    cursor.expect_symbol("(")
    names = [parse_identifier(cursor, what)]
    while cursor.accept_symbol(","):
        names.append(parse_identifier(cursor, what))
    cursor.expect_symbol(")")
    return tuple(names)


def parse_if_not_exists(cursor: Cursor) -> bool:
    if not cursor.at_word("if"):
        return False
    cursor.advance()
    cursor.expect_word("not")
    cursor.expect_word("exists")
    return True


def parse_if_exists(cursor: Cursor) -> bool:
    if not cursor.at_word("if"):
        return False
    cursor.advance()
    cursor.expect_word("exists")
    return True


# --- type spellings ------------------------------------------------------------------------------

_TYPE_ARITY = {"frozen": (1, 1), "list": (1, 1), "set": (1, 1), "map": (2, 2), "tuple": (1, None)}


def parse_type_spec(cursor: Cursor) -> TypeSpec:
    """A CQL type spelling: native, ``frozen<..>``, collections, tuples, ``[ks.]udt``."""
    with cursor.nested():
        token = cursor.peek()
        if token.kind is TokenKind.STRING:
            raise cursor.fail("expected a type name (custom class types are not supported)")
        parametrised = token.kind is TokenKind.IDENT and token.value in _TYPE_ARITY
        if parametrised and cursor.at_symbol("<", ahead=1):
            return _parse_parametrised_type(cursor)
        name = parse_qualified_name(cursor, "a type")
        return TypeSpec(name.name, keyspace=name.keyspace)


def _parse_parametrised_type(cursor: Cursor) -> TypeSpec:
    name = cursor.advance().value
    cursor.expect_symbol("<")
    parameters = [parse_type_spec(cursor)]
    while cursor.accept_symbol(","):
        parameters.append(parse_type_spec(cursor))
    low, high = _TYPE_ARITY[name]
    if len(parameters) < low or (high is not None and len(parameters) > high):
        count = f"{low}" if low == high else f"at least {low}"
        raise cursor.fail(f"expected {count} type parameter(s) for {name}, not {len(parameters)}")
    cursor.expect_symbol(">")
    return TypeSpec(name, tuple(parameters))


# --- options (WITH name = value AND ...) ---------------------------------------------------------


def parse_property(cursor: Cursor) -> Property:
    """``name = constant`` or ``name = {'key': constant, ...}`` (no bind markers in DDL)."""
    name = parse_identifier(cursor, "an option name")
    cursor.expect_symbol("=")
    value: OptionValue
    value = _parse_option_map(cursor) if cursor.at_symbol("{") else _parse_option_scalar(cursor)
    return Property(name, value)


def _parse_option_map(cursor: Cursor) -> OptionMap:
    cursor.expect_symbol("{")
    entries: list[tuple[str, OptionScalar]] = []
    seen: set[str] = set()
    while not cursor.at_symbol("}"):
        if entries:
            cursor.expect_symbol(",")
        key_token = cursor.peek()
        key = _option_key(_parse_option_scalar(cursor))
        if key in seen:
            raise cursor.fail(f"expected each map key once, but '{key}' is repeated", key_token)
        seen.add(key)
        cursor.expect_symbol(":")
        entries.append((key, _parse_option_scalar(cursor)))
    cursor.expect_symbol("}")
    return OptionMap(tuple(entries))


def _option_key(value: OptionScalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_WORD_OPTION_VALUES: dict[str, OptionScalar] = {"nan": float("nan"), "infinity": float("inf")}


def _parse_option_scalar(cursor: Cursor) -> OptionScalar:
    token = cursor.peek()
    negative = token.kind is TokenKind.SYMBOL and token.value == "-"
    if negative:
        cursor.advance()
        token = cursor.peek()
    value = _option_scalar_of(cursor, token)
    cursor.advance()
    if not negative:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise cursor.fail("expected a number after '-'", token)
    return -value


def _option_scalar_of(cursor: Cursor, token: Token) -> OptionScalar:
    kind = token.kind
    if kind is TokenKind.STRING:
        return token.value
    if kind is TokenKind.INTEGER:
        return parse_int_text(cursor, token)
    if kind is TokenKind.FLOAT:
        return float(token.text)
    if kind is TokenKind.BOOLEAN:
        return token.value == "true"
    if kind in (TokenKind.UUID, TokenKind.DURATION):
        return token.text
    if kind is TokenKind.HEX:
        return "0x" + token.value
    if kind is TokenKind.IDENT and token.value in _WORD_OPTION_VALUES:
        return _WORD_OPTION_VALUES[token.value]
    if kind is TokenKind.IDENT and token.value not in RESERVED_WORDS:
        return token.value
    raise cursor.fail("expected a constant option value (bind markers are not allowed here)")


_INT_DIGITS_MAX = 4000  # below CPython's int-from-str limit (4300 digits)


def parse_int_text(cursor: Cursor, token: Token) -> int:
    """The value of an INTEGER token; absurdly long ones are refused, not passed to ``int``."""
    if len(token.text) > _INT_DIGITS_MAX:
        raise cursor.fail(f"expected an integer of at most {_INT_DIGITS_MAX} digits", token)
    return int(token.text)
