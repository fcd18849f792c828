"""Schema statements parse to the expected tree; type spellings resolve through parse_type."""

from __future__ import annotations

import math

import pytest

from ringflow.cql._ast import (
    AddColumns,
    AlterKeyspaceStatement,
    AlterTableProperties,
    AlterTableStatement,
    ColumnDefinition,
    CreateKeyspaceStatement,
    CreateTableStatement,
    CreateTypeStatement,
    DropColumns,
    DropKeyspaceStatement,
    DropTableStatement,
    DropTypeStatement,
    DurationLiteral,
    FieldDefinition,
    OptionMap,
    OrderBy,
    Properties,
    Property,
    QualifiedName,
    RenameColumns,
    TruncateStatement,
    TypeSpec,
    UnsupportedStatement,
    UseStatement,
    resolve_type,
)
from ringflow.cql._parser import parse_statement, parse_statements
from ringflow.errors import SyntaxProblem
from ringflow.schema import INT, TEXT, ListType, MapType, SchemaError, SetType, UserType

INT_SPEC = TypeSpec("int")
TEXT_SPEC = TypeSpec("text")


def create_table(text: str) -> CreateTableStatement:
    statement = parse_statement(text)
    assert isinstance(statement, CreateTableStatement)
    return statement


def test_use() -> None:
    assert parse_statement("USE ks") == UseStatement("ks")
    assert parse_statement('USE "MyKs";') == UseStatement("MyKs")


def test_create_keyspace_with_replication_map_and_durable_writes() -> None:
    statement = parse_statement(
        "CREATE KEYSPACE IF NOT EXISTS ks WITH replication = "
        "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': '2'} AND durable_writes = false"
    )
    assert statement == CreateKeyspaceStatement(
        "ks",
        Properties(
            (
                Property(
                    "replication",
                    OptionMap((("class", "NetworkTopologyStrategy"), ("dc1", 3), ("dc2", "2"))),
                ),
                Property("durable_writes", False),
            )
        ),
        if_not_exists=True,
    )
    assert isinstance(statement, CreateKeyspaceStatement)
    replication = statement.properties.get("replication")
    assert isinstance(replication, OptionMap)
    assert replication.as_dict()["dc1"] == 3
    assert replication.get("class") == "NetworkTopologyStrategy"


def test_alter_and_drop_keyspace() -> None:
    statement = parse_statement(
        "ALTER KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    assert isinstance(statement, AlterKeyspaceStatement) and not statement.if_exists
    assert statement.properties.names() == ("replication",)
    assert parse_statement("DROP KEYSPACE IF EXISTS ks") == DropKeyspaceStatement("ks", True)
    assert parse_statement("DROP SCHEMA ks") == DropKeyspaceStatement("ks")


def test_create_table_with_compound_key_and_options() -> None:
    statement = create_table(
        "CREATE TABLE IF NOT EXISTS ks.t (\n"
        "  a int, b text, c int, d int,\n"
        "  s set<int> static,\n"
        "  m map<text, frozen<list<int>>>,\n"
        "  PRIMARY KEY ((a, b), c, d)\n"
        ") WITH CLUSTERING ORDER BY (c DESC, d ASC)\n"
        "  AND cdc = {'enabled': true, 'preimage': 'full', 'postimage': false, 'ttl': 3600}\n"
        "  AND default_time_to_live = 0 AND gc_grace_seconds = 864000\n"
        "  AND comment = 'it''s a table' AND bloom_filter_fp_chance = 0.01\n"
        "  AND compaction = {'class': 'SizeTieredCompactionStrategy'}\n"
        "  AND speculative_retry = '99PERCENTILE' AND some_future_option = whatever"
    )
    assert statement.if_not_exists
    assert statement.table == QualifiedName("ks", "t")
    assert statement.partition_key == ("a", "b")
    assert statement.clustering_columns == ("c", "d")
    assert statement.clustering_order == (OrderBy("c", True), OrderBy("d"))
    assert statement.columns[4] == ColumnDefinition("s", TypeSpec("set", (INT_SPEC,)), True)
    assert statement.columns[5] == ColumnDefinition(
        "m",
        TypeSpec("map", (TEXT_SPEC, TypeSpec("frozen", (TypeSpec("list", (INT_SPEC,)),)))),
    )
    properties = statement.properties
    assert properties.get("cdc") == OptionMap(
        (("enabled", True), ("preimage", "full"), ("postimage", False), ("ttl", 3600))
    )
    assert properties.get("default_time_to_live") == 0
    assert properties.get("gc_grace_seconds") == 864000
    assert properties.get("comment") == "it's a table"
    assert properties.get("bloom_filter_fp_chance") == 0.01
    assert properties.get("some_future_option") == "whatever"
    assert properties.get("absent") is None


def test_create_table_inline_primary_key_and_trailing_comma() -> None:
    statement = create_table('CREATE TABLE "T" (k blob PRIMARY KEY, "V" text,)')
    assert statement.table == QualifiedName(None, "T")
    assert statement.partition_key == ("k",)
    assert statement.clustering_columns == ()
    assert [column.name for column in statement.columns] == ["k", "V"]


def test_create_table_scylla_cdc_log_shape_and_compact_storage() -> None:
    statement = create_table(
        'CREATE TABLE t ("cdc$stream_id" blob, "cdc$time" timeuuid, "cdc$batch_seq_no" int, '
        'PRIMARY KEY ("cdc$stream_id", "cdc$time", "cdc$batch_seq_no")) '
        "WITH COMPACT STORAGE AND caching = {'enabled': 'false'}"
    )
    assert statement.partition_key == ("cdc$stream_id",)
    assert statement.clustering_columns == ("cdc$time", "cdc$batch_seq_no")
    assert statement.compact_storage


def test_create_table_keeps_udt_spellings_and_keyword_column_names() -> None:
    statement = create_table(
        "CREATE TABLE t (key text, time timestamp, type int, ttl int, addr frozen<ks.address>, "
        'other "MyType", PRIMARY KEY (key, time))'
    )
    types = {column.name: column.type for column in statement.columns}
    assert types["addr"] == TypeSpec("frozen", (TypeSpec("address", keyspace="ks"),))
    assert types["other"] == TypeSpec("MyType")
    assert types["other"].is_user_type and not types["time"].is_user_type
    assert types["addr"].cql() == "frozen<ks.address>"
    assert types["other"].cql() == '"MyType"'


def test_alter_table_actions() -> None:
    add_one = parse_statement("ALTER TABLE ks.t ADD v int STATIC")
    assert add_one == AlterTableStatement(
        QualifiedName("ks", "t"), AddColumns((ColumnDefinition("v", INT_SPEC, True),))
    )
    add_many = parse_statement("ALTER TABLE IF EXISTS t ADD IF NOT EXISTS (a int, b list<text>)")
    assert add_many == AlterTableStatement(
        QualifiedName(None, "t"),
        AddColumns(
            (
                ColumnDefinition("a", INT_SPEC),
                ColumnDefinition("b", TypeSpec("list", (TEXT_SPEC,))),
            ),
            if_not_exists=True,
        ),
        if_exists=True,
    )
    drop_one = parse_statement("ALTER TABLE t DROP v")
    assert isinstance(drop_one, AlterTableStatement)
    assert drop_one.action == DropColumns(("v",))
    drop_many = parse_statement("ALTER TABLE t DROP IF EXISTS (a, b) USING TIMESTAMP 42")
    assert isinstance(drop_many, AlterTableStatement)
    assert drop_many.action == DropColumns(("a", "b"), True, 42)
    rename = parse_statement("ALTER TABLE t RENAME a TO b AND c TO d")
    assert isinstance(rename, AlterTableStatement)
    assert rename.action == RenameColumns((("a", "b"), ("c", "d")))
    with_options = parse_statement("ALTER TABLE t WITH cdc = {'enabled': false} AND comment = ''")
    assert isinstance(with_options, AlterTableStatement)
    assert with_options.action == AlterTableProperties(
        Properties(
            (Property("cdc", OptionMap((("enabled", False),))), Property("comment", "")),
        )
    )


def test_drop_table_truncate_and_types() -> None:
    assert parse_statement("DROP TABLE IF EXISTS ks.t") == DropTableStatement(
        QualifiedName("ks", "t"), True
    )
    assert parse_statement("DROP COLUMNFAMILY t") == DropTableStatement(QualifiedName(None, "t"))
    assert parse_statement("TRUNCATE t") == TruncateStatement(QualifiedName(None, "t"))
    assert parse_statement("TRUNCATE TABLE ks.t USING TIMEOUT 10s") == TruncateStatement(
        QualifiedName("ks", "t"), DurationLiteral("10s")
    )
    assert parse_statement(
        "CREATE TYPE IF NOT EXISTS ks.address (street text, zip int, tags frozen<set<text>>,)"
    ) == CreateTypeStatement(
        QualifiedName("ks", "address"),
        (
            FieldDefinition("street", TEXT_SPEC),
            FieldDefinition("zip", INT_SPEC),
            FieldDefinition("tags", TypeSpec("frozen", (TypeSpec("set", (TEXT_SPEC,)),))),
        ),
        if_not_exists=True,
    )
    assert parse_statement("DROP TYPE IF EXISTS address") == DropTypeStatement(
        QualifiedName(None, "address"), True
    )


@pytest.mark.parametrize(
    ("value_text", "expected"),
    [
        ("-1", -1),
        ("1.5e2", 150.0),
        ("'s'", "s"),
        ("TRUE", True),
        ("0x0A", "0x0A"),
        ("5m", "5m"),
        ("keyword", "keyword"),
    ],
)
def test_option_scalars(value_text: str, expected: object) -> None:
    statement = parse_statement(f"ALTER TABLE t WITH opt = {value_text}")
    assert isinstance(statement, AlterTableStatement)
    assert isinstance(statement.action, AlterTableProperties)
    assert statement.action.properties.get("opt") == expected


def test_option_nan() -> None:
    statement = parse_statement("ALTER TABLE t WITH opt = NaN")
    assert isinstance(statement, AlterTableStatement)
    assert isinstance(statement.action, AlterTableProperties)
    value = statement.action.properties.get("opt")
    assert isinstance(value, float) and math.isnan(value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("CREATE TABLE t (a int)", "expected a PRIMARY KEY definition, got ')'"),
        ("CREATE TABLE t (a int PRIMARY KEY, b int PRIMARY KEY)", "single PRIMARY KEY"),
        ("CREATE TABLE t (a int PRIMARY KEY, PRIMARY KEY (a))", "single PRIMARY KEY"),
        ("CREATE TABLE t (a map<int>, PRIMARY KEY (a))", "2 type parameter(s) for map, not 1"),
        ("CREATE TABLE t (a 'org.Foo' PRIMARY KEY)", "custom class types"),
        ("CREATE TABLE t (a int PRIMARY KEY) WITH x = 1 AND x = 2", "'x' is repeated"),
        ("CREATE TABLE t (a int PRIMARY KEY) WITH x = ?", "bind markers are not allowed"),
        ("CREATE TABLE t (a int PRIMARY KEY) WITH x = {'a': 1, 'a': 2}", "'a' is repeated"),
        ("CREATE TABLE t (a int PRIMARY KEY) WITH x = {'a': {'b': 1}}", "constant option"),
        ("CREATE KEYSPACE ks", "expected WITH"),
        ("ALTER TABLE t ALTER a TYPE int", "expected ADD, DROP, RENAME or WITH"),
        ("ALTER TABLE t DROP a USING TIMESTAMP ?", "integer timestamp"),
        ("USE", "expected a keyspace name"),
        ("USE table", "expected a keyspace name, got 'table'"),
        ("TRUNCATE t USING TTL 1", "expected TIMEOUT"),
    ],
)
def test_malformed_schema_statements(text: str, fragment: str) -> None:
    with pytest.raises(SyntaxProblem, match=r"^line \d+:\d+ ") as caught:
        parse_statement(text)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("text", "feature"),
    [
        ("CREATE INDEX i ON t (a)", "Secondary indexes are"),
        ("CREATE CUSTOM INDEX ON t (a) USING 'x'", "Secondary indexes are"),
        ("DROP INDEX i", "Secondary indexes are"),
        ("CREATE MATERIALIZED VIEW v AS SELECT * FROM t", "Materialized views are"),
        ("DROP MATERIALIZED VIEW v", "Materialized views are"),
        ("CREATE OR REPLACE FUNCTION f (a int) RETURNS int", "User-defined functions"),
        ("CREATE AGGREGATE a (int) SFUNC f STYPE int", "User-defined functions"),
        ("CREATE TRIGGER tr ON t USING 'x'", "Triggers are"),
    ],
)
def test_statements_cassandra_has_and_ringflow_does_not(text: str, feature: str) -> None:
    """A statement Cassandra accepts but ringflow does not implement is an InvalidRequest that
    says so (0x2200, issue 20), never a syntax error the user would take for a typo."""
    statement = parse_statement(text)
    assert isinstance(statement, UnsupportedStatement)
    message = statement.feature
    assert message.startswith(feature) and message.endswith(" not supported by ringflow")
    (first, second) = parse_statements(f"{text}; {text}")
    assert first == second == statement


ADDRESS = UserType("ks", "address", ("street",), (TEXT,))
MIXED = UserType("ks", "Mixed", ("n",), (INT,))


@pytest.mark.parametrize(
    ("type_text", "expected"),
    [
        ("int", INT),
        ("varchar", TEXT),
        ("list<int>", ListType(INT)),
        ("frozen<map<text, frozen<set<int>>>>", MapType(TEXT, SetType(INT, True), True)),
        ("address", ADDRESS),
        ("frozen<address>", ADDRESS.frozen_form()),
        ("ks.address", ADDRESS),
        ('"Mixed"', MIXED),
    ],
)
def test_resolve_type(type_text: str, expected: object) -> None:
    statement = create_table(f"CREATE TABLE t (k int PRIMARY KEY, v {type_text})")
    spec = statement.columns[1].type
    user_types = {"address": ADDRESS, "Mixed": MIXED}
    assert resolve_type(spec, user_types, keyspace="ks") == expected


@pytest.mark.parametrize(
    ("type_text", "fragment"),
    [
        ("other.address", "not in keyspace ks"),
        ("nosuch", "unknown type"),
        ("counter", "counter"),
        ("list<list<int>>", "non-frozen"),
    ],
)
def test_resolve_type_refusals(type_text: str, fragment: str) -> None:
    statement = create_table(f"CREATE TABLE t (k int PRIMARY KEY, v {type_text})")
    with pytest.raises(SchemaError, match=fragment):
        resolve_type(statement.columns[1].type, {"address": ADDRESS}, keyspace="ks")
