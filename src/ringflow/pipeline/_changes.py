"""The change model: one CDC delta of one row of one base table, and its Spark row form.

A :class:`Change` is one delta row of ``<table>_scylla_cdc_log`` (reference scylla-cdc.md §5)
decoded into Python values: the operation (``cdc$operation``), the write time (``cdc$time``, a
version-1 timeuuid whose time is the write timestamp in µs), ``cdc$batch_seq_no``, ``cdc$ttl``,
the base key columns, the changed value columns, the ``cdc$deleted_X`` flags and the
``cdc$deleted_elements_X`` sets. Rules, exactly as the log has them:

- Keys: every change carries the whole partition key. An insert, a row delete and a row update
  carry the whole clustering key; an update with no clustering key (in a table that has one)
  changes the static row; a partition delete carries none; a range delete is *two* changes with
  the same ``time`` and consecutive ``batch_seq_no``: the start bound (operation 5 inclusive / 6
  exclusive) then the end bound (7 / 8), each with its clustering prefix (no prefix = unbounded).
- Values are the log's value types (``ringflow.cdc.log_value_type``): a frozen value whole; a
  non-frozen ``list`` as a ``dict`` timeuuid → element (its cells' keys), a non-frozen set, map or
  UDT as the added elements/fields (a UDT's untouched fields are ``None``). ``deleted`` names the
  columns set to null; for a non-frozen collection this is its tombstone, which the log shows at
  the write time although the write put it 1 µs earlier (``SET c = {...}`` overwrites at
  ``T - 1``), see :mod:`ringflow.pipeline._materialize`. ``deleted_elements`` holds removed
  element keys (list: timeuuids, set: elements, map: keys, UDT: field indices).
- Pre- and post-images (operations 0 and 9) are carried through sinks that store changes (the
  lake) and ignored by those that apply them (materialize, PostgreSQL): they are not deltas.

The Spark row schema (:func:`change_schema`) has the log's meta columns first, named with the
log's ``cdc$`` prefix so that no base column (``time`` and ``ttl`` are common names) can collide
with them: ``cdc$stream_id binary``, ``cdc$time string`` (the timeuuid), ``cdc$time_us long``,
``cdc$batch_seq_no int``, ``cdc$operation byte``, ``cdc$operation_name string``, ``cdc$ttl
long``; then each base key column; then per static/regular column ``X``: ``X`` (CQL → Spark as
in :mod:`ringflow.pipeline._spark_types`, applied to the log value type), ``cdc$deleted_X
boolean`` and, for non-frozen collections and UDTs, ``cdc$deleted_elements_X array``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import types as st

from ringflow.cdc import (
    CdcOperation,
    deleted_column_name,
    deleted_elements_column_name,
    deleted_elements_type,
    log_value_type,
)
from ringflow.pipeline._errors import InvalidChange, PipelineConfigError
from ringflow.pipeline._spark_types import (
    arrow_type,
    from_spark_value,
    spark_type,
    to_spark_value,
)
from ringflow.schema import (
    CdcOptions,
    ClusteringOrder,
    Column,
    ColumnKind,
    CqlType,
    ListType,
    MapType,
    NativeType,
    SchemaError,
    SetType,
    Table,
    TableOptions,
    TupleType,
    UserType,
    timeuuid_to_micros,
)

STREAM_ID_FIELD = "cdc$stream_id"
TIME_FIELD = "cdc$time"
TIME_US_FIELD = "cdc$time_us"
BATCH_SEQ_NO_FIELD = "cdc$batch_seq_no"
OPERATION_FIELD = "cdc$operation"
OPERATION_NAME_FIELD = "cdc$operation_name"
TTL_FIELD = "cdc$ttl"

META_FIELDS: tuple[tuple[str, st.DataType, Any], ...] = (
    (STREAM_ID_FIELD, st.BinaryType(), pa.binary()),
    (TIME_FIELD, st.StringType(), pa.string()),
    (TIME_US_FIELD, st.LongType(), pa.int64()),
    (BATCH_SEQ_NO_FIELD, st.IntegerType(), pa.int32()),
    (OPERATION_FIELD, st.ByteType(), pa.int8()),
    (OPERATION_NAME_FIELD, st.StringType(), pa.string()),
    (TTL_FIELD, st.LongType(), pa.int64()),
)

RANGE_START_OPERATIONS = frozenset(
    {CdcOperation.RANGE_DELETE_START_INCLUSIVE, CdcOperation.RANGE_DELETE_START_EXCLUSIVE}
)
RANGE_END_OPERATIONS = frozenset(
    {CdcOperation.RANGE_DELETE_END_INCLUSIVE, CdcOperation.RANGE_DELETE_END_EXCLUSIVE}
)
IMAGE_OPERATIONS = frozenset({CdcOperation.PRE_IMAGE, CdcOperation.POST_IMAGE})


@dataclass(frozen=True, slots=True)
class Change:
    """One CDC delta (or image) row of one base table, in Python values (module docstring)."""

    keyspace: str
    table: str
    operation: CdcOperation
    time: uuid.UUID
    key: Mapping[str, object]
    batch_seq_no: int = 0
    values: Mapping[str, object] = field(default_factory=dict)
    deleted: frozenset[str] = frozenset()
    deleted_elements: Mapping[str, frozenset[object]] = field(default_factory=dict)
    ttl_s: int | None = None
    stream_id: bytes = b""

    def __post_init__(self) -> None:
        if self.time.version != 1:
            raise InvalidChange(f"change time {self.time} is not a version-1 (time) UUID")
        if self.batch_seq_no < 0:
            raise InvalidChange(f"batch_seq_no must be >= 0, got {self.batch_seq_no}")
        if self.ttl_s is not None and self.ttl_s <= 0:
            raise InvalidChange(f"ttl_s must be positive or None, got {self.ttl_s}")
        object.__setattr__(self, "operation", CdcOperation(self.operation))

    @property
    def time_us(self) -> int:
        """The write timestamp in µs since the epoch (the time of ``cdc$time``)."""
        return timeuuid_to_micros(self.time)

    @property
    def table_name(self) -> str:
        """``keyspace.table``."""
        return f"{self.keyspace}.{self.table}"


# --- validation against the base table ---------------------------------------------------------


def validate_change(table: Table, change: Change) -> None:
    """Raise InvalidChange naming the table, the change and the rule it breaks."""
    if (change.keyspace, change.table) != (table.keyspace, table.name):
        raise InvalidChange(f"{_where(table, change)}: it belongs to {change.table_name}")
    prefix = _validate_key(table, change)
    touched = set(change.values) | change.deleted | set(change.deleted_elements)
    for name in touched:
        column = _column(table, change, name)
        if column.is_primary_key:
            raise InvalidChange(f"{_where(table, change)}: key column {name!r} given as a value")
        if name in change.deleted_elements and not column.type.is_multicell:
            raise InvalidChange(
                f"{_where(table, change)}: {name!r} is not a non-frozen collection or UDT"
            )
    if change.operation in IMAGE_OPERATIONS:
        return
    if change.operation not in (CdcOperation.INSERT, CdcOperation.UPDATE) and touched:
        raise InvalidChange(
            f"{_where(table, change)}: a {change.operation.name} carries no column values"
        )
    static = bool(table.clustering_columns) and prefix == 0  # no clustering value at all
    for name in touched:
        if (table.column(name).kind is ColumnKind.STATIC) != static:
            kind = "static" if static else "clustered row"
            raise InvalidChange(
                f"{_where(table, change)}: column {name!r} cannot change in a {kind} change"
            )


def _where(table: Table, change: Change) -> str:
    """The change, for an error message (made only when one is raised)."""
    return f"change {change.operation.name} at {change.time} of {table.keyspace}.{table.name}"


def _column(table: Table, change: Change, name: str) -> Column:
    try:
        return table.column(name)
    except SchemaError:
        raise InvalidChange(f"{_where(table, change)}: no column {name!r}") from None


def _validate_key(table: Table, change: Change) -> int:
    """Check the key columns; the number of clustering values given (a prefix)."""
    for name in change.key:
        if not _column(table, change, name).is_primary_key:
            raise InvalidChange(f"{_where(table, change)}: {name!r} is not a key column")
    for column in table.partition_key_columns:
        if change.key.get(column.name) is None:
            raise InvalidChange(
                f"{_where(table, change)}: partition key column {column.name!r} is missing"
            )
    present = [change.key.get(c.name) is not None for c in table.clustering_columns]
    prefix = present.index(False) if False in present else len(present)
    if any(present[prefix:]):
        raise InvalidChange(
            f"{_where(table, change)}: clustering key values must be a prefix, got {present}"
        )
    operation = change.operation
    full = prefix == len(present)
    if operation in (CdcOperation.INSERT, CdcOperation.ROW_DELETE) and not full:
        raise InvalidChange(f"{_where(table, change)}: needs the whole clustering key")
    if operation is CdcOperation.UPDATE and not (full or prefix == 0):
        raise InvalidChange(
            f"{_where(table, change)}: an update needs the whole clustering key or none"
        )
    if operation is CdcOperation.PARTITION_DELETE and prefix:
        raise InvalidChange(
            f"{_where(table, change)}: a partition delete carries no clustering key"
        )
    return prefix


def clustering_prefix(table: Table, change: Change) -> tuple[object, ...]:
    """The change's clustering key values, up to the first absent one."""
    prefix: list[object] = []
    for column in table.clustering_columns:
        value = change.key.get(column.name)
        if value is None:
            break
        prefix.append(value)
    return tuple(prefix)


# --- Spark and Arrow schemas ------------------------------------------------------------------


def value_columns(table: Table) -> tuple[Column, ...]:
    """The static and regular columns, in the order the change schema lists them."""
    return table.static_columns + table.regular_columns


def _change_fields(table: Table) -> list[tuple[str, CqlType | None, st.DataType, Any]]:
    fields: list[tuple[str, CqlType | None, st.DataType, Any]] = [
        (name, None, spark, arrow) for name, spark, arrow in META_FIELDS
    ]
    for column in table.primary_key_columns:
        fields.append((column.name, column.type, spark_type(column.type), arrow_type(column.type)))
    for column in value_columns(table):
        log_type = log_value_type(column.type)
        fields.append((column.name, log_type, spark_type(log_type), arrow_type(log_type)))
        fields.append((deleted_column_name(column.name), None, st.BooleanType(), pa.bool_()))
        if column.type.is_multicell:
            element_type = deleted_elements_type(column.type)
            fields.append(
                (
                    deleted_elements_column_name(column.name),
                    element_type,
                    spark_type(element_type),
                    arrow_type(element_type),
                )
            )
    return fields


def change_schema(table: Table) -> st.StructType:
    """The Spark schema of the change rows of ``table`` (module docstring)."""
    return st.StructType(
        [st.StructField(name, spark) for name, _, spark, _ in _change_fields(table)]
    )


def check_change_schema(table: Table, schema: st.StructType) -> None:
    """PipelineConfigError unless ``schema`` has the names and types of the change schema."""
    expected = [(f.name, f.dataType.simpleString()) for f in change_schema(table).fields]
    actual = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    if expected != actual:
        missing = [f for f in expected if f not in actual]
        extra = [f for f in actual if f not in expected]
        raise PipelineConfigError(
            f"the DataFrame is not the change schema of {table.keyspace}.{table.name}: "
            f"missing or different {missing[:5]}, unexpected {extra[:5]}"
        )


def change_arrow_schema(table: Table) -> Any:
    """The Arrow schema matching :func:`change_schema` (timestamps in UTC)."""
    return pa.schema([pa.field(name, arrow) for name, _, _, arrow in _change_fields(table)])


def change_to_row(table: Table, change: Change) -> tuple[object, ...]:
    """The Spark row (a tuple in :func:`change_schema` order) of a validated change."""
    validate_change(table, change)
    row: list[object] = [
        change.stream_id,
        str(change.time),
        change.time_us,
        change.batch_seq_no,
        int(change.operation),
        change.operation.name,
        change.ttl_s,
    ]
    for column in table.primary_key_columns:
        row.append(to_spark_value(column.type, change.key.get(column.name)))
    for column in value_columns(table):
        row.append(to_spark_value(log_value_type(column.type), change.values.get(column.name)))
        row.append(column.name in change.deleted)
        if column.type.is_multicell:
            removed = change.deleted_elements.get(column.name)
            element_type = deleted_elements_type(column.type)
            row.append(None if removed is None else to_spark_value(element_type, removed))
    return tuple(row)


def change_to_arrow_row(table: Table, change: Change) -> dict[str, object]:
    """The change as a dict keyed by field name (for ``pyarrow.Table.from_pylist``)."""
    names = change_schema(table).fieldNames()
    return dict(zip(names, change_to_row(table, change), strict=True))


def change_from_row(table: Table, row: Any) -> Change:
    """The change of a Spark ``Row`` or a ``Mapping`` (e.g. Arrow ``to_pylist``) of the schema."""
    return ChangeReader(table).read(row)


class ChangeReader:
    """:func:`change_from_row` for many rows of one table: what each column needs (its log
    value type, its deleted and deleted-elements field names) worked out once."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._keys = tuple((c.name, c.type) for c in table.primary_key_columns)
        self._values = tuple(
            (
                column.name,
                log_value_type(column.type),
                deleted_column_name(column.name),
                deleted_elements_column_name(column.name) if column.type.is_multicell else None,
                deleted_elements_type(column.type) if column.type.is_multicell else None,
            )
            for column in value_columns(table)
        )

    def read(self, row: Any) -> Change:
        """The validated change of one row (InvalidChange naming the rule it breaks)."""
        table = self.table
        fields: Mapping[str, Any] = row.asDict() if hasattr(row, "asDict") else row
        try:
            operation = CdcOperation(int(fields[OPERATION_FIELD]))
            time = uuid.UUID(str(fields[TIME_FIELD]))
        except (KeyError, ValueError, TypeError) as error:
            raise InvalidChange(
                f"row of {table.keyspace}.{table.name} has no valid meta: {error}"
            ) from None
        key = {}
        for name, key_type in self._keys:
            given = fields.get(name)
            if given is not None:
                key[name] = from_spark_value(key_type, given)
        values: dict[str, object] = {}
        deleted: set[str] = set()
        removed: dict[str, frozenset[object]] = {}
        for name, value_type, deleted_name, elements_name, elements_type in self._values:
            value = fields.get(name)
            if value is not None:
                values[name] = from_spark_value(value_type, value)
            if fields.get(deleted_name):
                deleted.add(name)
            if elements_name is not None and elements_type is not None:
                elements = fields.get(elements_name)
                if elements is not None:
                    as_set: Any = from_spark_value(elements_type, elements)
                    removed[name] = frozenset(as_set)
        ttl = fields.get(TTL_FIELD)
        change = Change(
            table.keyspace,
            table.name,
            operation,
            time,
            key,
            int(fields.get(BATCH_SEQ_NO_FIELD) or 0),
            values,
            frozenset(deleted),
            removed,
            None if ttl is None else int(ttl),
            bytes(fields.get(STREAM_ID_FIELD) or b""),
        )
        validate_change(table, change)
        return change


def change_from_log_row(table: Table, row: Mapping[str, Any]) -> Change:
    """The change of one ``<table>_scylla_cdc_log`` row given as column name → Python value
    (as the codec or the Python driver decodes it)."""
    values: dict[str, object] = {}
    deleted: set[str] = set()
    removed: dict[str, frozenset[object]] = {}
    for column in value_columns(table):
        if row.get(column.name) is not None:
            values[column.name] = row[column.name]
        if row.get(deleted_column_name(column.name)):
            deleted.add(column.name)
        elements = row.get(deleted_elements_column_name(column.name))
        if elements is not None:
            removed[column.name] = frozenset(elements)
    ttl = row.get("cdc$ttl")
    change = Change(
        table.keyspace,
        table.name,
        CdcOperation(int(row["cdc$operation"])),
        row["cdc$time"],
        {c.name: row[c.name] for c in table.primary_key_columns if row.get(c.name) is not None},
        int(row.get("cdc$batch_seq_no") or 0),
        values,
        frozenset(deleted),
        removed,
        None if not ttl else int(ttl),
        bytes(row.get("cdc$stream_id") or b""),
    )
    validate_change(table, change)
    return change


def _same(value: object) -> object:
    return value


_AS_IS = frozenset(
    {"ascii", "text", "varchar", "int", "bigint", "smallint", "tinyint", "boolean", "float",
     "double", "counter"}
)  # fmt: skip


def _converted(cql_type: CqlType) -> CqlType | None:
    """``cql_type``, or None when its values reach Spark as the driver and the codec give them
    (``str``, ``int``, ``float``, ``bool``: ``plain_value`` and ``to_spark_value`` return
    them unchanged)."""
    if isinstance(cql_type, NativeType) and cql_type.name in _AS_IS:
        return None
    return cql_type


def log_row_converter(
    table: Table, plain: Callable[[object], object] = _same
) -> Callable[[Mapping[str, Any]], tuple[object, ...]]:
    """The source's per-row path: a function giving, for a log row of ``table`` (column name ->
    driver value, each key and value column passed through ``plain`` first), the same tuple as
    ``change_to_row(table, change_from_log_row(table, row))`` without building the ``Change``
    or validating it twice (about a third of the cost). The rows come from the cluster's own
    CDC writer; an operation code it does not know is still refused (InvalidChange)."""
    keys = [(c.name, _converted(c.type)) for c in table.primary_key_columns]
    columns = [
        (
            c.name,
            _converted(log_value_type(c.type)),
            deleted_column_name(c.name),
            (
                (deleted_elements_column_name(c.name), deleted_elements_type(c.type))
                if c.type.is_multicell
                else None
            ),
        )
        for c in value_columns(table)
    ]
    names = {int(operation): operation.name for operation in CdcOperation}

    def convert(row: Mapping[str, Any]) -> tuple[object, ...]:
        get = row.get
        time, code, ttl = row["cdc$time"], int(row["cdc$operation"]), get("cdc$ttl")
        name = names.get(code)
        if name is None:
            raise InvalidChange(f"log row of {table.keyspace}.{table.name}: operation {code}")
        try:
            micros = timeuuid_to_micros(time)
        except ValueError:
            raise InvalidChange(
                f"log row of {table.keyspace}.{table.name}: cdc$time {time} is not a "
                "version-1 timeuuid"
            ) from None
        out: list[object] = [
            bytes(get("cdc$stream_id") or b""),
            str(time),
            micros,
            int(get("cdc$batch_seq_no") or 0),
            code,
            name,
            int(ttl) if ttl else None,
        ]
        for column, cql_type in keys:
            value = get(column)
            out.append(value if cql_type is None else to_spark_value(cql_type, plain(value)))
        for column, log_type, deleted, removal in columns:
            value = get(column)
            out.append(value if log_type is None else to_spark_value(log_type, plain(value)))
            out.append(bool(get(deleted)))
            if removal is not None:
                elements_name, element_type = removal
                elements: Any = plain(get(elements_name))
                removed = None if elements is None else frozenset(elements)
                out.append(None if removed is None else to_spark_value(element_type, removed))
        return tuple(out)

    return convert


# --- the base table as JSON (a sink option) ----------------------------------------------------


def table_to_json(table: Table) -> str:
    """A self-contained JSON description of ``table`` (types structural, UDTs inline)."""
    description = {
        "keyspace": table.keyspace,
        "name": table.name,
        "id": str(table.id),
        "columns": [
            {
                "name": c.name,
                "type": _type_to_json(c.type),
                "kind": c.kind.value,
                "position": c.position,
                "order": c.order.value,
            }
            for c in table.columns
        ],
        "options": {
            "cdc": table.options.cdc.to_map(),
            "default_time_to_live": table.options.default_time_to_live_s,
            "gc_grace_seconds": table.options.gc_grace_seconds,
            "comment": table.options.comment,
        },
    }
    return json.dumps(description, separators=(",", ":"), sort_keys=True)


def table_from_json(text: str) -> Table:
    """The table of :func:`table_to_json`; PipelineConfigError on anything malformed."""
    try:
        description = json.loads(text)
        columns = tuple(
            Column(
                c["name"],
                _type_from_json(c["type"]),
                ColumnKind(c["kind"]),
                int(c["position"]),
                ClusteringOrder(c["order"]),
            )
            for c in description["columns"]
        )
        options = description.get("options", {})
        table = Table(
            description["keyspace"],
            description["name"],
            columns,
            TableOptions(
                CdcOptions.from_map(options.get("cdc", {})),
                int(options.get("default_time_to_live", 0)),
                int(options.get("gc_grace_seconds", 864000)),
                str(options.get("comment", "")),
            ),
            uuid.UUID(description["id"]),
        )
        table.validate()
    except (ValueError, KeyError, TypeError, SchemaError) as error:
        raise PipelineConfigError(f"bad table description {text[:200]!r}: {error}") from None
    return table


def _type_to_json(cql_type: CqlType) -> object:
    if isinstance(cql_type, NativeType):
        return cql_type.name
    if isinstance(cql_type, ListType):
        return {"list": _type_to_json(cql_type.element), "frozen": cql_type.frozen}
    if isinstance(cql_type, SetType):
        return {"set": _type_to_json(cql_type.element), "frozen": cql_type.frozen}
    if isinstance(cql_type, MapType):
        pair = [_type_to_json(cql_type.key), _type_to_json(cql_type.value)]
        return {"map": pair, "frozen": cql_type.frozen}
    if isinstance(cql_type, TupleType):
        return {"tuple": [_type_to_json(t) for t in cql_type.elements]}
    if isinstance(cql_type, UserType):
        fields = [
            [n, _type_to_json(t)]
            for n, t in zip(cql_type.field_names, cql_type.field_types, strict=True)
        ]
        udt = {"keyspace": cql_type.keyspace, "name": cql_type.name, "fields": fields}
        return {"udt": udt, "frozen": cql_type.frozen}
    raise PipelineConfigError(f"cannot describe type {cql_type!r}")


def _type_from_json(node: Any) -> CqlType:
    if isinstance(node, str):
        return NativeType(node)
    frozen = bool(node.get("frozen", False))
    if "list" in node:
        return ListType(_type_from_json(node["list"]), frozen)
    if "set" in node:
        return SetType(_type_from_json(node["set"]), frozen)
    if "map" in node:
        key, value = node["map"]
        return MapType(_type_from_json(key), _type_from_json(value), frozen)
    if "tuple" in node:
        return TupleType(tuple(_type_from_json(t) for t in node["tuple"]))
    if "udt" in node:
        udt = node["udt"]
        names = tuple(str(n) for n, _ in udt["fields"])
        types = tuple(_type_from_json(t) for _, t in udt["fields"])
        return UserType(udt["keyspace"], udt["name"], names, types, frozen)
    raise ValueError(f"unknown type node {node!r}")


def changes_sorted(changes: Sequence[Change]) -> list[Change]:
    """Changes in log order: write time, then the log's ``(cdc$time, cdc$batch_seq_no)``."""
    return sorted(changes, key=lambda c: (c.time_us, c.time.bytes, c.batch_seq_no))
