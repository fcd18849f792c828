"""The lakehouse sinks (issue 19): ``ringflow-delta`` and ``ringflow-iceberg``, the change log and
a current-state table, one atomic commit per table per micro-batch, exactly once.

``df.writeStream.format("ringflow-delta")`` with options ``path`` (the change log's directory),
or ``format("ringflow-iceberg")`` with ``uri``, ``warehouse``, ``namespace``, ``table`` (the
catalog; :mod:`ringflow.pipeline._iceberg`); both with ``schema`` (the source table JSON: the
DataFrame has its change schema), ``holds`` (the table the destination holds: the union of the
source versions it took, recorded by :func:`lakehouse_options`), optionally ``channel`` (for
messages) and ``max_task_bytes`` (default 256 MiB). ``df.write`` works too (one commit, a fresh
app id). Tables, layout and maintenance: :mod:`ringflow.pipeline._delta`,
:mod:`ringflow.pipeline._iceberg`; the current-state table: :mod:`..._lakehouse_state`.

Shape (the Python Data Source writer, as ``ringflow-lake``): each task sends its rows to the
driver as one Arrow IPC message (at most ``max_task_bytes``; a bigger task fails its batch with
a PipelineConfigError saying to lower the source's batch size), and the driver's
``commit(messages, batch_id)`` makes the batch visible: the change rows, widened to the held
table's change schema (a column dropped at the source stays, null from then on) with ``date``
added, in one commit of the change log; then the current-state merge in one commit of the
current-state table: the stored rows the changes touch read back, the changes applied, the
changed rows written (merged on ``_row``, or the table rewritten whole when that is most of
it). The merge runs over Arrow columns for the common batch
(:class:`~ringflow.pipeline._lakehouse_columns.ColumnsMerge`: atomic columns, no range
deletions) and row by row otherwise
(:class:`~ringflow.pipeline._lakehouse_state.CurrentStateMerge`), with the same result. A
current-state table in the first layout (a JSON state per row) is rebuilt from the change log
when a job opens the destination (:func:`rebuild_current`). Each commit is skipped when the
table records the batch for the app id (``ringflow-<query id>``) already: Spark re-runs a batch
whose commit it did not record with the same offsets, so after any crash each table holds each
batch once. The data never touches the executors' disks: what a task sent is lost with a failed
batch, and re-sent by its replay.
"""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ringflow.pipeline._changes import (
    TIME_US_FIELD,
    ChangeReader,
    change_arrow_schema,
    check_change_schema,
    table_from_json,
    table_to_json,
)
from ringflow.pipeline._delta import DATE_FIELD, DeltaStore
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.pipeline._evolution import union_table
from ringflow.pipeline._iceberg import IcebergLocation, IcebergStore, location_options
from ringflow.pipeline._lake import task_context
from ringflow.pipeline._lakehouse_columns import ColumnsMerge
from ringflow.pipeline._lakehouse_state import (
    CurrentStateMerge,
    Wanted,
    conform,
    current_arrow_schema,
    current_rows_table,
    without_rows,
)
from ringflow.schema import Table

DELTA_FORMAT = "ringflow-delta"
ICEBERG_FORMAT = "ringflow-iceberg"
DEFAULT_MAX_TASK_BYTES = 256 * 1024 * 1024
_COMMON = frozenset({"schema", "holds", "channel", "max_task_bytes"})
_OPTIONS = {
    DELTA_FORMAT: _COMMON | {"path"},
    ICEBERG_FORMAT: _COMMON | {"uri", "warehouse", "namespace", "table"},
}
_SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname", "path"})


class LakehouseStore(Protocol):
    """What the commit needs of a destination's two tables (Delta or Iceberg)."""

    def check(self) -> None: ...
    def stored(self) -> Table | None: ...
    def record(self, table: Table, changes: Any, current: Any) -> None: ...
    def changes_committed(self, app_id: str) -> int: ...
    def current_committed(self, app_id: str) -> int: ...
    def append_changes(self, data: Any, app_id: str, batch_id: int) -> None: ...
    def current_rows(self, wanted: Wanted, schema: Any) -> tuple[Any, Any | None]: ...
    def legacy_current(self) -> bool: ...
    def read_changes(self) -> Any: ...
    def write_current(
        self, rows: Any, app_id: str, batch_id: int, whole: bool, new_layout: bool = False
    ) -> None: ...
    def data_files(self) -> tuple[list[str], list[str]]: ...
    def compact(self) -> dict[str, Any]: ...
    def expire(self) -> dict[str, Any]: ...


class CurrentRows(Protocol):
    """What a merge reads of a current-state table (:meth:`LakehouseStore.current_rows`)."""

    def current_rows(self, wanted: Wanted, schema: Any) -> tuple[Any, Any | None]: ...


def open_store(sink_format: str, options: Mapping[str, str]) -> LakehouseStore:
    """The store an option set names (no I/O yet)."""
    if sink_format == DELTA_FORMAT:
        return DeltaStore(options["path"])
    location = IcebergLocation(
        options["uri"], options["warehouse"], options["namespace"], options["table"]
    )
    return IcebergStore(location)


def changes_with_date_schema(table: Table) -> Any:
    """The change log's Arrow schema: the change schema of ``table`` plus ``date``."""
    return change_arrow_schema(table).append(pa.field(DATE_FIELD, pa.date32()))


@dataclass(frozen=True, slots=True)
class _Config:
    sink_format: str
    options: Mapping[str, str]
    table_json: str
    holds_json: str
    channel: str
    max_task_bytes: int

    @property
    def table(self) -> Table:
        return table_from_json(self.table_json)

    @property
    def holds(self) -> Table:
        return table_from_json(self.holds_json)

    def store(self) -> LakehouseStore:
        return open_store(self.sink_format, self.options)


def _config(sink_format: str, options: Mapping[str, str], schema: StructType | None) -> _Config:
    allowed = _OPTIONS[sink_format]
    unknown = sorted(k for k in options if k.lower() not in allowed | _SPARK_OPTIONS)
    if unknown:
        raise PipelineConfigError(f"{sink_format}: unknown option(s) {unknown}")
    missing = sorted(k for k in allowed - _COMMON | {"schema", "holds"} if not options.get(k))
    if missing:
        raise PipelineConfigError(f"{sink_format}: missing option(s) {missing}")
    size = options.get("max_task_bytes", str(DEFAULT_MAX_TASK_BYTES))
    if not size.isdigit() or int(size) <= 0:
        raise PipelineConfigError(f"max_task_bytes must be a positive integer, got {size!r}")
    table = table_from_json(options["schema"])
    if schema is not None:
        check_change_schema(table, schema)
    kept = {k: str(v) for k, v in options.items() if k in allowed - _COMMON}
    return _Config(
        sink_format,
        kept,
        options["schema"],
        options["holds"],
        options.get("channel", sink_format),
        int(size),
    )


# --- executor side -------------------------------------------------------------------------------


class LakehouseCommitMessage(WriterCommitMessage):
    """A task's rows (Arrow IPC stream bytes) and the streaming query it ran for."""

    def __init__(self, query: str | None, payload: bytes, rows: int) -> None:
        self.query = query
        self.payload = payload
        self.rows = rows


def _task_rows(config: _Config, batches: Iterator[Any]) -> LakehouseCommitMessage:
    _, _, query, _ = task_context()
    schema = change_arrow_schema(config.table)
    sink = pa.BufferOutputStream()
    rows = 0
    with pa.ipc.new_stream(sink, schema) as stream:
        for batch in batches:
            table = pa.Table.from_batches([batch]).select(schema.names).cast(schema)
            stream.write_table(table)
            rows += table.num_rows
            if sink.tell() > config.max_task_bytes:
                raise PipelineConfigError(
                    f"channel {config.channel}: a task of the batch holds more than "
                    f"max_task_bytes={config.max_task_bytes} bytes of changes; lower the "
                    "source's batch size (max_rows_per_batch / window)"
                )
    return LakehouseCommitMessage(query, sink.getvalue().to_pybytes(), rows)


# --- driver side ---------------------------------------------------------------------------------


def _batch_changes(config: _Config, messages: Sequence[WriterCommitMessage | None]) -> Any:
    """The batch's rows, widened to the held table's change schema, with ``date``."""
    target = change_arrow_schema(config.holds)
    parts = [
        pa.ipc.open_stream(pa.py_buffer(m.payload)).read_all()
        for m in messages
        if isinstance(m, LakehouseCommitMessage) and m.rows
    ]
    # a column dropped at the source is null from now on (``conform``)
    data = pa.concat_tables([target.empty_table(), *(conform(part, target) for part in parts)])
    days = pc.cast(pc.cast(data[TIME_US_FIELD], pa.timestamp("us")), pa.date32())
    return data.append_column(pa.field(DATE_FIELD, pa.date32()), days)


def commit_lakehouse_batch(
    config: _Config,
    messages: Sequence[WriterCommitMessage | None],
    app_id: str,
    batch_id: int,
    now_s: int | None = None,
) -> tuple[bool, bool]:
    """Commit one batch to the change log, then to the current-state table, each unless it
    holds the batch already (module docstring); whether each was committed now."""
    store = config.store()
    data = _batch_changes(config, messages)
    appending: Future[None] | None = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ringflow-lakehouse") as pool:
        if store.changes_committed(app_id) < batch_id:
            # the log's append runs while the current state is read and merged (both tables'
            # libraries leave the GIL for their I/O); the current state commits after it
            appending = pool.submit(store.append_changes, data, app_id, batch_id)
        merging = store.current_committed(app_id) < batch_id
        now = int(time.time()) if now_s is None else now_s
        rows = merge_batch(config.holds, data.drop([DATE_FIELD]), store, now) if merging else None
        if appending is not None:
            appending.result()  # its error, if any, before the current state commits
    merged = rows is not None and _write_current(store, *rows, app_id, batch_id)
    return appending is not None, merged


_WHOLE_REWRITE_FACTOR = 4
"""The current-state table is rewritten whole (one overwrite) when it holds at most this many
times the rows a batch changes: a merge would rewrite nearly every file anyway."""


def merge_batch(holds: Table, data: Any, store: CurrentRows, now_s: int) -> tuple[Any, Any, Any]:
    """The current-state merge of one batch of change rows ``data`` (Arrow): (the rows to
    write, the stored rows it read, the other stored rows or None when not read). Over columns
    (:mod:`~ringflow.pipeline._lakehouse_columns`) when it can, else row by row."""
    schema = current_arrow_schema(holds)
    fast = ColumnsMerge.for_batch(holds, data)
    read: tuple[Any, Any] | None = None
    if fast is not None:
        read = store.current_rows(fast.wanted(now_s), schema)
        rows = fast.merge(read[0], now_s)
        if rows is not None:
            return rows, *read
    with _collector_paused():
        reader = ChangeReader(holds)
        changes = [reader.read(row) for row in data.to_pylist()]
        merge = CurrentStateMerge(holds)
        # what the column merge read (whole partitions) holds all the row merge wants
        stored, rest = read or store.current_rows(merge.wanted(changes, now_s), schema)
        merge.load(stored.to_pylist())
        merge.apply(changes, validated=True)  # the reader validated them
        rows = current_rows_table(holds, merge.rows(now_s))
    return rows, stored, rest


def _write_current(
    store: LakehouseStore, rows: Any, stored: Any, rest: Any, app_id: str, batch_id: int
) -> bool:
    """Commit a batch's merge (:func:`merge_batch`) to the current-state table; whether
    anything changed."""
    if not rows.num_rows:
        return False
    total = stored.num_rows + (0 if rest is None else rest.num_rows)
    if rest is not None and total <= _WHOLE_REWRITE_FACTOR * rows.num_rows:
        whole = pa.concat_tables([rest, without_rows(stored, rows), rows])
        store.write_current(whole, app_id, batch_id, whole=True)
    else:
        store.write_current(rows, app_id, batch_id, whole=False)
    return True


def rebuild_current(store: LakehouseStore, holds: Table, now_s: int | None = None) -> int:
    """Rebuild a current-state table in the first layout (a JSON state per row) from the
    change log, in the layout of today; the rows it holds now."""
    now = int(time.time()) if now_s is None else now_s
    log = store.read_changes()
    data = conform(log, change_arrow_schema(holds))
    empty = _EmptyCurrent(current_arrow_schema(holds))
    rows, _, _ = merge_batch(holds, data, empty, now)
    store.write_current(rows, "ringflow-rebuild", 0, whole=True, new_layout=True)
    return int(rows.num_rows)


class _EmptyCurrent:
    """A current-state table with no rows (what a rebuild merges the whole log into)."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema

    def current_rows(self, wanted: Wanted, schema: Any) -> tuple[Any, Any | None]:
        return schema.empty_table(), None


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a batch is merged: the merge allocates some
    ten container objects per change, and the collections that triggers took ~30 % of its CPU
    (bench/RESULTS.md). Nothing it builds is cyclic garbage; the collector runs again after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _app_id(messages: Sequence[WriterCommitMessage | None]) -> str | None:
    queries = {m.query for m in messages if isinstance(m, LakehouseCommitMessage) and m.query}
    if len(queries) > 1:
        raise PipelineConfigError(f"one batch from several streaming queries: {sorted(queries)}")
    return f"ringflow-{queries.pop()}" if queries else None


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, config: _Config) -> None:
        self.config = config
        self.app_id = f"ringflow-write-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _task_rows(self.config, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_lakehouse_batch(self.config, messages, self.app_id, 0)


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, config: _Config) -> None:
        self.config = config

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _task_rows(self.config, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        app_id = _app_id(messages)
        if app_id is not None:  # no task ran: nothing to commit
            commit_lakehouse_batch(self.config, messages, app_id, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing was written anywhere: the rows were in the messages only."""


class _LakehouseDataSource(DataSource):
    sink_format = DELTA_FORMAT

    def writer(self, schema: StructType, overwrite: bool) -> _BatchWriter:
        if overwrite:
            raise PipelineConfigError(f"{self.sink_format} is append-only: use mode('append')")
        return _BatchWriter(_config(self.sink_format, self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> _StreamWriter:
        if overwrite:
            raise PipelineConfigError(
                f"{self.sink_format} is append-only: use outputMode('append')"
            )
        return _StreamWriter(_config(self.sink_format, self.options, schema))


class DeltaDataSource(_LakehouseDataSource):
    """``ringflow-delta``: a Delta Lake change log and current-state table (module docstring)."""

    sink_format = DELTA_FORMAT

    @classmethod
    def name(cls) -> str:
        return DELTA_FORMAT


class IcebergDataSource(_LakehouseDataSource):
    """``ringflow-iceberg``: an Iceberg change log and current-state table (module docstring)."""

    sink_format = ICEBERG_FORMAT

    @classmethod
    def name(cls) -> str:
        return ICEBERG_FORMAT


def lakehouse_options(
    sink_format: str, target: Mapping[str, str], table: Table, channel: str | None = None
) -> dict[str, str]:
    """Validated sink options for ``table`` at ``target`` (``{"path": DIR}`` or the Iceberg
    location's options), on the driver before any job: the store is checked (PipelineConfigError
    naming ``channel``), the table it holds followed (SchemaConflict when it cannot be),
    both tables created or given the new columns, and the held table recorded."""
    store = open_store(sink_format, target)
    where = f"channel {channel or sink_format}"
    try:
        store.check()
        stored = store.stored()
    except PipelineConfigError as error:
        raise PipelineConfigError(f"{where}: {error}") from None
    holds = table if stored is None else union_table(stored, table, f"{where} ({sink_format})")
    store.record(holds, changes_with_date_schema(holds), current_arrow_schema(holds))
    if store.legacy_current():
        rebuild_current(store, holds)
    options = {**target, "schema": table_to_json(table), "holds": table_to_json(holds)}
    if channel:
        options["channel"] = channel
    _config(sink_format, options, None)
    return options


def delta_options(path: str, table: Table, channel: str | None = None) -> dict[str, str]:
    """:func:`lakehouse_options` of a Delta change log at ``path``."""
    return lakehouse_options(DELTA_FORMAT, {"path": path}, table, channel)


def iceberg_options(
    location: IcebergLocation, table: Table, channel: str | None = None
) -> dict[str, str]:
    """:func:`lakehouse_options` of an Iceberg location."""
    return lakehouse_options(ICEBERG_FORMAT, dict(location_options(location)), table, channel)


def lakehouse_store(url: str) -> LakehouseStore:
    """The existing tables of a ``delta:DIR`` or ``iceberg:CATALOG#ns.table`` destination (for
    maintenance); PipelineConfigError when the URL is neither or names no such tables."""
    from ringflow.pipeline._iceberg import parse_location

    scheme, _, rest = url.partition(":")
    rest = rest[2:] if rest.startswith("//") and scheme == "delta" else rest
    store: LakehouseStore
    if scheme == "delta" and rest:
        store = DeltaStore(rest)
    elif scheme == "iceberg":
        store = IcebergStore(parse_location(rest))
    else:
        raise PipelineConfigError(f"{url!r}: expected delta:DIR or iceberg:CATALOG#namespace.table")
    store.check()
    if store.stored() is None:
        raise PipelineConfigError(f"{url!r}: no ringflow tables there (nothing replicated yet)")
    return store
