"""``ringflow-cdc``: the CDC log of one table as a batch or streaming Spark source.

Reads ``<table>_scylla_cdc_log`` the way the Scylla consumer libraries do (scylla-cdc.md §6-7):

- Generations from ``system_distributed.cdc_generation_timestamps`` (``key = 'timestamps'``),
  their streams from ``cdc_streams_descriptions_v2`` (only generations whose timestamp is
  published are read).
- Partitions: the streams grouped by vnode (the vnode index decoded from the stream id,
  :class:`ringflow.cdc.StreamId`; ids of other versions are their own group); a vnode's streams
  always share a partition, and consecutive groups are packed into at most ``max_partitions``
  partitions per generation span (default: the driver's CPU count), so a micro-batch with
  little data costs a few tasks, not one per vnode.
- Each stream is read in query windows of ``query_window_ms`` (default 30 s):
  ``WHERE "cdc$stream_id" = ? AND "cdc$time" > maxTimeuuid(?) AND "cdc$time" <= maxTimeuuid(?)``
  (prepared), up to ``read_concurrency`` (default 16) window queries of a partition in flight
  at once, their rows yielded in query order, so a partition's rows come sorted by (stream,
  ``cdc$time``, ``cdc$batch_seq_no``); nothing is buffered beyond the queries in flight (one
  page each) and one Arrow batch (``batch_rows``). A task uses its worker process's shared
  driver session (:func:`ringflow.pipeline._cluster_client.shared_session`).
- Never past ``now - confidence_window_ms`` (default 30 s); offsets, generation switching and
  throttling (``max_window_ms``, ``max_rows_per_batch`` as Spark's ``ReadMaxRows``) are the
  pure planning of :mod:`ringflow.pipeline._cdc_offsets`; ``startingTime`` (ms) is bounded below
  by now - the log's TTL.
- Rows: :func:`ringflow.pipeline.change_schema` of the base table (the sinks' input), built by
  ``log_row_converter`` (the same rows as ``change_from_log_row`` then ``change_to_row``, without
  the intermediate ``Change``), so sources and sinks share one change model.
  Pre/post-image rows are included when the table has them enabled.
- The table is read once, when the DataFrame is made, or given (option ``schema``, the table
  JSON of :func:`~ringflow.pipeline.table_to_json`; the replication job pins it so that its
  sinks and the source agree). A Spark query keeps one schema, so when the log's columns change
  (``ALTER TABLE`` of the base) the query stops with
  :class:`~ringflow.pipeline.SourceSchemaChanged`: before planning a micro-batch when the
  stream reader finds them changed in ``system_schema``, or in a task whose window query
  answers with other columns (a change after planning), which converts nothing. Restarted from
  its checkpoint with the new schema, the query reads the same offsets again, new columns
  included: a value the source cannot convert is never skipped.

Batch reads cover ``(startingTime - 1, endingTime]`` (default: up to now - confidence).
"""

from __future__ import annotations

import datetime
import itertools
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from cassandra import ConsistencyLevel
from cassandra.cluster import Cluster, ResponseFuture, Session
from cassandra.query import PreparedStatement, SimpleStatement
from pyspark.sql import types as st
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ringflow.cdc import InvalidStreamId, StreamId, cdc_log_table
from ringflow.pipeline._cdc_offsets import (
    DEFAULT_CONFIDENCE_MS,
    DEFAULT_WINDOW_MS,
    CdcOffset,
    GenerationSpan,
    generation_of,
    generation_spans,
    initial_offset,
    latest_offset,
    plan_row_limited,
    query_windows,
)
from ringflow.pipeline._changes import (
    change_arrow_schema,
    change_schema,
    log_row_converter,
    table_from_json,
    table_to_json,
)
from ringflow.pipeline._cluster_client import (
    ClusterOptions,
    cluster_options,
    connect,
    forget_session,
    load_table,
    open_session,
    option_int,
    plain_value,
    prepared,
    shared_session,
)
from ringflow.pipeline._errors import PipelineConfigError, SourceSchemaChanged
from ringflow.schema import Table

CDC_FORMAT = "ringflow-cdc"
DEFAULT_BATCH_ROWS = 4096
DEFAULT_READ_CONCURRENCY = 16
MAX_READ_CONCURRENCY = 256
_EPOCH = datetime.datetime(1970, 1, 1)


class CdcPartition(InputPartition):
    """The streams of one vnode of one generation, and the time spans to read."""

    def __init__(self, streams: list[bytes], spans: list[tuple[int, int]]) -> None:
        super().__init__((streams, spans))
        self.streams = streams
        self.spans = spans


class CdcSettings:
    """The options of ``ringflow-cdc``, validated on the driver (picklable)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.cluster = cluster_options(options)
        self.window_ms = option_int(options, "query_window_ms", DEFAULT_WINDOW_MS)
        self.confidence_ms = option_int(
            options, "confidence_window_ms", DEFAULT_CONFIDENCE_MS, minimum=0
        )
        self.batch_rows = option_int(options, "batch_rows", DEFAULT_BATCH_ROWS)
        self.max_partitions = option_int(options, "max_partitions", os.cpu_count() or 2)
        self.read_concurrency = min(
            option_int(options, "read_concurrency", DEFAULT_READ_CONCURRENCY),
            MAX_READ_CONCURRENCY,
        )
        self.max_window_ms = _optional_int(options, "max_window_ms")
        self.max_rows = _optional_int(options, "max_rows_per_batch")
        self.starting_ms = _optional_int(options, "startingTime", minimum=0)
        self.ending_ms = _optional_int(options, "endingTime", minimum=0)
        self.table_json = _pinned_table(options, self.cluster)


def _pinned_table(options: Mapping[str, str], cluster: ClusterOptions) -> str | None:
    """The ``schema`` option (table JSON), checked to be the source table; None if absent."""
    text = options.get("schema")
    if not text:
        return None
    table = table_from_json(str(text))
    if (table.keyspace, table.name) != (cluster.keyspace, cluster.table):
        raise PipelineConfigError(
            f"option 'schema' describes {table.keyspace}.{table.name}, not {cluster.table_name}"
        )
    return table_to_json(table)


def _optional_int(options: Mapping[str, str], name: str, minimum: int = 1) -> int | None:
    if options.get(name) is None:
        return None
    return option_int(options, name, 0, minimum=minimum)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _ms_datetime(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def _datetime_ms(moment: datetime.datetime) -> int:
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.UTC).replace(tzinfo=None)
    return (moment - _EPOCH) // datetime.timedelta(milliseconds=1)


def load_cdc_table(cluster: Cluster, settings: ClusterOptions) -> Table:
    """The base table; PipelineConfigError if it has no CDC log."""
    table = load_table(cluster, settings.keyspace, settings.table)
    if not table.options.cdc.enabled:
        raise PipelineConfigError(f"table {settings.table_name} does not have CDC enabled")
    return table


def _description_statement(session: Session, query: str) -> SimpleStatement:
    """The description tables are read at ONE on a one-node cluster, else QUORUM, as the Scylla
    consumer libraries do (scylla-cdc.md §7: ``system_distributed`` has RF 3 whatever the size)."""
    hosts = session.cluster.metadata.all_hosts()
    level = ConsistencyLevel.ONE if len(hosts) <= 1 else ConsistencyLevel.QUORUM
    return SimpleStatement(query, consistency_level=level)


def generations(session: Session) -> list[int]:
    """The published generation timestamps (ms), oldest first."""
    statement = _description_statement(
        session,
        "SELECT time FROM system_distributed.cdc_generation_timestamps WHERE key = 'timestamps'",
    )
    return sorted(_datetime_ms(row["time"]) for row in session.execute(statement))


def vnode_stream_groups(session: Session, generation_ms: int) -> list[list[bytes]]:
    """The generation's streams grouped by vnode index, each group sorted."""
    statement = _description_statement(
        session,
        "SELECT streams FROM system_distributed.cdc_streams_descriptions_v2 WHERE time = %s",
    )
    rows = session.execute(statement, (_ms_datetime(generation_ms),))
    groups: dict[object, list[bytes]] = {}
    for row in rows:
        for raw in row["streams"]:
            stream = bytes(raw)
            try:
                vnode = StreamId.from_bytes(stream, accept_any_version=True).vnode_index
            except InvalidStreamId:
                vnode = None
            groups.setdefault(stream if vnode is None else vnode, []).append(stream)
    return sorted((sorted(group) for group in groups.values()), key=lambda group: group[0])


def pack_groups(groups: Sequence[list[bytes]], max_partitions: int) -> list[list[bytes]]:
    """Consecutive stream groups packed into at most ``max_partitions`` near-equal runs (by
    group count), each run's streams sorted; a group is never split."""
    parts = max(1, min(max_partitions, len(groups)))
    size, extra = divmod(len(groups), parts)
    packed, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        packed.append(sorted(itertools.chain.from_iterable(groups[start:end])))
        start = end
    return [streams for streams in packed if streams]


def plan_partitions(
    groups_of: Callable[[int], list[list[bytes]]],
    spans: Sequence[GenerationSpan],
    max_partitions: int,
) -> list[CdcPartition]:
    """The partitions of the spans: per span, its generation's groups (``groups_of``) packed."""
    partitions = []
    for span in spans:
        for streams in pack_groups(groups_of(span.generation_ms), max_partitions):
            partitions.append(CdcPartition(streams, [(span.after_ms, span.until_ms)]))
    return partitions


class RingflowCdcDataSource(DataSource):
    """``ringflow-cdc``: the CDC log of one table (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return CDC_FORMAT

    def schema(self) -> st.StructType:
        settings = CdcSettings(self.options)
        if settings.table_json is not None:
            return change_schema(table_from_json(settings.table_json))
        with open_session(settings.cluster) as (cluster, _):
            table = load_cdc_table(cluster, settings.cluster)
        return change_schema(table)

    def reader(self, schema: st.StructType) -> RingflowCdcBatchReader:
        return RingflowCdcBatchReader(CdcSettings(self.options))

    def streamReader(self, schema: st.StructType) -> RingflowCdcStreamReader:
        return RingflowCdcStreamReader(CdcSettings(self.options))


class _LogReading:
    """What the batch and stream readers share: the table, and reading a partition."""

    settings: CdcSettings
    table_json: str

    def _load(self, settings: CdcSettings, cluster: Cluster | None = None) -> None:
        """Settings and the table, read through ``cluster`` if given (else a session of its
        own, shut down after)."""
        self.settings = settings
        if settings.table_json is not None:
            self.table_json = settings.table_json
            return
        if cluster is not None:
            self.table_json = table_to_json(load_cdc_table(cluster, settings.cluster))
            return
        with open_session(settings.cluster) as (own, _):
            self.table_json = table_to_json(load_cdc_table(own, settings.cluster))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if type(partition) is InputPartition:  # none planned: Spark reads InputPartition(None)
            return
        assert isinstance(partition, CdcPartition)
        table = table_from_json(self.table_json)
        schema = change_arrow_schema(table)
        options = self.settings.cluster
        try:
            session = shared_session(options)
            convert = log_row_converter(table, plain_value)
            batch: list[tuple[object, ...]] = []
            for row in read_log_rows(session, table, partition, self.settings):
                batch.append(convert(row))
                if len(batch) >= self.settings.batch_rows:
                    yield arrow_batch(batch, schema)
                    batch = []
            if batch:
                yield arrow_batch(batch, schema)
        except Exception:
            forget_session(options)  # the next task connects afresh
            raise


def arrow_batch(rows: Sequence[tuple[object, ...]], schema: Any) -> Any:
    """Rows (in schema order) as one Arrow batch of ``schema``: column by column, the same
    conversion as ``RecordBatch.from_pylist`` without its per-row dict work (~60 µs a row)."""
    columns = list(zip(*rows, strict=True))
    arrays = [
        pa.array(column, type=field.type) for column, field in zip(columns, schema, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _log_query_text(table: Table, columns: str) -> str:
    log = f'"{table.keyspace}"."{table.cdc_log_name}"'
    return (
        f'SELECT {columns} FROM {log} WHERE "cdc$stream_id" = ? '
        'AND "cdc$time" > maxTimeuuid(?) AND "cdc$time" <= maxTimeuuid(?)'
    )


def in_order(
    session: Session,
    statement: PreparedStatement,
    params: Iterable[tuple[object, ...]],
    in_flight: int,
    fetch_size: int,
) -> Iterator[Any]:
    """The results of ``statement`` for each of ``params``, in that order, with up to
    ``in_flight`` queries running at once (their first pages arrive concurrently; later pages
    of a result are fetched as it is consumed)."""
    pending: deque[ResponseFuture] = deque()
    remaining = iter(params)

    def issue() -> None:
        values = next(remaining, None)
        if values is not None:
            bound = statement.bind(values)
            bound.fetch_size = fetch_size
            pending.append(session.execute_async(bound))

    for _ in range(max(1, in_flight)):
        issue()
    while pending:
        result = pending.popleft().result()
        issue()
        yield result


def read_log_rows(
    session: Session, table: Table, partition: CdcPartition, settings: CdcSettings
) -> Iterator[dict[str, Any]]:
    """The partition's log rows, per stream in (time, batch_seq_no) order, window by window;
    SourceSchemaChanged when a window's rows have other columns than ``table``'s log."""
    statement = prepared(session, _log_query_text(table, "*"))
    windows = (
        (stream, _ms_datetime(low), _ms_datetime(high))
        for stream in partition.streams
        for after, until in partition.spans
        for low, high in query_windows(after, until, settings.window_ms)
    )
    page = settings.cluster.page_size
    expected = log_column_names(table)
    for result in in_order(session, statement, windows, settings.read_concurrency, page):
        names = result.column_names
        if names is not None and (len(names) != len(expected) or not expected.issuperset(names)):
            raise log_columns_changed(table, expected, names)
        yield from result


def log_column_names(table: Table) -> frozenset[str]:
    """The columns of ``table``'s CDC log."""
    return frozenset(column.name for column in cdc_log_table(table).columns)


def log_columns_changed(
    table: Table, expected: frozenset[str], found: Sequence[str]
) -> SourceSchemaChanged:
    """The error of a read that found the log with other columns than ``table``'s."""
    added, dropped = sorted(set(found) - expected), sorted(expected - set(found))
    return SourceSchemaChanged(
        f"{CDC_FORMAT}: the CDC log of {table.keyspace}.{table.name} has other columns than when "
        f"this query read its schema (now also {added}, no longer {dropped}): nothing was "
        "converted with the old schema; restart the query to read the same changes with the "
        "new one"
    )


class RingflowCdcBatchReader(_LogReading, DataSourceReader):
    """Batch read of ``(startingTime - 1, endingTime or now - confidence]``."""

    def __init__(self, settings: CdcSettings) -> None:
        self._load(settings)

    def partitions(self) -> Sequence[InputPartition]:
        settings = self.settings
        with open_session(settings.cluster) as (_, session):
            known = generations(session)
            table = table_from_json(self.table_json)
            now = now_ms()
            start = initial_offset(known, now, table.options.cdc.ttl_s, settings.starting_ms)
            until = now - settings.confidence_ms
            if settings.ending_ms is not None:
                until = min(until, settings.ending_ms)
            end = CdcOffset(generation_of(known, until), until)
            if end.watermark_ms <= start.watermark_ms:
                return []
            spans = generation_spans(start, end, known)
            return plan_partitions(
                lambda generation: vnode_stream_groups(session, generation),
                spans,
                settings.max_partitions,
            )


class RingflowCdcStreamReader(_LogReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches between per-generation watermarks (:mod:`._cdc_offsets`).

    ``max_window_ms`` throttles every trigger; with ``Trigger.AvailableNow`` the clock is
    frozen when the query starts, so the query reads everything safe at that instant, in as
    many throttled batches as it takes, then stops."""

    def __init__(self, settings: CdcSettings) -> None:
        self._cluster: tuple[Cluster, Session] | None = connect(settings.cluster)
        try:
            self._load(settings, self._cluster[0])
        except BaseException:
            self._cluster[0].shutdown()
            raise
        self._frozen_now_ms: int | None = None
        self._groups: dict[int, list[list[bytes]]] = {}  # a published generation never changes
        self._log_columns: frozenset[str] | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        self._frozen_now_ms = now_ms()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cluster"] = None  # a live driver connection stays on the driver
        state["_groups"] = {}
        return state

    def _stream_groups(self, generation_ms: int) -> list[list[bytes]]:
        groups = self._groups.get(generation_ms)
        if groups is None:
            groups = vnode_stream_groups(self._session(), generation_ms)
            if groups:
                self._groups[generation_ms] = groups
        return groups

    def _session(self) -> Session:
        if self._cluster is None:
            self._cluster = connect(self.settings.cluster)
        return self._cluster[1]

    def initialOffset(self) -> dict[str, int]:
        table = table_from_json(self.table_json)
        known = generations(self._session())
        offset = initial_offset(known, now_ms(), table.options.cdc.ttl_s, self.settings.starting_ms)
        return offset.to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.settings.max_rows is not None:
            return ReadMaxRows(self.settings.max_rows)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        self._check_log_columns()
        begin = CdcOffset.from_dict(start)
        known = generations(self._session())
        settings = self.settings
        now = now_ms() if self._frozen_now_ms is None else self._frozen_now_ms
        end = latest_offset(begin, known, now, settings.confidence_ms, settings.max_window_ms)
        if isinstance(limit, ReadMaxRows) and end.watermark_ms > begin.watermark_ms:
            end = plan_row_limited(
                begin, end, settings.window_ms, limit.max_rows, self._row_counter(end)
            )
        return end.to_dict()

    def _check_log_columns(self) -> None:
        """SourceSchemaChanged before a batch is planned when the log (as the node asked sees
        it) has other columns than the query's table: the query stops at a batch boundary,
        before any task reads the log (the tasks check too, for a change after planning)."""
        table = table_from_json(self.table_json)
        if self._log_columns is None:
            self._log_columns = log_column_names(table)
        rows = self._session().execute(
            SimpleStatement(
                "SELECT column_name FROM system_schema.columns "
                "WHERE keyspace_name = %s AND table_name = %s"
            ),
            (table.keyspace, table.cdc_log_name),
        )
        found = sorted(row["column_name"] for row in rows)
        if found and set(found) != self._log_columns:
            raise log_columns_changed(table, self._log_columns, found)

    def _row_counter(self, end: CdcOffset) -> Callable[[int, int], int]:
        session = self._session()
        table = table_from_json(self.table_json)
        statement = session.prepare(_log_query_text(table, '"cdc$time"'))
        streams = [s for group in self._stream_groups(end.generation_ms) for s in group]
        settings = self.settings

        def count(after_ms: int, until_ms: int) -> int:
            window = (_ms_datetime(after_ms), _ms_datetime(until_ms))
            params = ((stream, *window) for stream in streams)
            page = settings.cluster.page_size
            results = in_order(session, statement, params, settings.read_concurrency, page)
            return sum(sum(1 for _ in result) for result in results)

        return count

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = CdcOffset.from_dict(start), CdcOffset.from_dict(end)
        if finish.watermark_ms <= begin.watermark_ms:
            return []
        spans = generation_spans(begin, finish, generations(self._session()))
        return plan_partitions(self._stream_groups, spans, self.settings.max_partitions)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the log expires by its TTL (Spark's commit lags one batch)."""

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster[0].shutdown()
            self._cluster = None


def read_changes(spark: Any, options: dict[str, str], *, streaming: bool = False) -> Any:
    """``spark.read`` (or ``readStream``) ``.format("ringflow-cdc")`` after checking the options
    and the table in this process, so a bad option raises :class:`PipelineConfigError` itself
    before any job starts."""
    RingflowCdcDataSource(CaseInsensitiveDict(options)).schema()
    spark.dataSource.register(RingflowCdcDataSource)
    reader = spark.readStream if streaming else spark.read
    return reader.format(CDC_FORMAT).options(**options).load()
