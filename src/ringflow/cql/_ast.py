"""The typed syntax tree of CQL statements: what the parser returns and the executor consumes.

Rules:

* every node is a frozen, slotted dataclass; sequences are tuples; names are plain ``str``,
  already case-folded (unquoted) or kept as written (quoted);
* nothing here is resolved against a schema: a column type is a :class:`TypeSpec` (its CQL
  spelling), turned into a ``CqlType`` by :func:`resolve_type` once the keyspace's user types are
  known; literals keep what the text said (``FloatLiteral`` keeps its digits so that a
  ``decimal`` receiver loses nothing) and are converted against the receiver's type later;
* ``{}`` is :class:`EmptyBraces` (set or map, the receiver decides); ``{a: 1}`` with a bare name
  before the colon is a :class:`UdtLiteral`, otherwise braces hold a set or a map;
* bind markers are numbered in order of appearance from 0 for one statement (a batch numbers
  across its children); each statement lists its markers in ``bind_markers`` so that PREPARE can
  give every index a column spec;
* table and keyspace options stay generic (:class:`Properties`): the executor decides which
  names it knows (``cdc``, ``default_time_to_live``, ``gc_grace_seconds``, ``comment``, ...).

Reference: Cassandra ``doc/cql3/CQL.textile`` (statement forms), Scylla's ``BYPASS CACHE`` and
``USING TIMEOUT`` extensions, ``shared/reference/scylla-cdc.md`` §5 for the ``cdc`` option map.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

from ringflow.cql._ast_auth import AuthStatement
from ringflow.cql._lexer import RESERVED_WORDS
from ringflow.cql._requests import BatchType
from ringflow.schema import NATIVE_TYPE_NAMES, CqlType, SchemaError, UserType, parse_type

# --- names and types -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QualifiedName:
    """A table or type name, with the keyspace if the statement named one."""

    keyspace: str | None
    name: str

    def cql(self) -> str:
        prefix = f"{quote_name(self.keyspace)}." if self.keyspace is not None else ""
        return prefix + quote_name(self.name)


COLLECTION_TYPE_NAMES = frozenset({"list", "set", "map", "tuple", "frozen"})


@dataclass(frozen=True, slots=True)
class TypeSpec:
    """A CQL type as spelled: ``frozen``/``list``/``set``/``map``/``tuple`` with parameters, a
    native type name, or a user type name (``keyspace`` set if qualified)."""

    name: str
    parameters: tuple[TypeSpec, ...] = ()
    keyspace: str | None = None

    @property
    def is_user_type(self) -> bool:
        return self.name not in COLLECTION_TYPE_NAMES and not _is_native_name(self.name)

    def cql(self) -> str:
        """The canonical CQL spelling (``frozen<map<text, int>>``, ``ks."MyType"``)."""
        if self.parameters:
            return f"{self.name}<{', '.join(p.cql() for p in self.parameters)}>"
        if self.is_user_type:
            return QualifiedName(self.keyspace, self.name).cql()
        return self.name


def _is_native_name(name: str) -> bool:
    return name in NATIVE_TYPE_SPELLINGS


NATIVE_TYPE_SPELLINGS = NATIVE_TYPE_NAMES | {"varchar", "counter"}


def resolve_type(
    spec: TypeSpec, user_types: Mapping[str, UserType], keyspace: str | None = None
) -> CqlType:
    """The descriptor for ``spec``; user types are looked up by name in ``user_types``.

    ``keyspace`` is the keyspace the statement works in: a user type qualified with another one is
    refused (CQL types are local to their keyspace). Raises SchemaError (InvalidRequest).
    """
    return parse_type(_spelling_for_parse_type(spec, keyspace), user_types)


def _spelling_for_parse_type(spec: TypeSpec, keyspace: str | None) -> str:
    if spec.parameters:
        inner = ", ".join(_spelling_for_parse_type(p, keyspace) for p in spec.parameters)
        return f"{spec.name}<{inner}>"
    if not spec.is_user_type:
        return spec.name
    if keyspace is not None and spec.keyspace not in (None, keyspace):
        raise SchemaError(
            f"type {spec.keyspace}.{spec.name} is not in keyspace {keyspace}: "
            "user types can only be used in the keyspace they are defined in"
        )
    if '"' in spec.name:
        raise SchemaError(f"unknown type {spec.name!r}")
    return f'"{spec.name}"'


_BARE_NAME_RE = re.compile(r"[a-z][a-z0-9_]*")


def quote_name(name: str) -> str:
    """``name`` as CQL text: bare if it reads back the same, else double-quoted."""
    if _BARE_NAME_RE.fullmatch(name) and name not in RESERVED_WORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


# --- terms ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StringLiteral:
    value: str


@dataclass(frozen=True, slots=True)
class IntegerLiteral:
    value: int


@dataclass(frozen=True, slots=True)
class FloatLiteral:
    """Digits as written (``-1.5e3``) or ``NaN``/``Infinity``/``-Infinity``."""

    text: str

    @property
    def value(self) -> float:
        return float(self.text)


@dataclass(frozen=True, slots=True)
class BooleanLiteral:
    value: bool


@dataclass(frozen=True, slots=True)
class UuidLiteral:
    value: uuid.UUID


@dataclass(frozen=True, slots=True)
class BlobLiteral:
    value: bytes


@dataclass(frozen=True, slots=True)
class DurationLiteral:
    """``12h30m``, ``-5s`` or an ISO 8601 form, as written."""

    text: str


@dataclass(frozen=True, slots=True)
class NullLiteral:
    pass


@dataclass(frozen=True, slots=True)
class BindMarker:
    """``?`` (``name`` None) or ``:name``; ``index`` counts markers from 0 in statement order."""

    index: int
    name: str | None = None


@dataclass(frozen=True, slots=True)
class ListLiteral:
    elements: tuple[Term, ...]


@dataclass(frozen=True, slots=True)
class SetLiteral:
    elements: tuple[Term, ...]


@dataclass(frozen=True, slots=True)
class MapLiteral:
    entries: tuple[tuple[Term, Term], ...]


@dataclass(frozen=True, slots=True)
class EmptyBraces:
    """``{}``: an empty set or an empty map, as the receiving column's type says."""


@dataclass(frozen=True, slots=True)
class TupleLiteral:
    elements: tuple[Term, ...]


@dataclass(frozen=True, slots=True)
class UdtLiteral:
    fields: tuple[tuple[str, Term], ...]


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """``name(args)``, e.g. ``now()``, ``minTimeuuid(?)``, ``token(?)``; names are folded."""

    name: str
    args: tuple[Term, ...]
    keyspace: str | None = None


@dataclass(frozen=True, slots=True)
class TypeCast:
    """``(type) term``: a hint for the receiver type of a literal or marker."""

    type: TypeSpec
    term: Term


Constant: TypeAlias = (
    StringLiteral
    | IntegerLiteral
    | FloatLiteral
    | BooleanLiteral
    | UuidLiteral
    | BlobLiteral
    | DurationLiteral
)
Term: TypeAlias = (
    Constant
    | NullLiteral
    | BindMarker
    | ListLiteral
    | SetLiteral
    | MapLiteral
    | EmptyBraces
    | TupleLiteral
    | UdtLiteral
    | FunctionCall
    | TypeCast
)


# --- selectors -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ColumnSelector:
    name: str


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """``selector.field`` on a UDT value."""

    selector: Selector
    field: str


@dataclass(frozen=True, slots=True)
class ElementSelector:
    """``selector[element]`` or the slice ``selector[start..end]`` (either bound may be
    omitted) of a set or map value (Cassandra 4, CASSANDRA-7396)."""

    selector: Selector
    element: Term | None
    end: Term | None = None
    is_slice: bool = False


@dataclass(frozen=True, slots=True)
class CountRows:
    """``COUNT(*)`` or ``COUNT(1)``."""


@dataclass(frozen=True, slots=True)
class WritetimeOf:
    column: str


@dataclass(frozen=True, slots=True)
class TtlOf:
    column: str


@dataclass(frozen=True, slots=True)
class FunctionSelector:
    """``name(args)`` in a select clause: ``token(a, b)``, ``toTimestamp(t)``, ``min(x)``."""

    name: str
    args: tuple[Selector, ...]
    keyspace: str | None = None


@dataclass(frozen=True, slots=True)
class CastSelector:
    """``CAST(selector AS type)``."""

    selector: Selector
    type: TypeSpec


@dataclass(frozen=True, slots=True)
class TermSelector:
    """A literal or bind marker used as a selector (mostly as a function argument)."""

    term: Term


Selector: TypeAlias = (
    ColumnSelector
    | FieldSelector
    | ElementSelector
    | CountRows
    | WritetimeOf
    | TtlOf
    | FunctionSelector
    | CastSelector
    | TermSelector
)


@dataclass(frozen=True, slots=True)
class SelectItem:
    selector: Selector
    alias: str | None = None


# --- relations, conditions, updates --------------------------------------------------------------


class Operator(enum.Enum):
    EQ = "="
    NEQ = "!="
    LT = "<"
    LTE = "<="
    GT = ">"
    GTE = ">="
    IN = "IN"
    NOT_IN = "NOT IN"
    CONTAINS = "CONTAINS"
    CONTAINS_KEY = "CONTAINS KEY"
    LIKE = "LIKE"


@dataclass(frozen=True, slots=True)
class InValues:
    """The parenthesised list after ``IN``; ``IN ?`` is a plain :class:`BindMarker` instead."""

    elements: tuple[Term, ...]


RelationValue: TypeAlias = Term | InValues


@dataclass(frozen=True, slots=True)
class ColumnRelation:
    """``column <op> value``; with ``IN``/``NOT IN`` the value is InValues or a BindMarker."""

    column: str
    operator: Operator
    value: RelationValue


@dataclass(frozen=True, slots=True)
class ElementRelation:
    """``column[key] <op> value`` (map entry filter)."""

    column: str
    key: Term
    operator: Operator
    value: Term


@dataclass(frozen=True, slots=True)
class TokenRelation:
    """``token(a, b) <op> value``."""

    columns: tuple[str, ...]
    operator: Operator
    value: Term


@dataclass(frozen=True, slots=True)
class MultiColumnRelation:
    """``(c1, c2) <op> (1, 2)`` or ``(c1, c2) IN ((1, 2), ...)``; tuples, markers or InValues."""

    columns: tuple[str, ...]
    operator: Operator
    value: RelationValue


Relation: TypeAlias = ColumnRelation | ElementRelation | TokenRelation | MultiColumnRelation


@dataclass(frozen=True, slots=True)
class Condition:
    """One ``IF`` condition: ``column [element | .field] <op> value``."""

    column: str
    operator: Operator
    value: RelationValue
    element: Term | None = None
    field: str | None = None


@dataclass(frozen=True, slots=True)
class SetValue:
    """``column = value``."""

    column: str
    value: Term


@dataclass(frozen=True, slots=True)
class SetElement:
    """``column[key] = value`` (map entry or list index)."""

    column: str
    key: Term
    value: Term


@dataclass(frozen=True, slots=True)
class SetField:
    """``column.field = value`` (UDT field)."""

    column: str
    field: str
    value: Term


@dataclass(frozen=True, slots=True)
class AddTo:
    """``column = column + value`` or ``column += value`` (append, union, put, counter add)."""

    column: str
    value: Term


@dataclass(frozen=True, slots=True)
class RemoveFrom:
    """``column = column - value`` or ``column -= value``."""

    column: str
    value: Term


@dataclass(frozen=True, slots=True)
class Prepend:
    """``column = value + column`` (lists only)."""

    column: str
    value: Term


Assignment: TypeAlias = SetValue | SetElement | SetField | AddTo | RemoveFrom | Prepend


@dataclass(frozen=True, slots=True)
class DeleteColumn:
    column: str


@dataclass(frozen=True, slots=True)
class DeleteElement:
    """``column[key]``: a map entry or a list index."""

    column: str
    key: Term


@dataclass(frozen=True, slots=True)
class DeleteField:
    column: str
    field: str


DeleteTarget: TypeAlias = DeleteColumn | DeleteElement | DeleteField


@dataclass(frozen=True, slots=True)
class UsingClause:
    """``USING TIMESTAMP t AND TTL n AND TIMEOUT d``; each an integer/duration literal or marker."""

    timestamp: Term | None = None
    ttl: Term | None = None
    timeout: Term | None = None


@dataclass(frozen=True, slots=True)
class OrderBy:
    column: str
    descending: bool = False


# --- options -------------------------------------------------------------------------------------

OptionScalar: TypeAlias = str | int | float | bool


@dataclass(frozen=True, slots=True)
class OptionMap:
    """A ``{'key': value, ...}`` option value; keys are the constants' text, values keep type."""

    entries: tuple[tuple[str, OptionScalar], ...]

    def as_dict(self) -> dict[str, OptionScalar]:
        return dict(self.entries)

    def get(self, key: str) -> OptionScalar | None:
        return next((value for name, value in self.entries if name == key), None)


OptionValue: TypeAlias = OptionScalar | OptionMap


@dataclass(frozen=True, slots=True)
class Property:
    name: str
    value: OptionValue


@dataclass(frozen=True, slots=True)
class Properties:
    """``WITH name = value AND ...`` in order; names are unique (the parser refuses repeats)."""

    items: tuple[Property, ...] = ()

    def get(self, name: str) -> OptionValue | None:
        return next((item.value for item in self.items if item.name == name), None)

    def names(self) -> tuple[str, ...]:
        return tuple(item.name for item in self.items)


# --- statements ----------------------------------------------------------------------------------

Markers: TypeAlias = tuple[BindMarker, ...]


@dataclass(frozen=True, slots=True)
class UseStatement:
    keyspace: str
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class UnsupportedStatement:
    """A statement Cassandra accepts and ringflow does not implement (materialized views,
    secondary indexes, ...): ``feature`` names it for the InvalidRequest its execution is."""

    feature: str
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class SelectStatement:
    """``selection`` empty means ``*``."""

    table: QualifiedName
    selection: tuple[SelectItem, ...] = ()
    where: tuple[Relation, ...] = ()
    distinct: bool = False
    json: bool = False
    group_by: tuple[str, ...] = ()
    order_by: tuple[OrderBy, ...] = ()
    per_partition_limit: Term | None = None
    limit: Term | None = None
    allow_filtering: bool = False
    bypass_cache: bool = False
    timeout: Term | None = None
    bind_markers: Markers = ()

    @property
    def is_star(self) -> bool:
        return not self.selection


@dataclass(frozen=True, slots=True)
class InsertStatement:
    """``columns``/``values`` pair up; with ``INSERT ... JSON`` both are empty and ``json`` set."""

    table: QualifiedName
    columns: tuple[str, ...] = ()
    values: tuple[Term, ...] = ()
    json: Term | None = None
    json_default_unset: bool = False
    if_not_exists: bool = False
    using: UsingClause = UsingClause()
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class UpdateStatement:
    table: QualifiedName
    assignments: tuple[Assignment, ...]
    where: tuple[Relation, ...]
    using: UsingClause = UsingClause()
    if_exists: bool = False
    conditions: tuple[Condition, ...] = ()
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class DeleteStatement:
    """``targets`` empty deletes whole rows (or the partition / a range, as ``where`` says)."""

    table: QualifiedName
    where: tuple[Relation, ...]
    targets: tuple[DeleteTarget, ...] = ()
    using: UsingClause = UsingClause()
    if_exists: bool = False
    conditions: tuple[Condition, ...] = ()
    bind_markers: Markers = ()


ModificationStatement: TypeAlias = InsertStatement | UpdateStatement | DeleteStatement


@dataclass(frozen=True, slots=True)
class BeginBatchStatement:
    """The whole ``BEGIN [UNLOGGED|COUNTER] BATCH .. APPLY BATCH`` text statement.

    (The protocol's ``BatchStatement`` is one entry of a BATCH *message*; this is the CQL text
    form. Both use the protocol's ``BatchType``.)
    """

    statements: tuple[ModificationStatement, ...]
    kind: BatchType = BatchType.LOGGED
    using: UsingClause = UsingClause()
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class TruncateStatement:
    table: QualifiedName
    timeout: Term | None = None
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class CreateKeyspaceStatement:
    keyspace: str
    properties: Properties
    if_not_exists: bool = False
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class AlterKeyspaceStatement:
    keyspace: str
    properties: Properties
    if_exists: bool = False
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class DropKeyspaceStatement:
    keyspace: str
    if_exists: bool = False
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class ColumnDefinition:
    name: str
    type: TypeSpec
    static: bool = False


@dataclass(frozen=True, slots=True)
class CreateTableStatement:
    """``partition_key``/``clustering_columns`` name columns of ``columns`` (checked later)."""

    table: QualifiedName
    columns: tuple[ColumnDefinition, ...]
    partition_key: tuple[str, ...]
    clustering_columns: tuple[str, ...] = ()
    clustering_order: tuple[OrderBy, ...] = ()
    properties: Properties = Properties()
    compact_storage: bool = False
    if_not_exists: bool = False
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class AddColumns:
    columns: tuple[ColumnDefinition, ...]
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True)
class DropColumns:
    columns: tuple[str, ...]
    if_exists: bool = False
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class RenameColumns:
    renames: tuple[tuple[str, str], ...]
    if_exists: bool = False


@dataclass(frozen=True, slots=True)
class AlterTableProperties:
    properties: Properties


AlterTableAction: TypeAlias = AddColumns | DropColumns | RenameColumns | AlterTableProperties


@dataclass(frozen=True, slots=True)
class AlterTableStatement:
    table: QualifiedName
    action: AlterTableAction
    if_exists: bool = False
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class DropTableStatement:
    table: QualifiedName
    if_exists: bool = False
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class FieldDefinition:
    name: str
    type: TypeSpec


@dataclass(frozen=True, slots=True)
class CreateTypeStatement:
    type_name: QualifiedName
    fields: tuple[FieldDefinition, ...]
    if_not_exists: bool = False
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class AlterTypeStatement:
    """``ALTER TYPE [IF EXISTS] t ADD [IF NOT EXISTS] f type``, ``... RENAME [IF EXISTS] f TO g
    [AND ...]`` or ``... ALTER f TYPE t`` (refused as Cassandra 4 does): exactly one of ``add``,
    ``renames`` and ``altered_field`` is set; ``if_field`` is the field's IF [NOT] EXISTS."""

    type_name: QualifiedName
    add: FieldDefinition | None = None
    renames: tuple[tuple[str, str], ...] = ()
    altered_field: str | None = None
    if_exists: bool = False
    if_field: bool = False
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class DropTypeStatement:
    type_name: QualifiedName
    if_exists: bool = False
    bind_markers: Markers = ()


@dataclass(frozen=True, slots=True)
class CallStatement:
    """``CALL namespace.procedure(term, ...)``: a node operation through CQL (the management
    API's ``CALL NodeOps.repair(...)`` form); the procedures are ``QueryProcessor``'s."""

    procedure: QualifiedName
    arguments: tuple[Term, ...]
    bind_markers: Markers = ()


class DescribeKind(enum.Enum):
    """What a ``DESCRIBE`` names (Cassandra 4's ``DescribeStatement`` factories)."""

    KEYSPACES = "keyspaces"
    KEYSPACE = "keyspace"
    ONLY_KEYSPACE = "only keyspace"
    TABLES = "tables"
    TABLE = "table"
    TYPES = "types"
    TYPE = "type"
    FUNCTIONS = "functions"
    FUNCTION = "function"
    AGGREGATES = "aggregates"
    AGGREGATE = "aggregate"
    INDEX = "index"
    MATERIALIZED_VIEW = "materialized view"
    CLUSTER = "cluster"
    SCHEMA = "schema"
    FULL_SCHEMA = "full schema"
    GENERIC = "generic"
    """``DESCRIBE name`` / ``DESCRIBE ks.name``: a keyspace or else a table, resolved at run."""


@dataclass(frozen=True, slots=True)
class DescribeStatement:
    """``DESCRIBE``/``DESC`` (server-side, Cassandra 4 / Scylla 5): ``name`` is the keyspace,
    table or type named, if any; ``with_internals`` is ``WITH INTERNALS``."""

    kind: DescribeKind
    name: QualifiedName | None = None
    with_internals: bool = False
    bind_markers: Markers = ()


Statement: TypeAlias = (
    UseStatement
    | DescribeStatement
    | CallStatement
    | UnsupportedStatement
    | SelectStatement
    | InsertStatement
    | UpdateStatement
    | DeleteStatement
    | BeginBatchStatement
    | TruncateStatement
    | CreateKeyspaceStatement
    | AlterKeyspaceStatement
    | DropKeyspaceStatement
    | CreateTableStatement
    | AlterTableStatement
    | DropTableStatement
    | CreateTypeStatement
    | AlterTypeStatement
    | DropTypeStatement
    | AuthStatement
)
