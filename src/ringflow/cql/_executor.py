"""The CQL statement executor of one node: QUERY, PREPARE, EXECUTE and BATCH to responses.

``QueryProcessor`` is a pure core in the STYLE.md sense: the store, the clock (µs), the CDC
generation metadata and the random generator are passed in; it opens no socket and keeps no
thread. The node shell turns frames into requests, calls one of the four methods with the
connection's :class:`SessionState`, and sends back the returned response object with what the
request leaves behind on its thread: its schema changes (``take_schema_changes``: EVENT frames
to push), its warnings (``take_warnings``) and its pending write or read (``take_pending``).
The node's own reactions to a schema change (announcing it, its ``system.local`` row) are the
backend's, which runs every request (``ProcessorBackend``): the processor keeps no listeners.

Rules:

* Statements are dispatched by type (``_STATEMENT_HANDLERS``); DDL goes through ``_exec_ddl``,
  DML through ``_exec_dml``, SELECT through ``_exec_select``.
* Consistency levels are accepted and ignored (one node), except ANY for reads and SERIAL /
  LOCAL_SERIAL for writes, refused as Cassandra does.
* Every write of a request (a statement, a text batch, a BATCH message) is one ``Store.apply``:
  mutations of one partition are merged first, and each mutation of a CDC-enabled table gets its
  :class:`ringflow.cdc._log_rows.CdcCapture` (stream from ``CdcMetadata.get_stream`` for the
  mutation's latest timestamp and the partition's token, ``cdc$time`` low bits from the random
  generator), so base rows and log rows commit together. Direct writes to CDC log tables and to
  ``system``/``system_schema`` are refused; ``system_distributed*`` tables are writable.
* Errors: every exception becomes its protocol error (``_exec_errors.response_for_error``);
  anything else than our typed errors, our own InternalError included, is ServerError 0x0000,
  logged with its traceback and counted in ``internal_errors`` (each one is a bug).
* One lock serializes requests, so the processor may be shared by the shell's threads, except
  for a request's data-plane call: a write is decided under the lock (mutations, timestamp, CDC
  captures) and a SELECT planned there (``plan_select``), then the write or the SELECT's reads
  run after the lock is released. With the plane's ``submit_write`` / ``submit_read`` (a
  cluster node, a single node's group commit) they are only started there: the request leaves
  a pending answer (``take_pending``) and its thread goes on. So does auth work (a role
  statement, a DDL's grants: ``run_auth``, its reads and writes through the same plane) and a
  procedure answering a future: no request waits for the cluster on a thread.
* The node-local virtual tables of ``system_replication`` (``captured_rows``,
  ``local_slices``) are read from this processor's own store's capture (``_exec_virtual``),
  never through the data plane, whatever the consistency level; writes to them are Invalid
  ("Modification is not supported by table ...", Cassandra's words for a virtual table).
* The data plane (``DataPlane``) is the seam between the statement and where its data lives:
  ``LocalDataPlane`` (the default) applies a write's mutations and CDC captures to the local
  store in one ``Store.apply`` and reads the local store; a cluster node installs a plane that
  routes them through its coordinator at the request's consistency level.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import random
import threading
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ringflow.cdc import CdcCapture, CdcMetadata
from ringflow.cql._ast import (
    BeginBatchStatement,
    CallStatement,
    DeleteStatement,
    DescribeStatement,
    InsertStatement,
    ModificationStatement,
    QualifiedName,
    SelectStatement,
    Statement,
    UnsupportedStatement,
    UpdateStatement,
    UseStatement,
)
from ringflow.cql._ast_auth import AUTH_STATEMENT_TYPES
from ringflow.cql._auth_rows import PlaneAuthIO
from ringflow.cql._auth_runs import run_auth
from ringflow.cql._batch_size import check_batch_size
from ringflow.cql._bind import (
    PreparedCache,
    PreparedStatement,
    bind_values,
    marker_specs,
    partition_key_indexes,
    prepared_id,
)
from ringflow.cql._cdc_log_rules import cdc_log_base
from ringflow.cql._describe import DescribePage, describe_context, execute_describe
from ringflow.cql._exec_auth import AuthService, AuthSettings, EffectivePermissions
from ringflow.cql._exec_auth_hooks import (
    check_statement,
    make_auth_service,
    role_statement_work,
    schema_change_work,
)
from ringflow.cql._exec_common import (
    DEFAULT_EXECUTOR_LIMITS,
    ExecutorLimits,
    StatementContext,
    TimestampSource,
    UnpreparedStatement,
    refuse_local_writes,
    require_keyspace,
)
from ringflow.cql._exec_ddl import DDL_HANDLERS, DdlContext, DdlOutcome, execute_ddl
from ringflow.cql._exec_dml import (
    ListPaths,
    WriteContext,
    delete_mutations,
    insert_mutations,
    live_list_cells,
    update_mutations,
)
from ringflow.cql._exec_errors import response_for_error
from ringflow.cql._exec_select import (
    PageRequest,
    RowReader,
    Steps,
    json_specs,
    plan_select,
    run_steps,
    select_steps,
)
from ringflow.cql._exec_selectors import compile_selection
from ringflow.cql._exec_system import (
    dropped_keyspace_rows,
    ensure_system_tables,
    is_virtual_table,
    keyspace_exists,
    load_schema,
    lookup_table,
    schema_high_water_us,
    schema_rows,
)
from ringflow.cql._exec_terms import partition_token, term_value
from ringflow.cql._exec_virtual import CaptureTables
from ringflow.cql._parser import parse_statement
from ringflow.cql._procedures import Procedure, Procedures, bind_call, run_call
from ringflow.cql._requests import Batch, Execute, Prepare, Query, QueryParameters
from ringflow.cql._responses import Response
from ringflow.cql._results import (
    ColumnSpec,
    PreparedMetadata,
    PreparedResult,
    RowsMetadata,
    SchemaChange,
    SchemaChangeTarget,
    SetKeyspaceResult,
    VoidResult,
)
from ringflow.cql._wire import UNSET, CqlValue
from ringflow.errors import (
    Consistency,
    InternalError,
    InvalidRequest,
    invariant,
)
from ringflow.schema import (
    BIGINT,
    Cell,
    Migration,
    Mutation,
    SchemaState,
    Table,
    merge_mutations,
    schema_digest,
    schema_migration_rows,
)
from ringflow.storage import Store, UnknownTable

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

_SERIAL = frozenset({Consistency.SERIAL, Consistency.LOCAL_SERIAL})
STORAGE_PORT = 7000
"""Cassandra's default ``storage_port``: the port a lone node's endpoints are shown with."""


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """Who this node is: what ``system.local`` says about it and the datacenter that
    ``NetworkTopologyStrategy``'s ``replication_factor`` shorthand expands to."""

    host_id: uuid.UUID
    cluster_name: str = "ringflow"
    data_center: str = "datacenter1"
    rack: str = "rack1"
    rpc_address: str = "127.0.0.1"
    broadcast_address: str = "127.0.0.1"
    tokens: tuple[int, ...] = ()


@dataclass(slots=True)
class SessionState:
    """Per-connection state: the keyspace chosen by ``USE``, and the role logged in (None:
    no authentication, or an internal session; never checked then)."""

    keyspace: str | None = None
    user: str | None = None


class DataPlane(Protocol):
    """Where a statement's writes go and its reads come from (see the module docstring)."""

    def write(
        self,
        batch: Sequence[Mutation],
        captures: Mapping[int, CdcCapture],
        consistency: Consistency,
        now_us: int,
    ) -> None:
        """Apply ``batch`` (with ``captures`` by index) at ``consistency``; raises on failure."""
        ...

    def read(self, consistency: Consistency, run: ReadRun) -> Response:
        """Run a SELECT's reads: ``run`` with the rows it reads at ``consistency`` (the local
        store), its steps run through at once."""
        ...


SubmitWrite = Callable[
    [Sequence[Mutation], Mapping[int, CdcCapture], Consistency, int],
    "concurrent.futures.Future[None]",
]
"""Queues a statement's write (batch, captures by index, consistency, timestamp µs); its future
is done once the write is durable, or fails with the error that refused it."""
ReadRun = Callable[[RowReader], "Response | Steps[Response]"]
"""What a read runs over its rows: a SELECT in steps (``select_steps``: it goes on where its
reader lacks rows), or a plain function (run again until its reader lacks nothing)."""
SubmitRead = Callable[[Consistency, ReadRun], "concurrent.futures.Future[Response]"]
"""Starts a SELECT's reads at the consistency and runs the SELECT (its argument) over them
once they are here; its future is done with the SELECT's answer, or fails with its error."""
AuthSubmit = Callable[[Callable[[], None]], object]
"""Runs a later run of auth work (``_auth_runs``: once its reads are here) on a thread that
waits for nothing and holds up no statement (a login's or a new role's bcrypt is CPU)."""
Deferred = Callable[[], "Response | concurrent.futures.Future[Any] | None"]
"""A request's work after the processor's lock: its answer (None: the request's stands), or a
future of it."""
PendingAnswer = tuple["concurrent.futures.Future[Any]", Consistency]
"""A request's write or read still in progress, and the consistency its error answers at.
The future's result is the request's answer (a read's), or None (a write's: the request's
own answer stands)."""


class RingView(Protocol):
    """What the statements know of the ring: a cluster node's view (its gossip), or a lone
    node's own (``LocalRing``); given with the data plane (``use_data_plane``)."""

    def datacenters(self) -> Sequence[str]:
        """The data centers a keyspace's replication may name (and its shorthand expands
        to)."""
        ...

    def range_ownership(self, keyspace: str) -> Mapping[str, Sequence[str]]:
        """DESCRIBE CLUSTER's ``range_ownership`` of ``keyspace``: each range's end token, its
        replicas' endpoints as Cassandra prints them."""
        ...


@dataclass(frozen=True, slots=True)
class LocalRing:
    """A lone node's ring: its own data center, and every range its own."""

    node: NodeIdentity

    def datacenters(self) -> Sequence[str]:
        return (self.node.data_center,)

    def range_ownership(self, keyspace: str) -> Mapping[str, Sequence[str]]:
        endpoint = f"/{self.node.broadcast_address}:{STORAGE_PORT}"
        return {str(token): [endpoint] for token in self.node.tokens}


class LocalDataPlane:
    """The single-node data plane: one local ``Store.apply`` per write, local reads."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def write(
        self,
        batch: Sequence[Mutation],
        captures: Mapping[int, CdcCapture],
        consistency: Consistency,
        now_us: int,
    ) -> None:
        self._store.apply(batch, now_s=now_us // 1_000_000, cdc=dict(captures))

    def read(self, consistency: Consistency, run: ReadRun) -> Response:
        return run_read(run, self._store)


class QueryProcessor:
    """Executes CQL requests against one node's store (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        node: NodeIdentity,
        clock: Callable[[], int],
        cdc: CdcMetadata | None,
        rng: random.Random,
        limits: ExecutorLimits = DEFAULT_EXECUTOR_LIMITS,
    ) -> None:
        self._store = store
        self._node = node
        self._clock = clock
        self._cdc = cdc
        self._rng = rng
        self.limits = limits
        self.internal_errors = 0
        self._lock = threading.RLock()
        self._deferred: Deferred | None = None  # run after the lock
        self._auth_submit: AuthSubmit | None = None
        self._auth_io = PlaneAuthIO(
            lambda: (self._data_plane, self._submit_read, self._submit_write), clock
        )
        """Auth work's reads and writes: started through the plane (``run_auth``)."""
        self._grants: EffectivePermissions | None = None  # the running request's, resolved
        self._timestamps = TimestampSource(clock)
        self._list_paths = ListPaths(rng)
        self._prepared = PreparedCache(limits)
        self._data_plane: DataPlane = LocalDataPlane(store)
        self._submit_write: SubmitWrite | None = None
        self._submit_read: SubmitRead | None = None
        self._consistency = Consistency.ONE
        self._request = threading.local()  # the running request's own state, per thread
        self.batch_size_warnings = 0
        self._ring: RingView = LocalRing(node)
        """What statements know of the ring (``use_data_plane``)."""
        self.auth: AuthService | None = None
        """Authentication and authorization (``enable_auth``); None: everything allowed."""
        self._procedures = Procedures()
        ensure_system_tables(store)
        self._state = load_schema(store, clock() // 1_000_000)
        high_water_us = schema_high_water_us(store)
        self._timestamps.last_us = high_water_us
        # At the stored schema's own time, not now: a newer DDL this node missed (merged later
        # from a peer, seed 004) must win over this start-up rewrite.
        stored = high_water_us > -(2**63)
        self._write_schema_rows(None, frozenset(), at_us=high_water_us if stored else None)

    def register_procedure(self, procedure: Procedure) -> None:
        """Make ``CALL namespace.name(...)`` run ``procedure`` (``ringflow.cql._procedures``)."""
        self._procedures.register(procedure)

    # --- introspection -------------------------------------------------------------------------

    @property
    def schema(self) -> SchemaState:
        return self._state

    @property
    def schema_version(self) -> uuid.UUID:
        """The content digest of the user schema (what ``system.local.schema_version`` says)."""
        return schema_digest(self._state)

    @property
    def prepared_statements(self) -> Mapping[bytes, PreparedStatement]:
        return self._prepared.statements()

    def validate(self) -> None:
        """Raise InternalError if the processor contradicts itself or its store."""
        with self._lock:
            self._state.validate()
            registered = {(t.keyspace, t.name): t for t in self._store.tables()}
            for key, table in self._state.tables.items():
                invariant(
                    registered.get(key) == table,
                    f"table {key[0]}.{key[1]} of the schema is not registered as such in the store",
                )
            invariant(
                len(self._prepared) <= self.limits.max_prepared_statements,
                f"{len(self._prepared)} prepared statements exceed the limit",
            )

    def enable_auth(self, settings: AuthSettings, clock_ms: Callable[[], float]) -> AuthService:
        """Check logins and permissions from now on (``_exec_auth``); the roles live in
        ``system_auth``, read and written through this processor's data plane."""
        self.auth = make_auth_service(
            lambda: self._data_plane, self._clock, settings, clock_ms, self._next_auth_timestamp
        )
        return self.auth

    def run_auth(self, work: Callable[[AuthService], _T]) -> concurrent.futures.Future[_T]:
        """``work`` over this node's ``AuthService``, its reads and writes through the data
        plane with no thread waiting for them (``_auth_runs``); done at once on a single node.
        InternalError without auth."""
        auth = self.auth
        if auth is None:
            raise InternalError("auth work on a node without an authenticator or authorizer")
        return run_auth(
            lambda rows: work(auth.over(rows)),
            auth.rows,
            self._auth_io,
            self._auth_submit,
            auth.invalidate,
        )

    def resolve_grants(
        self, user: str | None
    ) -> EffectivePermissions | concurrent.futures.Future[EffectivePermissions] | None:
        """The grants a statement of ``user`` is checked against, to hand to :meth:`query`,
        :meth:`execute` or :meth:`batch`: cached, or a future of them read through the cluster
        with no thread waiting; None when nothing is checked."""
        auth = self.auth
        if auth is None or not auth.grants_needed(user):
            return None
        assert user is not None
        cached = auth.cached_grants(user)
        if cached is not None:
            return cached
        return self.run_auth(lambda service: service.effective(user))

    def _next_auth_timestamp(self) -> int:
        with self._lock:
            return self._timestamps.next()

    def use_data_plane(
        self,
        data_plane: DataPlane,
        submit_write: SubmitWrite | None = None,
        submit_read: SubmitRead | None = None,
        auth_submit: AuthSubmit | None = None,
        ring: RingView | None = None,
    ) -> None:
        """Route writes and reads through ``data_plane`` from now on (a cluster node). With
        ``submit_write``, a statement's write is queued there instead of waited for (a single
        node's group commit, a cluster node's coordinator), and with ``submit_read`` a
        SELECT's reads are started there and its answer built when they are here (a cluster
        node): the request then leaves a pending answer for its caller
        (:meth:`take_pending`), which answers once it is done. Auth work (a role or permission
        statement, a DDL's grants, a login, a statement's grants: :meth:`run_auth`) reads and
        writes through them the same way, its later runs made on ``auth_submit``. ``ring``:
        the cluster's view of the ring (data centers, DESCRIBE CLUSTER), instead of the lone
        node's own."""
        with self._lock:
            if ring is not None:
                self._ring = ring
            self._data_plane = data_plane
            self._submit_write = submit_write
            self._submit_read = submit_read
            self._auth_submit = auth_submit

    def take_pending(self) -> PendingAnswer | None:
        """The write or read this thread's last request left in progress (``use_data_plane``)
        and its consistency, or None; then forgotten. Its answer is to be sent once the
        future is done (its result, or the request's own answer when that is None), or
        :meth:`error_response` of the future's error."""
        pending: PendingAnswer | None = getattr(self._request, "pending", None)
        self._request.pending = None
        return pending

    def error_response(self, error: Exception, consistency: Consistency) -> Response:
        """The protocol error answering ``error`` (a bug counted and logged as such)."""
        return self._error_response(error, consistency)

    def reload_schema(self) -> bool:
        """Re-read the schema from the store's ``system_schema`` rows (a cluster node merged a
        peer's schema rows into it); register, update and drop tables to match. True if the
        schema changed."""
        with self._lock:
            new = load_schema(self._store, self._clock() // 1_000_000)  # the store matches it
            old = self._state
            if schema_digest(new) == schema_digest(old) and new.tables == old.tables:
                return False
            self._state = new
            self._prepared.invalidate(lambda _entry: True)
            return True

    # --- the four requests ---------------------------------------------------------------------

    def query(
        self, query: Query, session: SessionState, grants: EffectivePermissions | None = None
    ) -> Response:
        """``grants``: the user's, resolved for this request (:meth:`resolve_grants`); None:
        resolved here when needed (a single node's own store)."""

        def run() -> Response:
            statement = parse_statement(query.query)
            params = query.parameters
            specs = None
            if params.names is not None:
                specs = self._marker_specs(statement, session.keyspace)
            values = bind_values(statement, specs, params.values, params.names)
            fingerprint = prepared_id(query.query, session.keyspace)[:8]
            return self._run(statement, values, params, session, session.keyspace, fingerprint)

        return self._guard(run, query.parameters.consistency, grants)

    def prepare(self, prepare: Prepare, session: SessionState) -> Response:
        return self._guard(lambda: self._prepare(prepare.query, session.keyspace))

    def execute(
        self, execute: Execute, session: SessionState, grants: EffectivePermissions | None = None
    ) -> Response:
        def run() -> Response:
            prepared = self._prepared.get(execute.statement_id)
            if prepared is None:
                raise UnpreparedStatement(execute.statement_id)
            params = execute.parameters
            values = bind_values(
                prepared.statement, prepared.variables, params.values, params.names
            )
            fingerprint = prepared.statement_id[:8]
            return self._run(
                prepared.statement, values, params, session, prepared.keyspace, fingerprint
            )

        return self._guard(run, execute.parameters.consistency, grants)

    def batch(
        self, batch: Batch, session: SessionState, grants: EffectivePermissions | None = None
    ) -> Response:
        run = lambda: self._batch_message(batch, session)  # noqa: E731
        return self._guard(run, batch.consistency, grants)

    # --- plumbing ------------------------------------------------------------------------------

    def _guard(
        self,
        run: Callable[[], Response],
        consistency: Consistency = Consistency.ONE,
        grants: EffectivePermissions | None = None,
    ) -> Response:
        """Run a request under the lock; its data-plane read or write (if any) runs after the
        lock is released, so a cluster node's other statements go on while this one waits for
        its replicas."""
        request = self._request
        request.pending, request.warnings, request.changes = None, [], []  # this request's own
        with self._lock:
            self._consistency = consistency
            self._grants = grants
            self._deferred = None
            try:
                response = run()
                deferred = self._deferred
            except Exception as error:  # every exception becomes a response; bugs are counted
                return self._error_response(error, consistency)
            finally:
                self._deferred = None
                self._grants = None
        if deferred is None:
            return response
        try:
            answer = deferred()
            if isinstance(answer, concurrent.futures.Future):
                if not answer.done():  # answered once it is done
                    self._request.pending = (answer, consistency)
                    return response
                answer = answer.result()
        except Exception as error:
            return self._error_response(error, consistency)
        return response if answer is None else answer

    def _error_response(self, error: Exception, consistency: Consistency) -> Response:
        response, internal = response_for_error(error, consistency)
        if internal:
            with self._lock:
                self.internal_errors += 1
            _log.error("internal error executing a CQL request", exc_info=error)
        return response

    def _context(self, values: Mapping[int, CqlValue], keyspace: str | None) -> StatementContext:
        return StatementContext(values, self._clock, self._rng, keyspace)

    def _table(self, name: QualifiedName, keyspace: str | None) -> Table:
        return lookup_table(self._state, require_keyspace(name.keyspace, keyspace), name.name)

    def _lookup_for(self, keyspace: str | None) -> Callable[[QualifiedName], Table]:
        return lambda name: self._table(name, keyspace)

    def _marker_specs(self, statement: Statement, keyspace: str | None) -> tuple[ColumnSpec, ...]:
        if isinstance(statement, CallStatement):
            return self._procedures.marker_specs(statement)
        return marker_specs(statement, self._lookup_for(keyspace))

    def _run(
        self,
        statement: Statement,
        values: Mapping[int, CqlValue],
        params: QueryParameters,
        session: SessionState,
        keyspace: str | None,
        fingerprint: bytes,
    ) -> Response:
        context = self._context(values, keyspace)
        check_statement(self.auth, session.user, statement, keyspace, self._state, self._grants)
        if isinstance(statement, AUTH_STATEMENT_TYPES):
            work = role_statement_work(self.auth, statement, session.user, keyspace, self._state)
            self._defer(lambda: self.run_auth(work))
            return VoidResult()  # replaced by the statement's answer
        if isinstance(statement, SelectStatement):
            if params.consistency is Consistency.ANY:
                raise InvalidRequest("ANY ConsistencyLevel is only supported for writes")
            table = self._table(statement.table, keyspace)
            request = PageRequest(
                params.page_size, params.paging_state, params.skip_metadata, fingerprint
            )
            plane, limits, consistency = self._data_plane, self.limits, params.consistency
            submit = self._submit_read

            planned = plan_select(statement, table, context, limits)  # once: a read may rerun

            def select(reader: RowReader) -> Steps[Response]:
                return select_steps(planned, reader, limits, request)

            def queue_read() -> None:  # after the lock: the answer is the read's future's
                assert submit is not None
                self._request.pending = (submit(consistency, select), consistency)

            if is_virtual_table(table):  # node-local: this node's own capture, never the plane
                virtual = CaptureTables(self._store)
                self._defer(lambda: run_read(select, virtual))
            elif submit is not None:
                self._defer(queue_read)
            else:
                self._defer(lambda: plane.read(consistency, select))
            return VoidResult()  # replaced by the deferred read's answer
        if isinstance(statement, UseStatement):
            return self._use(statement, session)
        if isinstance(statement, DescribeStatement):
            cluster = self._node.cluster_name
            schema = describe_context(self._state, keyspace, cluster, self._ring.range_ownership)
            page = DescribePage.of(params, fingerprint, self.limits.max_page_size_rows)
            return execute_describe(statement, schema, page)
        if isinstance(statement, CallStatement):
            procedure = self._procedures.of(statement)
            arguments = bind_call(procedure, statement, context)
            self._defer(lambda: run_call(procedure, arguments))  # after the lock
            return VoidResult()  # replaced by the procedure's rows
        if type(statement) in DDL_HANDLERS:
            response = self._ddl(statement, keyspace)
            grants = schema_change_work(self.auth, session.user, response)
            if grants is not None:  # grants of a creator, or on what was dropped
                self._defer(lambda: self.run_auth(grants))
            return response
        if params.consistency in _SERIAL:
            raise InvalidRequest("You must use conditional updates for serializable writes")
        if isinstance(statement, BeginBatchStatement):
            return self._text_batch(statement, context, params.default_timestamp)
        assert isinstance(statement, InsertStatement | UpdateStatement | DeleteStatement)
        timestamp = self._default_timestamp(params.default_timestamp)
        self._apply(self._mutations(statement, context, timestamp))
        return VoidResult()

    def _default_timestamp(self, client_timestamp: int | None) -> int:
        return client_timestamp if client_timestamp is not None else self._timestamps.next()

    def _use(self, statement: UseStatement, session: SessionState) -> Response:
        if not keyspace_exists(self._state, statement.keyspace):
            raise InvalidRequest(f"Keyspace '{statement.keyspace}' does not exist")
        session.keyspace = statement.keyspace
        return SetKeyspaceResult(statement.keyspace)

    # --- writes --------------------------------------------------------------------------------

    def _writable_table(self, name: QualifiedName, keyspace: str | None) -> Table:
        table = self._table(name, keyspace)
        refuse_local_writes(table.keyspace)
        if is_virtual_table(table):
            raise InvalidRequest(
                f"Modification is not supported by table {table.keyspace}.{table.name}"
            )
        if cdc_log_base(self._state, table) is not None:
            raise InvalidRequest(
                f"Cannot write to CDC log table {table.keyspace}.{table.name} directly: its rows "
                "are written by CDC with the base table's writes"
            )
        return table

    def _mutations(
        self, statement: ModificationStatement, context: StatementContext, timestamp: int
    ) -> list[Mutation]:
        table = self._writable_table(statement.table, context.keyspace)
        write = WriteContext(
            context, self.limits, lambda: timestamp, self._list_paths, self._read_list
        )
        if isinstance(statement, InsertStatement):
            return insert_mutations(statement, table, write)
        if isinstance(statement, UpdateStatement):
            return update_mutations(statement, table, write)
        return delete_mutations(statement, table, write)

    def _read_list(
        self, table: Table, key: tuple[bytes, ...], clustering: tuple[bytes, ...], column: str
    ) -> list[Cell]:
        stored = self._store.read_mutation(table, key)
        cells = live_list_cells(stored, table, clustering, column, self._clock() // 1_000_000)
        if len(cells) > self.limits.max_list_elements_read:
            raise InvalidRequest(
                f"list {column} has more than {self.limits.max_list_elements_read} elements"
            )
        return cells

    def _text_batch(
        self,
        statement: BeginBatchStatement,
        context: StatementContext,
        client_timestamp: int | None,
    ) -> Response:
        if statement.kind.name == "COUNTER":
            raise InvalidRequest("Counter batches are not supported: ringflow has no counters")
        if statement.using.ttl is not None:
            raise InvalidRequest("TTL is not allowed on a BATCH, only on its statements")
        timestamp = self._default_timestamp(client_timestamp)
        if statement.using.timestamp is not None:
            if any(child.using.timestamp is not None for child in statement.statements):
                raise InvalidRequest(
                    "Timestamp must be set either on BATCH or individual statements"
                )
            value = term_value(statement.using.timestamp, BIGINT, "[timestamp]", context)
            if value is None:
                raise InvalidRequest("Invalid null value of timestamp")
            if value is not UNSET:
                assert isinstance(value, int)
                timestamp = value
        self._check_batch_size(len(statement.statements))
        mutations: list[Mutation] = []
        for child in statement.statements:
            mutations.extend(self._mutations(child, context, timestamp))
        self._apply_batch(mutations)
        return VoidResult()

    def _check_batch_size(self, count: int) -> None:
        if count > self.limits.max_batch_statements:
            raise InvalidRequest(
                f"batch of {count} statements exceeds the limit of "
                f"{self.limits.max_batch_statements}"
            )

    def _batch_message(self, batch: Batch, session: SessionState) -> Response:
        if batch.batch_type.name == "COUNTER":
            raise InvalidRequest("Counter batches are not supported: ringflow has no counters")
        if batch.consistency in _SERIAL:
            raise InvalidRequest("You must use conditional updates for serializable writes")
        self._check_batch_size(len(batch.statements))
        timestamp = self._default_timestamp(batch.default_timestamp)
        mutations: list[Mutation] = []
        for entry in batch.statements:
            if isinstance(entry.statement, bytes):
                prepared = self._prepared.get(entry.statement)
                if prepared is None:
                    raise UnpreparedStatement(entry.statement)
                statement, keyspace = prepared.statement, prepared.keyspace
                specs = prepared.variables
            else:
                statement, keyspace, specs = parse_statement(entry.statement), session.keyspace, ()
            if not isinstance(statement, InsertStatement | UpdateStatement | DeleteStatement):
                raise InvalidRequest(
                    "Invalid statement in batch: only UPDATE, INSERT and DELETE statements are "
                    "allowed."
                )
            check_statement(self.auth, session.user, statement, keyspace, self._state, self._grants)
            values = bind_values(statement, specs, entry.values, None)
            mutations.extend(self._mutations(statement, self._context(values, keyspace), timestamp))
        self._apply_batch(mutations)
        return VoidResult()

    def _apply_batch(self, mutations: Sequence[Mutation]) -> None:
        """A batch's mutations, within the batch size thresholds (``_batch_size``)."""
        limits = self.limits
        warning = check_batch_size(
            mutations, limits.batch_size_warn_bytes, limits.batch_size_fail_bytes
        )
        if warning is not None:
            self.batch_size_warnings += 1
            if self.batch_size_warnings <= 20 or self.batch_size_warnings % 1000 == 0:
                # a hub sink's batches may all be over the threshold: the log keeps a sample
                _log.warning("%s (%d such batches)", warning, self.batch_size_warnings)
            self._warnings.append(warning)
        self._apply(mutations)

    @property
    def _warnings(self) -> list[str]:
        """The warnings of the request running on this thread: statements run on several
        threads at once, and each answer carries its own."""
        found: list[str] | None = getattr(self._request, "warnings", None)
        if found is None:
            found = self._request.warnings = []
        return found

    def take_warnings(self) -> tuple[str, ...]:
        """The protocol warnings of this thread's last request (then forgotten): the server
        sends them with its answer (Cassandra's ``ClientWarn``)."""
        warnings = tuple(self._warnings)
        self._warnings.clear()
        return warnings

    def take_schema_changes(self) -> tuple[SchemaChange, ...]:
        """The schema changes this thread's last request made (then forgotten), every one
        (creating a CDC table also creates its log table): the server pushes an EVENT for
        each."""
        changes: list[SchemaChange] = getattr(self._request, "changes", [])
        self._request.changes = []
        return tuple(changes)

    def _apply(self, mutations: Sequence[Mutation]) -> None:
        merged: dict[tuple[str, str, tuple[bytes, ...]], Mutation] = {}
        for mutation in mutations:
            if mutation.is_empty or next(mutation.timestamps_us(), None) is None:
                continue  # writes nothing (e.g. adding an empty collection)
            key = (mutation.keyspace, mutation.table, mutation.partition_key)
            prior = merged.get(key)
            merged[key] = mutation if prior is None else merge_mutations(prior, mutation)
        batch = [m for m in merged.values() if not m.is_empty]
        if not batch:
            return
        now_us = self._clock()
        captures: dict[int, CdcCapture] = {}
        for index, mutation in enumerate(batch):
            table = lookup_table(self._state, mutation.keyspace, mutation.table)
            if table.options.cdc.enabled:
                captures[index] = self._capture(table, mutation, now_us)
        plane, consistency, submit = self._data_plane, self._consistency, self._submit_write
        if submit is None:
            self._defer(lambda: plane.write(batch, captures, consistency, now_us))
            return

        def queue_write() -> None:  # after the lock: the answer waits for the write's future
            self._request.pending = (submit(batch, captures, consistency, now_us), consistency)

        self._defer(queue_write)

    def _defer(self, work: Deferred) -> None:
        """Run ``work`` (the request's data-plane read or write) once the lock is released;
        its answer, if any, replaces the request's; a future of one not done yet is left
        pending (:meth:`take_pending`)."""
        invariant(self._deferred is None, "a request defers one data-plane call")
        self._deferred = work

    def _capture(self, table: Table, mutation: Mutation, now_us: int) -> CdcCapture:
        if self._cdc is None:
            raise InvalidRequest(
                f"cdc: no CDC generation metadata on this node: cannot write to "
                f"{table.keyspace}.{table.name}, which has CDC enabled"
            )
        timestamp = max(mutation.timestamps_us())
        token = partition_token(table, mutation.partition_key)
        stream = self._cdc.get_stream(timestamp, token, now_us)
        return CdcCapture(stream.to_bytes(), self._rng.getrandbits(64), now_us // 1_000_000)

    # --- schema --------------------------------------------------------------------------------

    def _ddl(self, statement: Statement, keyspace: str | None) -> Response:
        context = DdlContext(
            self._state, keyspace, self._timestamps, self._rng, tuple(self._ring.datacenters())
        )
        outcome = execute_ddl(statement, context)
        self._apply_ddl(outcome)
        return outcome.response

    def _apply_ddl(self, outcome: DdlOutcome) -> None:
        """Persist (rows and migrations, one transaction), then drop and register tables: a
        crash before the commit leaves nothing of the DDL (seed 004 failure 1, "nothing has
        been applied"), one after it is completed at start-up (``load_schema`` makes the
        store's tables match the rows)."""
        for table in outcome.truncate:
            self._store.drop_table(table.keyspace, table.name)
            self._store.register_table(table)
        self._state = outcome.state
        self._write_schema_rows(outcome.keyspaces, outcome.dropped_keyspaces, outcome.migrations)
        for keyspace, name in outcome.drop:
            try:
                self._store.drop_table(keyspace, name)
            except UnknownTable:
                _log.warning("dropped table %s.%s was not in the store", keyspace, name)
        for table in outcome.register:
            self._store.register_table(table)
        for change in outcome.changes:
            self._invalidate_prepared(change)
            self._notify(change)

    def _write_schema_rows(
        self,
        keyspaces: frozenset[str] | None,
        dropped: frozenset[str],
        migrations: Sequence[Migration] = (),
        *,
        at_us: int | None = None,
    ) -> None:
        """Rewrite the ``system_schema`` partitions of ``keyspaces`` (all if None) and
        ``dropped``, and store ``migrations``: in one store batch while they fit in one (a
        DDL's do); otherwise the migrations ride in the last chunk, so a stored migration
        always has its rows. Written at ``at_us`` if given, else at a new timestamp."""
        if keyspaces is not None and not keyspaces and not dropped and not migrations:
            return
        timestamp = self._timestamps.next() if at_us is None else at_us
        rows = dropped_keyspace_rows(sorted(dropped), timestamp)
        if keyspaces is None or keyspaces:
            rows += schema_rows(
                self._state, None if keyspaces is None else sorted(keyspaces), timestamp
            )
        rows += schema_migration_rows(migrations, timestamp)
        chunk = self._store.limits.max_batch_mutations
        starts = range(len(rows) - chunk, 0, -chunk)  # the last chunk is a full one
        bounds = [0, *sorted(starts), len(rows)] if len(rows) > chunk else [0, len(rows)]
        for start, end in itertools.pairwise(bounds):
            self._store.apply(rows[start:end], now_s=timestamp // 1_000_000)

    def _invalidate_prepared(self, change: SchemaChange) -> None:
        if change.target is SchemaChangeTarget.TABLE:
            doomed = (change.keyspace, change.name)
            self._prepared.invalidate(lambda entry: doomed in entry.tables)
        else:
            keyspace = change.keyspace
            self._prepared.invalidate(lambda entry: any(k == keyspace for k, _ in entry.tables))

    def _notify(self, change: SchemaChange) -> None:
        changes: list[SchemaChange] | None = getattr(self._request, "changes", None)
        if changes is not None:
            changes.append(change)

    # --- PREPARE -------------------------------------------------------------------------------

    def _prepare(self, query: str, keyspace: str | None) -> Response:
        statement = parse_statement(query)
        if isinstance(statement, UnsupportedStatement):
            raise InvalidRequest(statement.feature)
        specs = self._marker_specs(statement, keyspace)
        table = None
        tables: set[tuple[str, str]] = set()
        if isinstance(
            statement, SelectStatement | InsertStatement | UpdateStatement | DeleteStatement
        ):
            table = self._table(statement.table, keyspace)
            tables.add((table.keyspace, table.name))
        elif isinstance(statement, BeginBatchStatement):
            for child in statement.statements:
                child_table = self._table(child.table, keyspace)
                tables.add((child_table.keyspace, child_table.name))
        result_columns = None
        if isinstance(statement, CallStatement):
            result_columns = self._procedures.of(statement).result_specs()
        if isinstance(statement, SelectStatement):
            assert table is not None
            unset = {index: UNSET for index in range(len(specs))}
            selection = compile_selection(statement, table, self._context(unset, keyspace))
            result_columns = json_specs(table) if statement.json else selection.specs(table)
        statement_id = prepared_id(query, keyspace)
        pk_indexes = partition_key_indexes(statement, table)
        self._prepared.put(
            PreparedStatement(
                statement_id, query, keyspace, statement, specs, pk_indexes, result_columns,
                frozenset(tables),
            )
        )  # fmt: skip
        metadata = (
            RowsMetadata.skipped(0)
            if result_columns is None
            else RowsMetadata.describing(result_columns)
        )
        return PreparedResult(statement_id, PreparedMetadata(specs, pk_indexes), metadata)


def run_read(run: ReadRun, rows: RowReader) -> Response:
    """``run`` over ``rows``, which read at once (a store): its steps run through."""
    ran = run(rows)
    return run_steps(ran) if isinstance(ran, Generator) else ran
