"""The PostgreSQL sink: changes applied as upserts guarded by write timestamps.

``df.writeStream.format("ringflow-postgres")`` (or ``df.write``) with options ``url``
(``postgresql://user@host:port/db``), ``table`` (the target, ``name`` or ``schema.name``),
``schema`` (:func:`~ringflow.pipeline.table_to_json` of the base table) and optionally
``rows_per_transaction`` (default 5,000), ``allow_alter`` (``true``/``false``, default false),
``dead_letters`` (the edge cluster's ``host[,host...][:port]``) with ``channel`` (the name the
dead letters are kept under).
The target's tables and its ``<table>_live`` view are created when absent (layout and type
mapping: :mod:`ringflow.pipeline._pg_sql`).

Schema changes (issue 15): the target holds the union of the source versions it took
(``T__schema``): a column dropped at the source is kept with its values; a new one is added to
the data tables (``ALTER TABLE ... ADD COLUMN``, a new table for a first static or a new
collection column) when ``allow_alter`` is true, else :class:`~ringflow.pipeline.DestinationBehind`
lists those exact statements for the operator to run; once the tables have the columns,
ringflow records the version and re-creates the ``_live`` view (both its own). A column whose
type changed is a :class:`~ringflow.pipeline.SchemaConflict`.

Every change becomes statements whose effect only depends on the set of changes applied, never
on their order or repetition (the rules of :mod:`ringflow.pipeline._materialize`): a column
value, the row marker and each collection element are replaced only by a greater (write
timestamp, tie bytes), Cassandra's cell order; row, partition, range and collection deletions
are kept as timestamps (``_deleted_at``, ``__partition_deletes``, ``__range_bounds``, ``_ct_c``)
that only grow, and shadowing is evaluated by the view, so a late older write never resurrects
a deleted row: it lands behind the tombstone. A replayed micro-batch therefore changes nothing,
and the driver's ``commit`` only records the batch in ``<table>__batches`` for operators.

Each writer task applies its rows in transactions of at most ``rows_per_transaction`` changes
with ``executemany`` (one statement kind after another, rows sorted by key so concurrent tasks
lock in one order; a deadlock or serialization failure retries the transaction).

Rows PostgreSQL refuses (REPLICATION.md decision 8): when a transaction fails with a data error
(SQLSTATE class 22, psycopg's ``DataError``: a ``text`` value holding U+0000, which PostgreSQL
text cannot store, a number out of range...) and ``dead_letters`` is set, it is rolled back and
its changes are applied again one by one, each in its own transaction; those refused again are
recorded as dead letters of ``channel`` in the edge cluster with the error
(:mod:`ringflow.pipeline._dead_letters`), the others are applied, and the task goes on, so one
bad row no longer fails its batch for ever. Any other failure (connection lost, server gone, a
constraint of ours) still fails the task and the job's backoff retries the batch. A flush holds
at most ``rows_per_transaction`` changes, so does the one-by-one pass.

Configuration errors (unknown or missing option, malformed or unreachable URL, a target whose
columns do not match) raise :class:`PipelineConfigError` naming the URL (password hidden) and the
cause. :func:`postgres_options` runs the same checks on the driver before any job is started.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
import psycopg.conninfo
import pyarrow as pa  # type: ignore[import-untyped]
from psycopg import errors as pg_errors
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ringflow.cdc import CdcOperation, deleted_elements_type
from ringflow.pipeline._changes import (
    IMAGE_OPERATIONS,
    RANGE_END_OPERATIONS,
    RANGE_START_OPERATIONS,
    Change,
    change_from_row,
    check_change_schema,
    clustering_prefix,
    table_from_json,
    table_to_json,
    validate_change,
)
from ringflow.pipeline._cluster_client import ClusterOptions, parse_hosts
from ringflow.pipeline._dead_letters import (
    DEAD_LETTER_ACCESS_OPTIONS,
    dead_letter_access,
    dead_letter_options,
    dead_letter_settings,
    record_dead_letters,
)
from ringflow.pipeline._errors import DestinationBehind, PipelineConfigError
from ringflow.pipeline._evolution import same_columns, union_table
from ringflow.pipeline._lake import task_context
from ringflow.pipeline._materialize import (
    Key,
    LiveRow,
    canonical_value,
    cell_order,
    expiry_s,
    hashable,
)
from ringflow.pipeline._materialize import elements as collection_elements
from ringflow.pipeline._pg_sql import (
    SCHEMA_SUFFIX,
    Statement,
    Target,
    batch_statement,
    cells_statement,
    element_to_pg,
    evolution_statements,
    from_pg_value,
    partition_delete_statement,
    range_bound_statement,
    row_statement,
    static_statement,
    to_pg_value,
    view_sql,
)
from ringflow.schema import (
    Column,
    CqlType,
    SetType,
    Table,
    comparable_bytes,
    encode_clustering,
    prefix_upper_bound,
    serialize,
)

POSTGRES_FORMAT = "ringflow-postgres"
DEFAULT_ROWS_PER_TRANSACTION = 5000
CONNECT_TIMEOUT_S = 5
LIVE_FETCH_ROWS = 2000  # rows of the live view a server-side cursor fetches at a time
_RETRIES_MAX = 5
_OPTIONS = frozenset(
    {"url", "table", "schema", "rows_per_transaction", "allow_alter", "dead_letters", "channel"}
    | DEAD_LETTER_ACCESS_OPTIONS
)
_SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")
_QUERY_SECRET = re.compile(r"([?&](?:ssl)?password=)[^&]*", re.IGNORECASE)
_log = logging.getLogger(__name__)


def redact(url: str) -> str:
    """``url`` with its password (and any ``password=``/``sslpassword=`` libpq parameter)
    replaced by ``***``."""
    return _QUERY_SECRET.sub(r"\1***", _PASSWORD.sub(r"\1***@", url))


@dataclass(frozen=True, slots=True)
class PostgresConfig:
    """Validated sink options."""

    url: str
    target: str
    table_json: str
    rows_per_transaction: int
    allow_alter: bool = False
    dead_letters: str = ""
    """The edge's ``host[,host...][:port]`` where refused rows go; empty: they fail the task."""
    channel: str = ""
    dead_letters_access: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """The edge's login and TLS for the dead letters (``DEAD_LETTER_ACCESS_OPTIONS``)."""

    @property
    def table(self) -> Table:
        return table_from_json(self.table_json)

    @property
    def dead_letter_options(self) -> ClusterOptions | None:
        if not self.dead_letters:
            return None
        hosts, port = parse_hosts(self.dead_letters, "dead_letters")
        return dead_letter_options(hosts, port, *dead_letter_access(dict(self.dead_letters_access)))


def parse_options(options: Mapping[str, str]) -> PostgresConfig:
    """Check the options without connecting; PipelineConfigError on the first problem."""
    unknown = sorted(k for k in options if k.lower() not in _OPTIONS | _SPARK_OPTIONS)
    if unknown:
        raise PipelineConfigError(
            f"{POSTGRES_FORMAT}: unknown option(s) {unknown}; allowed: {sorted(_OPTIONS)}"
        )
    for required in ("url", "table", "schema"):
        if not options.get(required):
            raise PipelineConfigError(f"{POSTGRES_FORMAT}: option {required!r} is missing")
    url = str(options["url"])
    if not url.startswith(("postgresql://", "postgres://")):
        raise PipelineConfigError(f"{POSTGRES_FORMAT}: url {redact(url)!r} is not postgresql://")
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as error:
        raise PipelineConfigError(
            f"{POSTGRES_FORMAT}: url {redact(url)!r} is malformed: {error}"
        ) from None
    rows = str(options.get("rows_per_transaction", DEFAULT_ROWS_PER_TRANSACTION))
    if not rows.isdigit() or int(rows) <= 0:
        raise PipelineConfigError(f"rows_per_transaction must be a positive integer, got {rows!r}")
    table = table_from_json(str(options["schema"]))
    Target(str(options["table"]), table)  # checks the names
    allow = str(options.get("allow_alter", "false")).strip().lower()
    if allow not in ("true", "false"):
        raise PipelineConfigError(f"allow_alter must be true or false, got {allow!r}")
    dead_letters, channel = dead_letter_settings(options, POSTGRES_FORMAT)
    access = tuple((k, str(v)) for k, v in options.items() if k in DEAD_LETTER_ACCESS_OPTIONS)
    return PostgresConfig(
        url,
        str(options["table"]),
        table_to_json(table),
        int(rows),
        allow == "true",
        dead_letters,
        channel,
        access,
    )


def connect(url: str) -> psycopg.Connection[Any]:
    """A connection to ``url``; PipelineConfigError naming the URL and the cause on failure."""
    try:
        return psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as error:
        cause = str(error).strip() or type(error).__name__
        raise PipelineConfigError(
            f"cannot connect to PostgreSQL at {redact(url)}: {cause}"
        ) from None


def prepare_target(config: PostgresConfig) -> None:
    """Create the target when absent; make it hold ``config.table`` (module docstring: added
    columns, or DestinationBehind with the statements; the version and the view)."""
    table = config.table
    where = f"target {config.target} at {redact(config.url)}"
    with connect(config.url) as connection, connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (config.target,))
        present = _present_columns(connection, Target(config.target, table))
        stored = _stored_table(connection, Target(config.target, table), present)
        union = table if stored is None else union_table(stored, table, where)
        target = Target(config.target, union)
        altering, owned = evolution_statements(target, _present_columns(connection, target))
        fresh = not any(suffix in present for suffix in ("", "__static"))
        if altering and not fresh and not config.allow_alter:
            raise DestinationBehind(
                f"{where} lacks what the source table {table.keyspace}.{table.name} now has "
                "and altering it is not allowed (allow_alter / --alter-destinations)",
                tuple(altering),
            )
        for statement in owned + altering:
            connection.execute(statement)
        view = connection.execute("SELECT to_regclass(%s)", (target.name("_live"),)).fetchone()
        if stored is not None and same_columns(stored, union) and view and view[0] and not altering:
            return
        connection.execute(f"DROP VIEW IF EXISTS {target.name('_live')}")
        connection.execute(view_sql(target))
        if stored is None or not same_columns(stored, union):
            connection.execute(
                f"INSERT INTO {target.name(SCHEMA_SUFFIX)} (version, table_json) SELECT "
                f"coalesce(max(version), 0) + 1, %s FROM {target.name(SCHEMA_SUFFIX)}",
                (table_to_json(union),),
            )


def _present_columns(connection: psycopg.Connection[Any], target: Target) -> dict[str, set[str]]:
    """The column names of each of the target's tables that exists, by suffix."""
    present: dict[str, set[str]] = {}
    for suffix, _, _ in target.tables():
        found = connection.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
            "AND NOT attisdropped",
            (target.name(suffix),),
        ).fetchall()
        if found:
            present[suffix] = {row[0] for row in found}
    return present


def _stored_table(
    connection: psycopg.Connection[Any], target: Target, present: dict[str, set[str]]
) -> Table | None:
    """The table the target holds (its newest ``T__schema`` row); None for a new target or
    one made before versions were recorded (it is taken to hold the given table)."""
    if SCHEMA_SUFFIX not in present:
        return None
    row = connection.execute(
        f"SELECT table_json FROM {target.name(SCHEMA_SUFFIX)} ORDER BY version DESC LIMIT 1"
    ).fetchone()
    return None if row is None else table_from_json(str(row[0]))


def postgres_options(
    url: str,
    target: str,
    table: Table,
    rows_per_transaction: int | None = None,
    *,
    allow_alter: bool = False,
) -> dict[str, str]:
    """Validated sink options for ``df.writeStream.options(**...)``, checked on the driver
    (connects, creates the target when absent, makes it hold ``table``: module docstring) so
    that mistakes fail before any job."""
    options = {"url": url, "table": target, "schema": table_to_json(table)}
    options["allow_alter"] = "true" if allow_alter else "false"
    if rows_per_transaction is not None:
        options["rows_per_transaction"] = str(rows_per_transaction)
    prepare_target(parse_options(options))
    return options


# --- applying changes ---------------------------------------------------------------------------


class ChangeApplier:
    """Turns changes into parameter rows of the target's statements, and runs them."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.table = target.table
        self._clustering_types = tuple((c.type, c.order) for c in self.table.clustering_columns)
        self.statements: dict[str, Statement] = {
            "row": row_statement(target),
            "partition": partition_delete_statement(target),
            "range": range_bound_statement(target),
        }
        if self.table.static_columns:
            self.statements["static"] = static_statement(target)
        for column in target.collection_columns:
            self.statements["cells:" + column.name] = cells_statement(target, column)
        self.pending: dict[str, list[tuple[bytes, tuple[object, ...]]]] = {
            name: [] for name in self.statements
        }
        self.changes_pending = 0

    def _add(self, kind: str, order: bytes, values: dict[str, object]) -> None:
        self.pending[kind].append((order, self.statements[kind].params(values)))

    def add(self, change: Change) -> None:
        """Queue the statements of one change (images are skipped: they are not deltas)."""
        validate_change(self.table, change)
        self.changes_pending += 1
        if change.operation in IMAGE_OPERATIONS:
            return
        keys: dict[str, object] = {
            c.name: to_pg_value(c.type, change.key[c.name])
            for c in self.table.partition_key_columns
        }
        pk_bytes = b"".join(
            serialize(c.type, change.key[c.name]) for c in self.table.partition_key_columns
        )
        prefix = clustering_prefix(self.table, change)
        encoded = encode_clustering(
            self._clustering_types,
            [serialize(t, v) for (t, _), v in zip(self._clustering_types, prefix, strict=False)],
        )
        ts = change.time_us
        if change.operation is CdcOperation.PARTITION_DELETE:
            self._add("partition", pk_bytes, {**keys, "ts": ts})
        elif change.operation in RANGE_START_OPERATIONS or change.operation in RANGE_END_OPERATIONS:
            self._add("range", pk_bytes, {**keys, **_bound(change, encoded)})
        else:
            self._add_row(change, keys, pk_bytes, encoded)

    def _add_row(
        self, change: Change, keys: dict[str, object], pk_bytes: bytes, encoded: bytes
    ) -> None:
        ts, ttl = change.time_us, change.ttl_s
        static = bool(self.table.clustering_columns) and not clustering_prefix(self.table, change)
        values: dict[str, object] = dict(keys)
        if not static:
            values.update(
                {
                    c.name: to_pg_value(c.type, change.key[c.name])
                    for c in self.table.clustering_columns
                }
            )
            values["_ck"] = encoded
        if change.operation is CdcOperation.ROW_DELETE:
            values["_deleted_at"] = ts
        if change.operation is CdcOperation.INSERT:
            values["_marker_wt"] = ts
            values["_marker_wx"] = cell_order(ts, b"", ttl)
            values["_marker_exp"] = expiry_s(ts, ttl)
        ck = b"" if static else encoded
        for name in sorted(set(change.values) | change.deleted | set(change.deleted_elements)):
            column = self.table.column(name)
            if column.type.is_multicell:
                if name in change.deleted:
                    values["_ct_" + name] = ts - 1
                self._add_cells(change, column, keys, pk_bytes, ck)
            elif name in change.deleted:
                values.update(
                    {name: None, "_wt_" + name: ts, "_wx_" + name: cell_order(ts, None, None)}
                )
            else:
                value = change.values[name]
                data = serialize(column.type, value, name)
                values[name] = to_pg_value(column.type, value)
                values["_wt_" + name] = ts
                values["_wx_" + name] = cell_order(ts, data, ttl)
                values["_exp_" + name] = expiry_s(ts, ttl)
        self._add("static" if static else "row", pk_bytes + b"\x00" + ck, values)

    def _add_cells(
        self, change: Change, column: Column, keys: dict[str, object], pk_bytes: bytes, ck: bytes
    ) -> None:
        ts, ttl = change.time_us, change.ttl_s
        path_type = _path_type(column.type)
        kind = "cells:" + column.name
        for removed in change.deleted_elements.get(column.name, frozenset()):
            path = comparable_bytes(path_type, serialize(path_type, removed))
            cell = {
                "_ck": ck,
                "path": path,
                "wt": ts,
                "wx": cell_order(ts, None, None),
                "tomb": True,
            }
            self._add(kind, pk_bytes + ck + path, {**keys, **cell})
        for path_value, value, value_type in collection_elements(
            column.type, change.values.get(column.name)
        ):
            path = comparable_bytes(path_type, serialize(path_type, path_value))
            data = b"" if value_type is None else serialize(value_type, value)
            key_text, elem = element_to_pg(column.type, path_value, value)
            cell = {
                "_ck": ck,
                "path": path,
                "key_text": key_text,
                "elem": elem,
                "wt": ts,
                "wx": cell_order(ts, data, ttl),
                "exp": expiry_s(ts, ttl),
                "tomb": False,
            }
            self._add(kind, pk_bytes + ck + path, {**keys, **cell})

    def flush(self, connection: psycopg.Connection[Any]) -> int:
        """Run everything queued in one transaction (retried on deadlock); the change count."""
        count = self.changes_pending
        for attempt in range(_RETRIES_MAX):
            try:
                with connection.transaction(), connection.cursor() as cursor:
                    for kind, statement in self.statements.items():
                        ordered = [p for _, p in sorted(self.pending[kind], key=_first)]
                        if ordered:
                            cursor.executemany(statement.sql, ordered)
                break
            except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
                if attempt == _RETRIES_MAX - 1:
                    raise
        self.discard()
        return count

    def discard(self) -> None:
        """Forget what is queued (after a failed flush)."""
        for rows in self.pending.values():
            rows.clear()
        self.changes_pending = 0


DATA_ERRORS: tuple[type[Exception], ...] = (pg_errors.DataError,)
"""What PostgreSQL (or psycopg, before sending) raises for a value it cannot take: SQLSTATE
class 22. These refuse rows; every other error is about the server, the link or us."""


def refusal_reason(error: Exception) -> str:
    """One line: the error class, its SQLSTATE when the server sent one, the message."""
    state = getattr(error, "sqlstate", None)
    message = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}{f' ({state})' if state else ''}: {message}"


def apply_each(
    applier: ChangeApplier, connection: psycopg.Connection[Any], changes: Iterable[Change]
) -> list[tuple[Change, str]]:
    """Apply ``changes`` one by one, each in its own transaction; the ones PostgreSQL refuses
    with a data error, with the reason (any other error is raised)."""
    refused: list[tuple[Change, str]] = []
    applier.discard()
    for change in changes:
        applier.add(change)
        try:
            applier.flush(connection)
        except DATA_ERRORS as error:
            applier.discard()
            refused.append((change, refusal_reason(error)))
    return refused


def _first(entry: tuple[bytes, tuple[object, ...]]) -> bytes:
    return entry[0]


def _path_type(cql_type: CqlType) -> CqlType:
    element_set = deleted_elements_type(cql_type)
    assert isinstance(element_set, SetType)  # deleted_elements_type always returns a set type
    return element_set.element


def _bound(change: Change, encoded: bytes) -> dict[str, object]:
    operation = change.operation
    upper = operation in (
        CdcOperation.RANGE_DELETE_START_EXCLUSIVE,
        CdcOperation.RANGE_DELETE_END_INCLUSIVE,
    )
    edge = prefix_upper_bound(encoded) if upper else encoded
    return {
        "time": change.time,
        "seq": change.batch_seq_no,
        "op": int(operation),
        "edge": edge,
        "ts": change.time_us,
    }


def apply_changes(
    url: str,
    target: str,
    table: Table,
    changes: Iterable[Change],
    rows_per_transaction: int = DEFAULT_ROWS_PER_TRANSACTION,
) -> int:
    """Apply ``changes`` to the target without Spark (same statements as the sink)."""
    config = parse_options({"url": url, "table": target, "schema": table_to_json(table)})
    prepare_target(config)
    applier = ChangeApplier(Target(target, table))
    applied = 0
    with connect(url) as connection:
        for change in changes:
            applier.add(change)
            if applier.changes_pending >= rows_per_transaction:
                applied += applier.flush(connection)
        applied += applier.flush(connection)
    return applied


# --- the Spark data source ----------------------------------------------------------------------


class PostgresCommitMessage(WriterCommitMessage):
    """A task's report: how many changes it applied (and kept as dead letters), in which
    streaming query."""

    def __init__(self, rows: int, query_id: str | None, dead_letters: int = 0) -> None:
        self.rows = rows
        self.query_id = query_id
        self.dead_letters = dead_letters


class _TaskWriter:
    """One task's changes applied a flush at a time; with dead letters configured, a flush
    PostgreSQL refuses for a data error is applied one by one and the refused changes are
    recorded (module docstring)."""

    def __init__(self, config: PostgresConfig, connection: psycopg.Connection[Any]) -> None:
        self.config = config
        self.connection = connection
        self.applier = ChangeApplier(Target(config.target, config.table))
        self.dead_letters = config.dead_letter_options
        self.changes: list[Change] = []  # of the pending flush, kept only for dead letters
        self.applied = 0
        self.refused = 0

    def add(self, change: Change) -> None:
        self.applier.add(change)
        if self.dead_letters is not None:
            self.changes.append(change)
        if self.applier.changes_pending >= self.config.rows_per_transaction:
            self.flush()

    def flush(self) -> None:
        changes, self.changes = self.changes, []
        try:
            self.applied += self.applier.flush(self.connection)
            return
        except DATA_ERRORS:
            if self.dead_letters is None:
                raise
        refused = apply_each(self.applier, self.connection, changes)
        record_dead_letters(self.dead_letters, self.config.channel, refused)
        self.applied += len(changes) - len(refused)
        self.refused += len(refused)
        if refused:
            _log.warning(
                "%s %s: %d change(s) refused, kept as dead letters of channel %s: %s",
                POSTGRES_FORMAT,
                self.config.target,
                len(refused),
                self.config.channel,
                refused[0][1],
            )


def _write_batches(config: PostgresConfig, batches: Iterator[Any]) -> PostgresCommitMessage:
    table = config.table
    _, _, query, _ = task_context()
    with connect(config.url) as connection:
        writer = _TaskWriter(config, connection)
        for batch in batches:
            for row in pa.Table.from_batches([batch]).to_pylist():
                writer.add(change_from_row(table, row))
        writer.flush()
    return PostgresCommitMessage(writer.applied, query, writer.refused)


def _record_batch(config: PostgresConfig, query_id: str, batch_id: int, rows: int) -> None:
    statement = batch_statement(Target(config.target, config.table))
    with connect(config.url) as connection:
        connection.execute(
            statement.sql,
            statement.params({"query_id": query_id, "batch_id": batch_id, "rows": rows}),
        )


def _log_dead_letters(
    config: PostgresConfig, reports: list[PostgresCommitMessage], what: str
) -> None:
    refused = sum(getattr(m, "dead_letters", 0) for m in reports)
    if refused:
        _log.warning(
            "%s %s, %s: %d change(s) refused, kept as dead letters of channel %s "
            "(ringflow replication dead-letters list)",
            POSTGRES_FORMAT,
            config.target,
            what,
            refused,
            config.channel,
        )


class _PostgresStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, config: PostgresConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _write_batches(self.config, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        reports = [m for m in messages if isinstance(m, PostgresCommitMessage)]
        query = next((m.query_id for m in reports if m.query_id), "unknown")
        _record_batch(self.config, query, batchId, sum(m.rows for m in reports))
        _log_dead_letters(self.config, reports, f"batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: what a task applied is applied again, harmlessly, on replay."""


class _PostgresBatchWriter(DataSourceArrowWriter):
    def __init__(self, config: PostgresConfig) -> None:
        self.config = config
        self.write_id = f"write-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _write_batches(self.config, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        reports = [m for m in messages if isinstance(m, PostgresCommitMessage)]
        _record_batch(self.config, self.write_id, 0, sum(m.rows for m in reports))
        _log_dead_letters(self.config, reports, self.write_id)


class PostgresDataSource(DataSource):
    """``ringflow-postgres``: the PostgreSQL sink (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return POSTGRES_FORMAT

    def _prepared(self, schema: StructType) -> PostgresConfig:
        config = parse_options(self.options)
        check_change_schema(config.table, schema)
        prepare_target(config)
        return config

    def writer(self, schema: StructType, overwrite: bool) -> _PostgresBatchWriter:
        if overwrite:
            raise PipelineConfigError(f"{POSTGRES_FORMAT} applies changes: use mode('append')")
        return _PostgresBatchWriter(self._prepared(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> _PostgresStreamWriter:
        if overwrite:
            raise PipelineConfigError(
                f"{POSTGRES_FORMAT} applies changes: use outputMode('append')"
            )
        return _PostgresStreamWriter(self._prepared(schema))


# --- reading the live view back -----------------------------------------------------------------


def read_postgres_live(
    url: str, target: str, table: Table, now_s: int | None = None
) -> dict[Key, LiveRow]:
    """``SELECT * FROM <target>_live`` as materialize's rows (``now_s`` pins the view's now)."""
    return {row.key: row for row in iter_postgres_live(url, target, table, now_s)}


def iter_postgres_live(
    url: str,
    target: str,
    table: Table,
    now_s: int | None = None,
    *,
    fetch_rows: int = LIVE_FETCH_ROWS,
) -> Iterator[LiveRow]:
    """The rows of ``<target>_live`` one by one through a server-side cursor (at most
    ``fetch_rows`` in memory), as materialize's rows; ``now_s`` pins the view's now."""
    view = Target(target, table).name("_live")
    with connect(url) as connection, connection.transaction():
        if now_s is not None:
            connection.execute("SELECT set_config('ringflow.now_s', %s, true)", (str(now_s),))
        with connection.cursor(name="ringflow_live") as cursor:
            cursor.itersize = fetch_rows
            cursor.execute(f"SELECT * FROM {view}")
            names: list[str] | None = None
            for record in cursor:
                names = names or [d.name for d in cursor.description or []]
                yield _live_row(table, dict(zip(names, record, strict=True)))


def _live_row(table: Table, row: Mapping[str, Any]) -> LiveRow:
    key = tuple(
        hashable(canonical_value(c.type, from_pg_value(c.type, row[c.name])))
        if row[c.name] is not None
        else None
        for c in table.primary_key_columns
    )
    values: dict[str, object] = {}
    times: dict[str, int] = {}
    for column in table.static_columns + table.regular_columns:
        if row[column.name] is not None:
            raw = from_pg_value(column.type, row[column.name])
            values[column.name] = canonical_value(column.type, raw)
            times[column.name] = int(row["_wt_" + column.name])
    return LiveRow(key, values, times)
