"""Helpers of the schema-change tests: any table's rows (values and write times of the columns
a version of the table has) read from a CQL cluster, the lake and PostgreSQL in one shape.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from ringflow.pipeline import lake_table, materialize, read_lake_changes
from ringflow.pipeline._materialize import LiveRow, canonical_value
from ringflow.pipeline._postgres import read_postgres_live
from ringflow.schema import Table

Rows = dict[tuple[object, ...], tuple[dict[str, object], dict[str, int]]]


def _plain(value: object) -> object:
    if hasattr(value, "items"):
        return dict(value.items())
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        return value
    return list(value)


def cql_rows(session: Any, table: Table, name: str, consistency: str | None = None) -> Rows:
    """``name``'s rows (keyspace.table) through the driver: the key, the values of ``table``'s
    value columns and the write times of its atomic ones (at ``consistency``)."""
    values = [*table.static_columns, *table.regular_columns]
    atomic = [c.name for c in values if not c.type.is_multicell]
    keys = [c.name for c in table.primary_key_columns]
    selected = [*keys, *(c.name for c in values), *(f"WRITETIME({n}) AS wt_{n}" for n in atomic)]
    level = None if consistency is None else ConsistencyLevel.name_to_value[consistency]
    query = SimpleStatement(f"SELECT {', '.join(selected)} FROM {name}", consistency_level=level)
    found: Rows = {}
    for row in session.execute(query, timeout=60.0):
        data = row if isinstance(row, Mapping) else row._asdict()
        cells = {
            c.name: canonical_value(c.type, _plain(data[c.name]))
            for c in values
            if data[c.name] is not None
        }
        times = {n: int(data[f"wt_{n}"]) for n in atomic if data[n] is not None}
        found[tuple(data[k] for k in keys)] = (cells, times)
    return found


def live_rows(table: Table, rows: Mapping[tuple[object, ...], LiveRow]) -> Rows:
    """Materialized or PostgreSQL rows in the shape of :func:`cql_rows`, for ``table``'s value
    columns (a destination may hold more: columns dropped at the source)."""
    names = {c.name for c in (*table.static_columns, *table.regular_columns)}
    atomic = {c.name for c in table.columns if not c.type.is_multicell}
    found: Rows = {}
    for key, live in rows.items():
        cells = {k: v for k, v in live.values.items() if k in names and v is not None}
        times = {k: int(t) for k, t in live.write_times_us.items() if k in atomic and k in cells}
        found[tuple(key)] = (cells, times)
    return found


def lake_rows(root: Path, table: Table) -> Rows:
    name = f"{table.keyspace}.{table.name}"
    union = lake_table(root, name)
    return live_rows(table, materialize(union, read_lake_changes(root, name), int(time.time())))


def postgres_rows(url: str, target: str, table: Table) -> Rows:
    return live_rows(table, read_postgres_live(url, target, table, int(time.time())))


def differences(expected: Rows, actual: Rows) -> list[str]:
    """Up to 5 examples of keys missing, extra or with other values or write times."""
    problems = []
    for key in sorted(set(expected) | set(actual), key=repr):
        if key not in actual:
            problems.append(f"{key}: missing")
        elif key not in expected:
            problems.append(f"{key}: extra")
        elif expected[key] != actual[key]:
            problems.append(f"{key}: {expected[key]} != {actual[key]}")
    return problems[:5]
