"""RESULT messages: Void, Rows, Set_keyspace, Prepared, Schema_change; both directions.

Owns ``doc/native_protocol_v4.spec`` §4.2.5 (result kinds), §4.2.5.2 (rows metadata: flags
Global_tables_spec 0x0001, Has_more_pages 0x0002, No_metadata 0x0004, column specs, [bytes]
cells), §4.2.5.4 (prepared metadata with ``pk_count``/``pk_index``, which drivers use for
token-aware routing) and §4.2.5.5 / §4.2.6 (the schema change triple shared with EVENT).

Rules:

* Cells are already-serialized [bytes] (``None`` is null); value serialization belongs to the
  type codec, not to the protocol layer.
* The writer uses the global table spec whenever every column shares one keyspace and table,
  as Cassandra does; the reader always expands it into per-column specs.
* Unknown metadata flag bits (v5's metadata id, DSE continuous paging) are refused: a v4 peer
  never sets them, and skipping them would misread the rest of the body.
* Counts are checked against the remaining body before looping (``Reader.read_count``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum, IntFlag, StrEnum
from typing import ClassVar

from ringflow.cql._frame import Opcode
from ringflow.cql._option_types import read_option_type, write_option_type
from ringflow.cql._wire import LocalProtocolError, Reader, Writer
from ringflow.errors import ProtocolViolation
from ringflow.schema import CqlType


class ResultKind(IntEnum):
    VOID = 0x0001
    ROWS = 0x0002
    SET_KEYSPACE = 0x0003
    PREPARED = 0x0004
    SCHEMA_CHANGE = 0x0005


class MetadataFlag(IntFlag):
    NONE = 0x0000
    GLOBAL_TABLES_SPEC = 0x0001
    HAS_MORE_PAGES = 0x0002
    NO_METADATA = 0x0004


_KNOWN_ROWS_FLAGS = 0x0007
_KNOWN_PREPARED_FLAGS = 0x0001
_MIN_SPEC_SIZE = 2 + 2  # an empty [string] name and a [short] option id


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """<col_spec_i>: where a result column or bind marker comes from, its name and type."""

    keyspace: str
    table: str
    name: str
    type: CqlType


def _write_specs(out: Writer, flags: MetadataFlag, specs: Sequence[ColumnSpec]) -> None:
    if flags & MetadataFlag.GLOBAL_TABLES_SPEC:
        out.write_string(specs[0].keyspace)
        out.write_string(specs[0].table)
    for spec in specs:
        if not flags & MetadataFlag.GLOBAL_TABLES_SPEC:
            out.write_string(spec.keyspace)
            out.write_string(spec.table)
        out.write_string(spec.name)
        write_option_type(spec.type, out)


def _global_flag(specs: Sequence[ColumnSpec]) -> MetadataFlag:
    if specs and len({(spec.keyspace, spec.table) for spec in specs}) == 1:
        return MetadataFlag.GLOBAL_TABLES_SPEC
    return MetadataFlag.NONE


def _read_specs(reader: Reader, flags: int, count: int) -> tuple[ColumnSpec, ...]:
    is_global = bool(flags & MetadataFlag.GLOBAL_TABLES_SPEC)
    keyspace = table = ""
    if is_global:
        keyspace = reader.read_string()
        table = reader.read_string()
    specs: list[ColumnSpec] = []
    for _ in range(count):
        if not is_global:
            keyspace = reader.read_string()
            table = reader.read_string()
        name = reader.read_string()
        specs.append(ColumnSpec(keyspace, table, name, read_option_type(reader)))
    return tuple(specs)


@dataclass(frozen=True, slots=True)
class RowsMetadata:
    """Rows <metadata>: ``columns`` is ``None`` when it was skipped (No_metadata flag).

    ``paging_state`` is set when more pages remain (Has_more_pages). Build with
    ``RowsMetadata.describing(columns)`` or ``RowsMetadata.skipped(column_count)``.
    """

    column_count: int
    columns: tuple[ColumnSpec, ...] | None = None
    paging_state: bytes | None = None

    def __post_init__(self) -> None:
        if self.columns is not None and len(self.columns) != self.column_count:
            raise LocalProtocolError(
                f"rows metadata: {len(self.columns)} column specs for {self.column_count} columns"
            )

    @classmethod
    def describing(
        cls, columns: Sequence[ColumnSpec], paging_state: bytes | None = None
    ) -> RowsMetadata:
        return cls(len(columns), tuple(columns), paging_state)

    @classmethod
    def skipped(cls, column_count: int, paging_state: bytes | None = None) -> RowsMetadata:
        return cls(column_count, None, paging_state)

    def write(self, out: Writer) -> None:
        flags = MetadataFlag.NONE
        if self.paging_state is not None:
            flags |= MetadataFlag.HAS_MORE_PAGES
        if self.columns is None:
            flags |= MetadataFlag.NO_METADATA
        else:
            flags |= _global_flag(self.columns)
        out.write_int(int(flags))
        out.write_int(self.column_count)
        if self.paging_state is not None:
            out.write_bytes(self.paging_state)
        if self.columns is not None:
            _write_specs(out, flags, self.columns)


def read_rows_metadata(reader: Reader) -> RowsMetadata:
    flags = reader.read_int()
    if flags & ~_KNOWN_ROWS_FLAGS:
        raise ProtocolViolation(f"unknown rows metadata flags 0x{flags & ~_KNOWN_ROWS_FLAGS:x}")
    column_count = reader.read_int()
    if column_count < 0:
        raise ProtocolViolation(f"negative column count {column_count}")
    paging_state = None
    if flags & MetadataFlag.HAS_MORE_PAGES:
        paging_state = reader.read_bytes()
    if flags & MetadataFlag.NO_METADATA:
        return RowsMetadata(column_count, None, paging_state)
    if column_count * _MIN_SPEC_SIZE > reader.remaining:
        raise ProtocolViolation(f"column count {column_count} does not fit the body")
    return RowsMetadata(column_count, _read_specs(reader, flags, column_count), paging_state)


@dataclass(frozen=True, slots=True)
class PreparedMetadata:
    """Prepared <metadata>: bind markers and the marker index of each partition key column.

    ``partition_key_indexes`` is empty when some partition key column has no bind marker.
    """

    columns: tuple[ColumnSpec, ...] = ()
    partition_key_indexes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for index in self.partition_key_indexes:
            if not 0 <= index < len(self.columns):
                raise LocalProtocolError(
                    f"partition key index {index} is not a bind marker index "
                    f"(there are {len(self.columns)} markers)"
                )

    def write(self, out: Writer) -> None:
        flags = _global_flag(self.columns)
        out.write_int(int(flags))
        out.write_int(len(self.columns))
        out.write_int(len(self.partition_key_indexes))
        for index in self.partition_key_indexes:
            out.write_short(index)
        _write_specs(out, flags, self.columns)


def _read_prepared_metadata(reader: Reader) -> PreparedMetadata:
    flags = reader.read_int()
    if flags & ~_KNOWN_PREPARED_FLAGS:
        raise ProtocolViolation(
            f"unknown prepared metadata flags 0x{flags & ~_KNOWN_PREPARED_FLAGS:x}"
        )
    column_count = reader.read_count("bind marker", _MIN_SPEC_SIZE)
    indexes = tuple(reader.read_short() for _ in range(reader.read_count("pk index", 2)))
    return PreparedMetadata(_read_specs(reader, flags, column_count), indexes)


@dataclass(frozen=True, slots=True)
class VoidResult:
    opcode: ClassVar[Opcode] = Opcode.RESULT
    kind: ClassVar[ResultKind] = ResultKind.VOID

    def write_body(self, out: Writer) -> None:
        out.write_int(self.kind)


@dataclass(frozen=True, slots=True)
class RowsResult:
    """A page of rows: metadata and, per row, one serialized [bytes] cell per column."""

    opcode: ClassVar[Opcode] = Opcode.RESULT
    kind: ClassVar[ResultKind] = ResultKind.ROWS
    metadata: RowsMetadata
    rows: tuple[tuple[bytes | None, ...], ...] = ()

    def write_body(self, out: Writer) -> None:
        out.write_int(self.kind)
        self.metadata.write(out)
        out.write_int(len(self.rows))
        width = self.metadata.column_count
        if width == 0 and self.rows:
            # Zero-width rows would cost no bytes each: a reader could not bound their number.
            raise LocalProtocolError(f"{len(self.rows)} rows without columns")
        for position, row in enumerate(self.rows):
            if len(row) != width:
                raise LocalProtocolError(f"row {position} has {len(row)} cells, expected {width}")
        out.write_bytes_rows(self.rows)


def _read_rows(reader: Reader) -> RowsResult:
    metadata = read_rows_metadata(reader)
    width = metadata.column_count
    if width == 0:
        row_count = reader.read_int()
        if row_count != 0:
            raise ProtocolViolation(f"{row_count} rows without columns")
        return RowsResult(metadata, ())
    row_count = reader.read_count("row", 4 * width)
    rows = tuple(tuple(reader.read_bytes() for _ in range(width)) for _ in range(row_count))
    return RowsResult(metadata, rows)


@dataclass(frozen=True, slots=True)
class SetKeyspaceResult:
    opcode: ClassVar[Opcode] = Opcode.RESULT
    kind: ClassVar[ResultKind] = ResultKind.SET_KEYSPACE
    keyspace: str

    def write_body(self, out: Writer) -> None:
        out.write_int(self.kind)
        out.write_string(self.keyspace)


@dataclass(frozen=True, slots=True)
class PreparedResult:
    """The answer to PREPARE: the statement id, bind-marker metadata, result metadata."""

    opcode: ClassVar[Opcode] = Opcode.RESULT
    kind: ClassVar[ResultKind] = ResultKind.PREPARED
    statement_id: bytes
    bind_metadata: PreparedMetadata
    result_metadata: RowsMetadata

    def write_body(self, out: Writer) -> None:
        out.write_int(self.kind)
        out.write_short_bytes(self.statement_id)
        self.bind_metadata.write(out)
        self.result_metadata.write(out)


class SchemaChangeType(StrEnum):
    CREATED = "CREATED"
    UPDATED = "UPDATED"
    DROPPED = "DROPPED"


class SchemaChangeTarget(StrEnum):
    KEYSPACE = "KEYSPACE"
    TABLE = "TABLE"
    TYPE = "TYPE"
    FUNCTION = "FUNCTION"
    AGGREGATE = "AGGREGATE"


_NAMED_TARGETS = frozenset(SchemaChangeTarget) - {SchemaChangeTarget.KEYSPACE}
_ROUTINE_TARGETS = frozenset({SchemaChangeTarget.FUNCTION, SchemaChangeTarget.AGGREGATE})


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """<change_type><target><options>: what changed (spec §4.2.6 "SCHEMA_CHANGE").

    ``name`` is the table, type, function or aggregate (``None`` for a keyspace);
    ``argument_types`` are the CQL argument types of a function or aggregate.
    """

    change_type: SchemaChangeType
    target: SchemaChangeTarget
    keyspace: str
    name: str | None = None
    argument_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.name is not None) != (self.target in _NAMED_TARGETS):
            raise LocalProtocolError(f"schema change on {self.target}: name {self.name!r}")
        if self.argument_types and self.target not in _ROUTINE_TARGETS:
            raise LocalProtocolError(f"schema change on {self.target} with argument types")

    def write(self, out: Writer) -> None:
        out.write_string(self.change_type)
        out.write_string(self.target)
        out.write_string(self.keyspace)
        if self.name is not None:
            out.write_string(self.name)
        if self.target in _ROUTINE_TARGETS:
            out.write_string_list(self.argument_types)


def read_schema_change(reader: Reader) -> SchemaChange:
    change_name = reader.read_string()
    target_name = reader.read_string()
    try:
        change_type = SchemaChangeType(change_name)
        target = SchemaChangeTarget(target_name)
    except ValueError:
        raise ProtocolViolation(
            f"unknown schema change {change_name!r} on target {target_name!r}"
        ) from None
    keyspace = reader.read_string()
    name = reader.read_string() if target in _NAMED_TARGETS else None
    arguments = reader.read_string_list() if target in _ROUTINE_TARGETS else ()
    return SchemaChange(change_type, target, keyspace, name, arguments)


@dataclass(frozen=True, slots=True)
class SchemaChangeResult:
    opcode: ClassVar[Opcode] = Opcode.RESULT
    kind: ClassVar[ResultKind] = ResultKind.SCHEMA_CHANGE
    change: SchemaChange

    def write_body(self, out: Writer) -> None:
        out.write_int(self.kind)
        self.change.write(out)


Result = VoidResult | RowsResult | SetKeyspaceResult | PreparedResult | SchemaChangeResult

_RESULT_READERS: dict[int, Callable[[Reader], Result]] = {
    ResultKind.VOID: lambda reader: VoidResult(),
    ResultKind.ROWS: _read_rows,
    ResultKind.SET_KEYSPACE: lambda reader: SetKeyspaceResult(reader.read_string()),
    ResultKind.PREPARED: lambda reader: PreparedResult(
        reader.read_short_bytes(), _read_prepared_metadata(reader), read_rows_metadata(reader)
    ),
    ResultKind.SCHEMA_CHANGE: lambda reader: SchemaChangeResult(read_schema_change(reader)),
}


def read_result(reader: Reader) -> Result:
    kind = reader.read_int()
    result_reader = _RESULT_READERS.get(kind)
    if result_reader is None:
        raise ProtocolViolation(f"unknown RESULT kind 0x{kind:04x}")
    return result_reader(reader)
