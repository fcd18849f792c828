"""INSERT, UPDATE, DELETE, BATCH and the term forms they carry parse to the expected tree."""

from __future__ import annotations

import uuid

import pytest

from ringflow.cql._ast import (
    AddTo,
    Assignment,
    BeginBatchStatement,
    BindMarker,
    BlobLiteral,
    BooleanLiteral,
    ColumnRelation,
    Condition,
    DeleteColumn,
    DeleteElement,
    DeleteField,
    DeleteStatement,
    DurationLiteral,
    EmptyBraces,
    FloatLiteral,
    FunctionCall,
    InsertStatement,
    IntegerLiteral,
    InValues,
    ListLiteral,
    MapLiteral,
    MultiColumnRelation,
    NullLiteral,
    Operator,
    Prepend,
    QualifiedName,
    RemoveFrom,
    SetElement,
    SetField,
    SetLiteral,
    SetValue,
    StringLiteral,
    Term,
    TupleLiteral,
    TypeCast,
    TypeSpec,
    UdtLiteral,
    UpdateStatement,
    UsingClause,
    UuidLiteral,
)
from ringflow.cql._parser import parse_statement
from ringflow.cql._requests import BatchType
from ringflow.errors import SyntaxProblem

T = QualifiedName(None, "t")


def insert(text: str) -> InsertStatement:
    statement = parse_statement(text)
    assert isinstance(statement, InsertStatement)
    return statement


def update(text: str) -> UpdateStatement:
    statement = parse_statement(text)
    assert isinstance(statement, UpdateStatement)
    return statement


def delete(text: str) -> DeleteStatement:
    statement = parse_statement(text)
    assert isinstance(statement, DeleteStatement)
    return statement


def one_value(term_text: str) -> Term:
    (value,) = insert(f"INSERT INTO t (v) VALUES ({term_text})").values
    return value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("'text'", StringLiteral("text")),
        ("$$pg 'style'$$", StringLiteral("pg 'style'")),
        ("42", IntegerLiteral(42)),
        ("-42", IntegerLiteral(-42)),
        ("123456789012345678901234567890", IntegerLiteral(123456789012345678901234567890)),
        ("1.5", FloatLiteral("1.5")),
        ("-1.5E-3", FloatLiteral("-1.5E-3")),
        ("NaN", FloatLiteral("NaN")),
        ("-NaN", FloatLiteral("NaN")),
        ("Infinity", FloatLiteral("Infinity")),
        ("-Infinity", FloatLiteral("-Infinity")),
        ("true", BooleanLiteral(True)),
        ("FALSE", BooleanLiteral(False)),
        ("null", NullLiteral()),
        ("0xCafe01", BlobLiteral(b"\xca\xfe\x01")),
        ("0x", BlobLiteral(b"")),
        (
            "6ab09bec-e68e-48d9-a5f8-97e6fb4c9b47",
            UuidLiteral(uuid.UUID("6ab09bec-e68e-48d9-a5f8-97e6fb4c9b47")),
        ),
        ("1h30m", DurationLiteral("1h30m")),
        ("-5s", DurationLiteral("-5s")),
        ("P1DT2H", DurationLiteral("P1DT2H")),
        ("?", BindMarker(0)),
        (":named", BindMarker(0, "named")),
        ("[]", ListLiteral(())),
        ("[1, 2]", ListLiteral((IntegerLiteral(1), IntegerLiteral(2)))),
        ("{}", EmptyBraces()),
        ("{1, 2}", SetLiteral((IntegerLiteral(1), IntegerLiteral(2)))),
        ("{'a': 1}", MapLiteral(((StringLiteral("a"), IntegerLiteral(1)),))),
        ("{?: ?}", MapLiteral(((BindMarker(0), BindMarker(1)),))),
        ("{NaN: 1}", MapLiteral(((FloatLiteral("NaN"), IntegerLiteral(1)),))),
        (
            "{street: 'x', \"Zip\": 1}",
            UdtLiteral((("street", StringLiteral("x")), ("Zip", IntegerLiteral(1)))),
        ),
        ("(1, 'a')", TupleLiteral((IntegerLiteral(1), StringLiteral("a")))),
        ("(null)", TupleLiteral((NullLiteral(),))),
        ("now()", FunctionCall("now", ())),
        ("ks.fn(1, ?)", FunctionCall("fn", (IntegerLiteral(1), BindMarker(0)), "ks")),
        ("(int) ?", TypeCast(TypeSpec("int"), BindMarker(0))),
        (
            "(frozen<list<int>>) [1]",
            TypeCast(
                TypeSpec("frozen", (TypeSpec("list", (TypeSpec("int"),)),)),
                ListLiteral((IntegerLiteral(1),)),
            ),
        ),
        (
            "{'k': [{1}, {}], 'j': (1, {a: [2]})}",
            MapLiteral(
                (
                    (
                        StringLiteral("k"),
                        ListLiteral((SetLiteral((IntegerLiteral(1),)), EmptyBraces())),
                    ),
                    (
                        StringLiteral("j"),
                        TupleLiteral(
                            (
                                IntegerLiteral(1),
                                UdtLiteral((("a", ListLiteral((IntegerLiteral(2),))),)),
                            )
                        ),
                    ),
                )
            ),
        ),
    ],
)
def test_terms(text: str, expected: Term) -> None:
    assert one_value(text) == expected


def test_insert_columns_values_and_options() -> None:
    statement = insert(
        "INSERT INTO ks.t (pk, \"Ck\", v) VALUES (?, 1, 'x') IF NOT EXISTS "
        "USING TIMESTAMP 123 AND TTL ?"
    )
    assert statement.table == QualifiedName("ks", "t")
    assert statement.columns == ("pk", "Ck", "v")
    assert statement.values == (BindMarker(0), IntegerLiteral(1), StringLiteral("x"))
    assert statement.if_not_exists
    assert statement.using == UsingClause(timestamp=IntegerLiteral(123), ttl=BindMarker(1))
    assert statement.bind_markers == (BindMarker(0), BindMarker(1))


@pytest.mark.parametrize(
    ("text", "json", "default_unset"),
    [
        ("INSERT INTO t JSON '{\"a\": 1}'", StringLiteral('{"a": 1}'), False),
        ("INSERT INTO t JSON ? DEFAULT UNSET", BindMarker(0), True),
        ("INSERT INTO t JSON :j DEFAULT NULL", BindMarker(0, "j"), False),
    ],
)
def test_insert_json(text: str, json: Term, default_unset: bool) -> None:
    statement = insert(text)
    assert (statement.json, statement.json_default_unset) == (json, default_unset)
    assert statement.columns == () and statement.values == ()


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ("a = 1", SetValue("a", IntegerLiteral(1))),
        ("a = null", SetValue("a", NullLiteral())),
        ("m['k'] = 2", SetElement("m", StringLiteral("k"), IntegerLiteral(2))),
        ("l[2] = 5", SetElement("l", IntegerLiteral(2), IntegerLiteral(5))),
        ("u.street = 'x'", SetField("u", "street", StringLiteral("x"))),
        ("s = s + {1}", AddTo("s", SetLiteral((IntegerLiteral(1),)))),
        ("s = s - {1}", RemoveFrom("s", SetLiteral((IntegerLiteral(1),)))),
        ("l = l + [1]", AddTo("l", ListLiteral((IntegerLiteral(1),)))),
        ("l = [1] + l", Prepend("l", ListLiteral((IntegerLiteral(1),)))),
        (
            "m = m + {'k': 1}",
            AddTo("m", MapLiteral(((StringLiteral("k"), IntegerLiteral(1)),))),
        ),
        ("m = m - {'k'}", RemoveFrom("m", SetLiteral((StringLiteral("k"),)))),
        ("c = c + 1", AddTo("c", IntegerLiteral(1))),
        ("c = c - 1", RemoveFrom("c", IntegerLiteral(1))),
        ("c = c -1", RemoveFrom("c", IntegerLiteral(1))),
        ("c += 3", AddTo("c", IntegerLiteral(3))),
        ("s -= {?}", RemoveFrom("s", SetLiteral((BindMarker(0),)))),
        ('"Q" = "Q" + ?', AddTo("Q", BindMarker(0))),
    ],
)
def test_update_assignments(assignment: str, expected: Assignment) -> None:
    (parsed,) = update(f"UPDATE t SET {assignment} WHERE k = 0").assignments
    assert parsed == expected


def test_update_full_form() -> None:
    statement = update(
        "UPDATE ks.t USING TTL 5 AND TIMESTAMP ? SET a = ?, m[?] = ? "
        "WHERE pk = ? AND ck IN (1, 2) IF a = 3 AND m['k'] != null AND u.f IN (1, 2)"
    )
    assert statement.using == UsingClause(timestamp=BindMarker(0), ttl=IntegerLiteral(5))
    assert statement.assignments == (
        SetValue("a", BindMarker(1)),
        SetElement("m", BindMarker(2), BindMarker(3)),
    )
    assert statement.where == (
        ColumnRelation("pk", Operator.EQ, BindMarker(4)),
        ColumnRelation("ck", Operator.IN, InValues((IntegerLiteral(1), IntegerLiteral(2)))),
    )
    assert not statement.if_exists
    assert statement.conditions == (
        Condition("a", Operator.EQ, IntegerLiteral(3)),
        Condition("m", Operator.NEQ, NullLiteral(), element=StringLiteral("k")),
        Condition("u", Operator.IN, InValues((IntegerLiteral(1), IntegerLiteral(2))), field="f"),
    )
    assert [marker.index for marker in statement.bind_markers] == [0, 1, 2, 3, 4]


def test_update_if_exists_and_column_named_exists() -> None:
    assert update("UPDATE t SET a = 1 WHERE k = 0 IF EXISTS").if_exists
    statement = update("UPDATE t SET a = 1 WHERE k = 0 IF exists = 2")
    assert not statement.if_exists
    assert statement.conditions == (Condition("exists", Operator.EQ, IntegerLiteral(2)),)


def test_update_using_timeout() -> None:
    statement = update("UPDATE t USING TIMEOUT 1s SET a = 1 WHERE k = 0")
    assert statement.using == UsingClause(timeout=DurationLiteral("1s"))


def test_delete_targets_using_and_range() -> None:
    statement = delete(
        "DELETE a, m['k'], l[1], u.f FROM t USING TIMESTAMP 10 "
        "WHERE pk = 1 AND (c1, c2) > (1, 2) AND c1 <= 5 IF EXISTS"
    )
    assert statement.targets == (
        DeleteColumn("a"),
        DeleteElement("m", StringLiteral("k")),
        DeleteElement("l", IntegerLiteral(1)),
        DeleteField("u", "f"),
    )
    assert statement.using == UsingClause(timestamp=IntegerLiteral(10))
    assert statement.where == (
        ColumnRelation("pk", Operator.EQ, IntegerLiteral(1)),
        MultiColumnRelation(
            ("c1", "c2"), Operator.GT, TupleLiteral((IntegerLiteral(1), IntegerLiteral(2)))
        ),
        ColumnRelation("c1", Operator.LTE, IntegerLiteral(5)),
    )
    assert statement.if_exists


def test_delete_whole_partition_with_in() -> None:
    statement = delete("DELETE FROM ks.t WHERE pk IN (?, ?)")
    assert statement.targets == ()
    assert statement.table == QualifiedName("ks", "t")
    assert statement.where == (
        ColumnRelation("pk", Operator.IN, InValues((BindMarker(0), BindMarker(1)))),
    )


def test_delete_with_conditions() -> None:
    statement = delete("DELETE FROM t WHERE k = 1 IF v = 2 AND s CONTAINS 3")
    assert statement.conditions == (
        Condition("v", Operator.EQ, IntegerLiteral(2)),
        Condition("s", Operator.CONTAINS, IntegerLiteral(3)),
    )


def test_batch_numbers_markers_across_children() -> None:
    statement = parse_statement(
        "BEGIN UNLOGGED BATCH USING TIMESTAMP 5\n"
        "  INSERT INTO t (a, b) VALUES (?, :x) USING TIMESTAMP 3;\n"
        "  UPDATE t SET a = ? WHERE k = ?\n"
        "  DELETE FROM t WHERE k = ?;;\n"
        "APPLY BATCH;"
    )
    assert isinstance(statement, BeginBatchStatement)
    assert statement.kind is BatchType.UNLOGGED
    assert statement.using == UsingClause(timestamp=IntegerLiteral(5))
    first, second, third = statement.statements
    assert isinstance(first, InsertStatement)
    assert first.using == UsingClause(timestamp=IntegerLiteral(3))
    assert first.bind_markers == (BindMarker(0), BindMarker(1, "x"))
    assert isinstance(second, UpdateStatement)
    assert second.bind_markers == (BindMarker(2), BindMarker(3))
    assert isinstance(third, DeleteStatement)
    assert third.bind_markers == (BindMarker(4),)
    assert [marker.index for marker in statement.bind_markers] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("BEGIN BATCH APPLY BATCH", BatchType.LOGGED),
        ("BEGIN LOGGED BATCH APPLY BATCH", BatchType.LOGGED),
        ("begin counter batch apply batch", BatchType.COUNTER),
    ],
)
def test_batch_kinds(text: str, kind: BatchType) -> None:
    statement = parse_statement(text)
    assert isinstance(statement, BeginBatchStatement)
    assert statement.kind is kind and statement.statements == ()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("INSERT INTO t (a, b) VALUES (1)", "as many values as columns (2), not 1"),
        ("INSERT INTO t (a) VALUES ()", "expected a value"),
        ("INSERT INTO t JSON 1", "JSON string or a bind marker"),
        ("INSERT INTO t (a) VALUES (1) USING TTL 1 AND TTL 2", "TTL at most once"),
        ("INSERT INTO t (a) VALUES (1) USING TTL 'x'", "integer or a bind marker"),
        ("UPDATE t SET a = b + 1 WHERE k = 0", "assigned column 'a'"),
        ("UPDATE t SET a = 1 + b WHERE k = 0", "assigned column 'a'"),
        ("UPDATE t SET a = 1", "expected WHERE"),
        ("UPDATE t SET a == 1 WHERE k = 0", "expected a value"),
        ("UPDATE t SET a = - ? WHERE k = 0", "number or duration after '-'"),
        ("DELETE FROM t USING TTL 3 WHERE k = 1", "expected TIMEOUT or TIMESTAMP"),
        ("DELETE FROM t", "expected WHERE"),
        ("DELETE a b FROM t WHERE k = 1", "expected FROM"),
        ("BEGIN BATCH SELECT * FROM t APPLY BATCH", "INSERT, UPDATE, DELETE or APPLY BATCH"),
        ("BEGIN BATCH INSERT INTO t (a) VALUES (1)", "INSERT, UPDATE, DELETE or APPLY BATCH"),
        ("INSERT INTO t (a) VALUES (0x1)", "even number of hex digits"),
        ("INSERT INTO t (a) VALUES ({1: 2, 3})", "expected ':'"),
        ("INSERT INTO t (a) VALUES ({a: 1, 2: 3})", "expected a field name"),
    ],
)
def test_malformed_modifications(text: str, fragment: str) -> None:
    with pytest.raises(SyntaxProblem, match=r"^line \d+:\d+ ") as caught:
        parse_statement(text)
    assert fragment in str(caught.value)
