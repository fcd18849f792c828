"""Every CQL type survives the change schema, Spark, the Parquet lake and PostgreSQL."""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import uuid
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from ringflow.cdc import CdcOperation, log_value_type
from ringflow.pipeline import (
    Change,
    change_arrow_schema,
    change_from_row,
    change_schema,
    change_to_row,
    lake_options,
    materialize,
    postgres_options,
    read_lake,
    read_lake_changes,
    read_postgres_live,
    table_from_json,
    table_to_json,
)
from ringflow.schema import (
    ASCII,
    BIGINT,
    BLOB,
    BOOLEAN,
    DATE,
    DECIMAL,
    DOUBLE,
    DURATION,
    FLOAT,
    INET,
    INT,
    SMALLINT,
    TEXT,
    TIME,
    TIMESTAMP,
    TIMEUUID,
    TINYINT,
    UUID,
    VARINT,
    ClusteringOrder,
    CqlType,
    Duration,
    ListType,
    MapType,
    SetType,
    Table,
    TupleType,
    UserType,
    normalize,
    serialize,
    timeuuid_from_micros,
)

ADDRESS = UserType("shop", "address", ("street", "zip"), (TEXT, INT))
T_US = 1_700_000_000_000_000
NATIVES: dict[str, tuple[CqlType, object]] = {
    "c_ascii": (ASCII, "abc"),
    "c_text": (TEXT, "héllo ✓"),
    "c_blob": (BLOB, b"\x00\xff\x10"),
    "c_boolean": (BOOLEAN, True),
    "c_tinyint": (TINYINT, -5),
    "c_smallint": (SMALLINT, 300),
    "c_int": (INT, -70000),
    "c_bigint": (BIGINT, 2**40),
    "c_varint": (VARINT, -(2**80)),
    "c_decimal": (DECIMAL, decimal.Decimal("12.340")),
    "c_float": (FLOAT, 1.5),
    "c_double": (DOUBLE, 2.25),
    "c_timestamp": (TIMESTAMP, datetime.datetime(2024, 5, 6, 7, 8, 9, 123000)),
    "c_date": (DATE, datetime.date(2024, 5, 6)),
    "c_time": (TIME, 3_723_000_000_001),
    "c_uuid": (UUID, uuid.UUID("6f1c2f1e-8a55-4a39-9d1c-0a6f4f7b2c11")),
    "c_timeuuid": (TIMEUUID, timeuuid_from_micros(T_US, 99)),
    "c_inet": (INET, ipaddress.ip_address("2001:db8::1")),
    "c_duration": (DURATION, Duration(1, 2, 3)),
}
LIST_KEYS = (timeuuid_from_micros(T_US, 1), timeuuid_from_micros(T_US, 2))
OTHERS: dict[str, tuple[CqlType, object]] = {
    "f_list": (ListType(INT, frozen=True), [3, 1, 2]),
    "f_set": (SetType(TEXT, frozen=True), frozenset({"b", "a"})),
    "f_map": (MapType(INT, TEXT, frozen=True), {2: "two", 1: "one"}),
    "f_tuple": (TupleType((INT, TEXT, BLOB)), (7, "x", b"\x01")),
    "f_udt": (ADDRESS.frozen_form(), {"street": "Main", "zip": 12345}),
    "f_nested": (
        ListType(MapType(TEXT, INT, frozen=True), frozen=True),
        [{"a": 1}, {"b": 2}],
    ),
    "n_list": (ListType(TEXT), {LIST_KEYS[0]: "first", LIST_KEYS[1]: "second"}),
    "n_set": (SetType(INT), frozenset({3, 1, 2})),
    "n_map": (MapType(TIMESTAMP, DOUBLE), {datetime.datetime(2024, 1, 1): 0.5}),
    "n_udt": (ADDRESS, {"street": "Side", "zip": None}),
}
COLUMNS = {**NATIVES, **OTHERS}
TYPES = Table.create(
    "shop",
    "types",
    partition_key=[("id", TEXT), ("k_inet", INET)],
    clustering=[("k_ts", TIMESTAMP, ClusteringOrder.ASC), ("k_uuid", UUID, ClusteringOrder.DESC)],
    regular=[(name, cql_type) for name, (cql_type, _) in COLUMNS.items()],
)
KEY = {
    "id": "k",
    "k_inet": ipaddress.ip_address("10.0.0.1"),
    "k_ts": datetime.datetime(2024, 2, 3, 4, 5, 6, 7000),
    "k_uuid": uuid.UUID(int=5),
}
CHANGE = Change(
    "shop",
    "types",
    CdcOperation.INSERT,
    timeuuid_from_micros(T_US, 7),
    KEY,
    values={name: value for name, (_, value) in COLUMNS.items()},
    deleted=frozenset({"n_list", "n_set", "n_map", "n_udt"}),
    deleted_elements={"n_set": frozenset({9})},
    ttl_s=None,
    stream_id=b"\x02" * 16,
)


def _bytes(cql_type: CqlType, value: object) -> bytes:
    return normalize(cql_type, serialize(cql_type, value))


def _assert_same_change(actual: Change) -> None:
    assert (actual.operation, actual.time, actual.stream_id) == (
        CHANGE.operation,
        CHANGE.time,
        CHANGE.stream_id,
    )
    assert actual.deleted == CHANGE.deleted
    assert actual.deleted_elements == CHANGE.deleted_elements
    for column in TYPES.primary_key_columns:
        assert _bytes(column.type, actual.key[column.name]) == _bytes(
            column.type, KEY[column.name]
        ), column.name
    assert set(actual.values) == set(COLUMNS)
    for name, (cql_type, value) in COLUMNS.items():
        log_type = log_value_type(cql_type)
        assert _bytes(log_type, actual.values[name]) == _bytes(log_type, value), name


def test_change_schema_is_what_spark_makes_of_it() -> None:
    expected = to_arrow_schema(change_schema(TYPES), timezone="UTC")
    assert change_arrow_schema(TYPES).equals(expected)
    assert table_from_json(table_to_json(TYPES)) == TYPES


def test_every_type_round_trips_through_spark_and_the_lake(
    spark: SparkSession, tmp_path: Path
) -> None:
    frame = spark.createDataFrame([change_to_row(TYPES, CHANGE)], change_schema(TYPES))
    lake = tmp_path / "lake"
    frame.write.format("ringflow-lake").mode("append").options(**lake_options(lake, TYPES)).save()
    (from_arrow,) = read_lake_changes(lake)
    _assert_same_change(from_arrow)
    (from_spark,) = [change_from_row(TYPES, r) for r in read_lake(spark, lake).collect()]
    _assert_same_change(from_spark)


def test_every_type_round_trips_through_postgres(spark: SparkSession, postgres_url: str) -> None:
    frame = spark.createDataFrame([change_to_row(TYPES, CHANGE)], change_schema(TYPES))
    options = postgres_options(postgres_url, "types_pg", TYPES)
    frame.write.format("ringflow-postgres").mode("append").options(**options).save()
    now_s = T_US // 1_000_000
    (expected,) = materialize(TYPES, [CHANGE], now_s).values()
    (actual,) = read_postgres_live(postgres_url, "types_pg", TYPES, now_s=now_s).values()
    assert actual.key == expected.key
    assert actual.write_times_us == expected.write_times_us
    assert set(actual.values) == set(expected.values) == set(COLUMNS)
    for name, (cql_type, _) in COLUMNS.items():
        frozen = cql_type.frozen_form()
        got, want = actual.values[name], expected.values[name]
        assert _bytes(frozen, got) == _bytes(frozen, want), name
