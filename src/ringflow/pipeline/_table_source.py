"""``spark.read.format("ringflow")``: a table of a ringflow cluster as a Spark DataFrame.

The Spark Cassandra Connector's design in a Python Data Source (pipelines-spark.md §5, §11.1):

- Schema: the table's columns from the cluster's schema metadata, in CQL order (partition key,
  clustering key, static, regular), typed by :func:`ringflow.pipeline.spark_type`.
- Partitions: the token ring cut into ranges ``(lo, hi]`` (each vnode range split evenly so
  there are at least ``splits`` of them, default ``1 + 2 x cores``), adjacent ranges with the
  same replica set grouped into at least ``partitions`` Spark partitions (default ``splits``;
  fewer partitions than ranges keeps each range query small without a connection per range),
  partitions interleaved round-robin across replica sets so that concurrent tasks hit
  different replicas (Python partitions cannot carry locality hints, §8.2).
- Reads: ``SELECT cols FROM ks.t WHERE token(pk) > ? AND token(pk) <= ?`` per range, paged by
  the driver (``page_size``), yielded as Arrow batches of at most ``batch_rows`` rows with the
  declared schema exactly.
- Write times: option ``write_times=true`` adds a ``_wt_<column>`` bigint column per atomic
  static or regular column (``WRITETIME``; a non-frozen collection has one timestamp per
  element, so it gets none), for ``ringflow diff``.
- Pushdown: equality on every partition key column (``pushFilters``, Spark >= 4.1) becomes one
  ``WHERE pk = ?`` read; options ``token_after`` / ``token_until`` restrict the ring to
  ``(token_after, token_until]``, and ``token_ranges`` (``after:until,after:until,...``, at most
  ``MAX_TOKEN_RANGES``) further to the union of those ranges (``ringflow diff``'s row pass).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import types as st
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    InputPartition,
)

from ringflow.pipeline._changes import table_from_json, table_to_json
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
from ringflow.pipeline._spark_types import arrow_type, from_spark_value, spark_type, to_spark_value
from ringflow.schema import Column, CqlType, NativeType, Table

BIGINT = NativeType("bigint")

TABLE_FORMAT = "ringflow"
TOKEN_MIN = -(2**63)
TOKEN_MAX = 2**63 - 1
DEFAULT_BATCH_ROWS = 4096
MAX_SPLITS = 100_000
WRITE_TIME_PREFIX = "_wt_"
MAX_TOKEN_RANGES = 100_000


@dataclass(frozen=True, slots=True)
class TokenRange:
    """The tokens ``(after, until]`` and the replicas that own them."""

    after: int
    until: int
    replicas: tuple[str, ...]


def ring_ranges(ring: Sequence[int], replicas: Sequence[tuple[str, ...]]) -> list[TokenRange]:
    """The ranges ``(previous token, token]`` of a sorted ring; ``replicas[i]`` owns the range
    ending at ``ring[i]``. The wrap-around range becomes ``(last, MAX]`` and ``(MIN, first]``
    (murmur3 never yields MIN)."""
    if not ring or len(ring) != len(replicas):
        raise PipelineConfigError(f"bad token ring: {len(ring)} tokens, {len(replicas)} owners")
    ranges = [TokenRange(TOKEN_MIN, ring[0], replicas[0])]
    ranges += [TokenRange(ring[i - 1], ring[i], replicas[i]) for i in range(1, len(ring))]
    if ring[-1] < TOKEN_MAX:
        ranges.append(TokenRange(ring[-1], TOKEN_MAX, replicas[0]))
    return [r for r in ranges if r.until > r.after]


def split_ranges(ranges: Sequence[TokenRange], splits: int) -> list[TokenRange]:
    """Each range cut evenly so that there are at least ``splits`` ranges in all."""
    total = sum(r.until - r.after for r in ranges)
    result: list[TokenRange] = []
    for token_range in ranges:
        width = token_range.until - token_range.after
        pieces = max(1, min(width, -(-splits * width // max(total, 1))))
        bounds = [token_range.after + width * i // pieces for i in range(pieces + 1)]
        result += [
            TokenRange(bounds[i], bounds[i + 1], token_range.replicas) for i in range(pieces)
        ]
    return result


def clip_ranges(ranges: Sequence[TokenRange], after: int, until: int) -> list[TokenRange]:
    """The parts of ``ranges`` inside ``(after, until]``."""
    clipped = [TokenRange(max(r.after, after), min(r.until, until), r.replicas) for r in ranges]
    return [r for r in clipped if r.until > r.after]


def group_ranges(ranges: Sequence[TokenRange], partitions: int) -> list[list[TokenRange]]:
    """At least ``partitions`` groups of ranges (if there are that many ranges), each of one
    replica set and adjacent on the ring, ordered round-robin across replica sets (the Spark
    Cassandra Connector's interleaving)."""
    per_group = max(1, len(ranges) // max(partitions, 1))  # at least `partitions` groups
    by_replicas: dict[tuple[str, ...], list[list[TokenRange]]] = {}
    current: list[TokenRange] = []
    for token_range in ranges:
        if current and (
            current[-1].replicas != token_range.replicas
            or current[-1].until != token_range.after
            or len(current) >= per_group
        ):
            by_replicas.setdefault(current[0].replicas, []).append(current)
            current = []
        current.append(token_range)
    if current:
        by_replicas.setdefault(current[0].replicas, []).append(current)
    queues = list(by_replicas.values())
    interleaved: list[list[TokenRange]] = []
    for index in range(max((len(q) for q in queues), default=0)):
        interleaved += [q[index] for q in queues if index < len(q)]
    return interleaved


class TablePartition(InputPartition):
    """One Spark partition: token ranges of one replica set, or one partition key."""

    def __init__(self, ranges: list[tuple[int, int]], key: tuple[object, ...] | None) -> None:
        super().__init__((ranges, key))
        self.ranges = ranges
        self.key = key


class RingflowTableDataSource(DataSource):
    """``ringflow``: reads one table of a ringflow cluster (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return TABLE_FORMAT

    def schema(self) -> st.StructType:
        settings = cluster_options(self.options)
        write_times = _read_options(dict(self.options))[4]  # every option checked before a job
        with open_session(settings) as (cluster, _):
            table = load_table(cluster, settings.keyspace, settings.table)
        return table_spark_schema(table, write_times=write_times)

    def reader(self, schema: st.StructType) -> RingflowTableReader:
        options = dict(self.options)
        if _read_options(options)[5]:
            return RingflowPushdownTableReader(options, schema)
        return RingflowTableReader(options, schema)


def _read_options(options: dict[str, str]) -> tuple[int, int, int, int, bool, bool]:
    """``splits``, ``batch_rows``, ``token_after``, ``token_until``, ``write_times``,
    ``filter_pushdown``."""
    cores = os.cpu_count() or 1
    token_spans(options)
    option_int(options, "partitions", 1)
    return (
        min(option_int(options, "splits", 1 + 2 * cores), MAX_SPLITS),
        option_int(options, "batch_rows", DEFAULT_BATCH_ROWS),
        _token_option(options, "token_after", TOKEN_MIN),
        _token_option(options, "token_until", TOKEN_MAX),
        _flag_option(options, "write_times"),
        _flag_option(options, "filter_pushdown"),
    )


def token_spans(options: Mapping[str, str]) -> list[tuple[int, int]] | None:
    """The ``token_ranges`` option: sorted, disjoint ``(after, until]`` spans, or None."""
    text = options.get("token_ranges")
    if text is None:
        return None
    spans: list[tuple[int, int]] = []
    for item in str(text).split(","):
        after, sep, until = item.partition(":")
        bounds = (_token_option({"t": after}, "t", 0), _token_option({"t": until}, "t", 0))
        if not sep or bounds[0] >= bounds[1]:
            raise PipelineConfigError(f"option 'token_ranges': {item!r} is not after:until")
        spans.append(bounds)
    spans.sort()
    if len(spans) > MAX_TOKEN_RANGES or any(a[1] > b[0] for a, b in itertools.pairwise(spans)):
        raise PipelineConfigError(
            f"option 'token_ranges' must hold at most {MAX_TOKEN_RANGES} disjoint ranges"
        )
    return spans


def _flag_option(options: dict[str, str], name: str) -> bool:
    flag = str(options.get(name, "false")).lower()
    if flag not in ("true", "false"):
        raise PipelineConfigError(f"option {name!r} must be true or false: {flag!r}")
    return flag == "true"


def write_time_columns(table: Table) -> list[Column]:
    """The columns ``WRITETIME`` takes: atomic static and regular ones (ringflow has no
    counters)."""
    return [c for c in table.static_columns + table.regular_columns if not c.type.is_multicell]


def table_spark_schema(table: Table, *, write_times: bool = False) -> st.StructType:
    """The Spark schema of the rows of ``table``: its columns in CQL order (then, with
    ``write_times``, a ``_wt_<column>`` bigint per :func:`write_time_columns`)."""
    ordered = table.primary_key_columns + table.static_columns + table.regular_columns
    fields = [st.StructField(c.name, spark_type(c.type)) for c in ordered]
    if write_times:
        fields += [
            st.StructField(WRITE_TIME_PREFIX + c.name, st.LongType())
            for c in write_time_columns(table)
        ]
    return st.StructType(fields)


class RingflowTableReader(DataSourceReader):
    """Plans token-range partitions on the driver and reads them on executors."""

    def __init__(self, options: dict[str, str], schema: st.StructType) -> None:
        self.settings: ClusterOptions = cluster_options(options)
        self.splits, self.batch_rows, self.token_after, self.token_until, _, _ = _read_options(
            options
        )
        self.spans = token_spans(options)
        self.read_partitions = min(option_int(options, "partitions", self.splits), MAX_SPLITS)
        cluster, _ = connect(self.settings)
        try:
            table = load_table(cluster, self.settings.keyspace, self.settings.table)
            ring = cluster.metadata.token_map
            tokens = [int(t.value) for t in ring.ring]
            owners = [
                tuple(sorted(str(h.address) for h in ring.get_replicas(table.keyspace, t)))
                for t in ring.ring
            ]
        finally:
            cluster.shutdown()
        self.table_json = table_to_json(table)
        self.columns = [f.name for f in schema.fields]
        self.ranges = ring_ranges(tokens, owners)
        self.key: tuple[object, ...] | None = None

    def partitions(self) -> Sequence[InputPartition]:
        if self.key is not None:
            return [TablePartition([], self.key)]
        ranges = clip_ranges(self.ranges, self.token_after, self.token_until)
        if self.spans is not None:
            ranges = [piece for a, u in self.spans for piece in clip_ranges(ranges, a, u)]
        groups = group_ranges(split_ranges(ranges, self.splits), self.read_partitions)
        return [TablePartition([(r.after, r.until) for r in g], None) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, TablePartition)
        table = table_from_json(self.table_json)
        types = [_column_type(table, name) for name in self.columns]
        schema = pa.schema(
            [pa.field(n, arrow_type(t)) for n, t in zip(self.columns, types, strict=True)]
        )
        cluster, session = connect(self.settings, metadata=False)
        try:
            buffer: list[list[object]] = [[] for _ in self.columns]
            for row in _scan(session, table, self.columns, partition, self.settings.page_size):
                for values, name, cql_type in zip(buffer, self.columns, types, strict=True):
                    values.append(to_spark_value(cql_type, plain_value(row[name])))
                if len(buffer[0]) >= self.batch_rows:
                    yield pa.RecordBatch.from_arrays(buffer, schema=schema)
                    buffer = [[] for _ in self.columns]
            if buffer[0]:
                yield pa.RecordBatch.from_arrays(buffer, schema=schema)
        finally:
            cluster.shutdown()


class RingflowPushdownTableReader(RingflowTableReader):
    """The reader with partition-key equality pushdown (``pushFilters``, Spark >= 4.1). Spark
    refuses a reader that implements it unless ``spark.sql.python.filterPushdown.enabled`` is
    true, hence a separate class chosen by the ``filter_pushdown`` option."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        table = table_from_json(self.table_json)
        pushed: dict[str, EqualTo] = {}
        for candidate in filters:
            if isinstance(candidate, EqualTo) and len(candidate.attribute) == 1:
                name = candidate.attribute[0]
                if any(c.name == name for c in table.partition_key_columns):
                    pushed.setdefault(name, candidate)
        if len(pushed) != len(table.partition_key_columns):
            return filters
        self.key = tuple(
            from_spark_value(c.type, pushed[c.name].value) for c in table.partition_key_columns
        )
        kept = {id(f) for f in pushed.values()}
        return [f for f in filters if id(f) not in kept]


def _column_type(table: Table, name: str) -> CqlType:
    if name.startswith(WRITE_TIME_PREFIX) and not any(c.name == name for c in table.columns):
        return BIGINT
    return table.column(name).type


def _selector(table: Table, name: str) -> str:
    if name.startswith(WRITE_TIME_PREFIX) and not any(c.name == name for c in table.columns):
        column = name[len(WRITE_TIME_PREFIX) :]
        return f"WRITETIME({_quote(column)}) AS {_quote(name)}"
    return _quote(name)


def _scan(
    session: Any, table: Table, columns: list[str], partition: TablePartition, page_size: int
) -> Iterator[dict[str, Any]]:
    selected = ", ".join(_selector(table, c) for c in columns)
    source = f"{_quote(table.keyspace)}.{_quote(table.name)}"
    key_names = [_quote(c.name) for c in table.partition_key_columns]
    if partition.key is not None:
        where = " AND ".join(f"{name} = ?" for name in key_names)
        statement = session.prepare(f"SELECT {selected} FROM {source} WHERE {where}")
        statement.fetch_size = page_size
        yield from session.execute(statement, partition.key)
        return
    token = f"token({', '.join(key_names)})"
    statement = session.prepare(
        f"SELECT {selected} FROM {source} WHERE {token} > ? AND {token} <= ?"
    )
    statement.fetch_size = page_size
    for after, until in partition.ranges:
        yield from session.execute(statement, (after, until))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _token_option(options: dict[str, str], name: str, default: int) -> int:
    text = options.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise PipelineConfigError(
            f"option {name!r} must be a token (int64), got {text!r}"
        ) from None
    if not TOKEN_MIN <= value <= TOKEN_MAX:
        raise PipelineConfigError(f"option {name!r} must be an int64 token, got {value}")
    return value


def table_options(**options: object) -> dict[str, str]:
    """Reader options as the strings Spark wants (``contact_points`` may be a list)."""
    result = {}
    for name, value in options.items():
        if isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        result[name] = str(value)
    return result


def read_table(spark: Any, options: dict[str, str]) -> Any:
    """``spark.read.format("ringflow")`` after checking the options and the table in this
    process, so a bad option raises :class:`PipelineConfigError` itself (Spark runs
    ``schema()`` in a planner process and would only relay its message). Enables filter
    pushdown (session conf and option) unless ``filter_pushdown`` says otherwise."""
    options = {"filter_pushdown": "true", **options}
    RingflowTableDataSource(CaseInsensitiveDict(options)).schema()
    if options["filter_pushdown"].lower() == "true":
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(RingflowTableDataSource)
    return spark.read.format(TABLE_FORMAT).options(**options).load()
