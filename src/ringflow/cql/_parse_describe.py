"""``DESCRIBE`` / ``DESC``: Cassandra 4's ``describeStatement`` rule (``Parser.g``), as far as
ringflow has the schema elements it names.

Forms: ``CLUSTER``, ``[FULL] SCHEMA``, ``KEYSPACES``, ``[ONLY] KEYSPACE [k]``, ``TABLES`` /
``COLUMNFAMILIES``, ``TABLE``/``COLUMNFAMILY [k.]t``, ``TYPES``, ``TYPE [k.]t``,
``FUNCTIONS``/``AGGREGATES`` (ringflow has none: empty listings), ``FUNCTION``/``AGGREGATE``/
``INDEX``/``MATERIALIZED VIEW [k.]name`` (parsed so that execution can answer Cassandra's
"not found"), and the generic ``[k.]name``; any of them may end with ``WITH INTERNALS``.
The keywords win over a name (``DESCRIBE tables`` lists tables), as in Cassandra's grammar.
"""

from __future__ import annotations

from ringflow.cql._ast import DescribeKind, DescribeStatement, QualifiedName
from ringflow.cql._parse_core import Cursor, parse_identifier, parse_qualified_name

_LISTINGS: dict[str, DescribeKind] = {
    "keyspaces": DescribeKind.KEYSPACES,
    "tables": DescribeKind.TABLES,
    "columnfamilies": DescribeKind.TABLES,
    "types": DescribeKind.TYPES,
    "functions": DescribeKind.FUNCTIONS,
    "aggregates": DescribeKind.AGGREGATES,
    "cluster": DescribeKind.CLUSTER,
    "schema": DescribeKind.SCHEMA,
}
_ELEMENTS: dict[str, DescribeKind] = {
    "table": DescribeKind.TABLE,
    "columnfamily": DescribeKind.TABLE,
    "type": DescribeKind.TYPE,
    "function": DescribeKind.FUNCTION,
    "aggregate": DescribeKind.AGGREGATE,
    "index": DescribeKind.INDEX,
}


def parse_describe(cursor: Cursor) -> DescribeStatement:
    """``(DESCRIBE | DESC) what [WITH INTERNALS]`` (module docstring)."""
    if not cursor.accept_word("describe"):
        cursor.expect_word("desc")
    kind, name = _what(cursor)
    internals = False
    if cursor.accept_word("with"):
        cursor.expect_word("internals")
        internals = True
    return DescribeStatement(kind, name, internals)


def _what(cursor: Cursor) -> tuple[DescribeKind, QualifiedName | None]:
    word = cursor.peek().value if cursor.peek().kind.name == "IDENT" else ""
    if word in _LISTINGS and not cursor.at_symbol(".", ahead=1):
        cursor.advance()
        return _LISTINGS[word], None
    if word == "full":
        cursor.advance()
        cursor.expect_word("schema")
        return DescribeKind.FULL_SCHEMA, None
    if word in ("only", "keyspace"):
        only = cursor.accept_word("only")
        cursor.expect_word("keyspace")
        kind = DescribeKind.ONLY_KEYSPACE if only else DescribeKind.KEYSPACE
        if cursor.at_end() or cursor.at_symbol(";") or cursor.at_word("with"):
            return kind, None
        return kind, QualifiedName(None, parse_identifier(cursor, "a keyspace name"))
    if word == "materialized":
        cursor.advance()
        cursor.expect_word("view")
        return DescribeKind.MATERIALIZED_VIEW, parse_qualified_name(cursor, "a view name")
    if word in _ELEMENTS and not cursor.at_symbol(".", ahead=1):
        cursor.advance()
        return _ELEMENTS[word], parse_qualified_name(cursor, f"a {word} name")
    name = parse_qualified_name(
        cursor,
        "KEYSPACES, KEYSPACE, TABLES, TABLE, TYPES, TYPE, CLUSTER, SCHEMA, FULL SCHEMA or a name",
    )
    return DescribeKind.GENERIC, name
