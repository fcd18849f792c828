"""Hypothesis strategies for every native protocol message ringflow can encode.

Generated messages are the ones that survive a round trip unchanged: top-level collection
types are non-frozen (the wire does not carry frozenness, nested ones are frozen), value names
only come with values.
"""

from __future__ import annotations

from hypothesis import strategies as st

from ringflow.cql import (
    UNSET,
    AlreadyExistsResponse,
    AuthChallenge,
    Authenticate,
    AuthResponse,
    AuthSuccess,
    Batch,
    BatchStatement,
    BatchType,
    ColumnSpec,
    Consistency,
    CqlValue,
    ErrorResponse,
    EventType,
    Execute,
    FunctionFailureResponse,
    Inet,
    Message,
    Options,
    Prepare,
    PreparedMetadata,
    PreparedResult,
    Query,
    QueryParameters,
    ReadFailureResponse,
    ReadTimeoutResponse,
    Ready,
    Register,
    RowsMetadata,
    RowsResult,
    SchemaChange,
    SchemaChangeEvent,
    SchemaChangeResult,
    SchemaChangeTarget,
    SchemaChangeType,
    SetKeyspaceResult,
    Startup,
    StatusChangeEvent,
    StatusChangeType,
    Supported,
    TopologyChangeEvent,
    TopologyChangeType,
    UnavailableResponse,
    UnpreparedResponse,
    VoidResult,
    WriteFailureResponse,
    WriteTimeoutResponse,
    WriteType,
)
from ringflow.errors import ErrorCode
from ringflow.schema import (
    NATIVE_TYPE_NAMES,
    CqlType,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
)

names = st.text(max_size=12)
ints = st.integers(-(2**31), 2**31 - 1)
consistencies = st.sampled_from(Consistency)
values: st.SearchStrategy[CqlValue] = st.one_of(st.binary(max_size=12), st.none(), st.just(UNSET))
cells = st.one_of(st.binary(max_size=12), st.none())
native_types = st.sampled_from(sorted(NATIVE_TYPE_NAMES)).map(NativeType)


def _user_types(children: st.SearchStrategy[CqlType], frozen: bool) -> st.SearchStrategy[CqlType]:
    fields = st.lists(st.tuples(names, children), max_size=3, unique_by=lambda field: field[0])
    return fields.flatmap(
        lambda chosen: st.builds(
            UserType,
            names,
            names,
            st.just(tuple(name for name, _ in chosen)),
            st.just(tuple(kind for _, kind in chosen)),
            st.just(frozen),
        )
    )


def _nested(children: st.SearchStrategy[CqlType]) -> st.SearchStrategy[CqlType]:
    """Types legal inside a collection, tuple or UDT: everything frozen."""
    frozen = children.map(lambda child: child.frozen_form())
    return st.one_of(
        frozen.map(lambda element: ListType(element, frozen=True)),
        frozen.map(lambda element: SetType(element, frozen=True)),
        st.builds(lambda key, value: MapType(key, value, frozen=True), frozen, frozen),
        st.lists(frozen, max_size=3).map(lambda elements: TupleType(tuple(elements))),
        _user_types(frozen, frozen=True),
    )


_frozen_types = st.recursive(native_types, _nested, max_leaves=6)
column_types: st.SearchStrategy[CqlType] = st.one_of(
    native_types,
    _frozen_types.map(lambda element: ListType(element)),
    _frozen_types.map(lambda element: SetType(element)),
    st.builds(MapType, _frozen_types, _frozen_types),
    st.lists(_frozen_types, max_size=3).map(lambda elements: TupleType(tuple(elements))),
    _user_types(_frozen_types, frozen=False),
)
column_specs = st.builds(ColumnSpec, names, names, names, column_types)


@st.composite
def query_parameters(draw: st.DrawFn) -> QueryParameters:
    bound = tuple(draw(st.lists(values, max_size=4)))
    named = bound and draw(st.booleans())
    return QueryParameters(
        consistency=draw(consistencies),
        values=bound,
        names=tuple(draw(st.lists(names, min_size=len(bound), max_size=len(bound))))
        if named
        else None,
        skip_metadata=draw(st.booleans()),
        page_size=draw(st.none() | ints),
        paging_state=draw(st.none() | st.binary(max_size=8)),
        serial_consistency=draw(st.none() | consistencies),
        default_timestamp=draw(st.none() | st.integers(-(2**63) + 1, 2**63 - 1)),
    )


@st.composite
def rows_metadata(draw: st.DrawFn) -> RowsMetadata:
    paging = draw(st.none() | st.binary(max_size=8))
    if draw(st.booleans()):
        return RowsMetadata.skipped(draw(st.integers(0, 5)), paging)
    shared = draw(st.booleans())
    specs = draw(st.lists(column_specs, max_size=4))
    if shared:
        specs = [ColumnSpec("ks", "t", spec.name, spec.type) for spec in specs]
    return RowsMetadata.describing(specs, paging)


@st.composite
def rows_results(draw: st.DrawFn) -> RowsResult:
    metadata = draw(rows_metadata())
    width = metadata.column_count
    rows = draw(st.lists(st.tuples(*[cells] * width), max_size=4)) if width else []
    return RowsResult(metadata, tuple(rows))


@st.composite
def prepared_results(draw: st.DrawFn) -> PreparedResult:
    columns = tuple(draw(st.lists(column_specs, max_size=4)))
    indexes = draw(st.lists(st.integers(0, len(columns) - 1), max_size=3)) if columns else []
    bind = PreparedMetadata(columns, tuple(indexes))
    return PreparedResult(draw(st.binary(max_size=16)), bind, draw(rows_metadata()))


@st.composite
def schema_changes(draw: st.DrawFn) -> SchemaChange:
    target = draw(st.sampled_from(SchemaChangeTarget))
    name = None if target is SchemaChangeTarget.KEYSPACE else draw(names)
    routine = target in (SchemaChangeTarget.FUNCTION, SchemaChangeTarget.AGGREGATE)
    arguments = tuple(draw(st.lists(names, max_size=3))) if routine else ()
    return SchemaChange(
        draw(st.sampled_from(SchemaChangeType)), target, draw(names), name, arguments
    )


inets = st.builds(
    Inet, st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)), st.integers(0, 65535)
)
_simple_codes = st.sampled_from(
    [
        ErrorCode.SERVER_ERROR,
        ErrorCode.PROTOCOL_ERROR,
        ErrorCode.AUTHENTICATION_ERROR,
        ErrorCode.OVERLOADED,
        ErrorCode.IS_BOOTSTRAPPING,
        ErrorCode.TRUNCATE_ERROR,
        ErrorCode.CDC_WRITE_FAILURE,
        ErrorCode.SYNTAX_ERROR,
        ErrorCode.UNAUTHORIZED,
        ErrorCode.INVALID,
        ErrorCode.CONFIG_ERROR,
    ]
)
write_types = st.sampled_from(WriteType)

errors: st.SearchStrategy[Message] = st.one_of(
    st.builds(ErrorResponse, _simple_codes, names),
    st.builds(UnavailableResponse, names, consistencies, ints, ints),
    st.builds(WriteTimeoutResponse, names, consistencies, ints, ints, write_types),
    st.builds(ReadTimeoutResponse, names, consistencies, ints, ints, st.booleans()),
    st.builds(ReadFailureResponse, names, consistencies, ints, ints, ints, st.booleans()),
    st.builds(WriteFailureResponse, names, consistencies, ints, ints, ints, write_types),
    st.builds(FunctionFailureResponse, names, names, names, st.lists(names).map(tuple)),
    st.builds(AlreadyExistsResponse, names, names, names),
    st.builds(UnpreparedResponse, names, st.binary(max_size=16)),
)

requests: st.SearchStrategy[Message] = st.one_of(
    st.builds(Startup, st.dictionaries(names, names, max_size=4)),
    st.builds(AuthResponse, st.none() | st.binary(max_size=8)),
    st.just(Options()),
    st.builds(Query, st.text(max_size=40), query_parameters()),
    st.builds(Prepare, st.text(max_size=40)),
    st.builds(Execute, st.binary(max_size=16), query_parameters()),
    st.builds(
        Batch,
        st.sampled_from(BatchType),
        st.lists(
            st.builds(
                BatchStatement,
                st.one_of(st.text(max_size=20), st.binary(max_size=8)),
                st.lists(values, max_size=3).map(tuple),
            ),
            max_size=4,
        ).map(tuple),
        consistencies,
        st.none() | consistencies,
        st.none() | st.integers(0, 2**63 - 1),
    ),
    st.builds(Register, st.lists(st.sampled_from(EventType), max_size=3).map(tuple)),
)

responses: st.SearchStrategy[Message] = st.one_of(
    errors,
    st.just(Ready()),
    st.builds(Authenticate, names),
    st.builds(
        Supported, st.dictionaries(names, st.lists(names, max_size=3).map(tuple), max_size=4)
    ),
    st.builds(AuthChallenge, st.none() | st.binary(max_size=8)),
    st.builds(AuthSuccess, st.none() | st.binary(max_size=8)),
    st.just(VoidResult()),
    rows_results(),
    st.builds(SetKeyspaceResult, names),
    prepared_results(),
    st.builds(SchemaChangeResult, schema_changes()),
    st.builds(TopologyChangeEvent, st.sampled_from(TopologyChangeType), inets),
    st.builds(StatusChangeEvent, st.sampled_from(StatusChangeType), inets),
    st.builds(SchemaChangeEvent, schema_changes()),
)
