"""WHERE clauses: relations to partition keys, clustering slices, a token range and row filters.

Rules (Cassandra ``cql3/restrictions/StatementRestrictions.java``, re-expressed):

* partition key: every column restricted by ``=`` or ``IN`` gives a list of keys (the cartesian
  product, bounded by ``ExecutorLimits.max_partition_keys``); otherwise the read is a scan of a
  token range (``token(k) > a AND token(k) <= b``, all of the ring by default), and restrictions
  on some key columns become filters;
* clustering: ``=``/``IN`` on a prefix of the clustering columns (single- or multi-column), then
  at most one slice (``<``, ``<=``, ``>``, ``>=``, single- or multi-column) on the next columns,
  form slices in clustering order (a DESC column swaps the bounds); any other clustering
  restriction, and every clustering restriction of a scan, becomes a filter;
* restrictions on regular and static columns (``=``, ranges, ``IN``, ``CONTAINS [KEY]``,
  ``m[k] = v``) are filters; filters need ``ALLOW FILTERING`` (Cassandra's message), except the
  checks of a partition key restricted alongside ``token()``;
* a column restricted by ``=`` may not be restricted again; ``!=`` and ``LIKE`` are refused;
* bound null or unset values are Invalid, naming the column.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ringflow.cql._ast import (
    BindMarker,
    ColumnRelation,
    ElementRelation,
    InValues,
    MultiColumnRelation,
    Operator,
    Relation,
    RelationValue,
    Term,
    TokenRelation,
    TupleLiteral,
)
from ringflow.cql._exec_common import FILTERING_MESSAGE, ExecutorLimits, StatementContext
from ringflow.cql._exec_terms import bound_value, required_bytes, term_value
from ringflow.cql._wire import UNSET
from ringflow.errors import InvalidRequest
from ringflow.ring import MAX_TOKEN, MIN_TOKEN
from ringflow.schema import (
    BIGINT,
    ClusteringBound,
    ClusteringOrder,
    Column,
    ColumnKind,
    CqlType,
    ListType,
    MapType,
    NativeType,
    SetType,
    Table,
    TupleType,
    UserType,
    cells_from_collection_value,
    compare,
    deserialize,
    encode_clustering,
    list_values,
    normalize,
    serialize,
)

_SLICE_OPERATORS = frozenset({Operator.LT, Operator.LTE, Operator.GT, Operator.GTE})
Key = tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Slice:
    """A range of clustering keys in clustering order (unbounded = empty prefix)."""

    start: ClusteringBound
    end: ClusteringBound


FULL_SLICE = Slice(ClusteringBound(), ClusteringBound())


@dataclass(frozen=True, slots=True)
class RowFilter:
    """One check a row must pass. ``columns`` has one column except for multi-column relations;
    ``values`` holds one value (a tuple of components for multi-column) or the IN list."""

    columns: tuple[Column, ...]
    operator: Operator
    values: tuple[tuple[bytes, ...], ...]
    element_key: bytes | None = None


@dataclass(frozen=True, slots=True)
class TokenBounds:
    """Tokens in ``(low, high]``; ``high`` None means to the end of the ring."""

    low: int = MIN_TOKEN
    high: int | None = None

    @property
    def is_empty(self) -> bool:
        return self.high is not None and (self.high <= self.low or self.high == MIN_TOKEN)

    def contains(self, token: int) -> bool:
        return token > self.low and (self.high is None or token <= self.high)


@dataclass(frozen=True, slots=True)
class Restrictions:
    """A WHERE clause resolved against a table and bound values."""

    partition_keys: tuple[Key, ...] | None
    token_range: TokenBounds | None
    clustering_prefixes: tuple[Key, ...]
    slice_lower: tuple[Key, bool] | None
    slice_upper: tuple[Key, bool] | None
    slice_columns: tuple[Column, ...]
    filters: tuple[RowFilter, ...]
    needs_filtering: bool
    clustering_restricted: bool

    def slices(self, table: Table) -> tuple[Slice, ...]:
        """The clustering slices, in clustering order (none for an empty ``IN``)."""
        types = tuple((c.type, c.order) for c in table.clustering_columns)
        prefixes = sorted(set(self.clustering_prefixes), key=lambda p: encode_clustering(types, p))
        descending = bool(self.slice_columns) and (
            self.slice_columns[0].order is ClusteringOrder.DESC
        )
        lower, upper = (
            (self.slice_upper, self.slice_lower)
            if descending
            else (
                self.slice_lower,
                self.slice_upper,
            )
        )
        slices = []
        for prefix in prefixes:
            start = (
                ClusteringBound(prefix + lower[0], lower[1]) if lower else ClusteringBound(prefix)
            )
            end = ClusteringBound(prefix + upper[0], upper[1]) if upper else ClusteringBound(prefix)
            slices.append(Slice(start, end))
        return tuple(slices)

    def full_clusterings(self, table: Table) -> tuple[Key, ...] | None:
        """The exact clustering keys when every clustering column is fixed by ``=``/``IN``."""
        width = len(table.clustering_columns)
        if self.slice_columns or any(len(p) != width for p in self.clustering_prefixes):
            return None
        return tuple(dict.fromkeys(self.clustering_prefixes))


@dataclass(slots=True)
class _Builder:
    table: Table
    context: StatementContext
    limits: ExecutorLimits
    eq: dict[str, tuple[bytes, ...]] = field(default_factory=dict)
    multi_eq: dict[tuple[str, ...], tuple[Key, ...]] = field(default_factory=dict)
    slices: dict[tuple[str, ...], list[tuple[Operator, Key]]] = field(default_factory=dict)
    filters: list[RowFilter] = field(default_factory=list)
    not_in: list[RowFilter] = field(default_factory=list)
    """``c NOT IN (..)`` checks; one on a clustering column of a known partition filters
    within it without ALLOW FILTERING (Cassandra 5)."""
    token: TokenBounds | None = None
    restricted: set[str] = field(default_factory=set)
    by_tuple: set[str] = field(default_factory=set)
    """Columns restricted by a multi-column (tuple) relation, ``(c) > (1)`` included."""
    by_column: set[str] = field(default_factory=set)
    """Columns restricted by a single-column relation (``=``, ``IN`` or a slice)."""

    def value(self, term: Term, column: Column) -> bytes:
        return required_bytes(
            term, column.type.frozen_form(), column.name, self.context, self.table
        )

    def in_values(self, value: RelationValue, column: Column) -> tuple[bytes, ...]:
        if isinstance(value, InValues):
            return tuple(dict.fromkeys(self.value(term, column) for term in value.elements))
        if not isinstance(value, BindMarker):
            return (self.value(value, column),)
        list_type = ListType(column.type.frozen_form(), frozen=True)
        data = required_bytes(value, list_type, f"in({column.name})", self.context)
        elements = list_values(list_type, data, column.name)
        return tuple(dict.fromkeys(elements))

    def tuple_values(self, value: RelationValue, columns: Sequence[Column]) -> tuple[Key, ...]:
        tuple_type = TupleType(tuple(c.type.frozen_form() for c in columns))
        if isinstance(value, InValues):
            return tuple(self.one_tuple(term, tuple_type, columns) for term in value.elements)
        return (self.one_tuple(value, tuple_type, columns),)

    def one_tuple(self, term: Term, tuple_type: TupleType, columns: Sequence[Column]) -> Key:
        if isinstance(term, TupleLiteral):
            if len(term.elements) != len(columns):
                raise InvalidRequest(
                    f"Expected {len(columns)} elements in value tuple, but got {len(term.elements)}"
                )
            return tuple(
                self.value(element, column)
                for element, column in zip(term.elements, columns, strict=True)
            )
        item = term_value(term, tuple_type, "(..)", self.context, self.table)
        return self.encode_tuple(item, tuple_type, columns)

    def encode_tuple(self, item: object, tuple_type: TupleType, columns: Sequence[Column]) -> Key:
        if not isinstance(item, tuple) or any(part is None for part in item):
            raise InvalidRequest("Invalid null value in a multi-column relation")
        return tuple(
            normalize(t, serialize(t, part, c.name), c.name)
            for part, t, c in zip(item, tuple_type.elements, columns, strict=True)
        )


def analyze_where(
    table: Table,
    relations: Sequence[Relation],
    context: StatementContext,
    limits: ExecutorLimits,
) -> Restrictions:
    """Resolve ``relations`` against ``table`` with the statement's bound values."""
    builder = _Builder(table, context, limits)
    for relation in relations:
        _add_relation(builder, relation)
    return _assemble(builder)


def _add_relation(builder: _Builder, relation: Relation) -> None:
    table = builder.table
    if isinstance(relation, TokenRelation):
        _add_token(builder, relation)
        return
    if isinstance(relation, MultiColumnRelation):
        _add_multi(builder, relation)
        return
    column = table.column(relation.column)
    if isinstance(relation, ElementRelation):
        _add_element_filter(builder, relation, column)
        return
    _check_operator(relation.operator, column)
    if relation.operator in (Operator.EQ, Operator.IN):
        if column.name in builder.eq or column.name in builder.restricted:
            raise InvalidRequest(
                f"{column.name} cannot be restricted by more than one relation if it includes "
                "an Equal"
            )
        if relation.operator is Operator.IN:
            builder.eq[column.name] = builder.in_values(relation.value, column)
        else:
            builder.eq[column.name] = (builder.value(_single(relation.value), column),)
        builder.restricted.add(column.name)
        builder.by_column.add(column.name)
        return
    if relation.operator is Operator.NOT_IN:
        values = builder.in_values(relation.value, column)
        builder.not_in.append(RowFilter((column,), Operator.NOT_IN, tuple((v,) for v in values)))
        return
    if relation.operator in _SLICE_OPERATORS:
        _check_slice_type(column)
        if column.name in builder.eq:
            raise InvalidRequest(
                f"{column.name} cannot be restricted by more than one relation if it includes "
                "an Equal"
            )
        bound = builder.value(_single(relation.value), column)
        builder.slices.setdefault((column.name,), []).append((relation.operator, (bound,)))
        builder.restricted.add(column.name)
        builder.by_column.add(column.name)
        return
    _add_contains(builder, relation, column)


def _check_slice_type(column: Column) -> None:
    """Cassandra's ``SingleColumnRelation.newSliceRestriction``: durations have no order."""
    cql_type = column.type
    if not references_duration(cql_type):
        return
    if cql_type.is_collection:
        raise InvalidRequest(
            "Slice restrictions are not supported on collections containing durations"
        )
    if isinstance(cql_type, TupleType):
        raise InvalidRequest("Slice restrictions are not supported on tuples containing durations")
    if isinstance(cql_type, UserType):
        raise InvalidRequest("Slice restrictions are not supported on UDTs containing durations")
    raise InvalidRequest("Slice restrictions are not supported on duration columns")


def references_duration(cql_type: CqlType) -> bool:
    if isinstance(cql_type, NativeType):
        return cql_type.name == "duration"
    if isinstance(cql_type, ListType | SetType):
        return references_duration(cql_type.element)
    if isinstance(cql_type, MapType):
        return references_duration(cql_type.key) or references_duration(cql_type.value)
    if isinstance(cql_type, TupleType):
        return any(references_duration(t) for t in cql_type.elements)
    if isinstance(cql_type, UserType):
        return any(references_duration(t) for t in cql_type.field_types)
    return False


def _single(value: RelationValue) -> Term:
    if isinstance(value, InValues):
        raise InvalidRequest("a list of values is only allowed after IN")
    return value


def _check_operator(operator: Operator, column: Column) -> None:
    if operator is Operator.NEQ:
        raise InvalidRequest(f'Unsupported "!=" relation: {column.name} != <value>')
    if operator is Operator.LIKE:
        raise InvalidRequest(f"LIKE restriction on {column.name} needs a SASI index: unsupported")
    multicell = column.type.is_multicell
    if multicell and operator not in (Operator.CONTAINS, Operator.CONTAINS_KEY):
        raise InvalidRequest(
            f"Collection column '{column.name}' ({column.type.cql_name()}) cannot be restricted "
            f"by a '{operator.value}' relation"
        )
    if operator in (Operator.CONTAINS, Operator.CONTAINS_KEY) and not column.type.is_collection:
        raise InvalidRequest(f"Cannot use {operator.value} on non-collection column {column.name}")
    if operator is Operator.CONTAINS_KEY and not isinstance(column.type, MapType):
        raise InvalidRequest(f"Cannot use CONTAINS KEY on non-map column {column.name}")


def _add_contains(builder: _Builder, relation: ColumnRelation, column: Column) -> None:
    cql_type = column.type
    if relation.operator is Operator.CONTAINS_KEY:
        assert isinstance(cql_type, MapType)
        element_type: CqlType = cql_type.key
    elif isinstance(cql_type, MapType):
        element_type = cql_type.value
    else:
        assert isinstance(cql_type, ListType | SetType)
        element_type = cql_type.element
    value = required_bytes(_single(relation.value), element_type, column.name, builder.context)
    builder.filters.append(RowFilter((column,), relation.operator, ((value,),)))


def _add_element_filter(builder: _Builder, relation: ElementRelation, column: Column) -> None:
    cql_type = column.type
    if not isinstance(cql_type, MapType) or relation.operator is not Operator.EQ:
        raise InvalidRequest(
            f"element restrictions ({column.name}[key] = value) are only supported on maps with ="
        )
    key = required_bytes(relation.key, cql_type.key, column.name, builder.context)
    value = required_bytes(relation.value, cql_type.value, column.name, builder.context)
    builder.filters.append(RowFilter((column,), Operator.EQ, ((value,),), key))


def _add_token(builder: _Builder, relation: TokenRelation) -> None:
    keys = tuple(c.name for c in builder.table.partition_key_columns)
    if relation.columns != keys:
        if sorted(relation.columns) == sorted(keys):
            raise InvalidRequest(
                "The token function arguments must be in the partition key order: "
                + ", ".join(keys)
            )
        raise InvalidRequest(
            "The token() function must be applied to all partition key components or none of them"
        )
    data = required_bytes(
        relation.value, BIGINT, "partition key token", builder.context, builder.table
    )
    token = int.from_bytes(data, "big", signed=True)
    current = builder.token or TokenBounds()
    operator = relation.operator
    if operator is Operator.EQ:
        low, high = max(current.low, token - 1), token
        current = TokenBounds(low, high if current.high is None else min(current.high, high))
    elif operator in (Operator.GT, Operator.GTE):
        low = token if operator is Operator.GT else max(token - 1, MIN_TOKEN)
        current = TokenBounds(max(current.low, low), current.high)
    elif operator in (Operator.LT, Operator.LTE):
        high = token if operator is Operator.LTE else token - 1
        high = min(high, MAX_TOKEN)
        current = TokenBounds(
            current.low, high if current.high is None else min(current.high, high)
        )
    else:
        raise InvalidRequest(f"Unsupported operator {operator.value} on token()")
    builder.token = current


def _add_multi(builder: _Builder, relation: MultiColumnRelation) -> None:
    table = builder.table
    columns = tuple(table.column(name) for name in relation.columns)
    for column in columns:
        if column.kind is not ColumnKind.CLUSTERING:
            raise InvalidRequest(
                f"Multi-column relations can only be applied to clustering columns but was "
                f"applied to: {column.name}"
            )
        if column.name in builder.restricted and relation.operator in (Operator.EQ, Operator.IN):
            raise InvalidRequest(f"{column.name} cannot be restricted by more than one relation")
    positions = [c.position for c in columns]
    if positions != list(range(positions[0], positions[0] + len(positions))):
        raise InvalidRequest(
            "Clustering columns must appear in the PRIMARY KEY order in multi-column relations"
        )
    if relation.operator is Operator.IN:
        builder.multi_eq[relation.columns] = _multi_in(builder, relation, columns)
    elif relation.operator is Operator.EQ:
        builder.multi_eq[relation.columns] = builder.tuple_values(_single(relation.value), columns)
    elif relation.operator in _SLICE_OPERATORS:
        (values,) = builder.tuple_values(_single(relation.value), columns)
        builder.slices.setdefault(relation.columns, []).append((relation.operator, values))
    else:
        raise InvalidRequest(
            f"Unsupported operator {relation.operator.value} in a multi-column relation"
        )
    builder.restricted.update(relation.columns)
    builder.by_tuple.update(relation.columns)


def _multi_in(
    builder: _Builder, relation: MultiColumnRelation, columns: Sequence[Column]
) -> tuple[Key, ...]:
    value = relation.value
    tuple_type = TupleType(tuple(c.type.frozen_form() for c in columns))
    if isinstance(value, BindMarker):
        list_type = ListType(tuple_type, frozen=True)
        data = required_bytes(value, list_type, "in(..)", builder.context)
        items = deserialize(list_type, data, "in(..)")
        assert isinstance(items, list)
        return tuple(builder.encode_tuple(item, tuple_type, columns) for item in items)
    return builder.tuple_values(value, columns)


# --- assembling ----------------------------------------------------------------------------------


def _product(value_lists: Sequence[Sequence[Key]], limit: int, what: str) -> tuple[Key, ...]:
    size = 1
    for values in value_lists:
        size *= len(values)
    if size > limit:
        raise InvalidRequest(
            f"{what} restrictions select {size} combinations, more than the limit of {limit}"
        )
    return tuple(
        tuple(itertools.chain.from_iterable(parts)) for parts in itertools.product(*value_lists)
    )


def _check_mixed(builder: _Builder) -> None:
    mixed = sorted(builder.by_tuple & builder.by_column)
    if mixed:
        raise InvalidRequest(
            "Mixing single column relations and multi column relations on clustering columns is "
            f"not allowed (column {mixed[0]})"
        )


def _assemble(builder: _Builder) -> Restrictions:
    _check_mixed(builder)
    table = builder.table
    needs_filtering = bool(builder.filters)
    filters = list(builder.filters)
    key_columns = table.partition_key_columns
    partition_keys: tuple[Key, ...] | None = None
    if all(c.name in builder.eq for c in key_columns):
        lists = [[(v,) for v in builder.eq[c.name]] for c in key_columns]
        partition_keys = _product(lists, builder.limits.max_partition_keys, "partition key")
    else:
        for column in key_columns:
            if column.name in builder.eq:
                filters.append(_eq_filter(column, builder.eq[column.name]))
                needs_filtering = True
            for operator, bound in builder.slices.get((column.name,), ()):
                filters.append(RowFilter((column,), operator, (bound,)))
                needs_filtering = True
    for column in (*table.static_columns, *table.regular_columns):
        if column.name in builder.eq:
            filters.append(_eq_filter(column, builder.eq[column.name]))
            needs_filtering = True
        for operator, bound in builder.slices.get((column.name,), ()):
            filters.append(RowFilter((column,), operator, (bound,)))
            needs_filtering = True
    for row_filter in builder.not_in:
        filters.append(row_filter)
        if row_filter.columns[0].kind is not ColumnKind.CLUSTERING or partition_keys is None:
            needs_filtering = True
    clustering = _clustering(builder, partition_keys is not None, filters)
    prefixes, lower, upper, slice_columns, clustering_filtered = clustering
    needs_filtering = needs_filtering or clustering_filtered
    return Restrictions(
        partition_keys=partition_keys,
        token_range=builder.token,
        clustering_prefixes=prefixes,
        slice_lower=lower,
        slice_upper=upper,
        slice_columns=slice_columns,
        filters=tuple(filters),
        needs_filtering=needs_filtering,
        clustering_restricted=any(c.name in builder.restricted for c in table.clustering_columns),
    )


def _eq_filter(column: Column, values: tuple[bytes, ...]) -> RowFilter:
    operator = Operator.EQ if len(values) == 1 else Operator.IN
    return RowFilter((column,), operator, tuple((v,) for v in values))


ClusteringParts = tuple[
    tuple[Key, ...], tuple[Key, bool] | None, tuple[Key, bool] | None, tuple[Column, ...], bool
]


def _clustering(builder: _Builder, keyed: bool, filters: list[RowFilter]) -> ClusteringParts:
    """Prefix product, slice and leftover filters of the clustering restrictions."""
    columns = builder.table.clustering_columns
    lists: list[Sequence[Key]] = []
    lower: tuple[Key, bool] | None = None
    upper: tuple[Key, bool] | None = None
    slice_columns: tuple[Column, ...] = ()
    used: set[str] = set()
    position = 0
    while keyed and position < len(columns):
        name = columns[position].name
        multi = next((k for k in builder.multi_eq if k[0] == name), None)
        # Bounds of different arity (``(a, b) > (0, 1) AND (a, b, c) <= (1, 1, 0)``) are one
        # slice over the longest tuple of columns, each bound a prefix of it.
        slice_keys = sorted((k for k in builder.slices if k[0] == name), key=len)
        slice_key = slice_keys[-1] if slice_keys else None
        if name in builder.eq:
            lists.append([(v,) for v in builder.eq[name]])
            used.add(name)
            position += 1
        elif multi is not None:
            lists.append(builder.multi_eq[multi])
            used.update(multi)
            position += len(multi)
        elif slice_key is not None:
            slice_columns = tuple(builder.table.column(n) for n in slice_key)
            if len({c.order for c in slice_columns}) > 1:
                raise InvalidRequest(
                    "multi-column slices over clustering columns of mixed order are not supported"
                )
            lower, upper = _slice_bounds(b for k in slice_keys for b in builder.slices[k])
            used.update(slice_key)
            break
        else:
            break
    prefixes = _product(lists, builder.limits.max_clustering_prefixes, "clustering")
    filtered = _leftover_filters(builder, columns, used, filters)
    return prefixes, lower, upper, slice_columns, filtered


def _slice_bounds(
    bounds: Iterable[tuple[Operator, Key]],
) -> tuple[tuple[Key, bool] | None, tuple[Key, bool] | None]:
    lower: tuple[Key, bool] | None = None
    upper: tuple[Key, bool] | None = None
    for operator, values in bounds:
        if operator in (Operator.GT, Operator.GTE):
            if lower is not None:
                raise InvalidRequest("More than one restriction was found for the start bound")
            lower = (values, operator is Operator.GTE)
        else:
            if upper is not None:
                raise InvalidRequest("More than one restriction was found for the end bound")
            upper = (values, operator is Operator.LTE)
    return lower, upper


def _leftover_filters(
    builder: _Builder, columns: Sequence[Column], used: set[str], filters: list[RowFilter]
) -> bool:
    filtered = False
    for column in columns:
        if column.name in used:
            continue
        if column.name in builder.eq:
            filters.append(_eq_filter(column, builder.eq[column.name]))
            filtered = True
    for key, tuples in builder.multi_eq.items():
        if key[0] not in used:
            cols = tuple(builder.table.column(n) for n in key)
            operator = Operator.EQ if len(tuples) == 1 else Operator.IN
            filters.append(RowFilter(cols, operator, tuples))
            filtered = True
    for key, bounds in builder.slices.items():
        cols = tuple(builder.table.column(n) for n in key)
        if key[0] in used or cols[0].kind is not ColumnKind.CLUSTERING:
            continue
        for operator, values in bounds:
            filters.append(RowFilter(cols, operator, (values,)))
            filtered = True
    return filtered


def require_no_filtering(restrictions: Restrictions, allow_filtering: bool) -> None:
    if restrictions.needs_filtering and not allow_filtering:
        raise InvalidRequest(FILTERING_MESSAGE)


# --- evaluating filters --------------------------------------------------------------------------

RowValue = Callable[[Column], bytes | None]


def _compare_tuple(columns: Sequence[Column], left: Key, right: Key) -> int:
    for column, a, b in zip(columns, left, right, strict=False):
        # an empty value sorts before every other (Int32Type.compareCustom)
        empty = not a or not b
        order = bool(a) - bool(b) if empty else compare(column.type.frozen_form(), a, b)
        if order:
            return order
    return 0


def filter_matches(row_filter: RowFilter, value_of: RowValue) -> bool:
    """Whether a row (its values through ``value_of``) passes ``row_filter``; null fails."""
    values = tuple(value_of(column) for column in row_filter.columns)
    if any(value is None for value in values):
        return False
    present = tuple(v for v in values if v is not None)
    operator = row_filter.operator
    if operator in (Operator.CONTAINS, Operator.CONTAINS_KEY) or row_filter.element_key is not None:
        return _collection_matches(row_filter, present[0])
    if any(references_duration(c.type) for c in row_filter.columns):
        # durations have no order, only equality of their bytes (Cassandra's BYTE_ORDER)
        orders = [0 if present == wanted else 1 for wanted in row_filter.values]
    else:
        orders = [
            _compare_tuple(row_filter.columns, present, wanted) for wanted in row_filter.values
        ]
    if operator in (Operator.EQ, Operator.IN):
        return any(order == 0 for order in orders)
    if operator is Operator.NOT_IN:
        return all(order != 0 for order in orders)
    order = orders[0]
    return {
        Operator.LT: order < 0,
        Operator.LTE: order <= 0,
        Operator.GT: order > 0,
        Operator.GTE: order >= 0,
    }[operator]


def _collection_matches(row_filter: RowFilter, data: bytes) -> bool:
    """``CONTAINS``, ``CONTAINS KEY`` and ``m[k] = v`` on the value's bytes: element equality is
    the type's comparator (``compare``), so empty elements match as Cassandra's do."""
    column = row_filter.columns[0]
    cql_type = column.type.frozen_form()
    wanted = row_filter.values[0][0]
    if isinstance(cql_type, MapType):
        entries = cells_from_collection_value(cql_type, data, column.name)
        key_type, value_type = cql_type.key, cql_type.value
        if row_filter.element_key is not None:
            element_key = row_filter.element_key
            return any(
                compare(key_type, k, element_key) == 0 and compare(value_type, v, wanted) == 0
                for k, v in entries
            )
        if row_filter.operator is Operator.CONTAINS_KEY:
            return any(compare(key_type, k, wanted) == 0 for k, _ in entries)
        return any(compare(value_type, v, wanted) == 0 for _, v in entries)
    if isinstance(cql_type, SetType):
        elements = [e for e, _ in cells_from_collection_value(cql_type, data, column.name)]
    elif isinstance(cql_type, ListType):
        elements = list_values(cql_type, data, column.name)
    else:
        return False
    return any(compare(cql_type.element, element, wanted) == 0 for element in elements)


def marker_value_present(term: Term, context: StatementContext) -> bool:
    """False when ``term`` is a bind marker bound to unset (e.g. ``LIMIT ?`` left unset)."""
    if isinstance(term, BindMarker):
        return bound_value(term, context) is not UNSET
    return True
