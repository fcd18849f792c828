"""SELECT clauses: selectors to result columns, values per row, aggregates.

Rules (Cassandra ``cql3/selection/*``, re-expressed):

* ``*`` lists the partition key, the clustering columns (key order), then the static and the
  regular columns, each group by name, as ``SELECT *`` does in Cassandra;
* result column names: the column, ``writetime(c)``, ``ttl(c)``, ``count`` for ``COUNT(*)``,
  ``system.f(args)`` for function calls, ``cast(x as t)``, ``x.field``; an alias replaces it;
* ``WRITETIME``/``TTL`` apply to non-key, single-cell columns; ``token(..)`` to the partition key
  columns in order;
* aggregates (``count``, ``min``, ``max``, ``sum``, ``avg``) fold every row into one; other
  selectors next to them show the first row's values (Cassandra's behaviour);
* ``DISTINCT`` may only select partition key and static columns, and all key columns.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ringflow.cql._ast import (
    BindMarker,
    CastSelector,
    ColumnSelector,
    CountRows,
    ElementSelector,
    FieldSelector,
    FunctionSelector,
    Selector,
    SelectStatement,
    Term,
    TermSelector,
    TtlOf,
    WritetimeOf,
    resolve_type,
)
from ringflow.cql._exec_common import StatementContext
from ringflow.cql._exec_functions import AGGREGATE_NAMES, function_argument_name, resolve_function
from ringflow.cql._exec_terms import term_bytes
from ringflow.cql._json_values import to_json
from ringflow.cql._results import ColumnSpec
from ringflow.cql._wire import UNSET
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    BIGINT,
    INT,
    TEXT,
    Column,
    ColumnKind,
    CqlType,
    ListType,
    MapType,
    NativeType,
    SetType,
    Table,
    UserType,
    cells_from_collection_value,
    compare,
    deserialize,
    serialize,
    serialized_collection_from_cells,
)
from ringflow.storage import ResultRow

Getter = Callable[[ResultRow], bytes | None]
_NUMERIC = frozenset(
    {"tinyint", "smallint", "int", "bigint", "varint", "decimal", "float", "double"}
)


class Aggregator(Protocol):
    def add(self, row: ResultRow) -> None: ...

    def result(self) -> bytes | None: ...


@dataclass(frozen=True, slots=True)
class OutputColumn:
    name: str
    type: CqlType
    value: Getter
    aggregate: Callable[[], Aggregator] | None = None


@dataclass(frozen=True, slots=True)
class Selection:
    columns: tuple[OutputColumn, ...]
    read_columns: frozenset[str] | None
    is_aggregate: bool
    star: tuple[int, tuple[str, ...]] | None = None
    """``SELECT *``: the clustering arity and the static and regular column names after the
    key columns (:func:`select_order`), so a row is its key and those values in order."""

    def specs(self, table: Table) -> tuple[ColumnSpec, ...]:
        return tuple(ColumnSpec(table.keyspace, table.name, c.name, c.type) for c in self.columns)

    def row(self, row: ResultRow) -> tuple[bytes | None, ...]:
        star = self.star
        if star is not None and len(row.clustering) == star[0]:
            values = row.values.get
            return (*row.partition_key, *row.clustering, *[values(name) for name in star[1]])
        return tuple([column.value(row) for column in self.columns])

    def fold(self, rows: Iterable[ResultRow]) -> tuple[bytes | None, ...]:
        """One row aggregating ``rows``."""
        folding = self.folding()
        for row in rows:
            folding.add(row)
        return folding.result()

    def folding(self) -> Folding:
        """A fold of rows given one at a time (rows read in steps: ``_exec_select``)."""
        return Folding(self)


class Folding:
    """``Selection.fold`` of rows given one at a time."""

    def __init__(self, selection: Selection) -> None:
        self._columns = selection.columns
        self._aggregators = [
            c.aggregate() if c.aggregate is not None else None for c in selection.columns
        ]
        self._first: ResultRow | None = None

    def add(self, row: ResultRow) -> bool:
        """Fold ``row`` in; True (every row is wanted)."""
        if self._first is None:
            self._first = row
        for aggregator in self._aggregators:
            if aggregator is not None:
                aggregator.add(row)
        return True

    def result(self) -> tuple[bytes | None, ...]:
        first = self._first
        return tuple(
            aggregator.result()
            if aggregator is not None
            else (column.value(first) if first is not None else None)
            for column, aggregator in zip(self._columns, self._aggregators, strict=True)
        )


def value_getter(column: Column) -> Getter:
    """Reads ``column`` from a result row (clustering of a static-only row: null)."""
    position = column.position
    if column.kind is ColumnKind.PARTITION_KEY:
        return lambda row: row.partition_key[position]
    if column.kind is ColumnKind.CLUSTERING:
        return lambda row: row.clustering[position] if len(row.clustering) > position else None
    name = column.name
    return lambda row: row.values.get(name)


def select_order(table: Table) -> tuple[Column, ...]:
    """The columns of ``SELECT *``, in Cassandra's order."""

    def by_name(columns: Sequence[Column]) -> list[Column]:
        return sorted(columns, key=lambda c: c.name.encode("utf-8"))

    return (
        *table.partition_key_columns,
        *table.clustering_columns,
        *by_name(table.static_columns),
        *by_name(table.regular_columns),
    )


@dataclass(slots=True)
class _Compiler:
    table: Table
    context: StatementContext
    reads: set[str] = field(default_factory=set)

    def column(self, name: str) -> Column:
        column = self.table.column(name)
        if not column.is_primary_key:
            self.reads.add(column.name)
        return column

    def compile(self, selector: Selector) -> OutputColumn:
        handler = _HANDLERS.get(type(selector))
        if handler is None:
            raise InvalidRequest(f"unsupported selector {selector!r}")
        return handler(self, selector)

    def plain(self, selector: Selector) -> OutputColumn:
        compiled = self.compile(selector)
        if compiled.aggregate is not None:
            raise InvalidRequest("aggregate functions cannot be nested in other selectors")
        return compiled


def _column(compiler: _Compiler, selector: Selector) -> OutputColumn:
    assert isinstance(selector, ColumnSelector)
    column = compiler.column(selector.name)
    return OutputColumn(column.name, column.type, value_getter(column))


def _metadata_column(compiler: _Compiler, name: str, what: str) -> Column:
    column = compiler.column(name)
    if column.is_primary_key:
        raise InvalidRequest(f"Cannot use selection function {what} on PRIMARY KEY part {name}")
    if column.type.is_multicell:
        raise InvalidRequest(f"Cannot use selection function {what} on non-frozen {name}")
    return column


def _writetime(compiler: _Compiler, selector: Selector) -> OutputColumn:
    assert isinstance(selector, WritetimeOf)
    name = _metadata_column(compiler, selector.column, "writeTime").name

    def value(row: ResultRow) -> bytes | None:
        found = row.writetime_us.get(name)
        return None if found is None else serialize(BIGINT, found)

    return OutputColumn(f"writetime({name})", BIGINT, value)


def _ttl(compiler: _Compiler, selector: Selector) -> OutputColumn:
    assert isinstance(selector, TtlOf)
    name = _metadata_column(compiler, selector.column, "ttl").name

    def value(row: ResultRow) -> bytes | None:
        found = row.ttl_s.get(name)
        return None if found is None else serialize(INT, found)

    return OutputColumn(f"ttl({name})", INT, value)


def _count_rows(compiler: _Compiler, selector: Selector) -> OutputColumn:
    return OutputColumn("count", BIGINT, lambda row: None, lambda: _Count(None))


def _function(compiler: _Compiler, selector: Selector) -> OutputColumn:
    assert isinstance(selector, FunctionSelector)
    if selector.keyspace in (None, "system") and selector.name == "token":
        return _token(compiler, selector)
    if selector.keyspace in (None, "system") and selector.name in AGGREGATE_NAMES:
        return _aggregate(compiler, selector)
    if selector.keyspace in (None, "system") and selector.name == "tojson":
        return _to_json(compiler, selector)
    arguments: list[OutputColumn | None] = [
        None if isinstance(a, TermSelector) else compiler.plain(a) for a in selector.args
    ]
    function = resolve_function(
        selector.name, selector.keyspace, [None if a is None else a.type for a in arguments]
    )
    getters: list[Getter] = []
    for position, (argument, declared) in enumerate(
        zip(arguments, function.argument_types, strict=True)
    ):
        if argument is not None:
            getters.append(argument.value)
            continue
        term = selector.args[position]
        assert isinstance(term, TermSelector)
        constant = term_bytes(
            term.term, declared, function_argument_name(position, selector.name), compiler.context
        )
        fixed = None if constant is UNSET else constant
        getters.append(lambda row, fixed=fixed: fixed)  # type: ignore[misc]
    context = compiler.context
    types = function.argument_types

    def value(row: ResultRow) -> bytes | None:
        raw = [getter(row) for getter in getters]
        python = [None if r is None else deserialize(t, r) for r, t in zip(raw, types, strict=True)]
        result = function.call(context, python)
        return None if result is None else serialize(function.return_type, result)

    shown = ", ".join(a.name if a is not None else "?" for a in arguments)
    return OutputColumn(f"system.{selector.name}({shown})", function.return_type, value)


def _to_json(compiler: _Compiler, selector: FunctionSelector) -> OutputColumn:
    """``toJson(x)``: the JSON text of any value (``_json_values``)."""
    if len(selector.args) != 1 or isinstance(selector.args[0], TermSelector):
        raise InvalidRequest("toJson() takes exactly one argument, a selector")
    inner = compiler.plain(selector.args[0])

    def value(row: ResultRow) -> bytes | None:
        return serialize(TEXT, to_json(inner.type, inner.value(row)))

    return OutputColumn(f"system.tojson({inner.name})", TEXT, value)


def _token(compiler: _Compiler, selector: FunctionSelector) -> OutputColumn:
    keys = compiler.table.partition_key_columns
    names = tuple(a.name if isinstance(a, ColumnSelector) else None for a in selector.args)
    if names != tuple(c.name for c in keys):
        raise InvalidRequest(
            "The token function must be called on the partition key columns, in order: "
            + ", ".join(c.name for c in keys)
        )
    return OutputColumn(
        f"system.token({', '.join(c.name for c in keys)})",
        BIGINT,
        lambda row: serialize(BIGINT, row.token),
    )


def _aggregate(compiler: _Compiler, selector: FunctionSelector) -> OutputColumn:
    if len(selector.args) != 1:
        raise InvalidRequest(f"Invalid number of arguments in call to function {selector.name}")
    argument = compiler.plain(selector.args[0])
    name = f"system.{selector.name}({argument.name})"
    if selector.name == "count":
        return OutputColumn(name, BIGINT, lambda row: None, lambda: _Count(argument.value))
    cql_type = argument.type
    if selector.name in ("min", "max"):
        sign = -1 if selector.name == "min" else 1
        return OutputColumn(name, cql_type, lambda row: None, lambda: _Extreme(argument, sign))
    if not isinstance(cql_type, NativeType) or cql_type.name not in _NUMERIC:
        raise InvalidRequest(f"Invalid call to function {selector.name}: {cql_type.cql_name()}")
    average = selector.name == "avg"
    return OutputColumn(name, cql_type, lambda row: None, lambda: _Sum(argument, average))


def _cast(compiler: _Compiler, selector: Selector) -> OutputColumn:
    assert isinstance(selector, CastSelector)
    inner = compiler.plain(selector.selector)
    target = resolve_type(selector.type, {})
    if not isinstance(target, NativeType) or not isinstance(inner.type, NativeType):
        raise InvalidRequest(f"cannot cast {inner.type.cql_name()} to {target.cql_name()}")
    convert = _converter(inner.type, target)

    def value(row: ResultRow) -> bytes | None:
        raw = inner.value(row)
        return None if raw is None else serialize(target, convert(deserialize(inner.type, raw)))

    return OutputColumn(f"cast({inner.name} as {target.cql_name()})", target, value)


def _converter(source: NativeType, target: NativeType) -> Callable[[object], object]:
    if source == target:
        return lambda value: value
    if target in (TEXT, NativeType("ascii")):
        return str
    if source.name in _NUMERIC and target.name in _NUMERIC:
        if target.name in ("float", "double"):
            return lambda value: float(value)  # type: ignore[arg-type]
        if target.name == "decimal":
            return lambda value: decimal.Decimal(str(value))
        return lambda value: int(value)  # type: ignore[call-overload]
    raise InvalidRequest(f"cannot cast {source.cql_name()} to {target.cql_name()}")


def _field(compiler: _Compiler, selector: Selector) -> OutputColumn:
    assert isinstance(selector, FieldSelector)
    inner = compiler.plain(selector.selector)
    udt = inner.type
    if not isinstance(udt, UserType) or selector.field not in udt.field_names:
        raise InvalidRequest(f"Invalid field selection: {inner.name} has no field {selector.field}")
    field_type = udt.field_types[udt.field_names.index(selector.field)]
    wanted = selector.field

    def value(row: ResultRow) -> bytes | None:
        raw = inner.value(row)
        if raw is None:
            return None
        fields = deserialize(udt, raw)
        assert isinstance(fields, dict)
        found = fields.get(wanted)
        return None if found is None else serialize(field_type, found)

    return OutputColumn(f"{inner.name}.{wanted}", field_type, value)


def element_receiver(inner: str, cql_type: CqlType) -> tuple[str, CqlType]:
    """The bind name and type of an element or slice bound of a ``cql_type`` value called
    ``inner``: a map's key ``key(m)``, a set's element ``value(s)`` (Cassandra's
    ``specForElementOrSlice``); InvalidRequest for a list or another type."""
    if isinstance(cql_type, MapType):
        return f"key({inner})", cql_type.key
    if isinstance(cql_type, SetType):
        return f"value({inner})", cql_type.element
    if isinstance(cql_type, ListType):
        raise InvalidRequest(
            f"Element selection is only allowed on sets and maps, but {inner} is a list"
        )
    raise InvalidRequest(
        f"Invalid element selection: {inner} is of type {cql_type.cql_name()} is not a collection"
    )


def _term_text(term: Term | None) -> str:
    if term is None:
        return ""
    if isinstance(term, BindMarker):
        return "?" if term.name is None else f":{term.name}"
    text = getattr(term, "text", None)
    if isinstance(text, str):
        return text
    value = getattr(term, "value", term)
    return f"'{value}'" if isinstance(value, str) else str(value)


def _element(compiler: _Compiler, selector: Selector) -> OutputColumn:
    """``m['k']`` (the value, null if absent), ``s[e]`` (the element, null if absent),
    ``m['a'..'c']`` / ``s[1..3]`` (the entries within the inclusive bounds, null if none)."""
    assert isinstance(selector, ElementSelector)
    inner = compiler.plain(selector.selector)
    collection = inner.type
    name, key_type = element_receiver(inner.name, collection)
    context = compiler.context
    bounds = [
        None if term is None else term_bytes(term, key_type, name, context)
        for term in (selector.element, selector.end)
    ]
    # A bound left null or unset (or not bound yet, when preparing) selects nothing for an
    # element and leaves that side of a slice open.
    start, end = (b if isinstance(b, bytes) else None for b in bounds)
    shown = f"{inner.name}[{_term_text(selector.element)}"
    if selector.is_slice:
        shown += f"..{_term_text(selector.end)}"
    shown += "]"

    def within(key: bytes) -> bool:
        if start is not None and compare(key_type, key, start) < 0:
            return False
        return end is None or compare(key_type, key, end) <= 0

    def value(row: ResultRow) -> bytes | None:
        raw = inner.value(row)
        if raw is None:
            return None
        entries = cells_from_collection_value(collection, raw)
        if not selector.is_slice:
            if start is None:
                return None
            for key, item in entries:
                if compare(key_type, key, start) == 0:
                    return key if isinstance(collection, SetType) else item
            return None
        kept = [(key, item) for key, item in entries if within(key)]
        return serialized_collection_from_cells(collection, kept) if kept else None

    if selector.is_slice:
        result_type = collection
    else:
        result_type = collection.value if isinstance(collection, MapType) else key_type
    return OutputColumn(shown, result_type, value)


def _term(compiler: _Compiler, selector: Selector) -> OutputColumn:
    raise InvalidRequest("a constant or bind marker is only allowed as a function argument here")


_HANDLERS: dict[type, Callable[[_Compiler, Selector], OutputColumn]] = {
    ColumnSelector: _column,
    WritetimeOf: _writetime,
    TtlOf: _ttl,
    CountRows: _count_rows,
    FunctionSelector: _function,
    CastSelector: _cast,
    FieldSelector: _field,
    ElementSelector: _element,
    TermSelector: _term,
}


# --- aggregators ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Count:
    argument: Getter | None
    count: int = 0

    def add(self, row: ResultRow) -> None:
        if self.argument is None or self.argument(row) is not None:
            self.count += 1

    def result(self) -> bytes | None:
        return serialize(BIGINT, self.count)


@dataclass(slots=True)
class _Extreme:
    argument: OutputColumn
    sign: int
    best: bytes | None = None

    def add(self, row: ResultRow) -> None:
        value = self.argument.value(row)
        if value is None:
            return
        if self.best is None or compare(self.argument.type, value, self.best) * self.sign > 0:
            self.best = value

    def result(self) -> bytes | None:
        return self.best


@dataclass(slots=True)
class _Sum:
    argument: OutputColumn
    average: bool
    total: object = 0
    count: int = 0

    def add(self, row: ResultRow) -> None:
        raw = self.argument.value(row)
        if raw is None:
            return
        self.total = self.total + deserialize(self.argument.type, raw)  # type: ignore[operator]
        self.count += 1

    def result(self) -> bytes | None:
        cql_type = self.argument.type
        assert isinstance(cql_type, NativeType)
        total = self.total
        if self.average and self.count:
            if cql_type.name in ("float", "double"):
                total = float(total) / self.count  # type: ignore[arg-type]
            elif cql_type.name == "decimal":
                total = decimal.Decimal(total) / self.count  # type: ignore[arg-type]
            else:  # integer division truncating toward zero, as Java's long division
                assert isinstance(total, int)
                quotient = abs(total) // self.count
                total = quotient if total >= 0 else -quotient
        if cql_type.name in ("float", "double"):
            total = float(total)  # type: ignore[arg-type]
        return serialize(cql_type, total, self.argument.name)


# --- the selection -------------------------------------------------------------------------------


def compile_selection(
    statement: SelectStatement, table: Table, context: StatementContext
) -> Selection:
    """The result columns of ``statement`` and the value columns reading them needs."""
    compiler = _Compiler(table, context)
    star = None
    if statement.is_star:
        order = select_order(table)
        columns = tuple(OutputColumn(c.name, c.type, value_getter(c)) for c in order)
        read: frozenset[str] | None = None
        keys = len(table.partition_key_columns) + len(table.clustering_columns)
        star = (len(table.clustering_columns), tuple(c.name for c in order[keys:]))
    else:
        compiled = []
        for item in statement.selection:
            output = compiler.compile(item.selector)
            if item.alias is not None:
                output = OutputColumn(item.alias, output.type, output.value, output.aggregate)
            compiled.append(output)
        columns = tuple(compiled)
        read = frozenset(compiler.reads)
    if statement.distinct:
        _check_distinct(statement, table)
    is_aggregate = any(c.aggregate is not None for c in columns)
    return Selection(columns, read, is_aggregate, star)


def _referenced(selector: Selector) -> list[str]:
    """The columns a selector reads."""
    if isinstance(selector, ColumnSelector):
        return [selector.name]
    if isinstance(selector, WritetimeOf | TtlOf):
        return [selector.column]
    if isinstance(selector, FunctionSelector):
        return [name for argument in selector.args for name in _referenced(argument)]
    if isinstance(selector, CastSelector | FieldSelector | ElementSelector):
        return _referenced(selector.selector)
    return []


def _check_distinct(statement: SelectStatement, table: Table) -> None:
    if statement.is_star:
        raise InvalidRequest("SELECT DISTINCT queries must only request partition key columns")
    names = set()
    for item in statement.selection:
        for name in _referenced(item.selector):
            column = table.column(name)
            if column.kind not in (ColumnKind.PARTITION_KEY, ColumnKind.STATIC):
                raise InvalidRequest(
                    "SELECT DISTINCT queries must only request partition key columns and/or "
                    f"static columns (not {column.name})"
                )
            names.add(column.name)
    missing = [c.name for c in table.partition_key_columns if c.name not in names]
    if missing and not all(isinstance(i.selector, CountRows) for i in statement.selection):
        raise InvalidRequest(
            "SELECT DISTINCT queries must request all the partition key columns (missing "
            + ", ".join(missing)
            + ")"
        )
