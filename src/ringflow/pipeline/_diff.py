"""``ringflow diff``: a Spark job comparing one table between a cluster and another cluster, a
Parquet lake's live state or a PostgreSQL sink's ``_live`` view (issue 17 part 2).

The shape of apache/cassandra-diff: the ring (the source's token map) is cut into ``splits``
contiguous token ranges; both sides are read as Spark DataFrames and each row becomes a row
image (:mod:`._diff_core`) tagged with its range. Then:

1. Hash pass: per range, the row count and the sum of the rows' 128-bit digests, summed by Spark
   as four 32-bit limbs (a plain ``groupBy().agg(sum)``, one row a range to the driver).
2. Row pass, for the ranges whose summaries differ only: both sides again, restricted to those
   ranges (a cluster is read again over them only, the table source's ``token_ranges``), a
   full outer join on the key, the differing
   rows classified on executors; the driver gets counts per range and kind and at most
   ``examples`` keys a kind (a window, sorted by key). No side is ever collected.

Sides (the URL forms of ``ringflow replicate --to``): ``HOSTS`` or ``ringflow://HOSTS[/ks.t]``
(a cluster, ``host[,host...][:port]``, read with the ``ringflow`` table source with
``WRITETIME`` columns at ``consistency``); ``lake:DIR`` / ``parquet:DIR`` (the lake's committed
changes grouped by range and materialized on executors at one pinned ``now``); and
``postgresql://...`` (the ``<keyspace>_<table>_live`` view at the same ``now``, streamed by one
task through a server-side cursor). Everything is checked on the driver before Spark reads a
row: a missing table, lake or view, an unreachable side or a malformed URL raise
:class:`PipelineConfigError`; the diff writes nothing anywhere.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa  # type: ignore[import-untyped]

from ringflow.pipeline._changes import change_from_row, table_from_json, table_to_json
from ringflow.pipeline._cluster_client import (
    DriverTls,
    cluster_options,
    credentials,
    load_table,
    open_session,
    parse_hosts,
)
from ringflow.pipeline._destinations import hub_tls
from ringflow.pipeline._diff_core import (
    MAX_EXAMPLES,
    Difference,
    DiffReport,
    Kind,
    RangeDiff,
    RangeSummary,
    RowImage,
    classify,
    differing_ranges,
    digest_limbs,
    join_limb_sums,
    range_index,
    row_image,
)
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.pipeline._materialize import canonical_value, materialize
from ringflow.pipeline._postgres import connect as postgres_connect
from ringflow.pipeline._postgres import iter_postgres_live, redact
from ringflow.pipeline._spark_types import from_spark_value
from ringflow.pipeline._table_source import (
    TOKEN_MAX,
    TOKEN_MIN,
    WRITE_TIME_PREFIX,
    read_table,
    ring_ranges,
    split_ranges,
    table_options,
    write_time_columns,
)
from ringflow.schema import NativeType, Table, partition_token, serialize

DEFAULT_SPLITS = 256
# Spark partitions a cluster side is read in: each reads its ranges one query a range through
# one connection (a partition a range would open 256 connections for nothing)
DEFAULT_READ_PARTITIONS = 1 + 2 * (os.cpu_count() or 1)
MAX_SPLITS = 100_000
DEFAULT_EXAMPLES = 10
IMAGE_BATCH_ROWS = 4096
IMAGE_SCHEMA = (
    "_range int, key string, values string, write_times string, d0 long, d1 long, d2 long, d3 long"
)
_PLAIN_NATIVE = frozenset({"int", "bigint", "smallint", "tinyint", "text", "ascii", "boolean"})
DIFFERENCE_SCHEMA = "_range int, kind string, key string, source string, target string"


@dataclass(frozen=True, slots=True)
class DiffSide:
    """One side: ``kind`` ``cluster`` (hosts, port, keyspace.table), ``lake`` (directory,
    keyspace.table) or ``postgres`` (URL, target table)."""

    kind: str
    display: str
    address: str
    table: str
    port: int = 9042
    tls: DriverTls | None = None
    """A cluster side's TLS (``--ssl-ca``, or ``?ssl=true&ca=FILE`` on a ``ringflow://`` URL)."""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    """A cluster side's login (resolved on the driver, ``credentials``); never in a repr."""


@dataclass(frozen=True, slots=True)
class DiffPlan:
    """Both sides checked, the source table, the token ranges, the read settings."""

    source: DiffSide
    target: DiffSide
    table: Table
    ranges: tuple[tuple[int, int], ...]  # (after, until], contiguous over the ring
    consistency: str
    now_s: int
    read_partitions: int = DEFAULT_READ_PARTITIONS

    @property
    def untils(self) -> list[int]:
        return [until for _, until in self.ranges]


def parse_side(text: str, table_name: str, what: str, tls: DriverTls | None = None) -> DiffSide:
    """A ``--source`` / ``--target`` (module docstring) for ``table_name`` (keyspace.table);
    ``tls``: a cluster side's TLS (a ``ringflow://`` URL may give its own, ``hub_tls``)."""
    text = text.strip()
    scheme = text.split(":", 1)[0].lower() if "://" in text or ":" in text else ""
    if scheme in ("lake", "parquet"):
        raw = text.split(":", 1)[1]
        raw = raw[2:] if raw.startswith("//") else raw
        if not raw:
            raise PipelineConfigError(f"{what} {text!r}: the lake directory is missing (lake:DIR)")
        path = str(Path(raw).expanduser().absolute())
        return DiffSide("lake", f"lake:{path}", path, table_name)
    if scheme in ("postgresql", "postgres"):
        keyspace, name = _split_table(table_name)
        return DiffSide("postgres", redact(text), text, f"{keyspace}_{name}")
    if scheme == "ringflow":
        parts = urlsplit(text)
        hosts, port = parse_hosts(parts.netloc, what)
        target = parts.path.strip("/") or table_name
        return DiffSide("cluster", text, ",".join(hosts), target, port, hub_tls(text, tls))
    if "://" in text:
        raise PipelineConfigError(
            f"{what} {redact(text)!r}: expected host[,host...][:port], ringflow://host[:port], "
            "lake:DIR (parquet:DIR) or postgresql://user@host:port/db"
        )
    hosts, port = parse_hosts(text, what)
    return DiffSide("cluster", text, ",".join(hosts), table_name, port, tls)


def _split_table(text: str) -> tuple[str, str]:
    keyspace, sep, name = text.strip().partition(".")
    if not sep or not keyspace or not name or "." in name:
        raise PipelineConfigError(f"table {text!r} is not keyspace.table")
    return keyspace, name


def _cluster_settings(side: DiffSide, consistency: str, **extra: str) -> dict[str, str]:
    keyspace, name = _split_table(side.table)
    options = table_options(
        contact_points=side.address,
        port=side.port,
        keyspace=keyspace,
        table=name,
        consistency=consistency,
        **({} if side.tls is None else side.tls.as_options()),
        **extra,
    )
    if side.username is not None and side.password is not None:
        options.update(username=side.username, password=side.password)
    return options


def _with_login(side: DiffSide, login: Mapping[str, str] | None, what: str) -> DiffSide:
    """``side`` logging in with ``login`` (``username`` and ``password`` or
    ``password_file``, else ``RINGFLOW_PASSWORD``), resolved here on the driver."""
    if not login or side.kind != "cluster":
        return side
    username, password = credentials(login, what)
    return replace(side, username=username, password=password)


def _cluster_table(side: DiffSide, consistency: str) -> tuple[Table, list[int], list[Any]]:
    """The table at a cluster side, with the ring's tokens and their replica sets."""
    settings = cluster_options(_cluster_settings(side, consistency))
    with open_session(settings) as (cluster, _):
        table = load_table(cluster, settings.keyspace, settings.table)
        ring = cluster.metadata.token_map
        tokens = [int(t.value) for t in ring.ring]
        owners = [
            tuple(sorted(str(h.address) for h in ring.get_replicas(table.keyspace, t)))
            for t in ring.ring
        ]
    return table, tokens, owners


def check_compatible(source: Table, target: Table, where: str) -> None:
    """The target must have the source's primary key and every compared column, same types."""
    wanted = [(c.name, c.type) for c in source.primary_key_columns]
    found = [(c.name, c.type) for c in target.primary_key_columns]
    if wanted != found:
        shown = [n for n, _ in found], [n for n, _ in wanted]
        raise PipelineConfigError(f"{where}: primary key {shown[0]} is not the source's {shown[1]}")
    names = {c.name: c.type for c in target.columns}
    for column in source.static_columns + source.regular_columns:
        if names.get(column.name) != column.type:
            has = names.get(column.name)
            raise PipelineConfigError(
                f"{where}: column {column.name!r} is {has.cql_name() if has else 'missing'}, "
                f"the source's is {column.type.cql_name()}"
            )


def _check_target(side: DiffSide, table: Table, consistency: str) -> None:
    if side.kind == "cluster":
        target, _, _ = _cluster_table(side, consistency)
        check_compatible(table, target, f"target {side.table} at {side.display}")
    elif side.kind == "lake":
        from ringflow.pipeline._lake import lake_table

        if not os.path.isdir(side.address):
            raise PipelineConfigError(f"lake directory {side.address} does not exist")
        check_compatible(table, lake_table(side.address, side.table), f"lake {side.address}")
    else:
        from ringflow.pipeline._pg_sql import Target

        view = Target(side.table, table).name("_live")
        with postgres_connect(side.address) as connection:
            try:
                connection.execute(f"SELECT * FROM {view} LIMIT 0")
            except Exception as error:
                raise PipelineConfigError(
                    f"PostgreSQL {side.display}: cannot read {view}: {' '.join(str(error).split())}"
                ) from None


def plan_diff(
    source: str,
    target: str,
    table: str,
    *,
    target_table: str | None = None,
    consistency: str = "ALL",
    splits: int = DEFAULT_SPLITS,
    now_s: int | None = None,
    tls: DriverTls | None = None,
    source_login: Mapping[str, str] | None = None,
    target_login: Mapping[str, str] | None = None,
) -> DiffPlan:
    """Check both sides (module docstring) and cut the source's ring into ``splits`` ranges."""
    if not 1 <= splits <= MAX_SPLITS:
        raise PipelineConfigError(f"splits must be in [1, {MAX_SPLITS}], got {splits}")
    _split_table(table)
    source_side = _with_login(parse_side(source, table, "source", tls), source_login, "source")
    if source_side.kind != "cluster":
        raise PipelineConfigError(
            f"the source must be a cluster (host[,host...][:port]): {source!r}"
        )
    target_side = parse_side(target, target_table or table, "target", tls)
    if target_table is not None and target_side.kind == "cluster":
        target_side = DiffSide(
            "cluster", target, target_side.address, target_table, target_side.port, target_side.tls
        )
    target_side = _with_login(target_side, target_login, "target")
    source_table, tokens, owners = _cluster_table(source_side, consistency)
    _check_target(target_side, source_table, consistency)
    ranges = split_ranges(ring_ranges(tokens, owners), splits)
    bounds = tuple((r.after, r.until) for r in ranges)
    if bounds[-1][1] != TOKEN_MAX or bounds[0][0] != TOKEN_MIN:
        raise PipelineConfigError(f"the token ring of {source} does not cover every token")
    return DiffPlan(
        source_side,
        target_side,
        source_table,
        bounds,
        consistency.upper(),
        int(time.time()) if now_s is None else now_s,
    )


# --- executors: sides to row images -----------------------------------------------------------


def _key_token(table: Table, key: Sequence[object]) -> int:
    components = [
        serialize(c.type, v) for c, v in zip(table.partition_key_columns, key, strict=False)
    ]
    return partition_token(table.name, components)


def _image_row(range_at: int, image: RowImage) -> dict[str, object]:
    d0, d1, d2, d3 = digest_limbs(image.digest())
    return {
        "_range": range_at,
        "key": image.key,
        "values": image.values,
        "write_times": image.write_times,
        "d0": d0,
        "d1": d1,
        "d2": d2,
        "d3": d3,
    }


def _image_batches(rows: Iterator[dict[str, object]]) -> Iterator[Any]:
    buffer: list[dict[str, object]] = []
    for row in rows:
        buffer.append(row)
        if len(buffer) >= IMAGE_BATCH_ROWS:
            yield pa.RecordBatch.from_pylist(buffer, schema=_image_arrow_schema())
            buffer = []
    if buffer:
        yield pa.RecordBatch.from_pylist(buffer, schema=_image_arrow_schema())


def _image_arrow_schema() -> Any:
    texts = ["key", "values", "write_times"]
    return pa.schema(
        [pa.field("_range", pa.int32())]
        + [pa.field(n, pa.string()) for n in texts]
        + [pa.field(f"d{i}", pa.int64()) for i in range(4)]
    )


class _ClusterImages:
    """mapInArrow over table-source rows (with ``_wt_`` columns): row images of the wanted
    ranges (picklable: the table as JSON, the range ends, the ranges kept)."""

    def __init__(self, table_json: str, untils: list[int], keep: frozenset[int] | None) -> None:
        self.table_json, self.untils, self.keep = table_json, untils, keep

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        table = table_from_json(self.table_json)
        keys = table.primary_key_columns
        others = table.static_columns + table.regular_columns
        timed = [c.name for c in write_time_columns(table)]

        def rows() -> Iterator[dict[str, object]]:
            for batch in batches:
                for row in batch.to_pylist():
                    key = [_codec(c.type, row[c.name]) for c in keys]
                    at = range_index(self.untils, _key_token(table, key))
                    if self.keep is not None and at not in self.keep:
                        continue
                    values = {c.name: _codec(c.type, row[c.name]) for c in others}
                    times = {n: row[WRITE_TIME_PREFIX + n] for n in timed}
                    live = {n: t for n, t in times.items() if t is not None}
                    yield _image_row(at, row_image(key, values, live))

        yield from _image_batches(rows())


def _codec(cql_type: Any, value: object) -> object:
    """The codec form of a table-source value, as the lake and PostgreSQL sides give it."""
    if value is None:
        return None
    if isinstance(cql_type, NativeType) and cql_type.name in _PLAIN_NATIVE:
        return value  # already its codec form: skip the serialize/deserialize round trip
    return canonical_value(cql_type, from_spark_value(cql_type, value))


class _ChangeRanges:
    """mapInArrow over lake change rows: each with the range of its partition key."""

    def __init__(self, table_json: str, untils: list[int], keep: frozenset[int] | None) -> None:
        self.table_json, self.untils, self.keep = table_json, untils, keep

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        table = table_from_json(self.table_json)
        for batch in batches:
            names = [c.name for c in table.partition_key_columns]
            columns = [batch.column(batch.schema.get_field_index(n)).to_pylist() for n in names]
            ranges = []
            for values in zip(*columns, strict=True):
                key = [
                    from_spark_value(c.type, v)
                    for c, v in zip(table.partition_key_columns, values, strict=True)
                ]
                ranges.append(range_index(self.untils, _key_token(table, key)))
            tagged = pa.RecordBatch.from_arrays(
                [*batch.columns, pa.array(ranges, pa.int32())],
                names=[*batch.schema.names, "_range"],
            )
            if self.keep is not None:
                mask = pa.array([r in self.keep for r in ranges])
                tagged = tagged.filter(mask)
            yield tagged


class _LakeImages:
    """applyInArrow per range: the range's changes materialized at ``now_s``, as row images
    of the source table's columns."""

    def __init__(self, lake_json: str, source_json: str, now_s: int) -> None:
        self.lake_json, self.source_json, self.now_s = lake_json, source_json, now_s

    def __call__(self, changes: Any) -> Any:
        lake, source = table_from_json(self.lake_json), table_from_json(self.source_json)
        ranges = changes.column("_range").to_pylist()
        plain = changes.drop_columns(["_range"]).to_pylist()
        live = materialize(lake, (change_from_row(lake, row) for row in plain), self.now_s)
        at = ranges[0] if ranges else 0
        rows = [_image_row(at, _live_image(source, row)) for row in live.values()]
        return pa.Table.from_pylist(rows, schema=_image_arrow_schema())


def _live_image(source: Table, row: Any) -> RowImage:
    """A materialized / PostgreSQL live row seen with the source's columns (collections
    without write times, as the cluster side)."""
    compared = {c.name for c in source.static_columns + source.regular_columns}
    timed = {c.name for c in write_time_columns(source)}
    values = {n: v for n, v in row.values.items() if n in compared}
    times = {n: t for n, t in row.write_times_us.items() if n in timed}
    return row_image(row.key, values, times)


class _PostgresImages:
    """mapInArrow over one dummy row: the ``_live`` view streamed, as row images."""

    def __init__(
        self,
        url: str,
        target: str,
        source_json: str,
        untils: list[int],
        keep: frozenset[int] | None,
        now_s: int,
    ) -> None:
        self.url, self.target, self.source_json = url, target, source_json
        self.untils, self.keep, self.now_s = untils, keep, now_s

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for _ in batches:  # the dummy input: one task reads the view once
            pass
        table = table_from_json(self.source_json)

        def rows() -> Iterator[dict[str, object]]:
            for live in iter_postgres_live(self.url, self.target, table, self.now_s):
                at = range_index(self.untils, _key_token(table, live.key))
                if self.keep is None or at in self.keep:
                    yield _image_row(at, _live_image(table, live))

        yield from _image_batches(rows())


# --- the driver: the two passes ---------------------------------------------------------------


def _spans(ranges: Sequence[tuple[int, int]], keep: Sequence[int]) -> str:
    """The table source's ``token_ranges`` option: the kept ranges, adjacent ones merged."""
    return ",".join(f"{after}:{until}" for after, until in _runs(ranges, keep))


def _runs(ranges: Sequence[tuple[int, int]], keep: Sequence[int]) -> list[tuple[int, int]]:
    """The kept ranges merged into maximal runs of adjacent ones, as ``(after, until]``."""
    runs: list[tuple[int, int]] = []
    previous = None
    for at in sorted(keep):
        if previous is not None and at == previous + 1:
            runs[-1] = (runs[-1][0], ranges[at][1])
        else:
            runs.append(ranges[at])
        previous = at
    return runs


def side_images(spark: Any, plan: DiffPlan, side: DiffSide, keep: Sequence[int] | None) -> Any:
    """A DataFrame of ``IMAGE_SCHEMA``: the row images of ``side`` (only the ranges ``keep``)."""
    kept = None if keep is None else frozenset(keep)
    source_json = table_to_json(plan.table)
    if side.kind == "cluster":
        spans = {} if keep is None else {"token_ranges": _spans(plan.ranges, keep)}
        options = _cluster_settings(
            side,
            plan.consistency,
            write_times="true",
            splits=str(len(plan.ranges)),
            partitions=str(plan.read_partitions),
            **spans,
        )
        frame = read_table(spark, options)
        timed = [WRITE_TIME_PREFIX + c.name for c in write_time_columns(plan.table)]
        frame = frame.select(*[c.name for c in plan.table.columns], *timed)
        return frame.mapInArrow(_ClusterImages(source_json, plan.untils, kept), IMAGE_SCHEMA)
    if side.kind == "lake":
        from pyspark.sql import types as st

        from ringflow.pipeline._lake import lake_table, read_lake

        lake = lake_table(side.address, side.table)
        changes = read_lake(spark, side.address, side.table)
        tagged = changes.mapInArrow(
            _ChangeRanges(table_to_json(lake), plan.untils, kept),
            st.StructType([*changes.schema.fields, st.StructField("_range", st.IntegerType())]),
        )
        per_range = _LakeImages(table_to_json(lake), source_json, plan.now_s)

        def lake_images(changes: pa.Table) -> pa.Table:  # typed: PySpark infers the UDF kind
            return per_range(changes)

        return tagged.groupBy("_range").applyInArrow(lake_images, IMAGE_SCHEMA)
    reader = _PostgresImages(side.address, side.table, source_json, plan.untils, kept, plan.now_s)
    return spark.range(1, numPartitions=1).mapInArrow(reader, IMAGE_SCHEMA)


def range_summaries(images: Any) -> dict[int, RangeSummary]:
    """The hash pass: one row a range reaches the driver."""
    from pyspark.sql import functions as sf

    limbs = [sf.sum(f"d{i}").alias(f"d{i}") for i in range(4)]
    rows = images.groupBy("_range").agg(sf.count(sf.lit(1)).alias("rows"), *limbs).collect()
    return {
        int(r["_range"]): RangeSummary(
            int(r["rows"]), join_limb_sums([int(r[f"d{i}"]) for i in range(4)])
        )
        for r in rows
    }


def _classified(batches: Iterator[Any]) -> Iterator[Any]:
    """mapInArrow over joined rows: the differences of the rows that differ."""
    for batch in batches:
        out: list[dict[str, object]] = []
        for row in batch.to_pylist():
            sides = [
                None
                if row[f"{p}_values"] is None
                else RowImage(row["key"], row[f"{p}_values"], row[f"{p}_write_times"])
                for p in ("s", "t")
            ]
            difference = classify(sides[0], sides[1])
            if difference is not None:
                out.append(
                    {
                        "_range": row["_range"],
                        "kind": difference.kind.value,
                        "key": difference.key,
                        "source": difference.source,
                        "target": difference.target,
                    }
                )
        yield pa.RecordBatch.from_pylist(
            out,
            schema=pa.schema(
                [pa.field("_range", pa.int32())]
                + [pa.field(n, pa.string()) for n in ("kind", "key", "source", "target")]
            ),
        )


def row_differences(spark: Any, plan: DiffPlan, keep: Sequence[int]) -> Any:
    """The row pass over the ranges ``keep``: a DataFrame of ``DIFFERENCE_SCHEMA``."""
    from pyspark.sql import functions as sf

    def renamed(images: Any, prefix: str) -> Any:
        return images.select(
            "_range",
            "key",
            sf.col("values").alias(f"{prefix}_values"),
            sf.col("write_times").alias(f"{prefix}_write_times"),
        )

    source = renamed(side_images(spark, plan, plan.source, keep), "s")
    target = renamed(side_images(spark, plan, plan.target, keep), "t")
    joined = source.join(target, on=["_range", "key"], how="full_outer")
    differs = (
        sf.col("s_values").isNull()
        | sf.col("t_values").isNull()
        | (sf.col("s_values") != sf.col("t_values"))
        | (sf.col("s_write_times") != sf.col("t_write_times"))
    )
    return joined.where(differs).mapInArrow(_classified, DIFFERENCE_SCHEMA)


def check_examples(examples: int) -> None:
    """``examples`` (keys shown per kind) within ``[0, MAX_EXAMPLES]``."""
    if not 0 <= examples <= MAX_EXAMPLES:
        raise PipelineConfigError(f"examples must be in [0, {MAX_EXAMPLES}], got {examples}")


def run_diff(spark: Any, plan: DiffPlan, examples: int = DEFAULT_EXAMPLES) -> DiffReport:
    """Both passes (module docstring); the report."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    check_examples(examples)
    source = range_summaries(side_images(spark, plan, plan.source, None))
    target = range_summaries(side_images(spark, plan, plan.target, None))
    differing = differing_ranges(source, target)
    counts: dict[Kind, int] = {}
    shown: dict[Kind, list[Difference]] = {}
    per_range: dict[int, dict[Kind, int]] = {r: {} for r in differing}
    if differing:
        differences = row_differences(spark, plan, differing).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            for row in differences.groupBy("_range", "kind").count().collect():
                kind = Kind(row["kind"])
                per_range[int(row["_range"])][kind] = int(row["count"])
                counts[kind] = counts.get(kind, 0) + int(row["count"])
            order = Window.partitionBy("kind").orderBy("key")
            first = differences.withColumn("n", sf.row_number().over(order))
            for row in first.where(sf.col("n") <= examples).orderBy("kind", "key").collect():
                difference = Difference(Kind(row["kind"]), row["key"], row["source"], row["target"])
                shown.setdefault(difference.kind, []).append(difference)
        finally:
            differences.unpersist()
    empty = RangeSummary()
    return DiffReport(
        plan.source.display,
        plan.target.display,
        f"{plan.table.keyspace}.{plan.table.name}",
        len(plan.ranges),
        sum(s.rows for s in source.values()),
        sum(s.rows for s in target.values()),
        counts,
        shown,
        tuple(
            RangeDiff(
                plan.ranges[r][0],
                plan.ranges[r][1],
                source.get(r, empty).rows,
                target.get(r, empty).rows,
                per_range[r],
            )
            for r in differing
        ),
    )


def diff_table_summary(report: DiffReport) -> Mapping[str, int]:
    """The counts by kind (every kind present)."""
    return {kind.value: report.counts.get(kind, 0) for kind in Kind}
