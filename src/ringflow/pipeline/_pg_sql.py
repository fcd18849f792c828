"""PostgreSQL side of the sink: CQL → PostgreSQL types and values, and the SQL of a target.

Type mapping (values convert losslessly both ways unless noted):

===================  ==================  ================================================
CQL                  PostgreSQL          note
===================  ==================  ================================================
ascii, text          text                (PostgreSQL text cannot hold U+0000)
blob                 bytea
boolean              boolean
tinyint, smallint    smallint
int / bigint         integer / bigint
varint, decimal      numeric             a decimal keeps its digits, not its exponent
                                         (``1E+3`` reads back as ``1000``)
float / double       real / double precision
timestamp            timestamptz
date                 date
time                 bigint              nanoseconds since midnight
uuid, timeuuid       uuid
inet                 inet
duration             text                ``[-]<months>mo<days>d<nanoseconds>ns``
list, set of a       <element>[]         sets in CQL order
native type
other list, set,     jsonb               map keys as text (a text key as is, any other key
map, tuple, UDT                          as its JSON), blobs as ``0x<hex>``, decimals and
                                         non-finite floats as strings, timestamps ISO 8601
===================  ==================  ================================================

Objects of a target ``T`` (``T`` is the ``table`` option, possibly ``schema.name``):

- ``T``: one row per clustered row: the base primary key (the PostgreSQL primary key), ``_ck``
  (the clustering key as order-preserving bytes, ringflow.schema ``encode_clustering``), the row
  marker ``_marker_wt/_wx/_exp``, the row tombstone ``_deleted_at``, and per atomic column ``c``:
  ``c``, its write timestamp ``_wt_c`` (µs), tie bytes ``_wx_c`` (``cell_order``) and expiry
  second ``_exp_c``; per non-frozen collection ``c`` its tombstone ``_ct_c``.
- ``T__static``: the same per static column, keyed by the partition key (if any static column).
- ``T__cells_<c>``: element cells of a non-frozen collection ``c`` (path bytes in CQL order,
  ``key_text``, ``elem``, ``wt``, ``wx``, ``exp``, ``tomb``).
- ``T__partition_deletes`` (partition key, ``ts``) and ``T__range_bounds`` (partition key, the
  log's ``time`` and ``seq``, the bound ``op``, ``edge`` bytes, ``ts``): a range tombstone is a
  start bound paired with the end bound at ``seq + 1``; it covers ``edge_start <= _ck <
  edge_end``. Bounds are stored as they come, so the halves may arrive in any order or batch.
- ``T__batches``: the micro-batches committed (query id, batch id, rows), for operators.
- ``T__schema``: the base table the target holds, one row per version (the JSON of
  :func:`~ringflow.pipeline.table_to_json`): the union of the source versions it took, so a
  column dropped at the source stays, with its values (issue 15). The union's new columns are
  added with ``ALTER TABLE ... ADD COLUMN`` (new tables for a first static or a new collection
  column) by :func:`evolution_statements`.
- View ``T_live``: ``SELECT *`` semantics, live rows only: a value shows when it is not a
  tombstone, newer than the row, range and partition deletions covering it and not expired; a
  row shows when its marker or any value is live; a partition with only a live static row shows
  one row with null clustering columns. ``_wt_c`` is exposed per live value (a collection: its
  newest live element). "Now" is ``now()`` unless the session sets ``ringflow.now_s``.

Read through ``T_live``: the tables keep shadowed data (a range or partition delete never
touches the rows it covers, the view applies it) and nothing is ever purged: tombstones and
expired cells stay until a purge job with a ``gc_grace`` rule exists (not written yet).
"""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import json
import math
import re
import uuid
from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from ringflow.pipeline._errors import InvalidChange, PipelineConfigError
from ringflow.pipeline._spark_types import (
    cql_sort_key,
    from_spark_value,
    to_spark_value,
)
from ringflow.schema import (
    Column,
    CqlType,
    ListType,
    MapType,
    NativeType,
    SetType,
    Table,
    TupleType,
    UserType,
)

MIN_BIGINT = -(2**63)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PG_NAME_MAX = 63

_PG_NATIVE = {
    "ascii": "text",
    "text": "text",
    "blob": "bytea",
    "boolean": "boolean",
    "tinyint": "smallint",
    "smallint": "smallint",
    "int": "integer",
    "bigint": "bigint",
    "varint": "numeric",
    "decimal": "numeric",
    "float": "real",
    "double": "double precision",
    "timestamp": "timestamptz",
    "date": "date",
    "time": "bigint",
    "uuid": "uuid",
    "timeuuid": "uuid",
    "inet": "inet",
    "duration": "text",
}


def quote(name: str) -> str:
    """A double-quoted PostgreSQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _array_element(cql_type: CqlType) -> NativeType | None:
    """The element type of a list or set stored as a PostgreSQL array, else None."""
    if isinstance(cql_type, ListType | SetType) and isinstance(cql_type.element, NativeType):
        return cql_type.element
    return None


def _is_array(cql_type: CqlType) -> bool:
    return _array_element(cql_type) is not None


def pg_type(cql_type: CqlType) -> str:
    """The PostgreSQL type of a CQL type (module docstring)."""
    if isinstance(cql_type, NativeType):
        return _PG_NATIVE[cql_type.name]
    element = _array_element(cql_type)
    if element is not None:
        return pg_type(element) + "[]"
    return "jsonb"


# --- values -------------------------------------------------------------------------------------


def to_pg_value(cql_type: CqlType, value: Any) -> object:
    """A CQL Python value as a psycopg parameter of :func:`pg_type`."""
    if value is None:
        return None
    if isinstance(cql_type, NativeType):
        return _native_to_pg(cql_type.name, value)
    element = _array_element(cql_type)
    if element is not None:
        items = list(value)
        if isinstance(cql_type, SetType):
            items.sort(key=lambda item: cql_sort_key(element, item))
        return [_native_to_pg(element.name, item) for item in items]
    return Jsonb(to_json_value(cql_type, value))


def _native_to_pg(name: str, value: Any) -> object:
    if name == "varint":
        return decimal.Decimal(int(value))
    if name == "decimal":
        return decimal.Decimal(str(value))
    if name in ("uuid", "timeuuid"):
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    if name == "inet":
        return ipaddress.ip_address(str(value))
    if name in ("timestamp", "date", "time", "duration"):
        return to_spark_value(NativeType(name), value)
    if name == "blob":
        return bytes(value)
    return value


def to_json_value(cql_type: CqlType, value: object) -> object:
    """The JSON form of a CQL value used inside ``jsonb`` columns (module docstring)."""
    if value is None:
        return None
    if isinstance(cql_type, NativeType):
        return _native_to_json(cql_type.name, value)
    spark_form = to_spark_value(cql_type, value)
    return _spark_to_json(cql_type, spark_form)


def _spark_to_json(cql_type: CqlType, value: Any) -> object:
    """JSON of a value already in :func:`to_spark_value` form (CQL order applied)."""
    if value is None:
        return None
    if isinstance(cql_type, NativeType):
        return _native_to_json(cql_type.name, from_spark_value(cql_type, value))
    if isinstance(cql_type, ListType | SetType):
        return [_spark_to_json(cql_type.element, item) for item in value]
    if isinstance(cql_type, MapType):
        return {
            json_key(_spark_to_json(cql_type.key, k)): _spark_to_json(cql_type.value, v)
            for k, v in value.items()
        }
    if isinstance(cql_type, TupleType):
        return [_spark_to_json(t, v) for t, v in zip(cql_type.elements, value, strict=True)]
    if isinstance(cql_type, UserType):
        pairs = zip(cql_type.field_names, cql_type.field_types, value, strict=True)
        return {name: _spark_to_json(t, v) for name, t, v in pairs}
    raise InvalidChange(f"no JSON form for {cql_type.cql_name()}")


def json_key(value: object) -> str:
    """A JSON object key for a map key already in JSON form."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _native_to_json(name: str, value: Any) -> object:
    if name == "blob":
        return "0x" + bytes(value).hex()
    if name in ("float", "double"):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    if name == "varint":
        return int(value)
    if name in ("timestamp", "date"):
        converted: Any = to_spark_value(NativeType(name), value)
        return str(converted.isoformat())
    if name in ("boolean", "tinyint", "smallint", "int", "bigint"):
        return value
    return to_spark_value(NativeType(name), value)


def from_json_value(cql_type: CqlType, value: Any) -> object:
    """The CQL value of :func:`to_json_value`'s form."""
    if value is None:
        return None
    if isinstance(cql_type, NativeType):
        return _native_from_json(cql_type.name, value)
    if isinstance(cql_type, ListType):
        return [from_json_value(cql_type.element, item) for item in value]
    if isinstance(cql_type, SetType):
        return [from_json_value(cql_type.element, item) for item in value]
    if isinstance(cql_type, MapType):
        return [
            (
                from_json_value(cql_type.key, _unkey(cql_type.key, k)),
                from_json_value(cql_type.value, v),
            )
            for k, v in value.items()
        ]
    if isinstance(cql_type, TupleType):
        return tuple(from_json_value(t, v) for t, v in zip(cql_type.elements, value, strict=True))
    if isinstance(cql_type, UserType):
        pairs = zip(cql_type.field_names, cql_type.field_types, strict=True)
        return {name: from_json_value(t, value.get(name)) for name, t in pairs}
    raise InvalidChange(f"no JSON form for {cql_type.cql_name()}")


_JSON_TEXT_NATIVES = frozenset(
    {
        "ascii",
        "text",
        "blob",
        "decimal",
        "timestamp",
        "date",
        "uuid",
        "timeuuid",
        "inet",
        "duration",
    }
)


def _unkey(cql_type: CqlType, key: str) -> object:
    """The JSON form of a map key from its object key (the inverse of :func:`json_key`)."""
    if isinstance(cql_type, NativeType) and cql_type.name in _JSON_TEXT_NATIVES:
        return key
    try:
        return json.loads(key)
    except ValueError:
        return key  # a non-finite float key, written as its string


def _native_from_json(name: str, value: Any) -> object:
    if name == "blob":
        return bytes.fromhex(str(value)[2:])
    if name in ("float", "double"):
        return float(value)
    if name == "varint":
        return int(value)
    if name in ("boolean", "tinyint", "smallint", "int", "bigint"):
        return value
    if name == "timestamp":
        return datetime.datetime.fromisoformat(value).astimezone(datetime.UTC).replace(tzinfo=None)
    if name == "date":
        return datetime.date.fromisoformat(value)
    return from_spark_value(NativeType(name), value)


def from_pg_value(cql_type: CqlType, value: Any) -> object:
    """The CQL value of a value psycopg read from a column of :func:`pg_type`."""
    if value is None:
        return None
    if isinstance(cql_type, NativeType):
        return _native_from_pg(cql_type.name, value)
    element = _array_element(cql_type)
    if element is not None:
        return [_native_from_pg(element.name, item) for item in value]
    return from_json_value(cql_type, value)


def _native_from_pg(name: str, value: Any) -> object:
    if name == "varint":
        return int(value)
    if name == "decimal":
        return decimal.Decimal(value)
    if name == "inet":
        return ipaddress.ip_address(str(getattr(value, "ip", value)))
    if name == "timestamp":
        return value.astimezone(datetime.UTC).replace(tzinfo=None)
    if name in ("time", "duration"):
        return from_spark_value(NativeType(name), value)
    if name == "blob":
        return bytes(value)
    return value


# --- names ---------------------------------------------------------------------------------------


def check_target_name(target: str, table: Table) -> None:
    """Refuse a target name PostgreSQL would truncate, mangle or misread."""
    parts = target.split(".")
    if len(parts) > 2 or not all(_IDENTIFIER.match(p) for p in parts):
        raise PipelineConfigError(
            f"target table {target!r} must be name or schema.name of letters, digits and _"
        )
    longest = max([len("__partition_deletes"), len("__range_bounds"), len("__static")])
    for column in table.columns:
        if column.type.is_multicell:
            longest = max(longest, len("__cells_") + len(column.name))
        if len("_wx_") + len(column.name) > _PG_NAME_MAX:
            raise PipelineConfigError(f"column {column.name!r} is too long for PostgreSQL")
    if len(parts[-1]) + longest > _PG_NAME_MAX:
        raise PipelineConfigError(
            f"target table name {parts[-1]!r} is too long: PostgreSQL keeps {_PG_NAME_MAX} "
            f"characters and ringflow adds up to {longest}"
        )


class Target:
    """The names and SQL of one target for one base table."""

    def __init__(self, target: str, table: Table) -> None:
        check_target_name(target, table)
        self.table = table
        parts = target.split(".")
        self.schema_prefix = quote(parts[0]) + "." if len(parts) == 2 else ""
        self.base_name = parts[-1]
        self.pk = table.partition_key_columns
        self.ck = table.clustering_columns

    def name(self, suffix: str = "") -> str:
        return self.schema_prefix + quote(self.base_name + suffix)

    @property
    def atomic_regular(self) -> list[Column]:
        return [c for c in self.table.regular_columns if not c.type.is_multicell]

    @property
    def collection_columns(self) -> list[Column]:
        return [c for c in self.table.columns if c.type.is_multicell]

    def cells_name(self, column: Column) -> str:
        return self.name(f"__cells_{column.name}")

    # --- DDL ------------------------------------------------------------------------------------

    def _key_defs(self, columns: Sequence[Column]) -> list[tuple[str, str]]:
        return [(c.name, f"{pg_type(c.type)} NOT NULL") for c in columns]

    def _value_defs(self, columns: Sequence[Column]) -> list[tuple[str, str]]:
        defs: list[tuple[str, str]] = []
        for c in columns:
            if c.type.is_multicell:
                defs.append(("_ct_" + c.name, "bigint"))
                continue
            defs.append((c.name, pg_type(c.type)))
            defs += [(p + c.name, t) for p, t in _CELL_META]
        return defs

    def tables(self) -> list[tuple[str, list[tuple[str, str]], list[str]]]:
        """(name suffix, column definitions, primary key) of every table of the target."""
        pk = [c.name for c in self.pk]
        rows = [*self._key_defs(self.pk + self.ck), ("_ck", "bytea NOT NULL"), *_MARKER_META]
        rows.append(("_deleted_at", "bigint"))
        rows += self._value_defs(self.table.regular_columns)
        tables = [("", rows, [*pk, *(c.name for c in self.ck)])]
        if self.table.static_columns:
            statics = self._key_defs(self.pk) + self._value_defs(self.table.static_columns)
            tables.append(("__static", statics, pk))
        for column in self.collection_columns:
            cells = [
                *self._key_defs(self.pk),
                ("_ck", "bytea NOT NULL"),
                ("path", "bytea NOT NULL"),
            ]
            cells += [("key_text", "text"), ("elem", _element_pg_type(column.type))]
            cells += [("wt", "bigint NOT NULL"), ("wx", "bytea NOT NULL"), ("exp", "bigint")]
            cells += [("tomb", "boolean NOT NULL")]
            tables.append((f"__cells_{column.name}", cells, [*pk, "_ck", "path"]))
        tables.append(
            ("__partition_deletes", [*self._key_defs(self.pk), ("ts", "bigint NOT NULL")], pk)
        )
        bounds = [
            *self._key_defs(self.pk),
            ("time", "uuid NOT NULL"),
            ("seq", "integer NOT NULL"),
            ("op", "smallint NOT NULL"),
            ("edge", "bytea NOT NULL"),
            ("ts", "bigint NOT NULL"),
        ]
        tables.append(("__range_bounds", bounds, [*pk, "time", "seq"]))
        batches = [("query_id", "text NOT NULL"), ("batch_id", "bigint NOT NULL")]
        batches += [
            ("rows", "bigint NOT NULL"),
            ("committed_at", "timestamptz NOT NULL DEFAULT now()"),
        ]
        tables.append(("__batches", batches, ["query_id", "batch_id"]))
        versions = [("version", "integer NOT NULL"), ("table_json", "text NOT NULL")]
        versions.append(("recorded_at", "timestamptz NOT NULL DEFAULT now()"))
        tables.append((SCHEMA_SUFFIX, versions, ["version"]))
        return tables

    def create_sql(self, suffix: str) -> str:
        """``CREATE TABLE IF NOT EXISTS`` of the target's table ``suffix`` (one line)."""
        _, columns, key = next(t for t in self.tables() if t[0] == suffix)
        parts = [f"{quote(n)} {d}" for n, d in columns]
        parts.append(f"PRIMARY KEY ({', '.join(map(quote, key))})")
        return f"CREATE TABLE IF NOT EXISTS {self.name(suffix)} ({', '.join(parts)})"

    def ddl(self) -> list[str]:
        """``CREATE TABLE IF NOT EXISTS`` of every table of the target (not the view)."""
        return [self.create_sql(suffix) for suffix, _, _ in self.tables()]


SCHEMA_SUFFIX = "__schema"
OWNED_SUFFIXES = frozenset({"__partition_deletes", "__range_bounds", "__batches", SCHEMA_SUFFIX})
"""Tables whose columns never depend on the base table's value columns: made when absent."""


def evolution_statements(
    target: Target, present: dict[str, set[str]]
) -> tuple[list[str], list[str]]:
    """(statements that change the data tables: ``ALTER TABLE ... ADD COLUMN`` of the columns
    ``present`` (suffix -> column names of each existing table) lacks, ``CREATE TABLE`` of the
    data tables that do not exist; the ``CREATE TABLE IF NOT EXISTS`` of the absent tables
    ringflow owns, ``OWNED_SUFFIXES``)."""
    altering: list[str] = []
    owned: list[str] = []
    for suffix, columns, _ in target.tables():
        found = present.get(suffix)
        if found is None:
            (owned if suffix in OWNED_SUFFIXES else altering).append(target.create_sql(suffix))
            continue
        for name, definition in columns:
            if name not in found:
                altering.append(
                    f"ALTER TABLE {target.name(suffix)} ADD COLUMN {quote(name)} {definition}"
                )
    return altering, owned


_CELL_META = (("_wt_", "bigint"), ("_wx_", "bytea"), ("_exp_", "bigint"))
_MARKER_META = (("_marker_wt", "bigint"), ("_marker_wx", "bytea"), ("_marker_exp", "bigint"))


def _element_pg_type(cql_type: CqlType) -> str:
    """The ``elem`` column of a collection's cells: what the assembled value aggregates."""
    if isinstance(cql_type, ListType | SetType):
        element = cql_type.element
        return pg_type(element) if isinstance(element, NativeType) else "jsonb"
    return "jsonb"


def element_to_pg(cql_type: CqlType, key: Any, value: object) -> tuple[str | None, object]:
    """(``key_text``, ``elem``) of one element of a non-frozen collection or UDT."""
    if isinstance(cql_type, ListType):
        return None, _element_value(cql_type.element, value)
    if isinstance(cql_type, SetType):
        return None, _element_value(cql_type.element, key)
    if isinstance(cql_type, MapType):
        return json_key(to_json_value(cql_type.key, key)), Jsonb(
            to_json_value(cql_type.value, value)
        )
    if isinstance(cql_type, UserType):
        index = int(key)
        field_type = cql_type.field_types[index]
        return cql_type.field_names[index], Jsonb(to_json_value(field_type, value))
    raise InvalidChange(f"{cql_type.cql_name()} is not a non-frozen collection or UDT")


def _element_value(element: CqlType, value: object) -> object:
    if isinstance(element, NativeType):
        return _native_to_pg(element.name, value)
    return Jsonb(to_json_value(element, value))


# --- statements -------------------------------------------------------------------------------


class Statement:
    """One parametrised ``INSERT ... ON CONFLICT`` and the column names of its parameters."""

    def __init__(self, sql: str, columns: Sequence[str]) -> None:
        self.sql = sql
        self.columns = list(columns)

    def params(self, values: dict[str, object]) -> tuple[object, ...]:
        return tuple(values.get(name) for name in self.columns)


def _guarded(prefix_wt: str, prefix_wx: str, names: Sequence[str]) -> list[str]:
    """SET clauses replacing ``names`` only when the incoming (timestamp, tie) is greater."""
    newer = (
        f"(EXCLUDED.{quote(prefix_wt)}, EXCLUDED.{quote(prefix_wx)}) > "
        f"(coalesce(t.{quote(prefix_wt)}, {MIN_BIGINT}), coalesce(t.{quote(prefix_wx)}, ''::bytea))"
    )
    return [
        f"{quote(n)} = CASE WHEN {newer} THEN EXCLUDED.{quote(n)} ELSE t.{quote(n)} END"
        for n in names
    ]


def _insert(name: str, columns: list[tuple[str, str]], conflict: str, update: str) -> Statement:
    names = ", ".join(quote(n) for n, _ in columns)
    values = ", ".join(f"%s::{t}" for _, t in columns)
    sql = f"INSERT INTO {name} AS t ({names}) VALUES ({values}) ON CONFLICT ({conflict}) {update}"
    return Statement(sql, [n for n, _ in columns])


def _value_columns(columns: Sequence[Column]) -> tuple[list[tuple[str, str]], list[str]]:
    defs: list[tuple[str, str]] = []
    sets: list[str] = []
    for c in columns:
        if c.type.is_multicell:
            tomb = "_ct_" + c.name
            defs.append((tomb, "bigint"))
            sets.append(f"{quote(tomb)} = greatest(t.{quote(tomb)}, EXCLUDED.{quote(tomb)})")
            continue
        group = [c.name, "_wt_" + c.name, "_wx_" + c.name, "_exp_" + c.name]
        defs += list(zip(group, [pg_type(c.type), "bigint", "bytea", "bigint"], strict=True))
        sets += _guarded("_wt_" + c.name, "_wx_" + c.name, group)
    return defs, sets


def row_statement(target: Target) -> Statement:
    """Upsert of one clustered row's marker, tombstone and columns, each guarded by LWW."""
    keys = [(c.name, pg_type(c.type)) for c in target.pk + target.ck]
    meta = [("_ck", "bytea"), *((n, t) for n, t in _MARKER_META), ("_deleted_at", "bigint")]
    values, sets = _value_columns(target.table.regular_columns)
    sets = [
        *_guarded("_marker_wt", "_marker_wx", [n for n, _ in _MARKER_META]),
        "_deleted_at = greatest(t._deleted_at, EXCLUDED._deleted_at)",
        *sets,
    ]
    conflict = ", ".join(quote(n) for n, _ in keys)
    return _insert(
        target.name(), keys + meta + values, conflict, "DO UPDATE SET " + ", ".join(sets)
    )


def static_statement(target: Target) -> Statement:
    """Upsert of a partition's static columns, each guarded by LWW."""
    keys = [(c.name, pg_type(c.type)) for c in target.pk]
    values, sets = _value_columns(target.table.static_columns)
    conflict = ", ".join(quote(n) for n, _ in keys)
    return _insert(
        target.name("__static"), keys + values, conflict, "DO UPDATE SET " + ", ".join(sets)
    )


def cells_statement(target: Target, column: Column) -> Statement:
    """Upsert of one element cell of a non-frozen collection, guarded by LWW."""
    keys = [(c.name, pg_type(c.type)) for c in target.pk]
    cells = [("_ck", "bytea"), ("path", "bytea"), ("key_text", "text")]
    cells += [("elem", _element_pg_type(column.type)), ("wt", "bigint"), ("wx", "bytea")]
    cells += [("exp", "bigint"), ("tomb", "boolean")]
    conflict = ", ".join([*(quote(n) for n, _ in keys), "_ck", "path"])
    moved = ["key_text", "elem", "wt", "wx", "exp", "tomb"]
    update = "DO UPDATE SET " + ", ".join(f"{n} = EXCLUDED.{n}" for n in moved)
    update += " WHERE (EXCLUDED.wt, EXCLUDED.wx) > (t.wt, t.wx)"
    return _insert(target.cells_name(column), keys + cells, conflict, update)


def partition_delete_statement(target: Target) -> Statement:
    keys = [(c.name, pg_type(c.type)) for c in target.pk]
    conflict = ", ".join(quote(n) for n, _ in keys)
    update = "DO UPDATE SET ts = greatest(t.ts, EXCLUDED.ts)"
    return _insert(target.name("__partition_deletes"), [*keys, ("ts", "bigint")], conflict, update)


def range_bound_statement(target: Target) -> Statement:
    keys = [(c.name, pg_type(c.type)) for c in target.pk]
    bound = [("time", "uuid"), ("seq", "integer"), ("op", "smallint"), ("edge", "bytea")]
    conflict = ", ".join([*(quote(n) for n, _ in keys), "time", "seq"])
    columns = [*keys, *bound, ("ts", "bigint")]
    return _insert(target.name("__range_bounds"), columns, conflict, "DO NOTHING")


def batch_statement(target: Target) -> Statement:
    columns = [("query_id", "text"), ("batch_id", "bigint"), ("rows", "bigint")]
    return _insert(target.name("__batches"), columns, "query_id, batch_id", "DO NOTHING")


# --- the live view ------------------------------------------------------------------------------

_NOW = (
    "(SELECT coalesce(nullif(current_setting('ringflow.now_s', true), '')::bigint, "
    "floor(extract(epoch FROM now()))::bigint) AS s)"
)


def _same_key(target: Target, left: str, right: str) -> str:
    return " AND ".join(f"{left}.{quote(c.name)} = {right}.{quote(c.name)}" for c in target.pk)


def _live_value_exprs(target: Target, columns: Sequence[Column], ck_expr: str) -> list[str]:
    """Select-list items ``c`` and ``_wt_c`` of source ``s`` (with ``_shadow``), now ``n``."""
    items: list[str] = []
    for c in columns:
        name, wt = quote(c.name), quote("_wt_" + c.name)
        if not c.type.is_multicell:
            live = (
                f"(s.{wt} > s._shadow AND s.{name} IS NOT NULL AND "
                f"(s.{quote('_exp_' + c.name)} IS NULL OR s.{quote('_exp_' + c.name)} > n.s))"
            )
            items += [f"CASE WHEN {live} THEN s.{name} END AS {name}"]
            items += [f"CASE WHEN {live} THEN s.{wt} END AS {wt}"]
            continue
        floor = f"greatest(s._shadow, coalesce(s.{quote('_ct_' + c.name)}, {MIN_BIGINT}))"
        cond = (
            f"{_same_key(target, 'e', 's')} AND e._ck = {ck_expr} AND e.wt > {floor} "
            "AND NOT e.tomb AND (e.exp IS NULL OR e.exp > n.s)"
        )
        cells = target.cells_name(c)
        if _is_array(c.type):
            value = (
                f"NULLIF(ARRAY(SELECT e.elem FROM {cells} e WHERE {cond} ORDER BY e.path), '{{}}')"
            )
        elif isinstance(c.type, ListType | SetType):
            value = f"(SELECT jsonb_agg(e.elem ORDER BY e.path) FROM {cells} e WHERE {cond})"
        else:
            value = (
                "(SELECT jsonb_object_agg(e.key_text, e.elem ORDER BY e.path) "
                f"FROM {cells} e WHERE {cond})"
            )
        items += [f"{value} AS {name}", f"(SELECT max(e.wt) FROM {cells} e WHERE {cond}) AS {wt}"]
    return items


def _any_value(columns: Sequence[Column], alias: str) -> str:
    return " OR ".join(f"{alias}.{quote(c.name)} IS NOT NULL" for c in columns) or "false"


def view_sql(target: Target) -> str:
    """``CREATE OR REPLACE VIEW T_live`` (module docstring)."""
    pk_list = ", ".join(f"s.{quote(c.name)}" for c in target.pk + target.ck)
    regular = target.table.regular_columns
    bounds = target.name("__range_bounds")
    ranges = (
        f"SELECT {', '.join(f'b.{quote(c.name)}' for c in target.pk)}, b.edge AS lo, "
        f"e.edge AS hi, b.ts FROM {bounds} b JOIN {bounds} e ON {_same_key(target, 'b', 'e')} "
        "AND e.time = b.time AND e.seq = b.seq + 1 WHERE b.op IN (5, 6) AND e.op IN (7, 8)"
    )
    shadow = (
        f"SELECT r.*, coalesce(greatest(r._deleted_at, p.ts, (SELECT max(rt.ts) FROM rts rt "
        f"WHERE {_same_key(target, 'rt', 'r')} AND r._ck >= rt.lo AND r._ck < rt.hi)), "
        f"{MIN_BIGINT}) AS _shadow FROM {target.name()} r "
        f"LEFT JOIN {target.name('__partition_deletes')} p ON {_same_key(target, 'p', 'r')}"
    )
    marker = "(s._marker_wt > s._shadow AND (s._marker_exp IS NULL OR s._marker_exp > n.s))"
    rows = ", ".join(
        [pk_list, *_live_value_exprs(target, regular, "s._ck"), f"{marker} AS _marker_live"]
    )
    ctes = [
        f"rts AS ({ranges})",
        f"shadowed AS ({shadow})",
        f"all_rows AS (SELECT {rows} FROM shadowed s CROSS JOIN {_NOW} n)",
        "live_rows AS (SELECT * FROM all_rows r WHERE r._marker_live OR "
        f"{_any_value(regular, 'r')})",
    ]
    keys = [quote(c.name) for c in target.pk + target.ck]
    row_values = [x for c in regular for x in (quote(c.name), quote("_wt_" + c.name))]
    if not target.table.static_columns:
        select = ", ".join(f"lr.{n}" for n in keys + row_values)
        return _view(target, ctes, f"SELECT {select} FROM live_rows lr")
    return _view(target, ctes + _static_ctes(target), _static_select(target, keys, row_values))


def _static_ctes(target: Target) -> list[str]:
    statics = target.table.static_columns
    source = (
        f"SELECT x.*, coalesce(p.ts, {MIN_BIGINT}) AS _shadow FROM {target.name('__static')} x "
        f"LEFT JOIN {target.name('__partition_deletes')} p ON {_same_key(target, 'p', 'x')}"
    )
    pk_list = ", ".join(f"s.{quote(c.name)}" for c in target.pk)
    items = ", ".join([pk_list, *_live_value_exprs(target, statics, "''::bytea")])
    return [
        f"all_static AS (SELECT {items} FROM ({source}) s CROSS JOIN {_NOW} n)",
        f"live_static AS (SELECT * FROM all_static st WHERE {_any_value(statics, 'st')})",
    ]


def _static_select(target: Target, keys: list[str], row_values: list[str]) -> str:
    statics = target.table.static_columns
    static_values = [x for c in statics for x in (quote(c.name), quote("_wt_" + c.name))]
    with_rows = ", ".join(
        [
            *(f"lr.{k}" for k in keys),
            *(f"ls.{v}" for v in static_values),
            *(f"lr.{v}" for v in row_values),
        ]
    )
    nulls = [f"NULL::{pg_type(c.type)} AS {quote(c.name)}" for c in target.ck]
    row_nulls = [
        x
        for c in target.table.regular_columns
        for x in (f"NULL::{pg_type(c.type)}", "NULL::bigint")
    ]
    alone = ", ".join(
        [
            *(f"ls.{quote(c.name)}" for c in target.pk),
            *nulls,
            *(f"ls.{v}" for v in static_values),
            *row_nulls,
        ]
    )
    return (
        f"SELECT {with_rows} FROM live_rows lr LEFT JOIN live_static ls "
        f"ON {_same_key(target, 'ls', 'lr')} UNION ALL SELECT {alone} FROM live_static ls "
        f"WHERE NOT EXISTS (SELECT 1 FROM live_rows lr WHERE {_same_key(target, 'lr', 'ls')})"
    )


def _view(target: Target, ctes: list[str], select: str) -> str:
    body = "WITH " + ",\n".join(ctes) + "\n" + select
    return f"CREATE OR REPLACE VIEW {target.name('_live')} AS\n{body}"
