"""Helpers of the lakehouse tests: Delta and Iceberg tables read back by DuckDB (another engine
than the writers), through the Parquet files of each table's current version: DuckDB's
``delta``/``iceberg`` extensions download from the network at first use, which is not there."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ringflow.pipeline import Change, change_arrow_schema, change_to_arrow_row
from ringflow.pipeline._changes import value_columns
from ringflow.pipeline._delta import DeltaStore
from ringflow.pipeline._iceberg import IcebergStore, parse_location
from ringflow.pipeline._lakehouse import (
    DELTA_FORMAT,
    ICEBERG_FORMAT,
    LakehouseCommitMessage,
    LakehouseStore,
    _config,
    commit_lakehouse_batch,
    delta_options,
    iceberg_options,
)
from ringflow.pipeline._lakehouse_state import DELETED_FIELD, write_time_field
from ringflow.pipeline._materialize import canonical_value, hashable
from ringflow.pipeline._spark_types import from_spark_value
from ringflow.schema import Table

from ._schema_evolution import Rows

_SANITIZED = re.compile(r"_x([0-9A-F]{2})")


def _name(column: str) -> str:
    """A column name as the table has it: pyiceberg writes ``cdc$time`` to Parquet as
    ``cdc_x24time`` (Avro-safe names), the table maps it back by field id."""
    return _SANITIZED.sub(lambda m: chr(int(m.group(1), 16)), column)


def duckdb_read(files: list[str]) -> list[dict[str, Any]]:
    """Every row of ``files`` (Parquet, columns united by name) as dicts, through DuckDB."""
    if not files:
        return []
    connection = duckdb.connect()
    try:
        listing = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        sql = f"SELECT * FROM read_parquet([{listing}], union_by_name = true)"
        rows = connection.sql(sql).to_arrow_table().to_pylist()
    finally:
        connection.close()
    return [{_name(k): v for k, v in row.items()} for row in rows]


def destination(kind: str, base: Path, table: Table) -> tuple[str, dict[str, str], LakehouseStore]:
    """A ``delta`` or ``iceberg`` (SQLite catalog, namespace ``shop``) destination under
    ``base`` holding ``table``: (sink format, sink options, its store)."""
    if kind == "delta":
        path = str(base / "delta")
        return DELTA_FORMAT, delta_options(path, table), DeltaStore(path)
    location = parse_location(f"{base / 'catalog.db'}#shop.items")
    store = IcebergStore(location)
    if ("shop",) not in store.catalog.list_namespaces():
        store.catalog.create_namespace("shop")
    return ICEBERG_FORMAT, iceberg_options(location, table), store


def commit_changes(
    sink: str,
    options: Mapping[str, str],
    table: Table,
    changes: Sequence[Change],
    app_id: str,
    batch_id: int,
    now_s: int | None = None,
) -> tuple[bool, bool]:
    """The driver-side commit of one batch of ``changes`` (of source version ``table``) as the
    sink's writer makes it after its tasks sent their rows, at ``now_s`` (default: the clock),
    without Spark: for tests of what the tables hold (the Spark path itself:
    ``test_lakehouse``, ``test_replicate_lakehouse``)."""
    schema = change_arrow_schema(table)
    data = pa.Table.from_pylist([change_to_arrow_row(table, c) for c in changes], schema=schema)
    sink_buffer = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink_buffer, schema) as stream:
        stream.write_table(data)
    message = LakehouseCommitMessage(app_id, sink_buffer.getvalue().to_pybytes(), data.num_rows)
    config = _config(sink, options, None)
    return commit_lakehouse_batch(config, [message], app_id, batch_id, now_s)


def change_log_rows(store: LakehouseStore) -> list[dict[str, Any]]:
    rows = duckdb_read(store.data_files()[0])
    return sorted(rows, key=lambda r: (r["cdc$time_us"], r["cdc$batch_seq_no"]))


def current_rows(store: LakehouseStore, table: Table) -> Rows:
    """The live rows of the current-state table, in the shape of ``cql_rows`` (``table``'s
    value columns: keys, values, write times of the atomic ones)."""
    found: Rows = {}
    atomic = {c.name for c in table.columns if not c.type.is_multicell}
    for row in duckdb_read(store.data_files()[1]):
        if row[DELETED_FIELD]:
            continue
        key = tuple(
            None if row[c.name] is None else hashable(canonical_value(c.type, _plain(row[c.name])))
            for c in table.primary_key_columns
        )
        present = [c for c in value_columns(table) if row.get(c.name) is not None]
        cells = {c.name: canonical_value(c.type, _plain(row[c.name])) for c in present}
        times = {c.name: int(row[write_time_field(c.name)]) for c in present if c.name in atomic}
        found[key] = (cells, times)
    return found


def _plain(value: object) -> object:
    """DuckDB's map (a dict of key/value lists or a dict) as pairs the codec takes."""
    if isinstance(value, dict) and set(value) == {"key", "value"}:
        return list(zip(value["key"], value["value"], strict=True))
    return value


def stored_live(table: Table, store: Mapping[str, Mapping[str, Any]]) -> dict[Any, Any]:
    """The live rows of current-state rows held in memory (``_row`` -> row dict, Arrow's
    values), in the shape of the oracle (key -> (values, write times), CQL values)."""

    def cql(column: Any, value: object) -> object:
        return canonical_value(column.type, from_spark_value(column.type, value))

    found = {}
    for row in store.values():
        if row[DELETED_FIELD]:
            continue
        key = tuple(
            None if row[c.name] is None else hashable(cql(c, row[c.name]))
            for c in table.primary_key_columns
        )
        present = [c for c in value_columns(table) if row[c.name] is not None]
        values = {c.name: cql(c, row[c.name]) for c in present}
        times = {c.name: row[write_time_field(c.name)] for c in present}
        found[key] = (values, times)
    return found
