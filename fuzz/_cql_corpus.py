"""The CQL statement corpus and its grammar-aware mutations (token level).

``corpus()`` is a list of valid statements over ``_schema`` (every type's literals in INSERT,
UPDATE with collection operations, DELETE of rows/columns/elements, SELECT with IN, token(),
slices, ORDER BY, LIMIT, aggregates, WRITETIME/TTL, casts, BATCH, LWT, USING TTL/TIMESTAMP, DDL
on scratch names, system tables). ``mutate`` tokenizes a statement (strings, quoted names, blobs,
numbers, names, punctuation) and applies 1-4 token edits: swap, insert (a keyword or a token of
another statement), delete, duplicate, a huge literal or identifier, deep nesting, odd numbers,
unicode. The result is bytes: some edits produce invalid UTF-8 on purpose.
"""

from __future__ import annotations

import random
import re

from fuzz._schema import ALL_TYPES, COLLECTION_COLUMNS, KEYSPACE, TABLE, WIDE, column_name

_TOKEN = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|0[xX][0-9a-fA-F]*|"
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|"
    r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|[A-Za-z_][A-Za-z0-9_$]*|"
    r"<=|>=|!=|[-+*/%(),;.=<>\[\]{}:?]|\S"
)
KEYWORDS = (
    "SELECT", "FROM", "WHERE", "AND", "INSERT", "INTO", "VALUES", "UPDATE", "SET", "DELETE",
    "BEGIN", "BATCH", "APPLY", "UNLOGGED", "USING", "TTL", "TIMESTAMP", "IF", "EXISTS", "NOT",
    "IN", "CONTAINS", "KEY", "ORDER", "BY", "ASC", "DESC", "LIMIT", "ALLOW", "FILTERING",
    "DISTINCT", "AS", "CAST", "token", "writetime", "ttl", "count", "JSON", "NULL", "CREATE",
    "TABLE", "KEYSPACE", "TYPE", "ALTER", "ADD", "DROP", "TRUNCATE", "USE", "WITH", "PRIMARY",
    "frozen", "list", "set", "map", "tuple", "static", "PER", "PARTITION", "GROUP", "toJson",
    "now", "uuid", "minTimeuuid", "blobAsInt", "intAsBlob", "dateOf", "unixTimestampOf",
)  # fmt: skip
ODD_NUMBERS = (
    "1e999", "-1e999", "99999999999999999999999999999999999999", "-0", "0.0000000000000000001",
    "1.7976931348623157e309", "NaN", "-NaN", "Infinity", "0x", "0xFFFFFFFFFFFFFFFFFFFFFFFF",
    "2147483648", "-2147483649", "9223372036854775808", "1.", ".5", "1e", "00000001", "1_000",
)  # fmt: skip
UNICODE = (
    "\u0000", "\u200b", "\u202e", "\ufeff", "\U0001f600", "日本", "\u0301", "\uffff", "ǅ",
    "\U00010348", "\\", "\n", "\t", "'", '"',
)  # fmt: skip


def _inserts() -> list[str]:
    statements = []
    for key, (cql_type, literals) in enumerate(ALL_TYPES.items()):
        for literal in literals:
            statements.append(
                f"INSERT INTO {KEYSPACE}.{TABLE} (k, {column_name(cql_type)}) "
                f"VALUES ({key}, {literal})"
            )
    for name, (_, literals) in COLLECTION_COLUMNS.items():
        statements += [
            f"INSERT INTO {KEYSPACE}.{TABLE} (k, {name}) VALUES (100, {literal})"
            for literal in literals
        ]
    everything = ", ".join(column_name(t) for t in ALL_TYPES)
    values = ", ".join(literals[0] for literals in ALL_TYPES.values())
    statements.append(f"INSERT INTO {KEYSPACE}.{TABLE} (k, {everything}) VALUES (7, {values})")
    statements.append(f"INSERT INTO {KEYSPACE}.{TABLE} (k, c_int) VALUES (8, 1) IF NOT EXISTS")
    statements.append(
        f"INSERT INTO {KEYSPACE}.{TABLE} (k, c_text) VALUES (9, 'x') USING TTL 60 AND "
        "TIMESTAMP 1700000000000000"
    )
    statements.append(
        f"INSERT INTO {KEYSPACE}.{WIDE} (p, c1, c2, s, v) VALUES ('a', 1, now(), 5, 'v')"
    )
    return statements


def _updates_and_deletes() -> list[str]:
    t = f"{KEYSPACE}.{TABLE}"
    return [
        f"UPDATE {t} SET c_list = c_list + [4, 5] WHERE k = 100",
        f"UPDATE {t} SET c_list = [0] + c_list WHERE k = 100",
        f"UPDATE {t} SET c_list[0] = 9 WHERE k = 100",
        f"UPDATE {t} SET c_map['z'] = 26, c_set = c_set + {{'q'}} WHERE k = 100",
        f"UPDATE {t} SET c_set = c_set - {{'a'}}, c_map = c_map - {{'a'}} WHERE k = 100",
        f"UPDATE {t} USING TTL 10 SET c_int = 3, c_text = 'three' WHERE k IN (1, 2, 3)",
        f"UPDATE {t} SET c_int = 4 WHERE k = 4 IF c_int = 3",
        f"UPDATE {t} SET c_int = 5 WHERE k = 5 IF EXISTS",
        f"UPDATE {KEYSPACE}.{WIDE} SET s = 2 WHERE p = 'a'",
        f"DELETE c_list[0], c_map['a'] FROM {t} WHERE k = 100",
        f"DELETE c_text FROM {t} WHERE k = 1",
        f"DELETE FROM {t} USING TIMESTAMP 1 WHERE k = 2",
        f"DELETE FROM {t} WHERE k = 3 IF EXISTS",
        f"DELETE FROM {KEYSPACE}.{WIDE} WHERE p = 'a' AND c1 > 0 AND c1 < 5",
        f"DELETE FROM {KEYSPACE}.{WIDE} WHERE p = 'a'",
        "BEGIN BATCH "
        f"INSERT INTO {t} (k, c_int) VALUES (11, 1); "
        f"UPDATE {t} SET c_text = 'b' WHERE k = 11; "
        f"DELETE c_ascii FROM {t} WHERE k = 11; APPLY BATCH",
        f"BEGIN UNLOGGED BATCH USING TIMESTAMP 5 INSERT INTO {t} (k) VALUES (12); APPLY BATCH",
        f"TRUNCATE {KEYSPACE}.{WIDE}",
    ]


def _selects() -> list[str]:
    t = f"{KEYSPACE}.{TABLE}"
    w = f"{KEYSPACE}.{WIDE}"
    return [
        f"SELECT * FROM {t} WHERE k = 7",
        f"SELECT k, c_int, c_text FROM {t} WHERE k IN (1, 2, 3, 7)",
        f"SELECT * FROM {t} WHERE token(k) > -9223372036854775808 LIMIT 5",
        f"SELECT k, writetime(c_int), ttl(c_text) FROM {t} WHERE k = 9",
        f"SELECT CAST(c_int AS text), c_blob AS b FROM {t} WHERE k = 7",
        f"SELECT count(*) FROM {t}",
        f"SELECT DISTINCT k FROM {t}",
        f"SELECT * FROM {t} WHERE c_int = 3 ALLOW FILTERING",
        f"SELECT * FROM {t} WHERE c_list CONTAINS 4 ALLOW FILTERING",
        f"SELECT * FROM {w} WHERE p = 'a' AND c1 >= 0 AND c1 <= 9 ORDER BY c1 ASC",
        f"SELECT * FROM {w} WHERE p = 'a' AND (c1, c2) > (0, 50554d6e-29bb-11e5-b345-feff819cdc9f)",
        f"SELECT p, s, v FROM {w} WHERE p IN ('a', 'b') LIMIT 3",
        f"SELECT * FROM {w} WHERE p = 'a' PER PARTITION LIMIT 1",
        f"SELECT JSON * FROM {t} WHERE k = 7",
        f"SELECT * FROM {KEYSPACE}.{WIDE}_scylla_cdc_log LIMIT 2",
        "SELECT * FROM system.local",
        "SELECT peer, tokens FROM system.peers",
        "SELECT keyspace_name, table_name FROM system_schema.tables WHERE keyspace_name = 'fz'",
        "SELECT now(), uuid(), toJson(1) FROM system.local",
        f"SELECT blobAsInt(intAsBlob(c_int)) FROM {t} WHERE k = 7",
    ]


def _ddl() -> list[str]:
    return [
        "CREATE KEYSPACE IF NOT EXISTS fz_ddl WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1} AND durable_writes = true",
        "CREATE TABLE IF NOT EXISTS fz_ddl.t (a int, b text, c map<int, frozen<set<text>>>, "
        "PRIMARY KEY ((a), b)) WITH comment = 'x' AND default_time_to_live = 10",
        "ALTER TABLE fz_ddl.t ADD d tuple<int, frozen<list<blob>>>",
        "ALTER TABLE fz_ddl.t DROP d",
        "CREATE TYPE IF NOT EXISTS fz_ddl.u (f int, g frozen<map<text, text>>)",
        "DROP TABLE IF EXISTS fz_ddl.t",
        "USE fz",
        'USE "fz"',
    ]


def corpus() -> list[str]:
    return [*_inserts(), *_updates_and_deletes(), *_selects(), *_ddl()]


def tokenize(statement: str) -> list[str]:
    return _TOKEN.findall(statement)


def _huge(rng: random.Random) -> str:
    size = rng.choice((1000, 65_536, 70_000, 200_000))
    return rng.choice(
        (
            "'" + "x" * size + "'",
            '"' + "y" * size + '"',
            "z" * size,
            "0x" + "ab" * (size // 2),
            "9" * size,
            "'" + "é" * (size // 2) + "'",
        )
    )


def _nested(rng: random.Random, token: str) -> str:
    depth = rng.choice((5, 50, 500, 5000))
    shape = rng.randrange(4)
    if shape == 0:
        return "(" * depth + token + ")" * depth
    if shape == 1:
        return "[" * depth + token + "]" * depth
    if shape == 2:
        return "blobAsInt(intAsBlob(" * depth + token + "))" * depth
    return "{" * depth + token + "}" * depth


def _edit(tokens: list[str], rng: random.Random, vocabulary: list[str]) -> None:
    position = rng.randrange(len(tokens)) if tokens else 0
    choice = rng.randrange(10)
    if not tokens or choice == 0:
        tokens.insert(position, rng.choice(KEYWORDS))
    elif choice == 1:
        other = rng.randrange(len(tokens))
        tokens[position], tokens[other] = tokens[other], tokens[position]
    elif choice == 2:
        del tokens[position]
    elif choice == 3:
        tokens.insert(position, tokens[position])
    elif choice == 4:
        tokens.insert(position, rng.choice(vocabulary))
    elif choice == 5:
        tokens[position] = _huge(rng)
    elif choice == 6:
        tokens[position] = _nested(rng, tokens[position])
    elif choice == 7:
        tokens[position] = rng.choice(ODD_NUMBERS)
    elif choice == 8:
        text = "".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 8)))
        tokens[position] = rng.choice((f"'{text}'", f'"{text}"', text))
    else:
        tokens[position] = rng.choice(vocabulary)


def mutate(statement: str, rng: random.Random, vocabulary: list[str]) -> bytes:
    """1-4 token edits (mostly one) of ``statement``, as UTF-8 (sometimes with a byte broken
    on purpose)."""
    tokens = tokenize(statement)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 4))):
        _edit(tokens, rng, vocabulary)
    data = " ".join(tokens).encode("utf-8", errors="surrogatepass")
    if rng.random() < 0.03 and data:
        position = rng.randrange(len(data))
        data = data[:position] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80")) + data[position:]
    return data
