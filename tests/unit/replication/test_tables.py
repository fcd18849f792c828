"""The replication tables (REPLICATION.md decision 4): each DDL builds a table with our own CQL
parser and DDL executor, every value a codec writes serializes with its column's CQL type,
watermarks and sent records survive their rows, bad rows are refused naming the column; and
the package stays pure (importing it loads neither Spark, the pipeline, the store nor the
cluster service)."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.cql import CreateTableStatement, parse_statement
from ringflow.cql._exec_ddl import build_table
from ringflow.replication import (
    CHANNEL_COLUMNS,
    CHANNELS_TABLE_CQL,
    DEAD_LETTERS_TABLE_CQL,
    SENT_TABLE_CQL,
    SLICES_TABLE_CQL,
    WATERMARKS_TABLE_CQL,
    Channel,
    ReplicationArgumentError,
    SealedSlice,
    SealWatermark,
    SentRecord,
    SliceKey,
    channel_to_row,
    sealed_slice_from_row,
    sealed_slice_to_row,
    sent_from_row,
    sent_to_row,
    watermark_from_row,
    watermark_to_row,
)
from ringflow.schema import Keyspace, Table, serialize

KEYSPACE = Keyspace("system_replication", {"class": "SimpleStrategy", "replication_factor": "3"})


def table_of(ddl: str) -> Table:
    statement = parse_statement(ddl)
    assert isinstance(statement, CreateTableStatement)
    assert statement.table.keyspace == "system_replication"
    return build_table(statement, KEYSPACE, uuid.UUID(int=1))


def assert_row_fits(table: Table, row: dict[str, object]) -> None:
    """Exactly the table's columns, each value serializable with its column's type."""
    assert set(row) == {column.name for column in table.columns}
    for name, value in row.items():
        if value is not None:
            serialize(table.column(name).type, value, name)


def test_the_channels_table_builds_and_fits_its_rows() -> None:
    table = table_of(CHANNELS_TABLE_CQL)
    assert tuple(column.name for column in table.columns) == CHANNEL_COLUMNS
    channel = Channel("pg", "ks", "t", "postgresql://u@h/db", target_table="s.t")
    assert_row_fits(table, channel_to_row(channel))


keys = st.builds(
    SliceKey,
    st.sampled_from(["ks", "shop"]),
    st.sampled_from(["t", "orders"]),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**62),
    st.booleans(),
)
nodes = st.uuids()


digests = st.binary(min_size=16, max_size=16)
records = st.builds(
    SentRecord, st.sampled_from(["hub", "lake"]), keys, nodes, digests, st.integers(0, 2**62)
)


@given(records)
def test_a_sent_record_survives_its_row(record: SentRecord) -> None:
    row = sent_to_row(record)
    assert_row_fits(table_of(SENT_TABLE_CQL), row)
    assert sent_from_row({**row, "added_later": 1}) == record


@given(st.builds(SealWatermark, nodes, st.just("ks"), st.just("t"), st.integers(0, 2**62)))
def test_a_watermark_survives_its_row(mark: SealWatermark) -> None:
    row = watermark_to_row(mark)
    assert_row_fits(table_of(WATERMARKS_TABLE_CQL), row)
    assert watermark_from_row(row) == mark


def test_the_sent_key_holds_the_node_so_a_union_keeps_every_copy() -> None:
    statement = parse_statement(SENT_TABLE_CQL)
    assert isinstance(statement, CreateTableStatement)
    assert statement.partition_key == ("keyspace_name", "table_name", "channel", "slice_start_ms")
    assert "node" in statement.clustering_columns


@given(st.builds(SealedSlice, keys, nodes, digests, st.integers(0, 2**40), st.integers(0, 2**62)))
def test_a_sealed_slice_survives_its_row(sealed: SealedSlice) -> None:
    row = sealed_slice_to_row(sealed)
    assert_row_fits(table_of(SLICES_TABLE_CQL), row)
    assert sealed_slice_from_row(row) == sealed


def test_slices_and_sent_rows_are_bucketed_by_slice_start_and_expire() -> None:
    """One bounded partition per slice start (a reader asks for the starts it still holds),
    never one partition growing with the table's age; both carry a TTL."""
    for ddl in (SLICES_TABLE_CQL, SENT_TABLE_CQL):
        table = table_of(ddl)
        assert "slice_start_ms" in [c.name for c in table.partition_key_columns]
        assert table.options.default_time_to_live_s > 0
    assert table_of(DEAD_LETTERS_TABLE_CQL).column("reason") is not None


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"node": None}, "'node' is missing or null"),
        ({"node": "n1"}, "'node' must be UUID"),
        ({"digest": b"x"}, "16 bytes"),
        ({"out_of_sequence": 0}, "'out_of_sequence' must be bool"),
        ({"slice_start_ms": True}, "'slice_start_ms' must be int"),
    ],
)
def test_a_bad_sent_row_is_refused_with_its_column(changes: dict[str, object], rule: str) -> None:
    record = SentRecord("hub", SliceKey("ks", "t", 0, 10, 0), uuid.UUID(int=3), bytes(16), 5)
    with pytest.raises(ReplicationArgumentError, match=rule):
        sent_from_row({**sent_to_row(record), **changes})


def test_a_bad_watermark_row_is_refused_with_its_column() -> None:
    row = watermark_to_row(SealWatermark(uuid.UUID(int=3), "ks", "t", 5))
    with pytest.raises(ReplicationArgumentError, match="'sealed_through_ms' must be int"):
        watermark_from_row({**row, "sealed_through_ms": "5"})
    with pytest.raises(ReplicationArgumentError, match="sealed_through_ms must be an int64"):
        watermark_from_row({**row, "sealed_through_ms": -1})


def test_the_package_stays_pure() -> None:
    code = (
        "import sys, ringflow.replication\n"
        "heavy = ('pyspark', 'ringflow.pipeline', 'ringflow.storage', 'ringflow.cluster', "
        "'ringflow.node', 'ringflow.cql', 'sqlite3', 'asyncio')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert loaded == "[]"
