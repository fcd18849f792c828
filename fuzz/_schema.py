"""The schema the native and CQL fuzzers run against: one keyspace, every CQL type ringflow has.

``SCHEMA`` is created through the real driver before a run (and restored if a fuzzed statement
dropped part of it). ``ALL_TYPES`` lists each native type with literals of it (ordinary and
edge values: bounds, NaN, empty, unicode) for the statement corpus in ``_cql_corpus.py``.
"""

from __future__ import annotations

KEYSPACE = "fz"
TABLE = "everything"
WIDE = "wide"
CANARY = "canary"
"""Internode only: forged mutations aim here; it must stay empty."""

ALL_TYPES: dict[str, tuple[str, ...]] = {
    "ascii": ("'abc'", "''", "'x''y'"),
    "text": ("'héllo'", "''", "'日本語'", "'\U0001f600'", "'a''b'"),
    "blob": ("0x", "0x00ff", "0xCAFEBABE"),
    "boolean": ("true", "false", "TRUE"),
    "tinyint": ("0", "127", "-128", "1"),
    "smallint": ("0", "32767", "-32768"),
    "int": ("0", "2147483647", "-2147483648", "42"),
    "bigint": ("0", "9223372036854775807", "-9223372036854775808"),
    "varint": ("0", "123456789012345678901234567890", "-1"),
    "decimal": ("0.0", "1.5", "-123456789.987654321", "1e10"),
    "float": ("1.5", "NaN", "-Infinity", "3.4e38", "-0.0"),
    "double": ("2.25", "Infinity", "NaN", "1.7e308", "5e-324"),
    "timestamp": ("0", "'2024-01-02 03:04:05'", "'2024-01-02T03:04:05.678Z'", "1700000000000"),
    "date": ("'2024-02-29'", "'1970-01-01'", "'-5877641-06-23'"),
    "time": ("'12:34:56.789'", "'00:00:00'", "'23:59:59.999999999'"),
    "uuid": ("123e4567-e89b-12d3-a456-426614174000", "uuid()"),
    "timeuuid": ("50554d6e-29bb-11e5-b345-feff819cdc9f", "now()"),
    "inet": ("'127.0.0.1'", "'::1'", "'255.255.255.255'"),
    "duration": ("1h2m3s", "P1Y2M3DT4H5M6S", "-3d"),
}

COLLECTION_COLUMNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "c_list": ("list<int>", ("[1, 2, 3]", "[]", "[-1]")),
    "c_set": ("set<text>", ("{'a', 'b'}", "{}", "{'x'}")),
    "c_map": ("map<text, int>", ("{'a': 1, 'b': 2}", "{}", "{'k': -1}")),
    "c_frozen": ("frozen<list<map<int, text>>>", ("[{1: 'a'}, {2: 'b'}]", "[]")),
    "c_tuple": ("tuple<int, text, boolean>", ("(1, 'a', true)", "(0, '', false)")),
    "c_udt": ("frozen<point>", ("{x: 1, y: 2}", "{x: 0}")),
}


def column_name(cql_type: str) -> str:
    return f"c_{cql_type}"


def schema_statements(replication_factor: int = 1) -> list[str]:
    """CREATE statements of the fuzz schema (idempotent: IF NOT EXISTS)."""
    columns = ", ".join(f"{column_name(t)} {t}" for t in ALL_TYPES)
    collections = ", ".join(f"{name} {spec}" for name, (spec, _) in COLLECTION_COLUMNS.items())
    return [
        f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {replication_factor}}}",
        f"CREATE TYPE IF NOT EXISTS {KEYSPACE}.point (x int, y int)",
        f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.{TABLE} (k int PRIMARY KEY, {columns}, "
        f"{collections})",
        f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.{WIDE} (p text, c1 int, c2 timeuuid, s int "
        "static, v text, PRIMARY KEY ((p), c1, c2)) WITH CLUSTERING ORDER BY (c1 DESC, c2 ASC) "
        "AND cdc = {'enabled': true}",
        f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.{CANARY} (k int PRIMARY KEY, v text)",
    ]
