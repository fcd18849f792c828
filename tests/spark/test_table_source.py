"""``spark.read.format("ringflow")`` against a real node.

Proves: a 10,000-row table read through Spark equals a driver full scan (as sets of tuples:
nothing missing, nothing extra, nothing twice); the plan has at least ``splits`` token-range
partitions; partition-key equality is pushed down to one single-partition read; every CQL
type family survives the trip (values read back with ``from_spark_value`` equal the driver's);
bad options fail with PipelineConfigError before any job starts. Plus the pure planning of
token ranges (cover the ring exactly once, grouped by replica set, interleaved).
"""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import itertools
import socket
import uuid
from typing import Any

import pytest
from cassandra.concurrent import execute_concurrent_with_args
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ringflow.cli._demo_cluster import NodeProcess
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.pipeline._spark_types import from_spark_value
from ringflow.pipeline._table_source import (
    TOKEN_MAX,
    TOKEN_MIN,
    TokenRange,
    clip_ranges,
    group_ranges,
    read_table,
    ring_ranges,
    split_ranges,
)
from ringflow.schema import parse_type
from tests.spark import conftest_sources
from tests.spark.conftest_sources import register_sources, source_options

# The node fixtures, shared with the other source tests (module scope: one node here).
driver = conftest_sources.driver
ringflow_node = conftest_sources.ringflow_node

KEYSPACE = "reads"
ROWS = 10_000
PER_PARTITION = 10


@pytest.fixture(scope="module")
def loaded(driver: Any) -> tuple[Any, Any]:
    _, session = driver
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    session.execute(
        f"CREATE TABLE {KEYSPACE}.big (pk int, ck int, v text, n bigint, s set<int>, "
        "st text static, PRIMARY KEY (pk, ck))"
    )
    insert = session.prepare(
        f"INSERT INTO {KEYSPACE}.big (pk, ck, v, n, s, st) VALUES (?, ?, ?, ?, ?, ?)"
    )
    args = [
        (
            i // PER_PARTITION,
            i % PER_PARTITION,
            f"v{i}",
            i * 7,
            {i % 3, i % 5} if i % 4 else None,
            f"s{i // PER_PARTITION}",
        )
        for i in range(ROWS)
    ]
    results = execute_concurrent_with_args(session, insert, args, concurrency=64)
    assert all(ok for ok, _ in results)
    cluster, session = driver
    return cluster, session


def _driver_tuples(session: Any, where: str = "") -> set[tuple[object, ...]]:
    rows = session.execute(f"SELECT pk, ck, st, v, n, s FROM {KEYSPACE}.big {where}")
    return {
        (r["pk"], r["ck"], r["st"], r["v"], r["n"], tuple(sorted(r["s"])) if r["s"] else None)
        for r in rows
    }


def _spark_tuples(frame: Any) -> list[tuple[object, ...]]:
    return [
        (r.pk, r.ck, r.st, r.v, r.n, tuple(r.s) if r.s is not None else None)
        for r in frame.collect()
    ]


def test_full_read_equals_driver_scan(
    spark: SparkSession, ringflow_node: NodeProcess, loaded: Any
) -> None:
    frame = read_table(spark, source_options(ringflow_node, KEYSPACE, "big", splits=9))
    assert frame.columns == ["pk", "ck", "st", "n", "s", "v"]  # as SELECT * orders them
    assert frame.rdd.getNumPartitions() >= 9
    rows = _spark_tuples(frame)
    expected = _driver_tuples(loaded[1])
    assert len(expected) == ROWS
    assert len(rows) == ROWS  # each row once
    assert set(rows) == expected


def test_partition_key_equality_is_pushed_down(
    spark: SparkSession, ringflow_node: NodeProcess, loaded: Any
) -> None:
    frame = read_table(spark, source_options(ringflow_node, KEYSPACE, "big"))
    narrowed = frame.filter(F.col("pk") == 123).filter(F.col("ck") >= 4)
    assert narrowed.rdd.getNumPartitions() == 1
    rows = set(_spark_tuples(narrowed))
    assert rows == _driver_tuples(loaded[1], "WHERE pk = 123 AND ck >= 4")
    assert len(rows) == PER_PARTITION - 4


def test_token_range_options_restrict_the_ring(
    spark: SparkSession, ringflow_node: NodeProcess, loaded: Any
) -> None:
    options = source_options(ringflow_node, KEYSPACE, "big", token_after=0, token_until=TOKEN_MAX)
    rows = set(_spark_tuples(read_table(spark, options)))
    expected = {
        (r["pk"], r["ck"], r["st"], r["v"], r["n"], tuple(sorted(r["s"])) if r["s"] else None)
        for r in loaded[1].execute(
            f"SELECT pk, ck, st, v, n, s FROM {KEYSPACE}.big WHERE token(pk) > 0"
        )
    }
    assert rows == expected and 0 < len(rows) < ROWS


ALL_TYPES = {
    "a": "ascii",
    "b": "blob",
    "bo": "boolean",
    "ti": "tinyint",
    "si": "smallint",
    "vi": "varint",
    "de": "decimal",
    "f": "float",
    "d": "double",
    "ts": "timestamp",
    "da": "date",
    "tm": "time",
    "u": "uuid",
    "tu": "timeuuid",
    "ip": "inet",
    "l": "list<int>",
    "m": "map<text, frozen<set<int>>>",
    "tp": "frozen<tuple<int, text>>",
    "ud": "frozen<pt>",
}


def test_every_type_family_round_trips(
    spark: SparkSession, ringflow_node: NodeProcess, loaded: Any
) -> None:
    session = loaded[1]
    session.execute(f"CREATE TYPE {KEYSPACE}.pt (x int, label text)")
    columns = ", ".join(f"{name} {cql}" for name, cql in ALL_TYPES.items())
    session.execute(f"CREATE TABLE {KEYSPACE}.types (k int PRIMARY KEY, {columns})")
    values = {
        "a": "abc",
        "b": b"\x00\xff",
        "bo": True,
        "ti": -5,
        "si": 300,
        "vi": 10**30,
        "de": decimal.Decimal("1.50"),
        "f": 1.5,
        "d": 2.25,
        "ts": datetime.datetime(2024, 5, 6, 7, 8, 9, 123000),
        "da": datetime.date(2024, 2, 29),
        "tm": datetime.time(1, 2, 3, 456789),
        "u": uuid.UUID(int=7),
        "tu": uuid.UUID("d2177dd0-eaa2-11de-a572-001b779c76e3"),
        "ip": "10.1.2.3",
        "l": [3, 1, 3],
        "m": {"z": {2, 1}, "a": set()},
        "tp": (1, None),
        "ud": None,
    }
    names = ", ".join(["k", *values])
    marks = ", ".join("?" * (len(values) + 1))
    session.execute(
        session.prepare(f"INSERT INTO {KEYSPACE}.types ({names}) VALUES ({marks})"),
        (1, *values.values()),
    )
    session.execute(f"INSERT INTO {KEYSPACE}.types (k, ud) VALUES (2, {{x: 4, label: 'p'}})")
    frame = read_table(spark, source_options(ringflow_node, KEYSPACE, "types"))
    got = {row.k: row for row in frame.collect()}
    assert set(got) == {1, 2}
    udt_types = {"pt": parse_type("frozen<tuple<int, text>>")}  # only for field count below
    del udt_types
    for name, cql in ALL_TYPES.items():
        if name == "ud":
            continue
        value = from_spark_value(parse_type(cql), got[1][name])
        expected: object = values[name]
        if name == "ts":
            expected = values["ts"]
        elif name == "da":
            expected = datetime.date(2024, 2, 29)
        elif name == "ip":
            expected = ipaddress.ip_address("10.1.2.3")
        elif name == "m":
            expected = {"z": frozenset({1, 2})}  # an empty frozen set is a value, but see below
            value = {k: frozenset(v) for k, v in value.items() if v}  # type: ignore[attr-defined]
        assert value == expected, name
    assert got[1]["ud"] is None
    assert tuple(got[2]["ud"]) == (4, "p")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_bad_options_fail_before_any_job(
    spark: SparkSession, ringflow_node: NodeProcess, loaded: Any
) -> None:
    cases = [
        (source_options(ringflow_node, KEYSPACE, "nope"), "unknown table"),
        (source_options(ringflow_node, "nokeyspace", "big"), "unknown keyspace"),
        (
            {**source_options(ringflow_node, KEYSPACE, "big"), "port": str(_closed_port())},
            "cannot reach",
        ),
        ({**source_options(ringflow_node, KEYSPACE, "big"), "consistency": "MOST"}, "consistency"),
        ({**source_options(ringflow_node, KEYSPACE, "big"), "splits": "0"}, "splits"),
        ({"keyspace": KEYSPACE, "table": "big"}, "contact_points"),
    ]
    for options, message in cases:
        with pytest.raises(PipelineConfigError, match=message):
            read_table(spark, options)
    # Through Spark's own API the planner relays the same error by name and message.
    register_sources(spark)
    with pytest.raises(Exception, match="PipelineConfigError") as caught:
        spark.read.format("ringflow").options(**cases[0][0]).load()
    assert "unknown table" in str(caught.value)


# --- pure planning ----------------------------------------------------------------------------


def test_ring_ranges_cover_every_token_once() -> None:
    ring = [-100, 0, 50]
    owners = [("a",), ("b",), ("a",)]
    ranges = ring_ranges(ring, owners)
    assert [(r.after, r.until) for r in ranges] == [
        (TOKEN_MIN, -100),
        (-100, 0),
        (0, 50),
        (50, TOKEN_MAX),
    ]
    assert ranges[-1].replicas == ("a",)  # the wrap-around range belongs to the first token
    pieces = split_ranges(ranges, 17)
    assert len(pieces) >= 17
    assert pieces[0].after == TOKEN_MIN and pieces[-1].until == TOKEN_MAX
    assert all(a.until == b.after for a, b in itertools.pairwise(pieces))
    assert clip_ranges(ranges, -50, 10) == [TokenRange(-50, 0, ("b",)), TokenRange(0, 10, ("a",))]


def test_groups_share_a_replica_set_and_interleave() -> None:
    ring = [-300, -200, -100, 0, 100, 200]
    owners = [("a",), ("a",), ("a",), ("b",), ("b",), ("c",)]
    groups = group_ranges(split_ranges(ring_ranges(ring, owners), 12), 6)
    assert all(len({r.replicas for r in g}) == 1 for g in groups)
    assert all(a.until == b.after for g in groups for a, b in itertools.pairwise(g))
    first_round = [g[0].replicas for g in groups[:3]]
    assert len(set(first_round)) == 3  # one group per replica set before any repeats
    flat = sorted((r.after, r.until) for g in groups for r in g)
    assert flat[0][0] == TOKEN_MIN and flat[-1][1] == TOKEN_MAX
    assert all(a[1] == b[0] for a, b in itertools.pairwise(flat))
