"""The change model without Spark: validation, conversions, the table as JSON."""

from __future__ import annotations

import uuid

import pytest

from ringflow.cdc import CdcOperation
from ringflow.pipeline import (
    Change,
    InvalidChange,
    PipelineConfigError,
    change_from_log_row,
    change_from_row,
    change_schema,
    change_to_arrow_row,
    change_to_row,
    format_duration,
    log_row_converter,
    parse_duration,
    table_from_json,
    table_to_json,
)
from ringflow.schema import Duration, timeuuid_from_micros

from ._workload import LIST_PATH_1, TABLE, change, row, workload


def test_change_rows_round_trip_for_the_whole_workload() -> None:
    for original in workload():
        assert change_from_row(TABLE, change_to_arrow_row(TABLE, original)) == original
        assert len(change_to_row(TABLE, original)) == len(change_schema(TABLE).fields)


def test_change_schema_names_meta_fields_like_the_log() -> None:
    names = change_schema(TABLE).fieldNames()
    assert names[:7] == [
        "cdc$stream_id",
        "cdc$time",
        "cdc$time_us",
        "cdc$batch_seq_no",
        "cdc$operation",
        "cdc$operation_name",
        "cdc$ttl",
    ]
    assert names[7:11] == ["tenant", "bucket", "seq", "tag"]
    assert "cdc$deleted_elements_hist" in names and "cdc$deleted_elements_note" not in names
    hist = change_schema(TABLE)["hist"].dataType.simpleString()
    assert hist == "map<string,int>"  # a non-frozen list is keyed by its cells' timeuuids


def test_change_from_a_log_row() -> None:
    time = timeuuid_from_micros(1_700_000_000_000_000, 3)
    log_row = {
        "cdc$stream_id": b"\x07" * 16,
        "cdc$time": time,
        "cdc$batch_seq_no": 2,
        "cdc$operation": 1,
        "cdc$ttl": None,
        "tenant": "t",
        "bucket": 1,
        "seq": 4,
        "tag": "z",
        "hist": {LIST_PATH_1: 9},
        "cdc$deleted_note": True,
        "cdc$deleted_elements_tags": {"old"},
    }
    parsed = change_from_log_row(TABLE, log_row)
    assert parsed.operation is CdcOperation.UPDATE
    assert parsed.time_us == 1_700_000_000_000_000
    assert parsed.values == {"hist": {LIST_PATH_1: 9}}
    assert parsed.deleted == {"note"}
    assert parsed.deleted_elements == {"tags": frozenset({"old"})}


def _log_row_of(change: Change) -> dict[str, object]:
    """The log row the cluster's CDC writer stores for ``change`` (as the driver reads it)."""
    row: dict[str, object] = {
        "cdc$stream_id": change.stream_id,
        "cdc$time": change.time,
        "cdc$batch_seq_no": change.batch_seq_no,
        "cdc$operation": int(change.operation),
        "cdc$ttl": change.ttl_s,
        **change.key,
        **change.values,
    }
    for name in change.deleted:
        row[f"cdc$deleted_{name}"] = True
    for name, elements in change.deleted_elements.items():
        row[f"cdc$deleted_elements_{name}"] = set(elements)
    return row


def test_the_sources_log_row_converter_equals_the_general_path() -> None:
    convert = log_row_converter(TABLE)
    changes = workload()
    assert {c.operation for c in changes} >= {
        CdcOperation.INSERT,
        CdcOperation.UPDATE,
        CdcOperation.ROW_DELETE,
        CdcOperation.PARTITION_DELETE,
    }
    for original in changes:
        log_row = _log_row_of(original)
        assert convert(log_row) == change_to_row(TABLE, change_from_log_row(TABLE, log_row))
    bad = {**_log_row_of(changes[0]), "cdc$operation": 42}
    with pytest.raises(InvalidChange, match="operation 42"):
        convert(bad)
    with pytest.raises(InvalidChange, match="not a version-1 timeuuid"):
        convert({**_log_row_of(changes[0]), "cdc$time": uuid.uuid4()})


def test_invalid_changes_are_refused_with_the_rule() -> None:
    with pytest.raises(InvalidChange, match="version-1"):
        Change("shop", "items", CdcOperation.INSERT, uuid.uuid4(), row("t", 1, 1, "a"))
    with pytest.raises(InvalidChange, match="ttl_s"):
        change(CdcOperation.INSERT, 1, row("t", 1, 1, "a"), ttl_s=0)
    with pytest.raises(InvalidChange, match="carries no column values"):
        change_to_row(TABLE, change(CdcOperation.ROW_DELETE, 1, row("t", 1, 1, "a"), {"note": "x"}))
    with pytest.raises(InvalidChange, match="prefix"):
        change_to_row(TABLE, change(CdcOperation.UPDATE, 1, {**row("t", 1), "tag": "a"}))
    with pytest.raises(InvalidChange, match="no column 'nope'"):
        change_to_row(TABLE, change(CdcOperation.UPDATE, 1, row("t", 1, 1, "a"), {"nope": 1}))
    with pytest.raises(InvalidChange, match="not a non-frozen"):
        change_to_row(
            TABLE,
            change(CdcOperation.UPDATE, 1, row("t", 1, 1, "a"), deleted_elements={"note": {"x"}}),
        )


def test_table_json_round_trip_and_errors() -> None:
    assert table_from_json(table_to_json(TABLE)) == TABLE
    with pytest.raises(PipelineConfigError, match="bad table description"):
        table_from_json('{"keyspace": "k"}')


def test_duration_text() -> None:
    assert format_duration(Duration(-1, -2, -3)) == "-1mo2d3ns"
    assert parse_duration("-1mo2d3ns") == Duration(-1, -2, -3)
    with pytest.raises(InvalidChange, match="duration text"):
        parse_duration("P1D")
