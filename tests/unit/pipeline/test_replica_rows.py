"""The ``ringflow-replica`` source's conversion of a captured row (canonical bytes of a log row)
into a change row, across schema changes (issue 15 for replica-side capture): a value in a log
column the query's table lacks is never left out silently (SourceSchemaChanged naming the
columns), a dropped column the job named is ignored, and the named columns read back from the
error text the job sees.
"""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("pyspark")

from ringflow.cdc import CdcOperation, cdc_log_table
from ringflow.pipeline import SourceSchemaChanged
from ringflow.pipeline._replica_source import (
    replica_row_converter,
    unknown_columns,
)
from ringflow.replication import canonical_row_bytes, decode_canonical_row
from ringflow.schema import INT, TEXT, ClusteringOrder, Table, serialize

V1 = Table.create(
    "ks",
    "t",
    partition_key=[("id", INT)],
    clustering=[("seq", INT, ClusteringOrder.ASC)],
    regular=[("name", TEXT)],
)
V2 = Table.create(
    "ks",
    "t",
    partition_key=[("id", INT)],
    clustering=[("seq", INT, ClusteringOrder.ASC)],
    regular=[("name", TEXT), ("note", TEXT)],
)


def _captured(table: Table, **values: object) -> bytes:
    """A captured log row of ``table`` (an INSERT of ``values``), as a node keeps it."""
    log = {column.name: column for column in cdc_log_table(table).columns}
    row: dict[str, object] = {
        "cdc$stream_id": bytes(16),
        "cdc$time": uuid.uuid1(),
        "cdc$batch_seq_no": 0,
        "cdc$operation": int(CdcOperation.INSERT),
        **values,
    }
    return canonical_row_bytes(
        {name: serialize(log[name].type, value, name) for name, value in row.items()}
    )


def test_a_row_of_the_same_table_converts_and_a_null_column_it_lacks_carries_nothing() -> None:
    converted = replica_row_converter(V1)(_captured(V1, id=1, seq=2, name="a"))
    assert 1 in converted and "a" in converted
    plain = decode_canonical_row(_captured(V1, id=1, seq=2))
    with_null = canonical_row_bytes({"note": None, **plain})
    replica_row_converter(V1)(with_null)  # a null value of an unknown column: no data lost


def test_a_value_in_a_column_the_table_lacks_stops_the_query_naming_it() -> None:
    row = _captured(V2, id=1, seq=2, name="a", note="kept")
    with pytest.raises(SourceSchemaChanged) as raised:
        replica_row_converter(V1)(row)
    assert unknown_columns(f"Traceback ...\n{type(raised.value).__name__}: {raised.value}") == {
        "note"
    }
    assert "kept" in replica_row_converter(V2)(row)  # the reloaded table reads it


def test_a_dropped_column_the_job_named_is_ignored() -> None:
    row = _captured(V2, id=1, seq=2, name="a", note="old")
    converted = replica_row_converter(V1, ignored=("note",))(row)
    assert "old" not in converted and "a" in converted


def test_an_error_naming_no_columns_reads_as_none() -> None:
    assert unknown_columns("SourceSchemaChanged: something else") is None
    assert unknown_columns("log columns [1, 2]") is None
