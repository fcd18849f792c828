"""Syntax errors name the right line and column; limits and scripts behave as documented."""

from __future__ import annotations

import pytest

from ringflow.cql._ast import (
    BeginBatchStatement,
    BindMarker,
    CreateTableStatement,
    InsertStatement,
    ListLiteral,
    SelectStatement,
    UseStatement,
)
from ringflow.cql._lexer import CqlSyntaxProblem
from ringflow.cql._parse_core import NESTING_DEPTH_HARD_MAX, ParseLimits
from ringflow.cql._parser import parse_statement, parse_statements
from ringflow.errors import ConfigurationError, ErrorCode, SyntaxProblem


def problem_of(text: str, limits: ParseLimits | None = None) -> CqlSyntaxProblem:
    with pytest.raises(CqlSyntaxProblem) as caught:
        if limits is None:
            parse_statement(text)
        else:
            parse_statement(text, limits=limits)
    return caught.value


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        # Cassandra reports "line 1:9 ... 'FRM'": lines from 1, columns from 0.
        ("SELECT * FRM t", 1, 9, "line 1:9 expected FROM, got 'FRM'"),
        (
            "SELEC * FROM t",
            1,
            0,
            "line 1:0 expected a statement (SELECT, INSERT, UPDATE, "
            "DELETE, BEGIN BATCH, USE, TRUNCATE, CREATE, ALTER, DROP, GRANT, REVOKE, LIST, "
            "CALL, DESCRIBE), got 'SELEC'",
        ),
        (
            "SELECT *\nFROM t\nWHERE a = 1\n  AND b => 2",
            4,
            9,
            "line 4:9 expected a value (literal, bind marker, collection, tuple or function call), "
            "got '>'",
        ),
        (
            "INSERT INTO t (a, b)\n  VALUES (1, 2)\n  USING TTL 1 AND TTL 2",
            3,
            18,
            "line 3:18 expected TTL at most once, got 'TTL'",
        ),
        (
            "CREATE TABLE t (\n  a int,\n  b int\n)",
            4,
            0,
            "line 4:0 expected a PRIMARY KEY definition, got ')'",
        ),
        (
            "UPDATE t\n\tSET a = b + 1\n\tWHERE k = 0",
            2,
            9,
            "line 2:9 expected the assigned column 'a' (only a = a + v, a = a - v and "
            "a = v + a are supported), got 'b'",
        ),
        (
            "SELECT * FROM t WHERE",
            1,
            21,
            "line 1:21 expected a column name, token(..) or '(', got '<EOF>'",
        ),
        (
            "-- a comment line\nSELECT * FROM t LIMIT x",
            2,
            22,
            "line 2:22 expected an integer or a bind marker, got 'x'",
        ),
        (
            "/* multi\nline */ SELECT * FROM t\n WHERE a IN 5",
            3,
            12,
            "line 3:12 expected '(' or a bind marker after IN, got '5'",
        ),
        (
            "SELECT * FROM t WHERE a = 'unterminated\nstring",
            1,
            26,
            "line 1:26 expected a closing quote for this string, got '<EOF>'",
        ),
        (
            "SELECT * FROM t WHERE a = 1 extra",
            1,
            28,
            "line 1:28 expected the end of the statement, got 'extra'",
        ),
    ],
)
def test_error_positions(text: str, line: int, column: int, message: str) -> None:
    problem = problem_of(text)
    assert (problem.line, problem.column) == (line, column)
    assert str(problem) == message
    assert isinstance(problem, SyntaxProblem)
    assert problem.code is ErrorCode.SYNTAX_ERROR


def test_long_tokens_are_cut_in_messages() -> None:
    problem = problem_of("SELECT * FROM t WHERE a = 1 " + "x" * 500)
    assert problem.near == "x" * 40 + "..."


def test_nesting_limit_is_enforced_and_configurable() -> None:
    def nested_list(depth: int) -> str:
        return "[" * depth + "1" + "]" * depth

    limits = ParseLimits(max_nesting_depth=10)
    # The value itself counts as one level: nine lists around it make ten.
    statement = parse_statement(f"INSERT INTO t (a) VALUES ({nested_list(9)})", limits=limits)
    assert isinstance(statement, InsertStatement)
    assert isinstance(statement.values[0], ListLiteral)
    problem = problem_of(f"INSERT INTO t (a) VALUES ({nested_list(10)})", limits)
    assert "nesting of at most 10 levels" in str(problem)
    # The default allows 100 levels, and deeper text fails cleanly instead of exhausting the stack.
    parse_statement(f"INSERT INTO t (a) VALUES ({nested_list(99)})")
    assert "nesting" in str(problem_of(f"INSERT INTO t (a) VALUES ({nested_list(5000)})"))
    assert "nesting" in str(problem_of("SELECT " + "f(" * 5000 + "a" + ")" * 5000 + " FROM t"))
    type_text = "frozen<" * 5000 + "int" + ">" * 5000
    assert "nesting" in str(problem_of(f"CREATE TABLE t (a {type_text} PRIMARY KEY)"))


def test_size_limit_is_enforced_and_configurable() -> None:
    text = "SELECT * FROM t WHERE a = '" + "x" * 100 + "'"
    assert isinstance(parse_statement(text), SelectStatement)
    problem = problem_of(text, ParseLimits(max_text_bytes=64))
    assert "at most 64 bytes" in str(problem)
    huge = "SELECT * FROM t WHERE a = '" + "x" * (1 << 20) + "'"
    assert "at most 1048576 bytes" in str(problem_of(huge))


def test_huge_integers_are_refused_not_crashing() -> None:
    problem = problem_of("SELECT * FROM t WHERE a = " + "9" * 5000)
    assert "at most 4000 digits" in str(problem)


@pytest.mark.parametrize(
    "bad",
    [
        {"max_nesting_depth": 0},
        {"max_nesting_depth": NESTING_DEPTH_HARD_MAX + 1},
        {"max_text_bytes": -1},
        {"max_statements": 0},
    ],
)
def test_invalid_limits_are_configuration_errors(bad: dict[str, int]) -> None:
    with pytest.raises(ConfigurationError, match="ParseLimits"):
        ParseLimits(**bad)


def test_script_splits_on_top_level_semicolons_only() -> None:
    statements = parse_statements(
        "USE ks;\n"
        "-- create the table\n"
        "CREATE TABLE t (k int PRIMARY KEY, v int);;\n"
        "BEGIN BATCH INSERT INTO t (k, v) VALUES (?, ?); UPDATE t SET v = ? WHERE k = ?; "
        "APPLY BATCH;\n"
        "SELECT * FROM t WHERE k = ?"
    )
    assert [type(s) for s in statements] == [
        UseStatement,
        CreateTableStatement,
        BeginBatchStatement,
        SelectStatement,
    ]
    batch = statements[2]
    assert isinstance(batch, BeginBatchStatement) and len(batch.statements) == 2
    # Markers are numbered per statement of the script.
    assert statements[3].bind_markers == (BindMarker(0),)


def test_empty_script_and_empty_statement() -> None:
    assert parse_statements("") == ()
    assert parse_statements(" ; ;; -- nothing\n") == ()
    assert "got '<EOF>'" in str(problem_of(""))


def test_script_errors_point_into_the_right_statement() -> None:
    with pytest.raises(CqlSyntaxProblem) as caught:
        parse_statements("USE ks;\nSELECT * FROM t;\nSELECT * FROM t WHERE k = ? k")
    assert (caught.value.line, caught.value.column) == (3, 28)
    assert "expected ';' or the end of the script" in str(caught.value)


def test_script_statement_limit() -> None:
    with pytest.raises(CqlSyntaxProblem, match="at most 2 statements"):
        parse_statements("USE a; USE b; USE c", limits=ParseLimits(max_statements=2))
