"""``ringflow-cdc``: the CDC log of one table as a batch or streaming Spark source.

Reads ``<table>_scylla_cdc_log`` the way the Scylla consumer libraries do (scylla-cdc.md §6-7):

- Generations from ``system_distributed.cdc_generation_timestamps`` (``key = 'timestamps'``),
  their streams from ``cdc_streams_descriptions_v2`` (only generations whose timestamp is
  published are read).
- One Spark partition per group of streams of one vnode (the vnode index decoded from the
  stream id, :class:`ringflow.cdc.StreamId`; ids of other versions are their own group).
- Each stream is read in query windows of ``query_window_ms`` (default 30 s):
  ``WHERE "cdc$stream_id" = ? AND "cdc$time" > maxTimeuuid(?) AND "cdc$time" <= maxTimeuuid(?)``,
  one stream at a time, so a partition's rows come sorted by (stream, ``cdc$time``,
  ``cdc$batch_seq_no``) with nothing buffered beyond one Arrow batch (``batch_rows``).
- Never past ``now - confidence_window_ms`` (default 30 s); offsets, generation switching and
  throttling (``max_window_ms``, ``max_rows_per_batch`` as Spark's ``ReadMaxRows``) are the
  pure planning of :mod:`ringflow.pipeline._cdc_offsets`; ``startingTime`` (ms) is bounded below
  by now - the log's TTL.
- Rows: :func:`ringflow.pipeline.change_schema` of the base table (the sinks' input), built by
  ``change_from_log_row`` / ``change_to_row``, so sources and sinks share one change model.
  Pre/post-image rows are included when the table has them enabled.

Batch reads cover ``(startingTime - 1, endingTime]`` (default: up to now - confidence).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from cassandra import ConsistencyLevel
from cassandra.cluster import Cluster, Session
from cassandra.query import SimpleStatement
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

from ringflow.cdc import InvalidStreamId, StreamId
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
    change_from_log_row,
    change_schema,
    change_to_row,
    table_from_json,
    table_to_json,
)
from ringflow.pipeline._cluster_client import (
    ClusterOptions,
    cluster_options,
    connect,
    load_table,
    open_session,
    option_int,
    plain_value,
)
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.schema import Table

CDC_FORMAT = "ringflow-cdc"
DEFAULT_BATCH_ROWS = 4096
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
        self.max_window_ms = _optional_int(options, "max_window_ms")
        self.max_rows = _optional_int(options, "max_rows_per_batch")
        self.starting_ms = _optional_int(options, "startingTime", minimum=0)
        self.ending_ms = _optional_int(options, "endingTime", minimum=0)


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


def plan_partitions(session: Session, spans: Sequence[GenerationSpan]) -> list[CdcPartition]:
    partitions = []
    for span in spans:
        for group in vnode_stream_groups(session, span.generation_ms):
            partitions.append(CdcPartition(group, [(span.after_ms, span.until_ms)]))
    return partitions


class RingflowCdcDataSource(DataSource):
    """``ringflow-cdc``: the CDC log of one table (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return CDC_FORMAT

    def schema(self) -> st.StructType:
        settings = CdcSettings(self.options)
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

    def _load(self, settings: CdcSettings) -> None:
        self.settings = settings
        with open_session(settings.cluster) as (cluster, _):
            self.table_json = table_to_json(load_cdc_table(cluster, settings.cluster))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, CdcPartition)
        table = table_from_json(self.table_json)
        schema = change_arrow_schema(table)
        names = schema.names
        cluster, session = connect(self.settings.cluster, metadata=False)
        try:
            batch: list[dict[str, object]] = []
            for row in read_log_rows(session, table, partition, self.settings):
                change = change_from_log_row(table, {k: plain_value(v) for k, v in row.items()})
                batch.append(dict(zip(names, change_to_row(table, change), strict=True)))
                if len(batch) >= self.settings.batch_rows:
                    yield pa.RecordBatch.from_pylist(batch, schema=schema)
                    batch = []
            if batch:
                yield pa.RecordBatch.from_pylist(batch, schema=schema)
        finally:
            cluster.shutdown()


def _log_query(session: Session, table: Table, columns: str) -> Any:
    log = f'"{table.keyspace}"."{table.cdc_log_name}"'
    statement = session.prepare(
        f'SELECT {columns} FROM {log} WHERE "cdc$stream_id" = ? '
        'AND "cdc$time" > maxTimeuuid(?) AND "cdc$time" <= maxTimeuuid(?)'
    )
    return statement


def read_log_rows(
    session: Session, table: Table, partition: CdcPartition, settings: CdcSettings
) -> Iterator[dict[str, Any]]:
    """The partition's log rows, per stream in (time, batch_seq_no) order, window by window."""
    statement = _log_query(session, table, "*")
    statement.fetch_size = settings.cluster.page_size
    for stream in partition.streams:
        for after, until in partition.spans:
            for low, high in query_windows(after, until, settings.window_ms):
                window = (stream, _ms_datetime(low), _ms_datetime(high))
                yield from session.execute(statement, window)


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
            return plan_partitions(session, generation_spans(start, end, known))


class RingflowCdcStreamReader(_LogReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches between per-generation watermarks (:mod:`._cdc_offsets`).

    ``max_window_ms`` throttles every trigger; with ``Trigger.AvailableNow`` the clock is
    frozen when the query starts, so the query reads everything safe at that instant, in as
    many throttled batches as it takes, then stops."""

    def __init__(self, settings: CdcSettings) -> None:
        self._load(settings)
        self._cluster: tuple[Cluster, Session] | None = None
        self._frozen_now_ms: int | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        self._frozen_now_ms = now_ms()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cluster"] = None  # a live driver connection stays on the driver
        return state

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

    def _row_counter(self, end: CdcOffset) -> Any:
        session = self._session()
        table = table_from_json(self.table_json)
        statement = _log_query(session, table, '"cdc$time"')
        statement.fetch_size = self.settings.cluster.page_size
        groups = vnode_stream_groups(session, end.generation_ms)

        def count(after_ms: int, until_ms: int) -> int:
            window = (_ms_datetime(after_ms), _ms_datetime(until_ms))
            return sum(
                sum(1 for _ in session.execute(statement, (stream, *window)))
                for group in groups
                for stream in group
            )

        return count

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = CdcOffset.from_dict(start), CdcOffset.from_dict(end)
        if finish.watermark_ms <= begin.watermark_ms:
            return []
        session = self._session()
        spans = generation_spans(begin, finish, generations(session))
        return plan_partitions(session, spans)

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
