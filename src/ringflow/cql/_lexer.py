"""The CQL lexer: source text to a list of tokens, and the syntax error every parse failure raises.

Rules (what Cassandra's ``Lexer.g`` accepts, re-expressed; no grammar code is copied):

* keywords are not tokens of their own: every unquoted word is an ``IDENT`` whose ``value`` is
  folded to lower case, and the parser decides by position whether it is a keyword. ``true`` and
  ``false`` are ``BOOLEAN`` tokens and never names;
* ``"quoted"`` names keep their case, ``""`` stands for one ``"``; ``""`` alone is refused;
* strings are ``'..'`` with ``''`` for one quote, or ``$$..$$`` with no escapes;
* numbers: ``INTEGER`` (digits), ``FLOAT`` (a ``.`` and/or an exponent); a sign is never part of a
  number token, the parser applies unary minus. ``NaN`` and ``Infinity`` are words;
* ``0x`` + hex digits is a blob (``0x`` alone is the empty blob); 8-4-4-4-12 hex groups are a
  ``UUID``; ``12h30m``, ``2000ms`` (units y mo w d h m s ms us µs ns) and ISO 8601 forms
  (``P1DT2H``, ``P2W``, ``P0001-02-03T04:05:06``) are ``DURATION`` literals;
* comments: ``--`` and ``//`` to end of line, ``/* .. */`` (not nested).

Positions follow ANTLR as Cassandra reports them: lines count from 1 (``\\n`` ends a line),
columns from 0. Every error is a :class:`CqlSyntaxProblem` whose message reads
``line L:C <what was expected>, got '<text>'``.
"""

from __future__ import annotations

import bisect
import enum
import re
from typing import NamedTuple

from ringflow.errors import SyntaxProblem

MAX_TEXT_BYTES_DEFAULT = 1 << 20
_NEAR_CHARS_MAX = 40

# Words that are never names unless quoted: Cassandra's reserved keywords (the set cqlsh and the
# drivers quote), less the ones newer Cassandra versions made unreserved (default, unset, ...).
_RESERVED_WORDS_TEXT = """
add allow alter and apply asc authorize batch begin by columnfamily create delete desc describe drop
entries execute from full grant if in index infinity insert into is keyspace limit materialized
modify nan norecursive not null of on or order primary rename revoke schema select set table to
token truncate unlogged update use using view where with
"""
RESERVED_WORDS: frozenset[str] = frozenset(_RESERVED_WORDS_TEXT.split())


class CqlSyntaxProblem(SyntaxProblem):
    """A statement that does not lex or parse; knows where (1-based line, 0-based column)."""

    def __init__(self, line: int, column: int, expected: str, near: str) -> None:
        self.line = line
        self.column = column
        self.expected = expected
        self.near = near
        super().__init__(f"line {line}:{column} {expected}, got '{near}'")


class TokenKind(enum.Enum):
    IDENT = "identifier"
    QUOTED_NAME = "quoted name"
    STRING = "string"
    INTEGER = "integer"
    FLOAT = "float"
    BOOLEAN = "boolean"
    UUID = "uuid"
    HEX = "blob"
    DURATION = "duration"
    QMARK = "?"
    SYMBOL = "symbol"
    EOF = "end of input"


class Token(NamedTuple):
    """One token. ``text`` is the source spelling; ``value`` is what it means.

    ``value`` is the lower-cased word for ``IDENT`` and ``BOOLEAN``, the unescaped text for names
    and strings, the hex digits (no ``0x``) for blobs, and the spelling otherwise. A NamedTuple
    rather than a frozen dataclass: a 1 MiB batch has ~400k tokens and construction cost counts.
    """

    kind: TokenKind
    text: str
    value: str
    line: int
    column: int
    offset: int


_NOT_IDENT = r"(?![A-Za-z0-9_])"
_HEX = "[0-9A-Fa-f]"
_ISO_DURATION = (
    r"P(?=[0-9])(?:[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"|[0-9]+W"
    r"|(?:[0-9]+Y)?(?:[0-9]+M)?(?:[0-9]+D)?(?:T(?=[0-9])(?:[0-9]+H)?(?:[0-9]+M)?(?:[0-9]+S)?)?)"
)
# One alternation, tried in order at each position; the group that matched names the token.
# Longer forms come first where prefixes overlap (uuid and duration before number, iso duration
# before word), and lookaheads stop a form from swallowing half of a longer word.
_TOKEN_RE = re.compile(
    "|".join(
        [
            r"(?P<space>[ \t\r\n\f]+)",
            r"(?P<comment>(?:--|//)[^\n]*)",
            r"(?P<block>/\*.*?\*/)",
            r"(?P<open_block>/\*)",
            r"(?P<string>'[^']*(?:''[^']*)*')",
            r"(?P<dollar>\$\$.*?\$\$)",
            r'(?P<quoted>"[^"]*(?:""[^"]*)*")',
            f"(?P<uuid>{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}{_NOT_IDENT})",
            f"(?P<duration>(?:[0-9]+(?i:mo|ms|us|µs|ns|y|w|d|h|m|s))+{_NOT_IDENT})",
            r"(?P<blob>0[xX][0-9A-Fa-f]*)",
            # ``1..3`` (a slice) is 1, .., 3: a fraction never starts with ``..``
            r"(?P<number>[0-9]+(?P<fraction>\.(?!\.)[0-9]*)?(?P<exponent>[eE][+-]?[0-9]+)?)",
            f"(?P<iso>{_ISO_DURATION}{_NOT_IDENT})",
            r"(?P<word>[A-Za-z][A-Za-z0-9_]*)",
            r"(?P<qmark>\?)",
            r"(?P<symbol>\.\.|<=|>=|!=|\+=|-=|[()\[\]{},;.*=<>+\-:/%])",
        ]
    ),
    re.DOTALL,
)
_SKIPPED = frozenset({"space", "comment", "block"})
_UNTERMINATED = {
    "'": "expected a closing quote for this string",
    '"': "expected a closing '\"' for this name",
    "$$": "expected '$$' closing this string",
    "/*": "expected '*/' closing this comment",
}


def tokenize(text: str, *, max_text_bytes: int = MAX_TEXT_BYTES_DEFAULT) -> list[Token]:
    """All tokens of ``text``, ending with one ``EOF`` token; raises CqlSyntaxProblem."""
    if len(text) > max_text_bytes or len(text.encode("utf-8", "surrogatepass")) > max_text_bytes:
        raise CqlSyntaxProblem(
            1, 0, f"a statement of at most {max_text_bytes} bytes", f"{len(text)} characters"
        )
    line_starts = [0] + [match.end() for match in re.finditer("\n", text)]
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        match = _TOKEN_RE.match(text, position)
        if match is None:
            raise _lexical_problem(text, position, line_starts)
        group = match.lastgroup
        if group == "open_block":
            raise _problem_at(text, position, line_starts, _UNTERMINATED["/*"], "<EOF>")
        if group not in _SKIPPED:
            line_index = bisect.bisect_right(line_starts, position) - 1
            line, column = line_index + 1, position - line_starts[line_index]
            tokens.append(_make_token(match, line, column, line_starts))
        position = match.end()
    line_index = len(line_starts) - 1
    tokens.append(
        Token(TokenKind.EOF, "", "", line_index + 1, len(text) - line_starts[-1], len(text))
    )
    return tokens


def _make_token(match: re.Match[str], line: int, column: int, line_starts: list[int]) -> Token:
    group = match.lastgroup
    text = match.group()
    start = match.start()
    if group == "word":
        value = text.lower()
        kind = TokenKind.BOOLEAN if value in ("true", "false") else TokenKind.IDENT
        return Token(kind, text, value, line, column, start)
    if group == "symbol":
        return Token(TokenKind.SYMBOL, text, text, line, column, start)
    if group == "string":
        return Token(TokenKind.STRING, text, text[1:-1].replace("''", "'"), line, column, start)
    if group == "quoted":
        if len(text) == 2:
            raise _problem_at(
                match.string, start, line_starts, "expected a non-empty quoted name", text
            )
        value = text[1:-1].replace('""', '"')
        return Token(TokenKind.QUOTED_NAME, text, value, line, column, start)
    if group == "number":
        exact = match.group("fraction") is None and match.group("exponent") is None
        kind = TokenKind.INTEGER if exact else TokenKind.FLOAT
        return Token(kind, text, text, line, column, start)
    if group == "dollar":
        return Token(TokenKind.STRING, text, text[2:-2], line, column, start)
    if group == "blob":
        return Token(TokenKind.HEX, text, text[2:], line, column, start)
    kind = _KIND_OF_GROUP[group or ""]
    return Token(kind, text, text, line, column, start)


_KIND_OF_GROUP = {
    "uuid": TokenKind.UUID,
    "duration": TokenKind.DURATION,
    "iso": TokenKind.DURATION,
    "qmark": TokenKind.QMARK,
}


def _lexical_problem(text: str, position: int, line_starts: list[int]) -> CqlSyntaxProblem:
    """Why no token starts at ``position``: an unclosed string, name or comment, or a stray char."""
    for opener, expected in _UNTERMINATED.items():
        if text.startswith(opener, position):
            return _problem_at(text, position, line_starts, expected, "<EOF>")
    return _problem_at(text, position, line_starts, "expected a CQL token", text[position])


def _problem_at(
    text: str, position: int, line_starts: list[int], expected: str, near: str
) -> CqlSyntaxProblem:
    line_index = bisect.bisect_right(line_starts, position) - 1
    column = position - line_starts[line_index]
    return CqlSyntaxProblem(
        line_index + 1, column, expected, near if near == "<EOF>" else near_text(near)
    )


def near_text(text: str) -> str:
    """A token's text as error messages quote it: control characters escaped, long text cut."""
    shown = text if len(text) <= _NEAR_CHARS_MAX else text[:_NEAR_CHARS_MAX] + "..."
    return shown.encode("unicode_escape").decode("ascii") if not shown.isprintable() else shown
