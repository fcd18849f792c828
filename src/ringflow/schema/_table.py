"""Keyspaces, tables, columns and table options, with the validation CQL DDL applies.

Owns the shape of a table: partition key, clustering key (ASC/DESC), static and regular columns,
and the options ringflow knows: ``cdc = {...}`` (Scylla ``cdc/cdc_options.hh``, reference
scylla-cdc.md §5 "Options"), ``default_time_to_live``, ``gc_grace_seconds`` (default 864000,
cassandra-core.md §6.2), ``comment``. Errors name the table and the column at fault.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ringflow.schema._errors import SchemaError
from ringflow.schema._types import CqlType, UserType

DEFAULT_GC_GRACE_SECONDS = 864000
DEFAULT_CDC_TTL_SECONDS = 86400
CDC_LOG_SUFFIX = "_scylla_cdc_log"
MAX_TTL_SECONDS = 20 * 365 * 86400  # Cassandra's Attributes.MAX_TTL


class ColumnKind(enum.Enum):
    PARTITION_KEY = "partition_key"
    CLUSTERING = "clustering"
    STATIC = "static"
    REGULAR = "regular"


class ClusteringOrder(enum.Enum):
    ASC = "asc"
    DESC = "desc"


class PreimageMode(enum.Enum):
    OFF = "false"
    CHANGED = "true"
    FULL = "full"


class DeltaMode(enum.Enum):
    FULL = "full"
    KEYS = "keys"


_TRUE_WORDS = {"true": True, "1": True, "false": False, "0": False}


def _parse_bool(option: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in _TRUE_WORDS:
        raise SchemaError(f"cdc option {option!r} must be true or false, got {value!r}")
    return _TRUE_WORDS[lowered]


@dataclass(frozen=True, slots=True)
class CdcOptions:
    """The ``cdc = {...}`` table option (Scylla ``cdc::options``)."""

    enabled: bool = False
    preimage: PreimageMode = PreimageMode.OFF
    postimage: bool = False
    delta: DeltaMode = DeltaMode.FULL
    ttl_s: int = DEFAULT_CDC_TTL_SECONDS

    @classmethod
    def from_map(cls, options: Mapping[str, str]) -> CdcOptions:
        """Parse the CQL map; keys and values are case-insensitive like Scylla's parser."""
        enabled, preimage, postimage = False, PreimageMode.OFF, False
        delta, ttl_s = DeltaMode.FULL, DEFAULT_CDC_TTL_SECONDS
        for raw_key, raw_value in options.items():
            key, value = str(raw_key).strip().lower(), str(raw_value).strip().lower()
            if key == "enabled":
                enabled = _parse_bool(key, value)
            elif key == "preimage":
                preimage = _parse_preimage(value)
            elif key == "postimage":
                postimage = _parse_bool(key, value)
            elif key == "delta":
                if value not in ("full", "keys"):
                    raise SchemaError(f"cdc option 'delta' must be 'full' or 'keys', got {value!r}")
                delta = DeltaMode(value)
            elif key == "ttl":
                ttl_s = _parse_ttl(value)
            else:
                raise SchemaError(f"unknown cdc option {raw_key!r}")
        return cls(enabled, preimage, postimage, delta, ttl_s)

    def to_map(self) -> dict[str, str]:
        """The map form Scylla's ``to_map()`` emits."""
        return {
            "enabled": "true" if self.enabled else "false",
            "preimage": self.preimage.value,
            "postimage": "true" if self.postimage else "false",
            "delta": self.delta.value,
            "ttl": str(self.ttl_s),
        }


def _parse_preimage(value: str) -> PreimageMode:
    if value in ("full",):
        return PreimageMode.FULL
    if value in ("true", "1"):
        return PreimageMode.CHANGED
    if value in ("false", "0"):
        return PreimageMode.OFF
    raise SchemaError(f"cdc option 'preimage' must be true, false or 'full', got {value!r}")


def _parse_ttl(value: str) -> int:
    try:
        ttl_s = int(value)
    except ValueError:
        raise SchemaError(f"cdc option 'ttl' must be an integer, got {value!r}") from None
    if ttl_s < 0:
        raise SchemaError(f"cdc option 'ttl' must be >= 0, got {ttl_s}")
    return ttl_s


PropertyValue = float | int | str | tuple[tuple[str, str], ...]
"""A storage-engine property's value: a number, a text, or a text map as sorted pairs."""

ENGINE_PROPERTY_KINDS: Mapping[str, str] = MappingProxyType(
    {
        "bloom_filter_fp_chance": "double",
        "caching": "map",
        "compaction": "map",
        "compression": "map",
        "crc_check_chance": "double",
        "max_index_interval": "int",
        "memtable_flush_period_in_ms": "int",
        "min_index_interval": "int",
        "speculative_retry": "text",
    }
)
"""Cassandra's table properties that tune its storage engine (``TableParams``): ringflow keeps
what a user sets, shows it in ``system_schema.tables`` and keeps it across restarts and peers,
though its SQLite store has no bloom filter, index summary or SSTable compression to apply
them to."""


@dataclass(frozen=True, slots=True)
class TableOptions:
    cdc: CdcOptions = field(default_factory=CdcOptions)
    default_time_to_live_s: int = 0
    gc_grace_seconds: int = DEFAULT_GC_GRACE_SECONDS
    comment: str = ""
    engine: tuple[tuple[str, PropertyValue], ...] = ()
    """The storage-engine properties set by the user (``ENGINE_PROPERTY_KINDS``), by name."""

    def engine_property(self, name: str) -> PropertyValue | None:
        """The value the user set for ``name``, or None (the table shows the default)."""
        return next((value for key, value in self.engine if key == name), None)

    def __post_init__(self) -> None:
        if not 0 <= self.default_time_to_live_s <= MAX_TTL_SECONDS:
            raise SchemaError(
                f"default_time_to_live must be in 0..{MAX_TTL_SECONDS}, "
                f"got {self.default_time_to_live_s}"
            )
        if self.gc_grace_seconds < 0:
            raise SchemaError(f"gc_grace_seconds must be >= 0, got {self.gc_grace_seconds}")
        unknown = sorted(name for name, _ in self.engine if name not in ENGINE_PROPERTY_KINDS)
        if unknown:
            raise SchemaError(f"unknown table properties {unknown}")


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: CqlType
    kind: ColumnKind
    position: int = 0  # position within the partition or clustering key; 0 otherwise
    order: ClusteringOrder = ClusteringOrder.ASC

    @property
    def is_primary_key(self) -> bool:
        return self.kind in (ColumnKind.PARTITION_KEY, ColumnKind.CLUSTERING)


@dataclass(frozen=True, slots=True)
class Table:
    """A table definition. Build it with :meth:`Table.create`, which validates."""

    keyspace: str
    name: str
    columns: tuple[Column, ...]
    options: TableOptions = field(default_factory=TableOptions)
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    dropped_columns: tuple[tuple[str, int], ...] = ()
    """``(column name, dropped at µs)`` of the columns dropped from this table, by name: a cell
    of that name written at or before that time is gone, even once the column is added again
    (Cassandra ``TableMetadata.droppedColumns``, ``system_schema.dropped_columns``)."""
    _by_name: Mapping[str, Column] = field(init=False, compare=False, repr=False)
    _by_kind: Mapping[ColumnKind, tuple[Column, ...]] = field(init=False, compare=False, repr=False)
    _partition_key: tuple[Column, ...] = field(init=False, compare=False, repr=False)
    _clustering: tuple[Column, ...] = field(init=False, compare=False, repr=False)
    _primary_key: tuple[Column, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Derived lookups, computed once: the read, CDC and pipeline paths ask for them per row
        # (the key columns as attributes: a lookup by enum member costs its Python __hash__).
        object.__setattr__(self, "_by_name", MappingProxyType({c.name: c for c in self.columns}))
        by_kind = {
            kind: tuple(sorted((c for c in self.columns if c.kind is kind), key=_position))
            for kind in ColumnKind
        }
        object.__setattr__(self, "_by_kind", MappingProxyType(by_kind))
        partition_key = by_kind[ColumnKind.PARTITION_KEY]
        clustering = by_kind[ColumnKind.CLUSTERING]
        object.__setattr__(self, "_partition_key", partition_key)
        object.__setattr__(self, "_clustering", clustering)
        object.__setattr__(self, "_primary_key", partition_key + clustering)

    @classmethod
    def create(
        cls,
        keyspace: str,
        name: str,
        partition_key: Sequence[tuple[str, CqlType]],
        clustering: Sequence[tuple[str, CqlType, ClusteringOrder]] = (),
        static: Sequence[tuple[str, CqlType]] = (),
        regular: Sequence[tuple[str, CqlType]] = (),
        options: TableOptions | None = None,
        table_id: uuid.UUID | None = None,
    ) -> Table:
        columns = [
            Column(n, t, ColumnKind.PARTITION_KEY, i) for i, (n, t) in enumerate(partition_key)
        ]
        columns += [
            Column(n, t, ColumnKind.CLUSTERING, i, o) for i, (n, t, o) in enumerate(clustering)
        ]
        columns += [Column(n, t, ColumnKind.STATIC) for n, t in static]
        columns += [Column(n, t, ColumnKind.REGULAR) for n, t in regular]
        table = cls(
            keyspace, name, tuple(columns), options or TableOptions(), table_id or uuid.uuid4()
        )
        table.validate()
        return table

    def validate(self) -> None:
        """Raise SchemaError naming the table and column for any rule the definition breaks."""
        where = f"table {self.keyspace}.{self.name}"
        _check_identifier(self.keyspace, "keyspace name")
        _check_identifier(self.name, "table name")
        seen: set[str] = set()
        for column in self.columns:
            if column.name in seen:
                raise SchemaError(f"{where}: duplicate column {column.name!r}")
            seen.add(column.name)
            _check_key_column(where, column)
        if not self.partition_key_columns:
            raise SchemaError(f"{where}: a table needs at least one partition key column")
        if self.static_columns and not self.clustering_columns:
            raise SchemaError(f"{where}: static columns are only allowed with clustering columns")
        if self.options.cdc.enabled and self.name.endswith(CDC_LOG_SUFFIX):
            raise SchemaError(f"{where}: CDC cannot be enabled on a CDC log table")

    @property
    def partition_key_columns(self) -> tuple[Column, ...]:
        return self._partition_key

    @property
    def clustering_columns(self) -> tuple[Column, ...]:
        return self._clustering

    @property
    def static_columns(self) -> tuple[Column, ...]:
        return self._of_kind(ColumnKind.STATIC)

    @property
    def regular_columns(self) -> tuple[Column, ...]:
        return self._of_kind(ColumnKind.REGULAR)

    @property
    def primary_key_columns(self) -> tuple[Column, ...]:
        return self._primary_key

    def _of_kind(self, kind: ColumnKind) -> tuple[Column, ...]:
        return self._by_kind[kind]

    def column(self, name: str) -> Column:
        """The column called ``name``; SchemaError naming the table if there is none."""
        found = self._by_name.get(name)
        if found is None:
            raise SchemaError(
                f"undefined column name {name!r} in table {self.keyspace}.{self.name}"
            )
        return found

    def has_column(self, name: str) -> bool:
        return name in self._by_name

    def with_dropped_column(self, name: str, dropped_at_us: int) -> Table:
        """This table with ``name`` recorded as dropped at ``dropped_at_us`` (a later drop of
        the same name replaces the earlier record, as Cassandra's does)."""
        kept = {column: at for column, at in self.dropped_columns if column != name}
        kept[name] = dropped_at_us
        return replace(self, dropped_columns=tuple(sorted(kept.items())))

    @property
    def cdc_log_name(self) -> str:
        return self.name + CDC_LOG_SUFFIX


def _position(column: Column) -> int:
    return column.position


def _check_key_column(where: str, column: Column) -> None:
    column_type = column.type
    if (
        isinstance(column_type, UserType)
        and column_type.is_multicell
        and any(field.is_multicell for field in column_type.field_types)
    ):
        raise SchemaError(
            f"{where}: non-frozen UDT column {column.name!r} cannot hold a non-frozen "
            "collection (its fields are cells of the column)"
        )
    if column.is_primary_key and column.type.is_multicell:
        raise SchemaError(
            f"{where}: key column {column.name!r} cannot be of non-frozen type "
            f"{column.type.cql_name()}"
        )
    if column.kind is ColumnKind.STATIC and column.position != 0:
        raise SchemaError(f"{where}: static column {column.name!r} has a key position")


def _check_identifier(name: str, what: str) -> None:
    if not name or len(name) > 48 or not all(ch.isalnum() or ch == "_" for ch in name):
        raise SchemaError(f"{what} {name!r} must be 1-48 alphanumeric or underscore characters")


@dataclass(frozen=True, slots=True)
class Keyspace:
    name: str
    replication: Mapping[str, str]
    durable_writes: bool = True
    user_types: Mapping[str, UserType] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_identifier(self.name, "keyspace name")
        if "class" not in self.replication:
            raise SchemaError(f"keyspace {self.name}: replication map needs a 'class'")


def columns_named(table: Table, names: Iterable[str]) -> tuple[Column, ...]:
    """The columns of ``table`` called ``names``, in the given order."""
    return tuple(table.column(name) for name in names)
