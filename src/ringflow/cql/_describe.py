"""Server-side ``DESCRIBE``: which schema elements a statement names, as rows. Pure.

Cassandra 4 ``cql3/statements/DescribeStatement.java`` for the forms, the result columns
(``system.describe``: ``keyspace_name, type, name`` for listings, plus ``create_statement`` for
elements; ``cluster, partitioner, snitch[, range_ownership]`` for ``CLUSTER``) and the paging;
Scylla ``cql3/statements/describe_statement.cc`` for CDC log tables and the messages. Rules:

* Keyspaces by name; in a keyspace its user types (a type after the types it uses), then its
  tables by name, each followed by its CDC log's ``ALTER TABLE ... WITH`` when CDC is on. The
  log table of a CDC-enabled base is left out of listings and schema dumps (Scylla
  ``is_log_for_some_table``); ``DESCRIBE TABLE`` of it answers its statement in a comment.
* ``KEYSPACES`` lists every keyspace; ``TABLES``/``TYPES`` those of the session keyspace, or of
  every keyspace without one; ``SCHEMA`` every non-system keyspace, ``FULL SCHEMA`` all.
  ringflow has no functions, aggregates, indexes or views: their listings are empty and naming
  one is Cassandra's "not found".
* ``DESCRIBE name``: the keyspace ``name`` if there is one, else the table ``name`` of the
  named or session keyspace.
* Paging as Cassandra's: a page holds ``page_size`` rows from an offset; the paging state carries
  the statement's fingerprint, the schema version and the next offset, and a page asked after the
  schema changed is Invalid (Cassandra's message). Pages are capped by
  ``ExecutorLimits.max_page_size_rows``; an unpaged DESCRIBE answers every row (a schema is
  bounded by the DDL that made it).
* Errors are Invalid (0x2200) with Scylla's messages: "'k' not found in keyspaces", "Table 't'
  not found in keyspace 'k'", "Type 't' not found in keyspace 'k'", "'n' not found in keyspace
  'k'", "No keyspace specified and no current keyspace".
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import msgpack

from ringflow.cql._ast import DescribeKind, DescribeStatement, QualifiedName, quote_name
from ringflow.cql._describe_cql import (
    CompactionFor,
    keyspace_cql,
    log_alter_cql,
    table_cql,
    type_cql,
)
from ringflow.cql._exec_common import DISTRIBUTED_KEYSPACES, LOCAL_KEYSPACES
from ringflow.cql._exec_system import (
    DISTRIBUTED_KEYSPACE_DEFINITIONS,
    DISTRIBUTED_TABLES,
    VIRTUAL_TABLES,
    compaction_for,
)
from ringflow.cql._requests import QueryParameters
from ringflow.cql._results import ColumnSpec, RowsMetadata, RowsResult
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    CDC_LOG_SUFFIX,
    LOCAL_STRATEGY_CLASS,
    TEXT,
    CqlType,
    Keyspace,
    ListType,
    MapType,
    SchemaState,
    Table,
    UserType,
    schema_digest,
    serialize,
    system_tables_of,
)

__all__ = [
    "DescribeContext",
    "DescribePage",
    "describe_context",
    "describe_specs",
    "execute_describe",
]

PAGING_STATE_TAG = 0x44  # "D": not a SELECT's paging state (those start with 0x01)
SCHEMA_CHANGED_WHILE_PAGING_MESSAGE = (
    "The schema has changed since the previous page of the DESCRIBE statement result. Please "
    "retry the DESCRIBE statement."
)
PARTITIONER = "org.apache.cassandra.dht.Murmur3Partitioner"
SNITCH = "org.apache.cassandra.locator.GossipingPropertyFileSnitch"


def _spec(name: str, cql_type: CqlType = TEXT) -> ColumnSpec:
    return ColumnSpec("system", "describe", name, cql_type)


LIST_SPECS = (_spec("keyspace_name"), _spec("type"), _spec("name"))
ELEMENT_SPECS = (*LIST_SPECS, _spec("create_statement"))
RANGE_OWNERSHIP_TYPE = MapType(TEXT, ListType(TEXT))
_LISTINGS = frozenset(
    {
        DescribeKind.KEYSPACES,
        DescribeKind.TABLES,
        DescribeKind.TYPES,
        DescribeKind.FUNCTIONS,
        DescribeKind.AGGREGATES,
    }
)


@dataclass(frozen=True, slots=True)
class DescribeContext:
    """What a DESCRIBE reads: the schema (with the system keyspaces' tables, by keyspace), the
    session keyspace, the cluster's name and ring ownership (end token → endpoints)."""

    state: SchemaState
    system_keyspaces: Mapping[str, Keyspace]
    system_tables: Mapping[tuple[str, str], Table]
    virtual_tables: frozenset[tuple[str, str]]
    compaction: CompactionFor
    session_keyspace: str | None
    cluster_name: str
    range_ownership: Callable[[str], Mapping[str, Sequence[str]]]
    schema_version: uuid.UUID


def describe_context(
    state: SchemaState,
    session_keyspace: str | None,
    cluster_name: str,
    range_ownership: Callable[[str], Mapping[str, Sequence[str]]],
) -> DescribeContext:
    """The context of a DESCRIBE run by a processor holding ``state``."""
    return DescribeContext(
        state=state,
        system_keyspaces=DISTRIBUTED_KEYSPACE_DEFINITIONS,
        system_tables={**DISTRIBUTED_TABLES, **VIRTUAL_TABLES},
        virtual_tables=frozenset(VIRTUAL_TABLES),
        compaction=compaction_for(state),
        session_keyspace=session_keyspace,
        cluster_name=cluster_name,
        range_ownership=range_ownership,
        schema_version=schema_digest(state),
    )


@dataclass(frozen=True, slots=True)
class _Row:
    keyspace: str
    type: str
    name: str
    create_statement: str | None = None


# --- the schema as DESCRIBE sees it -------------------------------------------------------------


def _keyspaces(context: DescribeContext) -> dict[str, Keyspace]:
    found = {**context.system_keyspaces, **context.state.keyspaces}
    for name in LOCAL_KEYSPACES:
        found.setdefault(name, Keyspace(name, {"class": LOCAL_STRATEGY_CLASS}))
    return dict(sorted(found.items()))


def _is_system(keyspace: str) -> bool:
    return keyspace in LOCAL_KEYSPACES or keyspace in DISTRIBUTED_KEYSPACES


def _tables(context: DescribeContext, keyspace: str) -> list[Table]:
    if keyspace in LOCAL_KEYSPACES:
        return list(system_tables_of(keyspace))
    if keyspace in DISTRIBUTED_KEYSPACES:
        return sorted(
            (t for k, t in context.system_tables.items() if k[0] == keyspace),
            key=lambda table: table.name,
        )
    return list(context.state.tables_of(keyspace))


def _table(context: DescribeContext, keyspace: str, name: str) -> Table | None:
    return next((t for t in _tables(context, keyspace) if t.name == name), None)


def cdc_base_of(state: SchemaState, table: Table) -> Table | None:
    """The CDC-enabled base table whose log ``table`` is (Scylla ``is_log_for_some_table``)."""
    if not table.name.endswith(CDC_LOG_SUFFIX):
        return None
    base = state.tables.get((table.keyspace, table.name[: -len(CDC_LOG_SUFFIX)]))
    return base if base is not None and base.options.cdc.enabled else None


def _types_in_order(keyspace: Keyspace) -> list[UserType]:
    """The keyspace's types by name, each after the types its fields use (so they run)."""
    ordered: list[UserType] = []
    placed: set[str] = set()

    def place(user_type: UserType) -> None:
        if user_type.name in placed:
            return
        placed.add(user_type.name)
        for used in _used_types(user_type):
            if used.keyspace == keyspace.name and used.name in keyspace.user_types:
                place(keyspace.user_types[used.name])
        ordered.append(user_type)

    for name in sorted(keyspace.user_types):
        place(keyspace.user_types[name])
    return ordered


def _used_types(cql_type: object) -> Iterator[UserType]:
    for field_type in getattr(cql_type, "field_types", ()) or getattr(cql_type, "elements", ()):
        yield from _used_types(field_type)
        if isinstance(field_type, UserType):
            yield field_type
    for attribute in ("element", "key", "value"):
        inner = getattr(cql_type, attribute, None)
        if inner is not None:
            if isinstance(inner, UserType):
                yield inner
            yield from _used_types(inner)


# --- elements ------------------------------------------------------------------------------------


def _keyspace_row(keyspace: Keyspace) -> _Row:
    return _Row(keyspace.name, "keyspace", keyspace.name, keyspace_cql(keyspace))


def _table_rows(context: DescribeContext, table: Table, internals: bool) -> list[_Row]:
    key = (table.keyspace, table.name)
    cdc_log = cdc_base_of(context.state, table) is not None
    dropped = context.state.dropped_columns_of(*key) if internals else ()
    statement = table_cql(
        table,
        context.compaction,
        with_internals=internals,
        cdc_log=cdc_log,
        virtual=key in context.virtual_tables,
        dropped=dropped,
    )
    rows = [_Row(table.keyspace, "table", table.name, statement)]
    if table.options.cdc.enabled:
        log = context.state.tables.get((table.keyspace, table.cdc_log_name))
        if log is not None:
            alter = log_alter_cql(log, context.compaction)
            rows.append(_Row(log.keyspace, "table", log.name, alter))
    return rows


def _keyspace_elements(
    context: DescribeContext, keyspace: Keyspace, internals: bool, *, only: bool = False
) -> list[_Row]:
    rows = [_keyspace_row(keyspace)]
    if only:
        return rows
    rows += [_Row(t.keyspace, "type", t.name, type_cql(t)) for t in _types_in_order(keyspace)]
    for table in _tables(context, keyspace.name):
        if cdc_base_of(context.state, table) is None:
            rows += _table_rows(context, table, internals)
    return rows


def _require_keyspace(context: DescribeContext, name: str | None) -> Keyspace:
    if name is None:
        raise InvalidRequest("No keyspace specified and no current keyspace")
    found = _keyspaces(context).get(name)
    if found is None:
        raise InvalidRequest(f"'{name}' not found in keyspaces")
    return found


def _element(context: DescribeContext, statement: DescribeStatement) -> list[_Row]:
    kind, internals = statement.kind, statement.with_internals
    name = statement.name or QualifiedName(None, "")
    keyspaces = _keyspaces(context)
    if kind is DescribeKind.GENERIC and name.keyspace is None and name.name in keyspaces:
        return _keyspace_elements(context, keyspaces[name.name], internals)
    keyspace = _require_keyspace(
        context,
        name.keyspace
        or context.session_keyspace
        or (name.name if kind is DescribeKind.GENERIC else None),
    )
    if kind is DescribeKind.TABLE or kind is DescribeKind.GENERIC:
        table = _table(context, keyspace.name, name.name)
        if table is not None:
            return _table_rows(context, table, internals)
        if kind is DescribeKind.GENERIC:
            raise InvalidRequest(f"'{name.name}' not found in keyspace '{keyspace.name}'")
        raise InvalidRequest(f"Table '{name.name}' not found in keyspace '{keyspace.name}'")
    if kind is DescribeKind.TYPE:
        user_type = keyspace.user_types.get(name.name)
        if user_type is None:
            raise InvalidRequest(f"Type '{name.name}' not found in keyspace '{keyspace.name}'")
        return [_Row(keyspace.name, "type", user_type.name, type_cql(user_type))]
    raise InvalidRequest(_NOT_FOUND[kind].format(name.name, keyspace.name))


_NOT_FOUND: Mapping[DescribeKind, str] = {
    DescribeKind.FUNCTION: "Function '{}' not found in keyspace '{}'",
    DescribeKind.AGGREGATE: "Aggregate '{}' not found in keyspace '{}'",
    DescribeKind.INDEX: "Table for existing index '{}' not found in '{}'",
    DescribeKind.MATERIALIZED_VIEW: "Materialized view '{}' not found in keyspace '{}'",
}


def _listing(context: DescribeContext, kind: DescribeKind) -> list[_Row]:
    keyspaces = _keyspaces(context)
    if kind is DescribeKind.KEYSPACES:
        return [_Row(name, "keyspace", name) for name in keyspaces]
    if context.session_keyspace is not None:
        keyspaces = {context.session_keyspace: _require_keyspace(context, context.session_keyspace)}
    rows: list[_Row] = []
    for keyspace in keyspaces.values():
        if kind is DescribeKind.TABLES:
            rows += [
                _Row(t.keyspace, "table", t.name)
                for t in _tables(context, keyspace.name)
                if cdc_base_of(context.state, t) is None
            ]
        elif kind is DescribeKind.TYPES:
            rows += [_Row(keyspace.name, "type", name) for name in sorted(keyspace.user_types)]
    return rows


def _rows(context: DescribeContext, statement: DescribeStatement) -> list[_Row]:
    kind = statement.kind
    if kind in _LISTINGS:
        return _listing(context, kind)
    if kind is DescribeKind.SCHEMA or kind is DescribeKind.FULL_SCHEMA:
        full = kind is DescribeKind.FULL_SCHEMA
        return [
            row
            for keyspace in _keyspaces(context).values()
            if full or not _is_system(keyspace.name)
            for row in _keyspace_elements(context, keyspace, statement.with_internals)
        ]
    if kind is DescribeKind.KEYSPACE or kind is DescribeKind.ONLY_KEYSPACE:
        named = statement.name.name if statement.name is not None else context.session_keyspace
        keyspace = _require_keyspace(context, named)
        only = kind is DescribeKind.ONLY_KEYSPACE
        return _keyspace_elements(context, keyspace, statement.with_internals, only=only)
    return _element(context, statement)


# --- results -------------------------------------------------------------------------------------


def _owns_ranges(context: DescribeContext) -> bool:
    keyspace = context.session_keyspace
    return keyspace is not None and not _is_system(keyspace)


def describe_specs(
    statement: DescribeStatement, context: DescribeContext
) -> tuple[ColumnSpec, ...]:
    """The result columns of ``statement`` (module docstring)."""
    if statement.kind is DescribeKind.CLUSTER:
        cluster = (_spec("cluster"), _spec("partitioner"), _spec("snitch"))
        if _owns_ranges(context):
            return (*cluster, _spec("range_ownership", RANGE_OWNERSHIP_TYPE))
        return cluster
    return LIST_SPECS if statement.kind in _LISTINGS else ELEMENT_SPECS


def _cluster_row(context: DescribeContext) -> tuple[bytes | None, ...]:
    row = [serialize(TEXT, text) for text in (context.cluster_name, PARTITIONER, SNITCH)]
    if _owns_ranges(context):
        assert context.session_keyspace is not None
        owners = context.range_ownership(context.session_keyspace)
        ownership = {token: list(owners[token]) for token in sorted(owners, key=int)}
        row.append(serialize(RANGE_OWNERSHIP_TYPE, ownership))
    return tuple(row)


def _encoded(row: _Row, elements: bool) -> tuple[bytes | None, ...]:
    cells = [quote_name(row.keyspace), row.type, quote_name(row.name)]
    if elements:
        cells.append(row.create_statement or "")
    return tuple(serialize(TEXT, cell) for cell in cells)


def _offset(paging_state: bytes | None, fingerprint: bytes, version: uuid.UUID) -> int:
    if paging_state is None:
        return 0
    problem = InvalidRequest("Invalid value for the paging state")
    if not paging_state or paging_state[0] != PAGING_STATE_TAG:
        raise problem
    try:
        fields = msgpack.unpackb(paging_state[1:], raw=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        raise problem from None
    if type(fields) is not list or len(fields) != 3 or fields[0] != fingerprint:
        raise problem
    _, schema_version, offset = fields
    if type(offset) is not int or offset < 0:
        raise problem
    if schema_version != version.bytes:
        raise InvalidRequest(SCHEMA_CHANGED_WHILE_PAGING_MESSAGE)
    return offset


@dataclass(frozen=True, slots=True)
class DescribePage:
    """The page a DESCRIBE is asked for (the QUERY/EXECUTE parameters)."""

    page_size: int | None
    paging_state: bytes | None
    skip_metadata: bool
    fingerprint: bytes
    max_page_size_rows: int

    @classmethod
    def of(cls, params: QueryParameters, fingerprint: bytes, max_rows: int) -> DescribePage:
        return cls(
            params.page_size, params.paging_state, params.skip_metadata, fingerprint, max_rows
        )


def execute_describe(
    statement: DescribeStatement, context: DescribeContext, page: DescribePage
) -> RowsResult:
    """One page of ``statement``'s answer (module rules)."""
    specs = describe_specs(statement, context)
    if statement.kind is DescribeKind.CLUSTER:
        all_rows = [_cluster_row(context)]
    else:
        elements = len(specs) == len(ELEMENT_SPECS)
        all_rows = [_encoded(row, elements) for row in _rows(context, statement)]
    start = _offset(page.paging_state, page.fingerprint, context.schema_version)
    size = len(all_rows)
    if page.page_size is not None and page.page_size > 0:
        size = min(page.page_size, page.max_page_size_rows)
    rows = all_rows[start : start + size]
    state = None
    if start + size < len(all_rows):
        body = [page.fingerprint, context.schema_version.bytes, start + size]
        state = bytes([PAGING_STATE_TAG]) + msgpack.packb(body, use_bin_type=True)
    if page.skip_metadata:
        metadata = RowsMetadata.skipped(len(specs), state)
    else:
        metadata = RowsMetadata.describing(specs, state)
    return RowsResult(metadata, tuple(rows))
