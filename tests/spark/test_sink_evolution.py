"""The sinks through three versions of a source table (issue 15), without a streaming query:
``V1`` (the shared test table ``shop.items``), ``V2`` (new columns: a regular ``price bigint``,
a non-frozen ``labels set<text>``, a static ``region text``) and ``V3`` (``V2`` without
``note``: dropped at the source).

Proves, against the real PostgreSQL and hub node of the session and a lake directory:

* PostgreSQL: a target made for ``V1`` refuses ``V2`` when it may not be altered, with the exact
  statements (columns of the row and static tables, the new collection's cells table); once the
  operator has run them it takes ``V2``; ``V3`` needs nothing (``note`` stays, values included);
  the ``_live`` view shows the union, equal to ``materialize`` of every change; a column whose
  type changed is a SchemaConflict; with ``allow_alter`` ringflow adds a column itself.
* The hub: the same, with ``ALTER TABLE ... ADD`` statements (``static`` included).
* The lake: each version a new schema file, the files of all versions read back as the union
  (a column a version lacks is null), equal to ``materialize`` of every change; a clashing
  type is a SchemaConflict before any write.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from ringflow.cdc import CdcOperation
from ringflow.cli._demo_cluster import NodeProcess
from ringflow.pipeline import (
    Change,
    DestinationBehind,
    SchemaConflict,
    change_schema,
    change_to_row,
    lake_options,
    lake_table,
    materialize,
    read_lake,
    read_lake_changes,
)
from ringflow.pipeline._evolution import same_columns
from ringflow.pipeline._hub import apply_to_hub, hub_options
from ringflow.pipeline._postgres import apply_changes, postgres_options, read_postgres_live
from ringflow.schema import BIGINT, TEXT, Column, ColumnKind, SetType, Table, timeuuid_from_micros

from ._schema_evolution import cql_rows, live_rows
from ._workload import TABLE as V1

V2 = dataclasses.replace(
    V1,
    columns=(
        *V1.columns,
        Column("region", TEXT, ColumnKind.STATIC),
        Column("price", BIGINT, ColumnKind.REGULAR),
        Column("labels", SetType(TEXT), ColumnKind.REGULAR),
    ),
)
V3 = dataclasses.replace(V2, columns=tuple(c for c in V2.columns if c.name != "note"))
RETYPED = dataclasses.replace(
    V2,
    columns=tuple(
        dataclasses.replace(c, type=TEXT) if c.name == "price" else c for c in V2.columns
    ),
)
KEYSPACE = "sinks"
HUB_DDL = (
    f"CREATE TABLE {KEYSPACE}.{{name}} (tenant text, bucket int, seq int, tag text, "
    "owner text static, amount bigint, note text, tags set<text>, attrs map<text, int>, "
    "hist list<int>, frozen_l frozen<list<int>>, PRIMARY KEY ((tenant, bucket), seq, tag)) "
    "WITH CLUSTERING ORDER BY (seq ASC, tag DESC)"
)
_low = iter(range(1, 10**6))


def _change(
    offset_s: float, key: dict[str, object], values: dict[str, object], op: CdcOperation
) -> Change:
    micros = time.time_ns() // 1000 - 600_000_000 + int(offset_s * 1_000_000)
    return Change("shop", "items", op, timeuuid_from_micros(micros, next(_low)), key, 0, values)


def _key(tenant: str, seq: int | None = None) -> dict[str, object]:
    key: dict[str, object] = {"tenant": tenant, "bucket": 1}
    return key if seq is None else {**key, "seq": seq, "tag": "t"}


UPDATE, INSERT = CdcOperation.UPDATE, CdcOperation.INSERT
FIRST = [
    _change(1, _key("a", 1), {"amount": 1, "note": "one"}, INSERT),
    _change(2, _key("a", 2), {"amount": 2, "note": "two"}, INSERT),
    _change(3, _key("b", 1), {"note": "three", "tags": frozenset({"x"})}, UPDATE),
]
SECOND = [  # V2: the new columns on old and new rows, a static one
    _change(10, _key("a", 1), {"price": 10, "labels": frozenset({"l1", "l2"})}, UPDATE),
    _change(11, _key("c", 1), {"amount": 3, "note": "four", "price": 30}, INSERT),
    _change(12, _key("a"), {"region": "north"}, UPDATE),
]
THIRD = [  # V3: no note any more
    _change(20, _key("a", 2), {"amount": 22, "price": 20}, UPDATE),
    _change(21, _key("d", 1), {"amount": 4, "labels": frozenset({"l3"})}, INSERT),
]
EVERYTHING = FIRST + SECOND + THIRD


def _expected(table: Table) -> Any:
    return live_rows(table, materialize(V2, EVERYTHING, int(time.time())))


def test_a_postgres_target_follows_the_versions_or_says_what_to_run(postgres_url: str) -> None:
    target = f"evolve_{uuid.uuid4().hex[:8]}"
    postgres_options(postgres_url, target, V1)
    apply_changes(postgres_url, target, V1, FIRST)
    with pytest.raises(DestinationBehind, match="altering it is not allowed") as behind:
        postgres_options(postgres_url, target, V2)
    statements = behind.value.statements
    assert f'ALTER TABLE "{target}" ADD COLUMN "price" bigint' in statements
    assert f'ALTER TABLE "{target}" ADD COLUMN "_ct_labels" bigint' in statements
    assert f'ALTER TABLE "{target}__static" ADD COLUMN "region" text' in statements
    assert any(
        s.startswith(f'CREATE TABLE IF NOT EXISTS "{target}__cells_labels"') for s in statements
    )
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        for statement in statements:  # what the operator runs
            connection.execute(statement)
    postgres_options(postgres_url, target, V2)
    apply_changes(postgres_url, target, V2, SECOND)
    postgres_options(postgres_url, target, V3)  # a dropped column: nothing to run
    apply_changes(postgres_url, target, V3, THIRD)
    now_s = int(time.time())
    assert live_rows(V2, read_postgres_live(postgres_url, target, V2, now_s)) == _expected(V2)
    with psycopg.connect(postgres_url) as connection:
        versions = connection.execute(
            f'SELECT version, table_json FROM "{target}__schema" ORDER BY version'
        ).fetchall()
    assert [v for v, _ in versions] == [1, 2]
    assert "note" in {c["name"] for c in json.loads(versions[-1][1])["columns"]}
    with pytest.raises(SchemaConflict, match="'price' as regular bigint"):
        postgres_options(postgres_url, target, RETYPED)
    more = dataclasses.replace(V3, columns=(*V3.columns, Column("extra", TEXT, ColumnKind.REGULAR)))
    postgres_options(postgres_url, target, more, allow_alter=True)
    assert live_rows(more, read_postgres_live(postgres_url, target, more)) == _expected(V3)
    with psycopg.connect(postgres_url) as connection:
        columns = connection.execute(f'SELECT * FROM "{target}_live" LIMIT 0').description or []
    assert {"extra", "note", "price", "region", "labels"} <= {c.name for c in columns}


def test_a_hub_target_follows_the_versions_or_says_what_to_run(
    hub_node: NodeProcess, hub: Any
) -> None:
    hub.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    hub.execute(HUB_DDL.format(name="evolving"))

    def options(table: Table, allow_alter: bool = False) -> dict[str, str]:
        return hub_options(
            hub_node.address,
            KEYSPACE,
            "evolving",
            table,
            port=hub_node.port,
            consistency="ONE",
            allow_alter=allow_alter,
        )

    apply_to_hub(options(V1), FIRST)
    with pytest.raises(DestinationBehind, match="altering it is not allowed") as behind:
        options(V2)
    assert behind.value.statements == (
        f'ALTER TABLE "{KEYSPACE}"."evolving" ADD "region" text static',
        f'ALTER TABLE "{KEYSPACE}"."evolving" ADD "price" bigint',
        f'ALTER TABLE "{KEYSPACE}"."evolving" ADD "labels" set<text>',
    )
    for statement in behind.value.statements:
        hub.execute(statement)
    apply_to_hub(options(V2), SECOND)
    apply_to_hub(options(V3), THIRD)  # note stays on the hub with its values
    assert cql_rows(hub, V2, f"{KEYSPACE}.evolving") == _expected(V2)
    with pytest.raises(SchemaConflict, match="price is regular bigint"):
        options(RETYPED)
    more = dataclasses.replace(V3, columns=(*V3.columns, Column("extra", TEXT, ColumnKind.REGULAR)))
    options(more, allow_alter=True)
    assert cql_rows(hub, more, f"{KEYSPACE}.evolving") == _expected(V3)  # extra: no values yet


def test_the_lake_records_each_version_and_reads_across_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    root = tmp_path / "lake"
    for table, changes in ((V1, FIRST), (V2, SECOND), (V3, THIRD)):
        rows = [change_to_row(table, change) for change in changes]
        frame = spark.createDataFrame(rows, change_schema(table))
        frame.write.format("ringflow-lake").options(**lake_options(root, table)).mode(
            "append"
        ).save()
    directory = root / "table=shop.items"
    assert sorted(p.name for p in directory.glob("_schema*.json")) == [
        "_schema.2.json",
        "_schema.3.json",
        "_schema.json",
    ]
    union = lake_table(root, "shop.items")
    assert same_columns(union, V2)
    changes = read_lake_changes(root, "shop.items")
    assert len(changes) == len(EVERYTHING)
    assert live_rows(V2, materialize(union, changes, int(time.time()))) == _expected(V2)
    frame = read_lake(spark, root)
    assert frame.schema == change_schema(union)
    assert frame.count() == len(EVERYTHING)
    notes = {r["note"] for r in frame.select("note").collect()}
    assert notes == {None, "one", "two", "three", "four"}
    with pytest.raises(SchemaConflict, match="'price' as regular bigint"):
        lake_options(root, RETYPED)
