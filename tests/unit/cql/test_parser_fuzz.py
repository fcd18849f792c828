"""Fuzz: any text either parses or raises SyntaxProblem, nothing else.

Three generators: arbitrary unicode text, soups of CQL tokens (so the parser gets past the first
keyword), and random mutations of valid statements (so it gets deep into every clause). When a
text does parse, the tree must be immutable (hashable), deterministic, and number its bind
markers 0..n-1 in order.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringflow.cql._ast import Statement
from ringflow.cql._parse_core import ParseLimits
from ringflow.cql._parser import parse_statement, parse_statements
from ringflow.errors import SyntaxProblem

FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SMALL_LIMITS = ParseLimits(max_nesting_depth=12, max_text_bytes=4096)

VALID_STATEMENTS = [
    "SELECT * FROM system.local WHERE key='local'",
    'SELECT "cdc$stream_id", "cdc$time" FROM ks.t_scylla_cdc_log WHERE "cdc$stream_id" IN (?, ?) '
    'AND "cdc$time" > minTimeuuid(?) AND "cdc$time" <= ? PER PARTITION LIMIT 1 BYPASS CACHE',
    "SELECT JSON DISTINCT token(a, b) AS t, writetime(v), ttl(v), CAST(x AS int), count(*) "
    "FROM t WHERE token(a, b) > ? AND (c, d) >= (1, 2) AND m['k'] = 3 AND s CONTAINS KEY 'x' "
    "GROUP BY a ORDER BY c DESC LIMIT :n ALLOW FILTERING USING TIMEOUT 2s",
    "INSERT INTO ks.t (a, b, c, d) VALUES (?, {'k': [1, 2]}, (1, 'x', -2.5e3), {f: 0x01}) "
    "IF NOT EXISTS USING TTL 10 AND TIMESTAMP :ts",
    "INSERT INTO t JSON '{\"a\": 1}' DEFAULT UNSET",
    "UPDATE t USING TTL ? SET a = 1, m['k'] = 2, s = s + {1}, l = [1] + l, u.f = NaN "
    "WHERE pk = ? AND ck IN (1, 2) IF a = 3 AND m['k'] != null",
    "DELETE a, m['k'], l[1] FROM t USING TIMESTAMP 10 WHERE pk = 1 AND (c1, c2) > (1, 2) IF EXISTS",
    "BEGIN UNLOGGED BATCH USING TIMESTAMP 5 INSERT INTO t (a) VALUES (?); "
    "UPDATE t SET a = ? WHERE k = ?; DELETE FROM t WHERE k = ? APPLY BATCH",
    "CREATE KEYSPACE IF NOT EXISTS ks WITH replication = {'class': 'SimpleStrategy', "
    "'replication_factor': 1} AND durable_writes = true",
    "CREATE TABLE ks.t (a int, b text, c timeuuid, s set<int> static, "
    "m map<text, frozen<list<int>>>, PRIMARY KEY ((a, b), c)) WITH CLUSTERING ORDER BY (c DESC) "
    "AND cdc = {'enabled': true, 'preimage': 'full'} AND comment = 'x'",
    "ALTER TABLE t ADD (x int, y frozen<tuple<int, text>>)",
    "ALTER TABLE t DROP (x, y) USING TIMESTAMP 3",
    "CREATE TYPE IF NOT EXISTS ks.address (street text, zip int)",
    "DROP TABLE IF EXISTS ks.t",
    "TRUNCATE TABLE ks.t",
    'USE "MyKs"',
]

_VOCABULARY_TEXT = (
    "SELECT FROM WHERE AND IN CONTAINS KEY INSERT INTO VALUES UPDATE SET DELETE BEGIN BATCH "
    "APPLY UNLOGGED USING TTL TIMESTAMP TIMEOUT IF NOT EXISTS CREATE ALTER DROP TABLE KEYSPACE "
    "TYPE WITH PRIMARY STATIC CLUSTERING ORDER BY ASC DESC LIMIT PER PARTITION ALLOW FILTERING "
    "BYPASS CACHE DISTINCT JSON AS token count writetime ttl cast frozen list map set tuple int "
    "text null NaN Infinity true false ( ) [ ] { } , ; . * = < > <= >= != + - += -= : ? "
    "a b ks t \"Q\" 'str' $$x$$ 1 -1 2.5e3 0x0a 0x1 5s 1h30m "
    "6ab09bec-e68e-48d9-a5f8-97e6fb4c9b47 -- /* */"
)
VOCABULARY = _VOCABULARY_TEXT.split(" ")


def check(text: str) -> None:
    """Parse ``text`` as one statement and as a script: a tree or SyntaxProblem, nothing else."""
    for parse in (_parse_one, _parse_script):
        try:
            statements = parse(text)
        except SyntaxProblem as problem:
            assert str(problem).startswith("line ")
            continue
        for statement in statements:
            assert_well_formed(statement)


def _parse_one(text: str) -> tuple[Statement, ...]:
    return (parse_statement(text, limits=SMALL_LIMITS),)


def _parse_script(text: str) -> tuple[Statement, ...]:
    return parse_statements(text, limits=SMALL_LIMITS)


def assert_well_formed(statement: Statement) -> None:
    hash(statement)  # only tuples and frozen nodes inside
    markers = statement.bind_markers
    assert [marker.index for marker in markers] == list(range(len(markers)))


def test_every_seed_statement_parses() -> None:
    for text in VALID_STATEMENTS:
        statement = parse_statement(text)
        assert_well_formed(statement)
        assert parse_statement(text) == statement


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    check(text)


@FUZZ
@given(st.lists(st.sampled_from(VOCABULARY), max_size=40))
def test_token_soup(words: list[str]) -> None:
    check(" ".join(words))


@FUZZ
@given(st.lists(st.sampled_from(VOCABULARY), max_size=40))
def test_statement_prefix_then_token_soup(words: list[str]) -> None:
    check("SELECT a FROM t WHERE " + " ".join(words))
    check("INSERT INTO t (a) VALUES (" + " ".join(words))
    check("CREATE TABLE t (a " + " ".join(words))


@st.composite
def mutated_statements(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(VALID_STATEMENTS))
    for _ in range(draw(st.integers(1, 4))):
        text = draw(_mutation(text))
    return text


def _mutation(text: str) -> st.SearchStrategy[str]:
    size = len(text)
    position = st.integers(0, size)
    return st.one_of(
        st.tuples(position, position).map(lambda p: text[: min(p)] + text[max(p) :]),
        st.tuples(position, st.sampled_from(VOCABULARY)).map(
            lambda p: text[: p[0]] + " " + p[1] + " " + text[p[0] :]
        ),
        st.tuples(position, st.characters()).map(lambda p: text[: p[0]] + p[1] + text[p[0] :]),
        st.tuples(position, position).map(
            lambda p: text[: max(p)] + text[min(p) : max(p)] + text[max(p) :]
        ),
        position.map(lambda p: text[:p]),
    )


@FUZZ
@given(mutated_statements())
def test_mutated_valid_statements(text: str) -> None:
    check(text)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 400), st.sampled_from(["[", "{", "(", "f(", "frozen<", "{a: "]))
def test_deep_nesting_is_a_syntax_error_not_a_crash(depth: int, opener: str) -> None:
    check("INSERT INTO t (a) VALUES (" + opener * depth)
    check("SELECT " + opener * depth)
    check("CREATE TABLE t (a " + opener * depth)
