"""The store's own record of a table definition, so that a reopened store knows its tables.

The schema layer owns table definitions; the store keeps a copy of each registered table in its
``_tables`` metadata table so that a node restarting from its data directory can read what it
wrote before the schema layer is back. The record is JSON (readable with the ``sqlite3`` shell),
versioned, and covers every type descriptor, UDTs included, structurally (a CQL type spelling
alone cannot be parsed back without the keyspace's user types).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ringflow.errors import InternalError
from ringflow.schema import (
    CdcOptions,
    ClusteringOrder,
    Column,
    ColumnKind,
    CqlType,
    ListType,
    MapType,
    NativeType,
    SetType,
    Table,
    TableOptions,
    TupleType,
    UserType,
    engine_value,
)

TABLE_RECORD_VERSION = 1


def type_to_json(cql_type: CqlType) -> Any:
    """A JSON-able structure for ``cql_type`` (inverse: :func:`type_from_json`)."""
    if isinstance(cql_type, NativeType):
        return cql_type.name
    if isinstance(cql_type, ListType):
        return {"list": type_to_json(cql_type.element), "frozen": cql_type.frozen}
    if isinstance(cql_type, SetType):
        return {"set": type_to_json(cql_type.element), "frozen": cql_type.frozen}
    if isinstance(cql_type, MapType):
        key, value = type_to_json(cql_type.key), type_to_json(cql_type.value)
        return {"map": [key, value], "frozen": cql_type.frozen}
    if isinstance(cql_type, TupleType):
        return {"tuple": [type_to_json(element) for element in cql_type.elements]}
    if isinstance(cql_type, UserType):
        return {
            "udt": [cql_type.keyspace, cql_type.name],
            "fields": list(cql_type.field_names),
            "types": [type_to_json(t) for t in cql_type.field_types],
            "frozen": cql_type.frozen,
        }
    raise InternalError(f"no table record form for type {cql_type!r}")


def type_from_json(data: Any) -> CqlType:
    """The type descriptor recorded by :func:`type_to_json`."""
    if isinstance(data, str):
        return NativeType(data)
    frozen = bool(data.get("frozen", True))
    if "list" in data:
        return ListType(type_from_json(data["list"]), frozen)
    if "set" in data:
        return SetType(type_from_json(data["set"]), frozen)
    if "map" in data:
        return MapType(type_from_json(data["map"][0]), type_from_json(data["map"][1]), frozen)
    if "tuple" in data:
        return TupleType(tuple(type_from_json(element) for element in data["tuple"]))
    if "udt" in data:
        keyspace, name = data["udt"]
        types = tuple(type_from_json(t) for t in data["types"])
        return UserType(keyspace, name, tuple(data["fields"]), types, frozen)
    raise InternalError(f"unreadable type record {data!r}")


def table_to_record(table: Table, packed_rows: bool = False) -> str:
    """The JSON record of ``table`` and of how the store keeps its rows."""
    options = table.options
    return json.dumps(
        {
            "version": TABLE_RECORD_VERSION,
            "keyspace": table.keyspace,
            "name": table.name,
            "id": str(table.id),
            "columns": [
                [c.name, type_to_json(c.type), c.kind.value, c.position, c.order.value]
                for c in table.columns
            ],
            "cdc": options.cdc.to_map(),
            "default_time_to_live_s": options.default_time_to_live_s,
            "gc_grace_seconds": options.gc_grace_seconds,
            "comment": options.comment,
            "engine": [[name, value] for name, value in options.engine],
            "packed_rows": packed_rows,
            "dropped_columns": [list(dropped) for dropped in table.dropped_columns],
        },
        sort_keys=True,
    )


def table_from_record(record: str) -> tuple[Table, bool]:
    """The table recorded by :func:`table_to_record` and its ``packed_rows`` flag; InternalError
    if the record is unreadable."""
    data = json.loads(record)
    if data.get("version") != TABLE_RECORD_VERSION:
        raise InternalError(f"table record version {data.get('version')!r} is not supported")
    columns = tuple(
        Column(name, type_from_json(type_data), ColumnKind(kind), position, ClusteringOrder(order))
        for name, type_data, kind, position, order in data["columns"]
    )
    options = TableOptions(
        CdcOptions.from_map(data["cdc"]),
        data["default_time_to_live_s"],
        data["gc_grace_seconds"],
        data["comment"],
        tuple((str(name), engine_value(value)) for name, value in data.get("engine", ())),
    )
    dropped = tuple((str(name), int(at_us)) for name, at_us in data.get("dropped_columns", ()))
    table = Table(data["keyspace"], data["name"], columns, options, uuid.UUID(data["id"]), dropped)
    return table, bool(data.get("packed_rows", False))
