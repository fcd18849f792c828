"""SELECT: every selector, relation and trailing clause form parses to the expected tree."""

from __future__ import annotations

import uuid

import pytest

from ringflow.cql._ast import (
    BindMarker,
    CastSelector,
    ColumnRelation,
    ColumnSelector,
    CountRows,
    DurationLiteral,
    ElementRelation,
    FieldSelector,
    FunctionCall,
    FunctionSelector,
    IntegerLiteral,
    InValues,
    MultiColumnRelation,
    Operator,
    OrderBy,
    QualifiedName,
    Relation,
    SelectItem,
    Selector,
    SelectStatement,
    StringLiteral,
    TermSelector,
    TokenRelation,
    TtlOf,
    TupleLiteral,
    TypeSpec,
    UuidLiteral,
    WritetimeOf,
)
from ringflow.cql._parser import parse_statement
from ringflow.errors import SyntaxProblem


def select(text: str) -> SelectStatement:
    statement = parse_statement(text)
    assert isinstance(statement, SelectStatement)
    return statement


def only_selector(text: str) -> Selector:
    (item,) = select(text).selection
    assert item.alias is None
    return item.selector


def only_relation(text: str) -> Relation:
    (relation,) = select(text).where
    return relation


def test_star_from_unqualified_table() -> None:
    statement = select("SELECT * FROM t")
    assert statement.is_star
    assert statement.table == QualifiedName(None, "t")
    assert statement == SelectStatement(QualifiedName(None, "t"))


def test_keywords_are_case_insensitive_and_names_fold() -> None:
    statement = select('select A, "B" FrOm Ks.Tbl')
    assert statement.table == QualifiedName("ks", "tbl")
    assert statement.selection == (
        SelectItem(ColumnSelector("a")),
        SelectItem(ColumnSelector("B")),
    )


def test_quoted_names_keep_case_and_escapes() -> None:
    statement = select('SELECT "Weird""Name" FROM "MyKs"."MyTable"')
    assert statement.table == QualifiedName("MyKs", "MyTable")
    assert statement.selection == (SelectItem(ColumnSelector('Weird"Name')),)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SELECT COUNT(*) FROM t", CountRows()),
        ("SELECT count(1) FROM t", CountRows()),
        ("SELECT count(v) FROM t", FunctionSelector("count", (ColumnSelector("v"),))),
        ("SELECT WRITETIME(v) FROM t", WritetimeOf("v")),
        ('SELECT writetime("V") FROM t', WritetimeOf("V")),
        ("SELECT TTL(v) FROM t", TtlOf("v")),
        (
            "SELECT token(a, b) FROM t",
            FunctionSelector("token", (ColumnSelector("a"), ColumnSelector("b"))),
        ),
        (
            "SELECT toTimestamp(now()) FROM t",
            FunctionSelector("totimestamp", (FunctionSelector("now", ()),)),
        ),
        (
            "SELECT toUnixTimestamp(t) FROM t",
            FunctionSelector("tounixtimestamp", (ColumnSelector("t"),)),
        ),
        (
            "SELECT minTimeuuid(?) FROM t",
            FunctionSelector("mintimeuuid", (TermSelector(BindMarker(0)),)),
        ),
        (
            "SELECT maxTimeuuid('2024-01-01 00:00:00+0000') FROM t",
            FunctionSelector(
                "maxtimeuuid", (TermSelector(StringLiteral("2024-01-01 00:00:00+0000")),)
            ),
        ),
        ("SELECT min(time) FROM t", FunctionSelector("min", (ColumnSelector("time"),))),
        ("SELECT ks.f(a) FROM t", FunctionSelector("f", (ColumnSelector("a"),), "ks")),
        ("SELECT CAST(a AS text) FROM t", CastSelector(ColumnSelector("a"), TypeSpec("text"))),
        ("SELECT u.street FROM t", FieldSelector(ColumnSelector("u"), "street")),
        # Unreserved keywords are column names where no call follows.
        ("SELECT ttl FROM t", ColumnSelector("ttl")),
        ("SELECT count FROM t", ColumnSelector("count")),
        ("SELECT key FROM t", ColumnSelector("key")),
        ("SELECT json FROM t", ColumnSelector("json")),
        ("SELECT distinct FROM t", ColumnSelector("distinct")),
        ("SELECT timestamp FROM t", ColumnSelector("timestamp")),
    ],
)
def test_selectors(text: str, expected: Selector) -> None:
    assert only_selector(text) == expected


def test_aliases_and_modifiers() -> None:
    statement = select('SELECT JSON DISTINCT pk AS p, writetime(v) AS "W" FROM t')
    assert statement.json and statement.distinct
    assert statement.selection == (
        SelectItem(ColumnSelector("pk"), "p"),
        SelectItem(WritetimeOf("v"), "W"),
    )


def test_distinct_modifier_on_json_column() -> None:
    statement = select("SELECT DISTINCT json FROM t")
    assert statement.distinct and not statement.json
    assert statement.selection == (SelectItem(ColumnSelector("json")),)


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("a = 1", ColumnRelation("a", Operator.EQ, IntegerLiteral(1))),
        ("a != 1", ColumnRelation("a", Operator.NEQ, IntegerLiteral(1))),
        ("a < 1", ColumnRelation("a", Operator.LT, IntegerLiteral(1))),
        ("a <= -1", ColumnRelation("a", Operator.LTE, IntegerLiteral(-1))),
        ("a > ?", ColumnRelation("a", Operator.GT, BindMarker(0))),
        ("a >= :lo", ColumnRelation("a", Operator.GTE, BindMarker(0, "lo"))),
        (
            "a IN (1, 2)",
            ColumnRelation("a", Operator.IN, InValues((IntegerLiteral(1), IntegerLiteral(2)))),
        ),
        ("a IN ()", ColumnRelation("a", Operator.IN, InValues(()))),
        ("a IN ?", ColumnRelation("a", Operator.IN, BindMarker(0))),
        ("a IN :ids", ColumnRelation("a", Operator.IN, BindMarker(0, "ids"))),
        ("s CONTAINS 3", ColumnRelation("s", Operator.CONTAINS, IntegerLiteral(3))),
        ("m CONTAINS KEY 'k'", ColumnRelation("m", Operator.CONTAINS_KEY, StringLiteral("k"))),
        ("a LIKE 'x%'", ColumnRelation("a", Operator.LIKE, StringLiteral("x%"))),
        (
            "m['k'] = 2",
            ElementRelation("m", StringLiteral("k"), Operator.EQ, IntegerLiteral(2)),
        ),
        ("token(pk) > ?", TokenRelation(("pk",), Operator.GT, BindMarker(0))),
        (
            "token(a, b) <= token(?, ?)",
            TokenRelation(
                ("a", "b"), Operator.LTE, FunctionCall("token", (BindMarker(0), BindMarker(1)))
            ),
        ),
        (
            "TOKEN(pk) >= -9223372036854775808",
            TokenRelation(("pk",), Operator.GTE, IntegerLiteral(-(2**63))),
        ),
        (
            "(c1, c2) > (1, 2)",
            MultiColumnRelation(
                ("c1", "c2"), Operator.GT, TupleLiteral((IntegerLiteral(1), IntegerLiteral(2)))
            ),
        ),
        ("(c1, c2) <= ?", MultiColumnRelation(("c1", "c2"), Operator.LTE, BindMarker(0))),
        (
            "(c1, c2) IN ((1, 2), (3, 4))",
            MultiColumnRelation(
                ("c1", "c2"),
                Operator.IN,
                InValues(
                    (
                        TupleLiteral((IntegerLiteral(1), IntegerLiteral(2))),
                        TupleLiteral((IntegerLiteral(3), IntegerLiteral(4))),
                    )
                ),
            ),
        ),
        ("(c1, c2) IN ?", MultiColumnRelation(("c1", "c2"), Operator.IN, BindMarker(0))),
        (
            '"cdc$time" > minTimeuuid(?)',
            ColumnRelation("cdc$time", Operator.GT, FunctionCall("mintimeuuid", (BindMarker(0),))),
        ),
        (
            "u = 123e4567-e89b-12d3-a456-426614174000",
            ColumnRelation(
                "u",
                Operator.EQ,
                UuidLiteral(uuid.UUID("123e4567-e89b-12d3-a456-426614174000")),
            ),
        ),
    ],
)
def test_relations(where: str, expected: Relation) -> None:
    assert only_relation(f"SELECT * FROM t WHERE {where}") == expected


def test_relations_are_joined_by_and_in_order() -> None:
    statement = select("SELECT * FROM t WHERE a = 1 AND b > 2 AND c IN ?")
    columns = [r.column for r in statement.where if isinstance(r, ColumnRelation)]
    assert columns == ["a", "b", "c"]


def test_trailing_clauses_in_order() -> None:
    statement = select(
        "SELECT a FROM ks.t WHERE pk = ? GROUP BY pk, ck ORDER BY ck DESC, d ASC, e "
        "PER PARTITION LIMIT 2 LIMIT ? ALLOW FILTERING BYPASS CACHE USING TIMEOUT 500ms"
    )
    assert statement.group_by == ("pk", "ck")
    assert statement.order_by == (OrderBy("ck", True), OrderBy("d"), OrderBy("e"))
    assert statement.per_partition_limit == IntegerLiteral(2)
    assert statement.limit == BindMarker(1)
    assert statement.allow_filtering and statement.bypass_cache
    assert statement.timeout == DurationLiteral("500ms")
    assert statement.bind_markers == (BindMarker(0), BindMarker(1))


def test_using_timeout_marker_without_where() -> None:
    statement = select("SELECT * FROM t USING TIMEOUT ?")
    assert statement.timeout == BindMarker(0)
    assert statement.where == ()


def test_bind_markers_numbered_in_order_of_appearance() -> None:
    statement = select("SELECT f(?) FROM t WHERE a = :a AND b IN ? AND (c, d) > (?, ?) LIMIT :lim")
    assert statement.bind_markers == (
        BindMarker(0),
        BindMarker(1, "a"),
        BindMarker(2),
        BindMarker(3),
        BindMarker(4),
        BindMarker(5, "lim"),
    )


def test_trailing_semicolons_and_comments_are_accepted() -> None:
    statement = select("SELECT * FROM t -- why not\n;;")
    assert statement.table == QualifiedName(None, "t")


@pytest.mark.parametrize(
    "text",
    [
        "SELECT FROM t",
        "SELECT * FROM",
        "SELECT * FROM t WHERE",
        "SELECT * FROM t WHERE a",
        "SELECT * FROM t WHERE a = 1 OR b = 2",
        "SELECT * FROM t LIMIT 1 WHERE a = 1",
        "SELECT * FROM t ORDER BY",
        "SELECT * FROM t PER LIMIT 1",
        "SELECT * FROM t USING TIMEOUT 5",
        "SELECT * FROM t WHERE a = b",
        "SELECT * FROM t WHERE (a, b) > 1",
        "SELECT * FROM t WHERE a IN 1",
        "SELECT a AS FROM t",
        "SELECT select FROM t",
        "SELECT * FROM t.u.v",
    ],
)
def test_malformed_selects_are_syntax_errors(text: str) -> None:
    with pytest.raises(SyntaxProblem, match=r"^line \d+:\d+ "):
        parse_statement(text)
