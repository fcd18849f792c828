"""The CDC log table schema (scylla-cdc.md §5 "Name and properties", "Columns", "cdc$operation
codes"; §9 item 8).

The expected column lists are written out by hand from Scylla's documentation
(``docs/features/cdc/cdc-log-table.rst``, ``cdc-advanced-types.rst``: value column = frozen type,
``list<T>`` as ``frozen<map<timeuuid, T>>``, deleted elements ``frozen<set<key>>``) in the order
``DESCRIBE`` shows them (regular columns sorted by name, as Scylla's ``schema::rebuild``
requires), plus ``cdc$end_of_batch``, which the docs' listing omits but ``cdc/log.cc`` adds.
"""

from __future__ import annotations

import uuid

import pytest

from ringflow.cdc._log_schema import (
    CdcOperation,
    base_table_name,
    cdc_log_compaction_options,
    cdc_log_table,
    is_cdc_log_table,
)
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    INT,
    TEXT,
    TIMEUUID,
    ClusteringOrder,
    ColumnKind,
    DeltaMode,
    ListType,
    MapType,
    SchemaError,
    SetType,
    Table,
    TupleType,
)
from tests.unit.cdc.test_log_rows_support import UT, cdc

EVERY_KIND = Table.create(
    "ks",
    "t",
    [("pk1", INT), ("pk2", TEXT)],
    [("ck1", INT, ClusteringOrder.ASC), ("ck2", TIMEUUID, ClusteringOrder.DESC)],
    [("s", INT), ("s_set", SetType(TEXT))],
    [
        ("v", INT),
        ("fl", ListType(INT, frozen=True)),
        ("l", ListType(INT)),
        ("m", MapType(TEXT, INT)),
        ("st", SetType(INT)),
        ("u", UT),
        ("fu", UT.frozen_form()),
        ("t", TupleType((INT, TEXT))),
    ],
    cdc(),
)

EVERY_KIND_LOG_REGULAR = [
    ("cdc$deleted_elements_l", "frozen<set<timeuuid>>"),
    ("cdc$deleted_elements_m", "frozen<set<text>>"),
    ("cdc$deleted_elements_s_set", "frozen<set<text>>"),
    ("cdc$deleted_elements_st", "frozen<set<int>>"),
    ("cdc$deleted_elements_u", "frozen<set<smallint>>"),
    ("cdc$deleted_fl", "boolean"),
    ("cdc$deleted_fu", "boolean"),
    ("cdc$deleted_l", "boolean"),
    ("cdc$deleted_m", "boolean"),
    ("cdc$deleted_s", "boolean"),
    ("cdc$deleted_s_set", "boolean"),
    ("cdc$deleted_st", "boolean"),
    ("cdc$deleted_t", "boolean"),
    ("cdc$deleted_u", "boolean"),
    ("cdc$deleted_v", "boolean"),
    ("cdc$end_of_batch", "boolean"),
    ("cdc$operation", "tinyint"),
    ("cdc$ttl", "bigint"),
    ("ck1", "int"),
    ("ck2", "timeuuid"),
    ("fl", "frozen<list<int>>"),
    ("fu", "frozen<ut>"),
    ("l", "frozen<map<timeuuid, int>>"),
    ("m", "frozen<map<text, int>>"),
    ("pk1", "int"),
    ("pk2", "text"),
    ("s", "int"),
    ("s_set", "frozen<set<text>>"),
    ("st", "frozen<set<int>>"),
    ("t", "frozen<tuple<int, text>>"),
    ("u", "frozen<ut>"),
    ("v", "int"),
]


def _layout(log: Table) -> list[tuple[str, str, str]]:
    return [(c.kind.value, c.name, c.type.cql_name()) for c in log.columns]


def test_log_of_every_column_kind_matches_scylla() -> None:
    """Key, meta, key-copy, atomic, frozen, non-frozen and UDT columns, in DESCRIBE order."""
    log = cdc_log_table(EVERY_KIND)
    assert (log.keyspace, log.name) == ("ks", "t_scylla_cdc_log")
    assert _layout(log) == [
        ("partition_key", "cdc$stream_id", "blob"),
        ("clustering", "cdc$time", "timeuuid"),
        ("clustering", "cdc$batch_seq_no", "int"),
        *(("regular", name, cql) for name, cql in EVERY_KIND_LOG_REGULAR),
    ]
    assert all(c.order is ClusteringOrder.ASC for c in log.clustering_columns)


def test_docs_example_log_columns() -> None:
    """``cdc-log-table.rst``'s example table: its listed columns plus cdc$end_of_batch."""
    base = Table.create(
        "ks",
        "t",
        [("pk1", INT), ("pk2", INT)],
        [("ck1", INT, ClusteringOrder.ASC), ("ck2", INT, ClusteringOrder.ASC)],
        [("vs", INT)],
        [("v", INT)],
        cdc(),
    )
    log = cdc_log_table(base)
    documented = {
        "cdc$stream_id": "blob",
        "cdc$time": "timeuuid",
        "cdc$batch_seq_no": "int",
        "cdc$operation": "tinyint",
        "cdc$ttl": "bigint",
        "pk1": "int",
        "pk2": "int",
        "ck1": "int",
        "ck2": "int",
        "v": "int",
        "cdc$deleted_v": "boolean",
        "vs": "int",
        "cdc$deleted_vs": "boolean",
        "cdc$end_of_batch": "boolean",
    }
    assert {c.name: c.type.cql_name() for c in log.columns} == documented
    assert log.column("vs").kind is ColumnKind.REGULAR  # static columns are not static in the log


def test_log_options() -> None:
    """Comment, gc_grace 0 iff ttl > 0, no default TTL (cells carry the TTL), CDC off."""
    log = cdc_log_table(EVERY_KIND)
    assert log.options.comment == "CDC log for ks.t"
    assert log.options.gc_grace_seconds == 0
    assert log.options.default_time_to_live_s == 0
    assert not log.options.cdc.enabled
    keep_forever = Table.create("ks", "k", [("pk", INT)], options=cdc(ttl_s=0))
    assert cdc_log_table(keep_forever).options.gc_grace_seconds == 864000
    keys_only = Table.create(
        "ks", "d", [("pk", INT)], regular=[("v", INT)], options=cdc(delta=DeltaMode.KEYS)
    )
    assert cdc_log_table(keys_only).has_column("v")  # delta mode does not change the schema


@pytest.mark.parametrize(
    ("ttl_s", "expected"),
    [
        (
            86400,
            {"compaction_window_size": "60", "expired_sstable_check_frequency_seconds": "1800"},
        ),
        (100, {"compaction_window_size": "1", "expired_sstable_check_frequency_seconds": "2"}),
        (1, {"compaction_window_size": "1", "expired_sstable_check_frequency_seconds": "1"}),
        (
            7 * 86400,
            {"compaction_window_size": "420", "expired_sstable_check_frequency_seconds": "12600"},
        ),
    ],
)
def test_compaction_window_follows_the_ttl(ttl_s: int, expected: dict[str, str]) -> None:
    """TWCS window = ceil(ttl/24) s in whole minutes, expiry check every half window (>= 1 s)."""
    options = cdc_log_compaction_options(ttl_s)
    assert options == {
        "class": "TimeWindowCompactionStrategy",
        "compaction_window_unit": "MINUTES",
        **expected,
    }
    assert cdc_log_compaction_options(0) == {"class": "TimeWindowCompactionStrategy"}


def test_log_names() -> None:
    assert is_cdc_log_table("t_scylla_cdc_log")
    assert not is_cdc_log_table("t_scylla_cdc_logs")
    assert base_table_name("t_scylla_cdc_log") == "t"
    with pytest.raises(InvalidRequest, match="not a CDC log table name"):
        base_table_name("t")


def test_log_table_id_is_derived_from_the_base_id_unless_given() -> None:
    """Every node deriving the log schema of one base table gets one id."""
    assert cdc_log_table(EVERY_KIND).id == cdc_log_table(EVERY_KIND).id != EVERY_KIND.id
    chosen = uuid.uuid4()
    assert cdc_log_table(EVERY_KIND, chosen).id == chosen


def test_refused_bases() -> None:
    """No log of a log; no base column that collides with a log column."""
    log = cdc_log_table(EVERY_KIND)
    with pytest.raises(SchemaError, match="is a CDC log table"):
        cdc_log_table(log)
    clash = Table.create("ks", "c", [("pk", INT)], regular=[("v", INT), ("cdc$deleted_v", INT)])
    with pytest.raises(SchemaError, match="collides"):
        cdc_log_table(clash)


def test_operation_codes() -> None:
    """The ``cdc$operation`` values of ``cdc/log.hh``."""
    assert {op.name: op.value for op in CdcOperation} == {
        "PRE_IMAGE": 0,
        "UPDATE": 1,
        "INSERT": 2,
        "ROW_DELETE": 3,
        "PARTITION_DELETE": 4,
        "RANGE_DELETE_START_INCLUSIVE": 5,
        "RANGE_DELETE_START_EXCLUSIVE": 6,
        "RANGE_DELETE_END_INCLUSIVE": 7,
        "RANGE_DELETE_END_EXCLUSIVE": 8,
        "POST_IMAGE": 9,
    }
