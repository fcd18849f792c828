"""The hub sink: changes applied to a ringflow (or Scylla) hub cluster at their write times.

``df.write.format("ringflow-hub")`` / ``df.writeStream.format("ringflow-hub")`` with options
``contact_points`` (comma list of hosts), ``port`` (default 9042), ``keyspace`` and ``table`` (the
target on the hub; it may differ from the source's name but must have its columns), ``schema``
(:func:`~ringflow.pipeline.table_to_json` of the source table), ``consistency`` (default
``QUORUM``; ``ONE`` for a one-node hub), ``concurrency`` (in-flight requests per task, 1..512,
default 32), ``batch_rows`` (changes turned into statements and executed per round, 1..100,000,
default 1,000), ``grouping`` (``none``, ``partition`` or ``replica``, default ``replica``: how
a round's statements are grouped into ``UNLOGGED BATCH`` requests, :mod:`._hub_batches`),
``batch_statements`` (statements per batch, 1..1,000, default 64), ``batch_bytes`` (bound
values per batch of more than one statement, 1..16 MiB, default 48 KiB) and ``allow_alter``
(``true``/``false``, default false). :func:`hub_options` builds and checks them on the driver.
At most ``batch_rows`` changes (and their statements) are held per task, and at most
``concurrency`` requests of at most ``batch_statements`` statements are in flight.

Schema changes (issue 15): the target needs the source's columns (same key; value columns of
the same types) and may have more: a column dropped at the source stays on the hub with its
values, untouched (statements only name the source's columns). A value column the target lacks
is added (``ALTER TABLE ... ADD``) when ``allow_alter`` is true; otherwise
:class:`~ringflow.pipeline.DestinationBehind` gives the exact statements to run. A column the hub
has with another type is a :class:`~ringflow.pipeline.SchemaConflict`. The target is checked
(and altered) on the driver, by :func:`hub_options`, not by each micro-batch.

Each change becomes CQL with its original write timestamp (statement building, TTLs and the
approximation for non-frozen lists: :mod:`ringflow.pipeline._hub_cql`), so last-write-wins makes
the hub's state depend only on the set of changes: a replayed micro-batch, a retried task or the
same DataFrame written twice in another order changes nothing. Hence the stream writer's
``commit`` and ``abort`` only log, and a failed statement fails its task (Spark retries it).

Each writer task uses its Python worker's driver session for the hub (made on first use, kept
for the next tasks, dropped after an error; Spark reuses its Python workers) and sends its
requests (statements grouped as ``grouping`` says), ``batch_rows`` changes at a time, through
one window of at most ``concurrency`` requests in flight that spans the rounds: the next
round's statements are built while the previous round's requests are on the hub, and the task
ends once every request is answered (the first failure fails it). A range
delete arrives as two rows (start and end bound) that must reach the same task: the CDC source
keeps a stream in one partition; other DataFrames should be repartitioned by ``cdc$stream_id``
(bounds are paired in log order: stream, time, batch_seq_no). An unpaired bound fails the task.

Dead letters (issue 14 §3, REPLICATION.md decision 8): with ``dead_letters`` (the edge's
``host[,host...][:port]``) and ``channel``, a task whose requests the hub refuses as invalid
(``InvalidRequest``, CQL error 0x2200: a statement the hub cannot take, e.g. a column dropped
on the hub by hand) applies its changes again one by one, each one's statements alone and
synchronously (idempotent: they carry their write times), keeps the changes the hub still
refuses in the edge's ``system_replication.dead_letters`` with the reason and commits. It keeps
at most ``MAX_DEAD_LETTER_CHANGES`` changes for that; a larger task fails as without dead
letters. Any other error (the hub unreachable, a timeout) fails the task as before.

Configuration errors (unknown or missing option, bad number, unreachable contact points, unknown
keyspace or table, a target without the source's key or columns) raise
:class:`PipelineConfigError` before any job starts.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from cassandra import ConsistencyLevel, InvalidRequest
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    NoHostAvailable,
    Session,
)
from cassandra.policies import (
    ExponentialReconnectionPolicy,
    RoundRobinPolicy,
    TokenAwarePolicy,
)
from cassandra.query import BatchStatement, BatchType, BoundStatement
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ringflow.pipeline._changes import (
    RANGE_END_OPERATIONS,
    RANGE_START_OPERATIONS,
    Change,
    change_from_row,
    check_change_schema,
    table_from_json,
    table_to_json,
    validate_change,
)
from ringflow.pipeline._cluster_client import (
    CREDENTIAL_OPTIONS,
    TLS_OPTIONS,
    ClusterOptions,
    DriverTls,
    auth_provider,
    credentials,
    driver_tls,
    keep_session_cache,
    parse_hosts,
    shut_down_sessions,
)
from ringflow.pipeline._dead_letters import (
    DEAD_LETTER_ACCESS_OPTIONS,
    dead_letter_access,
    dead_letter_options,
    dead_letter_settings,
    record_dead_letters,
)
from ringflow.pipeline._errors import (
    DestinationBehind,
    InvalidChange,
    PipelineConfigError,
    SchemaConflict,
)
from ringflow.pipeline._hub_batches import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_STATEMENTS,
    DEFAULT_GROUPING,
    GROUPINGS,
    MAX_BATCH_BYTES,
    MAX_BATCH_STATEMENTS,
    Grouped,
    pack_requests,
)
from ringflow.pipeline._hub_cql import HubCql, HubStatement, pair_range_bounds
from ringflow.schema import Column, ColumnKind, Table

HUB_FORMAT = "ringflow-hub"
DEFAULT_PORT = 9042
DEFAULT_CONSISTENCY = "QUORUM"
DEFAULT_CONCURRENCY = 32
MAX_CONCURRENCY = 512
DEFAULT_BATCH_ROWS = 1000
MAX_BATCH_ROWS = 100_000
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 30.0
_OPTIONS = frozenset(
    {"contact_points", "port", "keyspace", "table", "schema", "consistency"}
    | {"concurrency", "batch_rows", "allow_alter", "grouping", "batch_statements", "batch_bytes"}
    | {"dead_letters", "channel"}
    | set(TLS_OPTIONS)
    | DEAD_LETTER_ACCESS_OPTIONS
    | CREDENTIAL_OPTIONS
)
MAX_DEAD_LETTER_CHANGES = 100_000  # changes one task keeps to apply one by one after a refusal
_SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname", "path"})
_HOST = re.compile(r"[A-Za-z0-9._:\[\]-]+")
_log = logging.getLogger(__name__)
_MAX_SHARED = 4  # hub sessions one worker process keeps
_RECONNECT_MAX_S = 10.0


@dataclass(frozen=True, slots=True)
class HubConfig:
    """Validated sink options."""

    contact_points: tuple[str, ...]
    port: int
    keyspace: str
    target: str
    table_json: str
    consistency: str
    concurrency: int
    batch_rows: int
    allow_alter: bool = False
    grouping: str = DEFAULT_GROUPING
    batch_statements: int = DEFAULT_BATCH_STATEMENTS
    batch_bytes: int = DEFAULT_BATCH_BYTES
    dead_letters: str = ""
    channel: str = ""
    tls: DriverTls | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    dead_letters_access: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """The edge's login and TLS for the dead letters (``DEAD_LETTER_ACCESS_OPTIONS``)."""

    @property
    def dead_letter_options(self) -> ClusterOptions | None:
        if not self.dead_letters:
            return None
        hosts, port = parse_hosts(self.dead_letters, "dead_letters")
        return dead_letter_options(hosts, port, *dead_letter_access(dict(self.dead_letters_access)))

    @property
    def table(self) -> Table:
        return table_from_json(self.table_json)

    @property
    def where(self) -> str:
        return f"{self.keyspace}.{self.target} at {','.join(self.contact_points)}:{self.port}"


def _bounded_int(options: Mapping[str, str], name: str, default: int, high: int) -> int:
    text = str(options.get(name, default)).strip()
    if not text.isdigit() or not 1 <= int(text) <= high:
        raise PipelineConfigError(
            f"{HUB_FORMAT}: {name} must be an integer in 1..{high}, got {text!r}"
        )
    return int(text)


def parse_options(options: Mapping[str, str]) -> HubConfig:
    """Check the options without connecting; PipelineConfigError on the first problem."""
    options = {k.lower(): v for k, v in options.items()}
    unknown = sorted(k for k in options if k not in _OPTIONS | _SPARK_OPTIONS)
    if unknown:
        raise PipelineConfigError(
            f"{HUB_FORMAT}: unknown option(s) {unknown}; allowed: {sorted(_OPTIONS)}"
        )
    for required in ("contact_points", "keyspace", "table", "schema"):
        if not str(options.get(required, "")).strip():
            raise PipelineConfigError(f"{HUB_FORMAT}: option {required!r} is missing")
    points = tuple(p.strip() for p in str(options["contact_points"]).split(","))
    bad = [p for p in points if not _HOST.fullmatch(p)]
    if bad:
        raise PipelineConfigError(f"{HUB_FORMAT}: bad contact point(s) {bad}")
    consistency = str(options.get("consistency", DEFAULT_CONSISTENCY)).strip().upper()
    if consistency not in ConsistencyLevel.name_to_value:
        allowed = sorted(ConsistencyLevel.name_to_value)
        raise PipelineConfigError(
            f"{HUB_FORMAT}: unknown consistency {consistency!r}; allowed: {allowed}"
        )
    dead_letters, channel = dead_letter_settings(options, HUB_FORMAT)
    access = tuple((k, str(v)) for k, v in options.items() if k in DEAD_LETTER_ACCESS_OPTIONS)
    return HubConfig(
        points,
        _bounded_int(options, "port", DEFAULT_PORT, 65535),
        str(options["keyspace"]).strip(),
        str(options["table"]).strip(),
        table_to_json(table_from_json(str(options["schema"]))),
        consistency,
        _bounded_int(options, "concurrency", DEFAULT_CONCURRENCY, MAX_CONCURRENCY),
        _bounded_int(options, "batch_rows", DEFAULT_BATCH_ROWS, MAX_BATCH_ROWS),
        _flag(options, "allow_alter"),
        _grouping(options),
        _bounded_int(options, "batch_statements", DEFAULT_BATCH_STATEMENTS, MAX_BATCH_STATEMENTS),
        _bounded_int(options, "batch_bytes", DEFAULT_BATCH_BYTES, MAX_BATCH_BYTES),
        dead_letters,
        channel,
        driver_tls(options),
        *credentials(options, HUB_FORMAT + ": option"),
        access,
    )


def _grouping(options: Mapping[str, str]) -> str:
    text = str(options.get("grouping", DEFAULT_GROUPING)).strip().lower()
    if text not in GROUPINGS:
        raise PipelineConfigError(
            f"{HUB_FORMAT}: grouping must be one of {list(GROUPINGS)}, got {text!r}"
        )
    return text


def _flag(options: Mapping[str, str], name: str) -> bool:
    text = str(options.get(name, "false")).strip().lower()
    if text not in ("true", "false"):
        raise PipelineConfigError(f"{HUB_FORMAT}: {name} must be true or false, got {text!r}")
    return text == "true"


def connect(config: HubConfig, *, metadata: bool = True) -> tuple[Cluster, Session]:
    """A driver cluster and session for the hub; PipelineConfigError naming it if unreachable.
    ``metadata=False`` reads neither the schema nor the token map (a check of the target needs
    neither, and connects faster)."""
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(RoundRobinPolicy()),
        request_timeout=REQUEST_TIMEOUT_S,
        consistency_level=ConsistencyLevel.name_to_value[config.consistency],
    )
    cluster = Cluster(
        list(config.contact_points),
        port=config.port,
        protocol_version=4,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=CONNECT_TIMEOUT_S,
        control_connection_timeout=CONNECT_TIMEOUT_S,
        reconnection_policy=ExponentialReconnectionPolicy(0.5, _RECONNECT_MAX_S),
        schema_metadata_enabled=metadata,
        token_metadata_enabled=metadata,
        ssl_context=None if config.tls is None else config.tls.context(),
        auth_provider=auth_provider(config.username, config.password),
    )
    try:
        return cluster, cluster.connect()
    except (NoHostAvailable, OSError) as error:
        cluster.shutdown()
        raise PipelineConfigError(f"cannot connect to the hub {config.where}: {error}") from None


def check_target(session: Session, config: HubConfig) -> None:
    """PipelineConfigError unless the hub has the keyspace and a table with the source's key
    (same columns, same order) and value columns of the same types; value columns it lacks
    are added when ``allow_alter`` (else DestinationBehind with the statements to run)."""
    rows = session.execute(
        "SELECT column_name, kind, position, type FROM system_schema.columns "
        "WHERE keyspace_name = %s AND table_name = %s",
        (config.keyspace, config.target),
    )
    found = {row.column_name: (row.kind, int(row.position), _type_text(row.type)) for row in rows}
    if not found:
        keyspaces = session.execute(
            "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s",
            (config.keyspace,),
        )
        what = "table" if list(keyspaces) else "keyspace"
        raise PipelineConfigError(f"{HUB_FORMAT}: unknown {what}: {config.where}")
    table = config.table
    keys = [
        f"{c.name} is {found[c.name][:2]}, not {(c.kind.value, c.position)}"
        if c.name in found
        else f"{c.name} missing"
        for c in table.primary_key_columns
        if found.get(c.name, ("", -1))[:2] != (c.kind.value, c.position)
    ]
    if keys:
        raise SchemaConflict(f"{HUB_FORMAT}: target {config.where} differs: {keys[:8]}")
    value = [c for c in table.columns if not c.is_primary_key]
    clashes = [
        f"{c.name} is {found[c.name][0]} {found[c.name][2]}, the source's {c.kind.value} "
        f"{c.type.cql_name()}"
        for c in value
        if c.name in found and found[c.name][::2] != (c.kind.value, _type_text(c.type.cql_name()))
    ]
    if clashes:
        raise SchemaConflict(
            f"{HUB_FORMAT}: target {config.where} differs: {clashes[:8]}; drop or rename those "
            "columns on the hub, or replicate to another table"
        )
    _add_columns(session, config, [c for c in value if c.name not in found])


def _type_text(text: str) -> str:
    return "".join(str(text).split()).lower()


def _add_columns(session: Session, config: HubConfig, missing: list[Column]) -> None:
    """``ALTER TABLE ... ADD`` each of ``missing`` when allowed, else DestinationBehind."""
    if not missing:
        return
    target = f'"{config.keyspace}"."{config.target}"'
    statements = tuple(
        f'ALTER TABLE {target} ADD "{c.name}" {c.type.cql_name()}'
        + (" static" if c.kind is ColumnKind.STATIC else "")
        for c in missing
    )
    if not config.allow_alter:
        raise DestinationBehind(
            f"{HUB_FORMAT}: target {config.where} lacks the source's column(s) "
            f"{[c.name for c in missing]} and altering it is not allowed "
            "(allow_alter / --alter-destinations)",
            statements,
        )
    for statement in statements:
        session.execute(statement)


def check_hub(config: HubConfig) -> None:
    """Connect once (driver side) and check the target."""
    cluster, session = connect(config, metadata=False)
    try:
        check_target(session, config)
    finally:
        cluster.shutdown()


def hub_options(
    contact_points: str | Iterable[str],
    keyspace: str,
    target: str,
    table: Table,
    *,
    port: int = DEFAULT_PORT,
    consistency: str = DEFAULT_CONSISTENCY,
    concurrency: int = DEFAULT_CONCURRENCY,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    allow_alter: bool = False,
    grouping: str = DEFAULT_GROUPING,
    batch_statements: int = DEFAULT_BATCH_STATEMENTS,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    tls: DriverTls | None = None,
    login: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Validated sink options for ``.options(**...)``, checked on the driver (connects to the
    hub and looks the target up, adding the source's new columns when ``allow_alter``) so
    that mistakes fail before any job starts."""
    points = contact_points if isinstance(contact_points, str) else ",".join(contact_points)
    options = {
        "contact_points": points,
        "port": str(port),
        "keyspace": keyspace,
        "table": target,
        "schema": table_to_json(table),
        "consistency": consistency,
        "concurrency": str(concurrency),
        "batch_rows": str(batch_rows),
        "allow_alter": "true" if allow_alter else "false",
        "grouping": grouping,
        "batch_statements": str(batch_statements),
        "batch_bytes": str(batch_bytes),
        **({} if tls is None else tls.as_options()),
        **(login or {}),
    }
    check_hub(parse_options(options))
    return options


# --- applying changes ---------------------------------------------------------------------------


@dataclass(slots=True)
class HubReport:
    """What one writer applied: changes read, statements run (in ``requests`` requests:
    statements alone or batches of them), list removals skipped."""

    changes: int = 0
    statements: int = 0
    skipped_list_removals: int = 0
    requests: int = 0


class HubApplier:
    """Turns changes into statements ``batch_rows`` at a time, groups them into requests
    (:func:`~ringflow.pipeline._hub_batches.pack_requests`) and sends those through one window
    of at most ``concurrency`` requests in flight across rounds."""

    def __init__(self, config: HubConfig, session: Session) -> None:
        self.config = config
        self.session = session
        self.window = _Window(session, config.concurrency)
        self.cql = HubCql(config.table, config.keyspace, config.target)
        self.report = HubReport()
        self._prepared: dict[str, Any] = {}
        self._changes: list[Change] = []
        self._bounds: list[Change] = []

    def add(self, change: Change, *, checked: bool = False) -> None:
        """Queue a change (validated against the table here, unless ``checked``: the caller
        did, as :func:`~ringflow.pipeline.change_from_row` does); runs a round when
        ``batch_rows`` are queued."""
        if not checked:
            validate_change(self.cql.table, change)
        self.report.changes += 1
        operation = change.operation
        if operation in RANGE_START_OPERATIONS or operation in RANGE_END_OPERATIONS:
            self._bounds.append(change)
        else:
            self._changes.append(change)
        if len(self._changes) + len(self._bounds) >= self.config.batch_rows:
            self.flush(final=False)

    def flush(self, final: bool = True) -> None:
        """Run the queued changes (and the range bounds paired so far; all of them if
        ``final``, where a bound without its partner is an InvalidChange); when ``final``,
        waits until every request sent is answered and raises the first failure."""
        now_s = int(time.time())
        statements: list[HubStatement] = []
        for change in self._changes:
            statements += self.cql.statements(change, now_s, checked=True)
        pairs, alone = pair_range_bounds(self.cql.table, self._bounds)
        for start, end in pairs:
            statements += self.cql.range_delete(start, end)
        if final and alone:
            where = [(b.operation.name, str(b.time), b.batch_seq_no) for b in alone[:5]]
            raise InvalidChange(
                f"{HUB_FORMAT}: range delete bounds without their pair in this task: {where}; "
                f"repartition the changes by cdc$stream_id"
            )
        self._changes, self._bounds = [], alone
        self._send(statements)
        self.report.skipped_list_removals = self.cql.skipped_list_removals
        if final:
            self.window.drain()

    def _send(self, statements: list[HubStatement]) -> None:
        if not statements:
            return
        work = self._requests(statements)
        for request, values in work:
            self.window.send(request, values)
        self.report.statements += len(statements)
        self.report.requests += len(work)

    def _requests(self, statements: list[HubStatement]) -> list[tuple[Any, Any]]:
        """(statement or batch, values) per request, as ``grouping`` says."""
        config = self.config
        if config.grouping == "none":
            return [(self._prepare(s.cql), s.values) for s in statements]
        replicas: dict[bytes | None, Any] = {}
        items = []
        for statement in statements:
            bound = self._prepare(statement.cql).bind(statement.values)
            key = bound.routing_key
            if key not in replicas:
                replicas[key] = self._replicas(key)
            # Over Cassandra's batch data size (a cell's value plus 16 bytes, a row marker),
            # so a batch within ``batch_bytes`` is within a hub's batch_size_fail_threshold.
            size = 8 + sum(16 + len(v) for v in bound.values if isinstance(v, bytes))
            items.append(Grouped(bound, replicas[key], key, size))
        requests = pack_requests(
            items, config.grouping, config.batch_statements, config.batch_bytes
        )
        return [(_batch(members), None) for members in requests]

    def _replicas(self, routing_key: bytes | None) -> tuple[str, ...]:
        """The hub replicas of a partition by the driver's token map (empty if unknown)."""
        if routing_key is None:
            return ()
        hosts = self.session.cluster.metadata.get_replicas(self.config.keyspace, routing_key)
        return tuple(sorted(str(host.endpoint) for host in hosts))

    def _prepare(self, text: str) -> Any:
        found = self._prepared.get(text)
        if found is None:
            found = self._prepared[text] = self.session.prepare(text)
        return found


class _Window:
    """At most ``limit`` requests in flight on ``session``, across rounds: :meth:`send` waits
    for a free slot; :meth:`drain` waits for every answer; both raise the first failure (the
    requests in flight then are still answered before :meth:`drain` returns or raises)."""

    def __init__(self, session: Session, limit: int) -> None:
        self.session = session
        self.slots = threading.Semaphore(limit)
        self.lock = threading.Condition()
        self.pending = 0
        self.error: BaseException | None = None

    def send(self, request: Any, values: Any) -> None:
        self._raise()
        self.slots.acquire()
        with self.lock:
            self.pending += 1
        try:
            future = self.session.execute_async(request, values)
        except BaseException:
            self._done(None)
            raise
        future.add_callbacks(self._done, self._failed)

    def drain(self) -> None:
        with self.lock:
            self.lock.wait_for(lambda: self.pending == 0)
        self._raise()

    def _failed(self, error: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = error
        self._done(None)

    def _done(self, _result: object) -> None:
        with self.lock:
            self.pending -= 1
            if self.pending == 0:
                self.lock.notify_all()
        self.slots.release()

    def _raise(self) -> None:
        with self.lock:
            error = self.error
        if error is not None:
            raise error


def _batch(members: list[BoundStatement]) -> Any:
    """One request: a statement alone, or an UNLOGGED BATCH without a timestamp of its own
    (each statement has its change's ``USING TIMESTAMP``)."""
    if len(members) == 1:
        return members[0]
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    for member in members:
        batch.add(member)
    return batch


def apply_to_hub(options: Mapping[str, str], changes: Iterable[Change]) -> HubReport:
    """Apply ``changes`` to the hub without Spark (the same statements as the sink)."""
    config = parse_options(options)
    cluster, session = connect(config)
    try:
        applier = HubApplier(config, session)
        for change in changes:
            applier.add(change)
        applier.flush()
        return applier.report
    finally:
        cluster.shutdown()


# --- the Spark data source ----------------------------------------------------------------------


class HubCommitMessage(WriterCommitMessage):
    """A task's report (:class:`HubReport` fields, and the changes kept as dead letters)."""

    def __init__(self, report: HubReport, dead_letters: int = 0) -> None:
        self.changes = report.changes
        self.statements = report.statements
        self.skipped_list_removals = report.skipped_list_removals
        self.requests = report.requests
        self.dead_letters = dead_letters


class _SharedHubs:
    """This process's hub sessions by config (oldest shut down beyond ``_MAX_SHARED``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: dict[HubConfig, tuple[Cluster, Session]] = {}

    def session(self, config: HubConfig) -> Session:
        with self.lock:
            entry = self.sessions.get(config)
            if entry is not None and not entry[0].is_shutdown:
                return entry[1]
            old = (
                self.sessions.pop(next(iter(self.sessions)))
                if len(self.sessions) >= _MAX_SHARED
                else None
            )
            entry = self.sessions[config] = connect(config)
        if old is not None:
            old[0].shutdown()
        return entry[1]

    def forget(self, config: HubConfig) -> None:
        with self.lock:
            entry = self.sessions.pop(config, None)
        if entry is not None:
            entry[0].shutdown()


_SHARED = _SharedHubs()
keep_session_cache(lambda: shut_down_sessions(_SHARED.lock, _SHARED.sessions))


def _write_batches(config: HubConfig, batches: Iterator[Any]) -> HubCommitMessage:
    table = config.table
    kept: list[Change] | None = [] if config.dead_letters else None
    session = _SHARED.session(config)
    try:
        applier = HubApplier(config, session)
        for batch in batches:
            for row in pa.Table.from_batches([batch]).to_pylist():
                change = change_from_row(table, row)
                if kept is not None and len(kept) >= MAX_DEAD_LETTER_CHANGES:
                    kept = None  # too many to apply one by one: fails as without dead letters
                if kept is not None:
                    kept.append(change)
                applier.add(change, checked=True)
        applier.flush()
        return HubCommitMessage(applier.report)
    except InvalidRequest:
        if kept is None or config.dead_letter_options is None:
            _SHARED.forget(config)
            raise
    except Exception:
        _SHARED.forget(config)  # the next task connects afresh
        raise
    return _apply_each(config, session, kept, applier)


def apply_each_to_hub(
    config: HubConfig, session: Session, changes: list[Change]
) -> list[tuple[Change, str]]:
    """Apply ``changes`` one by one (a change's statements alone, synchronously; range delete
    bounds as pairs); those the hub refuses as invalid, with the reason (any other error is
    raised)."""
    cql = HubCql(config.table, config.keyspace, config.target)
    prepared: dict[str, Any] = {}
    refused: list[tuple[Change, str]] = []
    now_s = int(time.time())
    bounds = [c for c in changes if c.operation in RANGE_START_OPERATIONS | RANGE_END_OPERATIONS]
    units: list[tuple[Change, list[HubStatement]]] = [
        (change, cql.statements(change, now_s, checked=True))
        for change in changes
        if change.operation not in RANGE_START_OPERATIONS | RANGE_END_OPERATIONS
    ]
    pairs, alone = pair_range_bounds(cql.table, bounds)
    units += [(start, cql.range_delete(start, end)) for start, end in pairs]
    refused += [(bound, "a range delete bound without its pair in this task") for bound in alone]
    for change, statements in units:
        try:
            for statement in statements:
                found = prepared.get(statement.cql)
                if found is None:
                    found = prepared[statement.cql] = session.prepare(statement.cql)
                session.execute(found, statement.values, timeout=REQUEST_TIMEOUT_S)
        except InvalidRequest as error:
            refused.append((change, f"the hub refused it: {error}"))
    return refused


def _apply_each(
    config: HubConfig, session: Session, changes: list[Change], applier: HubApplier
) -> HubCommitMessage:
    """After a refusal: every change again, one by one; the refused ones as dead letters."""
    options = config.dead_letter_options
    assert options is not None  # the caller checked
    try:
        refused = apply_each_to_hub(config, session, changes)
    except Exception:
        _SHARED.forget(config)
        raise
    record_dead_letters(options, config.channel, refused)
    if refused:
        _log.warning(
            "%s %s: %d change(s) refused, kept as dead letters of channel %s: %s",
            HUB_FORMAT,
            config.where,
            len(refused),
            config.channel,
            refused[0][1],
        )
    return HubCommitMessage(applier.report, len(refused))


def _log_commit(messages: list[WriterCommitMessage | None], what: str) -> None:
    reports = [m for m in messages if isinstance(m, HubCommitMessage)]
    _log.info(
        "%s %s: %d changes, %d statements in %d requests, %d list element removals skipped",
        HUB_FORMAT,
        what,
        sum(m.changes for m in reports),
        sum(m.statements for m in reports),
        sum(m.requests for m in reports),
        sum(m.skipped_list_removals for m in reports),
    )


class _HubStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, config: HubConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _write_batches(self.config, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Writes are idempotent (LWW at the original timestamps): nothing to make visible."""
        _log_commit(messages, f"batch {batchId} committed")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: what a task applied is applied again, harmlessly, on replay."""
        _log_commit(messages, f"batch {batchId} aborted")


class _HubBatchWriter(DataSourceArrowWriter):
    def __init__(self, config: HubConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _write_batches(self.config, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, "write committed")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, "write aborted")


class HubDataSource(DataSource):
    """``ringflow-hub``: the hub cluster sink (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return HUB_FORMAT

    def _prepared(self, schema: StructType) -> HubConfig:
        config = parse_options(self.options)
        check_change_schema(config.table, schema)
        return config

    def writer(self, schema: StructType, overwrite: bool) -> _HubBatchWriter:
        if overwrite:
            raise PipelineConfigError(f"{HUB_FORMAT} applies changes: use mode('append')")
        config = self._prepared(schema)
        check_hub(config)
        return _HubBatchWriter(config)

    def streamWriter(self, schema: StructType, overwrite: bool) -> _HubStreamWriter:
        """Spark asks for a stream writer at every micro-batch: the target was checked on the
        driver (:func:`hub_options`); a hub changed since fails the batch's statements."""
        if overwrite:
            raise PipelineConfigError(f"{HUB_FORMAT} applies changes: use outputMode('append')")
        return _HubStreamWriter(self._prepared(schema))
