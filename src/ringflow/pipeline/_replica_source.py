"""``ringflow-replica``: one channel's sealed slices, read node-locally, as a streaming source.

REPLICATION.md decision 6; issue 14 §3. The rows are exactly the change rows ``ringflow-cdc``
gives for the same log rows (:func:`ringflow.pipeline.change_schema` of the base table, built by
the same ``log_row_converter``), so the hub, lake and PostgreSQL sinks take them unchanged.

- **Offsets** (:mod:`._replica_offsets`) list exactly the copies a batch covers: node, slice
  key, digest, row count. ``latestOffset(start)`` asks the job's coordinator
  (:mod:`._replica_coordinator`, options ``coordinator_address`` and ``coordinator_token``) for
  the channel's granted copies; an unchanged offset means nothing new.
- **Partitions**: one per node with its copies of the batch, read from that node alone through
  ``system_replication.captured_rows`` (:mod:`._replica_reads`). The coordinator says where
  each copy is read: its node, or when that node is down another live node that published the
  same digest for the key (the same rows); a copy nobody live holds fails the batch. The node's
  address is the partition's ``preferred_location``; PySpark 4.3's Python data source API has
  no way to hand it to Spark's scheduler (``PythonStreamingInputPartition.preferredLocations``
  is empty), so today it documents where the read goes.
- **Reads** page by arrival sequence and check every row and the whole copy against the
  published digest and count: a node that is gone or lost rows fails the batch
  (:class:`ReplicaReadError`), and the query restarts and replays the same offset.
- **Commits**: the coordinator writes the ``sent`` rows of a batch once Spark asks for the next
  one (the sink has committed it by then) or the source's ``commit(end)`` says so.

Options: ``contact_points`` and ``port`` of the edge (``port`` is every node's CQL port),
``channel``, ``coordinator_address``, ``coordinator_token``, ``schema`` (the base table as JSON,
``table_to_json``), ``ignored_columns`` (comma list: log columns dropped from the table that
captured rows still hold, :func:`replica_row_converter`), ``page_rows`` (default 1000),
``batch_rows`` (rows per Arrow batch, 4096), ``connect_timeout_s``, ``request_timeout_s``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, Final

from pyspark.sql import types as st
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from ringflow.cdc import cdc_log_table
from ringflow.pipeline._cdc_source import arrow_batch
from ringflow.pipeline._changes import (
    change_arrow_schema,
    change_schema,
    log_row_converter,
    table_from_json,
)
from ringflow.pipeline._cluster_client import (
    credentials,
    driver_tls,
    option_float,
    option_int,
)
from ringflow.pipeline._errors import PipelineConfigError, SourceSchemaChanged
from ringflow.pipeline._replica_offsets import (
    ReplicaOffset,
    copies_by_node,
    copy_from_list,
    copy_to_list,
)
from ringflow.pipeline._replica_reads import DEFAULT_PAGE_ROWS, NodeAddress, copy_rows
from ringflow.pipeline._replica_rpc import RpcClient
from ringflow.replication import decode_canonical_row
from ringflow.schema import Table, codec_for

REPLICA_FORMAT: Final = "ringflow-replica"
DEFAULT_BATCH_ROWS: Final = 4096
UNKNOWN_COLUMNS: Final = "log columns"


class ReplicaSettings:
    """The options of ``ringflow-replica``, validated (picklable; no secret in its repr)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        for name in ("channel", "coordinator_address", "coordinator_token", "schema"):
            if not options.get(name):
                raise PipelineConfigError(f"option {name!r} is required by {REPLICA_FORMAT}")
        self.channel = str(options["channel"])
        self.coordinator_address = str(options["coordinator_address"])
        self.coordinator_token = str(options["coordinator_token"])
        self.table_json = str(options["schema"])
        ignored = str(options.get("ignored_columns") or "")
        self.ignored_columns = tuple(name for name in ignored.split(",") if name)
        self.port = option_int(options, "port", 9042)
        self.page_rows = option_int(options, "page_rows", DEFAULT_PAGE_ROWS)
        self.batch_rows = option_int(options, "batch_rows", DEFAULT_BATCH_ROWS)
        self.connect_timeout_s = option_float(options, "connect_timeout_s", 10.0)
        self.request_timeout_s = option_float(options, "request_timeout_s", 30.0)
        self.username, self.password = credentials(options, REPLICA_FORMAT + ": option")
        self.tls = driver_tls(options)

    def __repr__(self) -> str:
        return f"ReplicaSettings(channel={self.channel!r}, coordinator={self.coordinator_address})"

    def node(self, address: str) -> NodeAddress:
        return NodeAddress(
            address,
            self.port,
            self.connect_timeout_s,
            self.request_timeout_s,
            self.username,
            self.password,
            self.tls,
        )


def replica_row_converter(
    table: Table, ignored: Collection[str] = ()
) -> Callable[[bytes], tuple[object, ...]]:
    """A captured row (canonical bytes of a log row) as the change row ``ringflow-cdc`` makes
    of the same log row: each column deserialized with its log column's codec (the codec's
    Python values are what the Spark mapping reads), then ``log_row_converter``.

    A captured row is kept as the log row was when it was written, so it may hold a log column
    ``table`` lacks: one added since the query started (its values must reach the destination)
    or one dropped since it was captured (the job has seen that the table lacks it and names it
    in ``ignored``: left out, as ``SELECT *`` of the log would). A value in any other column
    the table lacks raises :class:`SourceSchemaChanged` naming the columns (issue 15: never
    converted without them); null values carry nothing and are left out."""
    log = cdc_log_table(table)
    codecs = {column.name: codec_for(column.type) for column in log.columns}
    convert = log_row_converter(table)
    skipped = frozenset(ignored)

    def row_of(data: bytes) -> tuple[object, ...]:
        values: dict[str, object] = {}
        unknown: list[str] = []
        for name, value in decode_canonical_row(data).items():
            if value is None:
                continue
            codec = codecs.get(name)
            if codec is not None:
                values[name] = codec.deserialize(value, name)
            elif name not in skipped:
                unknown.append(name)
        if unknown:
            raise SourceSchemaChanged(
                f"captured rows of {table.keyspace}.{table.name} hold {UNKNOWN_COLUMNS} "
                f"{sorted(unknown)!r}, which the table the query reads with lacks (an ALTER "
                "TABLE since it started): it stops to restart with the table as it is now"
            )
        return convert(values)

    return row_of


def unknown_columns(error: str) -> frozenset[str] | None:
    """The log columns a :class:`SourceSchemaChanged` of :func:`replica_row_converter` names
    (None when ``error`` names none)."""
    found = re.search(re.escape(UNKNOWN_COLUMNS) + r" (\[[^\]]*\])", error)
    if found is None:
        return None
    try:
        names = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError):
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return frozenset(names)


class ReplicaPartition(InputPartition):
    """The copies of one batch read from one node (compact copy lists, picklable)."""

    def __init__(self, address: str, copies: list[list[object]]) -> None:
        super().__init__((address, copies))
        self.address = address
        self.preferred_location = address
        self.copies = copies


class RingflowReplicaDataSource(DataSource):
    """``ringflow-replica`` (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return REPLICA_FORMAT

    def schema(self) -> st.StructType:
        return change_schema(table_from_json(ReplicaSettings(self.options).table_json))

    def streamReader(self, schema: st.StructType) -> RingflowReplicaStreamReader:
        return RingflowReplicaStreamReader(ReplicaSettings(self.options))


class RingflowReplicaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of granted copies (module docstring). Implementing
    ``SupportsTriggerAvailableNow`` keeps Spark from fixing an ``availableNow`` run's end at
    its first offset: the run goes on while the coordinator grants copies of the run's slices."""

    def __init__(self, settings: ReplicaSettings) -> None:
        self.settings = settings
        self._client: RpcClient | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None  # a connection stays in its process
        return state

    def _call(self, method: str, **params: Any) -> Any:
        if self._client is None:
            settings = self.settings
            self._client = RpcClient(settings.coordinator_address, settings.coordinator_token)
        return self._client.call(method, channel=self.settings.channel, **params)

    def prepareForTriggerAvailableNow(self) -> None:
        """The coordinator bounds a ``once`` run itself (slices due by the job's start)."""

    def initialOffset(self) -> dict[str, Any]:
        self._call("hello")
        return ReplicaOffset.initial(self.settings.channel).to_dict()

    def latestOffset(self, start: dict[str, Any], limit: Any = None) -> dict[str, Any]:
        ReplicaOffset.from_dict(start, self.settings.channel)  # a foreign checkpoint fails here
        result: dict[str, Any] = self._call("latest", offset=start)
        return result

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        offset = ReplicaOffset.from_dict(end, self.settings.channel)
        if not offset.copies or end == start:
            return []
        addresses = self._call("resolve", offset=end)
        groups = copies_by_node(offset.copies, addresses)
        return [
            ReplicaPartition(address, [copy_to_list(send) for send in sends])
            for address, sends in groups.items()
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if type(partition) is InputPartition:  # none planned: Spark reads InputPartition(None)
            return
        assert isinstance(partition, ReplicaPartition)
        settings = self.settings
        table = table_from_json(settings.table_json)
        schema = change_arrow_schema(table)
        convert = replica_row_converter(table, settings.ignored_columns)
        node = settings.node(partition.address)
        copies = [copy_from_list(settings.channel, item) for item in partition.copies]
        batch: list[tuple[object, ...]] = []
        for data in copy_rows(node, copies, settings.page_rows):
            batch.append(convert(data))
            if len(batch) >= settings.batch_rows:
                yield arrow_batch(batch, schema)
                batch = []
        if batch:
            yield arrow_batch(batch, schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark's commit lags a batch; the coordinator commits idempotently."""
        self._call("commit", offset=end)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
