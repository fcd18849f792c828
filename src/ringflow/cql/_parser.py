"""The CQL parser's public entry points: one statement, or a cqlsh-like script of several.

``parse_statement(text)`` parses exactly one statement (trailing ``;`` allowed, as drivers and
the Rust/Java CDC libraries send them); ``parse_statements(text)`` parses statements separated by
top-level ``;`` (a batch's inner ``;`` are its own), skipping empty ones. Both raise
:class:`CqlSyntaxProblem` (a ``SyntaxProblem``, CQL error 0x2000) for any text that is not in
the supported subset, and nothing else: input size and nesting are bounded by
:class:`ParseLimits`.

The leading keyword picks the statement family (a dispatch table); families live in
``_parse_select`` (SELECT), ``_parse_dml`` (INSERT/UPDATE/DELETE/BATCH) and ``_parse_ddl``
(USE/TRUNCATE/CREATE/ALTER/DROP). The grammar is Cassandra's CQL 3 (``doc/cql3/CQL.textile``)
as far as ringflow executes it, plus Scylla's ``BYPASS CACHE`` and ``USING TIMEOUT``.
"""

from __future__ import annotations

from collections.abc import Callable

from ringflow.cql._ast import Statement
from ringflow.cql._lexer import CqlSyntaxProblem, tokenize
from ringflow.cql._parse_auth import parse_grant, parse_list, parse_revoke
from ringflow.cql._parse_core import DEFAULT_PARSE_LIMITS, Cursor, ParseLimits
from ringflow.cql._parse_ddl import (
    parse_alter,
    parse_call,
    parse_create,
    parse_drop,
    parse_truncate,
    parse_use,
)
from ringflow.cql._parse_describe import parse_describe
from ringflow.cql._parse_dml import parse_batch, parse_delete, parse_insert, parse_update
from ringflow.cql._parse_select import parse_select

__all__ = [
    "DEFAULT_PARSE_LIMITS",
    "CqlSyntaxProblem",
    "ParseLimits",
    "parse_statement",
    "parse_statements",
]

_STATEMENTS: dict[str, Callable[[Cursor], Statement]] = {
    "select": parse_select,
    "insert": parse_insert,
    "update": parse_update,
    "delete": parse_delete,
    "begin": parse_batch,
    "use": parse_use,
    "truncate": parse_truncate,
    "create": parse_create,
    "alter": parse_alter,
    "drop": parse_drop,
    "grant": parse_grant,
    "revoke": parse_revoke,
    "list": parse_list,
    "call": parse_call,
    "describe": parse_describe,
    "desc": parse_describe,
}
_EXPECTED_STATEMENT = (
    "expected a statement (SELECT, INSERT, UPDATE, DELETE, BEGIN BATCH, USE, TRUNCATE, "
    "CREATE, ALTER, DROP, GRANT, REVOKE, LIST, CALL, DESCRIBE)"
)


def parse_statement(text: str, *, limits: ParseLimits = DEFAULT_PARSE_LIMITS) -> Statement:
    """The one statement in ``text``; raises CqlSyntaxProblem (a SyntaxProblem)."""
    cursor = Cursor(tokenize(text, max_text_bytes=limits.max_text_bytes), limits)
    statement = _parse_one(cursor)
    while cursor.accept_symbol(";"):
        pass
    if not cursor.at_end():
        raise cursor.fail("expected the end of the statement")
    return statement


def parse_statements(
    text: str, *, limits: ParseLimits = DEFAULT_PARSE_LIMITS
) -> tuple[Statement, ...]:
    """Every statement of a script, in order; bind markers are numbered per statement."""
    cursor = Cursor(tokenize(text, max_text_bytes=limits.max_text_bytes), limits)
    statements: list[Statement] = []
    while True:
        while cursor.accept_symbol(";"):
            pass
        if cursor.at_end():
            return tuple(statements)
        if len(statements) >= limits.max_statements:
            raise cursor.fail(f"expected at most {limits.max_statements} statements")
        cursor.markers = []
        statements.append(_parse_one(cursor))
        if not cursor.at_end() and not cursor.at_symbol(";"):
            raise cursor.fail("expected ';' or the end of the script")


def _parse_one(cursor: Cursor) -> Statement:
    if not cursor.at_word(*_STATEMENTS):
        raise cursor.fail(_EXPECTED_STATEMENT)
    start = cursor.peek()
    try:
        return _STATEMENTS[start.value](cursor)
    except RecursionError:
        # The nesting limit keeps parses shallow; this only fires if the caller's own stack was
        # already nearly full. Still the client's statement, so still a syntax error.
        raise CqlSyntaxProblem(
            start.line, start.column, "expected a statement the parser can nest", start.text
        ) from None
