"""The CQL lexer: each token class, comments, positions, and the errors it raises."""

from __future__ import annotations

import pytest

from ringflow.cql._lexer import CqlSyntaxProblem, Token, TokenKind, tokenize
from ringflow.errors import ErrorCode, SyntaxProblem

K = TokenKind
_SYMBOLS = "<= >= != += -= < > = ( ) [ ] { } , ; . * + - / %"


def kinds_and_values(text: str) -> list[tuple[TokenKind, str]]:
    return [(token.kind, token.value) for token in tokenize(text)[:-1]]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Words fold to lower case; the parser decides which are keywords.
        ("SELECT Foo_1", [(K.IDENT, "select"), (K.IDENT, "foo_1")]),
        ('"MixedCase"', [(K.QUOTED_NAME, "MixedCase")]),
        ('"a""b"', [(K.QUOTED_NAME, 'a"b')]),
        ('"cdc$stream_id"', [(K.QUOTED_NAME, "cdc$stream_id")]),
        ("'it''s'", [(K.STRING, "it's")]),
        ("''", [(K.STRING, "")]),
        ("$$it's $ fine$$", [(K.STRING, "it's $ fine")]),
        ("$$$$", [(K.STRING, "")]),
        ("42", [(K.INTEGER, "42")]),
        ("3.25", [(K.FLOAT, "3.25")]),
        ("1e10 2E-3 7.", [(K.FLOAT, "1e10"), (K.FLOAT, "2E-3"), (K.FLOAT, "7.")]),
        ("NaN Infinity", [(K.IDENT, "nan"), (K.IDENT, "infinity")]),
        ("TRUE false", [(K.BOOLEAN, "true"), (K.BOOLEAN, "false")]),
        ("0xCAFE 0x", [(K.HEX, "CAFE"), (K.HEX, "")]),
        (
            "123e4567-e89b-12d3-a456-426614174000",
            [(K.UUID, "123e4567-e89b-12d3-a456-426614174000")],
        ),
        # A UUID may start with a letter: it must not lex as a word.
        (
            "deadbeef-0000-1000-8000-00000000cafe",
            [(K.UUID, "deadbeef-0000-1000-8000-00000000cafe")],
        ),
        (
            "2000ms 1h30m 3d 1mo 5us 7ns",
            [(K.DURATION, d) for d in ("2000ms", "1h30m", "3d", "1mo", "5us", "7ns")],
        ),
        ("P1Y2M3DT4H5M6S P2W", [(K.DURATION, "P1Y2M3DT4H5M6S"), (K.DURATION, "P2W")]),
        ("PT pt", [(K.IDENT, "pt"), (K.IDENT, "pt")]),
        ("? :name", [(K.QMARK, "?"), (K.SYMBOL, ":"), (K.IDENT, "name")]),
        (
            _SYMBOLS,
            [(K.SYMBOL, s) for s in _SYMBOLS.split(" ")],
        ),
        # A sign is never part of a number: the parser applies unary minus.
        ("-1", [(K.SYMBOL, "-"), (K.INTEGER, "1")]),
        # Nested type brackets stay single symbols.
        (
            "frozen<list<int>>",
            [
                (K.IDENT, "frozen"),
                (K.SYMBOL, "<"),
                (K.IDENT, "list"),
                (K.SYMBOL, "<"),
                (K.IDENT, "int"),
                (K.SYMBOL, ">"),
                (K.SYMBOL, ">"),
            ],
        ),
    ],
)
def test_token_classes(text: str, expected: list[tuple[TokenKind, str]]) -> None:
    assert kinds_and_values(text) == expected


def test_comments_and_whitespace_are_skipped() -> None:
    text = "a -- line comment\n b // another\n/* block\n comment */ c\t\r\n d"
    assert kinds_and_values(text) == [(K.IDENT, w) for w in "abcd"]


def test_comment_at_end_without_newline() -> None:
    assert kinds_and_values("a --") == [(K.IDENT, "a")]


def test_token_keeps_source_text_and_position() -> None:
    tokens = tokenize("SELECT\n  'x''y' ,\n\"Q\"")
    assert tokens[1] == Token(K.STRING, "'x''y'", "x'y", 2, 2, 9)
    assert (tokens[2].line, tokens[2].column) == (2, 9)
    assert (tokens[3].text, tokens[3].line, tokens[3].column) == ('"Q"', 3, 0)
    assert tokens[-1].kind is K.EOF
    assert (tokens[-1].line, tokens[-1].column) == (3, 3)


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("SELECT 'abc", 1, 7, "closing quote"),
        ('SELECT "abc', 1, 7, "closing '\"'"),
        ("a\n  $$abc", 2, 2, "'$$'"),
        ("a /* never closed", 1, 2, "'*/'"),
        ("a\nb #", 2, 2, "expected a CQL token, got '#'"),
        ('SELECT ""', 1, 7, "non-empty quoted name"),
        ("SELECT a ! b", 1, 9, "got '!'"),
        ("é", 1, 0, "got 'é'"),
    ],
)
def test_lexical_errors_have_positions(text: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(CqlSyntaxProblem) as caught:
        tokenize(text)
    problem = caught.value
    assert (problem.line, problem.column) == (line, column)
    assert fragment in str(problem)
    assert str(problem).startswith(f"line {line}:{column} ")
    assert isinstance(problem, SyntaxProblem)
    assert problem.code is ErrorCode.SYNTAX_ERROR


def test_control_characters_are_escaped_in_messages() -> None:
    with pytest.raises(SyntaxProblem, match=r"got '\\x00'"):
        tokenize("a \x00")


def test_size_limit_counts_utf8_bytes() -> None:
    assert len(tokenize("'" + "é" * 4 + "'", max_text_bytes=10)) == 2
    with pytest.raises(SyntaxProblem, match="at most 10 bytes"):
        tokenize("'" + "é" * 5 + "'", max_text_bytes=10)
