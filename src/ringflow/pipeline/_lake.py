"""The Parquet change lake: an append-only store of changes, written exactly once per batch.

``df.write.format("ringflow-lake")`` / ``df.writeStream.format("ringflow-lake")`` with options
``path`` (the lake root), ``schema`` (:func:`~ringflow.pipeline.table_to_json` of the base
table; the DataFrame must have its :func:`~ringflow.pipeline.change_schema`) and optionally
``rows_per_file`` (default 100,000). ``spark.read.format("ringflow-lake")`` with ``path`` and
``table`` (``keyspace.name``; optional when the lake holds one table) reads it back.

Layout under ``<path>/table=<keyspace>.<name>/``::

    _schema.json                          the base table, schema version 1
    _schema.<n>.json                      schema version n (2, 3, ...): the table after an ALTER
    _staging/<stage>/<date>-p<partition>-a<attempt>-<n>-<random>.parquet   task output
    date=<YYYY-MM-DD>/<stage id>-<file>.parquet                             committed files
    _commits/<namespace>/<batch>.json     the commit marker: the files of one batch and their
                                          schema version

Schema versions (issue 15): a writer takes the table it is given (its DataFrame has that
table's change schema); the commit of its first batch records the table as a new version when
no version has its columns (a file written once, never changed). Every Parquet file holds the
change schema of its version. Readers read the **union** of the versions
(:func:`~ringflow.pipeline._evolution.union_table`: the newest columns, then those older
versions had, e.g. a column since dropped at the source, kept with its values): each file is
read with its own schema and widened to the union's (columns it lacks are null). A version
whose column clashes with one the lake holds (same name, another type or kind, or another
primary key) is refused with :class:`~ringflow.pipeline.SchemaConflict` before any batch.

``date`` is the UTC date of each change's write timestamp. A streaming batch's stage is
``<query id>/<batch id>`` and its namespace ``stream-<query id>`` (Spark's query id is kept in
the checkpoint, so a restarted query keeps its namespace while a new checkpoint never collides
with an old one); a batch write's stage and marker name are a fresh ``write-<uuid>``.

Exactly once, argued: Spark logs the source offsets of batch ``N`` before running it and
records ``N`` in ``<checkpoint>/commits`` only after the sink's ``commit`` returned, so after
any crash batch ``N`` is re-run over the same offsets, i.e. the same changes (a replayable,
deterministic source is the source's side of the contract). Executor tasks only write
``_staging``, which no reader looks at. The driver's ``commit(messages, N)`` renames the staged
files into their ``date=`` directories and then writes the marker (temp file, fsync, rename,
fsync of the directory); readers only read files a marker lists, so a batch becomes visible in
one atomic rename. If the marker of ``N`` already exists the batch was committed before the
crash: the replay's staged files are deleted and nothing changes. A crash between the renames
and the marker leaves unlisted (invisible) files that the replay does not reuse (garbage: there
is no vacuum yet). ``abort`` deletes the staged files of the batch; a failing task deletes its
own partial files; a commit, or a skipped replay, deletes its whole stage directory, so files of
killed task attempts do not pile up.

The brief's layout was ``_staging/<batch>/`` and ``_commits/<batch>.json``; batch ids restart at
0 with every new checkpoint and two queries may feed one lake, hence the query id in both.

Every buffer is bounded: a task keeps at most ``_MAX_OPEN_FILES`` Parquet writers open (one per
date) and rolls to a new file after ``rows_per_file`` rows; Arrow batches from Spark are written
as they come.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ringflow.pipeline._changes import (
    TIME_US_FIELD,
    Change,
    change_arrow_schema,
    change_from_row,
    change_schema,
    check_change_schema,
    table_from_json,
    table_to_json,
)
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.pipeline._evolution import same_columns, union_table
from ringflow.schema import Table

LAKE_FORMAT = "ringflow-lake"
DEFAULT_ROWS_PER_FILE = 100_000
_MAX_OPEN_FILES = 16
_SCHEMA_FILE = "_schema.json"
_VERSION_FILE = re.compile(r"^_schema\.([1-9][0-9]*)\.json$")
_STAGING = "_staging"
_COMMITS = "_commits"
_WRITE_OPTIONS = frozenset({"path", "schema", "rows_per_file"})
_READ_OPTIONS = frozenset({"path", "table"})
# Spark hands these to every streaming sink; they are not ours to judge.
_SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})
_TABLE_DIR = re.compile(r"^table=(.+)$")


# --- options and layout ------------------------------------------------------------------------


def _check_options(options: Mapping[str, str], allowed: frozenset[str], what: str) -> None:
    unknown = sorted(k for k in options if k.lower() not in allowed | _SPARK_OPTIONS)
    if unknown:
        raise PipelineConfigError(
            f"{LAKE_FORMAT} {what}: unknown option(s) {unknown}; allowed: {sorted(allowed)}"
        )
    if not options.get("path"):
        raise PipelineConfigError(f"{LAKE_FORMAT} {what}: option 'path' (the lake root) is missing")


def table_dir(root: str | os.PathLike[str], table: Table | str) -> Path:
    """The directory of one table in the lake at ``root``."""
    name = table if isinstance(table, str) else f"{table.keyspace}.{table.name}"
    return Path(root) / f"table={name}"


def lake_tables(root: str | os.PathLike[str]) -> list[str]:
    """``keyspace.name`` of every table with a schema in the lake at ``root``, sorted."""
    found = []
    base = Path(root)
    if base.is_dir():
        for entry in base.iterdir():
            match = _TABLE_DIR.match(entry.name)
            if match and (entry / _SCHEMA_FILE).is_file():
                found.append(match.group(1))
    return sorted(found)


def lake_table(root: str | os.PathLike[str], name: str | None) -> Table:
    """The stored base table ``name`` (or the only one): the union of its schema versions
    (module docstring); PipelineConfigError otherwise."""
    tables = lake_tables(root)
    if name is None:
        if len(tables) != 1:
            raise PipelineConfigError(
                f"{LAKE_FORMAT} at {root}: option 'table' is needed to choose among {tables}"
            )
        name = tables[0]
    if name not in tables:
        raise PipelineConfigError(f"{LAKE_FORMAT} at {root}: no table {name!r} (has {tables})")
    versions = schema_versions(table_dir(root, name))
    union = versions[min(versions)]
    for number in sorted(versions)[1:]:
        union = union_table(union, versions[number], f"{LAKE_FORMAT} at {root}")
    return union


def schema_versions(directory: Path) -> dict[int, Table]:
    """The schema versions recorded in a table's directory, by number (none: empty)."""
    found: dict[int, Table] = {}
    first = directory / _SCHEMA_FILE
    if first.is_file():
        found[1] = table_from_json(first.read_text("utf-8"))
    if directory.is_dir():
        for entry in directory.iterdir():
            match = _VERSION_FILE.match(entry.name)
            if match and int(match.group(1)) > 1:
                found[int(match.group(1))] = table_from_json(entry.read_text("utf-8"))
    return found


def _write_config(options: Mapping[str, str], schema: StructType | None) -> _LakeConfig:
    _check_options(options, _WRITE_OPTIONS, "writer")
    if not options.get("schema"):
        raise PipelineConfigError(f"{LAKE_FORMAT} writer: option 'schema' (table JSON) is missing")
    table = table_from_json(options["schema"])
    rows_text = options.get("rows_per_file", str(DEFAULT_ROWS_PER_FILE))
    if not rows_text.isdigit() or int(rows_text) <= 0:
        raise PipelineConfigError(f"rows_per_file must be a positive integer, got {rows_text!r}")
    if schema is not None:
        check_change_schema(table, schema)
    root = str(options["path"])
    if (table_dir(root, table) / _SCHEMA_FILE).is_file():  # SchemaConflict if it cannot follow
        union_table(lake_table(root, f"{table.keyspace}.{table.name}"), table, f"the lake {root}")
    return _LakeConfig(root, table_to_json(table), int(rows_text))


@dataclass(frozen=True, slots=True)
class _LakeConfig:
    root: str
    table_json: str
    rows_per_file: int

    @property
    def table(self) -> Table:
        return table_from_json(self.table_json)

    @property
    def directory(self) -> Path:
        return table_dir(self.root, self.table)


# --- executor side: staging -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StagedFile:
    """One Parquet file a task wrote: where it is staged and where the commit puts it."""

    staged: str
    final: str
    rows: int


class LakeCommitMessage(WriterCommitMessage):
    """A task's report to the driver: its stage, namespace and staged files."""

    def __init__(self, stage: str, namespace: str, files: Sequence[StagedFile]) -> None:
        self.stage = stage
        self.namespace = namespace
        self.files = list(files)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _StagingWriter:
    """One task's Parquet files, one open writer per date, bounded in files and rows."""

    def __init__(self, config: _LakeConfig, stage: str, task_tag: str) -> None:
        self.config = config
        self.stage = stage
        self.task_tag = task_tag
        self.schema = change_arrow_schema(config.table)
        self.stage_dir = config.directory / _STAGING / stage
        self.open: dict[str, tuple[Any, StagedFile]] = {}
        self.done: list[StagedFile] = []
        self.counter = 0

    def write(self, batch: Any) -> None:
        table = pa.Table.from_batches([batch]).select(self.schema.names).cast(self.schema)
        days = pc.cast(pc.cast(table[TIME_US_FIELD], pa.timestamp("us")), pa.date32())
        for day in pc.unique(days).to_pylist():
            rows = table.filter(pc.equal(days, pa.scalar(day, pa.date32())))
            self._write_day(day.isoformat(), rows)

    def _write_day(self, day: str, rows: Any) -> None:
        offset = 0
        while offset < rows.num_rows:
            writer, staged = self.open.get(day) or self._new_file(day)
            room = self.config.rows_per_file - staged.rows
            chunk = rows.slice(offset, room)
            writer.write_table(chunk)
            offset += chunk.num_rows
            staged = StagedFile(staged.staged, staged.final, staged.rows + chunk.num_rows)
            self.open[day] = (writer, staged)
            if staged.rows >= self.config.rows_per_file:
                self._close(day)

    def _new_file(self, day: str) -> tuple[Any, StagedFile]:
        if len(self.open) >= _MAX_OPEN_FILES:
            self._close(next(iter(self.open)))
        self.counter += 1
        name = f"{day}-{self.task_tag}-{self.counter}-{uuid.uuid4().hex[:12]}.parquet"
        self.stage_dir.mkdir(parents=True, exist_ok=True)
        staged = self.stage_dir / name
        final = Path(f"date={day}") / f"{self.stage.replace('/', '-')}-{name}"
        writer = pq.ParquetWriter(str(staged), self.schema)
        entry = (writer, StagedFile(str(staged), str(final), 0))
        self.open[day] = entry
        return entry

    def _close(self, day: str) -> None:
        writer, staged = self.open.pop(day)
        writer.close()
        _fsync_file(Path(staged.staged))
        self.done.append(staged)

    def finish(self) -> list[StagedFile]:
        for day in list(self.open):
            self._close(day)
        return self.done

    def discard(self) -> None:
        for writer, staged in self.open.values():
            writer.close()
            self.done.append(staged)
        self.open.clear()
        for staged in self.done:
            Path(staged.staged).unlink(missing_ok=True)


def task_context() -> tuple[str, str, str | None, str | None]:
    """(partition id, attempt tag, streaming query id, batch id) of the running Spark task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return "0", "p0-a0", None, None
    tag = f"p{context.partitionId()}-a{context.attemptNumber()}-t{context.taskAttemptId()}"
    query = context.getLocalProperty("sql.streaming.queryId")
    batch = context.getLocalProperty("streaming.sql.batchId")
    return str(context.partitionId()), tag, query, batch


def _stage_batches(
    config: _LakeConfig, stage: str, namespace: str, batches: Iterator[Any]
) -> LakeCommitMessage:
    _, tag, _, _ = task_context()
    staging = _StagingWriter(config, stage, tag)
    try:
        for batch in batches:
            staging.write(batch)
        files = staging.finish()
    except BaseException:
        staging.discard()
        raise
    return LakeCommitMessage(stage, namespace, files)


# --- driver side: commit ----------------------------------------------------------------------


def _marker_path(directory: Path, namespace: str, name: str) -> Path:
    return directory / _COMMITS / namespace / f"{name}.json"


def _write_marker(path: Path, content: Mapping[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(content, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_dir(path.parent)


def commit_staged(
    config: _LakeConfig,
    messages: Sequence[WriterCommitMessage | None],
    namespace: str,
    marker_name: str,
) -> bool:
    """Make the staged files of ``messages`` visible under one marker; False (and the staged
    files deleted) if that marker exists already, i.e. the batch was committed before."""
    directory = config.directory
    files = [f for m in messages if isinstance(m, LakeCommitMessage) for f in m.files]
    marker = _marker_path(directory, namespace, marker_name)
    if marker.exists():
        _discard(files)
        _clear_stages(directory, messages)
        return False
    directory.mkdir(parents=True, exist_ok=True)
    version = _ensure_schema(directory, config.table)
    touched: set[Path] = set()
    for staged in files:
        final = directory / staged.final
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged.staged, final)
        touched.add(final.parent)
    for parent in touched:
        _fsync_dir(parent)
    committed = {
        "namespace": namespace,
        "batch": marker_name,
        "committed_at": datetime.datetime.now(datetime.UTC).isoformat(),
        "files": [{"path": f.final, "rows": f.rows, "schema": version} for f in files],
    }
    _write_marker(marker, committed)
    _clear_stages(directory, messages)
    return True


def _ensure_schema(directory: Path, table: Table) -> int:
    """The number of the schema version with ``table``'s columns, recorded first if there is
    none (a new file; a version another writer records at the same time takes the next)."""
    while True:
        versions = schema_versions(directory)
        for number, stored in sorted(versions.items()):
            if same_columns(stored, table):
                return number
        number = max(versions, default=0) + 1
        name = _SCHEMA_FILE if number == 1 else f"_schema.{number}.json"
        if _write_new(directory / name, json.loads(table_to_json(table))):
            return number


def _write_new(path: Path, content: Mapping[str, object]) -> bool:
    """Write ``path`` durably unless it exists (False then): temp file, fsync, hard link."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(content, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    finally:
        temporary.unlink()
    _fsync_dir(path.parent)
    return True


def _discard(files: Sequence[StagedFile]) -> None:
    for staged in files:
        Path(staged.staged).unlink(missing_ok=True)


def _clear_stages(directory: Path, messages: Sequence[WriterCommitMessage | None]) -> None:
    """Delete the stage directories of a committed (or skipped, or aborted) batch: whatever
    is left there belongs to task attempts that failed or were killed."""
    stages = {m.stage for m in messages if isinstance(m, LakeCommitMessage)}
    staging = directory / _STAGING
    for stage in stages:
        path = staging / stage
        shutil.rmtree(path, ignore_errors=True)
        parent = path.parent
        while parent != staging and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent


def abort_staged(config: _LakeConfig, messages: Sequence[WriterCommitMessage | None]) -> None:
    """Delete the staged files of the batch (failed tasks deleted their own already)."""
    _discard([f for m in messages if isinstance(m, LakeCommitMessage) for f in m.files])
    _clear_stages(config.directory, messages)


class _LakeBatchWriter(DataSourceArrowWriter):
    def __init__(self, config: _LakeConfig) -> None:
        self.config = config
        self.write_id = f"write-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _stage_batches(self.config, self.write_id, "write", iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_staged(self.config, messages, "write", self.write_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_staged(self.config, messages)


class _LakeStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, config: _LakeConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        _, _, query, batch = task_context()
        if query is None or batch is None:
            raise PipelineConfigError("ringflow-lake stream writer ran outside a streaming query")
        return _stage_batches(self.config, f"{query}/{batch}", f"stream-{query}", iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        namespaces = {m.namespace for m in messages if isinstance(m, LakeCommitMessage)}
        for namespace in namespaces:  # one in practice: every task of a batch has the same query
            commit_staged(self.config, messages, namespace, f"{batchId:020d}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abort_staged(self.config, messages)


# --- reading ------------------------------------------------------------------------------------


def committed_files(root: str | os.PathLike[str], table: Table | str) -> list[Path]:
    """Every Parquet file listed by a commit marker of ``table``, in marker order."""
    directory = table_dir(root, table)
    files: list[Path] = []
    seen: set[str] = set()
    for marker in sorted((directory / _COMMITS).glob("*/*.json")):
        for entry in json.loads(marker.read_text("utf-8"))["files"]:
            if entry["path"] not in seen:
                seen.add(entry["path"])
                files.append(directory / entry["path"])
    return files


def _read_file(path: Path, schema: Any) -> Any:
    """A committed file (written with the change schema of its version) as ``schema``, the
    union's: each field taken from the file (cast if its type differs), or null when the
    file's version has no such column."""
    data = pq.read_table(str(path))
    columns = []
    for field in schema:
        index = data.schema.get_field_index(field.name)
        if index < 0:
            columns.append(pa.nulls(data.num_rows, field.type))
            continue
        column = data.column(index)
        columns.append(column if column.type == field.type else column.cast(field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def read_lake_changes(root: str | os.PathLike[str], table: str | None = None) -> list[Change]:
    """The committed changes of one table of the lake, without Spark (for checks and tests)."""
    base = lake_table(root, table)
    schema = change_arrow_schema(base)
    changes: list[Change] = []
    for path in committed_files(root, base):
        for row in _read_file(path, schema).to_pylist():
            changes.append(change_from_row(base, row))
    return changes


class _FilesPartition(InputPartition):
    def __init__(self, files: list[str]) -> None:
        super().__init__(files)
        self.files = files


class _LakeReader(DataSourceReader):
    def __init__(self, root: str, table_json: str, files_per_partition: int = 8) -> None:
        self.root = root
        self.table_json = table_json
        self.files_per_partition = files_per_partition

    def partitions(self) -> Sequence[InputPartition]:
        files = [str(p) for p in committed_files(self.root, table_from_json(self.table_json))]
        size = self.files_per_partition
        return [_FilesPartition(files[i : i + size]) for i in range(0, len(files), size)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        schema = change_arrow_schema(table_from_json(self.table_json))
        files: list[str] = partition.value if isinstance(partition, _FilesPartition) else []
        for path in files:
            yield from _read_file(Path(path), schema).to_batches()


class LakeDataSource(DataSource):
    """``ringflow-lake``: the Parquet change lake (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return LAKE_FORMAT

    def _read_table(self) -> Table:
        _check_options(self.options, _READ_OPTIONS, "reader")
        return lake_table(self.options["path"], self.options.get("table"))

    def schema(self) -> StructType:
        return change_schema(self._read_table())

    def reader(self, schema: StructType) -> DataSourceReader:
        table = self._read_table()
        return _LakeReader(str(self.options["path"]), table_to_json(table))

    def writer(self, schema: StructType, overwrite: bool) -> _LakeBatchWriter:
        if overwrite:
            raise PipelineConfigError(f"{LAKE_FORMAT} is append-only: use mode('append')")
        return _LakeBatchWriter(_write_config(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> _LakeStreamWriter:
        if overwrite:
            raise PipelineConfigError(f"{LAKE_FORMAT} is append-only: use outputMode('append')")
        return _LakeStreamWriter(_write_config(self.options, schema))


def lake_options(
    root: str | os.PathLike[str], table: Table, rows_per_file: int | None = None
) -> dict[str, str]:
    """Validated writer options for ``table`` (raises PipelineConfigError before any job)."""
    options = {"path": str(root), "schema": table_to_json(table)}
    if rows_per_file is not None:
        options["rows_per_file"] = str(rows_per_file)
    _write_config(options, None)
    return options


def read_lake(
    spark: SparkSession, root: str | os.PathLike[str], table: str | None = None
) -> DataFrame:
    """The committed changes of one table of the lake as a DataFrame of its change schema."""
    options = {"path": str(root)}
    if table is not None:
        options["table"] = table
    lake_table(root, table)  # fail here, on the driver, with a clear error
    return spark.read.format(LAKE_FORMAT).options(**options).load()
