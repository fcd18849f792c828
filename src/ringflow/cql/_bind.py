"""Bind variables: their specs (PREPARE metadata), binding EXECUTE values, the prepared cache.

Rules (Cassandra ``cql3/VariableSpecifications.java``, ``QueryProcessor.computeId``,
``doc/native_protocol_v4.spec`` §4.2.5.4, re-expressed):

* every bind marker gets a :class:`ColumnSpec` from its receiver: a column is named after the
  column (``in(c)`` for ``c IN ?``, ``key(m)``/``value(m)`` for map entries and collection
  elements, ``idx(l)`` for a list index), ``[limit]``, ``[per_partition_limit]``,
  ``[timestamp]`` and ``[ttl]`` for the clauses, ``partition key token`` for ``token(..) > ?``;
  a named marker (``:name``) is named ``name``;
* ``partition_key_indexes``: for each partition key column, in key order, the index of the marker
  giving it with ``=`` (or its INSERT value); empty unless every key column has one, so drivers
  route by token only when they can compute it;
* a prepared id is the MD5 of the session keyspace (when set) followed by the query text, so the
  same text prepared in two keyspaces gets two ids;
* EXECUTE values are positional (exactly one per marker) or named (matched to marker names, each
  name binding every marker of that name);
* the cache is an LRU bounded in entries and in total query characters; an evicted id answers
  Unprepared (0x2500) and the driver prepares again.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ringflow.cql._ast import (
    AddTo,
    Assignment,
    BeginBatchStatement,
    BindMarker,
    CastSelector,
    ColumnRelation,
    ColumnSelector,
    DeleteElement,
    DeleteStatement,
    ElementRelation,
    ElementSelector,
    FieldSelector,
    FunctionCall,
    FunctionSelector,
    InsertStatement,
    InValues,
    ListLiteral,
    MapLiteral,
    MultiColumnRelation,
    Operator,
    Prepend,
    QualifiedName,
    Relation,
    RelationValue,
    RemoveFrom,
    Selector,
    SelectStatement,
    SetElement,
    SetField,
    SetLiteral,
    SetValue,
    Statement,
    Term,
    TermSelector,
    TokenRelation,
    TupleLiteral,
    TypeCast,
    UdtLiteral,
    UpdateStatement,
    UsingClause,
    resolve_type,
)
from ringflow.cql._exec_common import ExecutorLimits
from ringflow.cql._exec_functions import function_argument_name, resolve_function
from ringflow.cql._exec_selectors import element_receiver
from ringflow.cql._exec_terms import compatible_result
from ringflow.cql._results import ColumnSpec
from ringflow.cql._wire import CqlValue
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    BIGINT,
    DURATION,
    INT,
    TEXT,
    CqlType,
    ListType,
    MapType,
    SetType,
    Table,
    TupleType,
    UserType,
)

TableLookup = Callable[[QualifiedName], Table]
"""Resolves a statement's table name (session keyspace applied) or raises Invalid."""
MarkerSpecs = dict[int, ColumnSpec]


def prepared_id(query: str, keyspace: str | None) -> bytes:
    """Cassandra's prepared statement id: MD5 of ``keyspace + query`` (just the query if none)."""
    text = query if keyspace is None else keyspace + query
    return hashlib.md5(text.encode("utf-8")).digest()


# --- marker specs --------------------------------------------------------------------------------


@dataclass(slots=True)
class _SpecCollector:
    table: Table
    specs: MarkerSpecs = field(default_factory=dict)

    def add(self, marker: BindMarker, name: str, cql_type: CqlType) -> None:
        shown = marker.name if marker.name is not None else name
        self.specs[marker.index] = ColumnSpec(self.table.keyspace, self.table.name, shown, cql_type)

    def term(self, term: Term, name: str, cql_type: CqlType) -> None:
        if isinstance(term, BindMarker):
            self.add(term, name, cql_type)
        elif isinstance(term, ListLiteral | SetLiteral):
            element = cql_type.element if isinstance(cql_type, ListType | SetType) else cql_type
            for item in term.elements:
                self.term(item, f"value({name})", element)
        elif isinstance(term, MapLiteral) and isinstance(cql_type, MapType):
            for key, value in term.entries:
                self.term(key, f"key({name})", cql_type.key)
                self.term(value, f"value({name})", cql_type.value)
        elif isinstance(term, TupleLiteral) and isinstance(cql_type, TupleType):
            for item, item_type in zip(term.elements, cql_type.elements, strict=False):
                self.term(item, name, item_type)
        elif isinstance(term, UdtLiteral) and isinstance(cql_type, UserType):
            for field_name, value in term.fields:
                if field_name in cql_type.field_names:
                    index = cql_type.field_names.index(field_name)
                    self.term(value, f"{name}.{field_name}", cql_type.field_types[index])
        elif isinstance(term, FunctionCall):
            self.function(term, name, cql_type)
        elif isinstance(term, TypeCast):
            self.term(term.term, name, resolve_type(term.type, {}))

    def function(self, call: FunctionCall, name: str, receiver: CqlType) -> None:
        if call.name == "fromjson" and call.keyspace in (None, "system"):
            for argument in call.args:
                self.term(argument, function_argument_name(0, "fromjson"), TEXT)
            return
        if call.name == "token":
            for argument, column in zip(call.args, self.table.partition_key_columns, strict=False):
                self.term(argument, column.name, column.type)
            return
        function = resolve_function(call.name, call.keyspace, [None] * len(call.args))
        if not compatible_result(function.return_type, receiver):
            raise InvalidRequest(
                f"Type error: cannot assign result of function system.{call.name} (type "
                f"{function.return_type.cql_name()}) to {name} (type {receiver.cql_name()})"
            )
        for position, (argument, argument_type) in enumerate(
            zip(call.args, function.argument_types, strict=False)
        ):
            self.term(argument, function_argument_name(position, call.name), argument_type)

    def relation(self, relation: Relation) -> None:
        if isinstance(relation, TokenRelation):
            self.term(relation.value, "partition key token", BIGINT)
        elif isinstance(relation, ColumnRelation):
            self.column_relation(relation)
        elif isinstance(relation, ElementRelation):
            column_type = self.table.column(relation.column).type
            if isinstance(column_type, MapType):
                self.term(relation.key, f"key({relation.column})", column_type.key)
                self.term(relation.value, f"value({relation.column})", column_type.value)
        else:
            self.multi_relation(relation)

    def column_relation(self, relation: ColumnRelation) -> None:
        column = self.table.column(relation.column)
        cql_type = column.type
        if relation.operator is Operator.CONTAINS and isinstance(
            cql_type, ListType | SetType | MapType
        ):
            element = cql_type.value if isinstance(cql_type, MapType) else cql_type.element
            self.term_or_in(relation.value, f"value({column.name})", element)
        elif relation.operator is Operator.CONTAINS_KEY and isinstance(cql_type, MapType):
            self.term_or_in(relation.value, f"key({column.name})", cql_type.key)
        elif relation.operator in (Operator.IN, Operator.NOT_IN):
            self.in_values(relation.value, column.name, cql_type.frozen_form())
        else:
            self.term_or_in(relation.value, column.name, cql_type.frozen_form())

    def term_or_in(self, value: RelationValue, name: str, cql_type: CqlType) -> None:
        if isinstance(value, InValues):
            for item in value.elements:
                self.term(item, name, cql_type)
        else:
            self.term(value, name, cql_type)

    def in_values(self, value: RelationValue, name: str, cql_type: CqlType) -> None:
        if isinstance(value, BindMarker):
            self.add(value, f"in({name})", ListType(cql_type, frozen=True))
        else:
            self.term_or_in(value, name, cql_type)

    def multi_relation(self, relation: MultiColumnRelation) -> None:
        types = []
        for name in relation.columns:
            types.append(self.table.column(name).type)
        tuple_type = TupleType(tuple(types))
        shown = "(" + ",".join(relation.columns) + ")"
        if relation.operator is Operator.IN:
            self.in_values(relation.value, shown, tuple_type)
        else:
            self.term_or_in(relation.value, shown, tuple_type)

    def using(self, using: UsingClause) -> None:
        if using.timestamp is not None:
            self.term(using.timestamp, "[timestamp]", BIGINT)
        if using.ttl is not None:
            self.term(using.ttl, "[ttl]", INT)
        if using.timeout is not None:
            self.term(using.timeout, "[timeout]", DURATION)

    def selector(self, selector: Selector) -> None:
        """Markers anywhere in a selector, nested calls and casts included (Cassandra types a
        marker by the parameter of the function it is an argument of)."""
        if isinstance(selector, ElementSelector):
            _element_specs(self, selector)
        elif isinstance(selector, FieldSelector | CastSelector):
            self.selector(selector.selector)
        elif isinstance(selector, FunctionSelector):
            self.function_selector(selector)

    def function_selector(self, selector: FunctionSelector) -> None:
        for argument in selector.args:
            if not isinstance(argument, TermSelector):
                self.selector(argument)
        if not any(isinstance(a, TermSelector) for a in selector.args):
            return
        if selector.name in ("token", "count", "min", "max", "sum", "avg"):
            raise InvalidRequest(f"bind markers are not supported as {selector.name} arguments")
        function = resolve_function(selector.name, selector.keyspace, [None] * len(selector.args))
        for position, argument in enumerate(selector.args):
            if isinstance(argument, TermSelector):
                argument_type = function.argument_types[position]
                name = function_argument_name(position, selector.name)
                self.term(argument.term, name, argument_type)


def _element_specs(collector: _SpecCollector, selector: ElementSelector) -> None:
    """Bind markers of ``m[?]`` / ``s[?..?]`` on a column: ``key(m)`` / ``value(s)``."""
    collector.selector(selector.selector)
    markers = [t for t in (selector.element, selector.end) if isinstance(t, BindMarker)]
    if not markers:
        return
    inner = selector.selector
    if not isinstance(inner, ColumnSelector):
        raise InvalidRequest("bind markers in an element selection need a column before '['")
    name, key_type = element_receiver(inner.name, collector.table.column(inner.name).type)
    for marker in markers:
        collector.term(marker, name, key_type)


def _assignment_specs(collector: _SpecCollector, assignment: Assignment) -> None:
    column = collector.table.column(assignment.column)
    cql_type = column.type
    if isinstance(assignment, SetValue | AddTo | Prepend):
        collector.term(assignment.value, column.name, cql_type)
    elif isinstance(assignment, RemoveFrom):
        removed = SetType(cql_type.key, True) if isinstance(cql_type, MapType) else cql_type
        collector.term(assignment.value, column.name, removed)
    elif isinstance(assignment, SetElement):
        if isinstance(cql_type, MapType):
            collector.term(assignment.key, f"key({column.name})", cql_type.key)
            collector.term(assignment.value, f"value({column.name})", cql_type.value)
        elif isinstance(cql_type, ListType):
            collector.term(assignment.key, f"idx({column.name})", INT)
            collector.term(assignment.value, f"value({column.name})", cql_type.element)
    elif (
        isinstance(assignment, SetField)
        and isinstance(cql_type, UserType)
        and assignment.field in cql_type.field_names
    ):
        index = cql_type.field_names.index(assignment.field)
        collector.term(
            assignment.value, f"{column.name}.{assignment.field}", cql_type.field_types[index]
        )


def _select_specs(statement: SelectStatement, table: Table) -> MarkerSpecs:
    collector = _SpecCollector(table)
    for item in statement.selection:
        collector.selector(item.selector)
    for relation in statement.where:
        collector.relation(relation)
    if statement.per_partition_limit is not None:
        collector.term(statement.per_partition_limit, "[per_partition_limit]", INT)
    if statement.limit is not None:
        collector.term(statement.limit, "[limit]", INT)
    if statement.timeout is not None:
        collector.term(statement.timeout, "[timeout]", DURATION)
    return collector.specs


def _insert_specs(statement: InsertStatement, table: Table) -> MarkerSpecs:
    collector = _SpecCollector(table)
    if statement.json is not None:  # Cassandra's Json.Marker: one text value named [json]
        collector.term(statement.json, "[json]", TEXT)
    for name, value in zip(statement.columns, statement.values, strict=False):
        collector.term(value, name, table.column(name).type)
    collector.using(statement.using)
    return collector.specs


def _update_specs(statement: UpdateStatement, table: Table) -> MarkerSpecs:
    collector = _SpecCollector(table)
    collector.using(statement.using)
    for assignment in statement.assignments:
        _assignment_specs(collector, assignment)
    for relation in statement.where:
        collector.relation(relation)
    return collector.specs


def _delete_specs(statement: DeleteStatement, table: Table) -> MarkerSpecs:
    collector = _SpecCollector(table)
    for target in statement.targets:
        if isinstance(target, DeleteElement):
            # Cassandra's ElementDeletion: a list index ``idx(l)``, a set element
            # ``value(s)``, a map key ``key(m)``.
            name, cql_type = target.column, table.column(target.column).type
            if isinstance(cql_type, MapType):
                collector.term(target.key, f"key({name})", cql_type.key)
            elif isinstance(cql_type, SetType):
                collector.term(target.key, f"value({name})", cql_type.element)
            else:
                collector.term(target.key, f"idx({name})", INT)
    collector.using(statement.using)
    for relation in statement.where:
        collector.relation(relation)
    return collector.specs


def marker_specs(statement: Statement, lookup: TableLookup) -> tuple[ColumnSpec, ...]:
    """The spec of every bind marker of ``statement``, by index."""
    markers = statement.bind_markers
    if not markers:
        return ()
    specs: MarkerSpecs = {}
    if isinstance(statement, BeginBatchStatement):
        for child in statement.statements:
            specs.update(_modification_specs(child, lookup(child.table)))
        if statement.using.timestamp is not None:
            first = lookup(statement.statements[0].table) if statement.statements else None
            if first is not None:
                collector = _SpecCollector(first)
                collector.using(statement.using)
                specs.update(collector.specs)
    elif isinstance(statement, SelectStatement):
        specs = _select_specs(statement, lookup(statement.table))
    elif isinstance(statement, InsertStatement | UpdateStatement | DeleteStatement):
        specs = _modification_specs(statement, lookup(statement.table))
    count = max(marker.index for marker in markers) + 1
    missing = [index for index in range(count) if index not in specs]
    if missing:
        raise InvalidRequest(f"cannot infer the type of bind marker(s) {missing} of the statement")
    return tuple(specs[index] for index in range(count))


def _modification_specs(
    statement: InsertStatement | UpdateStatement | DeleteStatement, table: Table
) -> MarkerSpecs:
    if isinstance(statement, InsertStatement):
        return _insert_specs(statement, table)
    if isinstance(statement, UpdateStatement):
        return _update_specs(statement, table)
    return _delete_specs(statement, table)


def partition_key_indexes(statement: Statement, table: Table | None) -> tuple[int, ...]:
    """The marker index of each partition key column, or ``()`` (see the module docstring)."""
    if table is None:
        return ()
    found: dict[str, int] = {}
    if isinstance(statement, InsertStatement):
        for name, value in zip(statement.columns, statement.values, strict=False):
            if isinstance(value, BindMarker):
                found[name] = value.index
    elif isinstance(statement, SelectStatement | UpdateStatement | DeleteStatement):
        for relation in statement.where:
            if (
                isinstance(relation, ColumnRelation)
                and relation.operator is Operator.EQ
                and isinstance(relation.value, BindMarker)
            ):
                found[relation.column] = relation.value.index
    indexes = [found.get(column.name) for column in table.partition_key_columns]
    if any(index is None for index in indexes):
        return ()
    return tuple(index for index in indexes if index is not None)


# --- binding values ------------------------------------------------------------------------------


def bind_values(
    statement: Statement,
    specs: Sequence[ColumnSpec] | None,
    values: Sequence[CqlValue],
    names: Sequence[str] | None,
) -> dict[int, CqlValue]:
    """Bound values by marker index; Invalid on a count or name mismatch."""
    markers = statement.bind_markers
    count = (max(marker.index for marker in markers) + 1) if markers else 0
    if names is None:
        if len(values) != count:
            raise InvalidRequest(
                f"There were {count} markers(?) in CQL but {len(values)} bound variables"
            )
        return dict(enumerate(values))
    by_name: dict[str, CqlValue] = {}
    for given, value in zip(names, values, strict=True):
        by_name[given] = value
        by_name.setdefault(given.lower(), value)
    marker_names = {marker.index: marker.name for marker in markers}
    bound: dict[int, CqlValue] = {}
    for index in range(count):
        name = marker_names.get(index)
        if name is None and specs is not None and index < len(specs):
            name = specs[index].name
        if name is None or (name not in by_name and name.lower() not in by_name):
            raise InvalidRequest(f"No value bound for bind variable {name or index}")
        bound[index] = by_name[name] if name in by_name else by_name[name.lower()]
    return bound


# --- the prepared cache --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreparedStatement:
    """A prepared statement: its text, the keyspace it was prepared in, its parse and metadata."""

    statement_id: bytes
    query: str
    keyspace: str | None
    statement: Statement
    variables: tuple[ColumnSpec, ...]
    partition_key_indexes: tuple[int, ...]
    result_columns: tuple[ColumnSpec, ...] | None
    tables: frozenset[tuple[str, str]]


class PreparedCache:
    """An LRU of prepared statements bounded in entries and total query characters."""

    def __init__(self, limits: ExecutorLimits) -> None:
        self._limits = limits
        self._entries: OrderedDict[bytes, PreparedStatement] = OrderedDict()
        self._chars = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, statement_id: bytes) -> PreparedStatement | None:
        found = self._entries.get(statement_id)
        if found is not None:
            self._entries.move_to_end(statement_id)
        return found

    def put(self, prepared: PreparedStatement) -> None:
        self.remove(prepared.statement_id)
        self._entries[prepared.statement_id] = prepared
        self._chars += len(prepared.query)
        while len(self._entries) > 1 and (
            len(self._entries) > self._limits.max_prepared_statements
            or self._chars > self._limits.max_prepared_query_chars
        ):
            _, evicted = self._entries.popitem(last=False)
            self._chars -= len(evicted.query)
            self.evictions += 1

    def remove(self, statement_id: bytes) -> None:
        old = self._entries.pop(statement_id, None)
        if old is not None:
            self._chars -= len(old.query)

    def invalidate(self, matches: Callable[[PreparedStatement], bool]) -> int:
        """Forget every statement ``matches`` selects (e.g. those reading a dropped table)."""
        doomed = [key for key, entry in self._entries.items() if matches(entry)]
        for key in doomed:
            self.remove(key)
        return len(doomed)

    def statements(self) -> Mapping[bytes, PreparedStatement]:
        return dict(self._entries)
