"""The CDC log table: its name, columns, options and operation codes.

Implements ``shared/reference/scylla-cdc.md`` §5 "Name and properties", "Columns" and
"``cdc$operation`` codes", checked against Scylla's ``cdc/log.cc`` (``add_columns_to_cdc_log``,
``set_default_properties_log_table``) and ``docs/features/cdc/cdc-log-table.rst`` /
``cdc-advanced-types.rst``. Rules:

- Name ``<base>_scylla_cdc_log``, same keyspace. Partition key ``cdc$stream_id blob``; clustering
  ``cdc$time timeuuid``, ``cdc$batch_seq_no int`` (both ascending).
- Regular columns: ``cdc$operation tinyint``, ``cdc$ttl bigint``, ``cdc$end_of_batch boolean``;
  every base partition and clustering key column (same name and type); every static and regular
  base column ``X`` as a value column plus ``cdc$deleted_X boolean``; a non-frozen collection or
  UDT additionally gets ``cdc$deleted_elements_X``. Static base columns are ordinary columns here.
- A non-frozen ``list<T>`` is logged as ``frozen<map<timeuuid, T>>`` (its cells' timeuuid keys
  are visible); any other non-frozen collection or UDT as its frozen form. Deleted elements are a
  ``frozen<set<K>>`` of the key type: the element type for sets, the key type for maps,
  ``timeuuid`` for lists and ``smallint`` (field index) for UDTs.
- Scylla keeps regular columns sorted by name (``schema::rebuild`` insists on it, and
  ``DESCRIBE`` shows that order), so the regular columns of the log table are sorted by the UTF-8
  bytes of their names.
- Options: comment ``CDC log for <ks>.<table>``; ``gc_grace_seconds = 0`` when the cdc ``ttl`` is
  positive (else the default); no table-level default TTL (every log cell carries the cdc ``ttl``
  itself); CDC disabled on the log. Compaction is TimeWindowCompactionStrategy with a window
  derived from the TTL (:func:`cdc_log_compaction_options`); ringflow's ``TableOptions`` has no
  compaction field, so the storage layer asks for that map separately.
"""

from __future__ import annotations

import enum
import uuid

from ringflow.errors import InvalidRequest
from ringflow.schema import (
    BIGINT,
    BLOB,
    BOOLEAN,
    CDC_LOG_SUFFIX,
    DEFAULT_GC_GRACE_SECONDS,
    INT,
    SMALLINT,
    TIMEUUID,
    TINYINT,
    CdcOptions,
    ClusteringOrder,
    CqlType,
    ListType,
    MapType,
    SchemaError,
    SetType,
    Table,
    TableOptions,
    UserType,
)

META_PREFIX = "cdc$"
STREAM_ID_COLUMN = "cdc$stream_id"
TIME_COLUMN = "cdc$time"
BATCH_SEQ_NO_COLUMN = "cdc$batch_seq_no"
OPERATION_COLUMN = "cdc$operation"
TTL_COLUMN = "cdc$ttl"
END_OF_BATCH_COLUMN = "cdc$end_of_batch"
DELETED_PREFIX = "cdc$deleted_"
DELETED_ELEMENTS_PREFIX = "cdc$deleted_elements_"

_META_REGULAR: tuple[tuple[str, CqlType], ...] = (
    (OPERATION_COLUMN, TINYINT),
    (TTL_COLUMN, BIGINT),
    (END_OF_BATCH_COLUMN, BOOLEAN),
)

_LOG_TABLE_ID_NAMESPACE = uuid.UUID("5c1d6a4e-3f7b-4c1e-9d0a-6c0c2d1b7e41")


class CdcOperation(enum.IntEnum):
    """``cdc$operation`` values (Scylla ``cdc/log.hh``: "don't change the constant values")."""

    PRE_IMAGE = 0
    UPDATE = 1
    INSERT = 2
    ROW_DELETE = 3
    PARTITION_DELETE = 4
    RANGE_DELETE_START_INCLUSIVE = 5
    RANGE_DELETE_START_EXCLUSIVE = 6
    RANGE_DELETE_END_INCLUSIVE = 7
    RANGE_DELETE_END_EXCLUSIVE = 8
    POST_IMAGE = 9


def is_cdc_log_table(name: str) -> bool:
    """True if ``name`` is a CDC log table name (Scylla ``is_log_name``: ends with the suffix)."""
    return name.endswith(CDC_LOG_SUFFIX)


def base_table_name(log_name: str) -> str:
    """The base table of the log table ``log_name``; InvalidRequest if it is not a log name."""
    if not is_cdc_log_table(log_name) or log_name == CDC_LOG_SUFFIX:
        raise InvalidRequest(f"{log_name!r} is not a CDC log table name (no {CDC_LOG_SUFFIX!r})")
    return log_name[: -len(CDC_LOG_SUFFIX)]


def deleted_column_name(column: str) -> str:
    """``cdc$deleted_<column>``: true in a delta row that wrote null to the column."""
    return DELETED_PREFIX + column


def deleted_elements_column_name(column: str) -> str:
    """``cdc$deleted_elements_<column>``: the keys removed from a non-frozen collection or UDT."""
    return DELETED_ELEMENTS_PREFIX + column


def log_value_type(base_type: CqlType) -> CqlType:
    """The type of the log's value column for a static or regular base column of ``base_type``."""
    if not base_type.is_multicell:
        return base_type
    if isinstance(base_type, ListType):
        return MapType(TIMEUUID, base_type.element, frozen=True)
    return base_type.frozen_form()


def deleted_elements_type(base_type: CqlType) -> CqlType:
    """The type of ``cdc$deleted_elements_X`` for a non-frozen collection or UDT column."""
    if isinstance(base_type, ListType):
        return SetType(TIMEUUID, frozen=True)
    if isinstance(base_type, SetType):
        return SetType(base_type.element, frozen=True)
    if isinstance(base_type, MapType):
        return SetType(base_type.key, frozen=True)
    if isinstance(base_type, UserType):
        return SetType(SMALLINT, frozen=True)
    raise InvalidRequest(f"type {base_type.cql_name()} has no deleted-elements column")


def _data_columns(base: Table) -> list[tuple[str, CqlType]]:
    columns: list[tuple[str, CqlType]] = []
    for column in base.static_columns + base.regular_columns:
        columns.append((column.name, log_value_type(column.type)))
        columns.append((deleted_column_name(column.name), BOOLEAN))
        if column.type.is_multicell:
            element_names = deleted_elements_column_name(column.name)
            columns.append((element_names, deleted_elements_type(column.type)))
    return columns


def _log_regular_columns(base: Table) -> list[tuple[str, CqlType]]:
    keys = [(column.name, column.type) for column in base.primary_key_columns]
    columns = [*_META_REGULAR, *keys, *_data_columns(base)]
    seen: set[str] = {STREAM_ID_COLUMN, TIME_COLUMN, BATCH_SEQ_NO_COLUMN}
    for name, _ in columns:
        if name in seen:
            raise SchemaError(
                f"cannot create the CDC log for {base.keyspace}.{base.name}: column name "
                f"{name!r} collides with another column of {base.cdc_log_name}"
            )
        seen.add(name)
    return sorted(columns, key=lambda column: column[0].encode("utf-8"))


def log_table_options(base: Table) -> TableOptions:
    """The options Scylla's ``set_default_properties_log_table`` gives a new log table."""
    ttl_s = base.options.cdc.ttl_s
    return TableOptions(
        cdc=CdcOptions(),
        default_time_to_live_s=0,
        gc_grace_seconds=0 if ttl_s > 0 else DEFAULT_GC_GRACE_SECONDS,
        comment=f"CDC log for {base.keyspace}.{base.name}",
    )


def cdc_log_table(base: Table, table_id: uuid.UUID | None = None) -> Table:
    """The ``<table>_scylla_cdc_log`` schema of ``base`` (same keyspace).

    ``table_id`` defaults to a UUID derived from the base table's id, so every node computing the
    log schema of the same base table gets the same id. Raises SchemaError (an InvalidRequest)
    when ``base`` is itself a log table or a base column name collides with a log column.
    """
    if is_cdc_log_table(base.name):
        raise SchemaError(
            f"cannot create a CDC log for {base.keyspace}.{base.name}: it is a CDC log table"
        )
    return Table.create(
        base.keyspace,
        base.cdc_log_name,
        partition_key=[(STREAM_ID_COLUMN, BLOB)],
        clustering=[
            (TIME_COLUMN, TIMEUUID, ClusteringOrder.ASC),
            (BATCH_SEQ_NO_COLUMN, INT, ClusteringOrder.ASC),
        ],
        regular=_log_regular_columns(base),
        options=log_table_options(base),
        table_id=table_id or uuid.uuid5(_LOG_TABLE_ID_NAMESPACE, str(base.id)),
    )


def cdc_log_compaction_options(ttl_s: int) -> dict[str, str]:
    """TimeWindowCompactionStrategy options for a log whose cells live ``ttl_s`` seconds.

    The smallest window that keeps at most 24 windows alive (``ceil(ttl / 24)`` seconds, rounded
    up to whole minutes), checked for fully expired sstables every half window (at least 1 s).
    With ``ttl_s == 0`` only the class is set, as in Scylla.
    """
    if ttl_s < 0:
        raise InvalidRequest(f"cdc ttl must be >= 0, got {ttl_s}")
    options = {"class": "TimeWindowCompactionStrategy"}
    if ttl_s > 0:
        window_s = -(-ttl_s // 24)
        options["compaction_window_unit"] = "MINUTES"
        options["compaction_window_size"] = str(-(-window_s // 60))
        options["expired_sstable_check_frequency_seconds"] = str(max(1, window_s // 2))
    return options
